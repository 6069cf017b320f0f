"""The outer loop of a multi-dim kernel (kernels.py): one row of its iteration space
per step, the row's index stepped like an odometer, and the outputs the kernel reduces
over its rows combined in registers.

Owns: `outer_loop` and `RowSums`. Does not: emit a row's points (kernels._Emitter), or
say how values combine (kernels passes its identities and its combine in).

Why: a kernel with short rows (a GMM gradient's [components, points, 10]) spent most
of its time dividing the row index into digits at every row, and an output reduced
over the rows (stride 0 along them: a sum over the points) made each row wait for the
previous row's store of the same elements. Now the digits move on by one, and such
sums stay in registers until the run of rows that shares their elements ends.
"""
from llvmlite import ir

I64 = ir.IntType(64)
ROW_SUM_MAX_VECTORS = 4  # longer rows have independent work enough between the stores


class RowSums:
    """Outputs of `kernel` reduced over its rows (combined, stride 0 along the last
    outer dim, not along the inner one; rows of at most ROW_SUM_MAX_VECTORS vectors):
    each has a row of partial results on the stack, which LLVM keeps in registers. It
    is set to the identity when a run of rows sharing the output's elements starts,
    and combined into memory when the run ends (or the kernel's range does)."""

    def __init__(self, b, kernel, lanes, elem, identity, combine):
        self.b, self.kernel, self.lanes, self.elem = b, kernel, lanes, elem
        self.itemsize = kernel.dtype.itemsize
        self.identity, self.combine = identity, combine
        width = kernel.shape[-1]
        self.padded = -(-width // lanes) * lanes  # a partial vector's lanes land too
        self.slots = {}
        if len(kernel.shape) < 2 or width > ROW_SUM_MAX_VECTORS * lanes:
            return
        for k, o in enumerate(kernel.outputs):
            if o.combine and o.dtype is None and o.strides[-1] and not o.strides[-2]:
                self.slots[k] = b.alloca(elem, size=self.padded)

    def address(self, k, i, typ):
        """Where the value (of `typ`: a scalar or a vector) at inner index i of a row
        combines into output k's sums."""
        return self._at(self.slots[k], i, typ)

    def _at(self, slot, i, typ):
        # llvmlite's allocas are typed pointers: a vector's is cast
        at = self.b.gep(slot, [ir.Constant(I64, i) if isinstance(i, int) else i],
                        source_etype=self.elem)
        return at if typ == self.elem else self.b.bitcast(at, typ.as_pointer())

    def reset(self):
        b = self.b
        for k, slot in self.slots.items():
            value = ir.Constant(self.elem, self.identity[self.kernel.outputs[k].combine])
            vector = ir.Constant(ir.VectorType(self.elem, self.lanes), [value] * self.lanes) \
                if self.lanes > 1 else value
            for at in range(0, self.padded, self.lanes):  # the slots are 8-byte aligned
                b.store(vector, self._at(slot, at, vector.type), align=self.itemsize)

    def flush(self, out_ptrs, out_offsets):
        """Combine the sums into the outputs' elements of the row at out_offsets."""
        b = self.b
        for k, slot in self.slots.items():
            o = self.kernel.outputs[k]
            for j in range(self.kernel.shape[-1]):
                total = b.load(self._at(slot, j, self.elem), typ=self.elem)
                address = b.gep(out_ptrs[k], [b.add(out_offsets[k], ir.Constant(
                    I64, j * o.strides[-1]))], source_etype=self.elem)
                b.store(self.combine(b, o.combine, b.load(address, typ=self.elem), total),
                        address)


def outer_loop(b, kernel, start, stop, body, sums, out_ptrs, for_loop):
    """body(input offsets, output offsets) at each outer index in [start, stop) (an
    index over the outer dims, row-major): its digits and each operand's offset are
    found once, at start, then stepped like an odometer. `sums` (RowSums) start and
    end their runs of rows around the body."""
    dims = kernel.shape[:-1]
    strides = [s[:-1] for s in kernel.strides] + [o.strides[:-1] for o in kernel.outputs]
    digits, offsets = [b.alloca(I64) for _ in dims], [b.alloca(I64) for _ in strides]
    rest = start
    for d in reversed(range(len(dims))):  # the digits of start
        b.store(b.urem(rest, ir.Constant(I64, dims[d])) if d else rest, digits[d])
        rest = b.udiv(rest, ir.Constant(I64, dims[d]))
    for k, st in enumerate(strides):
        terms = [b.mul(b.load(digits[d], typ=I64), ir.Constant(I64, s))
                 for d, s in enumerate(st) if s]
        total = terms[0] if terms else ir.Constant(I64, 0)
        for term in terms[1:]:
            total = b.add(total, term)
        b.store(total, offsets[k])

    def row(o):
        values = [b.load(x, typ=I64) for x in offsets]
        last = b.load(digits[-1], typ=I64)
        if sums.slots:
            with b.if_then(b.or_(b.icmp_signed("==", o, start),
                                 b.icmp_signed("==", last, ir.Constant(I64, 0)))):
                sums.reset()
        body(values[:len(kernel.strides)], values[len(kernel.strides):])
        if sums.slots:
            ends = b.or_(b.icmp_signed("==", b.add(o, ir.Constant(I64, 1)), stop),
                         b.icmp_signed("==", last, ir.Constant(I64, dims[-1] - 1)))
            with b.if_then(ends):
                sums.flush(out_ptrs, values[len(kernel.strides):])
        _step_odometer(b, dims, strides, digits, offsets)
    for_loop(b, start, stop, 1, row)


def _step_odometer(b, dims, strides, digits, offsets):
    """The next outer index: the last digit and the offsets move on one step; a digit
    that reaches its dim's size goes back to 0 and carries into the one before."""
    done = b.append_basic_block("odometer.done")
    for d in reversed(range(len(dims))):
        digit = b.add(b.load(digits[d], typ=I64), ir.Constant(I64, 1))
        for k, st in enumerate(strides):
            if st[d]:
                b.store(b.add(b.load(offsets[k], typ=I64), ir.Constant(I64, st[d])),
                        offsets[k])
        if d == 0:  # the first digit never wraps inside [start, stop)
            b.store(digit, digits[d])
            break
        wrap, keep = b.append_basic_block("odometer.wrap"), b.append_basic_block("odometer.keep")
        b.cbranch(b.icmp_signed("==", digit, ir.Constant(I64, dims[d])), wrap, keep)
        b.position_at_end(keep)
        b.store(digit, digits[d])
        b.branch(done)
        b.position_at_end(wrap)
        b.store(ir.Constant(I64, 0), digits[d])
        for k, st in enumerate(strides):
            if st[d]:
                b.store(b.sub(b.load(offsets[k], typ=I64), ir.Constant(I64, st[d] * dims[d])),
                        offsets[k])
    b.branch(done)
    b.position_at_end(done)
