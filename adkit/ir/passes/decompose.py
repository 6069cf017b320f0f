"""decompose: replace an op node by the primitive ops that compute it, so that fusion
can put those primitives into kernels with their neighbours.

Owns: `decompose` and `DECOMPOSITIONS` ({op class: its `decomposition` rule}, derived
from the op classes: einsum without repeated labels, logsumexp, softmax, log_softmax,
var, std, norm with p = 1, 2; each rule lives on its op's class). Each decomposition is
traced on the node's argument specs and inlined in its place; one that raises `Skip`
(ops' NoDecomposition: it does not apply to these arguments) leaves the node as it is.
Also owns `inline_calls`: a node whose op calls a sub-graph (its class says
`inlines_call`: a jitted function called under a transform, whose params hold the
traced graph as `plan.graph`) is replaced by that graph's nodes, so the whole program
is optimized and fused as one. Does not: fuse (fuse.py) or clean up what is left (dce).

    before:  b = logsumexp[dim=1] a
    after:   m = amax[dim=1 keepdim=True] a;  c = maximum[y=-1.8e308] m;  ...
             b = add (log (sum[dim=1 keepdim=True] (exp (sub a m')))) m'
"""
import numpy as np

from ... import ops
from ...ops._helpers import NoDecomposition
from .. import rules
from ..trace import trace
from .cleanup import copy_op, has_in_place_ops, keep_annotations, redirect
from .editing import edits

Skip = NoDecomposition  # what a decomposition raises when it does not apply

# {op class: a function of adkit ops computing its forward}: every op with a rule
DECOMPOSITIONS = ops.with_rule("decomposition")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@edits
def decompose(g, table=DECOMPOSITIONS):
    """A new graph where every node whose op is in `table` (and whose tensors are all
    float32/float64) is replaced by its decomposition. A graph with in-place ops is
    left as it is (new nodes run in a new place in the order)."""
    if has_in_place_ops(g):
        return g
    for n in g.op_nodes:  # (the nodes before any is replaced)
        data = g.nx.nodes[n]
        fn = table.get(data["op"])
        if fn is None:
            continue
        args = g.args_of(n)
        specs = [g.specs_of(u)[out] for _, u, out in args] + list(data["specs"])
        if any(s.dtype.np not in _FLOATS for s in specs):
            continue
        positions = [pos for pos, _, _ in args]

        def call(*tensors, op=data["op"], params=data["params"]):
            return fn(*rules.join_args(op, dict(zip(positions, tensors)), params))
        try:
            # traced on specs: example arrays of GMM's sizes cost milliseconds of zeros
            sub = trace(call, *[g.specs_of(u)[out] for _, u, out in args])
        except Skip:
            continue
        _inline(g, n, sub, [(u, out) for _, u, out in args])
    return g


@edits
def inline_calls(g):
    """A new graph where every call node (its op's `inlines_call`) is the sub-graph it
    calls; calls inside the inlined graphs were inlined first (passes.inline_calls
    recurses into bodies, innermost first)."""
    for n in g.op_nodes:  # (the nodes before any is inlined)
        data = g.nx.nodes[n]
        # a graph with in-place ops keeps its own order: it runs as the call
        if getattr(data["op"], "inlines_call", False) and \
                not has_in_place_ops(data["params"]["plan"].graph):
            _inline(g, n, data["params"]["plan"].graph,
                    [(u, out) for _, u, out in g.args_of(n)], own_sources=True)
    return g


def _inline(g, n, sub, arg_values, own_sources=False):
    """Put `sub`'s nodes into g in place of node n (sub's inputs are n's arguments).
    They are attributed to n's source line, or (own_sources: a called function's
    lines, which the user wrote) to their own."""
    mapping = {}
    for m in sub.topo_order():
        data = sub.nx.nodes[m]
        if data["kind"] == "input":
            mapping[m] = arg_values[data["index"]]
        elif data["kind"] == "const":
            mapping[m] = (g.add_const(data["value"]), 0)
        elif data["kind"] == "op":
            args = {pos: _mapped(mapping, u, out) for pos, u, out in sub.args_of(m)}
            node = copy_op(g, data, args, source=(own_sources and data.get("source")) or
                           g.nx.nodes[n].get("source"))
            keep_annotations(g, node, g.nx.nodes[n])  # what the call node had
            mapping[m] = (node, None)
    for o in sub.outputs:
        (_, u, out), = sub.args_of(o)
        redirect(g, (n, sub.nx.nodes[o]["index"]), _mapped(mapping, u, out))
    g.nx.remove_node(n)


def _mapped(mapping, u, out):
    node, fixed = mapping[u]
    return (node, out) if fixed is None else (node, fixed)


__all__ = ["decompose", "DECOMPOSITIONS"]
