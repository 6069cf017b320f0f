"""A compiled program: the optimization pipeline ak.jit runs and `Compiled`, which runs a
graph's plan.

Owns: `OPTIMIZE` (the passes between tracing and planning) and `Compiled` (runs a plan:
per-thread buffers, the input checks that guard the native boundary, fresh outputs).
Does not: make the plan (plan.py: a list of steps.py's steps over buffers.py's
buffers), emit IR (steps emit themselves: program.py, kernels.py) or talk to
llvmlite.binding (runtime.py); trace or cache per signature (jit.py).
"""
import sys
import threading

import numpy as np
from llvmlite import ir as llvm_ir

from .. import _config
from .._pytree import tree_unflatten
from ..control import batch_accumulations, hoist_invariants, merge_residual_scans
from ..ir import evaluate, passes
from ..tensor import _make
from . import buffers, compiled_view, pickling, plan, pool, program, runtime, steps
from . import kernel_modules, llvm_calls
from .deferred import DeferredAttribute, stored

# results smaller than this are fresh arrays per call; larger ones are recycled (fresh
# large arrays cost page faults, small ones come from malloc's pool)
_RECYCLE_BYTES = 1 << 17
# the first call's blocks of intermediates are touched on a thread of their own from
# this many bytes on (Compiled._first_blocks); pages are 4 kB or larger
_TOUCH_BYTES = 1 << 23
_PAGE_BYTES = 4096
_TOUCH_PIECE = 1 << 22  # what either thread touches at a time (_touched_meanwhile)
# quick code compiles kernels estimated to run under this many ns without optimization
# (quick_cold)
QUICK_COLD_NS = 100_000
# quick code lowers kernels estimated to run under this many ns as scalar code: at
# GMM large, a fifth of the IR and a third of LLVM's time went to vector loops (with
# their remainders) over 50-20000 elements, which then run in microseconds either way
# (141 -> 115 kB of IR; its cold half compiled in 12 ms instead of 32). Optimized code
# made from scratch keeps its vectors: GMM small's gradient, all small kernels, ran
# 0.06-0.10 ms with them, 0.11 without.
SCALAR_NS = 20_000
# plans with this many kernels or more compile them in modules of their own, on threads
_SPLIT_KERNELS = 4
# calls of jitted functions inlined first (one program to optimize); loops: one forward
# scan where a gradient traced two (before any pass rebuilds plans); sums of slice
# scatters become Assembles before decompose turns the rest into elementwise selects;
# body work that only depends on a loop's consts done once, before the loop; sums of
# products carried through a loop summed by one product after it
OPTIMIZE = passes.pipeline([passes.inline_calls, merge_residual_scans, passes.simplify,
                            passes.decompose, passes.fold_constants, passes.simplify,
                            passes.cse, passes.dce, hoist_invariants, batch_accumulations,
                            passes.dce, passes.fuse, passes.dce])


class Compiled:
    """A graph ready to run. Fused kernels, matmuls and views are native: each run of
    them (a segment) is one LLVM entry function, called once per call; nodes without a
    lowering run with numpy between segments. `.llvm_ir`, `.asm`, `.kernels` and
    `.segments` show what was generated. The run is a plan made once: each value has a
    slot (and a Layout when native code can address it), each step reads and writes
    slots (no graph lookups per call)."""

    closes_over_grad = False  # Jitted sets it: the traced function reads a parameter
    plan_key = None  # its key in the disk cache of plans, once stored or loaded there
    # what the code was made from: a plan from the disk cache reads them when first
    # used (its runs need the steps' entry points only)
    kernels = DeferredAttribute()
    segment_calls = DeferredAttribute()

    def __init__(self, graph, name="jitted function", quick=False):
        self.graph = graph
        planner = plan.Planner(graph)
        self.kernels = planner.kernels
        for kernel in self.kernels:  # (loop bodies' kernels are not the plan's)
            kernel.scalar = quick and plan.estimated_ns(kernel) < SCALAR_NS
        self.buffers = planner.buffers  # buffers.Buffer objects, by index
        self.steps = planner.steps  # steps.Step objects, run in order
        self._block_sizes = planner.block_sizes
        # the first call's blocks, touched while the code is made
        self._first_blocks = _touched_meanwhile(self._block_sizes) \
            if sum(self._block_sizes) >= _TOUCH_BYTES else None
        with llvm_calls.prompt_handoffs():  # (threads compile beside this Python)
            native = self._emit_and_compile(name, quick)
        self.segments = [step.name for step in planner.segments]
        self.segment_calls = [step.calls for step in planner.segments]  # NativeCalls
        self.n_slots = planner.n_slots
        self.input_slots = planner.input_slots
        # the inputs' specs, checked per call (without the graph: a plan from the disk
        # cache reads its graph's contents when first used, ~5 ms at GMM's sizes)
        self.input_specs = [graph.specs_of(node)[0] for node in graph.inputs]
        self.consts = planner.consts
        self.output_slots = planner.output_slots
        self.output_fetch = planner.output_fetch  # makes native outputs numpy values
        self._output_buffers = planner.output_buffers
        self._ready(native)

    def _emit_and_compile(self, name, quick):
        """The plan's native code (None: every step runs on numpy). Its kernels may go
        to modules of their own (_kernel_split): with KernelModules, the entry's module
        is compiled on a thread while the kernels are lowered, the first kernel module
        on another, the last in this thread; with EarlyKernels (quick code), their
        module is compiled on a thread while the entry is emitted (LLVM runs without
        the GIL, beside the Python emitting the rest)."""
        module = llvm_ir.Module(name="adkit_jit")
        module.triple = runtime.target_machine().triple
        _, vector_bytes = runtime.host_vector_isa()
        cold = quick_cold(self.steps, self.kernels)
        compiles = runtime.Compiles(quick, cold=cold)
        split = self._kernel_split(module.triple, vector_bytes, cold if quick else None)
        if isinstance(split, kernel_modules.EarlyKernels):
            compiles.add(split.text)
        token = kernel_modules.KERNEL_MODULES.set(split)
        try:
            for step in self.steps:
                step.emit(module, vector_bytes)
            if not module.functions:  # a plan whose steps all run on numpy
                compiles.wait()
                return None
            text = str(module)
            for kernels_text in split.texts():
                compiles.add(text)
                text = kernels_text
        except BaseException:
            compiles.wait()
            raise
        finally:
            kernel_modules.KERNEL_MODULES.reset(token)
        if _config.dump_llvm():
            _config.dump(f"{name} LLVM IR", "\n".join([*compiles.texts, text]), "ll")
        return compiles.finish(text)

    def _kernel_split(self, triple, vector_bytes, cold):
        """Where the plan's kernels are lowered: modules of their own on a machine with
        CPUs to spare (kernel_module_groups); else, for quick code (`cold`: its
        predicate, compiled.quick_cold), its slowest kernels first, in a module of their
        own compiled on a thread (kernel_modules.EarlyKernels); else in the entry's."""
        groups = kernel_module_groups(len(self.kernels))
        early = [k for k in self.kernels if cold is not None and not cold(k.name)]
        if early and not groups:
            return kernel_modules.EarlyKernels(early, triple, vector_bytes)
        return kernel_modules.KernelModules(self.kernels, triple, groups)

    # what the disk cache of plans stores (plan_cache.py), besides the object code:
    # everything else a Compiled holds is made from these
    PLAN_STATE = ("graph", "kernels", "buffers", "steps", "_block_sizes", "segments",
                  "segment_calls", "n_slots", "input_slots", "input_specs", "consts",
                  "output_slots", "output_fetch", "_output_buffers")

    def plan_state(self):
        """{name: value} of PLAN_STATE: this program's graph and plan, as plan_codec
        writes them."""
        return {name: stored(Compiled, name, getattr(self, name))
                for name in self.PLAN_STATE}

    @classmethod
    def restored(cls, state, load_native):
        """The Compiled of a stored plan_state(): no passes, planning or IR, its native
        code from `load_native()` (None: a plan without native code)."""
        self = cls.__new__(cls)
        for name in cls.PLAN_STATE:
            setattr(self, name, state[name])
        self._first_blocks = _touched_meanwhile(self._block_sizes) \
            if sum(self._block_sizes) >= _TOUCH_BYTES else None
        self._ready(load_native())
        return self

    def _ready(self, native):
        """What the plan's runs need besides the plan, then the native code linked."""
        self._replaced = []  # quick code a call on another thread may still be running
        self._const_roots = {id(plan.root(t._data)) for _, t in self.consts}
        # per call: (buffer, flat input position) and (buffer, (shape, dtype)) pairs
        self.input_buffers = [(b.index, b.position) for b in self.buffers
                              if isinstance(b, buffers.InputBuffer)]
        self._result_specs = {b.index: (b.shape, b.dtype) for b in self.buffers
                              if isinstance(b, buffers.ResultBuffer)}
        self._local = threading.local()
        self._link(native)

    @property
    def optimized(self):
        """Whether the native code is optimized (else quick: runtime.quick_object)."""
        return self.module is None or self.module.optimized

    def optimize(self):
        """Make quick code optimized code: compile the same LLVM IR at full optimization
        and switch every step to it (any thread; calls running meanwhile finish on the
        quick code, which is kept). Returns self."""
        if not self.optimized:
            native = runtime.compile_texts(self.module.texts)
            self._replaced.append(self.module)
            self._link(native)
        return self

    def _link(self, native):
        """Bind the steps (and the one-call runner) to the compiled module `native`."""
        for step in self.steps:
            step.link(native)
        self.module = native
        self.run_checked = self._one_call_runner() or self._run_steps

    def _new_template(self):
        """A buffer list with constants in place and new memory for intermediates:
        intermediates whose lifetimes do not overlap share one block (a view of it
        each), so a long graph's footprint is that of its widest point."""
        first, self._first_blocks = self._first_blocks, None
        blocks = first() if first is not None else None
        if blocks is None:
            blocks = buffers.new_blocks(self._block_sizes)
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
        bare = len(out_buffers) == 1 and (tree is None or tree.kind == "leaf")
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

    def __reduce__(self):
        """Pickled as its graph: the plan and native code are made again on arrival (the
        LLVM part from the on-disk cache when it has it), never unpickled (pickling.py)."""
        return pickling.reduce_compiled(self)

    def __repr__(self):
        return compiled_view.compiled_repr(self)

    def _repr_html_(self):  # notebooks
        return compiled_view.compiled_html(self)

    @property
    def llvm_ir(self):
        return self.module.llvm_ir if self.module else ""

    @property
    def asm(self):
        return self.module.asm if self.module else ""

    def __call__(self, *args, **kwargs):
        return self.run_checked(evaluate.flat_inputs(self.graph, args, self.input_specs))

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

    def _run_steps(self, inputs):
        """`run_checked` (the runner _link sets: run on the flat input tensors, already
        checked against the signature) for any plan: each step in turn."""
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
        return structure(self.graph, flat)


def quick_cold(plan_steps, plan_kernels):
    """Whether quick code compiles a function of this plan without optimization (a
    predicate on its name, for runtime.quick_object): its entries, which call kernels
    and fill buffers; the pool's trampolines (program.TRAMPOLINE_SUFFIX), which unpack
    a part's arguments; and the kernels the cost model (plan.estimated_ns) gives less
    than QUICK_COLD_NS. Code generation at LLVM's opt level 1 costs ~0.5-0.8 ms per
    function before its first instruction (its ~150 passes set up per function),
    unoptimized ~0.2; unoptimized code runs 2.5-3x slower, which costs a kernel under
    QUICK_COLD_NS at most ~0.2 ms of a first call. Kernels in loop bodies are not the
    plan's kernels (loops.py plans them apart, by other names): they run at every
    trip and stay optimized."""
    cold = {step.name for step in plan_steps if isinstance(step, steps.SegmentStep)}
    cold.update(k.name for k in plan_kernels if plan.estimated_ns(k) < QUICK_COLD_NS)
    return lambda name: name in cold or name.endswith(program.TRAMPOLINE_SUFFIX)


def kernel_module_groups(n_kernels):
    """How many modules of their own a plan's kernels are compiled in, on threads:
    one per CPU beyond the caller's and the page-touching thread's (two at most),
    from _SPLIT_KERNELS kernels on. None on a 2-CPU machine: measured on one (shared
    with other work, 10 fresh processes each, in turns), GMM large's first call took
    315 ms (median) in one module and 370 in three, 390-450 in two: the threads only
    took CPU time from the caller's Python and the page touching. (That was before
    llvm_calls.py: llvmlite's lock ran those compiles one after the other; quick code
    on two CPUs now lowers its slowest kernels first instead, EarlyKernels.)"""
    spare = pool.usable_cpus() - 2
    return max(0, min(2, spare)) if n_kernels >= _SPLIT_KERNELS else 0


def _touched_meanwhile(sizes):
    """New blocks of these sizes (bytes), a byte of each of their pages written by a
    thread of their own; returns a function giving them once (None to a second
    caller), after its caller has helped write what the thread has not yet reached.
    A fresh page costs a fault and the kernel's zeroing on first touch: ~100 ms of a
    GMM gradient's first call at ADBench's large size (170 MB of blocks, 2 MB pages
    zeroed at ~2 GB/s) when its kernels touched them, which now overlaps code
    generation (numpy's strided write releases the GIL), and is shared by the two
    threads when the first call comes before it is done (a plan from the disk cache
    comes within milliseconds)."""
    blocks = buffers.new_blocks(sizes)
    # pieces of _TOUCH_PIECE bytes, taken from the end of the list by either thread
    pieces = [block[start:start + _TOUCH_PIECE] for block in blocks
              for start in range(0, block.size, _TOUCH_PIECE)]
    lock = threading.Lock()

    def touch():
        while True:
            with lock:
                if not pieces:
                    return
                piece = pieces.pop()
            piece[::_PAGE_BYTES] = 0

    thread = threading.Thread(target=touch, name="adkit-touch", daemon=True)
    thread.start()
    given = []

    def take():
        touch()
        thread.join()
        with lock:
            if given:  # another thread's first call took them
                return None
            given.append(True)
        return blocks
    return take


def structure(graph, flat):
    """The flat result tensors in the structure the traced function returned."""
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


