"""Shape ops: reshape, view, expand, squeeze, transpose, permute, cat, stack, split, flip,
repeat, ... Views share data and version counter with their input (`is_view`), as in
PyTorch; the other ops return fresh arrays (never memory shared with an input).

Owns: each op's forward (numpy, usually a view) and its rules, plus the public helpers
built from them (flatten, chunk, view_as, `T`, ...). Does not: index (see indexing.py).
"""
import numpy as np

from .. import dtypes
from ..tensor import Tensor, zeros
from ._families import ArrayFunction, public
from ._helpers import normalize_dims, wrap_dim


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


class _Restride(ArrayFunction):
    """Shared rules of ops that only change the shape, not the element order:
    grad_x = grad_out reshaped to x's shape;  out_t = x_t reshaped to the output's."""
    is_view = True

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)
        ctx.output_shape = tuple(output.shape)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.reshape(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, _param):
        return x_t.reshape(ctx.output_shape)


class Reshape(_Restride):
    """y = x with a new shape (one dim may be -1), a view when possible;
    grad_x = grad_out reshaped back."""
    public_name = "reshape"

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


class Unsqueeze(_Restride):
    """y = x with a new size-1 dim at `dim`;  grad_x = grad_out reshaped back."""
    public_name = "unsqueeze"

    @staticmethod
    def forward(x, dim):
        return np.expand_dims(x, wrap_dim(dim, x.ndim + 1))


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


class Expand(ArrayFunction):
    """y = x broadcast to `shape` (-1 keeps a dim);  grad_x = sum_to(grad_out, x.shape)."""
    public_name = "expand"
    variants = ("method",)
    is_view = True

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
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)
        ctx.output_shape = tuple(output.shape)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.sum_to_size(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, _shape):
        return x_t.expand(ctx.output_shape)

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
    public_name = "transpose"
    aliases = ("swapaxes", "swapdims")
    is_view = True

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


class Permute(ArrayFunction):
    """y = x with dims reordered, y.shape[i] = x.shape[dims[i]];
    grad_x = grad_out permuted by the inverse order."""
    public_name = "permute"
    is_view = True

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


class Contiguous(ArrayFunction):
    """y = x copied to C order (x itself when already contiguous);  grad_x = grad_out."""
    public_name = "contiguous"
    variants = ("method",)

    @staticmethod
    def forward(x):
        return x.copy(order="C")

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out

    @staticmethod
    def jvp(ctx, x_t):
        return x_t

    @classmethod
    def interface(cls, x, memory_format=None):
        data = getattr(x, "_data", None)
        if isinstance(data, np.ndarray) and data.flags.c_contiguous:
            return x  # PyTorch returns the tensor itself
        return cls.apply(x)


def _tensor_list(name, tensors):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}(): argument 'tensors' must be tuple of Tensors, not "
                        f"{type(tensors).__name__}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
    return tuple(tensors)


def _promoted(arrays):
    want = arrays[0].dtype
    for a in arrays[1:]:
        if a.dtype != want:
            want = dtypes.promote_types(dtypes.from_numpy_dtype(want),
                                        dtypes.from_numpy_dtype(a.dtype)).np
    return want


def _zero_filled(tangents, metas):
    """The tangents, with zeros (of each input's shape and dtype) for missing ones."""
    return [zeros(shape, dtype=dt) if t is None else t for t, (shape, dt) in zip(tangents, metas)]


def _skipped(a):
    """PyTorch's legacy rule: 1-D empty tensors (arrays or tensors) are ignored by cat."""
    return len(a.shape) == 1 and a.shape[0] == 0


def _cat_dim(dim, arrays):
    """The wrapped cat dim, after PyTorch's checks on the (non-skipped) arrays."""
    for i, a in enumerate(arrays):
        if a.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               "concatenated")
    kept = [(i, a) for i, a in enumerate(arrays) if not _skipped(a)] or [(0, arrays[0])]
    ref = kept[0][1]
    d = wrap_dim(dim, ref.ndim)
    for i, a in kept[1:]:
        if a.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got "
                               f"{ref.ndim} and {a.ndim}")
        for k in range(ref.ndim):
            if k != d and a.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. "
                                   f"Expected size {ref.shape[k]} but got size "
                                   f"{a.shape[k]} for tensor number {i} in the list.")
    return d


class Cat(ArrayFunction):
    """y = the tensors joined along dim (dtypes promoted);
    grad of each input = its slice of grad_out along dim."""
    public_name = "cat"
    variants = ("function",)
    aliases = ("concatenate", "concat")

    @staticmethod
    def forward(dim, *tensors):
        d = _cat_dim(dim, tensors)
        kept = [a for a in tensors if not _skipped(a)] or tensors[:1]
        return np.concatenate(kept, axis=d, dtype=_promoted(tensors), casting="unsafe")

    @staticmethod
    def setup_context(ctx, inputs, output):
        tensors = inputs[1:]
        kept = [not _skipped(t) for t in tensors]
        ctx.dim = wrap_dim(inputs[0], output.ndim)
        ctx.kept = kept if any(kept) else [True] + kept[1:]
        ctx.sizes = [t.shape[ctx.dim] if k else 0 for t, k in zip(tensors, ctx.kept)]
        ctx.metas = [(tuple(t.shape), t.dtype) for t in tensors]

    @staticmethod
    def backward(ctx, grad_out):
        sizes = [s for s, k in zip(ctx.sizes, ctx.kept) if k]
        pieces = iter(grad_out.split(sizes, ctx.dim))
        grads = [next(pieces) if k else None for k in ctx.kept]
        return (None,) + tuple(g if need else None
                               for g, need in zip(grads, ctx.needs_input_grad[1:]))

    @staticmethod
    def jvp(ctx, _dim, *tangents):
        return Cat.apply(ctx.dim, *_zero_filled(tangents, ctx.metas))

    @classmethod
    def interface(cls, tensors, dim=0):
        tensors = _tensor_list("cat", tensors)
        if not tensors:
            raise ValueError("cat(): expected a non-empty list of Tensors")
        return cls.apply(dim, *tensors)


class Stack(ArrayFunction):
    """y = the equal-shaped tensors stacked along a new dim;
    grad of input i = grad_out[..., i, ...] (index i at dim)."""
    public_name = "stack"
    variants = ("function",)

    @staticmethod
    def forward(dim, *tensors):
        for i, a in enumerate(tensors[1:], 1):
            if a.shape != tensors[0].shape:
                raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                                   f"{list(tensors[0].shape)} at entry 0 and "
                                   f"{list(a.shape)} at entry {i}")
        d = wrap_dim(dim, tensors[0].ndim + 1)
        return np.stack(tensors, axis=d, dtype=_promoted(tensors), casting="unsafe")

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim = wrap_dim(inputs[0], output.ndim)
        ctx.metas = [(tuple(t.shape), t.dtype) for t in inputs[1:]]

    @staticmethod
    def backward(ctx, grad_out):
        lead = (slice(None),) * ctx.dim
        return (None,) + tuple(grad_out[lead + (i,)] if need else None
                               for i, need in enumerate(ctx.needs_input_grad[1:]))

    @staticmethod
    def jvp(ctx, _dim, *tangents):
        return Stack.apply(ctx.dim, *_zero_filled(tangents, ctx.metas))

    @classmethod
    def interface(cls, tensors, dim=0):
        tensors = _tensor_list("stack", tensors)
        if not tensors:
            raise RuntimeError("stack expects a non-empty TensorList")
        return cls.apply(dim, *tensors)


def _split_sizes(spec, n, dim):
    """The piece sizes of PyTorch's split(split_size_or_sections) on dim `dim` of size n."""
    if isinstance(spec, (int, np.integer)):
        s = int(spec)
        if s < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got "
                               f"split_size={s}")
        if s == 0 and n != 0:
            raise RuntimeError("split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {n}")
        count = max(-(-n // s), 1) if s else 1
        return (s,) * (count - 1) + (n - s * (count - 1),)
    sizes = tuple(int(s) for s in spec)
    if any(s < 0 for s in sizes):
        raise RuntimeError("split_with_sizes expects split_sizes have only non-negative "
                           f"entries, but got split_sizes={list(sizes)}")
    if sum(sizes) != n:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                           f"(input tensor's size at dimension {dim}), but got "
                           f"split_sizes={list(sizes)}")
    return sizes


class Split(ArrayFunction):
    """(y_0, y_1, ...) = consecutive pieces of x along dim (views);
    grad_x = the pieces' gradients joined along dim."""
    public_name = "split"
    is_view = True

    @staticmethod
    def forward(x, split_size_or_sections, dim=0):
        if x.ndim == 0:
            raise RuntimeError("split expects at least a 1-dimensional tensor")
        d = wrap_dim(dim, x.ndim)
        sizes = _split_sizes(split_size_or_sections, x.shape[d], d)
        lead, start, out = (slice(None),) * d, 0, []
        for s in sizes:
            out.append(x[lead + (slice(start, start + s),)])
            start += s
        return tuple(out)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim = wrap_dim(inputs[2], inputs[0].ndim)
        ctx.sizes = tuple(o.shape[ctx.dim] for o in output)

    @staticmethod
    def backward(ctx, *grads):
        return Cat.apply(ctx.dim, *grads), None, None

    @staticmethod
    def jvp(ctx, x_t, _spec, _dim):
        return Split.apply(x_t, ctx.sizes, ctx.dim)

    @classmethod
    def interface(cls, x, split_size_or_sections, dim=0):
        spec = split_size_or_sections
        if not isinstance(spec, (int, np.integer)):
            spec = tuple(int(s) for s in spec)
        return cls.apply(x, spec, dim)


@public("chunk")
def chunk(x, chunks, dim=0):
    """x split into `chunks` nearly equal pieces along dim (fewer if they do not divide)."""
    if x.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = x.shape[wrap_dim(dim, x.ndim)]
    size = -(-n // chunks)
    if size == 0 and n == 0:
        return Split.apply(x, (0,) * chunks, dim)
    return Split.apply(x, int(size), dim)


class Flip(ArrayFunction):
    """y = x reversed along each of dims (a copy);  grad_x = grad_out flipped back."""
    public_name = "flip"

    @staticmethod
    def forward(x, dims):
        axes = [wrap_dim(d, x.ndim) for d in dims]
        for i, d in enumerate(axes):
            if d in axes[:i]:
                raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        return np.flip(x, tuple(axes)).copy() if x.ndim else x.copy()

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
    def interface(cls, x, *dims, **kwargs):
        return cls.apply(x, _shape_args(dims or (kwargs["dims"],)))


class Repeat(ArrayFunction):
    """y = x tiled sizes[i] times along each dim (leading dims added as needed);
    grad_x = grad_out viewed as (r0, s0, r1, s1, ...) and summed over the r's."""
    public_name = "repeat"
    variants = ("method",)

    @staticmethod
    def forward(x, sizes):
        if len(sizes) < x.ndim:
            raise RuntimeError("Number of dimensions of repeat dims can not be smaller than "
                               "number of dimensions of tensor")
        shape = (1,) * (len(sizes) - x.ndim) + x.shape
        out_shape = [s * r for s, r in zip(shape, sizes)]
        bad = [s for s in out_shape if s < 0]
        if bad:
            raise RuntimeError(f"Trying to create tensor with negative dimension {bad[0]}: "
                               f"{out_shape}")
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
    def interface(cls, x, *sizes):
        return cls.apply(x, _shape_args(sizes))
