"""Batching: `ak.func.vmap` as an interpreter (Autodidax's BatchTrace).

Owns: `BatchedTensor` (a per-example view of a physical tensor with a batch dim),
`BatchInterpreter` (runs each op's `vmap(info, in_dims, *args)` rule on the physical
values) and `vmap` itself (in_dims/out_dims, chunk_size, randomness).
Does not: hold batching rules (each op class has its own). Autograd and forward-AD
happen on the physical tensors, so grad/jvp compose with vmap in either order.
"""
import functools
from collections import namedtuple

import numpy as np

from .. import _dispatch
from .._pytree import tree_flatten, tree_unflatten
from ..autograd.function import Function
from ..ops import FUNCTIONS
from ..tensor import AbstractTensor, Tensor, _wrap_dim

VmapInfo = namedtuple("VmapInfo", ("batch_size", "randomness"))

_VALUE_MESSAGE = ("vmap: {what} needs the value of a batched tensor, which differs per "
                  "example; express it with tensor ops (e.g. ak.where) instead")


class BatchedTensor(AbstractTensor):
    """One example of a batch: shape and dtype are per example; `_value` holds the
    whole batch with the batch dim at `_bdim`, for the interpreter `_level`."""

    __slots__ = ("_value", "_bdim", "_level")

    def _value_error(self, what):
        raise RuntimeError(_VALUE_MESSAGE.format(what=what))

    def __repr__(self):
        return (f"BatchedTensor(per-example shape={list(self._data.shape)}, "
                f"bdim={self._bdim}, value={self._value!r})")

    def detach(self):
        """The same batch, cut from the autograd tape (still batched)."""
        return wrap(self._level, self._value.detach(), self._bdim)

    @property
    def data(self):
        return self.detach()

    @property
    def requires_grad(self):
        return self._value.requires_grad

    @property
    def grad_fn(self):
        return self._value.grad_fn


def wrap(level, value, bdim):
    """A BatchedTensor of `level` over `value`, batched along `bdim`."""
    shape = value._data.shape[:bdim] + value._data.shape[bdim + 1:]
    t = BatchedTensor.__new__(BatchedTensor)
    t._data = np.broadcast_to(np.zeros((), value._data.dtype), shape)  # shape/dtype only
    t._requires_grad = value._requires_grad
    t._grad_fn = None
    t._output_nr = 0
    t._grad = None
    t._version_counter = value._version_counter
    t._retains_grad = False
    t._hooks = None
    t._accumulator = None
    t._base = None
    t._value, t._bdim, t._level = value, bdim, level
    return t


class BatchInterpreter(_dispatch.Interpreter):
    """One vmap level: ops with an argument batched at this level run their batching
    rule on the physical values (one level further out)."""

    def __init__(self, batch_size, randomness):
        self.info = VmapInfo(batch_size, randomness)

    def process(self, cls, args):
        values, in_dims = [], []
        for a in args:
            if isinstance(a, BatchedTensor) and a._level is self:
                values.append(a._value)
                in_dims.append(a._bdim)
            else:
                values.append(a)
                in_dims.append(None)
        with _dispatch.outside(self):
            if all(d is None for d in in_dims):
                return cls.apply(*values)
            out, out_dims = batching_rule(cls)(self.info, tuple(in_dims), *values)
        return self._wrap_outputs(cls, out, out_dims)

    def random(self, draw, shape):
        """torch.func.vmap's randomness: 'error' refuses, 'same' draws one value for
        every example, 'different' draws one per example."""
        mode = self.info.randomness
        if mode == "error":
            raise RuntimeError("vmap: called random operation while in randomness error "
                               "mode. Please either use the 'same' or 'different' "
                               "randomness flags on vmap or perform the randomness "
                               "operation out of vmap")
        with _dispatch.outside(self):
            if mode == "same":
                return _dispatch.draw_random(draw, shape)
            value = _dispatch.draw_random(draw, (self.info.batch_size,) + tuple(shape))
        return wrap(self, value, 0)

    def _wrap_outputs(self, cls, out, out_dims):
        if isinstance(out, tuple):
            dims = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(out)
            if len(dims) != len(out):
                raise RuntimeError(f"{cls.__name__}.vmap returned {len(out)} outputs but "
                                   f"{len(dims)} out_dims")
            return type(out)(*(self._wrap_one(o, d) for o, d in zip(out, dims))) \
                if hasattr(out, "_fields") else tuple(self._wrap_one(o, d)
                                                      for o, d in zip(out, dims))
        return self._wrap_one(out, out_dims)

    def _wrap_one(self, value, dim):
        if dim is None or not isinstance(value, Tensor):
            return value
        return wrap(self, value, _wrap_dim(dim, value.ndim))


def batching_rule(cls):
    """The op's `vmap` staticmethod, or (generate_vmap_rule) a rule that runs the
    Function once per example; else PyTorch's error."""
    if cls.vmap is not Function.vmap:
        return cls.vmap
    if cls.generate_vmap_rule or cls._arrays_in:  # built-ins without a rule of their own
        return functools.partial(per_example_rule, cls)
    raise RuntimeError("To use autograd.Function with vmap, you must either override the "
                       "vmap staticmethod or set generate_vmap_rule=True.")


def per_example_rule(cls, info, in_dims, *args):
    """Batch by running cls once per example and stacking: always correct (and
    differentiable: slicing and stacking are ops), if slower than a real rule."""
    results = []
    for b in range(info.batch_size):
        sliced = [a.select(d, b) if d is not None else a for a, d in zip(args, in_dims)]
        results.append(cls.apply(*sliced))
    if isinstance(results[0], tuple):
        return tuple(FUNCTIONS["stack"]([r[i] for r in results])
                     for i in range(len(results[0]))), 0
    return FUNCTIONS["stack"](results), 0


# ---------------------------------------------------------------- vmap
def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """Vectorize `func` over a batch dim of its inputs (torch.func.vmap / jax.vmap).

    in_dims: an int or None for every input, or a pytree prefix of the arguments;
    out_dims likewise for the outputs; chunk_size: run the batch in chunks of that size.
    """
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', "
                           f"or 'same'. Got {randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got "
                         f"{chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        leaves, tree = tree_flatten(args, is_leaf=lambda x: isinstance(x, Tensor))
        dims = _broadcast_prefix(in_dims, args, "in_dims")
        size = _batch_size(leaves, dims, func)
        if chunk_size is None or chunk_size >= size:
            return _run(func, leaves, tree, dims, size, out_dims, randomness, kwargs)
        chunks = []
        for start in range(0, size, chunk_size):
            stop = min(start + chunk_size, size)
            sub = [a.narrow(d, start, stop - start) if d is not None else a
                   for a, d in zip(leaves, dims)]
            chunks.append(_run(func, sub, tree, dims, stop - start, out_dims, randomness,
                               kwargs))
        return _concat_chunks(chunks, out_dims)
    return wrapped


def _run(func, leaves, tree, dims, size, out_dims, randomness, kwargs):
    interp = BatchInterpreter(size, randomness)
    with _dispatch.interpreting(interp):
        batched = [wrap(interp, a, _wrap_dim(d, a.ndim)) if d is not None else a
                   for a, d in zip(leaves, dims)]
        out = func(*tree_unflatten(tree, batched), **kwargs)
    out_leaves, out_tree = tree_flatten(out, is_leaf=lambda x: isinstance(x, Tensor))
    odims = _broadcast_prefix(out_dims, out, "out_dims")
    results = [_unbatch(interp, o, d, size) for o, d in zip(out_leaves, odims)]
    return tree_unflatten(out_tree, results)


def _unbatch(interp, out, out_dim, size):
    if not isinstance(out, Tensor):
        raise ValueError(f"vmap: `func` must only return Tensors, got {type(out).__name__}")
    batched = isinstance(out, BatchedTensor) and out._level is interp
    if out_dim is None:
        if batched:
            raise ValueError("vmap: out_dims=None is only allowed for outputs that are not "
                             "batched, but this output is batched")
        return out
    if batched:
        value = out._value
        return value.movedim(out._bdim, _wrap_dim(out_dim, value.ndim))
    expanded = out.unsqueeze(0).expand((size,) + tuple(out.shape))
    return expanded.movedim(0, _wrap_dim(out_dim, expanded.ndim))


def _concat_chunks(chunks, out_dims):
    first = chunks[0]
    leaves0, tree = tree_flatten(first, is_leaf=lambda x: isinstance(x, Tensor))
    odims = _broadcast_prefix(out_dims, first, "out_dims")
    per_chunk = [tree_flatten(c, is_leaf=lambda x: isinstance(x, Tensor))[0] for c in chunks]
    joined = [per_chunk[0][i] if d is None else FUNCTIONS["cat"]([c[i] for c in per_chunk], d)
              for i, d in enumerate(odims)]
    return tree_unflatten(tree, joined)


def _batch_size(leaves, dims, func):
    sizes = []
    for a, d in zip(leaves, dims):
        if d is None:
            continue
        if not isinstance(a, Tensor):
            raise ValueError(f"vmap({_name(func)}, in_dims=...): Got in_dim={d} for an input "
                             f"but the input is of type {type(a).__name__}. We cannot vmap "
                             "over non-Tensor arguments, please use None as the respective "
                             "in_dim")
        if not -max(a.ndim, 1) <= d < max(a.ndim, 1) or a.ndim == 0:
            raise ValueError(f"vmap({_name(func)}, in_dims=...): Got in_dim={d} for some "
                             f"input, but that input is a Tensor of dimensionality {a.ndim} "
                             f"so expected in_dim to satisfy -{a.ndim} <= in_dim < {a.ndim}.")
        sizes.append(a.shape[_wrap_dim(d, a.ndim)])
    if not sizes:
        raise ValueError(f"vmap({_name(func)}, in_dims=...)(<inputs>): At least one input "
                         "must be a Tensor batched along a dimension (in_dims is None for "
                         "all inputs)")
    if len(set(sizes)) > 1:
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    return sizes[0]


def _name(func):
    return getattr(func, "__name__", repr(func))


def _broadcast_prefix(prefix, tree, what):
    """One dim per tensor leaf of `tree`, from a prefix pytree of ints/None."""
    is_tensor = lambda x: isinstance(x, Tensor)  # noqa: E731
    if prefix is None or isinstance(prefix, int):
        leaves, _ = tree_flatten(tree, is_leaf=is_tensor)
        if prefix is not None and what == "in_dims":
            for x in leaves:
                if not isinstance(x, Tensor):
                    raise ValueError(f"vmap(f, in_dims=...)(<inputs>): Got in_dim={prefix} "
                                     f"for an input but the input is of type "
                                     f"{type(x).__name__}. We cannot vmap over non-Tensor "
                                     "arguments, please use None as the respective in_dim")
        return [prefix if isinstance(x, Tensor) else None for x in leaves]
    if isinstance(tree, (tuple, list)) and isinstance(prefix, (tuple, list)):
        if len(prefix) != len(tree):
            raise ValueError(f"vmap: {what} has {len(prefix)} entries but the structure it "
                             f"describes has {len(tree)}: {what} must be an int, None, or a "
                             "pytree prefix of it")
        return [d for p, t in zip(prefix, tree) for d in _broadcast_prefix(p, t, what)]
    if isinstance(tree, dict) and isinstance(prefix, dict):
        return [d for k in tree for d in _broadcast_prefix(prefix.get(k), tree[k], what)]
    raise ValueError(f"vmap: {what}={prefix!r} does not match the structure of the "
                     f"{'inputs' if what == 'in_dims' else 'outputs'}")
