"""Indexing ops: x[key], x[key] = value, index_select, gather, scatter_add, index_add(_),
sort, topk.

Owns: parsing an index key the way PyTorch applies it, in two steps: basic indexing
(ints, slices, None: a view, `BasicIndex`), then advanced indexing with integer arrays
on that view (a copy, `AdvancedIndex`); and each op's rules. Index tensors are int64
static data, never differentiated. Does not: reshape or join tensors (see shape.py).
"""
import collections

import numpy as np

from ..tensor import Tensor, zeros
from ._families import ArrayFunction, public
from ._helpers import shape_of, sum_to, wrap_dim
from .shape import expand_error, torch_type_name

_BAD_INDEX_TENSOR = "tensors used as indices must be long, int, byte or bool tensors"


# ---------------------------------------------------------------- parsing a key
def _index_item(item):
    """One key item as int, slice, None, Ellipsis, or an int64 / bool ndarray."""
    if item is None or item is Ellipsis:
        return item
    if isinstance(item, Tensor):
        item = item._data
    if isinstance(item, slice):
        start, stop, step = (None if v is None else v.__index__()
                             for v in (item.start, item.stop, item.step))
        if step is not None and step <= 0:
            raise ValueError("step must be greater than zero")
        return slice(start, stop, step)
    if isinstance(item, (bool, np.bool_)):
        return np.array(bool(item))
    if isinstance(item, (int, np.integer)):
        return int(item)
    if isinstance(item, (np.ndarray, list, tuple)):
        arr = np.asarray(item)
        if arr.dtype.kind == "b":
            return arr
        if arr.dtype.kind in "iu" and arr.ndim == 0:
            return int(arr)  # PyTorch treats a 0-d integer tensor as an int
        if arr.dtype.kind in "iu" or arr.size == 0:
            return arr.astype(np.int64, copy=False)
        raise IndexError(_BAD_INDEX_TENSOR)
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                     f"Variables are valid indices (got {type(item).__name__})")


def _consumed(item):
    """How many dims of the indexed tensor an item uses up."""
    if isinstance(item, np.ndarray):
        return item.ndim if item.dtype.kind == "b" else 1
    return 0 if item is None or item is Ellipsis else 1


def _basic_step(items, shape):
    """The basic key (ints, slices, None) and, per dim of its result, the advanced
    item to apply there later (None for a full slice)."""
    basic, later, dim, nones = [], [], 0, 0
    for item in items:
        if item is Ellipsis:
            k = len(shape) - sum(_consumed(i) for i in items)
            basic += [slice(None)] * k
            later += [None] * k
            dim += k
        elif item is None:
            basic.append(None)
            later.append(None)
            nones += 1
        elif isinstance(item, int):
            n = shape[dim]
            if not -n <= item < n:
                raise IndexError(f"index {item} is out of bounds for dimension "
                                 f"{dim + nones} with size {n}")
            basic.append(item)
            dim += 1
        elif isinstance(item, slice):
            basic.append(item)
            later.append(None)
            dim += 1
        elif item.ndim == 0 and item.dtype.kind == "b":  # x[True]: a new dim of size 1
            basic.append(None)
            later.append(np.zeros(int(item), np.int64))
        else:
            k = _consumed(item)
            basic += [slice(None)] * k
            later += [item] + [()] * (k - 1)  # () marks dims a mask covers
            dim += k
    return tuple(basic), later


def _advanced_step(later, shape):
    """The advanced key for an array of `shape` (the basic step's result)."""
    key = []
    for d, item in enumerate(later):
        if item is None:
            key.append(slice(None))
        elif isinstance(item, tuple):
            continue
        elif item.dtype.kind == "b":
            for j in range(item.ndim):
                if item.shape[j] != shape[d + j]:
                    raise IndexError(f"The shape of the mask {list(item.shape)} at index {j} "
                                     "does not match the shape of the indexed tensor "
                                     f"{list(shape)} at index {d + j}")
            key.extend(np.nonzero(item))
        else:
            n = shape[d]
            bad = item[(item < -n) | (item >= n)]
            if bad.size:
                raise IndexError(f"index {bad.flat[0]} is out of bounds for dimension {d} "
                                 f"with size {n}")
            key.append(item)
    arrays = [a for a in key if isinstance(a, np.ndarray)]
    try:
        np.broadcast_shapes(*[a.shape for a in arrays])
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together "
                         f"with shapes {', '.join(str(list(a.shape)) for a in arrays)}") from None
    while key and isinstance(key[-1], slice):
        key.pop()
    return tuple(key)


def parse_key(key, shape):
    """(basic, advanced) keys for x[key] with x of `shape`, PyTorch's way: ints, slices
    and None first (basic: a view), then integer arrays on the result (advanced).
    `basic` is None when it would select everything; `advanced` None without arrays."""
    items = key if isinstance(key, tuple) else (key,)
    items = [_index_item(i) for i in items]
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if sum(_consumed(i) for i in items) > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    basic, later = _basic_step(items, tuple(shape))
    if all(i is None or isinstance(i, tuple) for i in later):
        return basic, None
    basic_shape = np.broadcast_to(np.empty((), np.int8), shape)[basic + (Ellipsis,)].shape
    advanced = _advanced_step(later, basic_shape)
    if all(isinstance(b, slice) and b == slice(None) for b in basic):
        basic = None
    return basic, advanced


# ---------------------------------------------------------------- x[key]
class BasicIndex(ArrayFunction):
    """y = x[key] for a key of ints, slices and None (a view);
    grad_x = zeros(x.shape) with grad_out written at key."""
    is_view = True

    @staticmethod
    def forward(x, key):
        return x[key + (Ellipsis,)]

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)
        ctx.key = inputs[1]

    @staticmethod
    def backward(ctx, grad_out):
        return IndexScatter.apply(grad_out, ctx.input_shape, ctx.key, True), None

    @staticmethod
    def jvp(ctx, x_t, _key):
        return BasicIndex.apply(x_t, ctx.key)


class AdvancedIndex(ArrayFunction):
    """y = x[key] for a key of full slices and integer arrays (numpy's advanced indexing,
    a copy);  grad_x = zeros(x.shape) with grad_out added at key (repeats accumulate)."""

    @staticmethod
    def forward(x, key):
        return x[key]

    setup_context = BasicIndex.setup_context

    @staticmethod
    def backward(ctx, grad_out):
        return IndexScatter.apply(grad_out, ctx.input_shape, ctx.key, False), None

    @staticmethod
    def jvp(ctx, x_t, _key):
        return AdvancedIndex.apply(x_t, ctx.key)


class IndexScatter(ArrayFunction):
    """y = zeros(shape) with y[key] += g (np.add.at, so repeated indices accumulate);
    the adjoint of x[key]:  grad_g = grad_out[key]."""

    @staticmethod
    def forward(g, shape, key, basic):
        out = np.zeros(shape, g.dtype)
        if basic:
            out[key + (Ellipsis,)] = g
        else:
            np.add.at(out, key, g)
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape, ctx.key, ctx.basic = inputs[1], inputs[2], inputs[3]

    @staticmethod
    def backward(ctx, grad_out):
        index = BasicIndex if ctx.basic else AdvancedIndex
        return index.apply(grad_out, ctx.key), None, None, None

    @staticmethod
    def jvp(ctx, g_t, _shape, _key, _basic):
        return IndexScatter.apply(g_t, ctx.shape, ctx.key, ctx.basic)


def _index(x, basic, advanced):
    out = x if basic is None else BasicIndex.apply(x, basic)
    return out if advanced is None else AdvancedIndex.apply(out, advanced)


@public("__getitem__", variants=("method",))
def getitem(x, key):
    """x[key] with PyTorch's semantics (ints, slices, None, Ellipsis, bool masks, integer
    arrays/tensors/lists): a view unless the key holds arrays."""
    basic, advanced = parse_key(key, x.shape)
    if basic is None and advanced is None:
        basic = ()
    return _index(x, basic, advanced)


# ---------------------------------------------------------------- x[key] = value
def _assign(arr, value, basic, advanced):
    """arr[key] = value in place (numpy broadcasting), with PyTorch's errors."""
    target = arr if basic is None else arr[basic + (Ellipsis,)]
    try:
        if advanced is None:
            target[...] = value
        else:
            target[advanced] = value
    except ValueError as e:
        if "read-only" in str(e):
            raise RuntimeError("unsupported operation: more than one element of the "
                               "written-to tensor refers to a single memory location. Please "
                               "clone() the tensor before performing the operation.") from None
        if advanced is None:
            raise RuntimeError(expand_error(np.asarray(value), target.shape)) from None
        raise RuntimeError(f"shape mismatch: value tensor of shape "
                           f"{list(np.shape(value))} cannot be broadcast to indexing result "
                           f"of shape {list(target[advanced].shape)}") from None


def _sum_to_value(grad, shape):
    """grad (of the indexed region's shape) summed to the shape of the value written."""
    extra = len(shape) - grad.ndim
    if extra > 0:  # the value had extra leading size-1 dims
        grad = grad.reshape((1,) * extra + tuple(grad.shape))
    return sum_to(grad, shape)


class IndexPut(ArrayFunction):
    """y = copy of x with y[key] = value;  grad_x = grad_out with the region zeroed,
    grad_value = sum_to(grad_out[key], value.shape)."""

    @staticmethod
    def forward(x, value, basic, advanced):
        out = x.copy()
        _assign(out, value, basic, advanced)
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.basic, ctx.advanced = inputs[2], inputs[3]
        ctx.value_shape = shape_of(inputs[1])
        ctx.output_meta = (tuple(output.shape), output.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        grad_x = grad_v = None
        if ctx.needs_input_grad[0]:
            grad_x = IndexPut.apply(grad_out, 0, ctx.basic, ctx.advanced)
        if ctx.needs_input_grad[1]:
            grad_v = _sum_to_value(_index(grad_out, ctx.basic, ctx.advanced),
                                   ctx.value_shape)
        return grad_x, grad_v, None, None

    @staticmethod
    def jvp(ctx, x_t, v_t, _basic, _advanced):
        if x_t is None:
            x_t = zeros(ctx.output_meta[0], dtype=ctx.output_meta[1])
        return IndexPut.apply(x_t, 0 if v_t is None else v_t, ctx.basic, ctx.advanced)


class SetItem(IndexPut):
    """x[key] = value, in place; rules as IndexPut's."""
    public_name = "__setitem__"
    variants = ("method",)

    @staticmethod
    def forward(x, value, basic, advanced):
        _assign(x, value, basic, advanced)
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexPut.setup_context(ctx, inputs, output)
        ctx.mark_dirty(inputs[0])

    @classmethod
    def interface(cls, x, key, value):
        basic, advanced = parse_key(key, x.shape)
        if not isinstance(value, (Tensor, int, float, bool, np.number, np.bool_)):
            value = Tensor(value, dtype=x.dtype)
        return cls.apply(x, value, basic, advanced)


# ---------------------------------------------------------------- index_select, gather
def _index_vector(index, op, more=""):
    index = np.asarray(index)
    if index.dtype.kind not in "iu":
        raise RuntimeError(f"{op}(): Expected dtype int32 or int64 for index")
    if index.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector{more}")
    return index.reshape(-1)


def _check_range(index, n, dim, error=IndexError):
    """PyTorch's range check of an index tensor: IndexError "index out of range in self"
    (index_select's wording), or `error` naming the bad index, dim and size."""
    if index.size and (index.min() < 0 or index.max() >= n):
        if error is IndexError:
            raise IndexError("index out of range in self")
        bad = index[(index < 0) | (index >= n)].flat[0]
        raise error(f"index {bad} is out of bounds for dimension {dim} with size {n}")


def _along(dim, item):
    """A key selecting `item` along dim `dim`."""
    return (slice(None),) * dim + (item,)


class IndexSelect(ArrayFunction):
    """y = x taken at `index` (a vector) along dim;
    grad_x = index_add(zeros(x.shape), dim, index, grad_out)."""
    public_name = "index_select"

    @staticmethod
    def forward(x, dim, index):
        d = wrap_dim(dim, x.ndim)
        idx = _index_vector(index, "index_select")
        _check_range(idx, x.shape[d] if x.ndim else 1, d)
        return np.take(x, idx, axis=d) if x.ndim else x.reshape(1)[idx].reshape(())

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim = wrap_dim(inputs[1], inputs[0].ndim)
        ctx.input_meta = (tuple(inputs[0].shape), inputs[0].dtype)
        ctx.save_for_backward(inputs[2])

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        base = zeros(ctx.input_meta[0], dtype=grad_out.dtype)
        return IndexAdd.apply(base, ctx.dim, index, grad_out, 1), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _index):
        (index,) = ctx.saved_tensors
        return IndexSelect.apply(x_t, ctx.dim, index)


def _check_index_tensor(x, d, index, op, src=None):
    """PyTorch's checks of gather's index (src None) and of scatter_add's index and src."""
    if index.dtype.kind not in "iu":
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index")
    if not index.ndim == x.ndim == (x.ndim if src is None else src.ndim):
        raise RuntimeError("Index tensor must have the same number of dimensions as "
                           f"{'input' if src is None else 'self'} tensor")
    for k in range(x.ndim):
        too_big = k != d and index.shape[k] > x.shape[k]
        if src is None and too_big:
            raise RuntimeError(f"Size does not match at dimension {k} expected index "
                               f"{list(index.shape)} to be no larger than self "
                               f"{list(x.shape)} apart from dimension {d}")
        if src is not None and (too_big or index.shape[k] > src.shape[k]):
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than "
                               f"self {list(x.shape)} apart from dimension {d} and to be no "
                               f"larger size than src {list(src.shape)}")
    _check_range(index, x.shape[d], d, RuntimeError)


def _scatter_key(index, d):
    """The advanced key addressing out[i_0, ..., index[i], ..., i_n] for each i."""
    key = list(np.ogrid[tuple(slice(s) for s in index.shape)])
    key[d] = index
    return tuple(key)


class Gather(ArrayFunction):
    """y[i] = x[i with i[dim] replaced by index[i]];
    grad_x = scatter_add(zeros(x.shape), dim, index, grad_out)."""
    public_name = "gather"

    @staticmethod
    def forward(x, dim, index):
        index = np.asarray(index)
        d = wrap_dim(dim, x.ndim)
        if x.ndim == 0:  # as a 1-element vector
            return Gather.forward(x.reshape(1), 0, index.reshape(-1)).reshape(index.shape)
        _check_index_tensor(x, d, index, "gather")
        return x[_scatter_key(index, d)]

    setup_context = IndexSelect.setup_context

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        base = zeros(ctx.input_meta[0], dtype=grad_out.dtype)
        return ScatterAdd.apply(base, ctx.dim, index, grad_out), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _index):
        (index,) = ctx.saved_tensors
        return Gather.apply(x_t, ctx.dim, index)


class ScatterAdd(ArrayFunction):
    """y = copy of x with y[i with i[dim] = index[i]] += src[i] for each i in index;
    grad_x = grad_out,  grad_src = gather(grad_out, dim, index) (zero past index)."""
    public_name = "scatter_add"

    @staticmethod
    def forward(x, dim, index, src):
        index = np.asarray(index)
        d = wrap_dim(dim, x.ndim)
        if src.dtype != x.dtype:
            raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
        if x.ndim == 0:  # as a 1-element vector
            return ScatterAdd.forward(x.reshape(1), 0, index.reshape(-1),
                                      src.reshape(-1)).reshape(())
        _check_index_tensor(x, d, index, "scatter", src)
        out = x.copy()
        np.add.at(out, _scatter_key(index, d), src[tuple(slice(s) for s in index.shape)])
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexSelect.setup_context(ctx, inputs, output)
        ctx.src_shape = tuple(inputs[3].shape)

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        grad_src = None
        if ctx.needs_input_grad[3]:
            grad_src = Gather.apply(grad_out, ctx.dim, index)
            if tuple(grad_src.shape) != ctx.src_shape:  # src larger than index: zero-pad
                key = tuple(slice(s) for s in index.shape)
                grad_src = IndexScatter.apply(grad_src, ctx.src_shape, key, True)
        return grad_out, None, None, grad_src

    @staticmethod
    def jvp(ctx, x_t, _dim, _index, src_t):
        (index,) = ctx.saved_tensors
        if src_t is None:
            return x_t
        if x_t is None:
            x_t = zeros(ctx.input_meta[0], dtype=src_t.dtype)
        return ScatterAdd.apply(x_t, ctx.dim, index, src_t)


# ---------------------------------------------------------------- index_add
def _index_add_into(out, dim, index, source, alpha):
    """out[..., index[i], ...] += alpha * source[..., i, ...] along dim, in place."""
    d = wrap_dim(dim, out.ndim)
    index = np.asarray(index)
    if index.dtype.kind not in "iu":
        raise RuntimeError("index_add_(): Expected dtype int32/int64 for index but got: "
                           f"{torch_type_name(index.dtype)}")
    idx = _index_vector(index, "index_add_", f", but got dim: {index.ndim} with type: "
                        f"{torch_type_name(index.dtype)} "
                        f"and size: {list(index.shape)}")
    if source.dtype != out.dtype:
        names = [torch_type_name(a.dtype) for a in (out, source)]
        raise RuntimeError(f"index_add_(): self ({names[0]}) and source ({names[1]}) must "
                           "have the same scalar type")
    x1, s1 = (out, source) if out.ndim else (out.reshape(1), source.reshape(-1))
    if s1.ndim != x1.ndim or any(a != b for k, (a, b) in enumerate(zip(x1.shape, s1.shape))
                                 if k != d):
        raise RuntimeError("source tensor shape must match self tensor shape, excluding the "
                           f"specified dimension. Got self.shape = {list(out.shape)} "
                           f"source.shape = {list(source.shape)}")
    if idx.size != s1.shape[d]:
        raise RuntimeError(f"index_add_(): Number of indices ({idx.size}) should be equal to "
                           f"source.size(dim): ({s1.shape[d]}), for dim: {d}")
    # PyTorch's 1-D kernel words it as index_select does
    _check_range(idx, x1.shape[d], d, IndexError if x1.ndim == 1 else RuntimeError)
    if alpha != 1:
        s1 = (s1 * alpha).astype(out.dtype, copy=False)
    np.add.at(x1, _along(d, idx), s1)
    return out


class IndexAdd(ArrayFunction):
    """y = copy of x with y[..., index[i], ...] += alpha * source[..., i, ...] along dim;
    grad_x = grad_out,  grad_source = alpha * index_select(grad_out, dim, index)."""
    public_name = "index_add"

    @staticmethod
    def forward(x, dim, index, source, alpha=1):
        return _index_add_into(x.copy(), dim, index, source, alpha)

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexSelect.setup_context(ctx, inputs, output)
        ctx.alpha = inputs[4]
        ctx.source_shape = tuple(inputs[3].shape)

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        grad_source = None
        if ctx.needs_input_grad[3]:
            grad_source = IndexSelect.apply(grad_out, ctx.dim, index).reshape(ctx.source_shape)
            if ctx.alpha != 1:
                grad_source = grad_source * ctx.alpha
        return grad_out, None, None, grad_source, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _index, source_t, _alpha):
        (index,) = ctx.saved_tensors
        if source_t is None:
            return x_t
        if x_t is None:
            x_t = zeros(ctx.input_meta[0], dtype=source_t.dtype)
        return IndexAdd.apply(x_t, ctx.dim, index, source_t, ctx.alpha)


class IndexAdd_(IndexAdd):  # noqa: N801  (PyTorch's name)
    """index_add in place on x; rules as IndexAdd's."""
    public_name = "index_add_"
    variants = ("method",)

    @staticmethod
    def forward(x, dim, index, source, alpha=1):
        return _index_add_into(x, dim, index, source, alpha)

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexAdd.setup_context(ctx, inputs, output)
        ctx.mark_dirty(inputs[0])


# ---------------------------------------------------------------- sort, topk
SortResult = collections.namedtuple("sort", ("values", "indices"))
TopkResult = collections.namedtuple("topk", ("values", "indices"))


def _argsort(x, d, descending):
    """Stable argsort along d; NaN counts as the largest value, as in PyTorch."""
    if x.dtype == np.bool_:
        x = x.view(np.uint8)
    if not descending:
        return np.argsort(x, axis=d, kind="stable")
    # Reversing an ascending sort of the reversed array keeps equal elements in order.
    rev = np.argsort(np.flip(x, d), axis=d, kind="stable")
    return np.ascontiguousarray(np.flip(x.shape[d] - 1 - rev, d))


class _SortLike(ArrayFunction):
    """(values, indices) with values = take_along_dim(x, indices, dim);
    grad_x = scatter_add(zeros(x.shape), dim, indices, grad_values)."""

    _dim_arg = 1  # position of `dim` among forward's parameters

    @staticmethod
    def setup_context(ctx, inputs, output):
        x = inputs[0]
        ctx.dim = wrap_dim(inputs[ctx._forward_cls._dim_arg], x.ndim) if x.ndim else None
        ctx.input_meta = (tuple(x.shape), x.dtype)
        ctx.save_for_backward(output[1])

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        (indices,) = ctx.saved_tensors
        n_params = len(ctx.needs_input_grad)
        if ctx.dim is None:
            grad = grad_values.reshape(ctx.input_meta[0]) if grad_values.numel() else \
                zeros(ctx.input_meta[0], dtype=grad_values.dtype)
        else:
            base = zeros(ctx.input_meta[0], dtype=grad_values.dtype)
            grad = ScatterAdd.apply(base, ctx.dim, indices, grad_values)
        return (grad,) + (None,) * (n_params - 1)

    @staticmethod
    def jvp(ctx, x_t, *_params):
        (indices,) = ctx.saved_tensors
        if ctx.dim is None:
            return x_t.reshape(tuple(indices.shape)), None
        return Gather.apply(x_t, ctx.dim, indices), None


class Sort(_SortLike):
    """(values, indices) = x sorted along dim (stable; NaN largest)."""
    public_name = "sort"

    @staticmethod
    def forward(x, dim=-1, descending=False, stable=False):
        d = wrap_dim(dim, x.ndim)
        if x.ndim == 0:
            return x.copy(), np.zeros((), np.int64)
        idx = _argsort(x, d, descending)
        return np.take_along_axis(x, idx, d), idx.astype(np.int64, copy=False)

    @classmethod
    def interface(cls, x, dim=-1, descending=False, stable=False):
        return SortResult(*cls.apply(x, dim, descending, stable))


class Topk(_SortLike):
    """(values, indices) = the k largest (or smallest) entries of x along dim, sorted."""
    public_name = "topk"
    _dim_arg = 2

    @staticmethod
    def forward(x, k, dim=-1, largest=True, sorted=True):
        d = wrap_dim(dim, x.ndim)
        n = x.shape[d] if x.ndim else 1
        if not 0 <= k <= n:
            raise RuntimeError("selected index k out of range")
        if x.ndim == 0:
            return (x.copy(), np.zeros((), np.int64)) if k else \
                (x.reshape(1)[:0].copy(), np.zeros(0, np.int64))
        idx = _argsort(x, d, largest)[_along(d, slice(0, k))]
        return np.take_along_axis(x, idx, d), idx.astype(np.int64)

    @classmethod
    def interface(cls, x, k, dim=-1, largest=True, sorted=True):
        return TopkResult(*cls.apply(x, k, dim, largest, sorted))
