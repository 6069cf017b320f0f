"""Moving values between vmap levels, for the autodiff transforms.

Owns: unwrapping a value to its physical tensor in a canonical layout (`physical`: all
batch dims at the front, oldest level first, expanding along levels the value is not
batched at) and wrapping it back (`rebatch`). Does not: differentiate (_autodiff.py).
NB: grad and jvp run on physical tensors, so an input shared by all examples must be
expanded to each active level first: then its gradient is computed per example instead
of being summed over the batch.
"""
import contextlib

from .. import _dispatch
from ._vmap import BatchedTensor, BatchInterpreter, wrap


def active_levels():
    """The vmap levels now active, oldest first."""
    return [i for i in _dispatch._STACK.get() if isinstance(i, BatchInterpreter)]


def _layers(t):
    """(physical tensor, [(level, bdim)] from the innermost wrapper outwards)."""
    layers = []
    while isinstance(t, BatchedTensor):
        layers.append((t._level, t._bdim))
        t = t._value
    return t, layers[::-1]


def _below(levels):
    """Run ops on physical values: every vmap level in `levels` set aside (a tracing
    level underneath, if any, stays active)."""
    if not levels:
        return contextlib.nullcontext()
    return _dispatch.outside(levels[0])


def physical(x, levels):
    """The physical tensor of x in canonical layout for `levels` (oldest first):
    [B_oldest, ..., B_newest, *per-example shape]."""
    phys, layers = _layers(x)
    for level, _ in layers:
        if all(level is not lv for lv in levels):
            raise RuntimeError("a value batched by a vmap that is no longer active reached "
                               "a transform; return it from that vmap instead")
    taken = []  # phys positions of the batch dims, innermost layer first
    for level, bdim in layers:
        free = [i for i in range(phys.ndim) if i not in taken]
        taken.append(free[bdim])
    position = {id(level): p for (level, _), p in zip(layers, taken)}
    with _below(levels):
        order = [position[id(lv)] for lv in levels if id(lv) in position]
        if order:
            phys = phys.movedim(order, list(range(len(order))))
        for i, level in enumerate(levels):
            if id(level) not in position:  # shared by every example: expand
                shape = list(phys.shape)
                shape.insert(i, level.info.batch_size)
                phys = phys.unsqueeze(i).expand(tuple(shape))
    return phys


def rebatch(phys, levels):
    """The inverse of `physical`: wrap a canonical physical tensor at `levels`."""
    for level in levels:
        phys = wrap(level, phys, 0)
    return phys


def split_newer(x, levels):
    """([(level, bdim)] of the wrappers around x for levels not in `levels`, outermost
    first; the value inside them). A cotangent given to a vjp_fn under a vmap that began
    after the vjp carries such levels: the backward pass then runs batched by them."""
    newer = []
    while isinstance(x, BatchedTensor) and all(x._level is not lv for lv in levels):
        newer.append((x._level, x._bdim))
        x = x._value
    return newer, x


def below(levels):
    return _below(levels)


def position_below(levels):
    """Where on the interpreter stack a level that works on physical tensors under the
    vmap `levels` goes: just below the oldest of them (innermost when there are none)."""
    stack = _dispatch._STACK.get()
    return stack.index(levels[0]) if levels else len(stack)
