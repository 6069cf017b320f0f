"""Native programs: one LLVM entry function per run of natively lowered nodes.

Owns: the native calls an entry function makes, one class per kind, each emitting
itself (`NativeCall`: `KernelCall`, a fused kernel, threads and all; `MatmulCall`, BLAS
gemm from numpy's OpenBLAS; `CopyCall`, element moves by index tables), `Entry` (what a
call emits into) and `emit_segment` (the entry function). Does not: decide what runs
natively (plan.py, lowering.py), say where values live (buffers.py) or build kernel
loops (kernels.py).

Entry ABI: int64 segment(PyListObject *arrays): the numpy arrays of every buffer, in a
Python list the caller fills; the entry reads each array's data pointer (at numpy's
`array_data_offset`, checked at start-up) and then runs its calls in order. Views cost
nothing: a view is a Layout of its base's buffer. Large kernels split their outer loop
into parts run by the persistent native thread pool (pool.py: its workers and the
caller's thread; a busy pool runs them all on the caller). It returns 0, or, when a call's check failed (an index
out of range: `may_fail` calls), at once the check's code: its place (from 1) in the
list `emit_segment` returns, the details stored in the segment's status buffer
(`Entry.fail`); loop bodies pass the status pointer down and the code up.
"""
from collections import namedtuple

import numpy as np
from llvmlite import ir

from . import kernels, pool, runtime
from .kernel_modules import KERNEL_MODULES
from .buffers import contiguous_strides
from .kernels import F64, I32, I64, PTR, for_loop


def _elem(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return ir.IntType(8)
    return F64 if dtype.itemsize == 8 else ir.FloatType()


class Entry:
    """What a native call emits into: the entry (or loop body) function's builder `b`,
    the module, each buffer's data pointer (`data`, loaded once at the top), the host's
    vector width in bytes, the status pointer (int64[3], None where no call may fail)
    and the checks emitted so far (shared by an entry and the bodies it calls)."""

    def __init__(self, b, module, data, vector_bytes, status=None, checks=None):
        self.b, self.module, self.data, self.vector_bytes = b, module, data, vector_bytes
        self.status = status
        self.checks = [] if checks is None else checks

    def pointer(self, layout):
        """A pointer to layout's first element."""
        return _pointer(self.b, self.data, layout)

    def fail(self, check, values):
        """Emit a failed check: store `values` (int64s) at the status pointer, return the
        check's code from the function. `check.error(status)` makes the exception."""
        b = self.b
        self.checks.append(check)
        for k, value in enumerate(values):
            b.store(value, b.gep(self.status, [ir.Constant(I64, k)], source_etype=I64))
        b.ret(ir.Constant(I64, len(self.checks)))

    def propagate(self, code):
        """Return a called body's non-zero code from this function too."""
        b = self.b
        with b.if_then(b.icmp_signed("!=", code, ir.Constant(I64, 0)), likely=False):
            b.ret(code)


class NativeCall:
    """One call an entry function makes. `reads` and `writes` are the buffers whose
    values it reads and makes (for lifetimes), `buffers` every buffer whose data
    pointer it uses, `kernels` the fused kernels it runs; `may_fail` says whether it
    checks something that can stop the entry (Entry.fail); `emit(entry)` emits it."""

    kernels = ()
    may_fail = False

    def __init__(self, reads, writes, buffers):
        self.reads, self.writes = set(reads), set(writes)
        self.buffers = set(buffers) | self.reads | self.writes

    def emit(self, entry):
        raise NotImplementedError(f"{type(self).__name__} has no emit rule")


class KernelCall(NativeCall):
    """A kernel run on `inputs` (Layouts) into `outputs` (whole, contiguous buffers'
    Layouts), on `workers` threads; `scales` multiply a mean's sums afterwards."""

    def __init__(self, kernel, inputs, outputs, workers, scales=None):
        super().__init__({x.buffer for x in inputs}, {x.buffer for x in outputs}, ())
        self.kernel, self.inputs, self.outputs = kernel, inputs, outputs
        self.kernels = (kernel,)
        self.workers = workers if kernel.splittable else 1
        self.scales = scales or {}
        # each worker's [start, stop) of the outer loop
        self.bounds = np.linspace(0, kernel.outer_size, self.workers + 1).astype(
            np.int64).tolist()
        if self.workers == 1:
            kernel.fixed_range = tuple(self.bounds)

    def emit(self, entry):
        b, module, kernel = entry.b, entry.module, self.kernel
        fn = kernel_function(module, kernel, entry.vector_bytes)
        elem = _elem(kernel.dtype)
        ins = [entry.pointer(layout) for layout in self.inputs]
        outs = [entry.pointer(layout) for layout in self.outputs]
        for k, o in enumerate(kernel.outputs):  # reductions start from their identity
            if o.combine:
                _fill_layout(b, outs[k], self.outputs[k], kernels.IDENTITY[o.combine])
        if self.workers == 1:
            b.call(fn, [ir.Constant(I64, self.bounds[0]), ir.Constant(I64, self.bounds[1]),
                        *ins, *outs])
        else:
            self._emit_threads(b, module, fn, ins, outs, elem)
        scale_means(b, kernel.dtype, outs, self.outputs, self.scales)

    def _emit_threads(self, b, module, fn, ins, outs, elem):
        kernel, workers = self.kernel, self.workers
        whole = [k for k in range(len(outs)) if kernel.whole(k)]
        partials = {}
        for k in whole:  # a private partial result per worker, combined after the join
            partials[k] = _stack(b, elem, workers)
            for w in range(workers):
                b.store(ir.Constant(elem, kernels.IDENTITY[kernel.outputs[k].combine]),
                        _at(b, partials[k], w, elem))

        def worker_outs(w):
            return [_at(b, partials[k], w, elem) if k in partials else o
                    for k, o in enumerate(outs)]
        _on_threads(b, module, fn, self.bounds, lambda w: ins + worker_outs(w))
        for k, slots in partials.items():
            combine = kernel.outputs[k].combine
            total = b.load(outs[k], typ=elem)
            for w in range(workers):
                part = b.load(_at(b, slots, w, elem), typ=elem)
                total = kernels._combine(b, combine, total, part)
            b.store(total, outs[k])


class MatmulCall(NativeCall):
    """C = A @ B (numpy's matmul rules, batch dims broadcast) through cblas ?gemm: one
    call per batch element (or one for the batch: _fold_batch), operands read in place
    when one of their last two dims has unit stride (a transpose is BLAS's trans flag);
    BLAS on one thread, the batch or the rows split over `workers` threads of ours."""

    ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

    def __init__(self, a, b, out, workers=1):
        super().__init__({a.buffer, b.buffer}, {out.buffer}, ())
        self.a, self.b, self.out = a, b, out
        self.dtype = np.dtype(out.dtype)
        self.workers = workers  # threads the batch's products are split over

    @classmethod
    def plan(cls, a, b, out):
        """A MatmulCall, or None when BLAS cannot read an operand in place or a size
        is 0 (numpy runs those)."""
        call = cls(a, b, out)
        a2, b2 = call._matrix(a, 0), call._matrix(b, 1)
        if a2 is None or b2 is None or 0 in out.shape or a2[0][1] == 0:
            return None
        if _blas_form(*a2[:2]) is None or _blas_form(*b2[:2]) is None:
            return None
        return call

    def _matrix(self, layout, which):
        """((rows, cols), (row stride, col stride), batch shape, batch strides)."""
        shape, strides = layout.shape, layout.strides
        if len(shape) == 1:  # a vector: a row on the left, a column on the right
            return ((1, shape[0]), (0, strides[0]), (), ()) if which == 0 else \
                ((shape[0], 1), (strides[0], 0), (), ())
        return tuple(shape[-2:]), tuple(strides[-2:]), tuple(shape[:-2]), \
            tuple(strides[:-2])

    def emit(self, entry):
        module = entry.module
        (m, k), a_st, a_batch, a_bst = self._matrix(self.a, 0)
        (_, n), b_st, b_batch, b_bst = self._matrix(self.b, 1)
        batch = np.broadcast_shapes(a_batch, b_batch)
        a_bst = _batch_strides(a_batch, a_bst, batch)
        b_bst = _batch_strides(b_batch, b_bst, batch)
        c_ld, c_bst = self._out_strides(batch, m, n)
        count = int(np.prod(batch, dtype=np.int64))
        folded = _fold_batch(count, (m, k, n), (a_st, a_bst), (b_st, b_bst), (c_ld, c_bst))
        if folded is not None:  # the whole batch as one product
            (m, k, n), a_st, b_st, c_ld = folded
            batch, count, a_bst, b_bst, c_bst = (), 1, (), (), ()
        ta, lda = _blas_form((m, k), a_st)
        tb, ldb = _blas_form((k, n), b_st)
        elem = _elem(self.dtype)
        name = "scipy_cblas_dgemm64_" if self.dtype.itemsize == 8 else "scipy_cblas_sgemm64_"
        gemm = _declare(module, name, ir.VoidType(),
                        [I32, I32, I32, I64, I64, I64, elem, PTR, I64, PTR, I64, elem,
                         PTR, I64])

        def gemm_call(bb, rows, at):
            bb.call(gemm, [ir.Constant(I32, self.ROW_MAJOR), ir.Constant(I32, ta),
                           ir.Constant(I32, tb), rows, ir.Constant(I64, n),
                           ir.Constant(I64, k), ir.Constant(elem, 1.0),
                           at[0], ir.Constant(I64, lda), at[1], ir.Constant(I64, ldb),
                           ir.Constant(elem, 0.0), at[2], ir.Constant(I64, c_ld)])

        def products(bb, first, stop, ptrs):
            """The products of batch elements [first, stop), or of one product's rows
            [first, stop) when there is no batch."""
            if count == 1:
                offsets = [bb.mul(first, ir.Constant(I64, a_st[0])), ir.Constant(I64, 0),
                           bb.mul(first, ir.Constant(I64, c_ld))]
                gemm_call(bb, bb.sub(stop, first),
                          [bb.gep(p, [o], source_etype=elem) for p, o in zip(ptrs, offsets)])
            else:
                def one(index):
                    offsets = _batch_offsets(bb, index, batch, (a_bst, b_bst, c_bst))
                    gemm_call(bb, ir.Constant(I64, m), [bb.gep(p, [o], source_etype=elem)
                                                        for p, o in zip(ptrs, offsets)])
                for_loop(bb, first, stop, 1, one)
        ptrs = [entry.pointer(x) for x in (self.a, self.b, self.out)]
        # BLAS on one thread (see _blas_threads), set around the whole product by the
        # calling thread: the count is process-wide, so parts setting and restoring it
        # on the pool's threads raced (a part's restore let another's gemm run on
        # OpenBLAS's threads, and could leave the count at 1 for numpy afterwards)
        previous = _blas_threads(entry.b, module, ir.Constant(I32, 1))
        self._run(entry, products, ptrs, count, m, count * m * n * k)
        _blas_threads(entry.b, module, previous)

    def _run(self, entry, products, ptrs, count, rows, fmas):
        """products(builder, first, stop, ptrs) over the batch, or over one product's
        rows, split over threads when there is work enough (blocks of >= 64 rows)."""
        b, module = entry.b, entry.module
        size = count if count > 1 else rows
        parts = count if count > 1 else rows // 64
        workers = max(1, min(self.workers, parts)) if fmas >= GEMM_PARALLEL_MIN_FMAS else 1
        if workers == 1:
            products(b, ir.Constant(I64, 0), ir.Constant(I64, size), ptrs)
            return
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR]),
                         name=module.get_unique_name("gemm_batches"))
        fb = ir.IRBuilder(fn.append_basic_block("entry"))
        products(fb, fn.args[0], fn.args[1], list(fn.args[2:]))
        fb.ret_void()
        bounds = np.linspace(0, size, workers + 1).astype(np.int64).tolist()
        _on_threads(b, module, fn, bounds, lambda w: ptrs)

    def _out_strides(self, batch, m, n):
        """(row stride, batch strides) of the result: its Layout's when it is batch +
        (rows, n) with unit column stride (a planner may lay it out so), else those of a
        contiguous result (a vector operand drops a dim)."""
        shape, strides = tuple(self.out.shape), tuple(self.out.strides)
        if len(shape) == len(batch) + 2 and (shape[-1] <= 1 or strides[-1] == 1):
            return (strides[-2] if shape[-2] > 1 else max(1, n)), strides[:-2]
        return max(1, n), contiguous_strides(batch + (m, n))[:len(batch)] if batch else ()


def _fold_batch(count, mkn, a, b, c):
    """((m, k, n), a strides, b strides, c row stride) of ONE product doing a batch of
    `count` products, or None: a matrix shared by the batch (batch stride 0) times
    matrices side by side in memory (each batch element's columns right after the
    previous one's, and so are the results' columns) is one product with count * n
    columns; the mirror case (rows one after another, the right matrix shared) is one
    with count * m rows. One call reads the shared matrix once (BLAS packs it per
    call) and gives BLAS a shape it runs well: a GMM's x @ Q_k over 50 components."""
    (m, k, n), (a_st, a_bst), (b_st, b_bst), (c_ld, c_bst) = mkn, a, b, c
    if count <= 1 or len(c_bst) != 1:
        return None
    if a_bst == (0,) and b_st[1] == 1 and b_bst[0] == n and c_bst[0] == n and \
            b_st[0] >= count * n and c_ld >= count * n:
        return (m, k, count * n), a_st, b_st, c_ld
    if b_bst == (0,) and a_st[1] == 1 and a_bst[0] == m * a_st[0] and \
            c_bst[0] == m * c_ld and a_st[0] >= k and c_ld >= n:
        return (count * m, k, n), a_st, b_st, c_ld
    return None


# A batch of products (or one product's rows) is split over our threads from this many
# multiply-adds on: ~0.2 ms on one thread, where a thread's start and join (~0.1 ms on
# the 2-core machine) is paid back
GEMM_PARALLEL_MIN_FMAS = 1 << 21


# OpenBLAS's thread count: int openblas_set_num_threads_local(int), which returns the
# previous count. NB: despite its name it is process-wide in OpenBLAS's pthreads builds
# (numpy's among them)
_BLAS_THREADS_LOCAL = "openblas_set_num_threads_local"


def _blas_threads(b, module, count):
    """Set OpenBLAS's thread count to `count` (an i32), returning the old one.
    Our gemms run on one BLAS thread: their shapes (a batch of thin products, the small
    products of a layer) gain little from OpenBLAS's threads, whose workers spin-wait
    after each call and then starve the kernels we run on threads of our own (on 2 busy
    cores a GMM gradient at d=64 took 3x as long with them)."""
    fn = _declare(module, _BLAS_THREADS_LOCAL, I32, [I32])
    return b.call(fn, [count])


def _blas_form(shape, strides):
    """(trans flag, leading dimension) for a matrix BLAS reads in place, or None."""
    rows, cols = shape
    rs, cs = strides
    if (cols <= 1 or cs == 1) and (rows <= 1 or rs >= max(1, cols)):
        return MatmulCall.NO_TRANS, rs if rows > 1 else max(1, cols)
    if (rows <= 1 or rs == 1) and (cols <= 1 or cs >= max(1, rows)):
        return MatmulCall.TRANS, cs if cols > 1 else max(1, rows)
    return None


def _batch_strides(shape, strides, batch):
    lead = len(batch) - len(shape)
    return (0,) * lead + tuple(0 if n == 1 else s for n, s in zip(shape, strides))


def _batch_offsets(b, index, batch, all_strides):
    """Element offsets at flat batch index `index` for each operand's batch strides."""
    idx, rest = [], index
    for n in reversed(batch):
        idx.append(b.urem(rest, ir.Constant(I64, n)))
        rest = b.udiv(rest, ir.Constant(I64, n))
    idx.reverse()
    offsets = []
    for strides in all_strides:
        off = ir.Constant(I64, 0)
        for i, s in zip(idx, strides):
            if s:
                off = b.add(off, b.mul(i, ir.Constant(I64, s)))
        offsets.append(off)
    return offsets


def kernel_function(module, kernel, vector_bytes):
    """The LLVM function of `kernel` in `module`, lowered the first time it is asked for
    (into a module of its own, and declared in `module`, when KERNEL_MODULES says)."""
    fn = module.globals.get(kernel.name)
    if fn is not None:
        return fn
    elsewhere = KERNEL_MODULES.get()
    if elsewhere is not None and kernel.name in elsewhere.group_of:
        return elsewhere.lower(kernel, module, vector_bytes)
    return kernels.lower_kernel(kernel, module, vector_bytes)


def emit_segment(module, name, calls, vector_bytes, status=None):
    """The entry function `name(list_of_arrays)` running `calls` in order (after the
    functions of the kernels they run: callees first, as compiled code was laid out);
    `status` is the buffer failed checks report in (None when no call may fail).
    Returns the checks emitted, in the order of their codes."""
    for call in calls:
        for kernel in call.kernels:
            kernel_function(module, kernel, vector_bytes)
    fn = ir.Function(module, ir.FunctionType(I64, [PTR]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    items = b.load(b.gep(fn.args[0], [ir.Constant(I64, runtime.list_items_offset())],
                         source_etype=ir.IntType(8)), typ=PTR)
    used = set().union(*(call.buffers for call in calls))
    data = _data_pointers(b, items, used | ({status} if status is not None else set()))
    entry = Entry(b, module, data, vector_bytes, None if status is None else data[status])
    for call in calls:
        call.emit(entry)
    b.ret(ir.Constant(I64, 0))
    return entry.checks


def _data_pointers(b, items, buffers):
    """{buffer: its array's data pointer}, loaded once at the top of the entry."""
    offset = ir.Constant(I64, runtime.array_data_offset())
    data = {}
    for buffer in sorted(buffers):
        obj = b.load(b.gep(items, [ir.Constant(I64, buffer)], source_etype=PTR), typ=PTR)
        data[buffer] = b.load(b.gep(obj, [offset], source_etype=ir.IntType(8)), typ=PTR)
    return data


def _stack(b, elem, count):
    """Stack room for `count` values of type `elem`."""
    return b.alloca(elem, size=count)


def _at(b, ptr, i, elem):
    """Pointer to element i of an array of `elem` at ptr."""
    return b.gep(ptr, [ir.Constant(I64, i)], source_etype=elem)


def _pointer(b, data, layout):
    base = data[layout.buffer]
    if not layout.offset:
        return base
    return b.gep(base, [ir.Constant(I64, layout.offset)], source_etype=_elem(layout.dtype))


def scale_means(b, dtype, outs, layouts, scales):
    """Multiply output k (at pointer outs[k], Layout layouts[k]) by scales[k]: a mean is
    its sum times 1/count."""
    elem = _elem(dtype)
    for k, scale in scales.items():
        n = int(np.prod(layouts[k].shape))
        for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, n), 1, lambda i, k=k: b.store(
            b.fmul(b.load(b.gep(outs[k], [i], source_etype=elem), typ=elem),
                   ir.Constant(elem, scale)), b.gep(outs[k], [i], source_etype=elem)))


def _fill(b, ptr, elem, n, value):
    """`value` at n elements of type `elem` from ptr: zeros by llvm.memset (libc's
    vectorized memset at any opt level, and one call in the IR, not a loop: the
    entries of quick code are compiled unoptimized), others by a loop."""
    size = _zero_fill_size(elem, value)
    if size:
        memset = b.module.declare_intrinsic("llvm.memset", [PTR, I64])
        b.call(memset, [ptr, ir.Constant(ir.IntType(8), 0), ir.Constant(I64, n * size),
                        ir.Constant(ir.IntType(1), 0)])
        return
    for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, n), 1, lambda i: b.store(
        ir.Constant(elem, value), b.gep(ptr, [i], source_etype=elem)))


def _zero_fill_size(elem, value):
    """The bytes of an `elem` when `value` is stored as all zero bits, else None (-0.0
    has its sign bit; an i1's size is no whole byte)."""
    if float(value) != 0.0 or np.signbit(value):
        return None
    if isinstance(elem, ir.DoubleType):
        return 8
    if isinstance(elem, ir.FloatType):
        return 4
    if isinstance(elem, ir.IntType) and elem.width % 8 == 0:
        return elem.width // 8
    return None


def _fill_layout(b, ptr, layout, value):
    """`value` at every element of `layout` from ptr (its first element): a strided one
    too (a reduction written in place into a part of a larger result)."""
    elem, shape = _elem(layout.dtype), tuple(layout.shape)
    if tuple(layout.strides) == contiguous_strides(shape):
        _fill(b, ptr, elem, int(np.prod(shape, dtype=np.int64)), value)
        return

    for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, int(np.prod(shape, dtype=np.int64))),
             1, lambda e: b.store(ir.Constant(elem, value), b.gep(
                 ptr, [strided_offset(b, e, shape, layout.strides)], source_etype=elem)))


def strided_offset(b, e, shape, strides):
    """The element offset of row-major index e (an i64) of `shape` laid out with
    `strides`."""
    offset, rest = ir.Constant(I64, 0), e
    for size, stride in reversed(list(zip(shape, strides))):
        offset = b.add(offset, b.mul(b.urem(rest, ir.Constant(I64, size)),
                                     ir.Constant(I64, stride)))
        rest = b.udiv(rest, ir.Constant(I64, size))
    return offset


def _declare(module, name, ret, args):
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name=name)


TRAMPOLINE_SUFFIX = "_worker"  # of a trampoline's name, after its kernel's


def _trampoline(module, kernel_fn, n_ptrs):
    """void *kernel_worker(i64 *args): a part of a pool job (pool.py) unpacking [start,
    stop, pointers...] and calling the kernel."""
    name = kernel_fn.name + TRAMPOLINE_SUFFIX
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    fn = ir.Function(module, ir.FunctionType(PTR, [PTR]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fields = [b.load(_at(b, fn.args[0], i, I64), typ=I64) for i in range(2 + n_ptrs)]
    b.call(kernel_fn, fields[:2] + [b.inttoptr(f, PTR) for f in fields[2:]])
    b.ret(ir.Constant(PTR, None))
    return fn


def _on_threads(b, module, fn, bounds, pointers):
    """fn(bounds[w], bounds[w + 1], *pointers(w)) for each worker w, as one job of the
    persistent native thread pool (pool.py): its workers and this thread take the
    parts, and all are done when this returns. No thread is made per call."""
    trampoline = _trampoline(module, fn, len(pointers(0)))
    parts = []
    for w in range(len(bounds) - 1):  # one record per part: [start, stop, pointers...]
        ptrs = pointers(w)
        args = _stack(b, I64, 2 + len(ptrs))
        fields = [ir.Constant(I64, bounds[w]), ir.Constant(I64, bounds[w + 1]),
                  *[b.ptrtoint(p, I64) for p in ptrs]]
        for i, value in enumerate(fields):
            b.store(value, _at(b, args, i, I64))
        parts.append(args)
    pool.emit_run(b, module, trampoline, parts)


# One source of a CopyCall: `count` elements of buffer `src` at the offsets in buffer
# `src_table` go to the destination's offsets in buffer `dst_table` (int64 tables).
CopySource = namedtuple("CopySource", ("src", "src_table", "dst_table", "count"))


class CopyCall(NativeCall):
    """Element moves with index tables (cat, gathers, scatters, copying reshapes): for
    each source, dst[dst_index[i]] = src[src_index[i]] (or += when `accumulate`), after
    filling dst with zeros when some of its elements come from no source. The tables
    are int64 constant buffers of element offsets, made when the plan was made."""

    def __init__(self, sources, dst, dtype, fill, accumulate):
        tables = {buf for s in sources for buf in (s.src_table, s.dst_table)}
        super().__init__({s.src for s in sources}, {dst.buffer}, tables)
        self.sources = sources  # CopySources
        self.dst, self.dtype = dst, np.dtype(dtype)
        self.fill, self.accumulate = fill, accumulate

    def emit(self, entry):
        b, data = entry.b, entry.data
        elem = _elem(self.dtype)
        dst = entry.pointer(self.dst)
        if self.fill:
            _fill(b, dst, elem, int(np.prod(self.dst.shape)), 0.0)
        for src_buf, src_table, dst_table, n in self.sources:
            src, src_idx, dst_idx = data[src_buf], data[src_table], data[dst_table]

            def move(i, src=src, src_idx=src_idx, dst_idx=dst_idx):
                s = b.load(b.gep(src_idx, [i], source_etype=I64), typ=I64)
                d = b.load(b.gep(dst_idx, [i], source_etype=I64), typ=I64)
                value = b.load(b.gep(src, [s], source_etype=elem), typ=elem)
                address = b.gep(dst, [d], source_etype=elem)
                if self.accumulate:
                    value = b.fadd(b.load(address, typ=elem), value)
                b.store(value, address)
            for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, n), 1, move)
