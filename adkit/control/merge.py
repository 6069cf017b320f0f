"""One forward loop where a gradient's graph has two: the primal scan and the scan that
also stacks residuals for the reverse pass (value_and_grad, or a loss used beside its
gradient).

Owns: `merge_residual_scans(graph)` (a pass: a new graph; the input is unchanged). A
Scan node whose plan P has a residual twin (P's cache holds the (forward, backward)
pair that scan_vjp derived) is dropped when a node of the twin's forward plan reads the
same arguments: the twin's leading outputs are P's (carries, then ys), so P's readers
read them instead. Does not: compare bodies (the twin is known by identity), so it must
run before passes that rebuild plans (any pass that recurses into bodies).
"""
from ..ir.passes.cleanup import redirect
from .scan import Scan


def merge_residual_scans(graph):
    g = graph.copy()
    scans = [n for n, op in g.nx.nodes(data="op") if op is Scan]
    forwards = {(id(g.nx.nodes[n]["params"]["plan"]), tuple(g.args_of(n))): n for n in scans}
    for n in scans:
        plan = g.nx.nodes[n]["params"]["plan"]
        twin = plan.cache.get("residual vjp")
        if twin is None or plan.history:
            continue
        other = forwards.get((id(twin[0]), tuple(g.args_of(n))))
        if other is None:
            continue
        for i in range(plan.n_carry + plan.n_ys):
            redirect(g, (n, i), (other, i))
        g.nx.remove_node(n)
    return g
