"""Reverse mode through a scan with `checkpoint=s`: the binomial (Revolve) schedule.

Owns: `snapshots(checkpoint, n)` (the number of carries a policy may store),
`ScanCheckpointGrad` (the op that walks an optimal schedule: it advances the body,
stores at most s carries, and at each turn runs the body's vjp for that step) and the
counters a run leaves (`LAST_RUN`: forward steps, carries stored), read by tests and
benchmarks. Does not: make schedules (revolve.py), build the body's vjp (scan.py
passes it in) or differentiate the reverse pass (second order: second_order.py).

The whole schedule runs in the backward pass, from the initial carry: the forward pass
stores nothing but the scan's own inputs. The forward steps counted are then exactly
Revolve's closed form (its first sweep included), and at most s carries are ever held
in slots (the initial carry among them), plus the one in hand.
"""
import dataclasses

import numpy as np

from ..ir.evaluate import array_runner
from ..ir.passes.cleanup import dce
from ..ops._families import ArrayFunction
from . import revolve
from ._common import stacked
from .body import fresh
from .derive import split

LAST_RUN = {"forward_steps": 0, "stored_carries": 0, "reversed_steps": 0}


def snapshots(checkpoint, n):
    """How many carries the policy `checkpoint` may store for n steps."""
    if checkpoint == "sqrt":
        return revolve.sqrt_snapshots(n)
    if isinstance(checkpoint, (int, np.integer)) and not isinstance(checkpoint, bool):
        if checkpoint < 1:
            raise ValueError(f"checkpoint must be None, 'sqrt' or an int >= 1 (the carries "
                             f"to store, the initial one included), got {checkpoint}")
        return int(checkpoint)
    raise ValueError(f"checkpoint must be None, 'sqrt' or an int >= 1, got {checkpoint!r}")


class ScanCheckpointGrad(ArrayFunction):
    """(consts, init, xs, float carries' cotangents, float ys' cotangents) -> gradients
    of (the float carries' init, the float consts, the float xs), by the Revolve schedule
    for `plan.checkpoint`; `back` is the body's recomputing vjp step (consts, ct, acc,
    carry, x, ct y) -> (ct, acc, grad x), floats only where cotangents are concerned."""
    public_name = "scan_checkpoint_grad"
    variants = ()
    native_revolve = True  # codegen walks the schedule natively when both steps lower

    @staticmethod
    def forward(plan, back, *arrays):
        nc, nk, nx = plan.n_consts, plan.n_carry, plan.n_xs
        fc, fk, fx, fy = plan.float_positions()
        consts, init, xs, ct, ct_ys = split(list(arrays), [nc, nk, nx, len(fk), len(fy)])
        order = list(plan.steps())  # chain step k reads xs at index order[k]
        body, back_body = array_runner(plan.body), array_runner(back.graph)

        def step(k, carry):
            return body(consts + carry + [x[order[k]] for x in xs])[:nk]
        acc = [np.zeros_like(consts[j]) for j in fc]
        g_xs = [np.zeros_like(xs[j]) for j in fx]

        def turn(k, carry, ct):
            nonlocal acc
            i = order[k]
            outs = back_body(consts + ct + acc + carry + [x[i] for x in xs] +
                             [y[i] for y in ct_ys])
            ct, acc, g_x = split(outs, [len(fk), len(fc), len(fx)])
            for g, gi in zip(g_xs, g_x):
                g[i] = gi
            return ct
        ct = walk_schedule(plan.length, snapshots(plan.checkpoint, plan.length), init, ct,
                           step, turn)
        return fresh(ct + acc + g_xs, arrays)

    @staticmethod
    def infer(plan, back, *arrays):
        fc, fk, fx, _ = plan.float_positions()
        specs = plan.input_specs()
        c_specs, k_specs, x_specs = split(specs, [plan.n_consts, plan.n_carry, plan.n_xs])
        return tuple([k_specs[k] for k in fk] + [c_specs[j] for j in fc] +
                     [stacked(x_specs[j], plan.length) for j in fx])

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.plan = inputs[0]
        ctx.save_for_backward(*inputs[2:])

    @staticmethod
    def without_outputs(params, unread):
        """dce's hook: the gradients of consts that nothing reads are not accumulated
        (the consts join `plan.no_grad`, their accumulators leave the reverse step)."""
        plan, back = params["plan"], params["back"]
        fc, fk, fx, _ = plan.float_positions()
        gone = [p for p in range(len(fc)) if len(fk) + p in unread]
        if not gone:
            return None
        plan = dataclasses.replace(plan, no_grad=tuple(sorted(
            set(plan.no_grad) | {fc[p] for p in gone})), cache={})
        graph = _without_accumulators(back.graph, plan.n_consts + len(fk), len(fk), gone)
        kept = [i for i in range(len(fk) + len(fc) + len(fx))
                if not (0 <= i - len(fk) < len(fc) and i - len(fk) in gone)]
        return dict(params, plan=plan, back=back.with_bodies({"graph": graph})), kept

    @staticmethod
    def hoisting(params):
        """How hoist_invariants sees the node: two bodies (the forward step and the
        recomputing vjp step) whose consts are the node's first arguments."""
        return _HoistedBodies(params["plan"], params["back"])

    # Its own derivatives (second order) are second_order.py's, which builds them on
    # scan.py's reverse pass; scan.py imports this module, so second_order.py hands them
    # in as it is imported (adkit.control imports it).
    second_order_vjp = second_order_jvp = None

    @staticmethod
    def backward(ctx, *grads):
        """Grad of grad: by the reverse pass that stores every step's residuals; the
        checkpoint bounds the first reverse pass only (second_order.py says why)."""
        grads = ScanCheckpointGrad.second_order_vjp(ctx.plan, ctx.saved_tensors,
                                                    ctx.needs_input_grad[2:], grads)
        return (None, None) + tuple(grads)

    @staticmethod
    def jvp(ctx, _plan, _back, *tangents):
        """Forward over reverse (hessian, jvp of grad): as `backward`."""
        return ScanCheckpointGrad.second_order_jvp(ctx.plan, ctx.saved_tensors, tangents)


def _without_accumulators(graph, first_in, first_out, gone):
    """The reverse step without accumulators `gone` (their places among the
    accumulators, which are inputs from `first_in` on and outputs from `first_out` on)."""
    g = graph.copy()
    g.nx.remove_nodes_from([o for o in g.outputs
                            if g.nx.nodes[o]["index"] - first_out in gone])
    g = dce(g)
    g.nx.remove_nodes_from([m for m in g.inputs if g.nx.nodes[m]["index"] - first_in in gone])
    for kind, first in (("input", first_in), ("output", first_out)):
        for m in g.nodes(kind):
            index = g.nx.nodes[m]["index"]
            g.nx.nodes[m]["index"] = index - sum(first + p < index for p in gone)
    return g


@dataclasses.dataclass(frozen=True)
class _HoistedBodies:
    """A ScanCheckpointGrad's params as hoisting edits them (hoist.py's plan protocol):
    one slot of consts read by both bodies. Values hoisted out of either enter both as
    consts after the others; the forward plan counts them (`no_grad`: no gradients)."""
    plan: object
    back: object
    first_argument = 2  # the node's tensors come after (plan, back)

    def const_slots(self):
        count = self.plan.n_consts
        return {"body": (0, 0, count), "back": (0, 0, count)}

    def bodies(self):
        return {"body": self.plan.body, "back": self.back.graph}

    def with_more_consts(self, name, k, body):
        """Body `name` with k more consts: the count is the forward plan's, so hoisting
        gives both bodies their new consts, the forward first."""
        if name == "back":
            return dataclasses.replace(self, back=self.back.with_bodies({"graph": body}))
        count = self.plan.n_consts
        plan = dataclasses.replace(self.plan, body=body, n_consts=count + k, cache={},
                                   no_grad=self.plan.no_grad + tuple(range(count, count + k)))
        return dataclasses.replace(self, plan=plan)

    def params(self):
        return {"plan": self.plan, "back": self.back}


def walk_schedule(n, s, init, ct, step, turn):
    """Reverse a chain of n steps from `init` with s slots on the Revolve schedule:
    `step(k, carry)` is chain step k forward, `turn(k, carry, ct)` its reverse (the
    cotangent before it). Returns the cotangent of `init`; counts go to LAST_RUN."""
    pos, carry, slots, steps, turned = 0, list(init), {}, 0, 0
    for kind, arg in zip(*revolve.as_arrays(revolve.schedule(n, s))):
        arg = int(arg)
        if kind == revolve.Kind.ADVANCE:
            for _ in range(arg):
                carry, pos, steps = step(pos, carry), pos + 1, steps + 1
        elif kind == revolve.Kind.TAKESHOT:
            slots[arg] = (pos, carry)
        elif kind == revolve.Kind.RESTORE:
            pos, carry = slots[arg]
        else:  # a turn: reverse step `arg` from the carry in hand
            ct, turned = turn(arg, carry, ct), turned + 1
    LAST_RUN.update(forward_steps=steps, stored_carries=len(slots), reversed_steps=turned)
    return ct
