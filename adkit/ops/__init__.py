"""Collects every built-in op and binds it: `ak.NAME` and `Tensor.NAME` from each
class's `public_name`/`variants`/`aliases` (and `@public` functions), plus the Python
operators. The one place Tensor methods are bound.

Owns: the public op namespace (`OPS`: name -> callable), Tensor's op methods, and
`with_rule` (the op classes that have a rule, e.g. `native_reduction`: how passes and
codegen derive their tables from the ops' own classes). Does not: define math (each
family module does).
"""
import inspect

import numpy as np

from .._dispatch import interpreters
from ..autograd._fastpath import fast_entry
from ..autograd._fastrun import fast_node_run
from ..autograd.function import plain_arity
from ..tensor import Tensor, _make
from . import (assemble, binary, comparison, conversion, extrema, indexing, inplace, join,
               linalg, nn, random, reduction, rounding, scatter, shape, sorting, special,
               tensor_index, unary)
from ._families import ArrayFunction

MODULES = (unary, special, rounding, conversion, binary, comparison, reduction, extrema,
           linalg, shape, join, indexing, tensor_index, scatter, sorting, inplace, nn,
           random, assemble)

FUNCTIONS = {}  # public name -> callable (ak.NAME)
METHODS = {}  # public name -> callable taking the tensor first (Tensor.NAME)
PROPERTIES = {}  # public name -> callable taking the tensor (Tensor.NAME, a property)
CLASSES = []  # every built-in Function class with a public name, for tests and introspection
ALL_CLASSES = []  # every built-in Function class, those without a public name too


def _public_callable(cls):
    if cls.interface.__func__ is ArrayFunction.interface.__func__:
        return cls.apply  # regular signature: no wrapper frame on the hot path
    return cls.interface


def _register(name, fn, variants):
    for kind, table in (("function", FUNCTIONS), ("method", METHODS),
                        ("property", PROPERTIES)):
        if kind in variants:
            if name in table:
                raise RuntimeError(f"two ops claim the public {kind} name {name!r}")
            table[name] = fn


def _collect():
    for module in MODULES:
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, ArrayFunction) and \
                    obj.__module__ == module.__name__:
                ALL_CLASSES.append(obj)
                if not obj.public_name:
                    continue
                CLASSES.append(obj)
                fn = _public_callable(obj)
                for name in (obj.public_name,) + tuple(obj.aliases):
                    _register(name, fn, obj.variants)
            elif callable(obj) and hasattr(obj, "public") and \
                    getattr(obj, "__module__", None) == module.__name__:
                _register(obj.public[0], obj, obj.public[1])


def with_rule(name):
    """{op class: its rule `name`} for every built-in op class that has one (not None),
    in a fixed order: e.g. with_rule("native_reduction") -> {Sum: "sum", ...}."""
    return {cls: getattr(cls, name) for cls in ALL_CLASSES
            if getattr(cls, name, None) is not None}


def _direct_class(fn, arity):
    """The op class whose eager path Tensor's operators and methods may call directly
    when `fn` gets `arity` positional arguments (see autograd.function.plain_arity), or
    None. NB: skipping `apply` saves a call frame and its argument binding per op."""
    cls = getattr(fn, "__self__", None)  # fn is cls.apply for a regular signature
    if isinstance(cls, type) and issubclass(cls, ArrayFunction) and fn == cls.apply and \
            plain_arity(cls) == arity:
        return cls
    return None


def _build_fast_paths():
    """Each op class whose family describes its common call (`eager_recipe`) gets the
    generated eager fast path as its `_array_op` (what apply calls), and its node the
    generated `_run` when its backward is its family's; the general paths take every
    call these do not handle. Tensor's operators and methods get their own entries
    (_as_method, _binary_operator)."""
    for cls in ALL_CLASSES:
        recipe = _recipe(cls)
        if recipe is not None:
            cls._array_op = fast_entry(cls, recipe, "apply", cls._array_op)
            if recipe.rule is not None:
                cls._backward_cls._run = fast_node_run(cls, recipe)
    entries = {}  # op class -> its function entry (aliases share it)
    for name, fn in FUNCTIONS.items():  # ak.NAME: one frame fewer than through apply
        cls = getattr(fn, "__self__", None)
        recipe = _recipe(cls) if isinstance(cls, type) else None
        if recipe is not None and _direct_class(fn, recipe.arity) is cls:
            if cls not in entries:
                entry = entries[cls] = fast_entry(cls, recipe, "function", fn)
                entry.__name__ = entry.__qualname__ = cls.public_name
                entry.__doc__ = cls.__doc__
            FUNCTIONS[name] = entries[cls]


def _recipe(cls):
    recipe = getattr(cls, "eager_recipe", None)
    return recipe() if recipe is not None else None


def _as_method(fn):
    cls = _direct_class(fn, 1)
    if cls is None:
        def method(self, *args, **kwargs):
            return fn(self, *args, **kwargs)
    else:
        run = cls._array_op

        def method(self, *args, **kwargs):
            if args or kwargs or interpreters():
                return fn(self, *args, **kwargs)
            return run(cls, (self,))
        recipe = _recipe(cls)
        if recipe is not None:  # the generated path, falling back on the above
            method = fast_entry(cls, recipe, "method", method)
    method.__name__ = getattr(fn, "__name__", "method")
    method.__doc__ = getattr(fn, "__doc__", None)
    return method


def _operand(other):
    """What a Python operator accepts as its other operand: tensors, numbers, arrays."""
    if isinstance(other, (Tensor, int, float, bool, np.number, np.bool_)):
        return other
    if isinstance(other, np.ndarray):
        return _make(other)
    return NotImplemented


_FAST_OPERANDS = (Tensor, float, int)


def _binary_operator(fn, reflected=False):
    cls = _direct_class(fn, 2)
    run = cls._array_op if cls is not None else None

    def operator(self, other):
        if type(other) not in _FAST_OPERANDS:
            other = _operand(other)
            if other is NotImplemented:
                return NotImplemented
        args = (other, self) if reflected else (self, other)
        if cls is None or interpreters():
            return fn(*args)
        return run(cls, args)
    recipe = _recipe(cls) if cls is not None else None
    if recipe is not None:  # the generated path, falling back on the above
        return fast_entry(cls, recipe, "reflected" if reflected else "operator", operator)
    return operator


_OPERATORS = {  # dunder -> (public op name, reflected)
    "__add__": ("add", False), "__radd__": ("add", True),
    "__sub__": ("sub", False), "__rsub__": ("sub", True),
    "__mul__": ("mul", False), "__rmul__": ("mul", True),
    "__truediv__": ("div", False), "__rtruediv__": ("div", True),
    "__pow__": ("pow", False), "__rpow__": ("pow", True),
    "__matmul__": ("matmul", False), "__rmatmul__": ("matmul", True),
    "__lt__": ("lt", False), "__le__": ("le", False), "__gt__": ("gt", False),
    "__ge__": ("ge", False), "__eq__": ("eq", False), "__ne__": ("ne", False),
    "__and__": ("bitwise_and", False), "__or__": ("bitwise_or", False),
    "__xor__": ("bitwise_xor", False), "__rand__": ("bitwise_and", True),
    "__ror__": ("bitwise_or", True), "__rxor__": ("bitwise_xor", True),
}
_UNARY_OPERATORS = {"__neg__": "neg", "__abs__": "abs", "__invert__": "bitwise_not"}
_INPLACE_OPERATORS = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_",
                      "__itruediv__": "div_"}


def _bind_tensor_methods():
    for name, fn in METHODS.items():
        setattr(Tensor, name, _as_method(fn))
    for name, fn in PROPERTIES.items():
        setattr(Tensor, name, property(fn))
    for dunder, (name, reflected) in _OPERATORS.items():
        if name in FUNCTIONS:
            setattr(Tensor, dunder, _binary_operator(FUNCTIONS[name], reflected))
    for dunder, name in _UNARY_OPERATORS.items():
        if name in FUNCTIONS:
            setattr(Tensor, dunder, _as_method(FUNCTIONS[name]))
    for dunder, name in _INPLACE_OPERATORS.items():
        if name in METHODS:
            setattr(Tensor, dunder, _binary_operator(METHODS[name]))
    Tensor.__hash__ = object.__hash__  # __eq__ is elementwise; hash stays identity


_collect()
_bind_tensor_methods()  # (its fallbacks call the general paths: bound first)
_build_fast_paths()
