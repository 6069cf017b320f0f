"""Native gathers and scatters: a node whose op class says `native_index` (an Access:
see adkit/ops/_indexed.py) becomes one loop over the Access's points that reads its
index tensors, checks each index against its dim's size and moves one element.

Owns: the lowering rule `indexed(planner, n)`, `IndexedCall` and `IndexCheck` with the
error a failed bounds check raises (`IndexOutOfRange`). Does not: decide what an op
reads or writes (its class's rule does) or place values (plan.py).

Bounds: an index i of a dim of size n is used when 0 <= i < n, after adding n to a
negative one for ops that wrap (x[i], index_put); otherwise the call stores (i, dim, n)
in the entry's status buffer and returns its check's code from the entry function
(program.Entry.fail) before touching memory at i, so native code never reads or writes
outside a buffer, and the segment's Python side raises IndexOutOfRange naming the op and
the node. Index tensors are int32 or int64, read where they lie (an input's, a
constant's or a published numpy result's buffer, any strides); data and values are
float32 or float64 (values are cast to the result's dtype, as numpy assigns).
"""
import numpy as np
from llvmlite import ir

from ..ir import printing, rules
from ..ops._indexed import Indexed
from . import buffers
from .kernels import I32, I64, for_loop
from .loops import _copy, memory_intrinsic
from .program import NativeCall, _elem

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class IndexOutOfRange(IndexError, RuntimeError):
    """An index out of range in native code. An IndexError, as PyTorch raises for
    x[i]; also a RuntimeError, which PyTorch's gather, scatter and index_add raise."""


class IndexCheck:
    """The bounds check of one native gather or scatter: the op's name, the node's line
    and the user's source line it was traced at."""

    def __init__(self, name, line, source):
        self.name, self.line, self.source = name, line, source

    def error(self, status):
        bad, dim, size = (int(v) for v in status)
        error = IndexOutOfRange(f"{self.name}: index {bad} is out of bounds for "
                                f"dimension {dim} with size {size}")
        error.add_note(f"While executing node {self.line} (native code, traced at "
                       f"{self.source or 'an unknown line'})")
        return error


def indexed(planner, n):
    """An IndexedCall for a node whose op's `native_index` describes it, when native code
    can read its tensors (float data and values of its dtype family, int32/int64
    indices) and no size is 0; else None."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    hook = getattr(data["op"], "native_index", None)
    if hook is None or len(data["specs"]) != 1:
        return None
    spec = data["specs"][0]
    args = {pos: (u, out) for pos, u, out in graph.args_of(n)}
    specs = {pos: graph.specs_of(u)[out] for pos, (u, out) in args.items()}
    try:
        access = hook(data["params"], {p: rules.stand_in(s) for p, s in specs.items()})
    except Exception:  # noqa: BLE001  (arguments its forward rejects: numpy says why)
        return None
    if access is None or spec.dtype.np not in FLOATS or 0 in spec.shape or \
            0 in access.shape or specs[access.data].dtype != spec.dtype:
        return None
    want = tuple(access.shape) if access.mode == "gather" else specs[access.data].shape
    if tuple(spec.shape) != tuple(want):
        return None
    source = planner.layout(args[access.data])
    indices = {m.pos: planner.index_layout(args[m.pos]) for m in access.dims
               if isinstance(m, Indexed)}
    values = None
    if access.values is not None:
        values = planner.layout(args[access.values[0]])
        if values is None or values.dtype not in FLOATS:
            return None
    if source is None or None in indices.values():
        return None
    out = planner.result(n, 0)
    target = out if access.mode != "gather" else source
    if access.region is not None:
        target = view_layout(target, access.region)
        if target is None:
            return None
    if len(target.shape) != len(access.dims):
        return None
    check = IndexCheck(access.name, printing.node_line(graph, n), data.get("source"))
    return [IndexedCall(access, source, target, indices, values, out, check)]


def view_layout(layout, view):
    """The Layout of `view` (a function of a numpy array returning a view of it) applied
    to the value `layout` describes; None when numpy copies or the view is empty."""
    dtype = np.dtype(layout.dtype)
    extent = layout.offset + 1 + sum((k - 1) * abs(s) for k, s in zip(layout.shape,
                                                                      layout.strides))
    if any(s < 0 for s in layout.strides):
        return None
    memory = np.empty(extent, dtype)
    probe = np.ndarray(layout.shape, dtype, buffer=memory, offset=layout.offset *
                       dtype.itemsize, strides=tuple(s * dtype.itemsize
                                                     for s in layout.strides))
    r = view(probe)
    start = memory.__array_interface__["data"][0]
    if not isinstance(r, np.ndarray) or r.size == 0 or not np.shares_memory(r, memory):
        return None
    offset, rest = divmod(r.__array_interface__["data"][0] - start, dtype.itemsize)
    if rest or any(s % dtype.itemsize for s in r.strides):
        return None
    return buffers.Layout(layout.buffer, offset, r.shape,
                          tuple(s // dtype.itemsize for s in r.strides), dtype)


class IndexedCall(NativeCall):
    """The loop of an Access: for each point p of access.shape, the address in `target`
    (the data's Layout for a gather, else the result's or its region's) from p and the
    index tensors (`indices`: {argument position: Layout}), then a load into the result
    (gather) or a store of the value at p (put, add) after copying `source` there."""

    may_fail = True

    def __init__(self, access, source, target, indices, values, out, check):
        reads = {source.buffer} | {x.buffer for x in indices.values()}
        if values is not None:
            reads.add(values.buffer)
        super().__init__(reads, {out.buffer}, ())
        self.access, self.source, self.target, self.out = access, source, target, out
        self.indices, self.values, self.check = indices, values, check
        self.elem = _elem(out.dtype)

    def emit(self, entry):
        b, access = entry.b, self.access
        out = entry.pointer(self.out)
        if access.mode != "gather":
            _copy(b, entry.pointer(self.source), out, self.source)
        target = entry.pointer(self.target)
        values = entry.pointer(self.values) if self.values is not None else None
        flat = buffers.contiguous_strides(access.shape)

        run = self._run()
        if run:  # rows copied whole: a memcpy each (the loop's loads could alias stores)
            shape, terms = access.shape[:-1], self._terms(entry)[:-1]
            memcpy = memory_intrinsic(entry.module, "memcpy")
            nbytes = ir.Constant(I64, run * np.dtype(self.out.dtype).itemsize)

            def point(p, offset):
                dst = b.gep(out, [_dot(b, p, flat[:-1])], source_etype=self.elem)
                src = b.gep(target, [offset], source_etype=self.elem)
                b.call(memcpy, [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])
            _loop_nest(b, shape, terms, point)
            return

        def point(p, offset):
            address = b.gep(target, [offset], source_etype=self.elem)
            if access.mode == "gather":
                b.store(b.load(address, typ=self.elem), b.gep(
                    out, [_dot(b, p, flat)], source_etype=self.elem))
                return
            value = self._value(b, p, values)
            if access.mode == "add":
                value = b.fadd(b.load(address, typ=self.elem), value)
            b.store(value, address)
        _loop_nest(b, access.shape, self._terms(entry), point)

    def _run(self):
        """The length of the rows a gather copies whole (its last dim is the target's
        last, contiguous in both), else 0."""
        access, dims = self.access, self.access.dims
        last = len(access.shape) - 1
        if access.mode != "gather" or last < 0 or dims[-1] != last or \
                self.target.strides[-1] != 1:
            return 0
        for m in dims[:-1]:  # nothing else may move along the last dim
            if m == last or isinstance(m, Indexed) and any(
                    j == last and n != 1 for j, n in zip(m.at, self.indices[m.pos].shape)):
                return 0
        return access.shape[-1]

    def _terms(self, entry):
        """The target offset as terms [(depth, term(p))], one per dim of the target: a
        term is emitted in the loop over p's dim depth - 1, the innermost it depends on
        (an index is read and checked once per element of the index tensor, not once
        per point: native code cannot prove that the stores leave indices alone)."""
        terms = []
        for d, m in enumerate(self.access.dims):
            stride, size = self.target.strides[d], self.target.shape[d]
            if isinstance(m, int):
                terms.append((m + 1, lambda p, m=m, s=stride: _times(entry.b, p[m], s)))
                continue
            layout = self.indices[m.pos]
            read = [j for k, j in enumerate(m.at) if j is not None and layout.shape[k] != 1]
            pointer = entry.pointer(layout)
            terms.append((max(read, default=-1) + 1, lambda p, m=m, d=d, n=size, s=stride,
                          ptr=pointer: _times(entry.b, self._index(entry, p, m, d, n, ptr),
                                              s)))
        return terms

    def _index(self, entry, p, m, d, size, pointer):
        """The index for dim d at point p, in range: else the check fails."""
        b, layout = entry.b, self.indices[m.pos]
        typ = I64 if layout.dtype == np.int64 else I32
        raw = b.load(b.gep(pointer, [_operand_offset(b, p, m.at, layout)], source_etype=typ),
                     typ=typ)
        if typ is I32:
            raw = b.sext(raw, I64)
        n = ir.Constant(I64, size)
        index = raw
        if self.access.wraps:
            index = b.select(b.icmp_signed("<", raw, ir.Constant(I64, 0)), b.add(raw, n),
                             raw)
        with b.if_then(b.icmp_unsigned(">=", index, n), likely=False):
            entry.fail(self.check, [raw, ir.Constant(I64, d), n])
        return index

    def _value(self, b, p, values):
        """The value written at point p, in the result's dtype, times the scale."""
        access = self.access
        if values is None:
            value = ir.Constant(self.elem, float(access.value))
        else:
            typ = _elem(self.values.dtype)
            value = b.load(b.gep(values, [_operand_offset(b, p, access.values[1],
                                                          self.values)],
                                 source_etype=typ), typ=typ)
            if typ != self.elem:
                value = (b.fptrunc if self.values.dtype.itemsize > self.out.dtype.itemsize
                         else b.fpext)(value, self.elem)
        if access.scale != 1:
            value = b.fmul(value, ir.Constant(self.elem, float(access.scale)))
        return value


def _operand_offset(b, p, at, layout):
    """The element offset of a tensor read at point p: each of its dims runs along the
    point's dim `at[k]` (a size-1 dim, or one running along none, stays at 0)."""
    offset = ir.Constant(I64, 0)  # (from the pointer to its first element)
    for k, j in enumerate(at):
        if j is not None and layout.shape[k] != 1 and layout.strides[k]:
            offset = b.add(offset, b.mul(p[j], ir.Constant(I64, layout.strides[k])))
    return offset


def _times(b, value, stride):
    return b.mul(value, ir.Constant(I64, stride)) if stride else ir.Constant(I64, 0)


def _dot(b, p, strides):
    offset = ir.Constant(I64, 0)
    for coord, stride in zip(p, strides):
        if stride:
            offset = b.add(offset, b.mul(coord, ir.Constant(I64, stride)))
    return offset


def _loop_nest(b, shape, terms, body):
    """body(p, offset) for every point p of `shape` (a list of i64 values), row-major;
    offset is the sum of the terms [(depth, term(p))], each added in the loop at its
    depth (0: before the loops)."""
    def level(d, p, offset):
        for depth, term in terms:
            if depth == d:
                offset = b.add(offset, term(p))
        if d == len(shape):
            body(p, offset)
            return
        for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, shape[d]), 1,
                 lambda i: level(d + 1, p + [i], offset))
    level(0, [], ir.Constant(I64, 0))
