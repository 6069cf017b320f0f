"""Plans as data: a compiled program's graph and plan written as JSON plus raw array
bytes, and read back, for the disk cache of plans (plan_cache.py).

Owns: `encode(obj) -> (json text, blobs)`, `decode(text, blobs)`, `digest(obj)` (a
stable hash of a value: the traced graph's part of a plan cache key) and `NotData`.
Does not: read or write files (disk_cache.py), decide what is cached (plan_cache.py).

What it writes is data: None, bools, ints, floats, strings and bytes; tuples, lists,
dicts and sets; numpy arrays, dtypes and scalars; slices; adkit tensors and dtypes;
networkx graphs; LLVM scalar types (by name); classes by name; and objects of adkit's own classes as their
attributes. Reading one back never runs code of the file's choosing: a class is found
by name in an adkit module (or is one of a few builtins), an object is made with
`object.__new__` and given its attributes (no __init__, __setstate__ or __reduce__),
a namedtuple with `tuple.__new__`. Functions, code, objects of other classes and
tensors that require grad are refused with NotData (their plan is not cached).
Shared objects stay shared (each mutable one is written once, then referred to), so
a plan's steps and its buffer list still see the same Layouts and kernels.
An attribute a class names in `unstored_attributes` (what linking sets: a ctypes
entry point) is not written and reads back as None.
"""
import hashlib
import importlib
import json
import sys

import networkx as nx
import numpy as np
from llvmlite import ir

from .. import dtypes
from ..ir.rules import TensorSpec
from ..tensor import Tensor, _make
from .buffers import aligned_empty


class NotData(TypeError):
    """A value the codec does not write (a function, an object of a class outside
    adkit, a tensor that requires grad)."""


_IR_TYPES = {"double": ir.DoubleType, "float": ir.FloatType, "half": ir.HalfType}
_BUILTIN_TYPES = {t.__name__: t for t in (tuple, list, dict, set, frozenset, int, float,
                                          bool, str, bytes, complex, slice, type(None))}


def _is_adkit(module):
    return module == "adkit" or module.startswith("adkit.")


def _class_ref(cls):
    module, qualname = cls.__module__, cls.__qualname__
    if module == "builtins":
        if _BUILTIN_TYPES.get(qualname) is cls:
            return ["c", module, qualname]
    elif isinstance(module, str) and _is_adkit(module) and "<" not in qualname:
        return ["c", module, qualname]
    raise NotData(f"class {module}.{qualname} is not adkit's")


def _find_class(module, qualname):
    """The class a ["c", module, qualname] names, or ValueError."""
    if module == "builtins":
        found = _BUILTIN_TYPES.get(qualname)
    elif isinstance(module, str) and _is_adkit(module):
        found = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part, None)
    else:
        found = None
    if not isinstance(found, type):
        raise ValueError(f"no class {module}.{qualname}")
    return found


def _attributes(obj):
    """(name, value) of an object's state: its __dict__ and slots."""
    names = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    skip = set(getattr(type(obj), "unstored_attributes", ())) | {"__dict__", "__weakref__"}
    return [(name, getattr(obj, name)) for name in dict.fromkeys(names)
            if name not in skip and hasattr(obj, name)]


class _Encoder:
    """One encoding. `hashing`: arrays as digests of their bytes, sets in a canonical
    order (a key, never decoded)."""

    def __init__(self, hashing=False):
        self.hashing = hashing
        self.memo = {}  # id -> index of a mutable object written already
        self.alive = []  # keeps memoized objects alive, so their ids stay theirs
        self.blobs = []

    def _remember(self, x):
        index = self.memo[id(x)] = len(self.memo)
        self.alive.append(x)
        return index

    def value(self, x):
        t = type(x)
        if x is None or t is bool or t is int or t is str or t is float:
            return x
        if t is tuple:
            return ["t", [self.value(v) for v in x]]
        if self.hashing and (t is list or t is dict):  # sharing does not change a hash
            items = x.items() if t is dict else enumerate(x)
            return [t.__name__[0], [[self.value(k), self.value(v)] for k, v in items]]
        index = self.memo.get(id(x))
        if index is not None:
            return ["r", index]
        if t is list:
            i = self._remember(x)
            return ["l", i, [self.value(v) for v in x]]
        if t is dict:
            i = self._remember(x)
            return ["d", i, [[self.value(k), self.value(v)] for k, v in x.items()]]
        return self._other(x, t)

    def _other(self, x, t):
        if t is np.ndarray:
            return self._array(x)
        if t is set or t is frozenset:
            items = [self.value(v) for v in x]
            if self.hashing:
                items.sort(key=json.dumps)
            return ["s" if t is set else "f", items]
        if isinstance(x, np.generic):
            return ["ns", self._dtype(x.dtype), x.tobytes().hex()]
        if t is slice:
            return ["sl", self.value(x.start), self.value(x.stop), self.value(x.step)]
        if t is bytes:
            return ["b", x.hex()]
        if t is complex:
            return ["cx", x.real, x.imag]
        if x is Ellipsis:
            return ["E"]
        if isinstance(x, np.dtype):
            return ["nd", self._dtype(x)]
        if isinstance(x, type):
            return _class_ref(x)
        if t is dtypes.DType:
            return ["dt", x.np.str]
        if isinstance(x, Tensor):
            return self._tensor(x)
        if t is nx.MultiDiGraph:
            return self._nx(x)
        if t in _IR_TYPES.values() or t is ir.IntType:  # a native call's element type
            return ["ir", str(x)]
        if isinstance(x, tuple) and hasattr(t, "_fields"):
            return ["n", _class_ref(t), [self.value(v) for v in x]]
        if t.__new__ is object.__new__ and not isinstance(x, BaseException):
            cls = _class_ref(t)  # NotData unless adkit's
            i = self._remember(x)
            return ["o", i, cls, [[name, self.value(v)] for name, v in _attributes(x)]]
        raise NotData(f"{t.__module__}.{t.__qualname__} is not data")

    def _text(self, x):
        """A string naming x exactly, for hashing: each kind of value written in a form
        no other kind can take (quoted strings, f-prefixed floats, bracketed tuples and
        dicts, S/D/C-prefixed specs, dtypes and classes, J and the general encoding for
        anything else), so equal strings mean equal values."""
        t = type(x)
        if t is str or t is int or t is bool or x is None:
            return repr(x)
        if t is float:
            return "f" + repr(x)
        if t is tuple:
            return "(" + ",".join([self._text(v) for v in x]) + ")"
        if t is dict:
            return "{" + ",".join([f"{self._text(k)}:{self._text(v)}"
                                   for k, v in x.items()]) + "}"
        if t is TensorSpec:
            return f"S{self._text(tuple(x.shape))}{self._text(x.dtype)}"
        if t is dtypes.DType:
            return "D" + x.name
        if isinstance(x, type):
            _, module, qualname = _class_ref(x)
            return f"C{module}:{qualname}"
        return "J" + json.dumps(self.value(x), separators=(",", ":"))

    @staticmethod
    def _dtype(dtype):
        if dtype.hasobject or dtype.fields is not None:
            raise NotData(f"numpy dtype {dtype} is not plain data")
        return dtype.str

    def _array(self, a):
        dtype = self._dtype(a.dtype)
        i = self._remember(a)
        data = np.ascontiguousarray(a).tobytes()
        if self.hashing:
            return ["a", i, hashlib.sha256(data).hexdigest(), dtype, list(a.shape)]
        self.blobs.append(data)
        return ["a", i, len(self.blobs) - 1, dtype, list(a.shape), bool(a.flags.writeable)]

    def _tensor(self, t):
        if t._requires_grad or t._grad_fn is not None:
            raise NotData("a tensor that requires grad")
        i = self._remember(t)
        return ["T", i, self.value(t._data)]

    def _nx(self, g):
        i = self._remember(g)
        if self.hashing:  # a text of its own: ~2x quicker than the general encoding
            nodes = ";".join(f"{self._text(n)}={self._text(data)}"
                             for n, data in g._node.items())
            edges = ";".join(f"{self._text(u)}>{self._text(v)}#{self._text(k)}"
                             f"{self._text(d)}" for u, nbrs in g._adj.items()
                             for v, keyed in nbrs.items() for k, d in keyed.items())
            return ["xh", i, self.value(g.graph), nodes, edges]
        out = ["x", i, self.value(g.graph), self.value(g._node), self.value(g._adj)]
        out.append(None if self.hashing else self.value(g._pred))  # (in decoding order)
        return out


def encode(obj):
    """(JSON text, [bytes]) of obj; NotData if some part of it is not data."""
    encoder = _Encoder()
    text = json.dumps(encoder.value(obj), separators=(",", ":"))
    return text, encoder.blobs


def digest(obj):
    """A hex sha256 of obj's encoding (arrays by their bytes' digests; sets in a sorted
    order; shared lists and dicts written each time): equal for equal data across
    processes; NotData if obj is not data (or holds a cycle of lists or dicts)."""
    try:
        encoded = _Encoder(hashing=True).value(obj)
    except RecursionError:
        raise NotData("a cycle of lists or dicts") from None
    text = json.dumps(encoded, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class _Decoder:
    def __init__(self, blobs):
        self.blobs = blobs
        self.table = {}

    def value(self, v):
        if type(v) is not list:
            return v
        return _HANDLERS[v[0]](self, v)

    # (containers decode their plain items inline: most items are strings and numbers)
    def _t(self, v):
        value = self.value
        return tuple([x if type(x) is not list else value(x) for x in v[1]])

    def _r(self, v):
        return self.table[v[1]]

    def _l(self, v):
        out = self.table[v[1]] = []
        value = self.value
        out.extend([x if type(x) is not list else value(x) for x in v[2]])
        return out

    def _d(self, v):
        out = self.table[v[1]] = {}
        value = self.value
        for k, x in v[2]:
            if type(k) is list:
                k = value(k)  # (`out[f(k)] = f(x)` would decode x first)
            out[k] = x if type(x) is not list else value(x)
        return out

    def _s(self, v):
        return {self.value(x) for x in v[1]}

    def _f(self, v):
        return frozenset(self.value(x) for x in v[1])

    def _ns(self, v):
        return np.frombuffer(bytes.fromhex(v[2]), np.dtype(v[1]))[0]

    def _sl(self, v):
        return slice(self.value(v[1]), self.value(v[2]), self.value(v[3]))

    def _b(self, v):
        return bytes.fromhex(v[1])

    def _cx(self, v):
        return complex(v[1], v[2])

    def _E(self, v):
        return Ellipsis

    def _nd(self, v):
        found = _DTYPES.get(v[1])
        if found is None:
            found = _DTYPES[v[1]] = np.dtype(v[1])
        return found

    def _ir(self, v):
        name = v[1]
        if name in _IR_TYPES:
            return _IR_TYPES[name]()
        if name[:1] == "i" and name[1:].isdigit():
            return ir.IntType(int(name[1:]))
        raise ValueError(f"no LLVM type {name!r}")

    def _c(self, v):
        key = (v[1], v[2])
        found = _CLASSES.get(key)
        if found is None:
            found = _CLASSES[key] = _find_class(*key)
        return found

    def _dt(self, v):
        return dtypes.from_numpy_dtype(v[1])

    def _a(self, v):
        _, i, blob, dtype, shape, writeable = v
        array = aligned_empty(tuple(shape), np.dtype(dtype))
        flat = array.reshape(-1)
        flat[...] = np.frombuffer(self.blobs[blob], array.dtype, count=flat.size)
        array.setflags(write=writeable)
        self.table[i] = array
        return array

    def _T(self, v):
        tensor = self.table[v[1]] = _make(self.value(v[2]))
        return tensor

    def _x(self, v):
        g = self.table[v[1]] = nx.MultiDiGraph()
        g.graph.update(self.value(v[2]))
        node, adj, pred = self.value(v[3]), self.value(v[4]), self.value(v[5])
        g._node, g._adj, g._pred = node, adj, pred  # _adj sets _succ too
        return g

    def _n(self, v):
        value = self.value
        return tuple.__new__(value(v[1]), [x if type(x) is not list else value(x)
                                           for x in v[2]])

    def _o(self, v):
        cls = self.value(v[2])
        plain = _PLAIN_CLASSES.get(cls)
        if plain is None:
            if cls.__new__ is not object.__new__:
                raise ValueError(f"{cls.__qualname__} is not made by object.__new__")
            plain = _PLAIN_CLASSES[cls] = not any("__slots__" in c.__dict__
                                                  for c in cls.__mro__[:-1])
        obj = self.table[v[1]] = object.__new__(cls)
        state = dict.fromkeys(getattr(cls, "unstored_attributes", ()))
        value = self.value
        for name, x in v[3]:
            state[name] = x if type(x) is not list else value(x)
        if plain:  # its attributes are its __dict__
            obj.__dict__.update(state)
        else:
            for name, x in state.items():
                object.__setattr__(obj, name, x)
        return obj


# what decoding looked up already: numpy dtypes, classes by name, whether a class keeps
# its attributes in its __dict__ alone (no slots)
_DTYPES, _CLASSES, _PLAIN_CLASSES = {}, {}, {}
_HANDLERS = {name[1:]: f for name, f in vars(_Decoder).items()
             if name.startswith("_") and not name.startswith("__") and callable(f)}


def decode(text, blobs):
    """The object encode() wrote; ValueError (or another error) for damaged data."""
    return _Decoder(blobs).value(json.loads(text))


__all__ = ["NotData", "decode", "digest", "encode"]
