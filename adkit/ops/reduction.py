"""Reductions: sum, mean, prod, var, std, amax, amin, logsumexp, norm, max/min(dim),
argmax, argmin, and sum_to_size (the unbroadcast used by every binary op's backward).

Owns: each reduction's forward (numpy, over `dim` with `keepdim`) and rules.
"""
import numpy as np

from ._families import ArrayFunction, Reduction
from ._helpers import normalize_dims


class Sum(Reduction):
    """y = sum of x over dim;  grad_x = grad_out broadcast back over the reduced dims."""
    public_name = "sum"

    @staticmethod
    def forward(x, dim=None, keepdim=False):
        dims = normalize_dims(dim, x.ndim)
        if x.dtype.kind in "bi":
            return np.sum(x, axis=dims, keepdims=keepdim, dtype=np.int64)
        return np.asarray(np.sum(x, axis=dims, keepdims=keepdim))

    @staticmethod
    def backward(ctx, grad_out):
        return Reduction.grad_to_input(ctx, grad_out), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _keepdim):
        return x_t.sum(ctx.dims, ctx.keepdim)


class SumToSize(ArrayFunction):
    """y = x summed down to `shape` (the inverse of broadcasting x from shape);
    grad_x = grad_out expanded to x's shape."""
    public_name = "sum_to_size"
    variants = ("method",)

    @staticmethod
    def forward(x, shape):
        shape = tuple(shape)
        lead = x.ndim - len(shape)
        if lead < 0 or any(s != 1 and s != n for s, n in zip(shape, x.shape[lead:])):
            raise RuntimeError(f"size {list(shape)} is not expandable to size "
                               f"{list(x.shape)}")
        dims = tuple(range(lead)) + tuple(
            lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1)
        return np.sum(x, axis=dims).reshape(shape) if dims else x.copy()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)
        ctx.output_shape = tuple(output.shape)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.expand(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, _):
        return x_t.sum_to_size(ctx.output_shape)

    @classmethod
    def interface(cls, x, *size):
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = size[0]
        return cls.apply(x, tuple(int(s) for s in size))
