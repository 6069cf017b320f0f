"""Eager fast paths generated per op class: the common call of an elementwise op (float
tensors of one dtype, or Python numbers beside them; no interpreter, anomaly mode or
saved-tensor hooks) in one Python frame, from forward to the recorded node.

Owns: turning an op's description (`Recipe`: its arity, the ufunc its forward is on
float operands, what its setup_context saves) into Python source, compiled once per
class and entry kind (as namedtuple and dataclasses do), that does what the general
path (`_eager.apply_unary`/`apply_binary` -> forward -> `_record_one` ->
setup_context -> pack_saved) does, inlined. Every other call goes to that general path.
Does not: decide which ops qualify (their family does: ops/_families.py), bind methods,
run backward (the nodes' generated `_run`: _fastrun.py).
NB: the hot path of eager mode (benchmarks/eager_overhead.py): each Python frame, and
each read of a thread-local flag, costs a tenth of a microsecond or so; the generated
code keeps both to what the call needs.
"""
import linecache
import os
from collections import namedtuple

import numpy as np

from .._dispatch import interpreters
from ..tensor import CREATION, Tensor
from .anomaly_mode import STATE as ANOMALY
from .grad_mode import STATE as GRAD
from .node import (INFERENCE_SAVED_MESSAGE, NO_EDGE, NOT_TENSOR, SAVED_HOOKS, SEQUENCE,
                   grad_accumulator)

# An op's description, as its family gives it (see ops/_families.py):
#   arity: 1 or 2 (forward(x) or forward(x, y));
#   ufunc: the numpy ufunc forward applies to floating operands of one dtype (None:
#       call forward itself), which must then give a new array of that dtype;
#   saves: whether setup_context saves anything (if not, it sets nothing at all, not
#       even a Python number operand as a constant);
#   saves_x, saves_out: unary ops, whether x and the output are saved;
#   keep: binary ops, keep[need_x][need_y] = (save x?, save y?) (the operands a needed
#       gradient reads, as BinaryElementwise.setup_context decides); saves_out, whether
#       the output is saved too;
#   rule: when the op's backward is its family's, the formula it reads:
#       derivative(x, out) (backward: grad * derivative) for unary ops,
#       partials(x, y, out) (backward: grad * each partial) for binary ops; else None;
#   array_rule: the same formula on ndarrays (see _fastrun.py), or None.
Recipe = namedtuple("Recipe", "arity ufunc saves saves_x saves_out keep rule array_rule")

# The entries made from one recipe: how the generated function is called, how it binds
# the operands, and what it hands every call it does not take to.
_ENTRIES = {
    # cls._array_op(cls, args): what Function.apply calls (no interpreter is active)
    "apply": ("cls, args", "{ops} = args", "", "general(cls, args)"),
    # Tensor.__mul__(self, other), and Tensor.sin(self) as a method
    "operator": ("x, y", "", "if interpreters():\n        return general(x, y)",
                 "general(x, y)"),
    "reflected": ("y, x", "", "if interpreters():\n        return general(y, x)",
                  "general(y, x)"),
    "method": ("x, *args, **kwargs", "",
               "if args or kwargs or interpreters():\n        return general(x, *args, **kwargs)",
               "general(x, *args, **kwargs)"),
    # ak.sin(x), ak.mul(x, y): general is cls.apply, which also words the errors of
    # calls missing an operand
    "function": ("{missing_defaults}, *args, **kwargs", "",
                 ("if {any_missing} or args or kwargs or interpreters():\n"
                  "        return general(*given(({ops}), args), **kwargs)"),
                 "general({ops})"),
}

FLOATS = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))


def fast_entry(cls, recipe, kind, general):
    """The generated function for entry `kind` of op class `cls` (see _ENTRIES), which
    calls `general` with its own arguments for every call it does not handle."""
    names = ("x", "y")[:recipe.arity]
    fill = {"ops": ", ".join(names) + ("," if recipe.arity == 1 else ""),
            "missing_defaults": ", ".join(f"{n}=MISSING" for n in names),
            "any_missing": " or ".join(f"{n} is MISSING" for n in names)}
    params, bind, guard, slow = (part.format(**fill) for part in _ENTRIES[kind])
    source = (_UNARY if recipe.arity == 1 else _BINARY).format(
        name=f"{cls.__name__}_{kind}", params=params, bind=bind, guard=guard, slow=slow,
        compute=_compute(recipe), hooks_check=_hooks_check(recipe),
        save=_save_lines(recipe))
    namespace = dict(GLOBALS, general=general, forward=cls.forward, ufunc=recipe.ufunc,
                     NODE=cls._backward_cls, KEEP=recipe.keep)
    return compiled(f"{cls.__name__}_{kind}", source, namespace)


def compiled(name, source, namespace):
    """The function `name` that `source` defines, run in `namespace`. Its file is named
    inside adkit's directory (tracing's messages skip adkit's frames to name the user's
    line), and its source kept in linecache for tracebacks."""
    filename = os.path.join(os.path.dirname(__file__), f"<generated {name}>")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[name]


class _Missing:
    """The default of an operand not given (the "function" entry's)."""

    def __repr__(self):
        return "<required>"


MISSING = _Missing()


def _given(operands, args):
    """The positional arguments of a call, operands left out where not given."""
    return tuple(a for a in operands if a is not MISSING) + args


def _inference_saved():
    """pack_saved's refusal of an inference tensor, saved outside inference_mode."""
    if not GRAD.inference:
        raise RuntimeError(INFERENCE_SAVED_MESSAGE)


GLOBALS = {
    "Tensor": Tensor, "ndarray": np.ndarray, "asarray": np.asarray, "FLOATS": FLOATS,
    "new": object.__new__, "CREATION": CREATION, "GRAD": GRAD, "ANOMALY": ANOMALY,
    "SAVED_HOOKS": SAVED_HOOKS, "SEQUENCE": SEQUENCE, "NO_EDGE": NO_EDGE,
    "NOT_TENSOR": NOT_TENSOR, "grad_accumulator": grad_accumulator,
    "interpreters": interpreters,
    "inference_saved": _inference_saved, "MISSING": MISSING, "given": _given,
    # needs_input_grad of unary and binary nodes, shared: NEEDS2[x][y] == (x, y)
    "NEEDS1": ((False,), (True,)),
    "NEEDS2": (((False, False), (False, True)), ((True, False), (True, True))),
}


def _compute(recipe):
    args = "xd" if recipe.arity == 1 else "xd, yd"
    return f"ufunc({args})" if recipe.ufunc is not None else f"forward({args})"


def _hooks_check(recipe):
    """Saved-tensor hooks take the general path (pack_saved runs them)."""
    return " or SAVED_HOOKS.stack" if recipe.saves else ""


# What the generated code does, after the operands are checked:
#   1. forward (the ufunc) on the arrays, a 0-d result made an array;
#   2. the output tensor (tensor._make inlined);
#   3. when an operand requires grad and grad mode is on (`record`, read before
#      forward, which cannot change it), the node (_record_one and
#      _link_inputs inlined): edges, needs_input_grad, sequence number, the output's
#      history and metadata, then what setup_context saves, packed as pack_saved does.
_OUTPUT = """
    raw = {compute}
    if type(raw) is not ndarray:
        raw = asarray(raw)  # numpy gives 0-d results as scalars
    out = new(Tensor)
    out._data = raw
    out._output_nr = 0
    out._version_counter = [0]
    out._base = None
    if CREATION.inference:
        out._inference = True
    if not record:
        out._requires_grad = False
        out._grad_fn = None
        return out
    node = new(NODE)
    out._requires_grad = True
    out._grad_fn = node
    node._output_meta = ((raw.shape, dt),)
    node._sequence_nr = next(SEQUENCE)
"""

_UNARY = """
def {name}({params}):
    {guard}
    {bind}
    if type(x) is not Tensor:
        return {slow}
    xd = x._data
    dt = xd.dtype
    if dt not in FLOATS:
        return {slow}
    record = x._requires_grad and GRAD.enabled
    if record and (ANOMALY.enabled{hooks_check}):
        return {slow}
""" + _OUTPUT + """
    fn = x._grad_fn
    if fn is not None:
        node._edges = ((fn, x._output_nr),)
    else:  # a leaf (x requires grad)
        node._edges = ((grad_accumulator(x), 0),)
    node.needs_input_grad = NEEDS1[1]
{save}
    return out
"""

_BINARY = """
def {name}({params}):
    {guard}
    {bind}
    if type(x) is Tensor:
        xd = x._data
        dt = xd.dtype
        requires = x._requires_grad
        if type(y) is Tensor:
            yd = y._data
            if yd.dtype is not dt:
                return {slow}
            requires = requires or y._requires_grad
        elif type(y) is float or type(y) is int:
            yd = y
        else:
            return {slow}
    elif type(y) is Tensor and (type(x) is float or type(x) is int):
        xd = x
        yd = y._data
        dt = yd.dtype
        requires = y._requires_grad
    else:
        return {slow}
    if dt not in FLOATS:
        return {slow}
    record = requires and GRAD.enabled
    if record and (ANOMALY.enabled{hooks_check}):
        return {slow}
""" + _OUTPUT + """
    if xd is x:
        ex = NOT_TENSOR
    elif x._grad_fn is not None:
        ex = (x._grad_fn, x._output_nr)
    elif x._requires_grad:
        ex = (grad_accumulator(x), 0)
    else:
        ex = NO_EDGE
    if yd is y:
        ey = NOT_TENSOR
    elif y._grad_fn is not None:
        ey = (y._grad_fn, y._output_nr)
    elif y._requires_grad:
        ey = (grad_accumulator(y), 0)
    else:
        ey = NO_EDGE
    node._edges = (ex, ey)
    nx = ex[0] is not None
    ny = ey[0] is not None
    node.needs_input_grad = NEEDS2[nx][ny]
{save}
    return out
"""


def _pack_input(name):
    """pack_saved's entry for an input tensor: (tensor, its version now)."""
    return (f"    if {name}._inference:\n        inference_saved()\n"
            f"    p{name} = ({name}, {name}._version_counter[0])\n")


# pack_saved's entry for the node's own output (see node.pack_saved: the data, not the
# tensor, whose grad_fn is this node)
_PACK_OUT = "(raw, out._version_counter, 0, 0, out.__dict__)"


def _save_lines(recipe):
    """What setup_context saves, packed (the hooks case took the general path)."""
    if not recipe.saves:
        return ""
    if recipe.arity == 1:
        lines = _pack_input("x") if recipe.saves_x else "    px = None\n"
        pout = _PACK_OUT if recipe.saves_out else "None"
        return lines + f"    node._saved = (px, {pout})"
    return _BINARY_SAVE.format(tail=f", {_PACK_OUT})" if recipe.saves_out else ")",
                               pack_x=_indent(_pack_input("x")),
                               pack_y=_indent(_pack_input("y")),
                               any_check="" if recipe.saves_out else
                               "    if px is not None or py is not None:\n    ")


_BINARY_SAVE = """    if xd is x or yd is y:
        node.constants = (x if xd is x else None, y if yd is y else None)
    keep_x, keep_y = KEEP[nx][ny]
    px = py = None
    if keep_x and xd is not x:
{pack_x}    if keep_y and yd is not y:
{pack_y}{any_check}    node._saved = (px, py{tail}"""


def _indent(lines):
    return "".join("    " + line + "\n" for line in lines.splitlines())

