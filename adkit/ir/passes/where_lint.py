"""NaN through where: find (`lint_where`) and fix (`safe_where`) the masked branches
whose gradient is NaN.

`where(x > 0, sqrt(x), 0)` is 0 at x = 0, yet its gradient there is NaN in PyTorch, JAX
and HIPS autograd alike: the backward of `where` gives the masked lanes of the sqrt
branch a zero cotangent, and sqrt's backward multiplies it by 1 / (2 sqrt(0)) = inf,
so 0 * inf = NaN. On the graph it can be seen coming: a `where` branch that computes an
op whose derivative is infinite or undefined somewhere (its class declares where:
`singular`, or `singular_at(params)`, by argument position: the domain, a value outside
it, and whether a positive argument is safe) is flagged, unless the op's argument is
already guarded by a `where` (the "double where"), is provably positive where that
suffices (exp(x), x * x + 1...), or depends on no input (no gradient flows).

`safe_where` applies the double-where rewrite the JAX FAQ recommends: the flagged op's
argument `a` becomes `where(cond, a, safe)` (the other way round in the false branch),
so masked lanes compute the op at a harmless point. Lanes the `where` selects see the
same values: the forward result is bit-identical. Path nodes other values also read are
cloned, so nothing outside the branch changes.

Owns: `Diagnostic`, `lint_where`, `safe_where`. Does not: know ops by name (the op
classes declare their singular domains).
"""
import dataclasses

import networkx as nx
import numpy as np

from ...ops.comparison import Where
from .cleanup import copy_op, dce

BRANCHES = {1: "x", 2: "y"}  # where(condition, x, y): x is taken where condition holds


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """A `where` branch computing an op whose derivative is infinite or undefined at
    lanes the `where` masks: gradients there are 0 * inf = NaN."""
    where: int  # the where node
    branch: str  # "x" (taken where the condition holds) or "y"
    op: int  # the op node in that branch
    op_name: str
    argument: int  # the op's argument position whose domain matters
    domain: str  # where the op's derivative is singular
    where_source: str
    op_source: str

    def __str__(self):
        masked = "is False" if self.branch == "x" else "holds"
        return (f"where at {self.where_source}: its {self.branch} branch computes "
                f"{self.op_name} at {self.op_source}, whose derivative is infinite or "
                f"undefined for {self.domain}; at lanes where the condition {masked} "
                f"that branch gets a zero gradient and 0 * inf = NaN. Guard the argument "
                f"with a second where (ak.ir.passes.safe_where does it).")


def singular_arguments(op, params):
    """{argument position: (domain, safe value, proof)} of an op class (see the module
    docstring); {} for ops without singular derivatives."""
    rule = getattr(op, "singular_at", None)
    return rule(params) if rule is not None else dict(getattr(op, "singular", {}))


def lint_where(graph):
    """The Diagnostics of `graph` (an ak.trace graph), in topological order."""
    found = []
    live = _depends_on_inputs(graph)
    for w in graph.op_nodes:
        if graph.nx.nodes[w]["op"] is not Where:
            continue
        for pos, u, out in graph.args_of(w):
            if pos in BRANCHES:
                found += _branch_diagnostics(graph, w, pos, (u, out), live)
    return found


def _branch_diagnostics(graph, w, pos, key, live):
    found = []
    for s in _cone(graph, key[0]):
        data = graph.nx.nodes[s]
        for arg, (domain, _, proof) in singular_arguments(data["op"], data["params"]).items():
            a = _arg(graph, s, arg)
            if a is None or a[0] not in live or _guarded(graph, a, proof, w, pos) or \
                    (proof == "positive" and _sign(graph, a) == "positive"):
                continue
            found.append(Diagnostic(
                w, BRANCHES[pos], s, getattr(data["op"], "public_name", data["op"].__name__),
                arg, domain, graph.nx.nodes[w].get("source") or "?",
                data.get("source") or "?"))
    return found


def _cone(graph, node):
    """The op nodes whose values flow into `node` (itself included), in topological
    order: everything computed for that branch."""
    nodes = (nx.ancestors(graph.nx, node) | {node})
    return [n for n in graph.topo_order() if n in nodes and graph.nx.nodes[n]["kind"] == "op"]


def _arg(graph, n, pos):
    """(producer, out) of node n's tensor argument at `pos`, or None (a number)."""
    return next(((u, out) for p, u, out in graph.args_of(n) if p == pos), None)


def _depends_on_inputs(graph):
    """The nodes whose values depend on a float input (the ones gradients reach)."""
    floats = [n for n in graph.inputs if np.dtype(graph.nx.nodes[n]["dtype"].np).kind == "f"]
    live = set(floats)
    for n in floats:
        live |= nx.descendants(graph.nx, n)
    return live


def _guarded(graph, key, proof, w, pos):
    """Whether value `key` is guarded for the `pos` branch of where node `w`: made by a
    where on the same condition that puts a number (positive when `proof` asks for
    it) in the lanes `w` masks (the double where: where(c, x, 1.0)), perhaps through
    other such guards (a value inside two wheres carries a guard for each)."""
    masked = "y" if pos == 1 else "x"  # the guard's branch for the lanes w masks
    for _ in range(32):
        data = graph.nx.nodes[key[0]]
        if data["kind"] != "op" or data["op"] is not Where:
            return False
        numbers = {k: v for k, v in data["params"].items() if k in ("x", "y")}
        if len(numbers) != 1:
            return False
        value = numbers.get(masked)
        if isinstance(value, (int, float)) and (proof != "positive" or value > 0) and \
                _same_value(graph, _arg(graph, key[0], 0), _arg(graph, w, 0)):
            return True
        key = next((u, out) for p, u, out in graph.args_of(key[0]) if p != 0)  # through
    return False


def _same_value(graph, a, b, depth=0):
    """Whether (node, out) values a and b are the same node, or the same op on the same
    arguments (x > 0 written twice)."""
    if a == b:
        return True
    if a is None or b is None or a[1] != b[1] or depth > 10:
        return False
    da, db = graph.nx.nodes[a[0]], graph.nx.nodes[b[0]]
    if da["kind"] != "op" or db["kind"] != "op" or da["op"] is not db["op"] or \
            da["params"] != db["params"]:
        return False
    args_a, args_b = graph.args_of(a[0]), graph.args_of(b[0])
    return len(args_a) == len(args_b) and all(
        pa == pb and _same_value(graph, (ua, oa), (ub, ob), depth + 1)
        for (pa, ua, oa), (pb, ub, ob) in zip(args_a, args_b))


def _sign(graph, key, depth=0):
    """"positive" or "nonnegative" when value `key` provably is (a small set of
    rules: exp, sigmoid, softplus, cosh, squares, abs, sums and products of such, and
    positive constants), else None."""
    if depth > 20:
        return None
    data = graph.nx.nodes[key[0]]
    if data["kind"] == "const":
        value = np.asarray(data["value"])
        return "positive" if (value > 0).all() else "nonnegative" if (value >= 0).all() \
            else None
    if data["kind"] != "op":
        return None
    name = getattr(data["op"], "public_name", None)
    if name in ("exp", "sigmoid", "softplus", "cosh"):
        return "positive"
    if name in ("abs", "relu", "sqrt"):
        return "nonnegative"
    args = graph.args_of(key[0])
    signs = [_sign(graph, (u, out), depth + 1) for _, u, out in args]
    numbers = [v for k, v in data["params"].items() if isinstance(v, (int, float))
               and not isinstance(v, bool) and k in ("x", "y", "other", "alpha")]
    return _combine_signs(name, args, signs, numbers, data["params"])


def _combine_signs(name, args, signs, numbers, params):
    def rank(sign):
        return {"positive": 2, "nonnegative": 1}.get(sign, 0)
    ranks = [rank(s) for s in signs] + [2 if v > 0 else 1 if v == 0 else -1 for v in numbers]
    if name == "mul":
        if len(args) == 2 and args[0][1:] == args[1][1:]:  # x * x
            return "nonnegative"
        return {2: "positive", 1: "nonnegative"}.get(min(ranks, default=0)) \
            if min(ranks, default=0) > 0 else None
    if name == "add":
        if min(ranks, default=0) <= 0:
            return None
        return "positive" if max(ranks) == 2 else "nonnegative"
    if name == "pow":
        y = params.get("y")
        if isinstance(y, int) and y % 2 == 0:
            return "positive" if ranks and ranks[0] == 2 else "nonnegative"
    return None


def safe_where(graph):
    """A new graph where every flagged branch computes its op at a safe point in the
    lanes its where masks (see the module docstring); the input is unchanged. Forward
    values are bit-identical. Raises ValueError for a branch it cannot guard (a
    condition broader than the guarded argument: no lane-by-lane guard exists)."""
    g = dce(graph)
    for _ in range(4 * len(g.op_nodes) + 4):  # each rewrite guards one op's argument
        diagnostics = lint_where(g)
        if not diagnostics:
            return g
        _guard(g, diagnostics[0])
        g = dce(g)  # the unguarded path, when nothing else reads it
    raise AssertionError("safe_where: the rewrites did not converge")


def _guard(g, d):
    """Rewrite one flagged op: its argument guarded, the path from it to the where
    cloned where other values read it."""
    pos = {v: k for k, v in BRANCHES.items()}[d.branch]
    branch = _arg(g, d.where, pos)
    condition = _arg(g, d.where, 0)
    argument = _arg(g, d.op, d.argument)
    spec = g.specs_of(argument[0])[argument[1]]
    cond_shape = g.specs_of(condition[0])[condition[1]].shape
    if np.broadcast_shapes(tuple(cond_shape), tuple(spec.shape)) != tuple(spec.shape):
        raise ValueError(f"safe_where: the condition of the where at {d.where_source} "
                         f"(shape {tuple(cond_shape)}) is broader than {d.op_name}'s "
                         f"argument (shape {tuple(spec.shape)}) at {d.op_source}: no "
                         f"lane-by-lane guard exists; guard it by hand")
    safe = singular_arguments(g.nx.nodes[d.op]["op"], g.nx.nodes[d.op]["params"])[
        d.argument][1]
    args, params = ({0: condition, 1: argument}, {"y": safe}) if d.branch == "x" else \
        ({0: condition, 2: argument}, {"x": safe})
    guard = g.add_op(Where, args, params, specs=(spec,),
                     source=g.nx.nodes[d.op].get("source"))
    path = [n for n in _cone(g, branch[0]) if n == d.op or nx.has_path(g.nx, d.op, n)]
    clones = {}
    for n in path:
        data = g.nx.nodes[n]
        new_args = {p: ((guard, 0) if n == d.op and p == d.argument else
                        (clones[u], out) if u in clones else (u, out))
                    for p, u, out in g.args_of(n)}
        clones[n] = copy_op(g, data, new_args, aliases=None)
    edge = [(k, data) for _, v, k, data in g.nx.out_edges(branch[0], keys=True, data=True)
            if v == d.where and data["pos"] == pos][0]
    g.nx.remove_edge(branch[0], d.where, key=edge[0])
    g.nx.add_edge(clones[branch[0]], d.where, key=edge[0], **edge[1])
