"""Indexing by index tensors: x[i], x[..., i, j] = v and index_put(_) when the indices are
adkit tensors (int32/int64), read when the op runs, not when the key is parsed.

Owns: `IndexTensor` (y = x[key]: PyTorch's aten::index), `IndexPutTensor` and
`IndexPutTensor_` (y[key] = v or += v: aten::index_put), the public `index_put` and
`index_put_`, their rules and native index rules (`native_index`, see _indexed.py), and
the assignment helpers x[key] = v shares. The index tensors are arguments of the op (edges
of a traced graph), so a traced index needs no value while tracing: the shape rules read
only shapes. Does not: parse keys (indexing.py decides which key items are tensors) or
index by constant arrays (indexing.py's AdvancedIndex keeps those as static data).

A key here is `positions` (the dims of x, or of the region x[basic], that the index
tensors index, one each, broadcast together) and the index tensors; other dims are full
slices. numpy's rule places the result's index dims where the first indexed dim was when
the indexed dims are adjacent, else first (`_indexed.advanced_shape`).
"""
import numpy as np

from ..tensor import Tensor, _make, zeros
from . import _sparsity
from ._families import ArrayFunction, _logical
from ._helpers import shape_of, sum_to, unwritable_error
from ._indexed import (
    Access,
    advanced_dims,
    advanced_shape,
    broadcast_indices,
    right_aligned,
)
from .shape import batch_first, expand_error, torch_type_name

BAD_INDEX_TENSOR = "tensors used as indices must be long, int, byte or bool tensors"


def inplace_vmap_error(op="inplace arithmetic"):
    """PyTorch's error for an in-place op under vmap on an unbatched self whose other
    arguments are batched (the result could not hold every example)."""
    return RuntimeError(f"vmap: {op}(self, *extra_args) is not possible because there "
                        "exists a Tensor `other` in extra_args that has more elements than "
                        "`self`. This happened due to `other` being vmapped over but `self` "
                        "not being vmapped over in a vmap. Please try to use out-of-place "
                        f"operators instead of {op}.")


def assign(arr, value, basic, advanced):
    """arr[basic][advanced] = value in place (numpy broadcasting), with PyTorch's errors."""
    target = arr if basic is None else arr[basic + (Ellipsis,)]
    try:
        if advanced is None:
            target[...] = value
        else:
            target[advanced] = value
    except ValueError as e:
        if "read-only" in str(e):
            raise unwritable_error(arr) from None
        if advanced is None:
            raise RuntimeError(expand_error(np.asarray(value), target.shape)) from None
        raise RuntimeError(f"shape mismatch: value tensor of shape "
                           f"{list(np.shape(value))} cannot be broadcast to indexing result "
                           f"of shape {list(target[advanced].shape)}") from None


def sum_to_value(grad, shape):
    """grad (of the indexed region's shape) summed to the shape of the value written."""
    extra = len(shape) - grad.ndim
    if extra > 0:  # the value had extra leading size-1 dims
        grad = grad.reshape((1,) * extra + tuple(grad.shape))
    return sum_to(grad, shape)


def tensor_key(shape, positions, indices):
    """The numpy key of `indices` at `positions` of a value of `shape`, after PyTorch's
    checks (integer dtypes, each index in -n <= i < n, broadcastable shapes)."""
    key = [slice(None)] * (max(positions, default=-1) + 1)
    for p, index in zip(positions, indices, strict=True):
        if index.dtype.kind not in "iu":
            raise IndexError(BAD_INDEX_TENSOR)
        n = shape[p]
        bad = index[(index < -n) | (index >= n)]
        if bad.size:
            raise IndexError(f"index {bad.flat[0]} is out of bounds for dimension {p} "
                             f"with size {n}")
        key[p] = index
    broadcast_indices([np.shape(i) for i in indices])
    return tuple(key)


def _spec(shape, dtype):
    """A zero-cost array of `shape` and `dtype` (what a shape rule returns)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def _region_shape(shape, basic):
    return shape if basic is None else np.broadcast_to(
        np.zeros((), np.int8), shape)[basic + (Ellipsis,)].shape


def _batched_indices(indices, bdims, size, rank):
    """For a batch of `size` examples: an arange index for the batch dim, then each
    index with its batch dim first and its example dims right-aligned to `rank` (an
    unbatched index is left as it is: it broadcasts over the batch)."""
    out = [_make(np.arange(size, dtype=np.int64).reshape((size,) + (1,) * rank))]
    for index, bdim in zip(indices, bdims, strict=True):
        if bdim is not None:
            index = index.movedim(bdim, 0)
            index = index.reshape((size,) + (1,) * (rank - index.ndim + 1) +
                                  tuple(index.shape[1:]))
        out.append(index)
    return out


def _index_dims_first(start, nb, ndim):
    """The permutation taking (batch, index dims, rest) to (batch, rest[:start], index
    dims, rest[start:]): the batched result of IndexTensor in per-example order."""
    rest = ndim - 1 - nb
    return [0] + [1 + nb + i for i in range(start)] + [1 + i for i in range(nb)] + \
        [1 + nb + i for i in range(start, rest)]


class IndexTensor(ArrayFunction):
    """y = x[key] (integer index tensors at `positions`, full slices elsewhere);
    grad_x = zeros(x.shape) with grad_out added at key (index_put with accumulate=True,
    so repeated indices add up)."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"

    @staticmethod
    def forward(x, positions, *indices):
        return x[tensor_key(x.shape, positions, indices)]

    @staticmethod
    def infer(x, positions, *indices):
        """Shape rule: numpy's advanced indexing, from the shapes alone."""
        if any(i.dtype.kind not in "iu" for i in indices):
            raise IndexError(BAD_INDEX_TENSOR)
        shape, _ = advanced_shape(x.shape, positions,
                                  broadcast_indices([i.shape for i in indices]))
        return _spec(shape, x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_meta = (tuple(inputs[0].shape), inputs[0].dtype)
        ctx.positions = inputs[1]
        ctx.save_for_backward(*inputs[2:])

    @staticmethod
    def backward(ctx, grad_out):
        indices = ctx.saved_tensors
        base = zeros((), dtype=grad_out.dtype).expand(ctx.input_meta[0])
        grad_x = IndexPutTensor.apply(base, grad_out, None, ctx.positions, True, *indices)
        return (grad_x, None) + (None,) * len(indices)

    @staticmethod
    def jvp(ctx, x_t, _positions, *_indices):
        return IndexTensor.apply(x_t, ctx.positions, *ctx.saved_tensors)

    @classmethod
    def vmap(cls, info, in_dims, x, positions, *indices):
        """Batching rule: the batch dim indexed too (by an arange), so every example
        reads its own slice with its own indices; the index dims then come first and
        are moved to where one example has them."""
        size = info.batch_size
        example = _logical(x, in_dims[0])
        index_shape = broadcast_indices([_logical(i, d).shape
                                         for i, d in zip(indices, in_dims[2:])])
        _, start = advanced_shape(example.shape, positions, index_shape)
        out = cls.apply(batch_first(x, in_dims[0], size), (0,) + tuple(p + 1 for p in positions),
                        *_batched_indices(indices, in_dims[2:], size, len(index_shape)))
        if start:
            out = out.permute(_index_dims_first(start, len(index_shape), out.ndim))
        return out, 0

    @staticmethod
    def native_index(params, args):
        """Native code: a gather at the indices (negative ones wrap)."""
        positions = tuple(params["positions"])
        index_positions = sorted(p for p in args if p >= 2)
        shape, dims = advanced_dims(args[0].shape, positions, index_positions,
                                    [args[p].shape for p in index_positions])
        return Access("x[index]", "gather", shape, 0, dims, wraps=True)


class IndexPutTensor(ArrayFunction):
    """y = copy of x with y[basic][key] = values (accumulate: += values, repeated indices
    adding up; else the last write of a repeated index wins, as in numpy);
    grad_x = grad_out with the region zeroed (grad_out itself when accumulating),
    grad_values = sum_to(grad_out[basic][key], values.shape)."""
    @classmethod
    def sparsity(cls, x, values, basic, positions, accumulate, *indices):
        """Sparsity rule: writes move elements; accumulation adds repeats: unknown."""
        if accumulate:
            return None
        return _sparsity.moved(cls, x, values, basic, positions, accumulate, *indices)

    curvature = "linear"
    public_name = "index_put"

    @staticmethod
    def forward(x, values, basic, positions, accumulate, *indices):
        out = x.copy()
        _put(out, values, basic, positions, accumulate, indices)
        return out

    @classmethod
    def interface(cls, x, indices, values, accumulate=False):
        """PyTorch's index_put(indices, values, accumulate=False): index tensors for the
        leading dims, values a tensor of x's dtype."""
        values, positions, tensors = _index_put_args(x, indices, values)
        return cls.apply(x, values, None, positions, accumulate, *tensors)

    @staticmethod
    def infer(x, values, basic, positions, accumulate, *indices):
        """Shape rule: x's shape and dtype (the key's shapes checked)."""
        region = _region_shape(x.shape, basic)
        if positions:
            advanced_shape(region, positions, broadcast_indices([i.shape for i in indices]))
        return _spec(x.shape, x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.basic, ctx.positions, ctx.accumulate = inputs[2], inputs[3], inputs[4]
        ctx.value_shape = shape_of(inputs[1])
        ctx.output_shape = tuple(output.shape)
        ctx.save_for_backward(*inputs[5:])

    @staticmethod
    def backward(ctx, grad_out):
        indices = ctx.saved_tensors
        grad_x = grad_v = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_out if ctx.accumulate else IndexPutTensor.apply(
                grad_out, 0.0, ctx.basic, ctx.positions, False, *indices)
        if ctx.needs_input_grad[1]:
            region = grad_out if ctx.basic is None else grad_out[ctx.basic]
            if ctx.positions:
                region = IndexTensor.apply(region, ctx.positions, *indices)
            grad_v = sum_to_value(region, ctx.value_shape)
        return (grad_x, grad_v, None, None, None) + (None,) * len(indices)

    @staticmethod
    def jvp(ctx, x_t, v_t, _basic, _positions, _accumulate, *_indices):
        if x_t is None and v_t is None:
            return None
        if x_t is None:
            x_t = zeros((), dtype=v_t.dtype).expand(ctx.output_shape)
        return IndexPutTensor.apply(x_t, 0.0 if v_t is None else v_t, ctx.basic,
                                    ctx.positions, ctx.accumulate, *ctx.saved_tensors)

    @classmethod
    def vmap(cls, info, in_dims, x, values, basic, positions, accumulate, *indices):
        """Batching rule: x batched at the front (expanded if not; in place, x must be
        batched), the batch dim indexed by an arange, values batched where that puts
        the batch and index dims (first)."""
        if in_dims[0] is None and cls.modifies is not None:
            raise inplace_vmap_error("index_put_")
        size = info.batch_size
        region = _region_shape(_logical(x, in_dims[0]).shape, basic)
        index_shape = broadcast_indices([_logical(i, d).shape
                                         for i, d in zip(indices, in_dims[5:])])
        written, start = advanced_shape(region, positions, index_shape) if positions \
            else (region, 0)
        values = _batched_values(values, in_dims[1], written, start, len(index_shape))
        out = cls.apply(batch_first(x, in_dims[0], size), values,
                        None if basic is None else (slice(None),) + basic,
                        (0,) + tuple(p + 1 for p in positions), accumulate,
                        *_batched_indices(indices, in_dims[5:], size, len(index_shape)))
        return (x, in_dims[0]) if cls.modifies is not None else (out, 0)

    @staticmethod
    def native_index(params, args):
        """Native code: a copy of x, then a scatter (or scatter-add) of the values."""
        basic, positions = params["basic"], tuple(params["positions"])
        region = _region_shape(args[0].shape, basic)
        index_positions = sorted(p for p in args if p >= 5)
        if positions:
            shape, dims = advanced_dims(region, positions, index_positions,
                                        [args[p].shape for p in index_positions])
        else:
            shape, dims = tuple(region), tuple(range(len(region)))
        return _put_access("index_put (x[index] = value)", shape, dims, basic, args,
                           params.get("values"), params["accumulate"])


def _put_access(name, shape, dims, basic, args, value, accumulate):
    """The Access of a put of values (argument 1, or the number `value`) broadcast to
    `shape`, into the region x[basic] of a copy of x (values cast to x's dtype)."""
    values = None
    if 1 in args:
        at = right_aligned(args[1].shape, shape)
        if at is None:
            return None
        values, value = (1, at), None
    region = None if basic is None else (lambda a: a[basic + (Ellipsis,)])
    return Access(name, "add" if accumulate else "put", shape, 0, dims, region, values,
                  value, 1, True)


def _put(out, values, basic, positions, accumulate, indices):
    """out[basic][key] = values (or += values) in place."""
    target = out if basic is None else out[basic + (Ellipsis,)]
    key = tensor_key(target.shape, positions, indices)
    if not accumulate:
        assign(out, values, basic, key)
        return
    values = np.asarray(values, dtype=out.dtype)
    try:
        np.add.at(target, key, values)
    except ValueError:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} "
                           "cannot be broadcast to indexing result of shape "
                           f"{list(target[key].shape)}") from None


def _batched_values(values, bdim, written, start, nb):
    """values of y[key] = values for the batched op: per-example dims right-aligned to
    the rank of the written region (numpy drops leading 1s), the batch dim (or a size-1
    dim, if unbatched) first, then the index dims, then the other region dims (where
    the batched op writes them). A number is left as it is."""
    if not isinstance(values, Tensor):
        return values
    values = values.unsqueeze(0) if bdim is None else values.movedim(bdim, 0)
    shape = tuple(values.shape[1:])
    while len(shape) > len(written) and shape[0] == 1:
        shape = shape[1:]
    shape = (1,) * (len(written) - len(shape)) + shape
    values = values.reshape((values.shape[0],) + shape)
    if not start:
        return values
    rest = len(written) - nb
    return values.permute([0] + [1 + start + i for i in range(nb)] +
                          [1 + i for i in range(start)] +
                          [1 + nb + i for i in range(start, rest)])


def _index_put_args(x, indices, values):
    """(values, positions, index tensors) of index_put's call, after PyTorch's checks: a
    bool mask among the indices stands for the index tensors of its True elements."""
    if not isinstance(values, Tensor):
        raise TypeError(f"index_put(): argument 'values' (position 2) must be Tensor, not "
                        f"{type(values).__name__}")
    if values.dtype != x.dtype:
        names = [torch_type_name(t.dtype.np) for t in (x, values)]
        raise RuntimeError("Index put requires the source and destination dtypes match, "
                           f"got {names[0]} for the destination and {names[1]} for the "
                           "source.")
    if len(indices) > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim} "
                         f"(got {len(indices)})")
    positions, tensors = [], []
    for index in indices:
        if index.dtype.np == np.bool_:
            for nonzero in np.nonzero(np.asarray(index)):  # its values: a static mask
                positions.append(len(positions))
                tensors.append(_make(nonzero))
        else:
            positions.append(len(positions))
            tensors.append(index)
    return values, tuple(positions), tensors


class IndexPutTensor_(IndexPutTensor):
    """index_put in place on x; rules as IndexPutTensor's. Tracing records it as
    IndexPutTensor when nothing else can see x's old memory."""
    modifies = 0
    public_name = "index_put_"
    variants = ("method",)
    infer = None  # the shape rule runs forward: it reports that y is x
    traced_out_of_place = IndexPutTensor
    native_index = None  # in place: numpy runs it

    @staticmethod
    def forward(x, values, basic, positions, accumulate, *indices):
        _put(x, values, basic, positions, accumulate, indices)
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexPutTensor.setup_context(ctx, inputs, output)
        ctx.mark_dirty(inputs[0])
