"""Tiered compilation: a signature's calls run on numpy until its native code is ready.

Owns: `Pending`, what `ak.jit(f, compile="background")` keeps for a signature between
its trace and its native code. Its first call evaluates the graph with numpy (the
graph evaluator, adkit/ir/evaluate.py) and then hands the pipeline, planning and LLVM
to the worker thread (background.py); each later call checks whether the Compiled is
ready, runs it if so (and has jit put it in its place), and evaluates again if not.
Does not: trace or key signatures (jit.py), run plans (compiled.py).
NB: with the default pipeline numpy evaluates the traced graph itself: its passes
preserve values (up to rounding, and the sign of a zero: simplify's x + 0 -> x), and
running them first would cost a gradient's first call 25-40 ms of Python, as much as
the rest of it. A user's `passes=[...]` may change what the graph computes, so they run
first and numpy evaluates their result, as native code will.
A graph too big for numpy to be the quicker way (`numpy_is_slower`) runs native code
from its first call instead: quick code (runtime.quick_object, compiled 5-10x faster
than at O3, running within 0-15% of it), made in the caller's thread, until the worker
has compiled the same module at O3 (Compiled.optimize).
Results agree with native code's to float rounding (numpy's exp is not libmvec's),
integers and bools exactly; `compile="eager"` makes every call native.
"""
import math
import threading

import numpy as np

from ..ir import evaluate
from ..tensor import _make
from . import background, plan, plan_cache, runtime
from .compiled import Compiled, structure
from .pipeline import run_pipeline

# numpy makes results at ~1-3 GB/s here (memory-bound, fresh arrays) and the pipeline,
# the plan and quick code take ~2-2.5 ms per traced node (both slow down alike when the
# machine is busy): a graph whose nodes make more than ~4 MB each on average compiles
# and runs natively before numpy would finish (ADBench's GMM gradient, 99 nodes: 1.8 MB
# per node at d=10, K=25 takes 100 ms on numpy, 220 as quick code; 6.9 MB at d=20,
# K=50 takes 1-3 s on numpy, 250 ms as quick code).
NUMPY_BYTES_PER_NODE = 4e6
# A plan from the disk cache takes ~5-30 ms to find (hashing the traced graph) and
# load: more than numpy's first run of a graph making less than ~20 MB (~10 ms), which
# then runs first while the worker looks the plan up (GMM small's gradient, a 50-node
# chain: 0.1-1.4 MB); a larger one looks it up first (GMM medium's makes 180 MB: a
# hit's first call 28 ms, numpy's 50-100)
LOOK_UP_FIRST_BYTES = 2e7


def made_bytes(graph):
    """(bytes of results its op nodes make, how many op nodes) of `graph`."""
    ops = [data for _, data in graph.nx.nodes(data=True) if data["kind"] == "op"]
    return sum(math.prod(s.shape) * s.dtype.np.itemsize for data in ops
               for s in data["specs"]), len(ops)  # (math.prod: numpy's costs ~3 us)


def numpy_is_slower(graph):
    """Whether evaluating `graph` with numpy likely takes longer than compiling it."""
    made, ops = made_bytes(graph)
    return made > NUMPY_BYTES_PER_NODE * max(ops, 1)


class Pending:
    """A signature's program before its Compiled is ready. `promote(self, compiled)`
    is called once it is, so the caller's tables can hold the Compiled instead."""

    closes_over_grad = False  # Jitted sets it: the traced function reads a parameter

    # its key in the disk cache of plans (plan_cache.py: None, not cached); LOOK_UP: the
    # worker computes it, and loads the plan from there when it has one
    plan_key = LOOK_UP = "look up"

    def __init__(self, graph, passes, name, promote):
        self.name, self._promote = name, promote
        self._traced = graph
        self._passes = passes
        self.evaluated = graph if passes is None else run_pipeline(graph, passes, name)
        made, ops = made_bytes(self.evaluated)
        # first calls: quick code
        self.native_first = made > NUMPY_BYTES_PER_NODE * max(ops, 1)
        # whether the caller looks the plan up in the disk cache before a first call
        self.look_up_first = self.native_first or made > LOOK_UP_FIRST_BYTES
        self._numpy = None  # (runner, output specs, constants' roots), made when needed
        self._job = None
        self._compiled = None  # the optimized Compiled, once ready
        self._quick = None  # native_first: the Compiled running quick code until then
        self._lock = threading.Lock()

    def _optimized_graph(self):
        return self.evaluated if self._passes is not None else \
            run_pipeline(self._traced, None, self.name)

    def _compile(self):
        """The optimized Compiled (on the worker thread, or in the caller's after a
        failed background compile): the disk cache of plans' (looked up here when the
        caller has not), else the quick one's module at O3, else the pipeline, the plan
        and the native code (then stored in that cache)."""
        if self.plan_key is self.LOOK_UP:
            self.plan_key = plan_cache.key(self._traced, self._passes)
            found = plan_cache.load(self.plan_key) if self._quick is None else None
            if found is not None:
                return found
        if self._quick is not None:
            compiled = self._quick.optimize()
        else:
            compiled = Compiled(self._optimized_graph(), self.name)
        plan_cache.store(self.plan_key, compiled)
        return compiled

    def _quick_code(self):
        """The Compiled of quick code (made once, in the caller's thread). Code the disk
        cache held is optimized already: it is then the signature's Compiled."""
        with self._lock:
            if self._quick is None and self._compiled is None:
                quick = Compiled(self._optimized_graph(), self.name, quick=True)
                quick.closes_over_grad = self.closes_over_grad
                self._quick = quick
                if quick.optimized:  # the object code cache had it
                    self._compiled = quick
                    background.submit(lambda: plan_cache.store(
                        None if self.plan_key is self.LOOK_UP else self.plan_key, quick))
        if self._compiled is not None:
            self._promote(self, self._compiled)
            return self._compiled
        return self._quick

    def start(self):
        """Queue the native compile (once; not when the disk cache had its code)."""
        if self._job is None and self._compiled is None:
            with self._lock:
                if self._job is None and self._compiled is None:
                    self._job = background.submit(self._compile)

    def ready(self):
        """The Compiled if the background compile has finished, else None. A failed
        background compile is tried again here, in the caller's thread, so its error
        (if it fails again) is raised by the call that finds it."""
        if self._compiled is not None:
            return self._compiled
        job = self._job
        if job is None or not job.done():
            return None
        with self._lock:
            if self._compiled is None:
                self._compiled = job.result if job.error is None else \
                    self._compile_again(job.error)
                self._compiled.closes_over_grad = self.closes_over_grad
        self._promote(self, self._compiled)
        return self._compiled

    def _compile_again(self, error):
        try:
            return self._compile()
        except Exception as e:
            e.add_note(f"{self.name}: its background compile had failed too "
                       f"({type(error).__name__}: {error}); compiled again in this thread")
            raise

    def native(self):
        """The optimized Compiled, waiting for it if need be."""
        self.start()
        if self._compiled is None:
            self._job.wait()
        return self.ready()

    def run_checked(self, inputs):
        """Run on the flat input tensors (already checked against the signature):
        optimized code when ready, else quick code or numpy (then the optimized
        compile starts)."""
        compiled = self.ready()
        if compiled is not None:
            return compiled.run_checked(inputs)
        if self.native_first:
            result = self._quick_code().run_checked(inputs)
        else:
            result = self._evaluate(inputs)
        self.start()  # after the first call, so the first call has both cores to itself
        return result

    def __call__(self, *args, **kwargs):
        return self.run_checked(evaluate.flat_inputs(self._traced, args))

    def _evaluate(self, inputs):
        """The graph on numpy. Results are as native code gives them: fresh memory
        (never an input's or a constant's: those are copied), of the traced dtype."""
        runner, out_specs, const_roots = self._numpy or self._numpy_runner()
        with runtime.one_blas_thread():
            arrays = runner([t._data for t in inputs])
        not_ours = {id(plan.root(t._data)) for t in inputs} | const_roots
        flat = []
        for a, (shape, dtype) in zip(arrays, out_specs, strict=True):
            a = np.asarray(a)
            if a.shape != shape:
                raise RuntimeError(f"{self.name}: numpy made a {a.dtype}{list(a.shape)} "
                                   f"result where tracing recorded {dtype}{list(shape)}")
            if a.dtype != dtype or id(plan.root(a)) in not_ours:
                a = np.array(a, dtype=dtype)
            flat.append(_make(a))
        return structure(self._traced, flat)

    def _numpy_runner(self):
        """The graph's numpy runner, made at its first use: a graph looked up in the
        disk cache first (look_up_first) needs none on a hit (GMM medium: ~0.7 ms of
        its warm first call)."""
        runner = evaluate.array_runner(self.evaluated)
        self._numpy = (runner,
                       [(tuple(s.shape), s.dtype.np) for s in self.evaluated.output_specs()],
                       {id(plan.root(np.asarray(v))) for v in runner.values})
        return self._numpy

    # What only the Compiled has (the notebook view, .lower()) waits for it.
    @property
    def graph(self):
        return self.native().graph

    @property
    def steps(self):
        return self.native().steps

    @property
    def kernels(self):
        return self.native().kernels

    @property
    def segments(self):
        return self.native().segments

    @property
    def module(self):
        return self.native().module

    @property
    def llvm_ir(self):
        return self.native().llvm_ir

    @property
    def asm(self):
        return self.native().asm
