"""Contract before multiplying out: a long contraction of a row-scaled matmul result
rewritten to contract the matmul's narrow left operand instead, so that the result
is never read back (and, when nothing else needs it stored, never stored).

Owns: `contract_first(graph)` (edits the graph in place; the nodes it leaves unread
are dce's). Does not: decide fusion (fuse.py runs this first) or evaluate anything.

With Y = X @ Q, or X @ Q -+ M @ Q = (X -+ M) @ Q (M a row broadcast [..., 1, K], the
same Q), of shape [..., n, N], X [..., n, K] with K <= N, and Z = s * c * Y (s a
number, c constant along Y's rows: shape [..., n, 1]; made by neg, mul by a number or
by such a c, and x + x):

    A @ Z                    = s * (A @ (c (X -+ M))) @ Q
    sum_to_size(Z, [..,1,N]) = s * sum_to_size(c (X -+ M), [..,1,K]) @ Q

With A [..., m, n], the right takes no more multiply-adds (m n K for m n N) but for
its small product by Q after (m K N, n >= 4 N), and it reads X (small, shared), M and
c where the left reads Y: a GMM gradient's backward reads the [components, points,
d] y = (x - mu_k) Q_k^T it would otherwise store in the forward pass and load again
(20 MB each way at ADBench's medium size).
NB: Y = X @ Q - t for another t is left alone: (A c X) Q - (A c) t subtracts two
sums over the n rows, which lose the digits that X @ Q and t share (data far from
the origin: a GMM's Q gradient 1e-12 -> 4e-9 relative error at offset 1000).
"""
import numpy as np

from ...ops.binary import Add, Mul, Sub
from ...ops.linalg import Matmul
from ...ops.reduction import SumToSize
from ...ops.shape import Expand
from ...ops.unary import Neg

# the contracted dim (Y's rows) is at least this many times Y's width: the product by
# Q the rewrite adds is then at most a quarter of the contraction it replaces
MIN_ROWS_PER_COLUMN = 4
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def contract_first(graph):
    """Rewrite every matmul A @ Z and sum_to_size(Z) over Z's rows, Z a row-scaled
    matmul result (module docstring), in place. Returns the number of rewrites."""
    count, made = 0, _Made(graph)
    for n in graph.topo_order():
        data = graph.nx.nodes[n]
        if data["kind"] != "op" or data["dtype"].np not in _FLOATS:
            continue
        rewrite = _REWRITES.get(data["op"])
        if rewrite is None:
            continue
        try:
            new = rewrite(graph, n, made)
        except (TypeError, ValueError, RuntimeError):
            new = None  # a shape rule refused (batch dims that broadcast); dce's nodes
        if new is not None and tuple(graph.specs_of(new)[0]) == tuple(data["specs"][0]):
            graph.replace_all_uses((n, 0), (new, 0))
            count += 1
    return count


def _arg(graph, n, pos):
    return next(((u, out) for p, u, out in graph.args_of(n) if p == pos), None)


def _op(graph, value):
    """The op class of the node making `value` (None for inputs and consts, and for
    nodes with several outputs)."""
    data = graph.nx.nodes[value[0]]
    if data["kind"] != "op" or len(data["specs"]) != 1:
        return None
    return data["op"]


def _shape(graph, value):
    return tuple(graph.specs_of(value[0])[value[1]].shape)


def _number(params, name):
    value = params.get(name)
    return float(value) if isinstance(value, (int, float, np.number)) and \
        not isinstance(value, (bool, np.bool_)) else None


def _row_constant(graph, value):
    """`value`, without an expand along its last dim, when it is constant along the
    last dim (shape [..., 1]); else None."""
    if _op(graph, value) is Expand:
        inner = _arg(graph, value[0], 0)
        if inner is not None and _shape(graph, inner)[-1:] == (1,):
            value = inner
    return value if _shape(graph, value)[-1:] == (1,) else None


def _scaled(graph, made, value, depth=0):
    """(s, c, y): value = s * c * y, s a number, c a row constant (or None), y the
    value under the scalings; None when value is not such a product."""
    op, n = _op(graph, value), value[0]
    if op is None or depth > 16:
        return 1.0, None, value
    params = graph.nx.nodes[n]["params"]
    a, b = _arg(graph, n, 0), _arg(graph, n, 1)
    if op is Neg and a is not None:
        s, c, y = _scaled(graph, made, a, depth + 1)
        return -s, c, y
    if op is Add and a is not None and a == b:
        s, c, y = _scaled(graph, made, a, depth + 1)
        return 2.0 * s, c, y
    if op is Mul:
        if (a is None) != (b is None):  # times a number
            number = _number(params, "y" if b is None else "x")
            if number is not None:
                s, c, y = _scaled(graph, made, a if b is None else b, depth + 1)
                return number * s, c, y
        elif a is not None:
            for row, other in ((a, b), (b, a)):
                c_new = _row_constant(graph, row)
                if c_new is not None and _shape(graph, other) == _shape(graph, value):
                    s, c, y = _scaled(graph, made, other, depth + 1)
                    if c is None:
                        return s, c_new, y
                    return s, made.op(Mul, c, c_new), y
    return 1.0, None, value


def _matmul_base(graph, y):
    """(X, M, sign, Q) when y = X @ Q (M None) or X @ Q + sign * M @ Q with M a row
    broadcast ([..., 1, K]), and X no wider than y (module docstring); else None."""
    m, sign, product = None, 1.0, y
    if _op(graph, y) in (Add, Sub):
        left, right = _arg(graph, y[0], 0), _arg(graph, y[0], 1)
        if left is None or right is None or _op(graph, left) is not Matmul or \
                _op(graph, right) is not Matmul or \
                _arg(graph, left[0], 1) != _arg(graph, right[0], 1):
            return None
        product, sign = left, (1.0 if _op(graph, y) is Add else -1.0)
        m = _arg(graph, right[0], 0)
        if m is None or len(_shape(graph, m)) < 2 or _shape(graph, m)[-2] != 1:
            return None
    if _op(graph, product) is not Matmul:
        return None
    x, q = _arg(graph, product[0], 0), _arg(graph, product[0], 1)
    if x is None or q is None or len(_shape(graph, x)) < 2 or len(_shape(graph, q)) < 2:
        return None
    rows, width = _shape(graph, y)[-2:]
    if _shape(graph, x)[-1] > width or rows < MIN_ROWS_PER_COLUMN * width:
        return None
    return x, m, sign, q


def _operands(graph, made, z):
    """(s, c X', Q) for a row-scaled matmul result z = s c (X' @ Q), X' = X -+ M, whose
    tensors all have z's dtype and whose c X' has z's shape but for the last dim; else
    None."""
    if len(_shape(graph, z)) < 2:
        return None
    s, c, y = _scaled(graph, made, z)
    base = _matmul_base(graph, y) if c is not None else None
    if base is None:
        return None
    x, m, sign, q = base
    dtype = graph.specs_of(z[0])[z[1]].dtype
    if any(graph.specs_of(v[0])[v[1]].dtype != dtype for v in (c, x, m, q) if v is not None):
        return None
    if m is not None:
        x = made.op(Add if sign > 0 else Sub, x, m)
    rows = np.broadcast_shapes(_shape(graph, c)[:-1], _shape(graph, x)[:-1])
    return (s, made.op(Mul, c, x), q) if rows == _shape(graph, z)[:-1] else None


def _scale(made, value, s):
    return value if s == 1.0 else made.op(Mul, value, y=s)


class _Made:
    """The nodes the rewrites made, by op, arguments and params: the rewrites of one
    Z's readers share them (one c * X', whose row sums and row products fuse into the
    kernel that makes it)."""

    def __init__(self, graph):
        self.graph, self.nodes = graph, {}

    def op(self, op, *args, **params):
        key = (op, args, tuple(sorted(params.items())))
        if key not in self.nodes:
            self.nodes[key] = (self.graph.add_op(op, *args, **params), 0)
        return self.nodes[key]


def _rewrite_product(graph, n, made):
    """A @ Z -> s * (A @ (c X')) @ Q, or None."""
    a, z = _arg(graph, n, 0), _arg(graph, n, 1)
    found = _operands(graph, made, z) if a is not None and z is not None else None
    if found is None or len(_shape(graph, a)) < 2:
        return None
    s, scaled_x, q = found
    return _scale(made, made.op(Matmul, made.op(Matmul, a, scaled_x), q), s)[0]


def _rewrite_row_sum(graph, n, made):
    """sum_to_size(Z, [..., 1, N]) -> s * sum_to_size(c X', [..., 1, K]) @ Q, or None."""
    z = _arg(graph, n, 0)
    shape = tuple(graph.nx.nodes[n]["params"].get("shape", ()))
    if z is None or len(shape) != len(_shape(graph, z)) or len(shape) < 2 or \
            shape[-2] != 1 or shape[:-2] + shape[-1:] != \
            _shape(graph, z)[:-2] + _shape(graph, z)[-1:]:
        return None
    found = _operands(graph, made, z)
    if found is None:
        return None
    s, scaled_x, q = found
    width = _shape(graph, scaled_x)[-1]
    summed = made.op(SumToSize, scaled_x, shape=shape[:-1] + (width,))
    return _scale(made, made.op(Matmul, summed, q), s)[0]


_REWRITES = {Matmul: _rewrite_product, SumToSize: _rewrite_row_sum}
