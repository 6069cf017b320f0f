"""The C ABI entry of an exported program: one function that runs a compiled graph's
whole plan on raw buffers, with no Python in between.

Owns: `ExportError`, `C_TYPES`, and `Program` (a graph's plan checked for export, the
workspace layout of its intermediates, and `emit`, which adds the entry function, its
scratch-size function and the kernels it calls to an llvmlite module). Does not: plan
(plan.py), emit the native calls (each NativeCall emits itself into a program.Entry,
exactly as in-process segments do), choose a BLAS (export_blas.py) or link
(export_link.py).

Entry ABI, for a graph with inputs x0..xm and outputs y0..yn:
    int64 NAME(const T *x0, ..., T *y0, ..., void *work)
each argument a C-contiguous array of the traced shape and dtype; `work` is scratch
memory of NAME_work_bytes() bytes (any alignment) or NULL (the call allocates it). It
returns 0; -1 when it could not allocate; k >= 1 when bounds check k failed (an index
out of range: the outputs are then incomplete). Where in-process code reads a Python
list of numpy arrays (program.emit_segment), the entry gives each buffer a pointer: an
input's argument, a constant's global, an output's argument when the output is that
buffer whole, else a place in `work` (buffers whose lives do not overlap share one, as
Planner.share_buffers decided). Outputs that are views, inputs or constants are copied
into their arguments at the end.
"""
import numpy as np
from llvmlite import ir

from ..ir import printing
from . import buffers, plan, program, steps
from .kernels import I64, PTR
from .loops import _copy
from .program import _declare

# numpy dtype -> the C type of its elements (bool: one byte, 0 or 1, as numpy stores it)
C_TYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float",
           np.dtype(np.bool_): "uint8_t", np.dtype(np.int64): "int64_t",
           np.dtype(np.int32): "int32_t"}
ALIGN = buffers.ALIGN  # bytes: each block of the workspace starts on such a boundary
I8 = ir.IntType(8)


class ExportError(RuntimeError):
    """A compiled function that cannot be exported as it is, or a library that could not
    be linked (the message says what to do)."""


def _round_up(n, align=ALIGN):
    return -(-n // align) * align


class Program:
    """One compiled signature, ready to emit as C function `name`: its plan (a
    plan.Planner whose steps are all native), its input and output specs, the
    outputs written straight into their arguments (`direct`: {buffer: output}) and
    each other buffer's byte offset in the workspace (`offsets`)."""

    def __init__(self, name, graph):
        self.name, self.graph = name, graph
        self.planner = _native_plan(graph, name)
        self.inputs = [graph.specs_of(n)[0] for n in graph.inputs]
        self.outputs = [graph.specs_of(u)[out] for u, out in self.planner.returned]
        for role, specs in (("input", self.inputs), ("output", self.outputs)):
            for k, spec in enumerate(specs):
                if spec.dtype.np not in C_TYPES:
                    raise ExportError(f"cannot export {name}: {role} {k} is "
                                      f"{printing.format_spec(spec)}; exported functions "
                                      f"take {', '.join(map(str, C_TYPES))} arrays")
        self.layouts = [self.planner.layout(key) for key in self.planner.returned]
        self.direct = _direct_outputs(self.planner, self.layouts)
        self.offsets, self.payload_bytes = _workspace(self.planner, self.direct)
        self.checks = []  # the bounds checks, in the order of their codes (from 1)

    @property
    def work_bytes(self):
        """Scratch bytes a call needs: the workspace and room to align its start."""
        return self.payload_bytes + ALIGN

    @property
    def calls(self):
        return [call for step in self.planner.steps for call in step.calls]

    def emit(self, module, vector_bytes):
        """Add NAME, NAME_work_bytes and what they call to `module`."""
        for call in self.calls:  # callees first, as program.emit_segment lays them out
            for kernel in call.kernels:
                program.kernel_function(module, kernel, vector_bytes)
        body = self._emit_body(module, vector_bytes)
        self._emit_abi(module, body)
        size = ir.Function(module, ir.FunctionType(I64, []), name=f"{self.name}_work_bytes")
        ir.IRBuilder(size.append_basic_block("entry")).ret(ir.Constant(I64, self.work_bytes))

    def _emit_body(self, module, vector_bytes):
        """int64 NAME.run(inputs..., outputs..., aligned workspace): the plan's calls."""
        n_args = len(self.inputs) + len(self.outputs)
        fn = ir.Function(module, ir.FunctionType(I64, [PTR] * (n_args + 1)),
                         name=f"{self.name}.run")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        data = self._data_pointers(b, module, fn.args)
        status = self.planner.status
        entry = program.Entry(b, module, data, vector_bytes,
                              None if status is None else data[status], self.checks)
        for call in self.calls:
            call.emit(entry)
        outs = fn.args[len(self.inputs):n_args]
        for j, layout in enumerate(self.layouts):
            if self.direct.get(layout.buffer) != j:
                _copy(b, entry.pointer(layout), outs[j], layout)
        b.ret(ir.Constant(I64, 0))
        return fn

    def _data_pointers(self, b, module, args):
        """{buffer index: pointer to its first element} inside the run function."""
        n_in = len(self.inputs)
        work = args[-1]
        data = {}
        for buf in self.planner.buffers:
            i = buf.index
            if isinstance(buf, buffers.InputBuffer):
                data[i] = args[buf.position]
            elif isinstance(buf, buffers.ConstantBuffer):
                data[i] = _constant(module, f"{self.name}.const{i}", buf.array)
            elif i in self.direct:
                data[i] = args[n_in + self.direct[i]]
            else:
                data[i] = b.gep(work, [ir.Constant(I64, self.offsets[i])], source_etype=I8)
        return data

    def _emit_abi(self, module, body):
        """int64 NAME(inputs..., outputs..., void *work): `work`, or memory it allocates
        (and frees) when work is NULL, aligned, then the run function."""
        n_args = len(self.inputs) + len(self.outputs)
        fn = ir.Function(module, ir.FunctionType(I64, [PTR] * (n_args + 1)), name=self.name)
        for k, arg in enumerate(fn.args[:-1]):
            arg.name = f"x{k}" if k < len(self.inputs) else f"y{k - len(self.inputs)}"
        fn.args[-1].name = "work"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        given = fn.args[-1]
        slot = b.alloca(PTR)
        b.store(given, slot)
        mine = b.icmp_unsigned("==", given, ir.Constant(PTR, None))
        with b.if_then(mine, likely=False):
            memory = b.call(_declare(module, "malloc", PTR, [I64]),
                            [ir.Constant(I64, self.work_bytes)])
            failed = b.icmp_unsigned("==", memory, ir.Constant(PTR, None))
            with b.if_then(failed, likely=False):
                b.ret(ir.Constant(I64, -1))
            b.store(memory, slot)
        allocated = b.load(slot, typ=PTR)
        work = _aligned(b, allocated)
        code = b.call(body, list(fn.args[:-1]) + [work])
        with b.if_then(mine, likely=False):
            b.call(_declare(module, "free", ir.VoidType(), [PTR]), [allocated])
        b.ret(code)


def _native_plan(graph, name):
    """The graph's plan when every step is native code; else an ExportError listing the
    nodes that run on numpy."""
    if graph.static_outputs:
        raise ExportError(f"cannot export {name}: it returns values that are not tensors "
                          f"(at output positions {sorted(graph.static_outputs)}); an "
                          "exported function's outputs are arrays")
    planner = plan.Planner(graph)
    on_numpy = [step.n for step in planner.steps if not isinstance(step, steps.SegmentStep)]
    if not on_numpy:
        return planner
    lines = []
    for n in on_numpy:
        source = graph.nx.nodes[n].get("source")
        lines.append(f"  {printing.node_line(graph, n)}"
                     + (f"    (traced at {source})" if source else ""))
    why = (" (in-place ops run every node on numpy)" if planner.in_place else "")
    raise ExportError(f"cannot export {name}: {len(on_numpy)} node(s) have no native "
                      f"lowering and run on numpy{why}:\n" + "\n".join(lines))


def _direct_outputs(planner, layouts):
    """{buffer: output j} for outputs that are a native result's buffer whole (C order):
    the entry writes them straight into the caller's array (first such output only)."""
    direct = {}
    for j, layout in enumerate(layouts):
        buf = planner.buffers[layout.buffer]
        whole = layout.offset == 0 and tuple(layout.strides) == \
            buffers.contiguous_strides(layout.shape) and \
            int(np.prod(layout.shape)) == int(np.prod(buf.shape))
        if isinstance(buf, buffers.ResultBuffer) and whole and layout.buffer not in direct:
            direct[layout.buffer] = j
    return direct


def _workspace(planner, direct):
    """({buffer: byte offset}, total bytes) for the buffers that live in the workspace:
    each shared block (plan.share_buffers) once, then every other intermediate."""
    offsets, total = {}, 0
    block_at = []
    for size in planner.block_sizes:
        block_at.append(total)
        total += _round_up(size)
    for buf in planner.buffers:
        if isinstance(buf, (buffers.InputBuffer, buffers.ConstantBuffer)) or \
                buf.index in direct:
            continue
        if isinstance(buf, buffers.PublishedBuffer):  # only numpy steps fill these
            raise ExportError(f"internal error: buffer {buf} has no native maker")
        if getattr(buf, "block", None) is not None:
            offsets[buf.index] = block_at[buf.block]
        else:
            offsets[buf.index] = total
            total += _round_up(buf.nbytes)
    return offsets, total


def _constant(module, name, array):
    """A read-only global holding `array`'s bytes (aligned like in-process constants)."""
    data = np.ascontiguousarray(array).tobytes()
    typ = ir.ArrayType(I8, len(data))
    gv = ir.GlobalVariable(module, typ, name)
    gv.initializer = ir.Constant(typ, bytearray(data))
    gv.global_constant = True
    gv.linkage = "internal"
    gv.align = ALIGN
    return gv


def _aligned(b, pointer):
    """`pointer` rounded up to the next ALIGN-byte boundary."""
    address = b.ptrtoint(pointer, I64)
    pad = b.and_(b.sub(ir.Constant(I64, 0), address), ir.Constant(I64, ALIGN - 1))
    return b.gep(pointer, [pad], source_etype=I8)

