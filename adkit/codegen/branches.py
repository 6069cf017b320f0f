"""Native branches: a Switch node (`ak.cond`, `ak.switch`) whose branches all lower becomes
one native call that reads the index, clamps it into range and calls the chosen branch.

Owns: the lowering rule `switch_call(planner, n)` and `SwitchCall`. Each branch is planned
like a loop body (loops.py's NativeBody: a function `<name>(i8 **table)` over its own
plan), so the switch costs one load, a compare or two and an indirect jump, and a switch
inside a loop body keeps the loop native. Every branch writes the node's result buffers
(an output a branch makes whole in a buffer of its own is written there directly, the
others are copied), so the results are in place whichever branch ran. The index is read
from its buffer: a bool (cond's predicate, made by a native comparison or published by
numpy) or an int64 input or constant (plan.py gives those a buffer); an index numpy
computes from integers keeps the node on numpy. Does not: decide the node's semantics
(adkit.control's Switch, whose clamping this follows) or plan bodies (plan.py).
"""
import itertools

import numpy as np
from llvmlite import ir

from . import program
from .kernels import I64, PTR
from .loops import _copy, native_body, pack_arguments
from .program import NativeCall

_NAMES = itertools.count()
INDEX_DTYPES = (np.dtype(np.bool_), np.dtype(np.int64))


def switch_call(planner, n):
    """A Switch node (its class says `native_switch`) whose index native code can read
    and whose branches are all native: a SwitchCall."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    if not getattr(data["op"], "native_switch", False):
        return None
    (_, u, out), *rest = graph.args_of(n)
    index = planner.layout((u, out))
    if index is None or index.dtype not in INDEX_DTYPES:
        return None
    bodies = []
    for graph_k in data["params"]["plan"].branches:
        bodies.append(native_body(planner, graph_k))
        if bodies[-1] is None:
            return None
    args = [planner.layout((u, out)) for _, u, out in rest]  # (consts..., operands...)
    read = set().union(*(body.inputs_read().values() for body in bodies))
    packed = pack_arguments(planner, args, read)
    if packed is None:
        return None
    outs = [planner.result(n, i) for i in range(len(data["specs"]))]
    return [SwitchCall(index, bodies, args, outs, packed)]


class SwitchCall(NativeCall):
    """The branch of a Switch node: `index` is the index's Layout, `args` the Layouts of
    the node's other arguments (consts, operands: every branch's inputs), `outs` its
    results; `packed` the contiguous copies of strided arguments a branch reads."""

    def __init__(self, index, bodies, args, outs, packed):
        reads = {index.buffer} | {a.buffer for a in args if a is not None}
        writes = {o.buffer for o in outs} | {p.buffer for p in packed.values()}
        for body in bodies:
            writes |= set(body.where.values())
        super().__init__(reads, writes, ())
        self.index, self.bodies, self.args, self.outs = index, bodies, args, outs
        self.may_fail = any(body.may_fail for body in bodies)
        self.packed = packed
        self.kernels = tuple(k for body in bodies for k in body.plan.kernels)
        switch = next(_NAMES)
        for k, body in enumerate(bodies):
            body.name = f"switch{switch}_branch{k}"

    def emit(self, entry):
        b = entry.b
        fns = [body.emit_function(entry) for body in self.bodies]
        chosen = self._chosen(b, entry.pointer(self.index))
        blocks = [b.append_basic_block(f"switch.branch{k}") for k in range(len(fns))]
        done = b.append_basic_block("switch.end")
        dispatch = b.switch(chosen, blocks[0])  # the default: an index below 0
        for k, block in enumerate(blocks[1:], 1):
            dispatch.add_case(ir.Constant(I64, k), block)
        for body, fn, block in zip(self.bodies, fns, blocks, strict=True):
            b.position_at_end(block)
            self._run(entry, body, fn)
            b.branch(done)
        b.position_at_end(done)

    def _chosen(self, b, pointer):
        """The branch number, clamped like jax.lax.switch (and Switch.forward): a bool is
        0 or 1, an int64 above the last branch is the last; one below 0 is left to the
        dispatch, whose default is branch 0."""
        if self.index.dtype == np.bool_:
            byte = b.load(pointer, typ=ir.IntType(8))
            return b.zext(b.icmp_unsigned("!=", byte, ir.Constant(ir.IntType(8), 0)), I64)
        value = b.load(pointer, typ=I64)
        last = ir.Constant(I64, len(self.bodies) - 1)
        return b.select(b.icmp_signed(">", value, last), last, value)

    def _run(self, entry, body, fn):
        """One branch: its table filled (strided arguments it reads copied first, its
        whole outputs pointed at the results), its function called, the rest copied."""
        b = entry.b
        table = body.table(b, entry.data)
        for buf, j in body.inputs_read().items():
            pointer = entry.pointer(self.args[j])
            if j in self.packed:
                _copy(b, pointer, entry.pointer(self.packed[j]), self.args[j])
                pointer = entry.pointer(self.packed[j])
            b.store(pointer, program._at(b, table, buf, PTR))
        outs = [entry.pointer(o) for o in self.outs]
        direct = body.direct_outputs()
        for j, buf in direct.items():
            b.store(outs[j], program._at(b, table, buf, PTR))
        body.call(entry, fn, table)
        body.store_outputs(b, table, outs, direct)
