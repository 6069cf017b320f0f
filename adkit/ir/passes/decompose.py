"""decompose: replace an op node by the primitive ops that compute it, so that fusion
can put those primitives into kernels with their neighbours.

Owns: `decompose` and `DECOMPOSITIONS` ({op class: function of adkit ops}: einsum
without repeated labels, logsumexp, softmax, log_softmax, var, std, norm with p = 1, 2).
Each decomposition is traced on the node's argument specs and inlined in its place;
one that raises `Skip` (it does not apply to these arguments) leaves the node as it is.
Does not: fuse (fuse.py) or clean up what is left (dce).

    before:  b = logsumexp[dim=1] a
    after:   m = amax[dim=1 keepdim=True] a;  c = maximum[y=-1.8e308] m;  ...
             b = add (log (sum[dim=1 keepdim=True] (exp (sub a m')))) m'
"""
import numpy as np

from ...ops.binary import Maximum, Minimum
from ...ops.linalg import Einsum
from ...ops.nn import LogSoftmax, Softmax
from ...ops.reduction import Logsumexp, Norm, Std, Var
from .. import rules
from ..trace import trace
from .autodiff import _example
from .cleanup import has_in_place_ops, redirect


def logsumexp(x, dim, keepdim=False):
    """m + log(sum(exp(x - m))) with m the max clamped to the finite range: a row of
    -inf gives -inf and one with +inf gives +inf, as numpy's version (which shifts by
    0 there) does; NaN stays NaN."""
    big = float(np.finfo(x.dtype.np).max)
    m = Minimum.apply(Maximum.apply(x.amax(dim, keepdim=True), -big), big)
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    if keepdim:
        return out
    dims = {d % x.ndim for d in ((dim,) if isinstance(dim, int) else dim)} if x.ndim else ()
    return out.reshape(tuple(n for i, n in enumerate(out.shape) if i not in dims))


class Skip(Exception):
    """Raised by a decomposition that does not apply to these arguments: the node stays."""


def _dims_of(x, dim):
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return tuple(range(x.ndim))
    return tuple(sorted({d % x.ndim for d in ((dim,) if isinstance(dim, int) else dim)}))


def _normalized(x, dim, log):
    """softmax / log_softmax as numpy's forward computes them (shift by the max)."""
    if x.ndim == 0 or x.numel() == 0:
        raise Skip
    z = x - x.amax(dim, keepdim=True)
    e = z.exp()
    total = e.sum(dim, keepdim=True)
    return z - total.log() if log else e / total


def softmax(x, dim):
    return _normalized(x, dim, log=False)


def log_softmax(x, dim):
    return _normalized(x, dim, log=True)


def var(x, dim=None, keepdim=False, correction=1):
    """sum((x - mean)^2) / (n - correction), as numpy's forward computes it."""
    dims = _dims_of(x, dim)
    n = int(np.prod([x.shape[d] for d in dims]))
    if x.ndim == 0 or n - correction <= 0:  # numpy's path warns: keep it
        raise Skip
    centered = x - x.sum(dims, keepdim=True) / n
    return (centered * centered).sum(dims, keepdim=keepdim) / (n - correction)


def std(x, dim=None, keepdim=False, correction=1):
    return var(x, dim, keepdim, correction).sqrt()


def norm(x, dim=None, keepdim=False, p=2.0):
    """p = 2: sqrt(sum(x * x)); p = 1: sum(|x|) (other orders stay one node)."""
    if x.ndim == 0 or p not in (1, 2):
        raise Skip
    dims = _dims_of(x, dim)
    return (x * x).sum(dims, keepdim=keepdim).sqrt() if p == 2 else \
        x.abs().sum(dims, keepdim=keepdim)


def einsum(equation, *operands):
    """Operands with distinct labels each, taken two at a time from the left: labels no
    later operand and not the output has are summed first; batch, free and contracted
    labels are moved into place (views) for one batched matmul, whose result carries
    the labels still needed. Other equations (a repeated label) stay one node."""
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    if any(len(set(t)) != len(t) for t in terms) or \
            len({o.dtype for o in operands}) != 1:
        raise Skip
    ops = list(zip(terms, operands))
    while len(ops) > 1:
        (ta, a), (tb, b) = ops[:2]
        later = "".join(t for t, _ in ops[2:]) + out
        keep = "".join(c for c in dict.fromkeys(ta + tb) if c in later)
        ops[:2] = [(keep, _einsum_pair(ta, a, tb, b, keep))]
    (t, x), = ops
    x = _sum_labels(t, x, out)
    t = "".join(c for c in t if c in out)
    return _permute(x, [t.index(c) for c in out])


def _sum_labels(t, x, keep):
    """x (labels t) summed over its labels not in `keep`."""
    drop = tuple(i for i, c in enumerate(t) if c not in keep)
    return x.sum(drop) if drop else x


def _einsum_pair(ta, a, tb, b, out):
    """einsum(f"{ta},{tb}->{out}", a, b) as one batched matmul."""
    a, ta = _sum_labels(ta, a, tb + out), "".join(c for c in ta if c in tb + out)
    b, tb = _sum_labels(tb, b, ta + out), "".join(c for c in tb if c in ta + out)
    size = {c: n for t, x in ((ta, a), (tb, b)) for c, n in zip(t, x.shape)}
    batch = [c for c in ta if c in tb and c in out]
    contract = [c for c in ta if c in tb and c not in out]
    a_free = [c for c in ta if c not in tb]
    b_free = [c for c in tb if c not in ta]

    def count(labels):
        return int(np.prod([size[c] for c in labels], dtype=np.int64))
    a = _permute(a, [ta.index(c) for c in batch + a_free + contract]).reshape(
        (count(batch), count(a_free), count(contract)))
    b = _permute(b, [tb.index(c) for c in batch + contract + b_free]).reshape(
        (count(batch), count(contract), count(b_free)))
    order = batch + a_free + b_free
    product = (a @ b).reshape(tuple(size[c] for c in order))
    return _permute(product, [order.index(c) for c in out])


def _permute(x, order):
    return x if order == sorted(order) else x.permute(tuple(order))


DECOMPOSITIONS = {Einsum: einsum, Logsumexp: logsumexp, Softmax: softmax, LogSoftmax: log_softmax,
                  Var: var, Std: std, Norm: norm}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def decompose(graph, table=DECOMPOSITIONS):
    """A new graph where every node whose op is in `table` (and whose tensors are all
    float32/float64) is replaced by its decomposition. A graph with in-place ops is
    left as it is (new nodes run in a new place in the order)."""
    g = graph.copy()
    if has_in_place_ops(g):
        return g
    for n in graph.op_nodes:
        data = g.nx.nodes[n]
        fn = table.get(data["op"])
        args = g.args_of(n)
        specs = [g.specs_of(u)[out] for _, u, out in args] + list(data["specs"])
        if fn is None or any(s.dtype.np not in _FLOATS for s in specs):
            continue
        positions = [pos for pos, _, _ in args]

        def call(*tensors, op=data["op"], params=data["params"]):
            return fn(*rules.join_args(op, dict(zip(positions, tensors)), params))
        try:
            sub = trace(call, *[_example(g.specs_of(u)[out]) for _, u, out in args])
        except Skip:
            continue
        _inline(g, n, sub, [(u, out) for _, u, out in args])
    return g


def _inline(g, n, sub, arg_values):
    """Put `sub`'s nodes into g in place of node n (sub's inputs are n's arguments)."""
    mapping = {}
    for m in sub.topo_order():
        data = sub.nx.nodes[m]
        if data["kind"] == "input":
            mapping[m] = arg_values[data["index"]]
        elif data["kind"] == "const":
            mapping[m] = (g.add_const(data["value"]), 0)
        elif data["kind"] == "op":
            args = {pos: _mapped(mapping, u, out) for pos, u, out in sub.args_of(m)}
            node = g.add_op(data["op"], args, data["params"], data["specs"],
                            source=g.nx.nodes[n].get("source"), aliases=data.get("aliases"))
            mapping[m] = (node, None)
    for o in sub.outputs:
        (_, u, out), = sub.args_of(o)
        redirect(g, (n, sub.nx.nodes[o]["index"]), _mapped(mapping, u, out))
    g.nx.remove_node(n)


def _mapped(mapping, u, out):
    node, fixed = mapping[u]
    return (node, out) if fixed is None else (node, fixed)


__all__ = ["decompose", "DECOMPOSITIONS"]
