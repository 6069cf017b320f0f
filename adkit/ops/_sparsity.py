"""Sparsity rules: which input elements each result element of an op reads.

Owns: `Operand` (what a rule sees of a tensor argument) and the numpy helpers op classes
build their `sparsity` rules from: `elementwise` (with broadcasting), `reduced` (over
dims), `along_dim` (softmax, sort: every element of a line reads the whole line),
`moved` (ops that only move elements: forward run on numbered elements),
`contraction` (matmul and friends). Does not: propagate anything through a graph
(adkit/ir/passes/sparsity.py does, calling the rules).

A rule is a classmethod `sparsity(*args)` called with forward's arguments, each tensor
replaced by an `Operand`. It returns, for each result (a tuple of them for multi-output
ops, else one), a dict {argument position: (dst, src)}: result element dst[k] reads
element src[k] of that argument (flat, row-major indices; dst None means one-to-one:
result element k reads src[k]; (None, None): result element k reads element k, the
cheap common case of elementwise ops and reshapes). Two more kinds of link let the pass
move whole blocks of sets with numpy views and strided copies instead of index arrays:
a `Move` (a numpy function of the operand laid out with a leading batch dim: a slice,
a broadcast) and a `Slab` (the operand fills a slice of the result along one dim: cat,
stack). `link_arrays` turns any link into (dst, src). It returns None when it cannot tell (the caller then
assumes every result element reads every element). An op's `curvature` says how the
Hessian pass treats it: "linear" (adds no second-order interaction), "bilinear"
(interactions only across its two tensor arguments: mul, matmul) or "nonlinear".
"""
import math

import numpy as np

from ..tensor import _make
from ._helpers import normalize_dims


class Operand:
    """A tensor argument as a sparsity rule sees it: shape, numpy dtype, and its value
    when the graph holds it as a constant (None otherwise)."""

    __slots__ = ("dtype", "shape", "value")

    def __init__(self, shape, dtype, value=None):
        self.shape, self.dtype, self.value = tuple(shape), np.dtype(dtype), value

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def ndim(self):
        return len(self.shape)

    def ids(self):
        """The flat index of each element, laid out in the operand's shape."""
        return np.arange(self.size, dtype=np.int64).reshape(self.shape)


class Move:
    """A link as a function: `move(block)` maps an array of shape (width, *operand
    shape) to one of shape (width, *result shape) whose element k holds the operand
    element result element k reads (x[key] or a broadcast, with a leading slice: numpy
    gives views)."""

    __slots__ = ("move",)

    def __init__(self, move):
        self.move = move


class Slab:
    """A link of an operand that fills, in row-major order, the result's slice
    start:stop along `dim` (cat; stack, whose slab is one index of the new dim)."""

    __slots__ = ("dim", "start", "stop")

    def __init__(self, dim, start, stop):
        self.dim, self.start, self.stop = dim, start, stop

    def key(self):
        return (slice(None),) * self.dim + (slice(self.start, self.stop),)


def link_arrays(link, operand_shape, out_shape):
    """Any link as (dst, src) arrays (dst None: result element k reads src[k])."""
    if isinstance(link, Move):
        ids = np.arange(math.prod(operand_shape), dtype=np.int64)
        return None, np.asarray(link.move(ids.reshape((1,) + tuple(operand_shape)))).reshape(-1)
    if isinstance(link, Slab):
        out = np.arange(math.prod(out_shape), dtype=np.int64).reshape(out_shape)
        dst = out[link.key()].reshape(-1)
        return dst, np.arange(dst.size, dtype=np.int64)
    dst, src = link
    if src is None:
        src = np.arange(math.prod(out_shape) if dst is None else np.size(dst), dtype=np.int64)
    return dst, src


def _shape(a):
    return a.shape if isinstance(a, Operand) else np.shape(a)


def elementwise(args):
    """Result element k reads the element of each tensor argument that broadcasting puts
    at k (element k itself when the argument has the result's shape)."""
    shapes = {_shape(a) for a in args}
    # (one shape, the common case, needs no broadcasting rules)
    out_shape = shapes.pop() if len(shapes) == 1 else np.broadcast_shapes(*shapes)
    return {pos: (None, None) if a.shape == out_shape else _broadcast(a.shape, out_shape)
            for pos, a in enumerate(args) if isinstance(a, Operand)}


def _broadcast(shape, out_shape):
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    return Move(lambda block: np.broadcast_to(block.reshape(block.shape[:1] + padded),
                                              block.shape[:1] + out_shape))


def indexed(key):
    """The link of x[key] for a basic key (ints, slices, None)."""
    return Move(lambda block: block[(slice(None),) + tuple(key) + (Ellipsis,)])


def reduced(x, dims, keepdim=False):
    """x reduced over `dims` (None or () meaning all): each input element feeds the
    result element at its position with the reduced dims dropped."""
    dims = tuple(range(x.ndim)) if dim_is_all(dims) else normalize_dims(dims, x.ndim)
    kept = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    dst = np.broadcast_to(np.arange(int(np.prod(kept, dtype=np.int64))).reshape(kept),
                          x.shape)
    return {0: (dst.reshape(-1), np.arange(x.size, dtype=np.int64))}


def dim_is_all(dims):
    return dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0)


def summed_to(x, shape):
    """x summed down to `shape` (undoing broadcasting): sum_to_size."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    kept = (1,) * lead + shape
    dst = np.broadcast_to(np.arange(int(np.prod(shape, dtype=np.int64))).reshape(kept),
                          x.shape)
    return {0: (dst.reshape(-1), np.arange(x.size, dtype=np.int64))}


def along_dim(x, dim, length=None):
    """Every result element reads the whole line of x through it along `dim`; the
    result has `length` elements along dim (default: as many as x: softmax, sort)."""
    if x.ndim == 0:
        n = 1 if length is None else length
        return {0: (np.zeros(n, np.int64), np.zeros(n, np.int64))}
    d = dim % x.ndim
    n = x.shape[d]
    length = n if length is None else length
    out_shape = x.shape[:d] + (length,) + x.shape[d + 1:]
    out_lines = np.moveaxis(np.arange(int(np.prod(out_shape, dtype=np.int64)))
                            .reshape(out_shape), d, -1)
    lines = np.moveaxis(x.ids(), d, -1)
    dst = np.broadcast_to(out_lines[..., :, None], out_lines.shape + (n,))
    src = np.broadcast_to(lines[..., None, :], out_lines.shape + (n,))
    return {0: (dst.reshape(-1), src.reshape(-1))}


def moved(cls, *args):
    """For an op whose forward only moves elements (no arithmetic): forward run with
    each float tensor's elements numbered 1, 2, ... (distinct across arguments; 0 is
    "no input") shows which element each result element is. Integer and bool tensors
    (indices, masks) must be constants of the graph (else None: unknown). Returns one
    dict per result when forward returns a tuple."""
    numbered, ranges, start = [], {}, 1
    for pos, a in enumerate(args):
        if not isinstance(a, Operand):
            numbered.append(a)
        elif a.dtype.kind in "fc":  # integers: pure moves keep them exact and cheap
            numbered.append(np.arange(start, start + a.size, dtype=np.int64)
                            .reshape(a.shape))
            ranges[pos] = start
            start += a.size
        elif a.value is not None:
            numbered.append(np.asarray(a.value))
        else:
            return None
    with np.errstate(all="ignore"):
        result = cls.forward(*numbered)
    results = result if isinstance(result, tuple) else (result,)
    links = tuple(_links_of_numbers(np.asarray(r), ranges) for r in results)
    return links if isinstance(result, tuple) else links[0]


def _links_of_numbers(result, ranges):
    numbers = result.reshape(-1).astype(np.int64, copy=False)
    if len(ranges) == 1:  # one operand (a view, a reshape): often read everywhere
        (pos, start), = ranges.items()
        if numbers.size and numbers.min() >= start:
            return {pos: _one_to_one(numbers - start)}
    links = {}
    starts = sorted(ranges.items(), key=lambda item: item[1])
    for i, (pos, start) in enumerate(starts):
        stop = starts[i + 1][1] if i + 1 < len(starts) else np.iinfo(np.int64).max
        dst = np.flatnonzero((numbers >= start) & (numbers < stop))
        links[pos] = (dst, numbers[dst] - start)
    return links


def _one_to_one(src):
    """The link of a result whose element k is element src[k] of the operand: (None,
    None) when that is element k itself (a reshape)."""
    if src.size and src[0] == 0 and src[-1] == src.size - 1 and (np.diff(src) == 1).all():
        return (None, None)
    return (None, src)


def slabs(dim, lengths, first_position):
    """Operands laid one after the other along `dim` of the result (cat; stack with
    length-1 slabs of an inserted dim): operand k (at argument position
    first_position + k) has lengths[k] entries along dim, and its elements fill its
    slab in order. Operands of no elements read nothing and get no link."""
    links, start = {}, 0
    for k, length in enumerate(lengths):
        if length:
            links[first_position + k] = Slab(dim, start, start + length)
        start += length
    return links


def scattered_add(x, dim, index, src):
    """y = x with src added at index along dim (scatter_add): y reads x one-to-one, and
    the element of src at position c lands at c with c[dim] replaced by index[c]."""
    if index.value is None or x.ndim == 0:
        return None
    index_value = np.asarray(index.value)
    coords = list(np.indices(index_value.shape))
    src_at = np.ravel_multi_index(coords, src.shape)
    coords[dim % x.ndim] = index_value
    dst = np.ravel_multi_index(coords, x.shape)
    return {0: (None, np.arange(x.size, dtype=np.int64)),
            3: (dst.reshape(-1), src_at.reshape(-1))}


def index_added(x, dim, index, source):
    """y = x with source's slice i added at index[i] along dim (index_add)."""
    if index.value is None or x.ndim == 0:
        return None
    d = dim % x.ndim
    coords = list(np.indices(source.shape))
    coords[d] = np.asarray(index.value).reshape(-1)[coords[d]]
    dst = np.ravel_multi_index(coords, x.shape)
    return {0: (None, np.arange(x.size, dtype=np.int64)),
            3: (dst.reshape(-1), np.arange(source.size, dtype=np.int64))}


def contraction(x, y):
    """z = x @ y with numpy's matmul rules (1-D operands promoted, batch dims
    broadcast): z[..., i, j] reads x[..., i, k] and y[..., k, j] for every k, except
    that a constant operand's zeros cut the other operand's element out (x[i, k] == 0
    means z[i, j] does not depend on y[k, j])."""
    xi, yi = x.ids(), y.ids()
    xi = xi[None, :] if x.ndim == 1 else xi
    yi = yi[:, None] if y.ndim == 1 else yi
    batch = np.broadcast_shapes(xi.shape[:-2], yi.shape[:-2])
    (m, k), n = xi.shape[-2:], yi.shape[-1]
    xi = np.broadcast_to(xi, batch + (m, k))
    yi = np.broadcast_to(yi, batch + (k, n))
    out = np.arange(int(np.prod(batch + (m, n), dtype=np.int64))).reshape(batch + (m, n))
    x_nonzero = _nonzero_mask(x, xi.shape, as_column=False)
    y_nonzero = _nonzero_mask(y, yi.shape, as_column=True)
    # grid (batch, m, k, n): z[b, i, j] reads x[b, i, k] where y[b, k, j] != 0, and so on
    grid = batch + (m, k, n)
    out_g = np.broadcast_to(out[..., :, None, :], grid)
    keep_x = np.broadcast_to(y_nonzero[..., None, :, :], grid)
    keep_y = np.broadcast_to(x_nonzero[..., :, :, None], grid)
    return {0: (out_g[keep_x], np.broadcast_to(xi[..., :, :, None], grid)[keep_x]),
            1: (out_g[keep_y], np.broadcast_to(yi[..., None, :, :], grid)[keep_y])}


def outer(x, y):
    """z[i, j] = x[i] y[j]: z[i, j] reads x[i] and y[j]."""
    return {0: (None, np.repeat(np.arange(x.size, dtype=np.int64), y.size)),
            1: (None, np.tile(np.arange(y.size, dtype=np.int64), x.size))}


def labeled_contraction(equation, operands):
    """out = einsum(equation, *operands) (explicit output, no '...'): over the grid of
    all labels, the output element at a point reads each operand's element there.
    Operands are at argument positions 1, 2, ... (the equation is position 0)."""
    lhs, out_term = equation.split("->")
    terms = lhs.split(",")
    sizes = {label: n for term, a in zip(terms, operands) for label, n in zip(term, a.shape)}
    labels = sorted(sizes)
    grid = tuple(sizes[label] for label in labels)
    axes = {label: np.arange(sizes[label]).reshape(
        [-1 if other == label else 1 for other in labels]) for label in labels}

    def flat_index(term):
        shape = [sizes[label] for label in term]
        strides = np.cumprod([1] + shape[::-1])[:-1][::-1]
        index = sum((axes[label] * int(stride) for label, stride in zip(term, strides)),
                    np.zeros([1] * len(labels), np.int64))
        return np.broadcast_to(index, grid).reshape(-1)

    dst = flat_index(out_term)
    return {k + 1: (dst, flat_index(term)) for k, (term, a) in enumerate(zip(terms, operands))
            if isinstance(a, Operand)}


def _nonzero_mask(a, shape, as_column):
    """Where a constant operand is nonzero (everywhere for a traced one), in the
    promoted, broadcast layout `shape` (a 1-D operand becomes a row, or for the right
    operand a column, as matmul promotes it)."""
    if a.value is None:
        return np.ones(shape, bool)
    value = np.asarray(a.value) != 0
    if value.ndim == 1:
        value = value[:, None] if as_column else value[None, :]
    return np.broadcast_to(value, shape)


class CurvatureOfFormula:
    """A class attribute giving how the Hessian pass treats an elementwise op, read off
    its derivative formula (`derivative(x, out)` or `partials(x, y, out)`) called once,
    on first use, with small tensors: "linear" when the derivatives are constants,
    "bilinear" when dz/dx is y itself and dz/dy is x (mul), else "nonlinear" (also
    when the formula fails)."""

    def __init__(self, formula, n_args):
        self.formula, self.n_args, self.cache = formula, n_args, {}

    def __get__(self, obj, owner):
        if owner not in self.cache:
            self.cache[owner] = self._read(getattr(owner, self.formula))
        return self.cache[owner]

    def _read(self, formula):
        args = [_make(np.array([0.75, 1.5])) for _ in range(self.n_args + 1)]
        try:
            result = formula(*args)
        except Exception:
            return "nonlinear"
        derivatives = result if self.n_args > 1 else (result,)
        if all(d is None or isinstance(d, (int, float)) for d in derivatives):
            return "linear"
        if self.n_args == 2 and derivatives[0] is args[1] and derivatives[1] is args[0]:
            return "bilinear"
        return "nonlinear"


def no_derivative(*args):
    """Ops whose derivative is zero (floor, round...): no result element reads anything."""
    return {}
