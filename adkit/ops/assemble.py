"""Assemble: a tensor made of parts written at disjoint basic keys, zeros elsewhere.

Owns: `Assemble` and `disjoint` (whether two basic keys share no element). The gradient of several slices of one
tensor (`cam[0:3]`, `cam[3:6]`, `cam[6]` ... in a residual) is a sum of IndexScatters,
each a whole tensor of zeros with one slice filled; simplify (ir/passes/simplify.py)
merges such a sum into one Assemble, which compiled code writes in one pass: each part
copied into its view, zeros only where no part lands. Does not: decide when to merge.
"""
import numpy as np

from ..tensor import zeros
from . import _sparsity
from ._families import ArrayFunction
from ._helpers import Fill, basic_view, c_strides
from .indexing import BasicIndex


def disjoint(key_a, key_b, shape):
    """Whether two basic keys select no common element of a tensor of `shape`: along
    some dim their index sets do not meet."""
    dims_a, dims_b = _dim_ranges(key_a, shape), _dim_ranges(key_b, shape)
    return any(not set(a) & set(b) for a, b in zip(dims_a, dims_b))


def _dim_ranges(key, shape):
    """The indices a basic key selects along each dim of `shape`."""
    key = list(key)
    if Ellipsis in key:
        at = key.index(Ellipsis)
        used = sum(k is not None for k in key if k is not Ellipsis)
        key[at:at + 1] = [slice(None)] * (len(shape) - used)
    key = [k for k in key if k is not None]
    key += [slice(None)] * (len(shape) - len(key))
    return [range(k % n, k % n + 1) if isinstance(k, (int, np.integer))
            else range(*k.indices(n)) for k, n in zip(key, shape)]


class Assemble(ArrayFunction):
    """y = zeros(shape) with y[keys[i]] = parts[i], the keys basic and disjoint;
    grad_parts[i] = grad_out[keys[i]]."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    variants = ()
    native_parts_in_place = True  # see _families.ArrayFunction

    @staticmethod
    def forward(shape, keys, *parts):
        out = np.zeros(shape, np.result_type(*parts))
        for key, part in zip(keys, parts):
            out[tuple(key) + (Ellipsis,)] = part
        return out

    @staticmethod
    def native_copy(params, sources, out_shape):
        """Each part copied into its view; zeros first unless the parts cover the
        result (see _helpers.copy_in_order for the contract)."""
        pieces, covered = [], 0
        for key, part in zip(params["keys"], sources):
            shape, offset, strides = basic_view(out_shape, key)
            if shape != tuple(part.shape):
                return None
            pieces.append((part, offset, strides))
            covered += int(np.prod(shape, dtype=np.int64))
        if covered < int(np.prod(out_shape, dtype=np.int64)):
            pieces.insert(0, (Fill(tuple(out_shape)), 0, c_strides(out_shape)))
        return pieces

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape, ctx.keys = inputs[0], inputs[1]
        ctx.metas = [(tuple(p.shape), p.dtype) for p in inputs[2:]]

    @staticmethod
    def backward(ctx, grad_out):
        return (None, None) + tuple(BasicIndex.apply(grad_out, tuple(key))
                                    for key in ctx.keys)

    @staticmethod
    def jvp(ctx, _shape, _keys, *tangents):
        tangents = [zeros(shape, dtype=dtype) if t is None else t
                    for t, (shape, dtype) in zip(tangents, ctx.metas)]
        return Assemble.apply(ctx.shape, ctx.keys, *tangents)

    @classmethod
    def vmap(cls, info, in_dims, shape, keys, *parts):
        """Batching rule: every part batched in front (shared ones expanded), each key
        with the batch dim's full slice in front."""
        size = info.batch_size
        parts = [p.movedim(d, 0) if d is not None else p.expand((size,) + tuple(p.shape))
                 for p, d in zip(parts, in_dims[2:])]
        keys = tuple((slice(None),) + tuple(key) for key in keys)
        return cls.apply((size,) + tuple(shape), keys, *parts), 0
