"""Pickling of jitted functions and compiled programs, so they can be sent to other
processes (Dask workers, multiprocessing) and saved.

Owns: what `pickle` makes of `ak.jit(f)` (`Jitted.__reduce__`) and of a `Compiled`
(`ak.jit(f).compile(x)`), and `received()`, the jitted functions this process has
unpickled. Does not: trace, plan or compile (jit.py, compiled.py); pickle tensors
(adkit/interop.py) or graphs (a Graph pickles as its networkx graph).

Machine code never travels. A jitted function travels as its function, static_argnums,
passes and compile mode, and compiles on arrival like any new jitted function (LLVM's
part comes from the on-disk cache, disk_cache.py, when another process already made it).
A Compiled travels as its optimized graph and is planned and compiled again on arrival.

A function or pass goes the way cloudpickle sends functions: by reference (module and
name) when another process can import it, else by value through cloudpickle when it is
installed (lambdas, closures, functions of `__main__`, `ak.func.grad(f)`, which is a
closure), else pickle's own way, which fails with a message saying to install
cloudpickle. A jitted function bound to a name in its module (`@ak.jit def f`, or
`g = ak.jit(ak.func.grad(f))` beside f) goes by reference as a whole.

Every copy of one jitted function that a process unpickles is the same object (the
first one), so it compiles once per process however many tasks carry it: a Dask worker
compiles a jitted gradient once, not once per chunk.
"""
import collections
import importlib
import pickle
import sys
import threading
import uuid

_RECEIVED = collections.OrderedDict()  # token -> Jitted unpickled here, most recent last
_KEEP = 128  # how many received jitted functions (and their compiled code) are kept
_LOCK = threading.Lock()


def _cloudpickle():
    """The cloudpickle module, or None when it is not installed."""
    try:
        return importlib.import_module("cloudpickle")
    except ImportError:
        return None


def _module(obj):
    """The module `obj` says it belongs to, unless that is __main__ (which another
    process does not import), or None."""
    name = getattr(obj, "__module__", None)
    return sys.modules.get(name) if isinstance(name, str) and name != "__main__" else None


def importable(obj):
    """Whether `obj` (a function, a class) is what another process finds by importing
    its module and looking up its qualified name (pickle's way of sending it)."""
    found, qualname = _module(obj), getattr(obj, "__qualname__", None)
    if found is None or not isinstance(qualname, str) or "<" in qualname:  # <locals>
        return False
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is obj


def _global_name(jitted):
    """The name of a module-level jitted function in its module (`g = ak.jit(grad(f))`
    has f's qualname, not g), or None."""
    module = _module(jitted)
    if module is None:
        return None
    if importable(jitted):
        return jitted.__qualname__
    return next((k for k, v in vars(module).items() if v is jitted), None)


class ByValue:
    """A function (or pass) pickled by value with cloudpickle, inside a plain pickle."""

    def __init__(self, data):
        self.data = data

    def load(self):
        return pickle.loads(self.data)


def portable(obj, what):
    """`obj` in a form pickle can send to another process: itself (by reference, or by
    its own __reduce__) or ByValue; PicklingError saying what to do when neither."""
    if importable(obj):
        return obj
    cloudpickle = _cloudpickle()
    if cloudpickle is not None:
        return ByValue(cloudpickle.dumps(obj))
    try:
        pickle.dumps(obj)
    except Exception as e:  # pickle raises PicklingError, AttributeError, TypeError...
        raise pickle.PicklingError(
            f"cannot pickle {what}: {obj!r} cannot be imported by name in another process "
            "(a lambda, a closure or a local function; ak.func.grad(f) and the other "
            "transforms return closures). Install cloudpickle (pip install cloudpickle, "
            "or adkit's `pickle` extra) to send it by value, or define it at module "
            "level") from e
    return obj  # a function of __main__ goes by reference, as pickle sends functions


def _load(obj):
    return obj.load() if isinstance(obj, ByValue) else obj


def reduce_jitted(jitted):
    """`Jitted.__reduce__`: by reference for a module-level @ak.jit function, else its
    parts (function, static_argnums, passes, compile mode) and a token that names this
    jitted function in every process (see `received`)."""
    name = _global_name(jitted)
    if name is not None:  # every process that imports the module has this one
        return name  # pickle saves it as a global: module.name
    name = f"ak.jit({jitted.name})"
    fn = portable(jitted.fn, f"the function of {name}")
    passes = jitted.passes
    if passes is not None:
        passes = tuple(portable(p, f"a pass of {name} (passes=[...])") for p in passes)
    # a new token when the passes change: the receiver's copy must compile with them
    stamp = jitted.__dict__.get("_pickle_token")
    if stamp is None or stamp[0] != jitted._passes_key:
        stamp = jitted._pickle_token = (jitted._passes_key, uuid.uuid4().hex)
    return (_rebuild_jitted, (type(jitted), stamp[1], fn, jitted.static_argnums, passes,
                              jitted.compile_mode))


def _rebuild_jitted(cls, token, fn, static_argnums, passes, compile_mode):
    with _LOCK:
        if token in _RECEIVED:
            _RECEIVED.move_to_end(token)
            return _RECEIVED[token]
    passes = None if passes is None else [_load(p) for p in passes]
    jitted = cls(_load(fn), static_argnums, passes, compile_mode)
    jitted._pickle_token = (jitted._passes_key, token)  # sent on as the same function
    with _LOCK:
        jitted = _RECEIVED.setdefault(token, jitted)  # another thread may have been first
        while len(_RECEIVED) > _KEEP:
            _RECEIVED.popitem(last=False)
    return jitted


def received():
    """The jitted functions this process has unpickled, oldest first (each once, however
    many times it arrived): `len(j.cache)` is how many signatures it compiled here."""
    with _LOCK:
        return list(_RECEIVED.values())


def reduce_compiled(compiled):
    """`Compiled.__reduce__`: its optimized graph; the plan and native code are made again
    where it is unpickled (the LLVM part from the on-disk cache when it holds it)."""
    return (_rebuild_compiled, (type(compiled), compiled.graph, compiled.closes_over_grad))


def _rebuild_compiled(cls, graph, closes_over_grad):
    compiled = cls(graph, "unpickled jit")
    compiled.closes_over_grad = closes_over_grad
    return compiled


__all__ = ["importable", "portable", "received", "reduce_compiled", "reduce_jitted"]
