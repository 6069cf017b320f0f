"""Joining and splitting: cat, stack, split, chunk.

Owns: each op's forward (numpy) and rules; tensors arrive as varargs of the Function
(the public call takes a list, as PyTorch's does).
"""
import numpy as np

from .. import dtypes
from ..tensor import Tensor, zeros
from . import _sparsity
from ._families import ArrayFunction, _logical, public
from ._helpers import c_strides, moves_by_forward, wrap_dim
from .shape import batch_first


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
    curvature = "linear"
    public_name = "cat"
    variants = ("function",)
    aliases = ("concatenate", "concat")
    # native code: strided copies (native_copy), else index tables when those cannot
    native_moves = classmethod(moves_by_forward)
    native_parts_in_place = True  # see _families.ArrayFunction

    @staticmethod
    def native_copy(params, sources, out_shape):
        """Each input copied into its slice of the result along dim (see
        _helpers.copy_in_order for the contract). None when an input's rank differs
        (PyTorch's legacy skipping of empty 1-D inputs: numpy's job)."""
        if any(len(x.shape) != len(out_shape) for x in sources):
            return None
        strides = c_strides(out_shape)
        dim, start, pieces = params["dim"] % len(out_shape), 0, []
        for x in sources:
            pieces.append((x, start * strides[dim], strides))
            start += x.shape[dim]
        return pieces

    @classmethod
    def sparsity(cls, dim, *tensors):
        """Sparsity rule: each tensor fills its slice along dim (ops/_sparsity.py)."""
        d = _cat_dim(dim, tensors)
        lengths = [0 if _skipped(a) else a.shape[d] for a in tensors]
        return _sparsity.slabs(d, lengths, 1)

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
    def vmap(cls, info, in_dims, dim, *tensors):
        """Batching rule: all batched at the front (unbatched expanded), dim shifted past it."""
        # per-example 1-D empty tensors (which cat skips) become empty blocks, so that they
        # still take part in dtype promotion
        examples = [_logical(t, d) for t, d in zip(tensors, in_dims[1:])]
        d = _cat_dim(dim, examples)
        ref = next((e for e in examples if not _skipped(e)), None)
        size, batched = info.batch_size, []
        for t, bdim, e in zip(tensors, in_dims[1:], examples):
            t = batch_first(t, bdim, size)
            if ref is not None and _skipped(e):
                t = t.reshape((size,) + ref.shape[:d] + (0,) + ref.shape[d + 1:])
            batched.append(t)
        return cls.apply(d + 1, *batched), 0

    @classmethod
    def interface(cls, tensors, dim=0):
        tensors = _tensor_list("cat", tensors)
        if not tensors:
            raise ValueError("cat(): expected a non-empty list of Tensors")
        return cls.apply(dim, *tensors)


def _stack_dim(dim, arrays):
    """The wrapped stack dim, after PyTorch's check that the shapes are equal."""
    for i, a in enumerate(arrays[1:], 1):
        if a.shape != arrays[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(arrays[0].shape)} at entry 0 and "
                               f"{list(a.shape)} at entry {i}")
    return wrap_dim(dim, arrays[0].ndim + 1)


class Stack(ArrayFunction):
    """y = the equal-shaped tensors stacked along a new dim;
    grad of input i = grad_out[..., i, ...] (index i at dim)."""
    curvature = "linear"
    public_name = "stack"
    native_parts_in_place = True  # see _families.ArrayFunction
    variants = ("function",)

    @staticmethod
    def native_copy(params, sources, out_shape):
        """Input k copied into slice k along the new dim (see _helpers.copy_in_order for
        the contract): the result's strides without that dim."""
        if any(len(x.shape) != len(out_shape) - 1 for x in sources):
            return None
        strides = c_strides(out_shape)
        dim = params["dim"] % len(out_shape)
        inner = strides[:dim] + strides[dim + 1:]
        return [(x, k * strides[dim], inner) for k, x in enumerate(sources)]

    @classmethod
    def sparsity(cls, dim, *tensors):
        """Sparsity rule: tensor k fills index k of the new dim (ops/_sparsity.py)."""
        return _sparsity.slabs(_stack_dim(dim, tensors), [1] * len(tensors), 1)

    @staticmethod
    def forward(dim, *tensors):
        d = _stack_dim(dim, tensors)
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
    def vmap(cls, info, in_dims, dim, *tensors):
        """Batching rule: all batched at the front (unbatched expanded), dim shifted past it."""
        d = _stack_dim(dim, [_logical(t, b) for t, b in zip(tensors, in_dims[1:])])
        batched = [batch_first(t, b, info.batch_size) for t, b in zip(tensors, in_dims[1:])]
        return cls.apply(d + 1, *batched), 0

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
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
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
    def vmap(cls, info, in_dims, x, split_size_or_sections, dim=0):
        """Batching rule: batch dim to the front (of every piece), dim shifted past it."""
        x = x.movedim(in_dims[0], 0)
        if x.ndim == 1:
            raise RuntimeError("split expects at least a 1-dimensional tensor")
        return cls.apply(x, split_size_or_sections, wrap_dim(dim, x.ndim - 1) + 1), 0

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
