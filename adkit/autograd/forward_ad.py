"""Forward-mode AD, mirroring torch.autograd.forward_ad: dual_level, make_dual,
unpack_dual, and the `ForwardADInterpreter` that computes tangents.

Owns: forward-AD levels as interpreters on the one interpreter stack (_dispatch), tangents
attached to tensors (`tensor._fw`: level id -> tangent) and PyTorch's forward-AD view
semantics. Does not: hold any op's jvp rule (each Function has its own).

A level is a `ForwardADInterpreter` on the stack. An op with an argument that carries a
tangent at the level runs its primal computation on the next level out, then its jvp rule
on the tangents (also one level out), as in JAX's JVPTrace; an op without such an argument
passes straight through. Because every other transform (vmap, tracing, grad) is a level of
the same stack, they compose in any order. View semantics (PyTorch's): the tangent of a
view is a view of its base's tangent, and an in-place op writes the new tangent into the
written tensor's tangent in place, so a write through a view updates the base's tangent.
The public `dual_level` does not nest (PyTorch's error); `ak.func.jvp` nests private levels.
"""
import collections
import copy
import itertools

import numpy as np

from .. import _dispatch
from ..tensor import Tensor, _make
from ._eager import eager_apply_keeping_ctx, outputs_meta
from .grad_mode import no_grad
from .node import grad_accumulator, pack_saved

__all__ = ["dual_level", "make_dual", "unpack_dual", "enter_dual_level",
           "exit_dual_level", "UnpackedDualTensor", "ForwardADInterpreter"]

UnpackedDualTensor = collections.namedtuple("UnpackedDualTensor", ("primal", "tangent"))

# Level ids are unique for the life of the process: a tangent left on a tensor by a level
# that has exited can never be mistaken for one of a later level.
_LEVEL_IDS = itertools.count()


class ForwardADInterpreter(_dispatch.Interpreter):
    """One forward-AD level: tangents of this level are `tensor._fw[self.level]`."""

    def __init__(self, public):
        self.level = next(_LEVEL_IDS)
        self.public = public  # made by dual_level()/enter_dual_level() (not ak.func.jvp)

    def process(self, cls, args):
        if not _may_carry_tangents(args):  # the common case inside a level: pass through
            with _dispatch.outside(self):
                return cls.apply(*args)
        with _dispatch.outside(self):
            tangents = [tangent_of(a, self) if isinstance(a, Tensor) else None
                        for a in args]
            if all(t is None for t in tangents):
                return cls.apply(*args)
            outputs, ctx = _primal_and_ctx(cls, args, tangents)
            out_tangents = _run_jvp(cls, ctx, args, tangents)
            return _attach(self, cls, args, tangents, ctx, outputs, out_tangents)


def _may_carry_tangents(args):
    """Whether some argument has tangents (at any level), itself or through its base."""
    for a in args:
        if isinstance(a, Tensor) and (a._fw or (a._base is not None and a._base._fw)):
            return True
    return False


def _levels():
    return [i for i in _dispatch._STACK.get() if isinstance(i, ForwardADInterpreter)]


def _push(interpreter):
    _dispatch._STACK.set(_dispatch._STACK.get() + (interpreter,))


def enter_dual_level():
    """Enter a new forward-AD level and return its id (PyTorch allows one at a time)."""
    if _levels():
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    interpreter = ForwardADInterpreter(public=True)
    _push(interpreter)
    return interpreter.level


def exit_dual_level(*, level=None):
    """Leave the innermost level; its tangents become unreachable."""
    stack = _dispatch._STACK.get()
    if not _levels():
        raise RuntimeError("Dual level must be a positive number.")
    last = stack[-1]
    if not isinstance(last, ForwardADInterpreter) or (level is not None and
                                                       last.level != level):
        raise RuntimeError("Trying to exit a forward AD level that was not the last one "
                           "that was created. This is not supported.")
    _dispatch._STACK.set(stack[:-1])


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


class nested_level:
    """A private level for ak.func.jvp, which nests (jvp of jvp) at any depth. It enters
    the stack at `position` (default: innermost): ak.func.jvp, like grad, works on the
    physical tensors under its enclosing vmaps, so its level sits below them."""

    def __init__(self, position=None):
        self.position = position

    def __enter__(self):
        self.interpreter = ForwardADInterpreter(public=False)
        stack = _dispatch._STACK.get()
        at = len(stack) if self.position is None else self.position
        self.token = _dispatch._STACK.set(stack[:at] + (self.interpreter,) + stack[at:])
        return self.interpreter.level

    def __exit__(self, *exc):
        _dispatch._STACK.reset(self.token)
        return False


def _find(level, who):
    """The active interpreter of `level` (default: the innermost), or None."""
    levels = _levels()
    if level is None:
        return levels[-1] if levels else None
    for interpreter in levels:
        if interpreter.level == level:
            return interpreter
    if who == "make_dual":
        raise RuntimeError("Invalid level given to _make_dual")
    return None


def make_dual(tensor, tangent, *, level=None):
    """A tensor aliasing `tensor` (same data and autograd history) that carries `tangent`
    at `level` (default: the innermost level)."""
    if level is None and not _levels():
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level "
                           "exists, make sure to enter_dual_level() first.")
    interpreter = _find(level, "make_dual")
    if not tensor.is_floating_point():
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"{tensor.dtype}")
    if not isinstance(tangent, Tensor) or not tangent.is_floating_point():
        got = tangent.dtype if isinstance(tangent, Tensor) else type(tangent).__name__
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {got}")
    with _dispatch.outside(interpreter):
        tangent = _checked_tangent(tensor, tangent)
        if type(tangent) is Tensor and not tangent._data.flags.writeable:
            tangent = tangent.clone()  # in-place ops write into tangents: own the memory
    dual = _lower(tensor, interpreter.level)
    dual._fw = dict(dual._fw or {})
    dual._fw[interpreter.level] = tangent
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent): the primal aliases `tensor` without the level's tangent; the
    tangent is None when there is none."""
    interpreter = _find(level, "unpack_dual")
    if interpreter is None or not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    with _dispatch.outside(interpreter):
        tangent = tangent_of(tensor, interpreter)
    return UnpackedDualTensor(_lower(tensor, interpreter.level), tangent)


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
    if type(t) is Tensor and t._grad_fn is None and t._requires_grad:
        accumulator = grad_accumulator(t)
        alias._accumulator = lambda: accumulator  # a strong reference, called like a weakref
    if t._fw:
        rest = {k: v for k, v in t._fw.items() if k != level}
        alias._fw = rest or None
    return alias


# ---------------------------------------------------------------- view semantics
def tangent_of(t, interpreter):
    """t's tangent at the interpreter's level, or None. A view without a tangent of its
    own whose base has one gets the view of the base's tangent (re-derived by replaying
    the view ops), so a tangent that reached the base after the view was taken is seen.
    The caller sets the level aside (the view ops must not be differentiated by it)."""
    level = interpreter.level
    fw = t._fw
    if fw is not None:
        tangent = fw.get(level)
        if tangent is not None:
            return tangent
    base = t._base
    if base is None or not base._fw or level not in base._fw:
        return None
    tangent = t._view_fn(base._fw[level]) if t._view_fn else base._fw[level]
    _set(t, level, tangent)
    return tangent


def _set(t, level, tangent):
    fw = dict(t._fw) if t._fw else {}
    fw[level] = tangent
    t._fw = fw


def _writable_tangent(t, interpreter):
    """The tangent an in-place op on t writes into: t's own (or its view of the base's),
    else zeros on the base (for a view) or on t, as PyTorch materializes them."""
    tangent = tangent_of(t, interpreter)
    if tangent is not None:
        return tangent
    base = t._base
    if base is not None:
        _set(base, interpreter.level, _zeros_like(base))
        return tangent_of(t, interpreter)
    tangent = _zeros_like(t)
    _set(t, interpreter.level, tangent)
    return tangent


def _zeros_like(t):
    """Zeros of t's (per-example) shape and dtype; a constant, also under tracing."""
    return _make(np.zeros(t._data.shape, t._data.dtype))


# ---------------------------------------------------------------- one op call
def _primal_and_ctx(cls, args, tangents):
    """The primal outputs through the next level out, and a ctx holding what the jvp
    rule reads. A forward(ctx, ...) Function fills its ctx in forward: eagerly, the one
    forward call gives both; under another level its forward runs once more on a fresh
    ctx (its ops go to that level, as tracing's record does)."""
    if cls._arrays_in or cls._uses_setup_context():
        outputs = cls.apply(*args)
        return outputs, _jvp_context(cls, args, outputs, tangents)
    if not _dispatch._STACK.get():
        return eager_apply_keeping_ctx(cls, args)
    outputs = cls.apply(*args)
    ctx = cls._backward_cls()
    ctx.needs_input_grad = _needs(args, tangents)
    with no_grad():
        cls.forward(ctx, *args)
    return outputs, ctx


def _needs(args, tangents):
    return tuple(isinstance(a, Tensor) and (a._requires_grad or t is not None)
                 for a, t in zip(args, tangents))


def _jvp_context(cls, inputs, outputs, tangents):
    """A ctx holding what setup_context saves for these inputs and outputs (an input
    with a tangent counts as needing a gradient: the jvp reads what the vjp would)."""
    ctx = cls._backward_cls()
    ctx.needs_input_grad = _needs(inputs, tangents)
    ctx._output_meta = outputs_meta(outputs if isinstance(outputs, tuple) else (outputs,))
    cls.setup_context(ctx, inputs, outputs)
    return ctx


def _run_jvp(cls, ctx, inputs, tangents):
    # NB: built-in rules take None for an absent tangent (a zero tangent would make them
    # compute terms, and read saved values, that do not exist); user rules get zeros
    # unless they set_materialize_grads(False), as in PyTorch.
    if ctx.materialize_grads and not cls._arrays_in:
        tangents = [_zeros_like(a) if t is None and isinstance(a, Tensor) and
                    a.is_floating_point() else t for a, t in zip(inputs, tangents)]
    saved = ctx.saved_for_forward or ctx.to_save
    previous, ctx._saved = ctx._saved, pack_saved(ctx, saved) if saved else ctx._saved
    try:
        return ctx.apply_jvp(*tangents)
    finally:
        ctx._saved = previous


def _attach(interpreter, cls, args, tangents, ctx, outputs, out_tangents):
    """Give each differentiable output its tangent at the level. An input modified in
    place is its own output: the new tangent is written into its tangent in place. A
    fresh output never shares its tangent with an input (jvp rules may return an input's
    tangent as is, e.g. clone's): a later in-place write would change both."""
    single = not isinstance(outputs, tuple)
    outs = [outputs] if single else list(outputs)
    tans = [out_tangents] if single or not isinstance(out_tangents, tuple) \
        else list(out_tangents)
    if len(tans) != len(outs):
        raise RuntimeError(f"Function's jvp returned an invalid number of forward gradients "
                           f"(expected {len(outs)} but got {len(tans)})")
    for i, (out, tangent) in enumerate(zip(outs, tans)):
        if tangent is not None and not isinstance(tangent, Tensor):
            raise RuntimeError(f"expected Variable or None (got {type(tangent).__name__}) "
                               f"for grad output {i}.")
        if not isinstance(out, Tensor) or not out.is_floating_point() or \
                _is_among(out, ctx.non_differentiable):
            if tangent is not None and not cls._arrays_in:
                raise RuntimeError(f"Function's jvp returned a gradient at position {i}, "
                                   "but  the corresponding forward output is not a "
                                   "differentiable Tensor.You should return None at that "
                                   "position instead.")
            continue
        if _is_among(out, args):
            _write_in_place(interpreter, out, tangent)
        elif tangent is not None:
            if not _is_view_of_input(out, args) and _aliases(tangent, tangents):
                tangent = tangent.clone()
            _set(out, interpreter.level, _checked_tangent(out, tangent))
    return outs[0] if single else tuple(outs)


def _is_view_of_input(out, args):
    base = out._base
    return base is not None and any(isinstance(a, Tensor) and (a is base or a._base is base)
                                    for a in args)


def _aliases(tangent, tangents):
    """Whether `tangent` is, or shares memory with, one of the input tangents."""
    for t in tangents:
        if t is None:
            continue
        if t is tangent or (type(t) is Tensor and type(tangent) is Tensor and
                            np.may_share_memory(t._data, tangent._data)):
            return True
    return False


def _write_in_place(interpreter, out, tangent):
    """out was modified in place: its tangent (a view of its base's, for a view) takes
    the new value, so every view of the same base sees the change."""
    target = _writable_tangent(out, interpreter)
    if tangent is None:
        target.zero_()
    elif tangent is not target:
        target.copy_(_checked_tangent(out, tangent))


def _is_among(obj, seq):
    for x in seq or ():
        if x is obj:
            return True
    return False
