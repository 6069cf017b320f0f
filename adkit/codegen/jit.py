"""ak.jit: trace per input signature, optimize, fuse, compile to native code.

Owns: `jit`, `Jitted` (the signature cache; `.lower()`, `.compile()`) and `Compiled`
(runs a plan: per-thread buffers, the input checks that guard the native boundary,
fresh outputs). Does not: make the plan (plan.py: a list of steps.py's steps over
buffers.py's buffers), emit IR (steps emit themselves: program.py, kernels.py) or talk
to llvmlite.binding (runtime.py).
Calls made under a transform (grad, vmap, tracing), with inputs that require grad or
with forward-AD dual inputs run the function itself, so jit composes with ak.func and
with autograd both ways.
"""
import functools
import sys
import threading

import numpy as np
from llvmlite import ir as llvm_ir

from .. import _dispatch
from .._pytree import tree_flatten, tree_unflatten
from ..autograd.grad_mode import is_grad_enabled
from ..ir import evaluate, passes
from ..ir.trace import trace
from ..tensor import Tensor, _make
from ..control import hoist_invariants, merge_residual_scans
from . import buffers, plan, runtime, steps

# results smaller than this are fresh arrays per call; larger ones are recycled (fresh
# large arrays cost page faults, small ones come from malloc's pool)
_RECYCLE_BYTES = 1 << 17
_interpreters = _dispatch._STACK.get
# loops: one forward scan where a gradient traced two (before any pass rebuilds plans),
# and body work that only depends on a loop's consts done once, before the loop
OPTIMIZE = passes.pipeline([merge_residual_scans, passes.decompose, passes.fold_constants,
                            passes.simplify, passes.cse, passes.dce, hoist_invariants,
                            passes.dce, passes.fuse, passes.dce])


def jit(fn=None, static_argnums=()):
    """Compile `fn` per input signature (shapes, dtypes, pytree structure, static
    values); usable as `ak.jit(f)`, `@ak.jit` or `@ak.jit(static_argnums=...)`."""
    if fn is None:
        return functools.partial(jit, static_argnums=static_argnums)
    return Jitted(fn, static_argnums)


def _is_tensor(x):
    return isinstance(x, (Tensor, np.ndarray))


class Jitted:
    """A compiled function: one Compiled per signature seen."""

    def __init__(self, fn, static_argnums=()):
        self.fn = fn
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) \
            else tuple(static_argnums)
        self.cache = {}
        self._fast = {}  # (shape, dtype) per plain-tensor argument -> Compiled
        functools.update_wrapper(self, fn)

    def _key(self, args, kwargs):
        dynamic = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, tree = tree_flatten(dynamic, is_leaf=_is_tensor)
        sig = tuple((tuple(np.shape(x)), np.asarray(x).dtype.str) if _is_tensor(x) else
                    ("static", type(x).__name__, x) for x in leaves)  # 2 and 2.0 differ
        statics = tuple((i, type(args[i]).__name__, args[i])
                        for i in self.static_argnums if i < len(args))
        for name, value in kwargs.items():
            if _is_tensor(value):
                raise TypeError(f"jit: keyword arguments are static (compiled in), but "
                                f"{name}= is a tensor: pass tensors positionally")
        return (tree, sig, statics,
                tuple(sorted((k, type(v).__name__, v) for k, v in kwargs.items())))

    def __call__(self, *args, **kwargs):
        if not kwargs and not self.static_argnums and not _interpreters():
            key = ()  # the fast path: plain tensors, looked up by shape and dtype only
            for a in args:
                if type(a) is not Tensor or a._requires_grad:
                    break
                key += (a._data.shape, a._data.dtype)
            else:
                compiled = self._fast.get(key)
                if compiled is not None:
                    return compiled.run_checked(args)
                compiled = self.compile(*args)
                self._fast[key] = compiled
                return compiled.run_checked(args)
        if _dispatch._STACK.get() or (is_grad_enabled() and any(
                isinstance(x, Tensor) and x.requires_grad
                for x in tree_flatten(args, is_leaf=_is_tensor)[0])):
            return self.fn(*args, **kwargs)  # under a transform: the plain function
        return self.compile(*args, **kwargs)(*args, **kwargs)

    def lower(self, *args, **kwargs):
        """The optimized, fused Graph for these arguments' signature."""
        return self.compile(*args, **kwargs).graph

    def compile(self, *args, **kwargs):
        """The Compiled program for these arguments' signature (cached)."""
        key = self._key(args, kwargs)
        compiled = self.cache.get(key)
        if compiled is None:
            graph = trace(self.fn, *args, **kwargs)
            compiled = self.cache[key] = Compiled(OPTIMIZE(graph))
        return compiled


class Compiled:
    """A graph ready to run. Fused kernels, matmuls and views are native: each run of
    them (a segment) is one LLVM entry function, called once per call; nodes without a
    lowering run with numpy between segments. `.llvm_ir`, `.asm`, `.kernels` and
    `.segments` show what was generated. The run is a plan made once: each value has a
    slot (and a Layout when native code can address it), each step reads and writes
    slots (no graph lookups per call)."""

    def __init__(self, graph):
        self.graph = graph
        planner = plan.Planner(graph)
        self.kernels = planner.kernels
        self.buffers = planner.buffers  # buffers.Buffer objects, by index
        self.steps = planner.steps  # steps.Step objects, run in order
        module = llvm_ir.Module(name="adkit_jit")
        module.triple = runtime.target_machine().triple
        _, vector_bytes = runtime.host_vector_isa()
        for step in self.steps:
            step.emit(module, vector_bytes)
        self.segments = [step.name for step in planner.segments]
        self.segment_calls = [step.calls for step in planner.segments]  # NativeCalls
        # a plan whose steps all run on numpy needs no native code
        self.module = runtime.compile_module(module) if module.functions else None
        for step in self.steps:
            step.link(self.module)
        self.n_slots = planner.n_slots
        self.input_slots = planner.input_slots
        self.consts = planner.consts
        self.output_slots = planner.output_slots
        self.output_fetch = planner.output_fetch  # makes native outputs numpy values
        self._const_roots = {id(plan.root(t._data)) for _, t in self.consts}
        self._block_sizes = planner.block_sizes
        # per call: (buffer, flat input position) and (buffer, (shape, dtype)) pairs
        self.input_buffers = [(b.index, b.position) for b in self.buffers
                              if isinstance(b, buffers.InputBuffer)]
        self._result_specs = {b.index: (b.shape, b.dtype) for b in self.buffers
                              if isinstance(b, buffers.ResultBuffer)}
        self._local = threading.local()
        self._output_buffers = planner.output_buffers
        self.run_checked = self._one_call_runner() or self.run_checked

    def _new_template(self):
        """A buffer list with constants in place and new memory for intermediates:
        intermediates whose lifetimes do not overlap share one block (a view of it
        each), so a long graph's footprint is that of its widest point."""
        blocks = [np.empty(n, np.uint8) for n in self._block_sizes]
        return [buf.template(blocks) for buf in self.buffers]

    def _template(self):
        """This thread's buffer list: constants and reusable intermediates in place."""
        local = self._local
        if not hasattr(local, "template"):
            self._arrays()
            local.busy = False
        return local.template

    def _one_call_runner(self):
        """For a graph that is one native segment whose outputs are results it makes
        (the common case): a runner that is just the input checks, one native call and
        the results (call overhead matters on small inputs). Nothing but native code
        runs during the call, so it cannot re-enter on this thread."""
        if len(self.steps) != 1 or not isinstance(self.steps[0], steps.SegmentStep) or \
                self.graph.static_outputs or None in self._output_buffers:
            return None
        fn = self.steps[0].fn
        input_buffers, out_buffers = self.input_buffers, self._output_buffers
        results = [(buf, spec) for buf, spec in self._result_specs.items()]
        recycle = any(np.prod(shape) * np.dtype(dtype).itemsize >= _RECYCLE_BYTES
                      for shape, dtype in self._result_specs.values())
        tree = self.graph.out_tree
        bare = tree is None or tree.kind == "leaf"
        structure, template = self._structure, self._template

        def run(inputs):
            if recycle:
                arrays = self._arrays()[0]
                self._local.busy = False
            else:
                arrays = template()[:]
                for buf, spec in results:
                    arrays[buf] = np.empty(*spec)
            for buf, i in input_buffers:
                a = inputs[i]._data
                flags = a.flags
                arrays[buf] = a if flags.c_contiguous and flags.aligned \
                    else np.ascontiguousarray(a)
            fn(arrays)
            if bare:
                return _make(arrays[out_buffers[0]])
            return structure([_make(arrays[buf]) for buf in out_buffers])
        return run

    @property
    def llvm_ir(self):
        return self.module.llvm_ir if self.module else ""

    @property
    def asm(self):
        return self.module.asm if self.module else ""

    def __call__(self, *args, **kwargs):
        return self.run_checked(evaluate.flat_inputs(self.graph, args))

    def _arrays(self):
        """The buffer list for one call: this thread's reusable buffers in place, or
        fresh ones when a call on this thread is already running (re-entrant)."""
        local = self._local
        if getattr(local, "busy", False):
            arrays = self._new_template()
            for buf, spec in self._result_specs.items():
                arrays[buf] = np.empty(*spec)
            return arrays, False
        if not hasattr(local, "template"):
            local.template = self._new_template()
            local.roots = {id(plan.root(a)) for buf, a in zip(self.buffers, local.template)
                           if buf.reused}
            local.recycled = {}
        arrays, recycled = list(local.template), local.recycled
        # A result's buffer is reused only once the caller has let go of the last one
        # (nothing else refers to it), so results stay fresh.
        for buf, spec in self._result_specs.items():
            if buf not in recycled or sys.getrefcount(recycled[buf]) != _ONLY_OURS:
                recycled[buf] = np.empty(*spec)
                if recycled[buf].nbytes < _RECYCLE_BYTES:  # malloc's own pool is as quick
                    arrays[buf] = recycled.pop(buf)
                    continue
            arrays[buf] = recycled[buf]
        local.busy = True
        return arrays, True

    def run_checked(self, inputs):
        """Run on the flat input tensors (already checked against the signature)."""
        values = [None] * self.n_slots
        for slot, t in zip(self.input_slots, inputs):
            values[slot] = t
        for slot, t in self.consts:
            values[slot] = t
        arrays, reused = self._arrays()
        try:
            for buf, i in self.input_buffers:  # native code reads inputs as laid out
                a = inputs[i]._data
                flags = a.flags
                arrays[buf] = a if flags.c_contiguous and flags.aligned \
                    else np.ascontiguousarray(a)
            for step in self.steps:
                step.run(values, arrays)
            # an output that is an input, a constant, a reused buffer or a view of one of
            # them is given out as a copy
            not_ours = {id(plan.root(t._data)) for t in inputs}
            not_ours.update(self._const_roots)
            if reused:
                not_ours.update(self._local.roots)
            for fetch in self.output_fetch:
                fetch.run(values, arrays)
            outs = []
            for slot in self.output_slots:
                out = values[slot]
                outs.append(_make(np.array(out._data)) if id(plan.root(out._data)) in not_ours
                            else out)
        finally:
            if reused:
                self._local.busy = False
        return self._structure(outs)

    def _structure(self, flat):
        graph = self.graph
        if graph.out_tree is None:
            return flat[0] if len(flat) == 1 else tuple(flat)
        if not graph.static_outputs:
            return tree_unflatten(graph.out_tree, flat)
        it = iter(flat)
        leaves = [graph.static_outputs[i] if i in graph.static_outputs else next(it)
                  for i in range(len(graph.static_outputs) + len(flat))]
        return tree_unflatten(graph.out_tree, leaves)


def _refcount_when_only_in_a_dict():
    held = {0: np.empty(0)}
    return sys.getrefcount(held[0])


# sys.getrefcount of an array held only by the dict it is looked up in
_ONLY_OURS = _refcount_when_only_in_a_dict()


__all__ = ["jit", "Jitted", "Compiled"]

