"""Sorting: sort and topk, returning (values, indices) like PyTorch.

Owns: each op's forward (numpy) and rules; indices are int64 and carry no gradient.
"""
import collections

import numpy as np

from ..tensor import zeros
from . import _sparsity
from ._families import ArrayFunction
from ._helpers import wrap_dim
from .scatter import Gather, ScatterAdd, _along

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
    @classmethod
    def sparsity(cls, x, *args):
        """Sparsity rule: each value may come from anywhere on its line along dim."""
        dim = args[cls._dim_arg - 1] if len(args) >= cls._dim_arg else -1
        values = cls.forward(np.zeros(x.shape, x.dtype), *args)[0]
        length = values.shape[dim] if x.ndim else values.size
        return _sparsity.along_dim(x, dim, length), {}

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

    @classmethod
    def vmap(cls, info, in_dims, x, *params):
        """Batching rule: batch dim to the front (of both outputs), dim shifted past it."""
        x, params, k = x.movedim(in_dims[0], 0), list(params), cls._dim_arg - 1
        size = x.shape[0]
        if x.ndim > 1:
            params[k] = wrap_dim(params[k], x.ndim - 1) + 1
            return cls.apply(x, *params), 0
        wrap_dim(params[k], 0)  # per-example scalars: sorted as one-element vectors
        params[k] = 1
        values, indices = cls.apply(x.reshape((size, 1)), *params)
        if values.shape[1] == 1:  # one value per example: a scalar, like forward's
            values, indices = values.reshape((size,)), indices.reshape((size,))
        return (values, indices), 0


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
