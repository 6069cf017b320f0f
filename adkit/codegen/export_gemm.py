"""Matrix products without a BLAS: a register-tiled gemm in LLVM IR, for exported
libraries built where no BLAS was found (export_blas.py decides).

Owns: `define_gemm(module, name, dtype, vector_bytes)`, a function with the signature
program.MatmulCall calls (cblas ?gemm, row-major, 64-bit sizes). Does not: decide when it
is used (export_blas.py) or split products over threads (MatmulCall does, as for BLAS).

The method: C (m x n) = alpha op(A) op(B) + beta C. Rows of C go in tiles of 8 (4 where
there are 16 vector registers, not 32), columns in tiles of TILE_VECTORS vectors; a
tile's sums stay in vector registers while the loop runs down the k terms (each term:
the tile's vectors of a row of op(B), a broadcast element of op(A) per row, one
multiply-add per accumulator). Leftover rows make one smaller tile, leftover columns run
one vector at a time, the last partial vector masked. When
op(B) is a transpose its columns are not contiguous: it is first copied (packed) into a
contiguous k x n block, so the tiles always read rows of B. Long sums go in depth blocks
of DEPTH_BYTES per row (the first block stores into C, the next ones add), so the part
of B that a row of tiles reads stays in the caches; within a block terms are summed in
the order of k.
"""
import numpy as np
from llvmlite import ir

from . import masked
from .kernels import I32, I64, PTR, for_loop, splat
from .program import _declare

TILE_VECTORS = 2  # and rows: 8 with 32 vector registers (AVX-512), else 4 (of 16)
DEPTH_BYTES = 2048  # terms per depth block: 256 float64s (a 4-row tile's A: 8 KiB)
NO_TRANS = 111  # CblasNoTrans (the only order is CblasRowMajor, as MatmulCall calls it)
VOID = ir.VoidType()


def define_gemm(module, name, dtype, vector_bytes):
    """Define `name`(order, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
    ldc) in `module` for float `dtype` (giving a declaration of it a body); returns
    the function."""
    dtype = np.dtype(dtype)
    elem = ir.DoubleType() if dtype.itemsize == 8 else ir.FloatType()
    fn = _declare(module, name, VOID, [I32, I32, I32, I64, I64, I64, elem, PTR, I64, PTR,
                                       I64, elem, PTR, I64])  # (declared by a call, perhaps)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    _Gemm(b, module, dtype.itemsize, max(1, vector_bytes // dtype.itemsize), fn.args).emit()
    b.ret_void()
    return fn


class _Gemm:
    """Emits one gemm's body at builder `b`; `args` are the function's arguments."""

    def __init__(self, b, module, itemsize, lanes, args):
        self.b, self.module, self.itemsize, self.lanes = b, module, itemsize, lanes
        self.elem = ir.DoubleType() if itemsize == 8 else ir.FloatType()
        self.tile_rows = 8 if lanes * itemsize >= 64 else 4
        self.vec = ir.VectorType(self.elem, lanes)
        (_, ta, tb, self.m, self.n, self.k, self.alpha, self.a, lda, self.b_ptr, ldb,
         self.beta, self.c, self.ldc) = args
        one = ir.Constant(I64, 1)
        a_plain = b.icmp_signed("==", ta, ir.Constant(I32, NO_TRANS))
        # op(A)[i, p] is at A + i * a_row + p * a_col
        self.a_row, self.a_col = b.select(a_plain, lda, one), b.select(a_plain, one, lda)
        self.b_plain = b.icmp_signed("==", tb, ir.Constant(I32, NO_TRANS))
        self.ldb = ldb

    def emit(self):
        b = self.b
        packed = self._pack_b()
        self.b_ptr = b.select(self.b_plain, self.b_ptr, packed)
        self.b_row = b.select(self.b_plain, self.ldb, self.n)
        depth = DEPTH_BYTES // self.itemsize
        blocks_end = b.select(b.icmp_signed(">", self.k, ir.Constant(I64, 0)), self.k,
                              ir.Constant(I64, 1))  # k = 0 still writes beta C
        for_loop(b, ir.Constant(I64, 0), blocks_end, depth,
                 lambda p: self._depth_block(p, depth))
        with b.if_then(b.not_(self.b_plain)):
            b.call(_declare(self.module, "free", VOID, [PTR]), [packed])

    def _depth_block(self, p, depth):
        """Terms [p, p + depth) of every tile: the first block stores into C, the
        others add to it (the rows of A and B a block reads stay in cache)."""
        b = self.b
        self.terms = (p, b.select(b.icmp_signed("<", b.add(p, ir.Constant(I64, depth)),
                                                self.k), b.add(p, ir.Constant(I64, depth)),
                                  self.k))
        self.first = b.icmp_signed("==", p, ir.Constant(I64, 0))
        tile = self.tile_rows
        rows_done = for_loop(b, ir.Constant(I64, 0), self._last_start(self.m, tile), tile,
                             lambda i: self._row_tile(i, tile))
        rest = b.sub(self.m, rows_done)
        after = b.append_basic_block("rows.end")
        choice = b.switch(rest, after)
        for rows in range(1, tile):  # the last rows as one tile (B's rows read once more)
            block = b.append_basic_block(f"rows.{rows}")
            choice.add_case(ir.Constant(I64, rows), block)
            b.position_at_end(block)
            self._row_tile(rows_done, rows)
            b.branch(after)
        b.position_at_end(after)

    def _last_start(self, size, span):
        """Where a loop stepping by `span` stops starting whole tiles (size - span + 1)."""
        return self.b.sub(size, ir.Constant(I64, span - 1))

    def _pack_b(self):
        """A contiguous k x n copy of op(B) when B is transposed (else a null pointer):
        packed[p, j] = B[j, p], written row by row."""
        b = self.b
        packed = b.alloca(PTR)
        b.store(ir.Constant(PTR, None), packed)
        with b.if_then(b.not_(self.b_plain)):
            size = ir.Constant(I64, self.itemsize)
            count = b.mul(b.mul(self.k, self.n), size)
            memory = b.call(_declare(self.module, "malloc", PTR, [I64]), [count])
            b.store(memory, packed)

            def row(p):
                def element(j):
                    value = self._load(self.b_ptr, b.add(b.mul(j, self.ldb), p))
                    b.store(value, self._at(memory, b.add(b.mul(p, self.n), j)))
                for_loop(b, ir.Constant(I64, 0), self.n, 1, element)
            for_loop(b, ir.Constant(I64, 0), self.k, 1, row)
        return b.load(packed, typ=PTR)

    def _row_tile(self, i, rows):
        """Rows [i, i + rows) of C: whole column tiles, single vectors, a masked rest."""
        b, span = self.b, self.lanes * TILE_VECTORS
        done = for_loop(b, ir.Constant(I64, 0), self._last_start(self.n, span), span,
                        lambda j: self._tile(i, rows, j, TILE_VECTORS))
        if TILE_VECTORS > 1:
            done = for_loop(b, done, self._last_start(self.n, self.lanes), self.lanes,
                            lambda j: self._tile(i, rows, j, 1))
        rest = b.sub(self.n, done)
        with b.if_then(b.icmp_signed(">", rest, ir.Constant(I64, 0))):
            self._tile(i, rows, done, 1, self._mask(rest))

    def _mask(self, count):
        """<lanes x i1>: the lanes below `count` (an i64 value) on."""
        b = self.b
        lane_numbers = ir.Constant(ir.VectorType(I64, self.lanes), list(range(self.lanes)))
        return b.icmp_signed("<", lane_numbers, splat(b, count, self.lanes))

    def _tile(self, i, rows, j, vectors, mask=None):
        """C[i:i+rows, j:j+vectors*lanes] from the k terms (partial sums in registers)."""
        b = self.b
        zero = ir.Constant(self.vec, [ir.Constant(self.elem, 0.0)] * self.lanes)

        def term(p, sums):
            row_b = b.add(b.mul(p, self.b_row), j)
            bs = [self._load_vector(self.b_ptr, b.add(row_b, ir.Constant(I64, v * self.lanes)),
                                    mask) for v in range(vectors)]
            new = []
            for r in range(rows):
                at = b.add(b.mul(b.add(i, ir.Constant(I64, r)), self.a_row),
                           b.mul(p, self.a_col))
                a = splat(b, self._load(self.a, at), self.lanes)
                for v in range(vectors):
                    product = b.fmul(a, bs[v], flags=("contract",))
                    new.append(b.fadd(sums[r * vectors + v], product, flags=("contract",)))
            return new
        sums = _carried_loop(b, *self.terms, [zero] * (rows * vectors), term)
        for r in range(rows):
            row_c = b.mul(b.add(i, ir.Constant(I64, r)), self.ldc)
            for v in range(vectors):
                at = b.add(b.add(row_c, j), ir.Constant(I64, v * self.lanes))
                self._store_c(sums[r * vectors + v], at, mask)

    def _store_c(self, total, at, mask):
        """C[at:at+lanes] = alpha total (+ beta C when beta is not 0: C is not read
        when beta is 0, as BLAS promises, so NaN in fresh memory does not leak) in the
        first depth block; C += alpha total in the others."""
        b = self.b
        scaled = b.fmul(splat(b, self.alpha, self.lanes), total)
        old = self._load_vector(self.c, at, mask)
        mixed = b.fadd(scaled, b.fmul(splat(b, self.beta, self.lanes), old))
        keep = b.fcmp_ordered("==", self.beta, ir.Constant(self.elem, 0.0))
        value = b.select(self.first, b.select(keep, scaled, mixed), b.fadd(old, scaled))
        address = self._at(self.c, at)
        if mask is None:
            b.store(value, address, align=self.itemsize)
        else:
            masked.store(b, value, address, mask, self.itemsize)

    def _at(self, base, offset):
        return self.b.gep(base, [offset], source_etype=self.elem)

    def _load(self, base, offset):
        return self.b.load(self._at(base, offset), typ=self.elem)

    def _load_vector(self, base, offset, mask):
        if mask is None:
            return self.b.load(self._at(base, offset), typ=self.vec, align=self.itemsize)
        return masked.load(self.b, self._at(base, offset), self.vec, mask, self.itemsize)


def _carried_loop(b, start, stop, init, body):
    """values = init; for p in [start, stop): values = body(p, values); returns values
    (loop-carried values as phi nodes, so they stay in registers)."""
    before = b.block
    head, loop, done = (b.append_basic_block(s) for s in ("k.cond", "k.body", "k.end"))
    b.branch(head)
    b.position_at_end(head)
    p = b.phi(I64)
    p.add_incoming(start, before)
    values = [b.phi(v.type) for v in init]
    for phi, value in zip(values, init):
        phi.add_incoming(value, before)
    b.cbranch(b.icmp_signed("<", p, stop), loop, done)
    b.position_at_end(loop)
    new = body(p, values)
    end = b.block
    p.add_incoming(b.add(p, ir.Constant(I64, 1)), end)
    for phi, value in zip(values, new):
        phi.add_incoming(value, end)
    b.branch(head)
    b.position_at_end(done)
    return values

