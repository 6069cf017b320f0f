"""Row products of a batch sharing A, folded: C_e = A @ B_e for G batch elements at a
time as ONE product A @ [B_e | B_e+1 | ...], whose block rows hold the G elements'
rows side by side.

Owns: `FoldedProductCall`, `group_size` and `fold_width`. Why: a row product's vectors
span a row of B; rows of 10 float64s fill 3 vectors of 4 lanes (12 for 10), two side
by side fill 5 (20 for 20): a GMM's x^T @ (c_k x) takes 5/6 of the multiply-adds. The
kernel writes each element's rows at its columns (batch stride N, row stride the
group's width); the sums go to a private [M, G N] buffer (small enough for the
product's register tiles), copied into each C_e once the group is done. Does not:
decide what folds (lowering.py), or emit the kernel (kernels.py) and the product
function (row_products.py).
"""
import numpy as np
from llvmlite import ir

from . import program, row_products
from .buffers import contiguous_strides
from .kernels import I64, PTR, for_loop
from .row_products import Product, RowProductCall, _offset, product_function

MAX_GROUP = 4  # batch elements side by side, at most


def group_size(batch, n, dtype, vector_bytes):
    """How many batch elements to fold (1: none): the fewest that waste the smallest
    share of their vectors' lanes, if that is less than one element alone wastes."""
    def waste(g):
        used = g * n
        return (row_products.padded_width(used, dtype, vector_bytes) - used) / used
    best = min(range(1, min(batch, MAX_GROUP) + 1), key=lambda g: (waste(g), g))
    return best if waste(best) < waste(1) else 1


def fold_width(group, n, dtype, vector_bytes):
    """The block's row stride: a group's rows side by side, rounded up to the widest
    vectors (any share of the group, rounded up to its vectors, fits)."""
    lanes = max(1, vector_bytes // np.dtype(dtype).itemsize)
    return -(-group * n // lanes) * lanes


def batch_strides(batch_shape, n):
    """B's strides along its batch dims in a folded block: element e's rows start at
    column e * n (e the flat batch index)."""
    return tuple(s * n for s in contiguous_strides(tuple(batch_shape)))


class FoldedProductCall(RowProductCall):
    """A RowProductCall whose kernel writes B's rows at batch stride N and row stride
    fold_width(group, N), with `sums`: per product, one [M, group N] buffer per
    worker."""

    def __init__(self, kernel, inputs, outputs, products, blocks, sums, workers,
                 group, scales=None):
        super().__init__(kernel, inputs, outputs, products, blocks, workers, scales)
        made = {layout.buffer for per_worker in sums for layout in per_worker}
        self.writes |= made
        self.buffers |= made
        self.sums, self.group = sums, group

    def _worker_pointers(self, entry, w):
        return super()._worker_pointers(entry, w) + [entry.pointer(s[w]) for s in self.sums]

    def _part_function(self, module, kernel_fn, vector_bytes, n_in, n_out):
        """void part(i64 first, i64 stop, ins..., outs..., blocks..., As..., Cs...,
        sums...): batch elements [first, stop), a group at a time."""
        count = len(self.products)
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] + [PTR] * (
            n_in + n_out + 4 * count)), name=module.get_unique_name(f"{self.kernel.name}_fold"))
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = list(fn.args[2:])
        ins, outs = args[:n_in], args[n_in:n_in + n_out]
        blocks, a_ptrs, c_ptrs, sums = (
            args[n_in + n_out + i * count:n_in + n_out + (i + 1) * count] for i in range(4))
        folded = [self._folded(p, s) for p, s in zip(self.products, self.sums)]
        products = [product_function(module, f"{self.kernel.name}_fold{i}", p, vector_bytes,
                                     self._padded(p))
                    for i, p in enumerate(folded)]
        elem = program._elem(self.kernel.dtype)
        group = ir.Constant(I64, self.group)

        def one_group(first):
            after = b.add(first, group)
            stop = b.select(b.icmp_signed("<", after, fn.args[1]), after, fn.args[1])
            for ptr, p in zip(sums, folded):
                program._fill(b, ptr, elem, int(np.prod(p.c.shape)), 0.0)
            for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, self.kernel.shape[-2]),
                     self.rows, lambda r: self._folded_block(
                         b, kernel_fn, products, (first, stop), r,
                         (ins, outs, blocks, a_ptrs, sums)))
            for ptr, c, p in zip(sums, c_ptrs, self.products):
                self._copy_out(b, ptr, c, p, first, stop)
        for_loop(b, fn.args[0], fn.args[1], self.group, one_group)
        b.ret_void()
        return fn

    def _folded(self, product, sums):
        """The product as the product function sees it: A times the folded block into
        the [M, G N] sums."""
        return Product(product.a, sums[0], product.out)

    def _folded_block(self, b, kernel_fn, products, span, r, pointers):
        """Rows [r, r + T) of every batch element's B side by side, then the products."""
        (first, stop), (ins, outs, blocks, a_ptrs, sums) = span, pointers
        k = ir.Constant(I64, self.kernel.shape[-2])
        left = b.sub(k, r)
        rows = b.select(b.icmp_signed("<", left, ir.Constant(I64, self.rows)), left,
                        ir.Constant(I64, self.rows))
        elem = program._elem(self.kernel.dtype)
        n = self.products[0].c.shape[-1]
        # the kernel writes row r + i of element e at (r + i) width + e n: moved back
        shifted = [b.gep(block, [b.neg(b.add(b.mul(r, ir.Constant(I64, self._padded(p))),
                                              b.mul(first, ir.Constant(I64, n))))],
                         source_etype=elem) for block, p in zip(blocks, self.products)]

        def element(e):
            start = b.add(b.mul(e, k), r)
            b.call(kernel_fn, [start, b.add(start, rows), *ins, *outs, *shifted])
        for_loop(b, first, stop, 1, element)
        for fn, p, block, a, s in zip(products, self.products, blocks, a_ptrs, sums):
            b.call(fn, [b.gep(a, [b.mul(r, ir.Constant(I64, p.a.strides[-1]))],
                              source_etype=elem), block, s, rows])

    def _copy_out(self, b, sums, c, product, first, stop):
        """C_e[m, j] = sums[m, (e - first) N + j] for e in [first, stop)."""
        elem = program._elem(self.kernel.dtype)
        m, n = product.c.shape[-2:]
        c_row, c_col = product.c.strides[-2:]
        width = self.group * n

        def element(e):
            at = _offset(b, c, e, self._batch_shape(), product.c)
            column = b.mul(b.sub(e, first), ir.Constant(I64, n))

            def row(i):
                def one(j):
                    src = b.add(b.mul(i, ir.Constant(I64, width)), b.add(column, j))
                    dst = b.add(b.mul(i, ir.Constant(I64, c_row)),
                                b.mul(j, ir.Constant(I64, c_col)))
                    b.store(b.load(b.gep(sums, [src], source_etype=elem), typ=elem),
                            b.gep(at, [dst], source_etype=elem))
                for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, n), 1, one)
            for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, m), 1, row)
        for_loop(b, first, stop, 1, element)
