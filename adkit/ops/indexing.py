"""Indexing ops: x[key], x[key] = value, index_select, gather, scatter_add, index_add(_),
sort, topk.

Owns: parsing an index key the way PyTorch applies it, in two steps: basic indexing
(ints, slices, None: a view, `BasicIndex`), then advanced indexing with integer arrays
on that view (a copy, `AdvancedIndex`); and each op's rules. Integer arrays and lists in
a key are static data (never differentiated); an integer tensor of one dim or more is an
argument of the op (tensor_index.py's IndexTensor / IndexPutTensor_), read when it runs,
so a traced index works. A bool mask tensor without values (traced, batched) can be
written through (`x[mask] = v` is a where) but not read (`x[mask]` has as many elements
as the mask has True ones). Does not: reshape or join tensors (see shape.py).
"""
import numpy as np

from ..tensor import AbstractTensor, Tensor, _make, zeros
from . import _sparsity
from ._families import ArrayFunction, _logical, public
from ._helpers import (
    Fill,
    NoDecomposition,
    basic_view,
    broadcast_layout,
    c_strides,
    moves_by_forward,
    shape_of,
)
from .comparison import Where
from .shape import batch_first
from .tensor_index import (
    BAD_INDEX_TENSOR,
    IndexPutTensor_,
    IndexTensor,
    assign,
    inplace_vmap_error,
    sum_to_value,
)


# ---------------------------------------------------------------- parsing a key
def _index_item(item):
    """One key item as int, slice, None, Ellipsis, or an int64 / bool ndarray."""
    if item is None or item is Ellipsis:
        return item
    if isinstance(item, Tensor):
        kind = item.dtype.np.kind
        if kind in "iu" and (item.ndim or isinstance(item, AbstractTensor)):
            return item  # an index tensor: an argument of the op, read when it runs
        if kind == "b" and isinstance(item, AbstractTensor):
            item._value_error("x[mask] with a bool mask (the result has one element per "
                              "True element: its shape depends on the mask's values)")
        if kind not in "iub":
            raise IndexError(BAD_INDEX_TENSOR)
        item = np.asarray(item)
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
        raise IndexError(BAD_INDEX_TENSOR)
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                     f"Variables are valid indices (got {type(item).__name__})")


def _consumed(item):
    """How many dims of the indexed tensor an item uses up."""
    if isinstance(item, np.ndarray):
        return item.ndim if item.dtype.kind == "b" else 1
    if isinstance(item, Tensor):
        return item.ndim if item.dtype.np.kind == "b" else 1
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
        elif isinstance(item, np.ndarray) and item.ndim == 0 and item.dtype.kind == "b":
            # x[True]: a new dim of size 1
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
        elif isinstance(item, Tensor):  # checked when the op runs
            key.append(item)
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
    arrays = [a for a in key if isinstance(a, (np.ndarray, Tensor))]
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
    # sparsity rule: y's sets are x's, indexed the same way (ops/_sparsity.py)
    sparsity = classmethod(lambda cls, x, key: {0: _sparsity.indexed(key)})
    curvature = "linear"
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

    @classmethod
    def vmap(cls, info, in_dims, x, key):
        """Batching rule: batch dim to the front, a full slice for it leading the key."""
        return cls.apply(x.movedim(in_dims[0], 0), (slice(None),) + key), 0


def _advanced_bdim(key):
    """Where the batch dim lands in y[(slice(None),) + key] for y batched at the front:
    numpy moves the broadcast dims of index arrays separated by a slice to the front of
    the result, before it; adjacent index arrays leave it first."""
    arrays = [i for i, k in enumerate(key) if isinstance(k, np.ndarray)]
    if arrays and arrays[-1] - arrays[0] + 1 != len(arrays):
        return len(np.broadcast_shapes(*(key[i].shape for i in arrays)))
    return 0


class AdvancedIndex(ArrayFunction):
    """y = x[key] for a key of full slices and integer arrays (numpy's advanced indexing,
    a copy);  grad_x = zeros(x.shape) with grad_out added at key (repeats accumulate)."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    native_moves = classmethod(moves_by_forward)  # native code: a gather by index table

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

    @classmethod
    def vmap(cls, info, in_dims, x, key):
        """Batching rule: batch dim to the front, a full slice for it leading the key."""
        # numpy may move the index dims before it: _advanced_bdim says where it lands
        out = cls.apply(x.movedim(in_dims[0], 0), (slice(None),) + key)
        return out, _advanced_bdim(key)


class IndexScatter(ArrayFunction):
    """y = zeros(shape) with y[key] += g (np.add.at, so repeated indices accumulate);
    the adjoint of x[key]:  grad_g = grad_out[key]."""
    @classmethod
    def sparsity(cls, g, shape, key, basic):
        """Sparsity rule: a basic key writes each element once (moved); an advanced
        one may add repeats up: unknown."""
        return _sparsity.moved(cls, g, shape, key, basic) if basic else None

    curvature = "linear"

    @classmethod
    def native_moves(cls, out_shape, g, shape, key, basic):
        """Native code: a scatter by index table (see _helpers.moves_by_forward for
        the contract). np.add.at adds repeated indices up, so its table comes from the
        key (the result's flat index of each element of g), not from numbering."""
        if basic:
            return moves_by_forward(cls, out_shape, g, shape, key, basic)
        dst = np.arange(int(np.prod(out_shape)), dtype=np.int64).reshape(out_shape)[key]
        if dst.shape != g.shape:
            return None
        return g.reshape(-1).astype(np.int64), dst.reshape(-1), True

    @staticmethod
    def native_copy(params, sources, out_shape):
        """Native code for a basic key (slices, ints, None): zeros, then g copied into
        the strided view of the result the key selects (no index tables)."""
        if not params["basic"] or len(sources) != 1:
            return None
        (g,) = sources
        shape, offset, strides = basic_view(out_shape, params["key"])
        if shape != tuple(g.shape):
            return None
        return [(Fill(tuple(out_shape)), 0, c_strides(out_shape)), (g, offset, strides)]

    @staticmethod
    def decomposition(g, shape, key, basic):
        """For fusion, a key of ints and whole slices (x[..., 1] in a gradient): g with
        a dim put back at each int, kept where a one-hot mask is true: elementwise, so
        the sums it feeds stay in one kernel."""
        if not basic or len(key) > len(shape) or not all(
                type(k) is int or k == slice(None) for k in key):
            raise NoDecomposition
        mask = np.zeros([n if type(k) is int else 1 for k, n in zip(key, shape)] +
                        [1] * (len(shape) - len(key)), bool)
        mask[tuple(k if type(k) is int else 0 for k in key)] = True
        for d, k in enumerate(key):
            g = g.unsqueeze(d) if type(k) is int else g
        return Where.apply(_make(mask), g, zeros((), dtype=g.dtype))

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

    @classmethod
    def vmap(cls, info, in_dims, g, shape, key, basic):
        """Batching rule: g batched where x[(slice(None),) + key] has it; out at the front."""
        g = g.movedim(in_dims[0], 0 if basic else _advanced_bdim(key))
        return cls.apply(g, (info.batch_size,) + tuple(shape), (slice(None),) + key,
                         basic), 0


def _index(x, basic, advanced):
    out = x if basic is None else BasicIndex.apply(x, basic)
    if advanced is None:
        return out
    tensors = _tensor_key(advanced)
    if tensors is not None:
        return IndexTensor.apply(out, tensors[0], *tensors[1])
    return AdvancedIndex.apply(out, advanced)


def _tensor_key(advanced):
    """(positions, index tensors) of an advanced key holding index tensors (its arrays,
    static, become constant tensors beside them); None for a key of arrays alone."""
    if not any(isinstance(k, Tensor) for k in advanced):
        return None
    positions = tuple(d for d, k in enumerate(advanced) if not isinstance(k, slice))
    return positions, [k if isinstance(k, Tensor) else _make(k) for k in advanced
                       if not isinstance(k, slice)]


@public("__getitem__", variants=("method",))
def getitem(x, key):
    """x[key] with PyTorch's semantics (ints, slices, None, Ellipsis, bool masks, integer
    arrays/tensors/lists): a view unless the key holds arrays."""
    basic, advanced = parse_key(key, x.shape)
    if basic is None and advanced is None:
        basic = ()
    return _index(x, basic, advanced)


# ---------------------------------------------------------------- x[key] = value
class IndexPut(ArrayFunction):
    """y = copy of x with y[key] = value;  grad_x = grad_out with the region zeroed,
    grad_value = sum_to(grad_out[key], value.shape)."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"

    @staticmethod
    def native_copy(params, sources, out_shape):
        """Native code for a key of ints and slices: x copied, then the value into the
        view of the result the key selects (read broadcast, or a number filled in)."""
        if params.get("advanced") is not None or params.get("basic") is None:
            return None
        shape, offset, strides = basic_view(out_shape, params["basic"])
        if len(sources) == 2:
            value = sources[1]
            if len(value.shape) > len(shape) or \
                    np.broadcast_shapes(tuple(value.shape), shape) != shape:
                return None
            read = broadcast_layout(value, shape)
        else:
            read = Fill(shape, float(params["value"]))
        return [(sources[0], 0, c_strides(out_shape)), (read, offset, strides)]

    @staticmethod
    def forward(x, value, basic, advanced):
        out = x.copy()
        assign(out, value, basic, advanced)
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
            grad_v = sum_to_value(_index(grad_out, ctx.basic, ctx.advanced),
                                   ctx.value_shape)
        return grad_x, grad_v, None, None

    @staticmethod
    def jvp(ctx, x_t, v_t, _basic, _advanced):
        if x_t is None:
            x_t = zeros(ctx.output_meta[0], dtype=ctx.output_meta[1])
        return IndexPut.apply(x_t, 0 if v_t is None else v_t, ctx.basic, ctx.advanced)

    @classmethod
    def vmap(cls, info, in_dims, x, value, basic, advanced):
        """Batching rule: x batched at the front, value batched where the region has it."""
        # in place, x must be batched; out of place, an unbatched x is expanded
        if in_dims[0] is None and cls.modifies is not None:
            raise inplace_vmap_error()
        example = _logical(x, in_dims[0])
        target = example if basic is None else example[basic + (Ellipsis,)]
        region = target.shape if advanced is None else target[advanced].shape
        where = 0 if advanced is None else _advanced_bdim(advanced)
        value = _batched_value(value, in_dims[1], region, where)
        lead = (slice(None),)
        basic = None if basic is None else lead + basic
        advanced = None if advanced is None else lead + advanced
        out = cls.apply(batch_first(x, in_dims[0], info.batch_size), value, basic, advanced)
        return (x, in_dims[0]) if cls.modifies is not None else (out, 0)


def _batched_value(value, bdim, region, where):
    """The value of x[key] = value, for the region batched at dim `where`: per-example
    dims right-aligned to the region's rank (numpy drops leading 1s), the batch dim (or
    a size-1 dim, if unbatched) at `where`. A number is left as it is."""
    if not isinstance(value, Tensor):
        return value
    value = value.unsqueeze(0) if bdim is None else value.movedim(bdim, 0)
    shape = tuple(value.shape[1:])
    while len(shape) > len(region) and shape[0] == 1:
        shape = shape[1:]
    shape = (1,) * (len(region) - len(shape)) + shape
    return value.reshape((value.shape[0],) + shape).movedim(0, where)


class SetItem(IndexPut):
    """x[key] = value, in place; rules as IndexPut's."""
    modifies = 0
    public_name = "__setitem__"
    variants = ("method",)
    traced_out_of_place = IndexPut  # a write nothing else sees (ir/trace.py)

    @staticmethod
    def forward(x, value, basic, advanced):
        assign(x, value, basic, advanced)
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexPut.setup_context(ctx, inputs, output)
        ctx.mark_dirty(inputs[0])

    @classmethod
    def interface(cls, x, key, value):
        items = key if isinstance(key, tuple) else (key,)
        if not isinstance(value, (Tensor, int, float, bool, np.number, np.bool_)):
            value = Tensor(value, dtype=x.dtype)
        if any(_unknown_mask(i) for i in items):
            return _masked_write(x, items, value)
        basic, advanced = parse_key(key, x.shape)
        tensors = None if advanced is None else _tensor_key(advanced)
        if tensors is not None:
            return IndexPutTensor_.apply(x, value, basic, tensors[0], False, *tensors[1])
        return cls.apply(x, value, basic, advanced)


def _unknown_mask(item):
    """Whether a key item is a bool tensor without values (traced, batched)."""
    return isinstance(item, AbstractTensor) and item.dtype.np == np.bool_


def _masked_write(x, items, value):
    """x[key] = value for a key whose one advanced item is a bool mask without values:
    the region becomes where(mask, value, region), written with index_put_. The value
    must not depend on how many elements are True (a number, or of size 1 along the
    mask's dims), as for any mask numpy would broadcast it against."""
    at = next(k for k, i in enumerate(items) if _unknown_mask(i))
    mask = items[at]
    rest = list(items[:at]) + [slice(None)] * mask.ndim + list(items[at + 1:])
    basic, advanced = parse_key(tuple(rest), x.shape)
    if advanced is not None:
        mask._value_error("x[key] = v with a bool mask beside index arrays")
    if all(b == slice(None) for b in basic):
        basic = None
    region_shape = _region(x.shape, basic)
    d = _dims_before(items, at, len(x.shape))
    _check_mask_shape(mask.shape, region_shape, d)
    after = len(region_shape) - d - mask.ndim
    cond = mask if d == after == 0 else \
        mask.reshape((1,) * d + tuple(mask.shape) + (1,) * after)
    if isinstance(value, Tensor):
        value = _mask_value(value, len(region_shape), d, mask.ndim, mask)
    region = x if basic is None else BasicIndex.apply(x, basic)
    new = Where.apply(cond, value, region)
    del region  # no view of x left alive: tracing can record the write out of place
    if new.dtype != x.dtype:
        new = new.to(x.dtype)
    return IndexPutTensor_.apply(x, new, basic, (), False)


def _region(shape, basic):
    return tuple(shape) if basic is None else \
        np.broadcast_to(np.empty((), np.int8), shape)[basic + (Ellipsis,)].shape


def _dims_before(items, at, ndim):
    """How many dims of x[basic] the key items before items[at] make: None and slices one
    each, ints none, an Ellipsis the dims no item uses."""
    count = 0
    for item in items[:at]:
        if item is Ellipsis:
            count += ndim - sum(_consumed(i) for i in items)
        elif item is None or isinstance(item, slice):
            count += 1
    return count


def _check_mask_shape(mask_shape, region_shape, d):
    for j, n in enumerate(mask_shape):
        if n != region_shape[d + j]:
            raise IndexError(f"The shape of the mask {list(mask_shape)} at index {j} does "
                             "not match the shape of the indexed tensor "
                             f"{list(region_shape)} at index {d + j}")


def _mask_value(value, rank, d, k, mask):
    """value of x[mask] = value, reshaped to broadcast against the region (of `rank`
    dims, the mask at dims d .. d+k-1) as where's other operand."""
    shape = tuple(value.shape)
    width = rank - k + 1  # the rank of x[mask]: the mask's dims are one dim there
    while len(shape) > width and shape[0] == 1:
        shape = shape[1:]
    shape = (1,) * (width - len(shape)) + shape
    if len(shape) > width or shape[d] != 1:
        mask._value_error(f"x[mask] = v with v of shape {list(value.shape)} (one value "
                          "per True element)")
    return value.reshape(shape[:d] + (1,) * k + shape[d + 1:])


# ---------------------------------------------------------------- index_select, gather
