"""The generated `_run` of elementwise ops' nodes (the engine's call in backward), from
the same description as their eager fast paths (_fastpath.Recipe).

Owns: for an op whose backward is its family's, Python source compiled once per node
class that does what BackwardCFunction._run -> the family's backward -> saved_tensors
-> the rule -> _scale do, inlined. When no graph is built (grad mode off: backward
without create_graph), no interpreter is active and every value is a float array of
the gradient's dtype, an op that declares its rule on arrays (`array_rule`) computes
on the tensors' arrays and wraps each gradient once: its rule's products and its
intermediate values are no tensor ops. Every other call takes the general `_run`.
Does not: decide which ops qualify (their family does: ops/_families.py).
"""
import numpy as np

from ..tensor import _make
from ._fastpath import GLOBALS, compiled


def fast_node_run(cls, recipe):
    """The generated `_run` of cls's node for an op whose backward is its family's
    (recipe.rule). Gradients that are None (materialized as zeros), freed or hook-packed
    saved values and version mismatches (the error) take the general `_run`."""
    node_cls = cls._backward_cls
    names = ("x", "out") if recipe.arity == 1 else ("x", "y", "out")
    unpack = "".join(_unpack_lines(name, i, recipe) for i, name in enumerate(names))
    if unpack:
        unpack = "    saved = self._saved\n    if saved:\n" + unpack
    make_out = _MAKE_OUT if recipe.saves_out else ""
    if recipe.saves_out:  # (always saved, unless _saved was emptied: then as general)
        unpack = "    pout = None\n" + unpack
    arrays = "" if recipe.array_rule is None else _array_lines(recipe)
    if recipe.arity == 1:
        source = _UNARY_RUN.format(unpack=unpack, arrays=arrays, make_out=make_out)
    else:
        source = _BINARY_RUN.format(unpack=unpack, arrays=arrays, make_out=make_out,
                                    scale_x=_scale_lines("x", "dx", "g * dx", "-g"),
                                    scale_y=_scale_lines("y", "dy", "g * dy", "-g"))
    name = f"{node_cls.__name__}_run"
    namespace = dict(GLOBALS, general=node_cls._run, rule=recipe.rule,
                     array_rule=recipe.array_rule, make=_make, wrap=_wrap,
                     multiply=np.multiply, negative=np.negative)
    return compiled(name, source.replace("def _run", f"def {name}"), namespace)


def _wrap(result):
    """A gradient computed on arrays as a tensor (numpy gives 0-d results as scalars)."""
    return _make(result if type(result) is np.ndarray else np.asarray(result))


def _unpack_lines(name, i, recipe):
    """Read saved value `name` (at position i of _saved) as unpack_saved does: an input
    as its tensor, the node's own output as its checked pack (`pout`)."""
    if name == "out":
        return _UNPACK_OUT.format(i=i) if recipe.saves_out else ""
    if recipe.arity == 1 and not recipe.saves_x:
        return ""
    return _UNPACK_INPUT.format(name=name, i=i)


_UNPACK_INPUT = """        p = saved[{i}]
        if p is not None:
            if len(p) != 2 or p[0]._version_counter[0] != p[1]:
                return general(self, grads)
            {name} = p[0]
"""
_UNPACK_OUT = """        pout = saved[{i}]
        if len(pout) != 5 or pout[1][0] != pout[2]:
            return general(self, grads)
"""
# the output rebuilt from its pack (node.unpack_saved's _unpack_output)
_MAKE_OUT = """    if pout is not None:
        out = make(pout[0], self, pout[3], True, pout[1])
        if "_fw" in pout[4]:
            out._fw = pout[4]["_fw"]
"""

_UNARY_RUN = """
def _run(self, grads):
    g = grads[0]
    if g is None or self._freed:
        return general(self, grads)
    x = out = None
{unpack}{arrays}{make_out}    d = rule(x, out)
    return (None if d is None else g * d,)
"""

_BINARY_RUN = """
def _run(self, grads):
    g = grads[0]
    if g is None or self._freed:
        return general(self, grads)
    x, y = self.constants
    out = None
{unpack}{arrays}{make_out}    dx, dy = rule(x, y, out)
    needs = self.needs_input_grad
    gx = gy = None
    if needs[0]:
{scale_x}    if needs[1]:
{scale_y}    return (gx, gy)
"""


def _scale_lines(name, d, product, negated, is_value=None):
    """g{name} = g * {d}, as the families' _scale: None for None (zero), no product for
    the constants 1 and -1. On arrays, an ndarray stands where the rule on tensors
    gives a tensor (`is_value`)."""
    is_value = is_value or f"isinstance({d}, Tensor)"
    return f"""        if {is_value}:
            g{name} = {product}
        elif {d} is None:
            pass
        elif {d} == 1:
            g{name} = g
        elif {d} == -1:
            g{name} = {negated}
        else:
            g{name} = {product}
"""


def _array_lines(recipe):
    """The branch that computes on arrays: taken when no graph is built and every value
    the rule reads is a float array of the gradient's dtype (or a Python number)."""
    checks = []
    if recipe.arity == 1:
        reads = ("x._data" if recipe.saves_x else "None",
                 "pout[0]" if recipe.saves_out else "None")
        if recipe.saves_x:
            checks.append("type(x) is Tensor and x._data.dtype is dt")
    else:
        reads = ("xa", "ya", "pout[0]" if recipe.saves_out else "None")
        checks += ["xa is not False", "ya is not False"]
    if recipe.saves_out:
        checks.append("pout is not None and pout[0].dtype is dt")
    test = f"        if {' and '.join(['dt in FLOATS'] + checks)}:\n"
    if recipe.arity == 1:
        return _ARRAYS_HEAD + test + _UNARY_ARRAYS.format(reads=", ".join(reads))
    scale = [_indent(_scale_lines(v, f"d{v}", f"wrap(multiply(gd, d{v}))",
                                  "wrap(negative(gd))", f"type(d{v}) is ndarray"))
             for v in ("x", "y")]
    return (_ARRAYS_HEAD + _OPERAND_ARRAYS + test +
            _BINARY_ARRAYS.format(reads=", ".join(reads), scale_x=scale[0],
                                  scale_y=scale[1]))


_ARRAYS_HEAD = """    if type(g) is Tensor and not GRAD.enabled and not interpreters():
        gd = g._data
        dt = gd.dtype
"""
# a binary op's operand as its rule on arrays reads it: the array of a saved tensor of
# the gradient's dtype, a Python number, None; False for anything else
_OPERAND_ARRAYS = "".join(f"""        if type({v}) is Tensor:
            {v}a = {v}._data if {v}._data.dtype is dt else False
        elif {v} is None or type({v}) is float or type({v}) is int:
            {v}a = {v}
        else:
            {v}a = False
""" for v in ("x", "y"))
_UNARY_ARRAYS = """            d = array_rule({reads})
            return (None if d is None else wrap(multiply(gd, d)),)
"""
_BINARY_ARRAYS = """            dx, dy = array_rule({reads})
            needs = self.needs_input_grad
            gx = gy = None
            if needs[0]:
{scale_x}            if needs[1]:
{scale_y}            return (gx, gy)
"""


def _indent(lines):
    return "".join("        " + line + "\n" for line in lines.splitlines())
