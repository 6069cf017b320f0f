"""Native loops: a Scan node whose body lowers completely becomes an LLVM loop.

Owns: the lowering rule `scan_loop(planner, n)` and `LoopCall` (the NativeCall that
emits the loop). The body is planned by a planner of its own (the same Planner class,
on the body graph); when every body node is native, its calls are emitted into a
function `<name>_body(i8 **table, int64 *status)` that reads each body buffer's pointer
from a table, and the loop fills the table per step: the consts' pointers, the carry's
(two buffers used in turn, so a step never writes what it reads), x's slice and y's
slot. No Python runs per step; the code is the body's, whatever the trip count. A
failed check in the body (an index out of range) ends the loop and the entry with its
code (program.Entry.fail). Does not: decide a
node's semantics (adkit.control's Scan) or plan bodies (plan.py).
"""
import itertools

import numpy as np
from llvmlite import ir

from . import buffers, program
from .buffers import contiguous_strides
from .kernels import I64, PTR, for_loop
from .program import NativeCall, _elem

_NAMES = itertools.count()


def scan_loop(planner, n):
    """A Scan node (its class says `native_loop`) whose body is all native: a LoopCall."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    if not getattr(data["op"], "native_loop", False):
        return None
    plan = data["params"]["plan"]
    body = native_body(planner, plan.body)
    if body is None:
        return None
    args = [planner.layout((u, out)) for _, u, out in graph.args_of(n)]
    packed = pack_arguments(planner, args, body.inputs_read(), range(plan.n_consts))
    if packed is None:
        return None
    outs = [planner.result(n, i) for i in range(len(data["specs"]))]
    carries = [[planner.scratch(outs[k].shape, outs[k].dtype) for _ in range(2)]
               for k in range(plan.n_carry)]
    return [LoopCall(plan, body, args, outs, carries, packed)]


class NativeBody:
    """A body graph planned by a planner of its own, all native: `plan` (the Planner),
    `where` (its constants' and intermediates' buffers in the outer plan)."""

    def __init__(self, plan, where):
        self.plan, self.where = plan, where
        self.buffers, self.returned, self.layouts = plan.buffers, plan.returned, plan.layouts
        self.name = f"loop{next(_NAMES)}_body"
        self.may_fail = any(call.may_fail for step in plan.steps for call in step.calls)

    def inputs_read(self):
        """{buffer index: input position} of the body inputs native code reads."""
        return {buf.index: buf.position for buf in self.buffers
                if isinstance(buf, buffers.InputBuffer)}

    def emit_function(self, entry):
        """int64 <name>(i8 **table, int64 *status): the body's native calls on the
        table's pointers, called from `entry` (0, or a failed check's code: see
        program.Entry.fail; the checks join the entry's)."""
        fn = ir.Function(entry.module, ir.FunctionType(I64, [PTR, PTR]), name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        data = {buf.index: b.load(program._at(b, fn.args[0], buf.index, PTR), typ=PTR)
                for buf in self.buffers}
        inner = program.Entry(b, entry.module, data, entry.vector_bytes, fn.args[1],
                              entry.checks)
        for step in self.plan.steps:
            for call in step.calls:
                call.emit(inner)
        b.ret(ir.Constant(I64, 0))
        return fn

    def call(self, entry, fn, table):
        """Call the body's function `fn` from `entry`, returning a failed check's code
        from entry's function too."""
        status = entry.status if entry.status is not None else ir.Constant(PTR, None)
        code = entry.b.call(fn, [table, status])
        if self.may_fail:
            entry.propagate(code)

    def table(self, b, data):
        """A pointer table for the body with its constants and intermediates in place
        (the caller fills the inputs)."""
        table = b.alloca(PTR, size=len(self.buffers))
        for buf, outer in self.where.items():
            b.store(data[outer], program._at(b, table, buf, PTR))
        return table

    def direct_outputs(self):
        """{output j: body buffer} for outputs a native call writes whole into a buffer
        of its own (or a contiguous reshape of one): the caller points that buffer at
        the output's destination, so the body writes the carry or the y slot itself."""
        seen, direct = {}, {}
        for j, key in enumerate(self.returned):
            seen.setdefault(self.layouts[key].buffer, []).append(j)
        for j, key in enumerate(self.returned):
            layout = self.layouts[key]
            buf = self.buffers[layout.buffer]
            if isinstance(buf, buffers.ResultBuffer) and len(seen[layout.buffer]) == 1 \
                    and layout.offset == 0 and _is_contiguous(layout) \
                    and np.prod(layout.shape) == np.prod(buf.shape):  # a reshape too
                direct[j] = layout.buffer
        return direct

    def returned_inputs(self):
        """{output j: input position} for outputs that are a body input itself, whole."""
        found = {}
        for j, key in enumerate(self.returned):
            layout = self.layouts[key]
            buf = self.buffers[layout.buffer]
            if isinstance(buf, buffers.InputBuffer) and layout.offset == 0 and \
                    _is_contiguous(layout) and np.prod(layout.shape) == np.prod(buf.shape):
                found[j] = buf.position
        return found

    def store_outputs(self, b, table, destinations, direct):
        """Copy each output the body did not write in place to its destination."""
        for j, key in enumerate(self.returned):
            if j not in direct:
                _copy(b, self.output_pointer(b, table, j), destinations[j],
                      self.layouts[key]._replace(offset=0))

    def output_pointer(self, b, table, j):
        layout = self.layouts[self.returned[j]]
        return b.gep(b.load(program._at(b, table, layout.buffer, PTR), typ=PTR),
                     [ir.Constant(I64, layout.offset)], source_etype=_elem(layout.dtype))


def native_body(planner, graph):
    """The NativeBody of `graph` when every node of it lowers, else None."""
    body = type(planner)(graph)  # the body's own plan
    if body.in_place or any(type(step).__name__ != "SegmentStep" for step in body.steps) \
            or None in [body.layouts.get(key) for key in body.returned]:
        return None
    where = {}
    for buf in body.buffers:
        if isinstance(buf, buffers.ConstantBuffer):
            where[buf.index] = planner.constant(buf.array)
        elif not isinstance(buf, (buffers.InputBuffer, buffers.StatusBuffer)):
            where[buf.index] = planner.scratch(buf.shape, buf.dtype).buffer
    for kernel in body.kernels:  # kernel names are module-wide: make them unique
        kernel.name = f"loop{next(_NAMES)}_{kernel.name}"
    return NativeBody(body, where)


ALIGN_COPY_BYTES = 1 << 16  # at most this much is copied to align a loop's constant


def pack_arguments(planner, args, positions, every_trip=()):
    """{argument j: scratch Layout} for the read arguments that are not contiguous (a
    transposed view...): they are copied once, before the loop; and for the contiguous
    ones of `every_trip` (a loop's constants, read at every trip) up to
    ALIGN_COPY_BYTES: copied when their data is not aligned (see enter_arguments). None
    when one has no Layout (numpy makes it in a form native code cannot read)."""
    wanted = set(positions.values()) if isinstance(positions, dict) else set(positions)
    if any(args[j] is None for j in wanted):
        return None
    return {j: planner.scratch(args[j].shape, args[j].dtype) for j in wanted
            if not _is_contiguous(args[j]) or (j in every_trip and _nbytes(args[j])
                                                <= ALIGN_COPY_BYTES)}


def enter_arguments(entry, layouts, packed):
    """Pointers to the arguments (Layouts, None for unread ones) as the loop reads them:
    a strided one's contiguous copy, a contiguous packed one's aligned copy when its
    data is not aligned (the caller's array: malloc aligns to 16 bytes, and a vector
    load across two cache lines costs two), the argument itself otherwise."""
    b = entry.b
    pointers = [entry.pointer(a) if a is not None else None for a in layouts]
    for j, layout in packed.items():
        copy = entry.pointer(layout)
        if not _is_contiguous(layouts[j]):
            _copy(b, pointers[j], copy, layouts[j])
            pointers[j] = copy
            continue
        offset = b.and_(b.ptrtoint(pointers[j], I64), ir.Constant(I64, buffers.ALIGN - 1))
        misaligned = b.icmp_unsigned("!=", offset, ir.Constant(I64, 0))
        with b.if_then(misaligned):
            _copy(b, pointers[j], copy, layouts[j])
        pointers[j] = b.select(misaligned, copy, pointers[j])
    return pointers


def _nbytes(layout):
    return int(np.prod(layout.shape, dtype=np.int64)) * np.dtype(layout.dtype).itemsize


def _is_contiguous(layout):
    return tuple(layout.strides) == contiguous_strides(layout.shape)


class LoopCall(NativeCall):
    """The loop of a Scan: `args` (consts, init carries, xs) and `outs` (final carries,
    stacked ys, stacked history) are the node's Layouts; `carries` two scratch buffers
    per carry, used in turn (aligned, unlike a result's memory: the final carry is
    copied out); `where` maps the body's constants and intermediates to outer buffers."""

    def __init__(self, plan, body, args, outs, carries, packed):
        reads = {a.buffer for a in args if a is not None}
        writes = {o.buffer for o in outs} | {c.buffer for pair in carries for c in pair} | \
            set(body.where.values()) | {p.buffer for p in packed.values()}
        super().__init__(reads, writes, ())
        self.plan, self.body, self.args, self.outs = plan, body, args, outs
        self.carries, self.packed = carries, packed
        self.kernels = tuple(body.plan.kernels)
        self.may_fail = body.may_fail

    def emit(self, entry):
        body_fn = self.body.emit_function(entry)
        b, plan = entry.b, self.plan
        nc, nk, ny = plan.n_consts, plan.n_carry, plan.n_ys
        args = enter_arguments(entry, self.args, self.packed)
        outs = [entry.pointer(o) for o in self.outs]
        spare = [entry.pointer(pair[1]) for pair in self.carries]
        carry = [entry.pointer(pair[0]) for pair in self.carries]
        n = plan.length
        first = carry if n % 2 == 0 else spare  # the last step writes `carry`
        stacked = self._carries_in_ys()
        start = ir.Constant(I64, n - 1 if plan.reverse else 0)
        for k in range(nk):
            _copy(b, args[nc + k], self._slot(b, outs, stacked[k], start) if k in stacked
                  else first[k], self.outs[k])
        table = self.body.table(b, entry.data)
        direct = self.body.direct_outputs()
        in_place = {**direct, **{j: None for j in stacked.values()}}

        def step(j):
            i = b.sub(ir.Constant(I64, n - 1), j) if plan.reverse else j
            odd = b.trunc(b.and_(b.sub(ir.Constant(I64, n), j), ir.Constant(I64, 1)),
                          ir.IntType(1))  # (n - j) odd: read the spare buffers
            carry_in = [b.select(odd, s, o) for s, o in zip(spare, carry)]
            carry_out = [b.select(odd, o, s) for s, o in zip(spare, carry)]
            last = b.icmp_signed("==", j, ir.Constant(I64, n - 1))
            following = b.sub(i, ir.Constant(I64, 1)) if plan.reverse else \
                b.add(i, ir.Constant(I64, 1))
            for k, y in stacked.items():  # the carry lives in the stack of its ys
                carry_in[k] = self._slot(b, outs, y, i)
                carry_out[k] = b.select(last, carry[k], self._slot(b, outs, y, following))
            self._fill_inputs(b, table, args, carry_in, i)
            if plan.history:
                for k in range(nk):
                    _copy(b, carry_in[k], _slice(b, outs[nk + ny + k], self.outs[nk + ny + k], i),
                          self.outs[k])
            destinations = self._destinations(b, carry_out, outs[nk:nk + ny], i)
            for j, buf in direct.items():
                b.store(destinations[j], program._at(b, table, buf, PTR))
            self.body.call(entry, body_fn, table)
            self.body.store_outputs(b, table, destinations, in_place)
        # unroll=k: k steps' code per trip of the native loop, the rest one by one
        k = max(1, min(int(plan.unroll), n or 1))
        whole = n - n % k
        for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, whole), k, lambda j: [
            step(b.add(j, ir.Constant(I64, u))) for u in range(k)])
        for_loop(b, ir.Constant(I64, whole), ir.Constant(I64, n), 1, step)
        for k in range(nk):
            _copy(b, carry[k], outs[k], self.outs[k]._replace(offset=0))

    def _carries_in_ys(self):
        """{carry k: output j} for a y that is the carry the step starts from (h_t-1
        stacked for a reverse pass): that carry is read from and written into its ys'
        stack, slot i then the next one (the last step writes the carry buffer), so no
        step copies it. The body writes its new carry straight into the next slot."""
        nc, nk = self.plan.n_consts, self.plan.n_carry
        if self.plan.length == 0:
            return {}
        stacked = {}
        for j, position in self.body.returned_inputs().items():
            if j >= nk and nc <= position < nc + nk:
                stacked.setdefault(position - nc, j)
        return stacked

    def _slot(self, b, outs, j, i):
        return _slice(b, outs[j], self.outs[j], i)

    def _fill_inputs(self, b, table, args, carry_in, i):
        """Each body input buffer's pointer for step i."""
        plan = self.plan
        nc, nk = plan.n_consts, plan.n_carry
        for buf in self.body.buffers:
            if not isinstance(buf, buffers.InputBuffer):
                continue
            j = buf.position
            if j < nc:
                ptr = args[j]
            elif j < nc + nk:
                ptr = carry_in[j - nc]
            else:
                ptr = _slice(b, args[j], self.args[j], i)
            b.store(ptr, program._at(b, table, buf.index, PTR))

    def _destinations(self, b, carry_out, ys, i):
        nk = self.plan.n_carry
        return [carry_out[j] if j < nk else _slice(b, ys[j - nk], self.outs[j], i)
                for j in range(len(self.body.returned))]

def _slice(b, base, stacked, i):
    """Pointer to slice i (along dim 0) of the contiguous stacked value at base, whose
    Layout is `stacked` (the history's Layout is its carry's: one slice's shape)."""
    size = int(np.prod(stacked.shape[1:], dtype=np.int64))
    return b.gep(base, [b.mul(i, ir.Constant(I64, size))], source_etype=_elem(stacked.dtype))


def _copy(b, src, dst, layout):
    """dst (contiguous) = the elements of `layout` at src, in row-major order."""
    elem = _elem(layout.dtype)
    total = int(np.prod(layout.shape, dtype=np.int64))
    if tuple(layout.strides) == contiguous_strides(layout.shape):
        # one memmove: LLVM makes a short one a few vector moves. An element loop
        # stayed scalar (src and dst may alias), and the next step's vector loads of
        # what it stored could not be forwarded from its scalar stores.
        nbytes = ir.Constant(I64, total * np.dtype(layout.dtype).itemsize)
        b.call(memory_intrinsic(b.module, "memmove"),
               [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])
        return

    def move(e):
        offset = program.strided_offset(b, e, layout.shape, layout.strides)
        b.store(b.load(b.gep(src, [offset], source_etype=elem), typ=elem),
                b.gep(dst, [e], source_etype=elem))
    for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, total), 1, move)


def memory_intrinsic(module, name):
    """LLVM's memcpy or memmove intrinsic (dst, src, bytes, volatile) in `module`."""
    full = f"llvm.{name}.p0.p0.i64"
    existing = module.globals.get(full)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64,
                                                                ir.IntType(1)]), name=full)
