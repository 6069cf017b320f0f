"""Fused kernels: one LLVM function per fused group of elementwise ops and reductions.

Owns: `Kernel` (what a kernel computes: iteration shape, input strides, its body of
steps, outputs with their strides and how they combine), the body's parts (`In` and
`Tmp` name the values steps read; `Step` and `Contraction` are the two kinds of step,
each emitting itself) and `lower_kernel` (the loop nest: a vector loop of `lanes`
elements, a scalar tail; each op's own `lower(b, *args)` hook emits its arithmetic).
Does not: choose what to fuse (ir/passes/fuse.py), place values in memory or call
kernels (program.py).

Kernel ABI: void kernel(i64 start, i64 stop, ptr in_0, ..., ptr out_0, ...): element
pointers (already offset to the value's first element); [start, stop) is a range of the
outermost collapsed loop (the flat element index when the iteration space collapses to
1-D), so threads can split it. Strides are compiled in, in elements.

An output either stores one value per iteration point, or combines ("sum", "max",
"min") into an element that several points share (stride 0 along the reduced dims):
the caller fills it with the combine's identity first. Along the inner loop a reduced
output is accumulated in registers (float64 for sums), then combined into memory once.
"""
from collections import namedtuple

import numpy as np
from llvmlite import ir

from ..ir import rules
from . import masked, rows
from .scalar import ScalarBuilder

I64 = ir.IntType(64)
I32 = ir.IntType(32)
PTR = ir.PointerType()
F64 = ir.DoubleType()

# The values a kernel's steps and outputs read: input k at the iteration point, or the
# value step j made there.
In = namedtuple("In", ("index",))
Tmp = namedtuple("Tmp", ("index",))
# One output: `ref` (an In or a Tmp); strides over the iteration space (0 along reduced
# dims); combine None (store) or "sum", "prod", "max", "min" (an op's native_reduction);
# dtype None (the kernel's) or bool (kept as one byte, 0 or 1, as numpy does).
Output = namedtuple("Output", ("ref", "strides", "combine", "dtype"), defaults=(None,))


class Step(namedtuple("Step", ("op", "args", "params", "name"), defaults=(None,))):
    """An elementwise op at the iteration point: `args` holds an In or Tmp at each
    tensor position (None elsewhere), `params` the op's named static arguments, `name`
    the SSA name of its node in the kernel's graph (its LLVM values carry it)."""

    __slots__ = ()

    def emit(self, emitter, sb, operand, in_bases, points):
        """The op's own lower(b, *args) hook on its operands' values, at each of the
        inner indices `points` (operand(ref, c): ref's value at points[c])."""
        values = []
        for c in range(len(points)):
            args = rules.join_args(self.op, {p: operand(a, c) for p, a in
                                             enumerate(self.args) if a is not None},
                                   self.params)
            values.append(name_value(self.op.lower(sb, *args), self.name))
        return values

    def ns_per_element(self, ns_per_step):
        """Its time in the thread cost model: the op's `native_cost` (a math library
        call), else that of a plain arithmetic step."""
        return getattr(self.op, "native_cost", ns_per_step)

    def __str__(self):
        return str(getattr(self.op, "public_name", self.op.__name__))


class Contraction(namedtuple("Contraction", ("a", "b", "k", "a_stride", "b_stride",
                                             "name"), defaults=(None,))):
    """A matmul as a step: the sum over kk < k of a[.. + kk a_stride] * b[.. + kk
    b_stride], a and b In inputs whose strides place row and column at the point;
    `name` the SSA name of its node."""

    __slots__ = ()
    ACCUMULATORS = 4  # independent partial sums: enough to hide an add's latency

    LOOP_MIN_K = 12  # longer sums are a loop over their terms, `chains` per trip

    def emit(self, emitter, sb, operand, in_bases, points):
        """The k products at each of the inner indices `points` as fused multiply-adds
        into partial sums (term kk into sum kk % chains), added pairwise at the end:
        one chain of k dependent adds would make the product as slow as k add
        latencies. An operand that does not move along the inner dim (the row of a
        matrix-vector product) is loaded once for all points: the points of an
        unrolled trip share its loads, so a 32-wide matrix-vector product reads the
        vector 32 times, not 128. From LOOP_MIN_K terms on, the terms are a loop (a
        GMM gradient's x @ Q_k^T, K = 20, unrolled was a fifth of its IR)."""
        chains = max(2, self.ACCUMULATORS // len(points))
        if self.k < max(self.LOOP_MIN_K, 2 * chains):
            sums = self._summed_unrolled(emitter, sb, in_bases, points, chains)
        else:
            sums = self._summed_in_a_loop(emitter, sb, in_bases, points, chains)
        return [name_value(_pairwise(emitter.b, partial), self.name) for partial in sums]

    def _summed_unrolled(self, emitter, sb, in_bases, points, chains):
        """The partial sums (`chains` per point) of the k terms, one after the other."""
        sums = [[] for _ in points]
        for kk in range(self.k):
            for c, product in enumerate(self._products(emitter, sb, in_bases, points, kk)):
                j = kk % chains
                if j == len(sums[c]):
                    sums[c].append(product)
                else:
                    sums[c][j] = emitter.b.fadd(sums[c][j], product, flags=("contract",))
        return sums

    def _products(self, emitter, sb, in_bases, points, kk):
        """a * b of term kk (an int, or an i64 value) at each point."""
        b, kernel = emitter.b, emitter.kernel
        terms = []
        for ref, stride in ((self.a, self.a_stride), (self.b, self.b_stride)):
            k = ref.index
            offset = ir.Constant(I64, kk * stride) if isinstance(kk, int) else \
                b.mul(kk, ir.Constant(I64, stride))
            base = add_index(b, in_bases[k], offset)
            inner = kernel.strides[k][-1]
            at = points if inner else points[:1]
            loads = [_load(b, sb, emitter.in_ptrs[k], base, inner, i, mask=emitter.mask)
                     for i in at]
            terms.append(loads if inner else loads * len(points))
        return [b.fmul(x, y, flags=("contract",)) for x, y in zip(*terms)]

    def _summed_in_a_loop(self, emitter, sb, in_bases, points, chains):
        """The partial sums (`chains` per point) of the k terms: a loop of k // chains
        trips, one term into each sum per trip, then the k % chains terms left."""
        b = emitter.b
        typ = sb.elem if sb.lanes == 1 else ir.VectorType(sb.elem, sb.lanes)
        zero = ir.Constant(typ, 0.0 if sb.lanes == 1 else [0.0] * sb.lanes)
        trips, left = divmod(self.k, chains)
        before = b.block
        loop, after = b.append_basic_block("contract"), b.append_basic_block("contract.end")
        b.branch(loop)
        b.position_at_end(loop)
        trip = b.phi(I64)
        sums = [[b.phi(typ) for _ in range(chains)] for _ in points]
        first = b.mul(trip, ir.Constant(I64, chains))
        added = [[None] * chains for _ in points]
        for j in range(chains):
            kk = add_index(b, first, ir.Constant(I64, j))
            for c, product in enumerate(self._products(emitter, sb, in_bases, points, kk)):
                added[c][j] = b.fadd(sums[c][j], product, flags=("contract",))
        following = b.add(trip, ir.Constant(I64, 1))
        trip.add_incoming(ir.Constant(I64, 0), before)
        trip.add_incoming(following, b.block)
        for c in range(len(points)):
            for j in range(chains):
                sums[c][j].add_incoming(zero, before)
                sums[c][j].add_incoming(added[c][j], b.block)
        b.cbranch(b.icmp_signed("<", following, ir.Constant(I64, trips)), loop, after)
        b.position_at_end(after)
        for j in range(left):
            for c, product in enumerate(self._products(emitter, sb, in_bases, points,
                                                       trips * chains + j)):
                added[c][j] = b.fadd(added[c][j], product, flags=("contract",))
        return added

    def ns_per_element(self, ns_per_step):
        """Its time in the thread cost model: k multiplications and k additions."""
        return 2 * self.k * ns_per_step

    def __str__(self):
        return f"matmul[K={self.k}]"


def name_value(value, name):
    """`value`, renamed `name` when it is an instruction that still has the name LLVM
    numbering gave it (".12"): the IR then reads like the graph's listing. Names only:
    the code is the same (an operand passed through keeps its own name)."""
    if name and isinstance(value, ir.Instruction) and value.name.startswith("."):
        value.name = name
    return value


I8 = ir.IntType(8)
BOOL = np.dtype(np.bool_)

UNROLL = 4  # at most, vectors per trip of a kernel with a matmul step
IDENTITY = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}


def _pairwise(b, values):
    """The sum of `values`, added pairwise (a tree, not a chain)."""
    while len(values) > 1:
        pairs = [b.fadd(x, y) for x, y in zip(values[::2], values[1::2])]
        values = pairs + values[len(pairs) * 2:]
    return values[0]


class Kernel:
    """A fused loop nest over `shape` reading inputs with element `strides` (0 where an
    input is broadcast) and writing `outputs` (see Output)."""

    def __init__(self, name, dtype, shape, in_strides, steps, outputs, in_dtypes=None,
                 rows=False):
        self.name = name
        self.dtype = np.dtype(dtype)  # the float dtype the kernel computes in
        # each input's dtype: the kernel's, or bool
        self.in_dtypes = [np.dtype(d) for d in in_dtypes] if in_dtypes is not None \
            else [self.dtype] * len(in_strides)
        self.size = int(np.prod(shape, dtype=np.int64))
        strides = [tuple(s) for s in in_strides] + [tuple(o.strides) for o in outputs]
        # with `rows`, the inner loop is one row of `shape` (row_products.py calls the
        # kernel on blocks of rows): the last dim is never merged with the others
        self.shape, strides = _collapse(tuple(shape), strides, rows)
        self.strides = strides[:len(in_strides)]
        self.outputs = [o._replace(strides=s)
                        for o, s in zip(outputs, strides[len(in_strides):])]
        self.steps = steps
        # (start, stop) when every call runs the whole outer range on one thread (its
        # KernelCall says so): the loops are then emitted for that range only
        self.fixed_range = None
        # whether it is lowered as scalar code (no vectors): Compiled says so for the
        # smallest of a plan's kernels, whose code is then quicker to make
        self.scalar = False

    @property
    def outer_size(self):
        """How many units [start, stop) ranges over."""
        return self.shape[0] if len(self.shape) == 1 else int(np.prod(self.shape[:-1]))

    def whole(self, k):
        """Whether output k reduces the whole iteration space to one element."""
        return self.outputs[k].combine is not None and not any(self.outputs[k].strides)

    @property
    def splittable(self):
        """Whether threads may split [start, stop): no two of them then write one
        element, except whole reductions, which get a private partial per thread."""
        outer = self.shape if len(self.shape) == 1 else self.shape[:-1]
        return all(o.combine is None or self.whole(k) or all(o.strides[:len(outer)])
                   for k, o in enumerate(self.outputs))

    def vectors_per_trip(self, lanes):
        """Vectors of `lanes` per trip of the vector loop: several (UNROLL at most) when
        a matmul step can share its loads of an operand that does not move along the
        inner dim between them; else one."""
        if lanes == 1 or not any(isinstance(step, Contraction) for step in self.steps):
            return 1
        return max(1, min(UNROLL, self.shape[-1] // lanes))

    def __repr__(self):
        ops = " ".join(str(s) for s in self.steps)
        reduce = "".join(f" {o.combine}" for o in self.outputs if o.combine)
        body = f"{ops}{reduce}" or "copy"
        return f"<kernel {self.name}: {self.dtype.name}{list(self.shape)} [{body}]>"


ElementwiseKernel = Kernel  # the name it had before reductions joined


def _collapse(shape, strides, rows=False):
    """Merge adjacent dims that every operand walks contiguously (with `rows`, all but
    the last); drop size-1 dims."""
    last = len(shape) - 1
    dims = [(n, [s[d] for s in strides], d == last and rows)
            for d, n in enumerate(shape) if n != 1]
    if not dims:
        return (1,), [(0,) for _ in strides]
    merged = [dims[0][:2]]
    for n, st, keep in dims[1:]:
        pn, pst = merged[-1]
        if not keep and all(a == b * n for a, b in zip(pst, st)):
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
    for arg, name in zip(fn.args, ["start", "stop"] + [f"in{k}" for k in range(n_in)] +
                         [f"out{k}" for k in range(n_out)]):  # the ABI, readable in dumps
        arg.name = name
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    in_ptrs, out_ptrs = list(fn.args[2:2 + n_in]), list(fn.args[2 + n_in:])
    lanes = lanes_for(kernel.dtype, vector_bytes)
    vectorizable = lanes > 1 and not kernel.scalar and all(s[-1] in (0, 1) for s in kernel.strides) and all(
        o.strides[-1] == 1 or (o.combine and o.strides[-1] == 0) for o in kernel.outputs) \
        and (kernel.shape[-1] >= lanes or _static_rows(kernel))  # else never a vector
    lanes = lanes if vectorizable else 1
    emit = _Emitter(b, module, kernel, in_ptrs, out_ptrs, lanes)
    if len(kernel.shape) == 1:
        zero = ir.Constant(I64, 0)
        lo, hi = kernel.fixed_range or (start, stop)
        emit.inner([zero] * n_in, [zero] * n_out, lo, hi)
    else:
        rows.outer_loop(b, kernel, start, stop, lambda ins, outs: emit.inner(
            ins, outs, 0, kernel.shape[-1]), emit.sums, out_ptrs, _for_loop)
    b.ret_void()
    return fn


class _Emitter:
    """Emits one kernel's inner loop (vector part, scalar tail) and its reductions."""

    def __init__(self, b, module, kernel, in_ptrs, out_ptrs, lanes):
        self.b, self.kernel = b, kernel
        self.in_ptrs, self.out_ptrs = in_ptrs, out_ptrs
        self.sb1 = ScalarBuilder(b, module, kernel.dtype, 1)
        self.sbv = ScalarBuilder(b, module, kernel.dtype, lanes) if lanes > 1 else None
        self.lanes, self.module = lanes, module
        self.unroll = kernel.vectors_per_trip(lanes)
        # outputs reduced over the rows combine into rows of sums in registers (rows.py)
        self.sums = rows.RowSums(b, kernel, lanes, self.sb1.elem, IDENTITY, _combine)
        self.mask = None  # the lanes on, while the partial vector ending a row is emitted
        # reduced outputs with inner stride 0 accumulate in registers: (vector, scalar)
        # stack slots, made once in the entry block
        self.acc = {}
        for k, o in enumerate(kernel.outputs):
            if o.combine and o.strides[-1] == 0:
                elem = F64 if o.combine == "sum" else self.sb1.elem
                self.acc[k] = (b.alloca(ir.VectorType(elem, lanes)) if lanes > 1 else None,
                               b.alloca(elem))

    def inner(self, in_bases, out_bases, lo, hi):
        """The inner loop over [lo, hi) (ints when known when compiling) at the given
        base offsets."""
        b = self.b
        for k, (vec, scalar) in self.acc.items():
            combine = self.kernel.outputs[k].combine
            if vec is not None:
                ident = ir.Constant(vec.allocated_type.element, IDENTITY[combine])
                b.store(ir.Constant(vec.allocated_type, [ident] * self.lanes), vec)
            b.store(ir.Constant(scalar.allocated_type, IDENTITY[combine]), scalar)
        if self.lanes > 1:
            for width in sorted({self.unroll, 1}, reverse=True):  # whole trips, then vectors
                lo = _stepping(b, lo, hi, width * self.lanes, lambda i, width=width:
                               self.elements(self.sbv, in_bases, out_bases, [
                                   add_index(b, i, ir.Constant(I64, c * self.lanes))
                                   for c in range(width)]))
            if isinstance(lo, int) and isinstance(hi, int) and hi - lo > 1:
                self._partial_vector(in_bases, out_bases, lo, hi - lo)
                lo = hi
        _stepping(b, lo, hi, 1, lambda i: self.elements(self.sb1, in_bases, out_bases, [i]))
        for k, (vec, scalar) in self.acc.items():  # lanes added up, into memory once
            combine = self.kernel.outputs[k].combine
            total = b.load(scalar, typ=scalar.allocated_type)
            if vec is not None:
                v = b.load(vec, typ=vec.allocated_type)
                for lane in range(self.lanes):
                    total = _combine(b, combine, total, b.extract_element(
                        v, ir.Constant(I32, lane)))
            address = b.gep(self.out_ptrs[k], [out_bases[k]], source_etype=self.sb1.elem)
            old = b.load(address, typ=self.sb1.elem)
            if combine == "sum" and self.sb1.elem != F64:
                total = b.fptrunc(b.fadd(b.fpext(old, F64), total), self.sb1.elem)
            else:
                total = _combine(b, combine, old, total)
            b.store(total, address)

    def _partial_vector(self, in_bases, out_bases, at, count):
        """The last `count` (< lanes) points of a row known when compiling, as one
        vector of the next power of two lanes, the ones past the row masked off
        (masked.py): a (batch, 3) kernel computes each row as one 4-lane vector, not
        three scalars."""
        width = min(self.lanes, 1 << (count - 1).bit_length())
        sb = ScalarBuilder(self.b, self.module, self.kernel.dtype, width)
        self.mask = masked.lane_mask(width, count) if width != count else None
        self.partial = count
        self.elements(sb, in_bases, out_bases, [ir.Constant(I64, at)])
        self.mask = None

    def elements(self, sb, in_bases, out_bases, points):
        """Load the inputs at the inner indices `points` (one, or an unrolled trip's
        several), run the steps at all of them, then write the outputs: the points'
        work is independent, and no store comes between their loads."""
        b, kernel = self.b, self.kernel
        loaded = {}

        def operand(ref, c):
            if type(ref) is Tmp:
                return values[ref.index][c]
            k = ref.index  # an In: loaded once per iteration point
            stride = kernel.strides[k][-1]
            key = (k, c if stride else 0)  # one load for points it does not move along
            if key not in loaded:
                loaded[key] = _load(b, sb, self.in_ptrs[k], in_bases[k], stride,
                                    points[c], kernel.in_dtypes[k] == BOOL, self.mask)
            return loaded[key]

        # matmul steps first, at all points (they read inputs only: their loads are
        # shared); then each point's other steps and stores, one point after the
        # other (interleaving the points' elementwise chains spilled registers)
        values = [step.emit(self, sb, operand, in_bases, points)
                  if isinstance(step, Contraction) else [None] * len(points)
                  for step in kernel.steps]
        for c, i in enumerate(points):
            at_point = lambda ref, _, c=c: operand(ref, c)  # noqa: E731 (one point: c)
            for j, step in enumerate(kernel.steps):
                if not isinstance(step, Contraction):
                    values[j][c], = step.emit(self, sb, at_point, in_bases, [i])
            self._store_outputs(sb, out_bases, i, lambda ref: operand(ref, c))

    def _store_outputs(self, sb, out_bases, i, operand):
        """Write (or combine) each output's value at inner index i."""
        b = self.b
        for k, out in enumerate(self.kernel.outputs):
            value = operand(out.ref)
            if k in self.acc:  # into this width's register accumulator
                self._accumulate(sb, k, out.combine, value)
                continue
            stride = out.strides[-1]
            offset = add_index(b, out_bases[k], b.mul(i, ir.Constant(I64, stride))
                               if stride != 1 else i)
            if out.dtype == BOOL:  # one byte per bool
                value = b.zext(value, I8 if sb.lanes == 1 else ir.VectorType(I8, sb.lanes))
                self._store(value, b.gep(self.out_ptrs[k], [offset], source_etype=I8), 1)
                continue
            value = sb.to_float(value) if sb.is_bool(value) else value
            if k in self.sums.slots:  # lanes past the row land in the padding
                address = self.sums.address(k, i, sb.type)
                old = b.load(address, typ=sb.type, align=sb.itemsize)
                b.store(_combine(b, out.combine, old, value), address, align=sb.itemsize)
                continue
            address = b.gep(self.out_ptrs[k], [offset], source_etype=sb.elem)
            if out.combine:
                old = b.load(address, typ=sb.type, align=sb.itemsize) if self.mask is None \
                    else masked.load(b, address, sb.type, self.mask, sb.itemsize)
                value = _combine(b, out.combine, old, value)
            self._store(value, address, sb.itemsize)

    def _store(self, value, address, align):
        if self.mask is None:
            self.b.store(value, address, align=align)
        else:
            masked.store(self.b, value, address, self.mask, align)

    def _accumulate(self, sb, k, combine, value):
        """Combine `value` into output k's register accumulator: the vector slot, or,
        for a partial vector of another width, lane by lane into the scalar slot."""
        b = self.b
        vec, scalar = self.acc[k]
        if sb.lanes > 1 and sb.lanes != self.lanes:
            slot, lanes = scalar, [b.extract_element(value, ir.Constant(I32, lane))
                                   for lane in range(self.partial)]
        else:
            slot, lanes = (vec if sb.lanes > 1 else scalar), [value]
            if self.mask is not None:  # lanes past the row add nothing
                ident = ir.Constant(sb.elem, IDENTITY[combine])
                lanes = [b.select(self.mask, value, ir.Constant(sb.type, [ident] * sb.lanes))]
        total = b.load(slot, typ=slot.allocated_type)
        for lane in lanes:
            if combine == "sum" and sb.elem != F64:
                lane = b.fpext(lane, total.type)
            total = _combine(b, combine, total, lane)
        b.store(total, slot)


def _combine(b, combine, x, y):
    """x + y, x * y, max(x, y) or min(x, y); max and min propagate NaN, as numpy's do."""
    if combine == "sum":
        return b.fadd(x, y)
    if combine == "prod":
        return b.fmul(x, y)
    keep_x = b.fcmp_unordered(">=" if combine == "max" else "<=", x, y)  # x NaN: keep x
    pick = b.select(keep_x, x, y)
    return b.select(b.fcmp_unordered("uno", y, y), y, pick)  # y NaN: y


def add_index(b, x, y):
    """x + y of i64 indices, without an instruction when either is the constant 0 (a
    kernel's bases and first offsets often are: ~5% of a plan's instructions, each
    built, printed and compiled)."""
    if isinstance(y, ir.Constant) and y.constant == 0:
        return x
    if isinstance(x, ir.Constant) and x.constant == 0:
        return y
    return b.add(x, y)


def _load(b, sb, ptr, base, stride, i, is_bool=False, mask=None):
    """The input at inner index i (one value, or `sb.lanes` of them: only the lanes
    `mask` has on, when given); a bool input is read as bytes and compared with 0."""
    elem = I8 if is_bool else sb.elem
    if stride == 0:  # broadcast along the inner dim: one element for every lane
        value = b.load(b.gep(ptr, [base], source_etype=elem), typ=elem)
        value = value if sb.lanes == 1 else splat(b, value, sb.lanes)
    else:
        offset = add_index(b, base, b.mul(i, ir.Constant(I64, stride)) if stride != 1 else i)
        address = b.gep(ptr, [offset], source_etype=elem)
        typ = elem if sb.lanes == 1 else ir.VectorType(elem, sb.lanes)
        align = 1 if is_bool else sb.itemsize
        value = b.load(address, typ=typ, align=align) if mask is None else \
            masked.load(b, address, typ, mask, align)
    if is_bool:
        return b.icmp_unsigned("!=", value, ir.Constant(value.type, None))
    return value


def splat(b, scalar, lanes):
    vec_type = ir.VectorType(scalar.type, lanes)
    vec = b.insert_element(ir.Constant(vec_type, ir.Undefined), scalar, ir.Constant(I32, 0))
    return b.shuffle_vector(vec, ir.Constant(vec_type, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def _static_rows(kernel):
    """Whether each inner loop's range is known when compiling (so a short row can be
    a partial vector): a kernel of several dims, or one thread's whole range."""
    return len(kernel.shape) > 1 or kernel.fixed_range is not None


def _stepping(b, lo, hi, span, body):
    """body(i) for i = lo, lo + span, ... while i + span <= hi; returns where it stopped.
    lo and hi are ints when the range is known when compiling (then a loop that would
    not run is not emitted, and one that runs once is straight code), else i64 values."""
    if isinstance(lo, int) and isinstance(hi, int):
        trips = max(0, (hi - lo) // span)
        if trips == 1:
            body(ir.Constant(I64, lo))
        elif trips > 1:
            _for_loop(b, ir.Constant(I64, lo), ir.Constant(I64, lo + trips * span), span, body)
        return lo + trips * span
    lo, hi = (ir.Constant(I64, v) if isinstance(v, int) else v for v in (lo, hi))
    return _for_loop(b, lo, b.sub(hi, ir.Constant(I64, span - 1)), span, body)


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


for_loop = _for_loop
