"""A stable hash of a traced graph: its part of a plan cache key (plan_cache.py).

Owns: `digest(obj)`. Does not: encode values to store them (plan_codec.py) or decide what
is cached (plan_cache.py).

The hash is a sha256 of a text that names the value exactly: equal texts mean equal
data (same types, same values, same order), equal data gives the same text in any
process. The text is Python's repr where repr is exact and cheap: strings, ints, floats,
bools, None and bytes, and tuples, lists and dicts of them are repr'd whole (one C
call; a graph's shapes, edge data and most parameters). Anything else has a text of its
own that starts with "@" and a letter (no repr of those types starts with "@"), and
containers of such values are written as repr writes them, so the two paths give the
same text for the same value: adkit dtypes and TensorSpecs, classes by module and
qualified name (adkit's and a few builtins'; NotData for others: a user's op class is
known to its process only), numpy arrays by their dtype, shape and the sha256 of their
bytes, sets in a sorted order, networkx graphs by their nodes and edges, and objects of
adkit's classes by their class and attributes. An object (array, tensor, graph) seen a
second time is written as a reference to the first, so shared objects stay cheap and
cycles through them end; a cycle of lists or dicts is NotData.
Measured on GMM large's traced graph (111 nodes): ~0.3 ms where plan_codec's general
encoding took ~2.2.
"""
import hashlib

import networkx as nx
import numpy as np
from llvmlite import ir

from .. import dtypes
from ..ir.rules import TensorSpec
from ..tensor import Tensor
from .plan_codec import NotData, _Unread, attributes, class_ref, plain_dtype

# types whose repr is exact and self-delimiting: repr(1) != repr(1.0) != repr(True),
# strings and bytes are quoted
_PLAIN = frozenset({str, int, float, bool, type(None), bytes})
_LLVM_TYPES = (ir.DoubleType, ir.FloatType, ir.HalfType, ir.IntType)
_CLASS_TEXTS = {}  # id(class) -> (class, its text): a graph names a few classes often
_SPEC_TEXTS = {}  # TensorSpec -> its text: a graph's nodes repeat a few specs


def digest(obj):
    """A hex sha256 of obj's text; NotData if obj is not data (or holds a cycle of
    lists or dicts)."""
    try:
        text = _Texts().text(obj)
    except RecursionError:
        raise NotData("a cycle of lists or dicts") from None
    return hashlib.sha256(text.encode()).hexdigest()


def class_text(cls):
    """"@C" and the module and qualified name of an adkit (or builtin) class."""
    found = _CLASS_TEXTS.get(id(cls))
    if found is not None and found[0] is cls:
        return found[1]
    _, module, qualname = class_ref(cls)  # NotData unless adkit's
    text = f"@C{module}:{qualname}"
    _CLASS_TEXTS[id(cls)] = (cls, text)
    return text


class _Texts:
    """One digest's text: objects seen so far are numbered (references to them say
    their number)."""

    def __init__(self):
        self.seen = {}  # id -> number of an object written already
        self.alive = []  # keeps them alive, so their ids stay theirs

    def text(self, x):
        t = type(x)
        if t in _PLAIN or t is tuple and _PLAIN.issuperset(map(type, x)):
            return repr(x)
        if t is tuple:
            return "(" + self._items(x) + ("," if len(x) == 1 else "") + ")"
        handler = _HANDLERS.get(t)
        if handler is not None:
            return handler(self, x)
        return self._other(x, t)

    def _items(self, xs):
        """", "-joined texts of xs (their reprs when all are plain)."""
        text = self.text
        return ", ".join([repr(v) if type(v) in _PLAIN else text(v) for v in xs])

    def _list(self, x):
        if _PLAIN.issuperset(map(type, x)):
            return repr(x)
        return "[" + self._items(x) + "]"

    def _dict(self, x):
        if _PLAIN.issuperset(map(type, x.values())) and _PLAIN.issuperset(map(type, x)):
            return repr(x)
        text = self.text
        return "{" + ", ".join([
            (repr(k) if type(k) in _PLAIN else text(k)) + ": " +
            (repr(v) if type(v) in _PLAIN else text(v)) for k, v in x.items()]) + "}"

    def _spec(self, x):
        found = _SPEC_TEXTS.get(x)
        if found is None:
            if len(_SPEC_TEXTS) > 4096:  # shapes seen once in long sessions
                _SPEC_TEXTS.clear()
            found = _SPEC_TEXTS[x] = f"@S({self.text(x.shape)}, {self.text(x.dtype)})"
        return found

    def _dtype(self, x):
        return "@D" + x.name

    def _class(self, x):
        return class_text(x)

    def _set(self, x):
        # in a canonical order: a set's own order follows its items' hashes, which
        # differ between processes for strings
        return ("@s" if type(x) is set else "@f") + "{" + ", ".join(
            sorted(self.text(v) for v in x)) + "}"

    def _slice(self, x):
        return "@L" + self.text((x.start, x.stop, x.step))

    def _seen(self, x):
        """The reference to x if written already, else None (and x is numbered)."""
        number = self.seen.get(id(x))
        if number is not None:
            return f"@R{number}"
        self.seen[id(x)] = len(self.seen)
        self.alive.append(x)
        return None

    def _array(self, x):
        ref = self._seen(x)
        if ref is not None:
            return ref
        dtype = plain_dtype(x.dtype)  # (NotData before its bytes are read)
        data = np.ascontiguousarray(x).reshape(-1).view(np.uint8)  # (any dtype's bytes)
        return f"@A{dtype}{self.text(x.shape)}" + hashlib.sha256(data).hexdigest()

    def _tensor(self, x):
        if x._requires_grad or x._grad_fn is not None:
            raise NotData("a tensor that requires grad")
        return self._seen(x) or "@T" + self.text(x._data)

    def _nx(self, g):
        """Its graph attributes, nodes (id=data) and edges (u>v#key data)."""
        ref = self._seen(g)
        if ref is not None:
            return ref
        text, plain = self.text, _PLAIN
        nodes = ";".join([(repr(n) if type(n) in plain else text(n)) + "=" +
                          self._dict(data) for n, data in g._node.items()])
        edges = ";".join([
            f"{u!r}>{v!r}#{k!r}{d!r}" if type(u) is int and type(v) is int and
            type(k) is int and plain.issuperset(map(type, d.values())) else
            f"{text(u)}>{text(v)}#{text(k)}{self._dict(d)}"  # (the same text, slower)
            for u, nbrs in g._adj.items() for v, keyed in nbrs.items()
            for k, d in keyed.items()])
        return f"@X{self._dict(g.graph)}<{nodes}|{edges}>"

    def _other(self, x, t):
        if isinstance(x, type):
            _HANDLERS[t] = _Texts._class  # (a metaclass: its classes are dispatched so)
            return class_text(x)
        if isinstance(x, np.generic):
            return f"@G{plain_dtype(x.dtype)}:{x.tobytes().hex()}"
        if isinstance(x, np.dtype):
            return "@N" + plain_dtype(x)
        if isinstance(x, Tensor):
            return self._tensor(x)
        if t is complex:
            return "@c" + repr(x)
        if x is Ellipsis:
            return "@E"
        if t in _LLVM_TYPES:  # a native call's element type
            return "@I" + str(x)
        if isinstance(x, tuple) and hasattr(t, "_fields"):  # a namedtuple
            return f"@n{class_text(t)}" + self.text(tuple(x))
        if t.__new__ is object.__new__ and not isinstance(x, BaseException):
            cls = class_text(t)  # NotData unless adkit's
            return self._seen(x) or f"@O{cls}" + self._dict(dict(attributes(x)))
        raise NotData(f"{t.__module__}.{t.__qualname__} is not data")


_HANDLERS = {type: _Texts._class, list: _Texts._list, dict: _Texts._dict,
             TensorSpec: _Texts._spec, dtypes.DType: _Texts._dtype, set: _Texts._set, frozenset: _Texts._set,
             slice: _Texts._slice, np.ndarray: _Texts._array, Tensor: _Texts._tensor,
             nx.MultiDiGraph: _Texts._nx, _Unread: _Texts._nx}  # (reads an unread one)

__all__ = ["class_text", "digest"]
