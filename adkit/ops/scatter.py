"""Indexing along one dim: index_select, gather, scatter, scatter_add, index_add,
index_add_.

Owns: each op's forward (numpy), rules (gather and scatter_add are each other's
backward) and native index rule (`native_index`: a gather or a scatter along dim with
its bounds checked, see _indexed.py). Index tensors are arguments, read when the op
runs, so they may be traced.
"""
import math

import numpy as np

from ..tensor import Tensor, zeros
from . import _sparsity
from ._families import ArrayFunction, _logical
from ._helpers import wrap_dim
from ._indexed import Access, Indexed, along_access, identity_dims, select_access
from .indexing import IndexScatter, SetItem, inplace_vmap_error
from .shape import batch_first, torch_type_name


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


def _flat_batched(t, bdim, size):
    """t batched at the front (expanded if unbatched), its per-example dims flattened:
    how forward treats the operands of an op on a per-example scalar."""
    t = batch_first(t, bdim, size)
    return t.reshape((size, math.prod(t.shape[1:])))


def _vector_index(index, bdim, dim, shape):
    """A batched index of one vector per example, as a gather/scatter_add index for an
    operand of `shape` (batch dim first): its entries along `dim`, broadcast elsewhere."""
    k = _logical(index, bdim).size
    view, target = [1] * len(shape), list(shape)
    view[0], view[dim], target[dim] = shape[0], k, k
    return index.movedim(bdim, 0).reshape(tuple(view)).expand(tuple(target))


class IndexSelect(ArrayFunction):
    """y = x taken at `index` (a vector) along dim;
    grad_x = index_add(zeros(x.shape), dim, index, grad_out)."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
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

    @classmethod
    def vmap(cls, info, in_dims, x, dim, index):
        """Batching rule: x batched at the front (expanded if not), dim shifted past it."""
        # a batched index (one vector per example) becomes a gather index
        size, example = info.batch_size, _logical(x, in_dims[0])
        d = wrap_dim(dim, example.ndim)
        xb = batch_first(x, in_dims[0], size)
        if example.ndim == 0:  # as a one-element vector, like forward
            xb = xb.reshape((size, 1))
        if in_dims[2] is None:
            out = cls.apply(xb, d + 1, index)
        else:
            _index_vector(_logical(index, in_dims[2]), "index_select")
            out = Gather.apply(xb, d + 1, _vector_index(index, in_dims[2], d + 1, xb.shape))
        return (out.reshape((size,)) if example.ndim == 0 else out), 0

    native_index = staticmethod(select_access)


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
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
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

    @classmethod
    def vmap(cls, info, in_dims, x, dim, index):
        """Batching rule: x, index batched at the front (expanded if not), dim shifted."""
        size, example = info.batch_size, _logical(x, in_dims[0])
        d = wrap_dim(dim, example.ndim)
        if example.ndim == 0:  # as one-element vectors, like forward
            out = cls.apply(_flat_batched(x, in_dims[0], size), 1,
                            _flat_batched(index, in_dims[2], size))
            return out.reshape((size,) + _logical(index, in_dims[2]).shape), 0
        return cls.apply(batch_first(x, in_dims[0], size), d + 1,
                         batch_first(index, in_dims[2], size)), 0

    @staticmethod
    def native_index(params, args):
        """Native code: a gather along dim (each index checked: 0 <= i < size)."""
        return along_access("gather()", "gather", params, args)


class ScatterAdd(ArrayFunction):
    """y = copy of x with y[i with i[dim] = index[i]] += src[i] for each i in index;
    grad_x = grad_out,  grad_src = gather(grad_out, dim, index) (zero past index)."""
    sparsity = classmethod(lambda cls, x, dim, index, src:  # sparsity rule
                           _sparsity.scattered_add(x, dim, index, src))
    curvature = "linear"
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

    @classmethod
    def vmap(cls, info, in_dims, x, dim, index, src):
        """Batching rule: x, index, src batched at the front (expanded if not), dim shifted."""
        size, example = info.batch_size, _logical(x, in_dims[0])
        d = wrap_dim(dim, example.ndim)
        operands = ((x, in_dims[0]), (index, in_dims[2]), (src, in_dims[3]))
        if example.ndim == 0:  # as one-element vectors, like forward
            xb, ib, sb = (_flat_batched(t, b, size) for t, b in operands)
            return cls.apply(xb, 1, ib, sb).reshape((size,)), 0
        xb, ib, sb = (batch_first(t, b, size) for t, b in operands)
        return cls.apply(xb, d + 1, ib, sb), 0

    @staticmethod
    def native_index(params, args):
        """Native code: a copy of x, then src added along dim (repeats add up)."""
        return along_access("scatter_add()", "add", params, args, 3)


class Scatter(ArrayFunction):
    """y = copy of x with y[i with i[dim] = index[i]] = src[i] (or the number src) for
    each i in index (of repeated indices, the last write wins, as numpy assigns);
    grad_x = grad_out zeroed where written,  grad_src = gather(grad_out, dim, index)."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    public_name = "scatter"

    @classmethod
    def interface(cls, x, dim, index, src=None, value=None):
        """PyTorch's scatter(dim, index, src) and scatter(dim, index, value=...)."""
        return cls.apply(x, dim, index, value if src is None else src)

    @staticmethod
    def forward(x, dim, index, src):
        index = np.asarray(index)
        d = wrap_dim(dim, x.ndim)
        tensor = isinstance(src, np.ndarray)
        if tensor and src.dtype != x.dtype:
            raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
        if x.ndim == 0:  # as a 1-element vector
            return Scatter.forward(x.reshape(1), 0, index.reshape(-1),
                                   src.reshape(-1) if tensor else src).reshape(())
        _check_index_tensor(x, d, index, "scatter", src if tensor else None)
        out = x.copy()
        out[_scatter_key(index, d)] = src[tuple(slice(s) for s in index.shape)] \
            if tensor else src
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexSelect.setup_context(ctx, inputs, output)
        ctx.src_shape = tuple(np.shape(inputs[3]))

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        grad_x = grad_src = None
        if ctx.needs_input_grad[0]:
            grad_x = Scatter.apply(grad_out, ctx.dim, index, 0.0)
        if ctx.needs_input_grad[3]:
            grad_src = Gather.apply(grad_out, ctx.dim, index)
            if tuple(grad_src.shape) != ctx.src_shape:  # src larger than index: zero-pad
                key = tuple(slice(s) for s in index.shape)
                grad_src = IndexScatter.apply(grad_src, ctx.src_shape, key, True)
        return grad_x, None, None, grad_src

    @staticmethod
    def jvp(ctx, x_t, _dim, _index, src_t):
        (index,) = ctx.saved_tensors
        if x_t is None:
            x_t = zeros(ctx.input_meta[0], dtype=ctx.input_meta[1])
        return Scatter.apply(x_t, ctx.dim, index, 0.0 if src_t is None else src_t)

    @classmethod
    def vmap(cls, info, in_dims, x, dim, index, src):
        """Batching rule: x, index, src batched at the front (expanded if not), dim
        shifted (a number src stays as it is)."""
        size, example = info.batch_size, _logical(x, in_dims[0])
        d = wrap_dim(dim, example.ndim)
        batched = (_flat_batched if example.ndim == 0 else batch_first)
        xb, ib = batched(x, in_dims[0], size), batched(index, in_dims[2], size)
        sb = batched(src, in_dims[3], size) if isinstance(src, Tensor) else src
        if example.ndim == 0:  # as one-element vectors, like forward
            return cls.apply(xb, 1, ib, sb).reshape((size,)), 0
        return cls.apply(xb, d + 1, ib, sb), 0

    @staticmethod
    def native_index(params, args):
        """Native code: a copy of x, then src (or the number) written along dim."""
        return along_access("scatter()", "put", params, args, 3 if 3 in args else None)


# ---------------------------------------------------------------- index_add
def _index_add_into(out, dim, index, source, alpha):
    """out[..., index[i], ...] += alpha * source[..., i, ...] along dim, in place."""
    d, idx, x1, s1 = _check_index_add(out, dim, index, source)
    # PyTorch's 1-D kernel words it as index_select does
    _check_range(idx, x1.shape[d], d, IndexError if x1.ndim == 1 else RuntimeError)
    if alpha != 1:
        s1 = (s1 * alpha).astype(out.dtype, copy=False)
    np.add.at(x1, _along(d, idx), s1)
    return out


def _check_index_add(out, dim, index, source):
    """PyTorch's checks of index_add but the index range: (dim, index vector, out and
    source with per-example scalars as one-element vectors)."""
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
    return d, idx, x1, s1


def _index_add_operands(info, in_dims, x, dim, source):
    """(x, dim, source) for index_add on x batched at the front: source batched at the
    front too, dim shifted; per-example scalars as one-element vectors, like forward."""
    size = info.batch_size
    if x.ndim == 1:
        wrap_dim(dim, 0)
        return x.reshape((size, 1)), 1, _flat_batched(source, in_dims[3], size)
    return x, wrap_dim(dim, x.ndim - 1) + 1, batch_first(source, in_dims[3], size)


def _scatter_index_add(x, d, index, bdim, source, alpha):
    """index_add with a batched index (one vector per example, batch dim `bdim`) on the
    operands of _index_add_operands, out of place, as a scatter_add."""
    _check_index_add(_logical(x, 0), d - 1, _logical(index, bdim), _logical(source, 0))
    if alpha != 1:
        source = source * alpha
        source = source if source.dtype == x.dtype else source.to(x.dtype)
    return ScatterAdd.apply(x, d, _vector_index(index, bdim, d, source.shape), source)


class IndexAdd(ArrayFunction):
    """y = copy of x with y[..., index[i], ...] += alpha * source[..., i, ...] along dim;
    grad_x = grad_out,  grad_source = alpha * index_select(grad_out, dim, index)."""
    @classmethod
    def sparsity(cls, x, dim, index, source, alpha=1):
        """Sparsity rule: x one-to-one, source slices added at index along dim."""
        return _sparsity.index_added(x, dim, index, source)

    curvature = "linear"
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

    @classmethod
    def vmap(cls, info, in_dims, x, dim, index, source, alpha=1):
        """Batching rule: x, source batched at the front (expanded if not), dim shifted."""
        # a batched index (one vector per example) becomes a scatter_add index
        xb = batch_first(x, in_dims[0], info.batch_size)
        x1, d, s1 = _index_add_operands(info, in_dims, xb, dim, source)
        if in_dims[2] is None:
            out = cls.apply(x1, d, index, s1, alpha)
        else:
            out = _scatter_index_add(x1, d, index, in_dims[2], s1, alpha)
        return out.reshape(tuple(xb.shape)), 0

    @staticmethod
    def native_index(params, args):
        """Native code: a copy of x, then alpha * source added along dim at the
        vector's indices (repeats add up)."""
        x, index, source = args[0], args[2], args.get(3)
        if x.ndim == 0 or index.ndim > 1 or source is None or source.dtype != x.dtype \
                or source.ndim != x.ndim:
            return None
        d = wrap_dim(params["dim"], x.ndim)
        if any(a != b for k, (a, b) in enumerate(zip(x.shape, source.shape)) if k != d) \
                or source.shape[d] != index.size:
            return None
        every = tuple(range(x.ndim))
        return Access("index_add()", "add", source.shape, 0,
                      identity_dims(x.ndim, d, Indexed(2, (d,) * index.ndim)), None,
                      (3, every), None, params.get("alpha", 1))


class IndexAdd_(IndexAdd):  # noqa: N801  (PyTorch's name)
    """index_add in place on x; rules as IndexAdd's. Tracing records it as IndexAdd
    when nothing else can see x's old memory."""
    modifies = 0
    public_name = "index_add_"
    variants = ("method",)
    traced_out_of_place = IndexAdd
    native_index = None  # in place: numpy runs it

    @staticmethod
    def forward(x, dim, index, source, alpha=1):
        return _index_add_into(x, dim, index, source, alpha)

    @staticmethod
    def setup_context(ctx, inputs, output):
        IndexAdd.setup_context(ctx, inputs, output)
        ctx.mark_dirty(inputs[0])

    @classmethod
    def vmap(cls, info, in_dims, x, dim, index, source, alpha=1):
        """Batching rule: in place on x's view with the batch dim at the front."""
        # x must be batched; with a batched index, computed out of place and written back
        if in_dims[0] is None:
            raise inplace_vmap_error("index_add_")
        xb = x.movedim(in_dims[0], 0)
        x1, d, s1 = _index_add_operands(info, in_dims, xb, dim, source)
        if in_dims[2] is None:
            cls.apply(x1, d, index, s1, alpha)
        else:
            out = _scatter_index_add(x1, d, index, in_dims[2], s1, alpha)
            SetItem.apply(xb, out.reshape(tuple(xb.shape)), (), None)
        return x, in_dims[0]


# ---------------------------------------------------------------- sort, topk
