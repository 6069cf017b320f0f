"""Native while loops: a While node whose cond and body lower completely becomes an
LLVM loop that tests the cond, runs the body and swaps the carry buffers, until the
cond is false; no Python per trip.

Owns: the lowering rule `while_loop(planner, n)` and `WhileCall`. Does not: plan bodies
(loops.py's NativeBody) or decide the node's semantics (adkit.control's While).
"""
from llvmlite import ir

from . import program
from .kernels import PTR
from .loops import NativeBody, _copy, enter_arguments, native_body, pack_arguments
from .program import NativeCall

_BOOL = ir.IntType(8)


def while_loop(planner, n):
    """A While node (its class says `native_while`) whose cond and body are all native."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    if not getattr(data["op"], "native_while", False):
        return None
    plan = data["params"]["plan"]
    cond, body = native_body(planner, plan.cond), native_body(planner, plan.body)
    if cond is None or body is None:
        return None
    args = [planner.layout((u, out)) for _, u, out in graph.args_of(n)]
    nq, nb = plan.n_cond_consts, plan.n_body_consts
    read = {j for j in cond.inputs_read().values() if j < nq}  # the consts read
    read |= {nq + j for j in body.inputs_read().values() if j < nb}
    packed = pack_arguments(planner, args, read, read)  # consts: read at every trip
    if packed is None or any(a is None for a in args[nq + nb:]):
        return None
    outs = [planner.result(n, k) for k in range(plan.n_carry)]
    carries = [[planner.scratch(o.shape, o.dtype) for _ in range(2)] for o in outs]
    return [WhileCall(plan, cond, body, args, outs, carries, packed)]


class WhileCall(NativeCall):
    """The loop of a While node: `args` (cond consts, body consts, init) and `outs`
    (the final carries) are the node's Layouts; `carries` two scratch buffers per
    carry, used in turn (aligned, unlike a result's memory: the final one is copied
    out)."""

    def __init__(self, plan, cond, body, args, outs, carries, packed):
        reads = {a.buffer for a in args if a is not None}
        writes = ({o.buffer for o in outs} | {c.buffer for pair in carries for c in pair} |
                  set(cond.where.values()) | set(body.where.values()) |
                  {p.buffer for p in packed.values()})
        super().__init__(reads, writes, ())
        self.plan, self.cond, self.body = plan, cond, body
        self.args, self.outs, self.carries, self.packed = args, outs, carries, packed
        self.kernels = tuple(cond.plan.kernels) + tuple(body.plan.kernels)
        self.may_fail = cond.may_fail or body.may_fail

    def emit(self, entry):
        b, plan = entry.b, self.plan
        nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
        cond_fn = self.cond.emit_function(entry)
        body_fn = self.body.emit_function(entry)
        args = enter_arguments(entry, self.args, self.packed)
        outs = [entry.pointer(o) for o in self.outs]
        current, other = b.alloca(PTR, size=nk), b.alloca(PTR, size=nk)
        for k, (first, second) in enumerate(self.carries):  # the carry starts in `first`
            _copy(b, args[nq + nb + k], entry.pointer(first), self.outs[k])
            b.store(entry.pointer(first), program._at(b, current, k, PTR))
            b.store(entry.pointer(second), program._at(b, other, k, PTR))
        cond_table, body_table = self.cond.table(b, entry.data), self.body.table(b, entry.data)
        direct = self.body.direct_outputs()
        test, run, done = (b.append_basic_block(name) for name in ("while.test", "while.body",
                                                                   "while.end"))
        b.branch(test)
        b.position_at_end(test)
        carry = [b.load(program._at(b, current, k, PTR), typ=PTR) for k in range(nk)]
        self._fill(b, self.cond, cond_table, args[:nq] + carry)
        self.cond.call(entry, cond_fn, cond_table)
        pred = b.load(self.cond.output_pointer(b, cond_table, 0), typ=_BOOL)
        b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(_BOOL, 0)), run, done)
        b.position_at_end(run)
        new = [b.load(program._at(b, other, k, PTR), typ=PTR) for k in range(nk)]
        self._fill(b, self.body, body_table, args[nq:nq + nb] + carry)
        for j, buf in direct.items():
            b.store(new[j], program._at(b, body_table, buf, PTR))
        self.body.call(entry, body_fn, body_table)
        self.body.store_outputs(b, body_table, new, direct)
        for k in range(nk):  # swap: the new carry is current
            b.store(new[k], program._at(b, current, k, PTR))
            b.store(carry[k], program._at(b, other, k, PTR))
        b.branch(test)
        b.position_at_end(done)
        for k in range(nk):
            final = b.load(program._at(b, current, k, PTR), typ=PTR)
            _copy(b, final, outs[k], self.outs[k])

    @staticmethod
    def _fill(b, body: NativeBody, table, pointers):
        """The body's input buffers point at `pointers` (one per body input)."""
        for buf, position in body.inputs_read().items():
            b.store(pointers[position], program._at(b, table, buf, PTR))
