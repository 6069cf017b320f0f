"""`ak.ir.ops`: the public registry of op classes, so a pass matches and builds nodes
without importing private modules.

Owns: lookup of every op class adkit defines (the built-ins of `adkit.ops`, loops and
branches, fused kernels, jit calls) by class name (`ops.Mul`, `ops["Mul"]`) and by the
name the SSA listing prints (`ops["mul"]`), iteration over them (`for op in ops`), and
the op families a pass may test with `issubclass` (`ops.UnaryElementwise`, ...).
Does not: define ops (adkit/ops/...) or change them.

NB: the registry is the set of `Function` subclasses defined in adkit's own modules,
found through the class hierarchy when first used (after `import adkit` every op module
is loaded), so loops and jit calls, which live above this layer, are found without an
upward import. Classes named with a leading underscore and the family bases are not ops.
"""
import re
import sys
import types

from ..autograd.function import Function
from ..ops._families import (ArrayFunction, BinaryElementwise, Reduction, ShapeOp,
                             UnaryElementwise)

# every elementwise op whose formula fits one family derives from it; `issubclass(op,
# ops.Elementwise)` is how a pass asks "may I treat this node elementwise?"
FAMILIES = {"ArrayFunction": ArrayFunction, "UnaryElementwise": UnaryElementwise,
            "BinaryElementwise": BinaryElementwise, "Reduction": Reduction,
            "ShapeOp": ShapeOp, "Function": Function}
Elementwise = (UnaryElementwise, BinaryElementwise)


def _snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _is_op(cls):
    """An op: defined in adkit (not the autograd bases), not private, not a family base
    (a class without a public name that others derive from, such as PlanOp)."""
    if not cls.__module__.startswith("adkit.") or cls.__module__.startswith("adkit.autograd"):
        return False
    if cls.__name__.startswith("_") or cls in FAMILIES.values():
        return False
    return bool(getattr(cls, "public_name", None)) or not cls.__subclasses__()


_TABLES = {}  # "classes": {class name: class}; "names": {listing name: class}


def _tables():
    if not _TABLES:
        classes = {}
        for cls in sorted(set(_subclasses(Function)), key=lambda c: (c.__module__,
                                                                     c.__name__)):
            if _is_op(cls):
                classes.setdefault(cls.__name__, cls)
        names = {}
        # public names first; of several classes claiming one (jit_call), the one whose
        # class name it is; then every class under its snake_case name if still free
        for cls in classes.values():
            for name in (getattr(cls, "public_name", None),) + tuple(
                    getattr(cls, "aliases", ())):
                if name and (name not in names or _snake(cls.__name__) == name):
                    names[name] = cls
        for cls in classes.values():
            names.setdefault(_snake(cls.__name__), cls)
        _TABLES.update(classes=classes, names=names)
    return _TABLES


def lookup(name):
    """The op class called `name`: a class name ("Mul") or the name the SSA listing
    prints and `ak.NAME` uses ("mul"). KeyError lists close names."""
    tables = _tables()
    cls = tables["classes"].get(name) or tables["names"].get(name)
    if cls is None:
        close = sorted(n for n in list(tables["names"]) + list(tables["classes"])
                       if name.lower()[:3] in n.lower())[:8]
        raise KeyError(f"no op called {name!r} in ak.ir.ops" +
                       (f"; close: {', '.join(close)}" if close else ""))
    return cls


def names():
    """{listing name: op class} for every op."""
    return dict(_tables()["names"])


def __getattr__(name):  # ops.Mul (PEP 562: only for names the module does not define)
    cls = _tables()["classes"].get(name)
    if cls is None:
        raise AttributeError(f"ak.ir.ops has no op class {name!r} (ops are named by "
                             "class, e.g. ak.ir.ops.Mul, or by listing name, "
                             "ak.ir.ops['mul'])")
    return cls


def __dir__():
    return sorted(set(globals()) | set(_tables()["classes"]))


class _Registry(types.ModuleType):
    """The module itself answers `ops["mul"]`, `for op in ops`, `"mul" in ops`, `len`."""

    def __getitem__(self, name):
        return lookup(name)

    def __iter__(self):
        return iter(_tables()["classes"].values())

    def __len__(self):
        return len(_tables()["classes"])

    def __contains__(self, item):
        tables = _tables()
        if isinstance(item, str):
            return item in tables["classes"] or item in tables["names"]
        return item in tables["classes"].values()


sys.modules[__name__].__class__ = _Registry

__all__ = ["lookup", "names", "Elementwise", *FAMILIES]
