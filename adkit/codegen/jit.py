"""ak.jit: trace per input signature, optimize, fuse, compile to native code.

Owns: `jit` and `Jitted` (the signature cache; `.lower()`, `.compile()`). A plain call
(tensors that need no gradient, no transform active) runs the Compiled program of its
signature (compiled.py); with `compile="background"` (the default) a signature's calls
run on numpy (or, for graphs too big for numpy, on quickly compiled native code) until
its optimized native code, made on a worker thread, is ready (tiered.py). A call under
a transform (grad, jvp, vmap, tracing) or on tensors that require grad is one JitCall op
(call.py), whose rules run the compiled vjp, jvp or batched graph, so jit composes with
ak.func and with autograd both ways.
"""
import functools

import numpy as np

from .. import _dispatch
from .._pytree import tree_flatten
from ..autograd.grad_mode import is_grad_enabled
from ..ir.trace import trace_for
from ..tensor import Tensor
from . import compiled_view, plan_cache
from .call import call_jitted, static_key
from .compiled import OPTIMIZE, Compiled
from .export import export_jitted
from .pickling import reduce_jitted
from .pipeline import check_passes, pass_name, passes_key, run_pipeline
from .tiered import Pending

_interpreters = _dispatch._STACK.get
COMPILE_MODES = ("background", "eager")
# what compile=None means; the test suite flips it to run jit's tests in both modes
DEFAULT_COMPILE = "background"


def jit(fn=None, static_argnums=(), passes=None, compile=None):
    """Compile `fn` per input signature (shapes, dtypes, pytree structure, static
    values); usable as `ak.jit(f)`, `@ak.jit` or `@ak.jit(static_argnums=...)`.
    `passes`: a list of functions Graph -> Graph run on each traced graph (after
    tracing and autodiff) instead of jit's own pipeline, `ak.ir.passes.
    DEFAULT_PIPELINE` (None: that pipeline; see pipeline.py).
    `compile`: "background" (the default): a signature's first call runs on numpy
    (quick native code for graphs too big for numpy) while LLVM compiles optimized code
    on a worker thread, later calls run it once it is ready; "eager": the first call
    compiles optimized code, then runs it."""
    if fn is None:
        return functools.partial(jit, static_argnums=static_argnums, passes=passes,
                                 compile=compile)
    if not callable(fn):
        raise TypeError(f"ak.jit: expected a function to compile, got {type(fn).__name__}")
    return Jitted(fn, static_argnums, passes, compile)


def _is_tensor(x):
    return isinstance(x, (Tensor, np.ndarray))


class Jitted:
    """A compiled function: one Compiled per signature seen."""

    def __init__(self, fn, static_argnums=(), passes=None, compile=None):
        self.fn = fn
        self.compile_mode = DEFAULT_COMPILE if compile is None else compile
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"ak.jit(compile={compile!r}): expected one of "
                             f"{', '.join(map(repr, COMPILE_MODES))}")
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) \
            else tuple(static_argnums)
        # name and docstring only: copying fn's __dict__ would share the caches of a
        # jitted function that fn wraps (jit(grad(jit(f))): grad's wrapper copied them)
        functools.update_wrapper(self, fn, updated=())
        self.cache = {}  # signature -> Compiled (or Pending: tiered.py)
        self.op_cache = {}  # signature -> the traced body a JitCall op runs (call.py)
        self._fast = {}  # (shape, dtype) per plain-tensor argument -> Compiled
        self.passes = passes

    @property
    def passes(self):
        """The user's passes (a tuple; None: the default pipeline); setting new ones
        forgets what was compiled."""
        return self._passes

    @passes.setter
    def passes(self, passes):
        self._passes = check_passes(passes)
        self._passes_key = passes_key(self._passes)
        self.cache.clear()
        self.op_cache.clear()
        self._fast.clear()

    @property
    def name(self):
        return getattr(self.fn, "__qualname__", None) or getattr(self.fn, "__name__", "f")

    def _key(self, args, kwargs):
        dynamic = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, tree = tree_flatten(dynamic, is_leaf=_is_tensor)
        fn = self.name
        sig = tuple((tuple(np.shape(x)), np.asarray(x).dtype.str) if _is_tensor(x) else
                    ("static", type(x).__name__, static_key(x, fn, "a static argument"))
                    for x in leaves)  # 2 and 2.0 differ
        statics = tuple((i, type(args[i]).__name__,
                         static_key(args[i], fn, f"static argument {i} (static_argnums)"))
                        for i in self.static_argnums if i < len(args))
        for name, value in kwargs.items():
            if _is_tensor(value):
                raise TypeError(f"jit: keyword arguments are static (compiled in), but "
                                f"{name}= is a tensor: pass tensors positionally")
        return (tree, sig, statics,
                tuple(sorted((k, type(v).__name__, static_key(v, fn, f"keyword {k}="))
                             for k, v in kwargs.items())),
                self._passes_key)

    def __call__(self, *args, **kwargs):
        if not kwargs and not self.static_argnums and not _interpreters():
            key = ()  # the fast path: plain tensors, looked up by shape and dtype only
            for a in args:
                if type(a) is not Tensor or a._requires_grad:
                    break
                key += (a._data.shape, a._data.dtype)
            else:
                program = self._fast.get(key)
                if program is None:
                    program = self._fast[key] = self._program(args, kwargs)
                if not program.closes_over_grad:
                    return program.run_checked(args)
        if _dispatch._STACK.get() or (is_grad_enabled() and any(
                isinstance(x, Tensor) and x.requires_grad
                for x in tree_flatten(args, is_leaf=_is_tensor)[0])):
            return call_jitted(self, args, kwargs)  # one op whose rules are compiled
        program = self._program(args, kwargs)
        if program.closes_over_grad:  # reads a parameter: live, and recorded if need be
            return call_jitted(self, args, kwargs)
        return program(*args, **kwargs)

    def __repr__(self):
        return compiled_view.jitted_repr(self)

    def _repr_html_(self):  # notebooks
        return compiled_view.jitted_html(self)

    def lower(self, *args, **kwargs):
        """The optimized, fused Graph for these arguments' signature."""
        return self.compile(*args, **kwargs).graph

    def compile(self, *args, **kwargs):
        """The Compiled program for these arguments' signature (cached; waits for a
        background compile)."""
        program = self._program(args, kwargs)
        return program.native() if isinstance(program, Pending) else program

    def _program(self, args, kwargs):
        """The signature's program: its Compiled, or its Pending one (tiered.py)."""
        key = self._key(args, kwargs)
        program = self.cache.get(key)
        if program is None:
            name = f"jit({self.name})"
            graph = trace_for(f"ak.{name}", self.fn, args, kwargs)
            program = self._new_program(graph, name)
            # a closure over a tensor that requires grad (a parameter): calls read its
            # current value (an optimizer changes it in place) and autograd records them
            # (call.py); other closed-over tensors are snapshots, as in JAX
            program.closes_over_grad = any(
                data.get("requires_grad") for _, data in graph.nx.nodes(data=True))
            self.cache[key] = program
        return program

    def _new_program(self, graph, name):
        """A traced signature's program. Another process may have compiled this graph:
        the disk cache of plans (plan_cache.py) then has its plan and code. Eager: looked
        up here, else compiled (and stored). Background: looked up here for a graph
        whose first calls run native code (a hit skips the quick code) or make much on
        numpy (Pending.look_up_first); a small graph's Pending looks it up on the worker
        thread (hashing the graph and loading the plan cost more than numpy's run)."""
        if self.compile_mode == "eager":
            plan_key = plan_cache.key(graph, self._passes)
            program = plan_cache.load(plan_key)
            if program is None:
                program = Compiled(run_pipeline(graph, self._passes, name), name)
                plan_cache.store(plan_key, program)
            return program
        pending = Pending(graph, self._passes, name, self._promote)
        if not pending.look_up_first:
            return pending
        pending.plan_key = plan_cache.key(graph, self._passes)
        return plan_cache.load(pending.plan_key) or pending

    def export(self, path, *example_args, name=None, cpu="native"):
        """Write a C library (path.so, path.h) with one C ABI function per compiled
        signature; example_args pick the signature (export.py). `cpu`: the CPU it is
        built for: "native" (this machine's), "generic" (any x86-64) or an LLVM CPU
        name such as "x86-64-v3" (export_target.py)."""
        return export_jitted(self, path, example_args, name=name, cpu=cpu)

    def __reduce__(self):
        """Pickle by the function (by reference, or by value through cloudpickle);
        compiled code is rebuilt or read from the disk cache on arrival (pickling.py)."""
        return reduce_jitted(self)

    def _promote(self, pending, compiled):
        """Put a finished background compile where its Pending was (any thread)."""
        for table in (self.cache, self._fast):
            for key, program in list(table.items()):
                if program is pending:
                    table[key] = compiled


__all__ = ["OPTIMIZE", "Compiled", "Jitted", "Pending", "jit", "pass_name"]
