"""Fused elementwise kernels: one LLVM function per fused group of elementwise ops.

Owns: `ElementwiseKernel` (what a kernel computes: iteration shape, input strides, the
op sequence) and `lower_kernel` (the loop nest: a vector loop of `lanes` elements, a
scalar tail; each op's own `lower(b, *args)` hook emits its arithmetic).
Does not: choose what to fuse (ir/passes/fuse.py) or run kernels (jit.py).

Kernel ABI: void kernel(i64 start, i64 stop, ptr in_0, ..., ptr out_0, ...): the
(C-contiguous) numpy arrays themselves, as PyObject pointers (ctypes py_object: passing
them costs nothing), whose data pointers the kernel reads at `DATA_OFFSET` (numpy's
PyArrayObject layout, checked at start-up by runtime.array_data_offset); [start, stop)
is a range of the outermost collapsed loop (the flat element index when the iteration
space collapses to 1-D), so threads can split it.
"""
from collections import namedtuple

import numpy as np
from llvmlite import ir

from ..ir import rules
from . import runtime
from .scalar import ScalarBuilder

I64 = ir.IntType(64)
PTR = ir.PointerType()

# One step of a kernel body: op applied to args, each ("in", k), ("tmp", j) or a
# Python value (a static param); `params` hold the op's named static arguments.
Step = namedtuple("Step", ("op", "args", "params"))


class ElementwiseKernel:
    """A fused loop over `shape` reading inputs with element `strides` (0 where an
    input is broadcast) and writing the values of `outputs` (step indices), contiguous."""

    def __init__(self, name, dtype, shape, strides, steps, outputs, reduced=()):
        self.reduced = frozenset(reduced)  # output positions summed over the whole loop
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape, self.strides = _collapse(tuple(shape), [tuple(s) for s in strides])
        self.steps = steps
        self.outputs = outputs
        self.size = int(np.prod(shape, dtype=np.int64))

    @property
    def outer_size(self):
        """How many units [start, stop) ranges over."""
        return self.shape[0] if len(self.shape) == 1 else int(np.prod(self.shape[:-1]))

    def __repr__(self):
        ops = " ".join(getattr(s.op, "public_name", s.op.__name__) for s in self.steps)
        return f"<kernel {self.name}: {self.dtype.name}{list(self.shape)} [{ops}]>"


def _collapse(shape, strides):
    """Merge adjacent dims that every input walks contiguously; drop size-1 dims."""
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1]
    if not dims:
        return (1,), [(0,) for _ in strides]
    merged = [dims[0]]
    for n, st in dims[1:]:
        pn, pst = merged[-1]
        if all(a == b * n for a, b in zip(pst, st)):
            merged[-1] = (pn * n, st)
        else:
            merged.append((n, st))
    return tuple(n for n, _ in merged), [tuple(st[i] for _, st in merged)
                                          for i in range(len(strides))]


def lanes_for(dtype, vector_bytes):
    return max(1, vector_bytes // np.dtype(dtype).itemsize)


def lower_kernel(kernel, module, vector_bytes):
    """Add `kernel` to the llvmlite module as a function named kernel.name."""
    n_in, n_out = len(kernel.strides), len(kernel.outputs)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] +
                                             [PTR] * (n_in + n_out)), name=kernel.name)
    start, stop = fn.args[0], fn.args[1]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    offset = ir.Constant(I64, runtime.array_data_offset())
    data = [b.load(b.gep(obj, [offset], source_etype=ir.IntType(8)), typ=PTR)
            for obj in fn.args[2:]]
    in_ptrs, out_ptrs = data[:n_in], data[n_in:]
    sb1 = ScalarBuilder(b, module, kernel.dtype, 1)
    lanes = lanes_for(kernel.dtype, vector_bytes)
    sums = _accumulators(b, kernel, lanes)
    vectorizable = all(s[-1] in (0, 1) for s in kernel.strides) and lanes > 1
    inner = kernel.shape[-1]
    if len(kernel.shape) == 1:
        bases = [ir.Constant(I64, 0)] * len(in_ptrs)
        _emit_inner(b, module, kernel, in_ptrs, out_ptrs, bases, ir.Constant(I64, 0),
                    start, stop, lanes if vectorizable else 1, sb1)
    else:
        def outer_body(o):
            bases = _outer_offsets(b, kernel, o)
            out_base = b.mul(o, ir.Constant(I64, inner))
            _emit_inner(b, module, kernel, in_ptrs, out_ptrs, bases, out_base,
                        ir.Constant(I64, 0), ir.Constant(I64, inner),
                        lanes if vectorizable else 1, sb1)
        _for_loop(b, start, stop, 1, outer_body)
    _store_sums(b, sums, out_ptrs)
    b.ret_void()
    return fn


F64 = ir.DoubleType()


def _accumulators(b, kernel, lanes):
    """{output position: (vector accumulator, scalar accumulator)} in float64 (stack
    slots that LLVM keeps in registers), for the outputs the kernel sums."""
    sums = {}
    vec = ir.VectorType(F64, lanes)
    for k in sorted(kernel.reduced):
        v, s = b.alloca(vec), b.alloca(F64)
        b.store(ir.Constant(vec, [ir.Constant(F64, 0.0)] * lanes), v)
        b.store(ir.Constant(F64, 0.0), s)
        sums[k] = (v, s)
    kernel._sums = sums
    return sums


def _store_sums(b, sums, out_ptrs):
    """Each sum's lanes added up and written (float64) to its output's element 0."""
    for k, (v, s) in sums.items():
        vec = b.load(v, typ=v.allocated_type)
        total = b.load(s, typ=F64)
        for i in range(vec.type.count):
            total = b.fadd(total, b.extract_element(vec, ir.Constant(ir.IntType(32), i)))
        b.store(total, out_ptrs[k], align=8)


def _outer_offsets(b, kernel, o):
    """Each input's element offset at outer index o (o decomposed over the outer dims)."""
    outer_dims = kernel.shape[:-1]
    idx, rest = [], o
    for n in reversed(outer_dims):
        idx.append(b.urem(rest, ir.Constant(I64, n)))
        rest = b.udiv(rest, ir.Constant(I64, n))
    idx.reverse()
    offsets = []
    for strides in kernel.strides:
        off = ir.Constant(I64, 0)
        for i, s in zip(idx, strides[:-1]):
            if s:
                off = b.add(off, b.mul(i, ir.Constant(I64, s)))
        offsets.append(off)
    return offsets


def _emit_inner(b, module, kernel, in_ptrs, out_ptrs, bases, out_base, lo, hi, lanes, sb1):
    """The inner loop: [lo, hi) in vectors of `lanes`, then the scalar tail."""
    if lanes > 1:
        sbv = ScalarBuilder(b, module, kernel.dtype, lanes)
        limit = b.sub(hi, ir.Constant(I64, lanes - 1))
        lo = _for_loop(b, lo, limit, lanes,
                       lambda i: _emit_elements(b, kernel, sbv, in_ptrs, out_ptrs, bases,
                                                out_base, i))
    _for_loop(b, lo, hi, 1, lambda i: _emit_elements(b, kernel, sb1, in_ptrs, out_ptrs,
                                                     bases, out_base, i))


def _emit_elements(b, kernel, sb, in_ptrs, out_ptrs, bases, out_base, i):
    """Load the inputs at inner index i, run the steps, store the outputs."""
    loaded = {}

    def operand(arg):
        if isinstance(arg, tuple) and arg[0] == "in":
            k = arg[1]
            if k not in loaded:
                loaded[k] = _load(b, sb, in_ptrs[k], bases[k], kernel.strides[k][-1], i)
            return loaded[k]
        if isinstance(arg, tuple) and arg[0] == "tmp":
            return values[arg[1]]
        return arg

    values = []
    for step in kernel.steps:
        args = rules.join_args(step.op, {p: operand(a) for p, a in enumerate(step.args)
                                         if isinstance(a, tuple)}, step.params)
        values.append(step.op.lower(sb, *args))
    for k, (ptr, j) in enumerate(zip(out_ptrs, kernel.outputs)):
        if k in kernel.reduced:  # add into the float64 accumulator of this width
            value = values[j] if sb.elem == F64 else b.fpext(
                values[j], F64 if sb.lanes == 1 else ir.VectorType(F64, sb.lanes))
            slot = kernel._sums[k][0 if sb.lanes > 1 else 1]
            b.store(b.fadd(b.load(slot, typ=slot.allocated_type), value), slot)
            continue
        address = b.gep(ptr, [b.add(out_base, i)], source_etype=sb.elem)
        b.store(values[j], address, align=kernel.dtype.itemsize)


def _load(b, sb, ptr, base, stride, i):
    if stride == 0:  # broadcast along the inner dim: one element for every lane
        scalar = b.load(b.gep(ptr, [base], source_etype=sb.elem), typ=sb.elem)
        if sb.lanes == 1:
            return scalar
        vec = b.insert_element(ir.Constant(sb.type, ir.Undefined), scalar,
                               ir.Constant(ir.IntType(32), 0))
        return b.shuffle_vector(vec, ir.Constant(sb.type, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), sb.lanes),
                                            [0] * sb.lanes))
    offset = b.add(base, b.mul(i, ir.Constant(I64, stride)) if stride != 1 else i)
    address = b.gep(ptr, [offset], source_etype=sb.elem)
    return b.load(address, typ=sb.type, align=sb.itemsize)


def _for_loop(b, lo, hi, step, body):
    """for (i = lo; i < hi; i += step) body(i); returns i's value after the loop."""
    before = b.block
    cond = b.append_basic_block("for.cond")
    loop = b.append_basic_block("for.body")
    done = b.append_basic_block("for.end")
    b.branch(cond)
    b.position_at_end(cond)
    i = b.phi(I64)
    i.add_incoming(lo, before)
    b.cbranch(b.icmp_signed("<", i, hi), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, ir.Constant(I64, step)), b.block)
    b.branch(cond)
    b.position_at_end(done)
    return i
