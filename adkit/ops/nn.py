"""Neural-net primitives: softmax and log_softmax along one dim.

Owns: their numerically stable forwards (shifted by the max along `dim`) and rules, which
use only the saved output, so that higher derivatives run through the same ops. Does not:
define losses or layers (adkit/nn/functional.py composes those from ops).
"""
import numpy as np

from .. import dtypes
from . import _sparsity
from ._families import ArrayFunction
from ._helpers import NoDecomposition, wrap_dim


_TORCH_NAMES = {"int64": "Long", "int32": "Int", "bool": "Bool"}


def _normalized(x, dim, log):
    """softmax (log=False) or log_softmax (log=True) of x along dim, shifted by the max
    for stability; a 0-d x is one element along dim."""
    dim = wrap_dim(dim, x.ndim)
    if x.dtype.kind != "f":
        kernel = ("log_softmax" if log else "softmax") + (
            "_lastdim_kernel_impl" if dim == max(x.ndim - 1, 0) else "_kernel_impl")
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{_TORCH_NAMES.get(x.dtype.name, x.dtype.name)}'")
    v = x.reshape(1) if x.ndim == 0 else x
    if v.size == 0:
        return x.copy()
    z = v - v.max(axis=dim, keepdims=True)
    e = np.exp(z)
    total = e.sum(axis=dim, keepdims=True)
    out = np.subtract(z, np.log(total), out=z) if log else np.divide(e, total, out=e)
    return out.reshape(x.shape)


def _normalized_ops(x, dim, log):
    """The decomposition of softmax / log_softmax: the forward's steps (shift by the
    max) in primitive ops, for fusion."""
    if x.ndim == 0 or x.numel() == 0:
        raise NoDecomposition
    z = x - x.amax(dim, keepdim=True)
    e = z.exp()
    total = e.sum(dim, keepdim=True)
    return z - total.log() if log else e / total


def _sum_keep(t, dim):
    """t summed over `dim`, kept as a size-1 dim (a 0-d t is its own sum)."""
    return t if t.ndim == 0 else t.sum(dim, True)


class _DimOp(ArrayFunction):
    """Shared plumbing: `interface(x, dim, dtype=None)` casts first, like PyTorch's."""
    sparsity = classmethod(lambda cls, x, dim: _sparsity.along_dim(x, dim))

    @classmethod
    def interface(cls, x, dim, dtype=None):
        if dtype is not None:
            x = x.to(dtypes.to_dtype(dtype))
        return cls.apply(x, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim = wrap_dim(inputs[1], inputs[0].ndim)
        ctx.save_for_backward(output)

    @classmethod
    def vmap(cls, info, in_dims, x, dim):
        """Batching rule: batch dim to the front, `dim` (a per-example dim) shifted past
        it; a per-example scalar is normalized as a size-1 dim."""
        x = x.movedim(in_dims[0], 0)
        ndim = x.ndim - 1
        dim = wrap_dim(dim, ndim) + 1
        if ndim == 0:
            size = tuple(x.shape)
            return cls.apply(x.reshape(size + (1,)), 1).reshape(size), 0
        return cls.apply(x, dim), 0


class Softmax(_DimOp):
    """y = exp(x - m) / sum(exp(x - m), dim), m = max(x, dim);
    grad_x = y * (grad - sum(grad * y, dim));  jvp: y * (x_t - sum(x_t * y, dim))."""
    public_name = "softmax"

    @staticmethod
    def decomposition(x, dim):
        return _normalized_ops(x, dim, log=False)

    @staticmethod
    def forward(x, dim):
        return _normalized(x, dim, log=False)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - _sum_keep(grad * y, ctx.dim)), None

    @staticmethod
    def jvp(ctx, x_t, _dim):
        (y,) = ctx.saved_tensors
        return y * (x_t - _sum_keep(x_t * y, ctx.dim))


class LogSoftmax(_DimOp):
    """y = (x - m) - log(sum(exp(x - m), dim)), m = max(x, dim);
    grad_x = grad - exp(y) * sum(grad, dim);  jvp: x_t - sum(exp(y) * x_t, dim)."""
    public_name = "log_softmax"

    @staticmethod
    def decomposition(x, dim):
        return _normalized_ops(x, dim, log=True)

    @staticmethod
    def forward(x, dim):
        return _normalized(x, dim, log=True)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad - y.exp() * _sum_keep(grad, ctx.dim), None

    @staticmethod
    def jvp(ctx, x_t, _dim):
        (y,) = ctx.saved_tensors
        return x_t - _sum_keep(y.exp() * x_t, ctx.dim)
