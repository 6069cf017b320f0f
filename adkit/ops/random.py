"""Random tensors: ak.rand, ak.randn, ak.randint, ak.manual_seed.

Owns: adkit's one generator and the draws. Does not: decide what a draw means under a
transform: each draw goes through the interpreter stack (`_dispatch.draw_random`), so a
vmap level applies its `randomness` ('error' refuses, 'same' shares one draw, 'different'
draws one per example, as torch.func.vmap does). Under tracing a draw is a constant of
the graph (made once, when tracing), as before.
"""
import numpy as np

from .. import _dispatch, dtypes
from ..tensor import _check_device, _leaf_requires_grad, _make, _shape_arg
from ._families import public


class _Generator:
    """The global generator, reset by manual_seed."""

    numpy = np.random.default_rng()


@public("manual_seed", ("function",))
def manual_seed(seed):
    _Generator.numpy = np.random.default_rng(int(seed))


def _tensor(sample, size, dtype, requires_grad=False, device=None, fn="rand"):
    """A tensor of `sample(generator, shape)` cast to dtype, drawn through the levels."""
    _check_device(device)

    def draw(shape):
        return _make(np.asarray(sample(_Generator.numpy, shape)).astype(dtype.np))
    out = _dispatch.draw_random(draw, _shape_arg(size, fn))  # fn: errors name the call
    return _leaf_requires_grad(out) if requires_grad else out


def _float(dtype):
    return dtypes.to_dtype(dtype) or dtypes.get_default_dtype()


@public("rand", ("function",))
def rand(*size, dtype=None, requires_grad=False, device=None):
    """Uniform on [0, 1)."""
    return _tensor(lambda g, s: g.random(s), size, _float(dtype), requires_grad, device)


@public("randn", ("function",))
def randn(*size, dtype=None, requires_grad=False, device=None):
    """Standard normal."""
    return _tensor(lambda g, s: g.standard_normal(s), size, _float(dtype), requires_grad,
                   device, "randn")


@public("randint", ("function",))
def randint(low, high=None, size=(), dtype=None, device=None):
    """Integers uniform on [low, high) (one argument: [0, low))."""
    if high is None:
        low, high = 0, low
    return _tensor(lambda g, s: g.integers(low, high, s), (size,),
                   dtypes.to_dtype(dtype) or dtypes.int64, device=device, fn="randint")
