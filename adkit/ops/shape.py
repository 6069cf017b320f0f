"""Shape ops: reshape, view, expand, squeeze, transpose, permute, cat, stack, split, flip,
repeat, ... Views share data and version counter with their input (`is_view`), as in
PyTorch; the other ops return fresh arrays (never memory shared with an input).

Owns: each op's forward (numpy, usually a view) and its rules, plus the public helpers
built from them (flatten, chunk, view_as, `T`, ...). Does not: index (see indexing.py).
"""
import math

import numpy as np

from .. import dtypes
from . import _sparsity
from ._families import ArrayFunction, ShapeOp, _logical, public
from ._helpers import c_strides, copy_in_order, normalize_dims, wrap_dim
from .conversion import Clone


_TORCH_TYPE_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double",
                     "int32": "Int", "int64": "Long", "bool": "Bool"}


def torch_type_name(np_dtype):
    """PyTorch's scalar type name in error messages: Float, Double, Long, ..."""
    return _TORCH_TYPE_NAMES[dtypes.from_numpy_dtype(np_dtype).name]


def expand_error(x, target):
    """PyTorch's message for an array x that cannot be expanded to shape `target`."""
    shape = x.shape
    if len(target) < len(shape):
        return (f"expand({torch_type_name(x.dtype)}Tensor{{{list(shape)}}}, "
                f"size={list(target)}): the number of sizes provided ({len(target)}) must be "
                f"greater or equal to the number of dimensions in the tensor ({len(shape)})")
    k = next((k for k in range(1, len(shape) + 1) if shape[-k] not in (1, target[-k])), None)
    if k is None:  # a negative size in a new leading dim
        i = next(i for i, s in enumerate(target) if s < 0)
        return (f"The expanded size of the tensor ({target[i]}) isn't allowed in a leading, "
                f"non-existing dimension {i}")
    return (f"The expanded size of the tensor ({target[-k]}) must match the existing size "
            f"({shape[-k]}) at non-singleton dimension {len(target) - k}.  Target sizes: "
            f"{list(target)}.  Tensor sizes: {list(shape)}")


def batch_first(x, bdim, size):
    """x with its batch dim `bdim` moved to the front; an unbatched x (bdim None) gets a
    new front dim expanded to `size` (shared by every example, without a copy)."""
    if bdim is None:
        return x.unsqueeze(0).expand((size,) + tuple(x.shape))
    return x.movedim(bdim, 0)


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


def _infer_size(shape, numel):
    """`shape` with its one -1 resolved, or PyTorch's error for a shape that cannot hold
    `numel` elements."""
    infer, known = None, 1
    for i, s in enumerate(shape):
        if s == -1:
            if infer is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer = i
        elif s < 0:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape "
                               f"{list(shape)}")
        else:
            known *= s
    if infer is None:
        if known == numel:
            return tuple(shape)
    elif known == 0 and numel == 0:
        raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {list(shape)} "
                           "because the unspecified dimension size -1 can be any value and "
                           "is ambiguous")
    elif known and numel % known == 0:
        return tuple(shape[:infer]) + (numel // known,) + tuple(shape[infer + 1:])
    raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")


class _Restride(ShapeOp):
    """Shared rules of ops that only change the shape, not the element order:
    grad_x = grad_out reshaped to x's shape;  out_t = x_t reshaped to the output's."""
    is_view = True
    # sparsity rule: row-major order is kept, so element k is x's element k
    sparsity = classmethod(lambda cls, x, *params: {0: (None, None)})

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.reshape(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, _param):
        return x_t.reshape(ctx.output_shape)

    @classmethod
    def vmap(cls, info, in_dims, x, shape):
        """Batching rule (reshape, view): batch dim to the front, the per-example shape after."""
        x = x.movedim(in_dims[0], 0)
        per_example = _infer_size(shape, math.prod(x.shape[1:]))
        return cls.apply(x, (x.shape[0],) + per_example), 0


class Reshape(_Restride):
    """y = x with a new shape (one dim may be -1), a view when possible;
    grad_x = grad_out reshaped back."""
    public_name = "reshape"
    # native code: a view when numpy makes one (native_view), else a copy loop
    native_copy = staticmethod(copy_in_order)

    @staticmethod
    def forward(x, shape):
        return np.reshape(x, _infer_size(shape, x.size))

    @classmethod
    def interface(cls, x, *shape):
        return cls.apply(x, _shape_args(shape))


class View(_Restride):
    """y = x with a new shape, always a view (an error if the strides do not allow one);
    grad_x = grad_out reshaped back."""
    public_name = "view"
    variants = ("method",)
    # no native view: whether view() may view (or must fail) depends on the strides of
    # the caller's tensor, so numpy decides on each call
    native_view = None

    @staticmethod
    def forward(x, shape):
        try:
            return x.reshape(_infer_size(shape, x.size), copy=False)
        except ValueError:
            raise RuntimeError("view size is not compatible with input tensor's size and "
                               "stride (at least one dimension spans across two contiguous "
                               "subspaces). Use .reshape(...) instead.") from None

    @classmethod
    def interface(cls, x, *shape):
        return cls.apply(x, _shape_args(shape))


class Squeeze(_Restride):
    """y = x without its size-1 dims (all, or those among `dim`; others are kept);
    grad_x = grad_out reshaped back."""
    public_name = "squeeze"

    @staticmethod
    def forward(x, dim=None):
        if dim is None:
            axes = tuple(i for i, s in enumerate(x.shape) if s == 1)
        else:
            axes = tuple(d for d in normalize_dims(dim, x.ndim) if x.ndim and x.shape[d] == 1)
        return np.squeeze(x, axis=axes)

    @classmethod
    def vmap(cls, info, in_dims, x, dim=None):
        """Batching rule: batch dim to the front (never squeezed), the dims shifted past it."""
        x = x.movedim(in_dims[0], 0)
        shape = tuple(x.shape[1:])
        if dim is None:
            dims = tuple(i for i, s in enumerate(shape) if s == 1)
        else:
            dims = normalize_dims(dim, len(shape))  # checked even for a scalar, which
            dims = dims if shape else ()  # has nothing to squeeze
        return cls.apply(x, tuple(d + 1 for d in dims)), 0


class Unsqueeze(_Restride):
    """y = x with a new size-1 dim at `dim`;  grad_x = grad_out reshaped back."""
    public_name = "unsqueeze"

    @staticmethod
    def forward(x, dim):
        return np.expand_dims(x, wrap_dim(dim, x.ndim + 1))

    @classmethod
    def vmap(cls, info, in_dims, x, dim):
        """Batching rule: batch dim to the front, the new dim shifted past it."""
        x = x.movedim(in_dims[0], 0)
        return cls.apply(x, wrap_dim(dim, x.ndim) + 1), 0


@public("view_as", variants=("method",))
def view_as(x, other):
    return View.apply(x, tuple(other.shape))


@public("reshape_as", variants=("method",))
def reshape_as(x, other):
    return Reshape.apply(x, tuple(other.shape))


@public("flatten")
def flatten(x, start_dim=0, end_dim=-1):
    """x with dims start_dim..end_dim merged into one (a 0-d tensor becomes 1-d)."""
    if x.ndim == 0:
        return Reshape.apply(x, (1,))
    start, end = wrap_dim(start_dim, x.ndim), wrap_dim(end_dim, x.ndim)
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = tuple(x.shape)
    return Reshape.apply(x, shape[:start] + (-1,) + shape[end + 1:])


@public("unflatten")
def unflatten(x, dim, sizes):
    """x with dim `dim` split into `sizes` (one of them may be -1)."""
    d = wrap_dim(dim, x.ndim)
    sizes = tuple(int(s) for s in sizes)
    try:
        sizes = _infer_size(sizes, x.shape[d])
    except RuntimeError:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to "
                           f"the size of dim {dim} ({x.shape[d]}) in the input tensor") from None
    shape = tuple(x.shape)
    return Reshape.apply(x, shape[:d] + sizes + shape[d + 1:])


class Expand(ShapeOp):
    """y = x broadcast to `shape` (-1 keeps a dim);  grad_x = sum_to(grad_out, x.shape)."""
    public_name = "expand"
    variants = ("method",)
    is_view = True
    # a fused kernel reads x itself in this op's place, with zero strides along the
    # broadcast dims, so the expanded value is never made
    native_broadcast = True

    @staticmethod
    def forward(x, shape):
        lead = len(shape) - x.ndim
        shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s
                      for i, s in enumerate(shape))
        try:
            return np.broadcast_to(x, shape)
        except ValueError:
            raise RuntimeError(expand_error(x, shape)) from None

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.sum_to_size(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, _shape):
        return x_t.expand(ctx.output_shape)

    @classmethod
    def vmap(cls, info, in_dims, x, shape):
        """Batching rule: batch dim to the front, expanded to (B, *per-example target)."""
        # the per-example dims are right-aligned under the target: pad them with 1s
        x = x.movedim(in_dims[0], 0)
        target = cls.forward(_logical(x, 0), shape).shape  # per-example checks, -1s
        per_example = tuple(x.shape[1:])
        size = x.shape[0]
        x = x.reshape((size,) + (1,) * (len(target) - len(per_example)) + per_example)
        return cls.apply(x, (size,) + target), 0

    @classmethod
    def interface(cls, x, *shape):
        return cls.apply(x, _shape_args(shape))


@public("broadcast_to")
def broadcast_to(x, shape):
    return Expand.apply(x, _shape_args((shape,)))


@public("expand_as", variants=("method",))
def expand_as(x, other):
    return Expand.apply(x, tuple(other.shape))


@public("broadcast_tensors", variants=("function",))
def broadcast_tensors(*tensors):
    """The tensors expanded to their common broadcast shape."""
    shape = ()
    for s in (tuple(t.shape) for t in tensors):
        for k in range(1, min(len(shape), len(s)) + 1):
            a, b = shape[-k], s[-k]
            if a != b and a != 1 and b != 1:
                raise RuntimeError(f"The size of tensor a ({a}) must match the size of "
                                   f"tensor b ({b}) at non-singleton dimension "
                                   f"{max(len(shape), len(s)) - k}")
        shape = np.broadcast_shapes(shape, s)
    return tuple(Expand.apply(t, shape) for t in tensors)


class Transpose(ArrayFunction):
    """y = x with dims dim0 and dim1 swapped;  grad_x = grad_out with them swapped back."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    public_name = "transpose"
    aliases = ("swapaxes", "swapdims")
    is_view = True
    reorders = True  # a view whose elements are out of memory order (see control/hoist.py)

    @staticmethod
    def forward(x, dim0, dim1):
        d0, d1 = wrap_dim(dim0, x.ndim), wrap_dim(dim1, x.ndim)
        return np.swapaxes(x, d0, d1) if x.ndim else x[...]

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dims = (inputs[1], inputs[2])

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.transpose(*ctx.dims), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim0, _dim1):
        return x_t.transpose(*ctx.dims)

    @classmethod
    def vmap(cls, info, in_dims, x, dim0, dim1):
        """Batching rule: batch dim to the front, the swapped dims shifted past it."""
        x = x.movedim(in_dims[0], 0)
        ndim = x.ndim - 1
        d0, d1 = wrap_dim(dim0, ndim), wrap_dim(dim1, ndim)
        if ndim == 0:  # a per-example scalar: nothing to swap
            return cls.apply(x, 0, 0), 0
        return cls.apply(x, d0 + 1, d1 + 1), 0


class Permute(ArrayFunction):
    """y = x with dims reordered, y.shape[i] = x.shape[dims[i]];
    grad_x = grad_out permuted by the inverse order."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    public_name = "permute"
    is_view = True
    reorders = True  # a view whose elements are out of memory order (see control/hoist.py)

    @staticmethod
    def forward(x, dims):
        if len(dims) != x.ndim:
            raise RuntimeError("permute(sparse_coo): number of dimensions in the tensor input "
                               "does not match the length of the desired ordering of "
                               f"dimensions i.e. input.dim() = {x.ndim} is not equal to "
                               f"len(dims) = {len(dims)}")
        dims = tuple(wrap_dim(d, x.ndim) for d in dims)
        if len(set(dims)) != len(dims):
            raise RuntimeError("permute(): duplicate dims are not allowed.")
        return np.transpose(x, dims)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ndim = inputs[0].ndim
        ctx.dims = tuple(wrap_dim(d, ndim) for d in inputs[1])

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.permute(tuple(int(i) for i in np.argsort(ctx.dims))), None

    @staticmethod
    def jvp(ctx, x_t, _dims):
        return x_t.permute(ctx.dims)

    @classmethod
    def vmap(cls, info, in_dims, x, dims):
        """Batching rule: batch dim to the front and kept there, the order shifted past it."""
        x = x.movedim(in_dims[0], 0)
        cls.forward(_logical(x, 0), dims)  # the per-example checks
        return cls.apply(x, (0,) + tuple(wrap_dim(d, x.ndim - 1) + 1 for d in dims)), 0

    @classmethod
    def interface(cls, x, *dims, **kwargs):
        return cls.apply(x, _shape_args(dims or (kwargs["dims"],)))


@public("t")
def t(x):
    """The transpose of a matrix; vectors and scalars are returned as they are (views)."""
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{x.ndim}D")
    return Transpose.apply(x, 0, -1)


@public("T", variants=("property",))
def T(x):  # noqa: N802  (PyTorch's name)
    """x with all its dims reversed."""
    return Permute.apply(x, tuple(range(x.ndim - 1, -1, -1)))


class Contiguous(Clone):
    """y = x copied to C order (x itself when already contiguous);  grad_x = grad_out.
    The rules are Clone's (a copy is a copy); only the public call differs."""
    public_name = "contiguous"
    variants = ("method",)

    @classmethod
    def interface(cls, x, memory_format=None):
        data = getattr(x, "_data", None)
        if isinstance(data, np.ndarray) and data.flags.c_contiguous:
            return x  # PyTorch returns the tensor itself
        return cls.apply(x)


def _flip_axes(dims, ndim):
    """flip's dims wrapped for an ndim-dim tensor, with PyTorch's check for repeats."""
    axes = [wrap_dim(d, ndim) for d in dims]
    for i, d in enumerate(axes):
        if d in axes[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return tuple(axes)


class Flip(ArrayFunction):
    """y = x reversed along each of dims (a copy);  grad_x = grad_out flipped back."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    public_name = "flip"

    @staticmethod
    def native_copy(params, sources, out_shape):
        """Native code: x read with negated strides along dims, copied in that order
        (see _helpers.copy_in_order for the contract)."""
        if len(sources) != 1:
            return None
        (x,) = sources
        offset, strides = x.offset, list(x.strides)
        axes = _flip_axes(params["dims"], len(x.shape)) if x.shape \
            else ()  # a 0-d value flips to itself
        for axis in axes:
            offset += (x.shape[axis] - 1) * strides[axis]
            strides[axis] = -strides[axis]
        return [(x._replace(offset=offset, strides=tuple(strides)), 0, c_strides(x.shape))]

    @staticmethod
    def forward(x, dims):
        axes = _flip_axes(dims, x.ndim)
        return np.flip(x, axes).copy() if x.ndim else x.copy()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dims = inputs[1]

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.flip(ctx.dims), None

    @staticmethod
    def jvp(ctx, x_t, _dims):
        return x_t.flip(ctx.dims)

    @classmethod
    def vmap(cls, info, in_dims, x, dims):
        """Batching rule: batch dim to the front, the flipped dims shifted past it."""
        x = x.movedim(in_dims[0], 0)
        axes = _flip_axes(dims, x.ndim - 1)
        axes = axes if x.ndim > 1 else ()  # a per-example scalar: nothing to flip
        return cls.apply(x, tuple(d + 1 for d in axes)), 0

    @classmethod
    def interface(cls, x, *dims, **kwargs):
        return cls.apply(x, _shape_args(dims or (kwargs["dims"],)))


def _check_repeat(shape, sizes):
    """PyTorch's checks of x.repeat(sizes) for x of `shape`."""
    if len(sizes) < len(shape):
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than "
                           "number of dimensions of tensor")
    shape = (1,) * (len(sizes) - len(shape)) + tuple(shape)
    out_shape = [s * r for s, r in zip(shape, sizes)]
    bad = [s for s in out_shape if s < 0]
    if bad:
        raise RuntimeError(f"Trying to create tensor with negative dimension {bad[0]}: "
                           f"{out_shape}")


class Repeat(ArrayFunction):
    """y = x tiled sizes[i] times along each dim (leading dims added as needed);
    grad_x = grad_out viewed as (r0, s0, r1, s1, ...) and summed over the r's."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    public_name = "repeat"
    variants = ("method",)

    @staticmethod
    def forward(x, sizes):
        _check_repeat(x.shape, sizes)
        return np.tile(x, sizes)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)
        ctx.sizes = inputs[1]

    @staticmethod
    def backward(ctx, grad_out):
        sizes = ctx.sizes
        shape = (1,) * (len(sizes) - len(ctx.input_shape)) + ctx.input_shape
        split = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
        grad = grad_out.reshape(split)
        if sizes:
            grad = grad.sum(tuple(range(0, 2 * len(sizes), 2)))
        return grad.reshape(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, _sizes):
        return x_t.repeat(ctx.sizes)

    @classmethod
    def vmap(cls, info, in_dims, x, sizes):
        """Batching rule: batch dim to the front, repeated once (sizes led by a 1)."""
        x = x.movedim(in_dims[0], 0)
        size, per_example = x.shape[0], tuple(x.shape[1:])
        _check_repeat(per_example, sizes)
        x = x.reshape((size,) + (1,) * (len(sizes) - len(per_example)) + per_example)
        return cls.apply(x, (1,) + tuple(sizes)), 0

    @classmethod
    def interface(cls, x, *sizes):
        return cls.apply(x, _shape_args(sizes))


@public("movedim")
def movedim(x, source, destination):
    """x with dims `source` moved to positions `destination` (ints or sequences), the
    other dims keeping their order (a permute, so a view)."""
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({list(dst)} dims)")
    ndim = x.ndim
    src = [wrap_dim(d, ndim) for d in src]
    dst = [wrap_dim(d, ndim) for d in dst]
    order = [None] * ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(ndim) if d not in src)
    order = [next(rest) if o is None else o for o in order]
    if order == list(range(ndim)):
        return x
    return Permute.apply(x, tuple(order))


@public("select")
def select(x, dim, index):
    """x indexed by `index` along `dim` (that dim removed): a view."""
    d = wrap_dim(dim, x.ndim)
    return x[(slice(None),) * d + (index,)]


@public("narrow")
def narrow(x, dim, start, length):
    """x restricted to [start, start + length) along `dim`: a view."""
    d = wrap_dim(dim, x.ndim)
    size = x.shape[d]
    start = start + size if start < 0 else start
    if not 0 <= start <= size or length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return x[(slice(None),) * d + (slice(start, start + length),)]
