"""Plans as data: a compiled program's graph and plan written as JSON plus raw array
bytes, and read back, for the disk cache of plans (plan_cache.py).

Owns: `encode(obj) -> (json text, later json text, blobs)`, `decode(text, blobs,
later)` and `NotData`. Does not: read or write files (disk_cache.py), decide what is
cached (plan_cache.py), hash (plan_digest.py: `digest` here is its).

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
Networkx graphs' nodes and edges are written last, in a text of their own ("later"),
and read when a graph is first used (_Unread): a plan's run needs its steps, not its
graphs (GMM large: ~4.5 of ~8 ms of decoding were its graph's). So are `Later` values
(deferred.py: a plan's kernels and native calls; GMM medium's decoding 2.5 -> 0.7
ms), which read back as `Deferred` until their DeferredAttribute is first read.
Everything the rest of the plan shares with them is then written before them, so
reading the plan never needs the later text.
"""
import functools
import importlib
import json
import sys
import threading

import networkx as nx
import numpy as np
from llvmlite import ir

from .. import dtypes
from ..ir.rules import TensorSpec
from ..tensor import Tensor, _make
from .buffers import aligned_empty
from .deferred import Deferred, Later, stored


class NotData(TypeError):
    """A value the codec does not write (a function, an object of a class outside
    adkit, a tensor that requires grad)."""


_IR_TYPES = {"double": ir.DoubleType, "float": ir.FloatType, "half": ir.HalfType}
_BUILTIN_TYPES = {t.__name__: t for t in (tuple, list, dict, set, frozenset, int, float,
                                          bool, str, bytes, complex, slice, type(None))}


def _is_adkit(module):
    return module == "adkit" or module.startswith("adkit.")


def class_ref(cls):
    module, qualname = cls.__module__, cls.__qualname__
    if module == "builtins":
        if _BUILTIN_TYPES.get(qualname) is cls:
            return ["c", module, qualname]
    elif isinstance(module, str) and _is_adkit(module) and "<" not in qualname:
        return ["c", module, qualname]
    raise NotData(f"class {module}.{qualname} is not adkit's")


def _find_class(module, qualname):
    """The class a ["c", i, module, qualname] names, or ValueError."""
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


def attributes(obj):
    """(name, value) of an object's state: its __dict__ and slots."""
    names = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    skip = set(getattr(type(obj), "unstored_attributes", ())) | {"__dict__", "__weakref__"}
    return [(name, getattr(obj, name)) for name in dict.fromkeys(names)
            if name not in skip and hasattr(obj, name)]


def plain_dtype(dtype):
    """A numpy dtype's str, or NotData for one that is not plain data."""
    if dtype.hasobject or dtype.fields is not None:
        raise NotData(f"numpy dtype {dtype} is not plain data")
    return dtype.str


class _Encoder:
    """One encoding: mutable objects and classes are numbered when first written (then
    referred to); networkx graphs' contents wait in `later` until the rest is written."""

    def __init__(self):
        self.memo = {}  # id -> index of a mutable object (or class) written already
        self.alive = []  # keeps memoized objects alive, so their ids stay theirs
        self.blobs = []
        # bytes -> their blob: equal arrays (a constant in the graph and in its plan)
        # are stored once (GMM large's entry: 522 -> 432 KB, each byte read and hashed
        # by a disk-cache hit)
        self.blob_numbers = {}
        # (index, graph) of graphs whose contents are not written yet, (None, value) of
        # Later values: the later part, in the order they were met
        self.later = []
        self.layouts = {}  # attribute names of objects written -> their number

    def _remember(self, x):
        index = self.memo[id(x)] = len(self.memo)
        self.alive.append(x)
        return index

    def value(self, x):
        t = type(x)
        if x is None or t is bool or t is int or t is str or t is float:
            return x
        if t is tuple:
            return ["t", *[self.value(v) for v in x]]
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
            return ["s" if t is set else "f", [self.value(v) for v in x]]
        if isinstance(x, np.generic):
            return ["ns", plain_dtype(x.dtype), x.tobytes().hex()]
        if t is slice:
            return ["sl", self.value(x.start), self.value(x.stop), self.value(x.step)]
        if t is bytes:
            return ["b", x.hex()]
        if t is complex:
            return ["cx", x.real, x.imag]
        if x is Ellipsis:
            return ["E"]
        if isinstance(x, np.dtype):
            return ["nd", plain_dtype(x)]
        if isinstance(x, type):
            _, module, qualname = class_ref(x)  # NotData unless adkit's (or a builtin)
            return ["c", self._remember(x), module, qualname]
        if t is dtypes.DType:
            return ["dt", x.np.str]
        if isinstance(x, Tensor):
            return self._tensor(x)
        if t is nx.MultiDiGraph or t is _Unread:
            i = self._remember(x)
            self.later.append((i, x))
            return ["x", i]
        if t in _IR_TYPES.values() or t is ir.IntType:  # a native call's element type
            return ["ir", str(x)]
        if isinstance(x, tuple) and hasattr(t, "_fields"):
            return ["n", self.value(t), *[self.value(v) for v in x]]
        if t is Later:  # written with the graphs' contents, read when first used
            self.later.append((None, x.value))
            return ["D", len(self.later) - 1]
        if t.__new__ is object.__new__ and not isinstance(x, BaseException):
            cls = self.value(t)  # NotData unless adkit's
            i = self._remember(x)
            pairs = [(name, stored(t, name, v)) for name, v in attributes(x)]
            return ["o", i, cls, self._names(tuple(name for name, _ in pairs)),
                    *[self.value(v) for _, v in pairs]]
        raise NotData(f"{t.__module__}.{t.__qualname__} is not data")

    def _array(self, a):
        dtype = plain_dtype(a.dtype)
        i = self._remember(a)
        data = np.ascontiguousarray(a).tobytes()
        blob = self.blob_numbers.get(data)
        if blob is None:
            blob = self.blob_numbers[data] = len(self.blobs)
            self.blobs.append(data)
        return ["a", i, blob, dtype, list(a.shape), bool(a.flags.writeable)]

    def _names(self, names):
        """An object's attribute names: ["k", j, *names] the first time, j after."""
        j = self.layouts.get(names)
        if j is None:
            j = self.layouts[names] = len(self.layouts)
            return ["k", j, *names]
        return j

    def _tensor(self, t):
        if t._requires_grad or t._grad_fn is not None:
            raise NotData("a tensor that requires grad")
        i = self._remember(t)
        return ["T", i, self.value(t._data)]

    def graphs(self):
        """The later part: the contents of the graphs written so far, and of those
        they hold: [index, graph attributes, nodes, successors, predecessors] each, and
        Later values: ["D", their number, the value], in the order they were met."""
        out = []
        for j, (i, x) in enumerate(self.later):  # (grows while it is walked)
            if i is None:
                out.append(["D", j, self.value(x)])
            else:
                out.append([i, self.value(x.graph), self.value(x._node),
                            self.value(x._adj), self.value(x._pred)])
        return out


def encode(obj):
    """(JSON text, JSON text of its graphs' contents, [bytes]) of obj; NotData if some
    part of it is not data."""
    encoder = _Encoder()
    text = json.dumps(encoder.value(obj), separators=(",", ":"))
    later = json.dumps(encoder.graphs(), separators=(",", ":"))
    return text, later, encoder.blobs


def digest(obj):
    """plan_digest.digest (a stable hash of obj's data)."""
    return plan_digest.digest(obj)


class _Decoder:
    def __init__(self, blobs, graphs):
        self.blobs = blobs
        self.table = {}
        self.graphs = _Graphs(self, graphs)  # the graphs' contents, read when needed
        self.layouts = {}  # number -> attribute names of objects (the encoder's _names)

    def value(self, v):
        if type(v) is not list:
            return v
        return _HANDLERS[v[0]](self, v)

    # (containers decode their plain items inline: most items are strings and numbers)
    def _t(self, v):
        value = self.value
        return tuple([x if type(x) is not list else value(x) for x in v[1:]])

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
        key = (v[2], v[3])
        found = _CLASSES.get(key)
        if found is None:
            found = _CLASSES[key] = _find_class(*key)
        self.table[v[1]] = found
        return found

    def _class(self, v):
        """The class an encoded ["c", ...] or ["r", i] names (ValueError if not one)."""
        cls = self.value(v)
        if not isinstance(cls, type):
            raise ValueError("not a class")
        return cls

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

    def _D(self, v):
        return Deferred(functools.partial(self.graphs.deferred, v[1]))

    def _x(self, v):
        g = self.table[v[1]] = object.__new__(_Unread)
        object.__setattr__(g, "_plan_graphs", self.graphs)
        return g

    def _n(self, v):
        value = self.value
        return tuple.__new__(self._class(v[1]), [x if type(x) is not list else value(x)
                                                 for x in v[2:]])

    def _names(self, v):
        """The attribute names an object's encoding gives (see _Encoder._names)."""
        if type(v) is int:
            return self.layouts[v]
        names = tuple(v[2:])
        if v[0] != "k" or not all(type(name) is str for name in names):
            raise ValueError("not attribute names")
        self.layouts[v[1]] = names
        return names

    def _o(self, v):
        cls = self._class(v[2])
        plain = _PLAIN_CLASSES.get(cls)
        if plain is None:
            if cls.__new__ is not object.__new__:
                raise ValueError(f"{cls.__qualname__} is not made by object.__new__")
            plain = _PLAIN_CLASSES[cls] = not any("__slots__" in c.__dict__
                                                  for c in cls.__mro__[:-1])
        obj = self.table[v[1]] = object.__new__(cls)
        names = self._names(v[3])
        if len(names) != len(v) - 4:
            raise ValueError("an object of the wrong length")
        state = dict.fromkeys(getattr(cls, "unstored_attributes", ()))
        value = self.value
        for name, x in zip(names, v[4:]):
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


def decode(text, blobs, graphs):
    """The object encode() wrote (its text, blobs and graphs' text); ValueError (or
    another error) for damaged data. Its networkx graphs are read when first used."""
    return _Decoder(blobs, graphs).value(json.loads(text))


class _Graphs:
    """The contents of a decoding's networkx graphs: read, all at once and once, when a
    graph is first used (they may share objects)."""

    def __init__(self, decoder, text):
        self.decoder, self.text = decoder, text
        self.lock = threading.Lock()
        self.error = None
        self.values = {}  # number -> the value of a Later

    def deferred(self, j):
        """The value of Later number j (the entry's later part is read first)."""
        self.read()
        if j not in self.values:
            raise ValueError("the plan's deferred value was not in its entry")
        return self.values[j]

    def read(self):
        with self.lock:
            if self.error is not None:
                raise ValueError("the plan's graphs could not be read") from self.error
            if self.decoder is None:
                return
            try:
                for entry in json.loads(self.text):
                    if entry[0] == "D":
                        _, j, value = entry
                        self.values[j] = self.decoder.value(value)
                    else:
                        self._fill(*entry)
            except Exception as e:  # noqa: BLE001 -- each later use says so
                self.error = e
                raise ValueError("the plan's graphs could not be read") from e
            finally:
                self.decoder = self.text = None  # (and the blobs and objects it held)

    def _fill(self, index, graph, node, adj, pred):
        g, value = self.decoder.table[index], self.decoder.value
        if type(g) is not _Unread:
            raise ValueError("not a graph")
        graph, node, adj, pred = value(graph), value(node), value(adj), value(pred)
        if not all(type(d) is dict for d in (graph, node, adj, pred)):
            raise ValueError("not a graph")
        whole = nx.MultiDiGraph()
        whole.graph.update(graph)
        whole._node, whole._adj, whole._pred = node, adj, pred  # (_adj sets _succ too)
        state = object.__getattribute__(g, "__dict__")
        state.clear()
        state.update(whole.__dict__)
        # last: another thread sees an unread graph (and waits for this one) or a whole one
        object.__setattr__(g, "__class__", nx.MultiDiGraph)


class _Unread(nx.MultiDiGraph):
    """A networkx graph not read yet: the first use of any attribute reads it (and
    every graph of its entry), and it is then a plain MultiDiGraph."""

    def __getattribute__(self, name):
        _read(self)
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):
        _read(self)
        object.__setattr__(self, name, value)


def _read(g):
    if type(g) is _Unread:
        object.__getattribute__(g, "_plan_graphs").read()
        if type(g) is _Unread:  # (its entry did not have it)
            raise ValueError("the plan's graph was not in its entry")


__all__ = ["NotData", "decode", "digest", "encode"]
from . import plan_digest  # noqa: E402 -- (it uses this module's helpers)
