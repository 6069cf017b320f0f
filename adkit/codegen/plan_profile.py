"""Where a compiled plan spends its time: each native call (kernel, product, copy,
loop) and each numpy step timed alone, with what it reads and writes.

Owns: `profile(compiled, *args)` (rows of measurements) and `report(rows)` (a table).
A debugging aid: it compiles the plan's calls again, each as an entry function of its
own (same kernels, same buffers, same threads), and runs the plan step by step on one
buffer list, timing each call. Does not: change the Compiled or its code; the times are
of optimized code whatever tier the Compiled runs.

    compiled = ak.jit(f).compile(*args)
    print(plan_profile.report(plan_profile.profile(compiled, *args)))
"""
import ctypes
import statistics
import time
from collections import namedtuple

import numpy as np
from llvmlite import ir as llvm_ir

from ..ir import evaluate
from . import compiled_view, program, runtime, steps

# One row: what ran (`what`), its kind, the bytes of the buffers it reads and writes
# (whole buffers: an upper bound of the traffic), and its median time in seconds.
Row = namedtuple("Row", ("what", "kind", "read_bytes", "written_bytes", "seconds"))


def profile(compiled, *args, repeats=20):
    """Rows, one per native call or numpy step of `compiled`'s plan, in the order they
    run, each with its median time over `repeats` runs of the whole plan."""
    timed = _separate_calls(compiled)
    inputs = evaluate.flat_inputs(compiled.graph, args)
    arrays = compiled._new_template()
    for buf, spec in compiled._result_specs.items():
        arrays[buf] = np.empty(*spec)
    for buf, i in compiled.input_buffers:
        arrays[buf] = np.ascontiguousarray(inputs[i]._data)
    samples = [[] for _ in timed]
    for _ in range(repeats + 1):  # the first run touches the memory
        values = [None] * compiled.n_slots
        for slot, t in zip(compiled.input_slots, inputs):
            values[slot] = t
        for slot, t in compiled.consts:
            values[slot] = t
        for times, (_, _, run) in zip(samples, timed):
            t0 = time.perf_counter()
            run(values, arrays)
            times.append(time.perf_counter() - t0)
    return [Row(what, kind, *_traffic(item, arrays), statistics.median(times[1:]))
            for (what, kind, _), item, times in zip(timed, _items(compiled), samples)]


def _items(compiled):
    """The calls and steps in plan order (what _separate_calls times)."""
    for step in compiled.steps:
        if isinstance(step, steps.SegmentStep):
            yield from step.calls
        elif not isinstance(step, steps.BufferValues):
            yield step


def _separate_calls(compiled):
    """[(description, kind, run(values, arrays))]: each native call compiled as an
    entry of its own; numpy steps as they are (BufferValues run with the next item)."""
    module = llvm_ir.Module(name="adkit_profile")
    module.triple = runtime.target_machine().triple
    _, vector_bytes = runtime.host_vector_isa()
    names = []
    for s, step in enumerate(compiled.steps):
        if isinstance(step, steps.SegmentStep):
            for c, call in enumerate(step.calls):
                name = f"profile_{s}_{c}"
                program.emit_segment(module, name, [call], vector_bytes, step.status)
                names.append((name, call))
    native = runtime.compile_module(module) if names else None
    functions = {name: native.function(name, ctypes.c_int64, ctypes.py_object)
                 for name, _ in names}
    timed, waiting = [], []
    for s, step in enumerate(compiled.steps):
        if isinstance(step, steps.BufferValues):
            waiting.append(step)
            continue
        if isinstance(step, steps.SegmentStep):
            for c, call in enumerate(step.calls):
                timed.append((_describe(call), type(call).__name__, _native_runner(
                    functions[f"profile_{s}_{c}"], waiting, native)))
                waiting = []
        else:
            text = compiled_view.step_lines(_OneStep(step))[0]
            timed.append((text, type(step).__name__, _step_runner(step, waiting)))
            waiting = []
    return timed


class _OneStep:
    """A stand-in Compiled holding one step, for compiled_view.step_lines."""

    def __init__(self, step):
        self.steps = [step]


def _native_runner(fn, before, native):
    """Runs `fn` (an entry of the NativeModule `native`, which keeps its code alive)."""
    def run(values, arrays, native=native):
        for step in before:
            step.run(values, arrays)
        if fn(arrays):
            raise RuntimeError("a check of the profiled plan failed")
    return run


def _step_runner(step, before):
    def run(values, arrays):
        for other in before:
            other.run(values, arrays)
        step.run(values, arrays)
    return run


def _describe(call):
    """A call as one line: a kernel's name, loop shape, threads and body; a product's
    shapes."""
    if isinstance(call, program.KernelCall):
        k = call.kernel
        return (f"kernel {k.name} {list(k.shape)} x{call.workers}: "
                f"{' '.join(str(s) for s in k.steps)}")
    if isinstance(call, program.MatmulCall):
        return f"gemm {list(call.a.shape)} @ {list(call.b.shape)} -> {list(call.out.shape)}"
    kernel = getattr(call, "kernel", None)
    if kernel is not None:
        products = getattr(call, "products", ())
        shapes = ", ".join(f"{list(p.a.shape)}@B -> {list(p.c.shape)}" for p in products)
        return (f"{type(call).__name__} {kernel.name} {list(kernel.shape)} "
                f"x{getattr(call, 'workers', 1)}: {' '.join(str(s) for s in kernel.steps)}"
                + (f" | {shapes}" if shapes else ""))
    return type(call).__name__


def _traffic(item, arrays):
    """(bytes read, bytes written): the sizes of the buffers a native call reads and
    writes; 0, 0 for numpy steps."""
    if not isinstance(item, program.NativeCall):
        return 0, 0
    size = lambda bufs: sum(arrays[b].nbytes for b in bufs
                            if isinstance(arrays[b], np.ndarray))
    return size(item.reads), size(item.writes)


def report(rows):
    """The rows as a table, the total last; times in ms, traffic in MB."""
    total = sum(r.seconds for r in rows) or 1.0
    lines = [f"{'ms':>8}{'%':>6}{'read MB':>9}{'write MB':>9}  what"]
    for r in rows:
        lines.append(f"{r.seconds * 1e3:8.3f}{100 * r.seconds / total:6.1f}"
                     f"{r.read_bytes / 1e6:9.2f}{r.written_bytes / 1e6:9.2f}  {r.what}")
    lines.append(f"{total * 1e3:8.3f} total")
    return "\n".join(lines)
