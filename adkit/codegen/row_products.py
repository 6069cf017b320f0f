"""Row products: a matmul C = A @ B computed in the call of the kernel that makes B
(ir/passes/fuse.py's `row_product`), a block of B's rows at a time.

Owns: `RowProductCall` and the product functions it emits. The kernel (kernels.py,
built with `rows`) writes T rows of B at a time into a small buffer that stays in
cache, instead of B whole; a product function then adds A[:, rows] @ block to C,
keeping a block of IB rows by JB vectors of C in registers while it goes down the
block's rows (one vector load of B's row and one broadcast of A per IB * JB multiply-
adds). B is never stored, and C's work reads what the kernel has just made. Threads
split the batch (B's and C's leading dims). Does not: decide what is a row product
(fuse.py), plan the kernel and the layouts (lowering.py's `fused_kernel`), or emit
the kernel's loops (kernels.py).
"""
from collections import namedtuple

import numpy as np
from llvmlite import ir

from . import kernels, masked, program
from .kernels import I64, PTR, for_loop, splat

# One product of a call: A's and C's Layouts, and the kernel output writing B's rows.
Product = namedtuple("Product", ("a", "c", "out"))

BLOCK_BYTES = 16384  # B's rows made at a time: this much (it stays in L1 with A's rows)
NS_PER_FMA = 0.05  # a product's multiply-adds, in the thread cost model (plan.py)


def splits_by_batch(kernel):
    """Whether threads may split a row kernel's batch (its iteration space [batch..., K,
    N] has batch dims, and no reduction combines batch elements)."""
    batch = len(kernel.shape) - 2
    return batch > 0 and kernel.outer_size > kernel.shape[-2] and all(
        o.combine is None or all(o.strides[:batch]) for o in kernel.outputs)


def product_lanes(width, dtype, vector_bytes):
    """Lanes of a product's vectors for rows of `width`: the host's, or half as many
    when that computes fewer lanes in all (a row of 10 float64s: 3 vectors of 4, not 2
    of 8; AVX-512 units on many CPUs take a vector of 8 as two of 4)."""
    lanes = max(1, vector_bytes // np.dtype(dtype).itemsize)
    half = max(1, lanes // 2)
    return half if -(-width // half) * half < -(-width // lanes) * lanes else lanes


def padded_width(width, dtype, vector_bytes):
    """Elements per row of a block of B: `width` rounded up to whole vectors, so that a
    product reads each row in whole vectors."""
    lanes = product_lanes(width, dtype, vector_bytes)
    return -(-width // lanes) * lanes


def block_rows(k, padded, dtype):
    """Rows of B made at a time (at most K)."""
    return int(max(8, min(k, BLOCK_BYTES // (padded * np.dtype(dtype).itemsize))))


class RowProductCall(program.NativeCall):
    """`kernel` (built with rows: its iteration space [batch..., K, N]) run block by
    block of T rows on `inputs` into `outputs` (Layouts; None for the outputs writing
    B's rows, which go to `blocks`: per product, one buffer of [T, padded] per worker),
    each block multiplied into its products' C (`products`); `workers` threads split the
    batch; `scales` multiply a mean's sums afterwards."""

    def __init__(self, kernel, inputs, outputs, products, blocks, workers, scales=None):
        scratch = {layout.buffer for per_worker in blocks for layout in per_worker}
        made = {x.buffer for x in outputs if x is not None} | {p.c.buffer for p in products}
        super().__init__({x.buffer for x in inputs} | {p.a.buffer for p in products},
                         made | scratch, ())
        self.kernel, self.inputs, self.outputs = kernel, inputs, outputs
        self.products, self.blocks, self.scales = products, blocks, scales or {}
        self.kernels = (kernel,)
        self.batch = kernel.outer_size // kernel.shape[-2]
        self.rows = blocks[0][0].shape[0]
        self.workers = workers

    def emit(self, entry):
        b, module, kernel = entry.b, entry.module, self.kernel
        fn = program.kernel_function(module, kernel, entry.vector_bytes)
        ins = [entry.pointer(x) for x in self.inputs]
        outs = [entry.pointer(x) for x in self.outputs if x is not None]
        for o, x in zip(kernel.outputs, self.outputs):  # reductions start from identity
            if x is not None and o.combine:
                program._fill_layout(b, entry.pointer(x), x, kernels.IDENTITY[o.combine])
        for p in self.products:  # products are sums
            program._fill_layout(b, entry.pointer(p.c), p.c, 0.0)
        part = self._part_function(module, fn, entry.vector_bytes, len(ins), len(outs))
        per_worker = [ins + outs + self._worker_pointers(entry, w)
                      for w in range(self.workers)]
        bounds = np.linspace(0, self.batch, self.workers + 1).astype(np.int64).tolist()
        if self.workers == 1:
            b.call(part, [ir.Constant(I64, 0), ir.Constant(I64, self.batch)] + per_worker[0])
        else:
            program._on_threads(b, module, part, bounds, lambda w: per_worker[w])
        program.scale_means(b, kernel.dtype, outs, self.outputs, self.scales)

    def _worker_pointers(self, entry, w):
        """Worker w's pointers after the kernel's: its blocks, then As and Cs."""
        return [entry.pointer(block[w]) for block in self.blocks] + \
            [entry.pointer(p.a) for p in self.products] + \
            [entry.pointer(p.c) for p in self.products]

    def _part_function(self, module, kernel_fn, vector_bytes, n_in, n_out):
        """void part(i64 first, i64 stop, ins..., outs..., blocks..., As..., Cs...):
        batch elements [first, stop), each block by block of rows."""
        count = len(self.products)
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] + [PTR] * (
            n_in + n_out + 3 * count)), name=module.get_unique_name(f"{self.kernel.name}_rows"))
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = list(fn.args[2:])
        ins, outs = args[:n_in], args[n_in:n_in + n_out]
        blocks, a_ptrs, c_ptrs = (args[n_in + n_out + i * count:n_in + n_out + (i + 1) * count]
                                  for i in range(3))
        products = [product_function(module, f"{self.kernel.name}_product{i}", p, vector_bytes,
                                     self._padded(p))
                    for i, p in enumerate(self.products)]
        k = self.kernel.shape[-2]

        def element(e):
            batch_shape = self._batch_shape()
            a_at = [_offset(b, a, e, batch_shape, p.a) for a, p in zip(a_ptrs, self.products)]
            c_at = [_offset(b, c, e, batch_shape, p.c) for c, p in zip(c_ptrs, self.products)]
            first = b.mul(e, ir.Constant(I64, k))
            for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, k), self.rows,
                     lambda r: self._block(b, kernel_fn, products, first, r, ins, outs,
                                           blocks, a_at, c_at))
        for_loop(b, fn.args[0], fn.args[1], 1, element)
        b.ret_void()
        return fn

    def _block(self, b, kernel_fn, products, first, r, ins, outs, blocks, a_at, c_at):
        """Rows [r, r + T) of B (fewer at the end) made, then multiplied in."""
        k = ir.Constant(I64, self.kernel.shape[-2])
        left = b.sub(k, r)
        rows = b.select(b.icmp_signed("<", left, ir.Constant(I64, self.rows)), left,
                        ir.Constant(I64, self.rows))
        start = b.add(first, r)
        elem = program._elem(self.kernel.dtype)
        # the kernel writes row r + i at (r + i) * padded: its pointer is moved back
        shifted = [b.gep(block, [b.mul(r, ir.Constant(I64, -self._padded(p)))],
                         source_etype=elem) for block, p in zip(blocks, self.products)]
        b.call(kernel_fn, [start, b.add(start, rows), *ins, *outs, *shifted])
        for fn, p, block, a, c in zip(products, self.products, blocks, a_at, c_at):
            a_col = p.a.strides[-1]
            b.call(fn, [b.gep(a, [b.mul(r, ir.Constant(I64, a_col))], source_etype=elem),
                        block, c, rows])

    def _batch_shape(self):
        return tuple(self.products[0].c.shape[:-2])

    def _padded(self, product):
        return self.kernel.outputs[product.out].strides[-2]


def _offset(b, ptr, e, batch_shape, layout):
    """ptr moved to batch element e of `layout` (its batch dims broadcast: stride 0)."""
    lead = len(batch_shape) - (len(layout.shape) - 2)
    strides = (0,) * lead + tuple(layout.strides[:-2])
    if not any(strides):
        return ptr
    offset = program.strided_offset(b, e, batch_shape, strides)
    return b.gep(ptr, [offset], source_etype=program._elem(layout.dtype))


def product_function(module, name, product, vector_bytes, block_stride):
    """void product(ptr a, ptr block, ptr c, i64 rows): C += A[:, :rows] @ block, for
    one batch element (a, c point at its matrices; block: rows `block_stride` elements
    apart, at least C's width rounded up to whole vectors).
    C in blocks of IB rows by JB vectors, each block's sums in registers down the rows.
    The full blocks of IB rows run in a loop (one copy of their code, not one per block:
    GMM large's product had four, a third of its module's IR and of its quick compile;
    a block's loop down the rows is what takes the time), the rest after it."""
    dtype = product.c.dtype
    elem = program._elem(dtype)
    m, n = product.c.shape[-2:]
    lanes = product_lanes(n, dtype, vector_bytes)
    vectors = -(-n // lanes)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    jb = _even(vectors, 6)  # vectors of C per block, then rows: the sums fill the registers
    ib = _even(m, max(1, ((32 if vector_bytes >= 64 else 16) - jb - 2) // jb))
    vec = ir.VectorType(elem, lanes)
    acc = [[b.alloca(vec) for _ in range(jb)] for _ in range(ib)]
    a, block, c, rows = fn.args
    a_row, c_row = product.a.strides[-2], product.c.strides[-2]

    def row_blocks(first, count):
        """C's rows [first, first + count) (first: an i64 value), block by block of JB
        vectors."""
        a_at = b.gep(a, [b.mul(first, ir.Constant(I64, a_row))], source_etype=elem)
        c_at = b.gep(c, [b.mul(first, ir.Constant(I64, c_row))], source_etype=elem)
        for j0 in range(0, vectors, jb):
            tile = [(i, j) for i in range(count) for j in range(j0, min(vectors, j0 + jb))]
            _sums(b, (a_at, block, c_at, rows), product, tile, acc, j0, lanes,
                  (n, block_stride))
    full = m // ib
    if full > 1:
        for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, full * ib), ib,
                 lambda i0: row_blocks(i0, ib))
    elif full == 1:
        row_blocks(ir.Constant(I64, 0), ib)
    if m > full * ib:
        row_blocks(ir.Constant(I64, full * ib), m - full * ib)
    b.ret_void()
    return fn


def _even(count, most):
    """Parts of at most `most` that split `count` into blocks of equal size (the last
    one smaller by the rest)."""
    return -(-count // -(-count // most))


def _sums(b, args, product, tile, acc, j0, lanes, widths):
    """One block of C (rows `tile`'s i from the row `args`' a and c point at, vectors
    from j0): loaded into the accumulators, the rows' products added, stored.
    widths: C's, the block's rows'."""
    a, block, c, rows = args
    n, padded = widths
    elem, vec = acc[0][0].allocated_type.element, acc[0][0].allocated_type
    itemsize = np.dtype(product.c.dtype).itemsize
    a_row, a_col = product.a.strides[-2:]
    c_row = product.c.strides[-2]

    def c_vector(i, j):
        address = b.gep(c, [ir.Constant(I64, i * c_row + j * lanes)], source_etype=elem)
        count = min(lanes, n - j * lanes)
        return address, (masked.lane_mask(lanes, count) if count < lanes else None)
    for i, j in tile:
        address, mask = c_vector(i, j)
        value = b.load(address, typ=vec, align=itemsize) if mask is None else \
            masked.load(b, address, vec, mask, itemsize)
        b.store(value, acc[i][j - j0])

    def row(t):
        start = b.mul(t, ir.Constant(I64, padded))
        loaded = {j: b.load(b.gep(block, [b.add(start, ir.Constant(I64, j * lanes))],
                                  source_etype=elem), typ=vec, align=itemsize)
                  for j in sorted({j for _, j in tile})}
        at = b.mul(t, ir.Constant(I64, a_col))
        for i in sorted({i for i, _ in tile}):
            scalar = b.load(b.gep(a, [b.add(at, ir.Constant(I64, i * a_row))],
                                  source_etype=elem), typ=elem)
            factor = splat(b, scalar, lanes)
            for j in sorted({j for ii, j in tile if ii == i}):
                slot = acc[i][j - j0]
                product = b.fmul(factor, loaded[j], flags=("contract",))
                b.store(b.fadd(b.load(slot, typ=vec), product, flags=("contract",)), slot)
    for_loop(b, ir.Constant(I64, 0), rows, 1, row)
    for i, j in tile:
        address, mask = c_vector(i, j)
        value = b.load(acc[i][j - j0], typ=vec)
        if mask is None:
            b.store(value, address, align=itemsize)
        else:
            masked.store(b, value, address, mask, itemsize)
