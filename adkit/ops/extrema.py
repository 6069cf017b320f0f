"""Extrema with indices: max and min (of the whole tensor, over a dim with their
indices, or elementwise against another tensor: one public call each, as in PyTorch),
argmax and argmin.

Owns: `Max`, `Min`, `Argmax`, `Argmin`, the public `max`/`min` and their named results.
Does not: hold amax/amin (reductions a kernel can fuse: reduction.py).
"""
import math
from collections import namedtuple

import numpy as np

from ..tensor import Tensor, _make, _wrap_dim
from . import _sparsity
from ._families import ArrayFunction, public
from .reduction import MaxOfAll, MinOfAll, _keep

MaxResult = namedtuple("max", ["values", "indices"])  # like torch.return_types.max
MinResult = namedtuple("min", ["values", "indices"])


def _arg_along(name, x, dim, keepdim, method=None):
    """int64 index of the first max (min) along dim, or into the flattened x (dim None),
    by ndarray.`method` (default: `name`, which errors name)."""
    method = method or name
    if dim is None:
        if x.size == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for "
                             "input.numel() == 0.")
        out = np.asarray(getattr(x.reshape(-1), method)(), np.int64)
        return out.reshape((1,) * x.ndim) if keepdim else out
    d = _wrap_dim(dim, x.ndim)
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    return getattr(x, method)(axis=d, keepdims=keepdim).astype(np.int64, copy=False)


def _values_indices(name, x, dim, keepdim):
    """max/min over one dim: (values, int64 indices)."""
    indices = _arg_along(name, x, dim, keepdim, "arg" + name)
    axis = _wrap_dim(dim, x.ndim) if x.ndim else None
    return np.asarray(getattr(x, name)(axis=axis, keepdims=keepdim)), indices


def _batched_along(cls, in_dims, x, dim, keepdim):
    """cls(x, dim, keepdim) per example, dim None meaning the flattened example: batch dim
    to the front, dim shifted past it; a 0-d example reduces a size-1 dim instead."""
    x = x.movedim(in_dims[0], 0)
    shape, batch = tuple(x.shape[1:]), tuple(x.shape[:1])
    if 0 in shape:  # an empty example: the op's own errors for reducing over nothing
        cls.forward(np.empty(shape, x.dtype.np), dim, keepdim)
    if dim is None:
        flat = cls.apply(x.reshape(batch + (math.prod(shape),)), 1, False)
        return flat.reshape(batch + (1,) * len(shape)) if keepdim and shape else flat
    if not shape:
        _wrap_dim(dim, 0)
        return cls.apply(x.reshape(batch + (1,)), 1, False)
    return cls.apply(x, _wrap_dim(dim, len(shape)) + 1, keepdim)


class _IndexedExtremum(ArrayFunction):
    """max/min over one dim: values = x at the index of the max (min) along dim, the
    first one on ties; grad_x = grad_out routed to that index (one-hot), as in PyTorch."""
    @classmethod
    def sparsity(cls, x, dim, keepdim=False):
        """Sparsity rule: values read the line reduced into them; indices nothing."""
        return _sparsity.reduced(x, dim, keepdim), {}
    public_name = None  # reached through the public max/min functions

    @staticmethod
    def setup_context(ctx, inputs, output):
        x = inputs[0]
        ctx.dims = (_wrap_dim(inputs[1], x.ndim),) if x.ndim else ()
        ctx.keepdim = inputs[2]
        ctx.input_shape = tuple(x.shape)
        ctx.dtype = x.dtype
        ctx.save_for_backward(output[1])

    @staticmethod
    def one_hot(ctx):
        indices, = ctx.saved_tensors
        if not ctx.dims:
            return _make(np.ones((), ctx.dtype.np))
        d = ctx.dims[0]
        n = ctx.input_shape[d]
        positions = [1] * len(ctx.input_shape)
        positions[d] = n
        arange = _make(np.arange(n, dtype=np.int64).reshape(positions))
        return arange.eq(_keep(ctx, indices)).to(ctx.dtype)

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        return _keep(ctx, grad_values) * _IndexedExtremum.one_hot(ctx), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _keepdim):
        values_t = (x_t * _IndexedExtremum.one_hot(ctx)).sum(ctx.dims, ctx.keepdim)
        return values_t, None

    @classmethod
    def vmap(cls, info, in_dims, x, dim, keepdim=False):
        """Batching rule: batch dim to the front of values and indices, dim shifted."""
        return _batched_along(cls, in_dims, x, dim, keepdim), (0, 0)


class Max(_IndexedExtremum):
    __doc__ = _IndexedExtremum.__doc__

    @staticmethod
    def forward(x, dim, keepdim=False):
        return _values_indices("max", x, dim, keepdim)


class Min(_IndexedExtremum):
    __doc__ = _IndexedExtremum.__doc__

    @staticmethod
    def forward(x, dim, keepdim=False):
        return _values_indices("min", x, dim, keepdim)


def _extremum_call(name, whole, along, result, elementwise, x, dim, keepdim, other):
    if other is not None or isinstance(dim, Tensor):
        return getattr(x, elementwise)(dim if other is None else other)
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                               "input.numel() == 0. Specify the reduction dim with the "
                               "'dim' argument.")
        return whole.apply(x, None, False)
    return result(*along.apply(x, dim, keepdim))


@public("max")
def max_reduction(input, dim=None, keepdim=False, *, other=None):
    """max(x): the largest element (0-d; gradient split among ties);
    max(x, dim, keepdim=False): (values, indices) over dim; max(x, other): maximum."""
    return _extremum_call("max", MaxOfAll, Max, MaxResult, "maximum", input, dim, keepdim,
                          other)


@public("min")
def min_reduction(input, dim=None, keepdim=False, *, other=None):
    """min(x): the smallest element (0-d; gradient split among ties);
    min(x, dim, keepdim=False): (values, indices) over dim; min(x, other): minimum."""
    return _extremum_call("min", MinOfAll, Min, MinResult, "minimum", input, dim, keepdim,
                          other)


class _ArgExtremum(ArrayFunction):
    """argmax/argmin: int64 index of the first max (min) over dim, or into the flattened
    tensor when dim is None; no gradient."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_out):
        return None, None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _keepdim):
        return None

    @classmethod
    def vmap(cls, info, in_dims, x, dim=None, keepdim=False):
        """Batching rule: batch dim to the front, dim shifted past it; dim None flattens
        each example ([B, ...] -> [B, -1])."""
        return _batched_along(cls, in_dims, x, dim, keepdim), 0


class Argmax(_ArgExtremum):
    __doc__ = _ArgExtremum.__doc__
    public_name = "argmax"

    @staticmethod
    def forward(x, dim=None, keepdim=False):
        return _arg_along("argmax", x, dim, keepdim)


class Argmin(_ArgExtremum):
    __doc__ = _ArgExtremum.__doc__
    public_name = "argmin"

    @staticmethod
    def forward(x, dim=None, keepdim=False):
        return _arg_along("argmin", x, dim, keepdim)
