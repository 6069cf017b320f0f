"""The checkpointed reverse pass of a scan, natively: one loop over the Revolve schedule.

Owns: the lowering rule `revolve_loop(planner, n)` and `RevolveCall`. The schedule
(adkit.control.revolve) is two int64 constant arrays, action kinds and arguments; the
loop walks them: ADVANCE runs the body's forward function k times, TAKESHOT and RESTORE
copy the carry to or from a snapshot slot, a turn runs the body's recomputing vjp step
for one step. The carry, the cotangent and the consts' gradients each live in two
buffers used in turn. Does not: make schedules or decide semantics (adkit.control's
ScanCheckpointGrad).
"""
import numpy as np
from llvmlite import ir

from ..control import revolve
from ..control.checkpoint import snapshots
from . import buffers, program
from .kernels import I64, PTR, for_loop
from .loops import _copy, _slice, enter_arguments, native_body, pack_arguments
from .program import NativeCall


def revolve_loop(planner, n):
    """A ScanCheckpointGrad node (its class says `native_revolve`) whose forward and
    reverse steps are all native: a RevolveCall."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    if not getattr(data["op"], "native_revolve", False):
        return None
    plan, back = data["params"]["plan"], data["params"]["back"]
    forward, reverse = native_body(planner, plan.body), native_body(planner, back.graph)
    if forward is None or reverse is None:
        return None
    args = [planner.layout((u, out)) for _, u, out in graph.args_of(n)]
    packed = pack_arguments(planner, args, _arguments_read(plan, forward, reverse),
                            range(plan.n_consts))
    if packed is None:
        return None
    actions = revolve.schedule(plan.length, snapshots(plan.checkpoint, plan.length))
    kinds, values = revolve.as_arrays(actions)
    outs = [planner.result(n, i) for i in range(len(data["specs"]))]
    return [RevolveCall(planner, plan, forward, reverse, args, outs, packed,
                        planner.constant(kinds), planner.constant(values), len(actions))]


def _arguments_read(plan, forward, reverse):
    """The node's argument positions native code reads: the initial carries and the
    cotangents (copied in), and the consts, xs and ys' cotangents a step reads."""
    nc, nk, nx = plan.n_consts, plan.n_carry, plan.n_xs
    fc, fk, fx, fy = plan.float_positions()
    read = set(range(nc, nc + nk)) | set(range(nc + nk + nx, nc + nk + nx + len(fk)))
    read |= {p for p in forward.inputs_read().values() if p < nc or p >= nc + nk}
    x_at, y_at = nc + len(fk) + len(fc) + nk, nc + len(fk) + len(fc) + nk + nx
    for q in reverse.inputs_read().values():
        if q < nc:
            read.add(q)
        elif x_at <= q < y_at:
            read.add(nc + nk + q - x_at)
        elif q >= y_at:
            read.add(nc + nk + nx + len(fk) + q - y_at)
    return read


def _spec_layouts(specs):
    return [buffers.contiguous(None, s.shape, s.dtype.np) for s in specs]


class RevolveCall(NativeCall):
    """The schedule's loop. Scratch buffers: two for each carry, cotangent and
    gradient, one per body y (the forward's ys are not needed) and the snapshot slots."""

    def __init__(self, planner, plan, forward, reverse, args, outs, packed, kinds, values,
                 n_actions):
        fc, fk, fx, fy = plan.float_positions()
        self.plan, self.forward, self.reverse = plan, forward, reverse
        self.args, self.outs, self.packed = args, outs, packed
        self.kinds, self.values, self.n_actions = kinds, values, n_actions
        self.slots = snapshots(plan.checkpoint, plan.length)
        specs = plan.input_specs()
        self.carry_layouts = _spec_layouts(specs[plan.n_consts:plan.n_consts + plan.n_carry])
        body_out = plan.body.output_specs()

        def scratch(layout, count=2):
            return [planner.scratch(layout.shape, layout.dtype) for _ in range(count)]
        self.carry_bufs = [scratch(c) for c in self.carry_layouts]
        self.slot_bufs = [planner.scratch((self.slots,) + c.shape, c.dtype)
                          for c in self.carry_layouts]
        self.y_bufs = [planner.scratch(s.shape, s.dtype.np) for s in body_out[plan.n_carry:]]
        self.ct_bufs = [scratch(o) for o in outs[:len(fk)]]
        self.acc_bufs = [scratch(o) for o in outs[len(fk):len(fk) + len(fc)]]
        own = [x for pair in self.carry_bufs + self.ct_bufs + self.acc_bufs for x in pair]
        writes = ({o.buffer for o in outs} | {x.buffer for x in own + self.slot_bufs +
                                              self.y_bufs} |
                  set(forward.where.values()) | set(reverse.where.values()) |
                  {p.buffer for p in packed.values()})
        super().__init__({a.buffer for a in args if a is not None}, writes,
                         {kinds, values})
        self.kernels = tuple(forward.plan.kernels) + tuple(reverse.plan.kernels)
        self.may_fail = forward.may_fail or reverse.may_fail

    def emit(self, entry):
        b, plan = entry.b, self.plan
        fc, fk, fx, fy = plan.float_positions()
        self.fns = (self.forward.emit_function(entry), self.reverse.emit_function(entry))
        args = enter_arguments(entry, self.args, self.packed)
        nc, nk, nx = plan.n_consts, plan.n_carry, plan.n_xs
        self.consts, self.xs = args[:nc], args[nc + nk:nc + nk + nx]
        self.ct_ys = args[nc + nk + nx + len(fk):]
        self.carry = self._pairs(entry, self.carry_bufs)
        self.ct, self.acc = self._pairs(entry, self.ct_bufs), self._pairs(entry, self.acc_bufs)
        for k, layout in enumerate(self.carry_layouts):
            _copy(b, args[nc + k], self._get(b, self.carry, k), layout)
        for k in range(len(fk)):
            _copy(b, args[nc + nk + nx + k], self._get(b, self.ct, k),
                  self.outs[k]._replace(offset=0))
        for k, o in enumerate(self.outs[len(fk):len(fk) + len(fc)]):
            program._fill(b, self._get(b, self.acc, k), program._elem(o.dtype),
                          int(np.prod(o.shape)), 0.0)
        self.y_ptrs = [entry.pointer(y) for y in self.y_bufs]  # the forward's ys: unread
        self.pos = b.alloca(I64)
        b.store(ir.Constant(I64, 0), self.pos)
        self.slot_pos = b.alloca(I64, size=max(self.slots, 1))
        self.tables = (self.forward.table(b, entry.data), self.reverse.table(b, entry.data))
        kinds, values = entry.data[self.kinds], entry.data[self.values]
        for_loop(b, ir.Constant(I64, 0), ir.Constant(I64, self.n_actions), 1,
                 lambda a: self._action(entry, b, _at_index(b, kinds, a),
                                        _at_index(b, values, a)))
        for k in range(len(fk)):
            _copy(b, self._get(b, self.ct, k), entry.pointer(self.outs[k]),
                  self.outs[k]._replace(offset=0))
        for k in range(len(fc)):
            o = self.outs[len(fk) + k]
            _copy(b, self._get(b, self.acc, k), entry.pointer(o), o._replace(offset=0))

    def _pairs(self, entry, pairs):
        """Two pointer variables per value (current, next), set to its two buffers."""
        cur, nxt = entry.b.alloca(PTR, size=max(len(pairs), 1)), \
            entry.b.alloca(PTR, size=max(len(pairs), 1))
        for k, (first, second) in enumerate(pairs):
            entry.b.store(entry.pointer(first), program._at(entry.b, cur, k, PTR))
            entry.b.store(entry.pointer(second), program._at(entry.b, nxt, k, PTR))
        return cur, nxt, len(pairs)

    @staticmethod
    def _get(b, pair, k, which=0):
        return b.load(program._at(b, pair[which], k, PTR), typ=PTR)

    @staticmethod
    def _swap(b, pair):
        cur, nxt, count = pair
        for k in range(count):
            a, c = (b.load(program._at(b, p, k, PTR), typ=PTR) for p in (cur, nxt))
            b.store(c, program._at(b, cur, k, PTR))
            b.store(a, program._at(b, nxt, k, PTR))

    def _action(self, entry, b, kind_ptr, value_ptr):
        kind, value = b.load(kind_ptr, typ=I64), b.load(value_ptr, typ=I64)
        is_kind = lambda k: b.icmp_signed("==", kind, ir.Constant(I64, int(k)))  # noqa: E731
        with b.if_then(is_kind(revolve.Kind.ADVANCE)):
            for_loop(b, ir.Constant(I64, 0), value, 1, lambda _: self._advance(entry))
        with b.if_then(is_kind(revolve.Kind.TAKESHOT)):
            for k, layout in enumerate(self.carry_layouts):
                slot = _slice(b, entry.pointer(self.slot_bufs[k]), self.slot_bufs[k], value)
                _copy(b, self._get(b, self.carry, k), slot, layout)
            b.store(b.load(self.pos, typ=I64), _at_index(b, self.slot_pos, value))
        with b.if_then(is_kind(revolve.Kind.RESTORE)):
            for k, layout in enumerate(self.carry_layouts):
                slot = _slice(b, entry.pointer(self.slot_bufs[k]), self.slot_bufs[k], value)
                _copy(b, slot, self._get(b, self.carry, k), layout)
            b.store(b.load(_at_index(b, self.slot_pos, value), typ=I64), self.pos)
        with b.if_then(b.icmp_signed(">=", kind, ir.Constant(I64, int(revolve.Kind.FIRSTURN)))):
            self._turn(entry, b, value)

    def _index(self, b, k):
        """The xs index chain step k reads."""
        n = self.plan.length
        return b.sub(ir.Constant(I64, n - 1), k) if self.plan.reverse else k

    def _advance(self, entry):
        b, plan, table = entry.b, self.plan, self.tables[0]
        i = self._index(b, b.load(self.pos, typ=I64))
        nk = plan.n_carry
        inputs = self.consts + [self._get(b, self.carry, k) for k in range(nk)] + \
            _slices(b, self.xs, self.args[plan.n_consts + nk:plan.n_consts + nk + plan.n_xs], i)
        dests = [self._get(b, self.carry, k, 1) for k in range(nk)] + self.y_ptrs
        self._call(entry, self.forward, table, self.fns[0], inputs, dests)
        self._swap(b, self.carry)
        b.store(b.add(b.load(self.pos, typ=I64), ir.Constant(I64, 1)), self.pos)

    def _turn(self, entry, b, step):
        plan, table = self.plan, self.tables[1]
        fc, fk, fx, fy = plan.float_positions()
        i = self._index(b, step)
        nc, nk, nx = plan.n_consts, plan.n_carry, plan.n_xs
        x_layouts = self.args[nc + nk:nc + nk + nx]
        cty_layouts = self.args[nc + nk + nx + len(fk):]
        inputs = (self.consts + [self._get(b, self.ct, k) for k in range(len(fk))] +
                  [self._get(b, self.acc, k) for k in range(len(fc))] +
                  [self._get(b, self.carry, k) for k in range(nk)] +
                  _slices(b, self.xs, x_layouts, i) + _slices(b, self.ct_ys, cty_layouts, i))
        g_outs = self.outs[len(fk) + len(fc):]
        dests = ([self._get(b, self.ct, k, 1) for k in range(len(fk))] +
                 [self._get(b, self.acc, k, 1) for k in range(len(fc))] +
                 [_slice(b, entry.pointer(o), o, i) for o in g_outs])
        self._call(entry, self.reverse, table, self.fns[1], inputs, dests)
        self._swap(b, self.ct)
        self._swap(b, self.acc)

    @staticmethod
    def _call(entry, body, table, fn, inputs, dests):
        b = entry.b
        for buf, position in body.inputs_read().items():
            b.store(inputs[position], program._at(b, table, buf, PTR))
        direct = body.direct_outputs()
        for j, buf in direct.items():
            b.store(dests[j], program._at(b, table, buf, PTR))
        body.call(entry, fn, table)
        body.store_outputs(b, table, dests, direct)


def _slices(b, bases, layouts, i):
    """Slice i of each stacked argument (None for one native code does not read)."""
    return [None if layout is None else _slice(b, base, layout, i)
            for base, layout in zip(bases, layouts)]


def _at_index(b, base, index):
    """Pointer to the int64 at a run-time index of base."""
    return b.gep(base, [index], source_etype=I64)
