"""Algebraic simplification: a table of small named rewrite rules applied to a fixpoint.

Owns: `simplify`, the rules (x*1, x+0, x-0, x/1, -(-x), double transpose, permute of a
permute, reshape of a reshape, expand of an expand, reshape/expand/to that change
nothing, a sum of slice scatters into one Assemble) and `RULES`, the default table. Does not: remove what a rewrite leaves unused
(that is `dce`), fold constants or merge duplicates (cleanup.py).
Invariant: a rewrite happens only when the result has exactly the node's specs (shape
and dtype), re-derived through the op's shape rule for edited nodes; `x * 1.0` with x
int64 (float32 in PyTorch) or `x + zeros` of a bigger shape (it broadcasts) stay.
"""
from collections import namedtuple

import numpy as np

from ...ops.assemble import Assemble, disjoint
from ...ops.binary import Add, Div, Mul, Sub
from ...ops.indexing import IndexScatter
from ...ops.shape import Expand, Permute, Reshape, Transpose
from ...ops.conversion import ToDtype
from ...ops.unary import Neg
from .. import rules as shape_rules
from .cleanup import has_in_place_ops, keep_annotations, redirect
from .editing import edits

Replace = namedtuple("Replace", "value")
Replace.__doc__ = "A rule's result: the node's output 0 is the existing `value` = (node, out)."
Edit = namedtuple("Edit", "args params")
Edit.__doc__ = ("A rule's result: the node keeps its id and op, with the arguments at the "
                "positions in `args` ({pos: (node, out)}) and the params in `params` "
                "replaced.")


# ------------------------------------------------------------------ reading nodes
def _arg(graph, n, pos):
    """(producer, out) of n's argument at `pos`, or None if it is a param there."""
    # (on networkx's dict of n's producers: rules ask ~5 times per node per sweep, and
    # args_of sorts them all each time)
    for u, edges in graph.nx._pred[n].items():
        for d in edges.values():
            if d["pos"] == pos:
                return (u, d["out"])
    return None


def _inner(graph, n, op):
    """The producer of n's argument 0 when it is an op node of class `op` with one output."""
    arg = _arg(graph, n, 0)
    if arg is None:
        return None
    data = graph.nx.nodes[arg[0]]
    return arg[0] if data["kind"] == "op" and data["op"] is op else None


def _is_unit(graph, arg, param, unit):
    """Whether an operand is the number `unit`: a Python/numpy number param, or a const
    node full of it (the spec check of `simplify` rejects one that broadcasts)."""
    if arg is not None:
        data = graph.nx.nodes[arg[0]]
        return data["kind"] == "const" and bool(np.all(np.asarray(data["value"]) == unit))
    return isinstance(param, (bool, int, float, np.bool_, np.number)) and param == unit


def _wrap(dim, ndim):
    return dim % ndim if ndim else 0


# ------------------------------------------------------------------ the rules
def _drop_unit(graph, n, unit, keep_positions):
    """Replace a binary op by its operand at one of `keep_positions` when the other
    operand is `unit` (a param or a const)."""
    data = graph.nx.nodes[n]
    names, _ = shape_rules.call_positions(data["op"])
    for keep in keep_positions:
        other = 1 - keep
        kept = _arg(graph, n, keep)
        if kept is not None and _is_unit(graph, _arg(graph, n, other),
                                         data["params"].get(names[other]), unit):
            return Replace(kept)
    return None


def mul_by_one(graph, n):
    """x * 1 -> x and 1 * x -> x."""
    return _drop_unit(graph, n, 1, (0, 1))


def add_zero(graph, n):
    """x + 0 -> x and 0 + x -> x (NB: -0.0 + 0 is 0.0, equal to -0.0 as a number)."""
    return _drop_unit(graph, n, 0, (0, 1))


def sub_zero(graph, n):
    """x - 0 -> x."""
    return _drop_unit(graph, n, 0, (0,))


def div_by_one(graph, n):
    """x / 1 -> x."""
    return _drop_unit(graph, n, 1, (0,))


def double_neg(graph, n):
    """-(-x) -> x."""
    inner = _inner(graph, n, Neg)
    return None if inner is None else Replace(_arg(graph, inner, 0))


def double_transpose(graph, n):
    """transpose(transpose(x, a, b), a, b) -> x (either order of a and b)."""
    inner = _inner(graph, n, Transpose)
    if inner is None:
        return None
    ndim = len(graph.specs_of(n)[0].shape)

    def dims(m):
        params = graph.nx.nodes[m]["params"]
        return sorted(_wrap(params[k], ndim) for k in ("dim0", "dim1"))
    return Replace(_arg(graph, inner, 0)) if dims(n) == dims(inner) else None


def permute_permute(graph, n):
    """permute(permute(x, p), q) -> permute(x, p∘q), or x when that is the identity."""
    inner = _inner(graph, n, Permute)
    if inner is None:
        return None
    ndim = len(graph.specs_of(n)[0].shape)
    outer_dims = [_wrap(d, ndim) for d in graph.nx.nodes[n]["params"]["dims"]]
    inner_dims = [_wrap(d, ndim) for d in graph.nx.nodes[inner]["params"]["dims"]]
    # NB: y.shape[i] = x.shape[p[i]], so z = y.permute(q) has z.shape[j] = x.shape[p[q[j]]]
    composed = tuple(inner_dims[d] for d in outer_dims)
    source = _arg(graph, inner, 0)
    if composed == tuple(range(ndim)):
        return Replace(source)
    return Edit({0: source}, {"dims": composed})


def _collapse(graph, n, op):
    """op(op(x, s1), s2) -> op(x, the node's own shape), for reshape and expand."""
    inner = _inner(graph, n, op)
    if inner is None:
        return None
    return Edit({0: _arg(graph, inner, 0)}, {"shape": tuple(graph.specs_of(n)[0].shape)})


def reshape_reshape(graph, n):
    """reshape(reshape(x, s1), s2) -> reshape(x, s2)."""
    return _collapse(graph, n, Reshape)


def expand_expand(graph, n):
    """expand(expand(x, s1), s2) -> expand(x, s2) (broadcasting is transitive)."""
    return _collapse(graph, n, Expand)


def no_change(graph, n):
    """reshape/expand/broadcast_to x's own shape, or to(x's own dtype) -> x (the spec check
    of `simplify` is the whole condition)."""
    source = _arg(graph, n, 0)
    return None if source is None else Replace(source)


def _spec(graph, value):
    return graph.specs_of(value[0])[value[1]]


def _scattered_parts(graph, value):
    """[(key, part)] when `value` is zeros with parts written at basic keys (an
    IndexScatter with a basic key, or an Assemble) read by nothing else, else None."""
    node, out = value
    data = graph.nx.nodes[node]
    if data["kind"] != "op" or graph.nx.out_degree(node) != 1:
        return None
    if data["op"] is IndexScatter and data["params"]["basic"]:
        return [(tuple(data["params"]["key"]), _arg(graph, node, 0))]
    if data["op"] is Assemble:
        return [(tuple(key), _arg(graph, node, 2 + i))
                for i, key in enumerate(data["params"]["keys"])]
    return None


def merge_scatters(graph, n):
    """scatter(a, k1) + scatter(b, k2) -> Assemble (disjoint keys; equal keys add their
    parts first): the gradient of several slices of one tensor, one pass over it."""
    a, b = _arg(graph, n, 0), _arg(graph, n, 1)
    parts = None if a is None or b is None else _scattered_parts(graph, a)
    more = None if parts is None else _scattered_parts(graph, b)
    spec = graph.nx.nodes[n]["specs"][0]
    if more is None or any(_spec(graph, p) != _spec(graph, q) for k, p in parts
                           for j, q in more if k == j) or \
            any(_spec(graph, p).dtype != spec.dtype for _, p in parts + more):
        return None
    keys = [k for k, _ in parts]
    if not all(key in keys or all(disjoint(key, k, spec.shape) for k in keys)
               for key, _ in more):  # (one node's own keys are distinct already)
        return None
    for key, part in more:
        if key in keys:  # the same slice twice: one part, the sum of both
            i = keys.index(key)
            total = graph.add_op(Add, {0: parts[i][1], 1: part}, {}, [_spec(graph, part)])
            parts[i] = (key, (total, 0))
        else:
            parts.append((key, part))
            keys.append(key)
    args = {2 + i: part for i, (_, part) in enumerate(parts)}
    params = {"shape": tuple(spec.shape), "keys": tuple(k for k, _ in parts)}
    return Replace((graph.add_op(Assemble, args, params, [spec]), 0))


RULES = (
    (Mul, mul_by_one), (Add, add_zero), (Sub, sub_zero), (Div, div_by_one),
    (Neg, double_neg), (Transpose, double_transpose), (Permute, permute_permute),
    (Reshape, no_change), (Reshape, reshape_reshape),
    (Expand, no_change), (Expand, expand_expand), (ToDtype, no_change),
    (Add, merge_scatters),
)


# ------------------------------------------------------------------ the driver
@edits
def simplify(g, rules=RULES):
    """Apply algebraic rewrite rules until none applies.

    `rules` is a sequence of (op class, rule): a rule `rule(graph, n)` looks at op node n
    (of exactly that class) and returns None, `Replace((node, out))` (n's consumers read
    that value instead and n is dropped) or `Edit(args, params)` (n is changed in place).
    Either is applied only if the result keeps n's specs exactly. Nodes are visited in
    topological order, sweep after sweep, until a sweep changes nothing.

    In: any valid Graph. Out: no rule applies; inputs, outputs and the ids of surviving
    nodes unchanged; nodes that only the rewritten ones read stay (follow with `dce`).

        before                                after
        { lambda ; a:f32[3]. let              { lambda ; a:f32[3]. let
            b:f32[3] = mul[y=1.0] a               b:f32[3] = exp a
            c:f32[3] = add[y=0.0] b             in (b) }
            d:f32[3] = exp c
          in (d) }
    """
    if has_in_place_ops(g):
        return g
    by_op = {}
    for op, rule in rules:
        by_op.setdefault(op, []).append(rule)
    changed = True
    nodes = g.nx._node  # (networkx's own node dict: its view costs as much as a check)
    while changed:
        changed = False
        for n in g.op_nodes:
            if n in nodes and _rewrite_once(g, n, by_op.get(nodes[n]["op"], ())):
                changed = True
    return g


def _rewrite_once(graph, n, node_rules):
    for rule in node_rules:
        change = rule(graph, n)
        if change is not None and _keeps_specs(graph, n, change):
            _commit(graph, n, change)
            return True
    return False


def _keeps_specs(graph, n, change):
    data = graph.nx.nodes[n]
    if isinstance(change, Replace):
        u, out = change.value
        return len(data["specs"]) == 1 and graph.specs_of(u)[out] == data["specs"][0]
    args = {pos: (u, out) for pos, u, out in graph.args_of(n)}
    args.update(change.args)
    specs_in = {pos: graph.specs_of(u)[out] for pos, (u, out) in args.items()}
    try:
        derived = shape_rules.infer(data["op"], specs_in, {**data["params"],
                                                              **change.params}).specs
    except Exception:
        return False
    return tuple(derived) == tuple(data["specs"])


def _commit(graph, n, change):
    if isinstance(change, Replace):
        redirect(graph, (n, 0), change.value)
        keep_annotations(graph, change.value[0], graph.nx.nodes[n])
        graph.nx.remove_node(n)
        return
    for u, _, key, d in sorted(graph.nx.in_edges(n, keys=True, data=True)):
        if d["pos"] in change.args:
            graph.nx.remove_edge(u, n, key=key)
    for pos, (u, out) in sorted(change.args.items()):
        graph.nx.add_edge(u, n, key=pos, pos=pos, out=out)
    graph.nx.nodes[n]["params"] = {**graph.nx.nodes[n]["params"], **change.params}


__all__ = ["simplify", "RULES", "Replace", "Edit"]
