"""Forward-mode AD, mirroring torch.autograd.forward_ad: dual_level, make_dual,
unpack_dual, and the forward-AD path of Function.apply.

Owns: the active levels (thread-local, innermost last), tangents attached to tensors
(`tensor._fw`: level -> tangent) and `apply_with_tangents`. Does not: hold any op's jvp
rule (each Function has its own). Levels nest (PyTorch allows one): a level's tangents
are computed from inputs "lowered" to that level (its tangent removed, the outer levels'
kept), so tangents of tangents come out right, as in JAX's interpreter stack.
"""
import collections
import copy
import itertools
import threading

import numpy as np

from ..tensor import Tensor, _make
from .node import grad_accumulator, pack_saved

__all__ = ["dual_level", "make_dual", "unpack_dual", "enter_dual_level",
           "exit_dual_level", "UnpackedDualTensor"]


class _ForwardADState(threading.local):
    def __init__(self):
        self.levels = []  # active level ids, innermost last
        self.busy = []  # levels whose Function call is being processed (tangents inert)
        self.last_ctx = None  # the ctx of the last forward(ctx, ...) run under a level


STATE = _ForwardADState()
_LEVEL_IDS = itertools.count()

UnpackedDualTensor = collections.namedtuple("UnpackedDualTensor", ("primal", "tangent"))


def enter_dual_level():
    """Enter a new forward-AD level and return its id."""
    level = next(_LEVEL_IDS)
    STATE.levels.append(level)
    return level


def exit_dual_level(*, level=None):
    """Leave the innermost level; its tangents become unreachable."""
    if not STATE.levels or (level is not None and STATE.levels[-1] != level):
        raise RuntimeError("Trying to exit a forward AD level that was not the last one "
                           "that was created. This is not supported.")
    STATE.levels.pop()


class dual_level:
    """Context manager for a forward-AD level; tangents made inside live until it exits.

        with dual_level():
            inp = make_dual(x, v)
            out = f(inp)
            y, jvp = unpack_dual(out)
    """

    def __enter__(self):
        self.level = enter_dual_level()
        return self.level

    def __exit__(self, *exc):
        exit_dual_level(level=self.level)
        return False


def _resolve(level):
    if level is None:
        return STATE.levels[-1] if STATE.levels else None
    return level if level in STATE.levels else None


def make_dual(tensor, tangent, *, level=None):
    """A tensor aliasing `tensor` (same data and autograd history) that carries `tangent`
    at `level` (default: the innermost level)."""
    level = _resolve(level)
    if level is None:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level "
                           "exists, make sure to enter_dual_level() first.")
    if not tensor.is_floating_point():
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"{tensor.dtype}")
    if not isinstance(tangent, Tensor) or not tangent.is_floating_point():
        got = tangent.dtype if isinstance(tangent, Tensor) else type(tangent).__name__
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {got}")
    dual = _lower(tensor, level)
    dual._fw = dict(dual._fw or {})
    dual._fw[level] = _checked_tangent(tensor, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent): the primal aliases `tensor` without the level's tangent; the
    tangent is None when there is none."""
    level = _resolve(level)
    if level is None or not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    tangent = tensor._fw.get(level) if tensor._fw else None
    return UnpackedDualTensor(_lower(tensor, level), tangent)


def _checked_tangent(tensor, tangent):
    if tangent._data.shape != tensor._data.shape:
        raise RuntimeError("Trying to set a forward gradient that has a different size than "
                           "that of the original Tensor, this is not supported. Tensor is of "
                           f"size {list(tensor._data.shape)} while the given forward "
                           f"gradient is of size {list(tangent._data.shape)}.")
    if tangent._data.dtype != tensor._data.dtype:
        tangent = tangent.to(tensor._data.dtype)
    return tangent


def _lower(t, level):
    """An alias of t without its tangent at `level`: same data, version counter and
    autograd identity (gradients reach t's history, or t's own .grad for a leaf)."""
    alias = copy.copy(t)  # keeps the class: a tracer's alias is a tracer of the same value
    alias.__dict__.pop("_fw", None)
    if t._grad_fn is None and t._requires_grad:
        accumulator = grad_accumulator(t)
        alias._accumulator = lambda: accumulator  # a strong reference, called like a weakref
    if t._fw:
        rest = {k: v for k, v in t._fw.items() if k != level}
        alias._fw = rest or None
    return alias


def tangent_level(args):
    """The innermost active level at which some argument carries a tangent, or None
    (a level whose jvp rule is running right now does not count: see below)."""
    levels = STATE.levels
    best = -1
    for a in args:
        if isinstance(a, Tensor) and a._fw:
            for level in a._fw:
                if level in levels and level not in STATE.busy:
                    best = max(best, levels.index(level))
    return levels[best] if best >= 0 else None


# ---------------------------------------------------------------- Function.apply
def apply_with_tangents(cls, args, level):
    """Function.apply when an argument has a tangent at `level`: the primal through the
    ordinary path, then the tangents through `cls.jvp`, both with `level` busy (its
    tangents inert), so neither computes tangents of tangents at the same level. The
    tensors saved for backward keep their tangents: a backward run later, with the level
    active, then carries tangents too (forward-over-reverse, e.g. jacfwd(jacrev(f)))."""
    tangents = [a._fw[level] if _has(a, level) else None for a in args]
    ctx_style = not cls._arrays_in and not cls._uses_setup_context()
    STATE.busy.append(level)
    try:
        STATE.last_ctx = None
        outputs = cls.apply(*args)
        ctx = STATE.last_ctx if ctx_style else _jvp_context(cls, args, outputs, tangents)
        out_tangents = _run_jvp(cls, ctx, args, tangents)
    finally:
        STATE.busy.pop()
    return _attach(outputs, out_tangents, level)


def _has(a, level):
    return isinstance(a, Tensor) and a._fw is not None and level in a._fw


def _jvp_context(cls, inputs, outputs, tangents):
    """A ctx holding what setup_context saves for these inputs and outputs (an input
    with a tangent counts as needing a gradient: the jvp reads what the vjp would)."""
    ctx = cls._backward_cls()
    ctx.needs_input_grad = tuple(isinstance(a, Tensor) and (a._requires_grad or t is not None)
                                 for a, t in zip(inputs, tangents))
    cls.setup_context(ctx, inputs, outputs)
    return ctx


def _run_jvp(cls, ctx, inputs, tangents):
    if ctx.materialize_grads:
        tangents = [_make(np.zeros(a._data.shape, a._data.dtype))
                    if t is None and isinstance(a, Tensor) and a.is_floating_point() else t
                    for a, t in zip(inputs, tangents)]
    saved = ctx.saved_for_forward or ctx.to_save
    previous, ctx._saved = ctx._saved, pack_saved(ctx, saved) if saved else ctx._saved
    try:
        result = ctx.apply_jvp(*tangents)
    finally:
        ctx._saved = previous
    return result


def _attach(outputs, out_tangents, level):
    """Hang each output's tangent on it at `level` (an input modified in place is its
    own output: its tangent is replaced)."""
    single = not isinstance(outputs, tuple)
    outs = [outputs] if single else list(outputs)
    tans = [out_tangents] if single or not isinstance(out_tangents, tuple) \
        else list(out_tangents)
    if len(tans) != len(outs):
        raise RuntimeError(f"jvp returned {len(tans)} tangents for {len(outs)} outputs")
    for i, (out, tangent) in enumerate(zip(outs, tans)):
        if not isinstance(out, Tensor):
            continue
        if tangent is None or not out.is_floating_point():
            continue
        if not isinstance(tangent, Tensor):
            raise TypeError(f"jvp must return Tensors or None, got {type(tangent).__name__}")
        fw = dict(out._fw) if out._fw else {}
        fw[level] = _checked_tangent(out, tangent)
        out._fw = fw
    return outs[0] if single else tuple(outs)
