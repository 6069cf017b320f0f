"""`ak.while_loop` and `ak.fori_loop`, and the IR nodes `While` and `WhileGrad`.

Owns: `WhilePlan` (the cond and body Graphs), the `While` op (forward: the loop on numpy;
jvp: a while loop of the body's jvp; vmap: a loop that runs until every example is
done, each example keeping its carry once its predicate is false; backward: `WhileGrad`,
which records the trip count and the carries as it runs the loop again, then walks
back through the body's vjp) and the public `while_loop` and `fori_loop` (a scan when
its bounds are Python ints, as in JAX). Does not: trace bodies (body.py) or hold
WhileGrad's own backward (grad of grad: second_order.py).

A While node's arguments: (cond consts..., body consts..., init carries...). The cond
graph takes (cond consts..., carries...) and returns a bool 0-d tensor; the body graph
takes (body consts..., carries...) and returns the carries.
"""
import dataclasses

import numpy as np

from .._pytree import tree_unflatten
from ..dtypes import bool_, int64
from ..ir.evaluate import array_runner
from ..ir.graph import Graph
from ..ops import FUNCTIONS
from ..ops._families import ArrayFunction
from ..tensor import Tensor, _make, tensor
from ._common import (
    Plan,
    PlanOp,
    StepPlan,
    as_tensor_leaves,
    check_same_specs,
    is_float,
    materialize,
    spec,
    use_op_path,
)
from .body import fresh, trace_body
from .checkpoint import snapshots, walk_schedule
from .derive import call, graph_of, jvp_parts, split, vjp_parts, vmap_graph
from .scan import scan
from .second_order import while_grad_backward
from .sparsity_rules import while_sparsity


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class WhilePlan(Plan):
    cond: Graph = None
    body: Graph = None
    n_cond_consts: int = 0
    n_body_consts: int = 0
    checkpoint: object = None
    body_fields = ("cond", "body")

    @property
    def n_carry(self):
        return len(self.body.outputs)

    def carry_specs(self):
        return self.body.output_specs()

    def const_specs(self):
        cond_in = self.cond.input_specs()
        body_in = self.body.input_specs()
        return cond_in[:self.n_cond_consts], body_in[:self.n_body_consts]

    def const_slots(self):
        """{body: (first const input, first const argument, count)} (for hoisting)."""
        return {"cond": (0, 0, self.n_cond_consts),
                "body": (0, self.n_cond_consts, self.n_body_consts)}

    def with_more_consts(self, name, k, body):
        if name == "cond":
            return dataclasses.replace(self, cond=body, cache={},
                                       n_cond_consts=self.n_cond_consts + k)
        return dataclasses.replace(self, body=body, n_body_consts=self.n_body_consts + k,
                                   cache={})

    def trip_count(self, cond_consts, body_consts, carry):
        n = 0
        cond, body = array_runner(self.cond), array_runner(self.body)
        while bool(cond(cond_consts + carry)[0]):
            carry, n = body(body_consts + carry), n + 1
        return n

    def carries(self, cond_consts, body_consts, carry):
        """The carries entering each step, then the final carry (eagerly, on tensors)."""
        seen = []
        cond, body = array_runner(self.cond), array_runner(self.body)
        while bool(cond(cond_consts + carry)[0]):
            seen.append(carry)
            carry = body(body_consts + carry)
        return seen, carry


class While(PlanOp):
    """carry = body(carry) while cond(carry)."""
    public_name = "while_loop"
    native_while = True  # codegen makes it an LLVM loop when cond and body lower
    runs_its_plan = True  # its arguments are laid out as its plan says (hoisting)

    @staticmethod
    def forward(plan, *arrays):
        cc, bc, carry = split(list(arrays),
                              [plan.n_cond_consts, plan.n_body_consts, plan.n_carry])
        _, final = plan.carries(cc, bc, carry)
        return fresh(final, arrays)

    @staticmethod
    def infer(plan, *arrays):
        cond_specs, body_specs = plan.const_specs()
        plan.check_arguments(arrays, cond_specs + body_specs + plan.carry_specs(),
                             "while_loop")
        return tuple(plan.carry_specs())

    @classmethod
    def sparsity(cls, plan, *operands):
        """Sparsity rule: what the carries hold after any number of steps
        (sparsity_rules.py)."""
        return while_sparsity(plan, operands)

    @staticmethod
    def backward(ctx, *cts):
        plan, args = ctx.plan, ctx.saved_tensors
        cts = materialize(list(cts), plan.carry_specs())
        back = plan.derived("vjp", lambda: StepPlan(graph=_backward_body(plan)))
        grads = WhileGrad.apply(plan, back, *args, *cts)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return (None,) + tuple(g if is_float(spec(a)) else None for g, a in zip(grads, args))

    @staticmethod
    def jvp(ctx, _plan, *tangents):
        plan, args = ctx.plan, ctx.saved_tensors
        nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
        tangents = materialize(list(tangents), [spec(a) for a in args])
        cc, bc, init = split(list(args), [nq, nb, nk])
        _, t_bc, t_init = split(tangents, [nq, nb, nk])
        forward = plan.derived("jvp", lambda: _jvp_plan(plan))
        outs = While.apply(forward, *cc, *bc, *t_bc, *init, *t_init)
        return tuple(outs[nk:])

    @staticmethod
    def vmap(info, in_dims, plan, *args):
        return while_vmap(plan, in_dims[1:], args, info.batch_size)


class WhileGrad(ArrayFunction):
    """Gradients of every While argument: the loop runs again recording its trip count
    and the carries entering each step, then the body's vjp runs back over them."""
    public_name = "while_loop_grad"
    variants = ()

    @staticmethod
    def forward(plan, back, *arrays):
        nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
        cc, bc, init, ct = split(list(arrays), [nq, nb, nk, nk])
        g_bc = [np.zeros_like(c) for c in bc]
        back_body, body = array_runner(back.graph), array_runner(plan.body)

        def turn(_k, carry, ct):
            nonlocal g_bc
            outs = back_body(bc + carry + ct)
            g_bc = [a + g for a, g in zip(g_bc, outs[nk:])]
            return outs[:nk]
        if plan.checkpoint is None:  # keep every carry
            seen, _ = plan.carries(cc, bc, init)
            for k in range(len(seen) - 1, -1, -1):
                ct = turn(k, seen[k], ct)
        else:  # count the trips, then reverse them on the Revolve schedule
            n = plan.trip_count(cc, bc, init)
            ct = walk_schedule(n, snapshots(plan.checkpoint, max(n, 1)), init, ct,
                               lambda _k, carry: body(bc + carry), turn)
        g_cc = [np.zeros_like(c) for c in cc]
        return fresh(g_cc + g_bc + ct, arrays)

    @staticmethod
    def infer(plan, back, *arrays):
        cond_specs, body_specs = plan.const_specs()
        return tuple(cond_specs + body_specs + plan.carry_specs())

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.plan, ctx.back = inputs[0], inputs[1]
        ctx.save_for_backward(*inputs[2:])

    @staticmethod
    def backward(ctx, *grads):
        """Grad of grad: eagerly, through a scan as long as the loop ran (the trip count
        is fixed once the inputs are known); under tracing a clear error."""
        return (None, None) + tuple(while_grad_backward(
            ctx.plan, ctx.saved_tensors, ctx.needs_input_grad[2:], grads))

    @staticmethod
    def jvp(ctx, _plan, _back, *tangents):
        """Forward over reverse: the same two sweeps over (value, tangent) pairs, with the
        jvps of the body and of its vjp."""
        plan, args = ctx.plan, ctx.saved_tensors
        nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
        tangents = materialize(list(tangents), [spec(a) for a in args])
        cc, bc, init, ct = split(list(args), [nq, nb, nk, nk])
        _, t_bc, t_init, t_ct = split(tangents, [nq, nb, nk, nk])
        plan_j = plan.derived("jvp", lambda: _jvp_plan(plan))
        back_j = plan.derived("jvp of vjp", lambda: StepPlan(
            graph=_jvp_of_backward(plan, ctx.back.graph)))
        outs = WhileGrad.apply(plan_j, back_j, *cc, *bc, *t_bc, *init, *t_init, *ct, *t_ct)
        g_cc, _, t_g_bc, _, t_g_init = split(list(outs), [nq, nb, nb, nk, nk])
        return tuple([g * 0 for g in g_cc] + t_g_bc + t_g_init)


def _jvp_of_backward(plan, back):
    """(consts, tangents of consts, carry, its tangent, cotangent, its tangent) ->
    (cotangent before the step, its tangent, gradient increments, their tangents)."""
    nb, nk = plan.n_body_consts, plan.n_carry
    jvp = jvp_parts(back)
    _, b_specs = plan.const_specs()
    k_specs = plan.carry_specs()

    def step(*values):
        bc, t_bc, carry, t_carry, ct, t_ct = split(values, [nb, nb, nk, nk, nk, nk])
        outs = call(jvp, bc + carry + ct + t_bc + t_carry + t_ct)
        g_carry, g_bc, t_g_carry, t_g_bc = split(outs, [nk, nb, nk, nb])
        return g_carry + t_g_carry + g_bc + t_g_bc
    return graph_of(step, b_specs * 2 + k_specs * 4)


def _backward_body(plan):
    """(body consts..., carry..., carry cotangent...) -> (cotangent of the carry before
    the step..., gradient of the body consts...)."""
    nb, nk = plan.n_body_consts, plan.n_carry
    vjp, n_out = vjp_parts(plan.body)
    _, b_specs = plan.const_specs()
    k_specs = plan.carry_specs()

    def step(*values):
        bc, carry, ct = split(values, [nb, nk, nk])
        g_bc, g_carry = split(call(vjp, bc + carry + ct)[n_out:], [nb, nk])
        return g_carry + g_bc
    return graph_of(step, b_specs + k_specs + k_specs)


def _jvp_plan(plan):
    nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
    jvp = jvp_parts(plan.body)
    q_specs, b_specs = plan.const_specs()
    k_specs = plan.carry_specs()
    cond = graph_of(lambda *v: call(plan.cond, v[:nq + nk]), q_specs + k_specs * 2)

    def step(*values):
        bc, t_bc, carry, t_carry = split(values, [nb, nb, nk, nk])
        return call(jvp, bc + carry + t_bc + t_carry)
    body = graph_of(step, b_specs * 2 + k_specs * 2)
    return WhilePlan(cond=cond, body=body, n_cond_consts=nq, n_body_consts=2 * nb)


def while_vmap(plan, dims, args, size):
    """Every carry batched at 0; the loop runs while any example's predicate holds, and
    an example whose predicate is false keeps its carry."""
    nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
    cc, bc, init = split(list(args), [nq, nb, nk])
    q_dims, b_dims, k_dims = split(list(dims), [nq, nb, nk])
    cc = [c if d is None else c.movedim(d, 0) for c, d in zip(cc, q_dims)]
    bc = [c if d is None else c.movedim(d, 0) for c, d in zip(bc, b_dims)]
    init = [c.unsqueeze(0).expand((size,) + tuple(c.shape)).contiguous() if d is None
            else c.movedim(d, 0) for c, d in zip(init, k_dims)]
    q_in = [None if d is None else 0 for d in q_dims] + [0] * nk
    b_in = [None if d is None else 0 for d in b_dims] + [0] * nk
    key = ("vmap", tuple(q_in), tuple(b_in), size)
    batched = plan.derived(key, lambda: _vmap_plan(plan, q_in, b_in, size))
    return While.apply(batched, *cc, *cc, *bc, *init), (0,) * nk


def _vmap_plan(plan, q_in, b_in, size):
    nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
    vcond = vmap_graph(plan.cond, q_in, size)
    vbody = vmap_graph(plan.body, b_in, size)
    q_specs, b_specs = plan.const_specs()
    k_specs = [_batched(s, size) for s in plan.carry_specs()]
    q_specs = [s if d is None else _batched(s, size) for s, d in zip(q_specs, q_in)]
    b_specs = [s if d is None else _batched(s, size) for s, d in zip(b_specs, b_in)]
    cond = graph_of(lambda *v: [call(vcond, v)[0].to(dtype=int64).sum() > 0], q_specs + k_specs)

    def step(*values):
        cc, bc, carry = split(values, [nq, nb, nk])
        running = call(vcond, cc + carry)[0]
        new = call(vbody, bc + carry)
        return [FUNCTIONS["where"](running.reshape((size,) + (1,) * (n.ndim - 1)), n, c)
                for n, c in zip(new, carry)]
    body = graph_of(step, q_specs + b_specs + k_specs)
    return WhilePlan(cond=cond, body=body, n_cond_consts=nq, n_body_consts=nq + nb)


def _batched(s, size):
    return type(s)((size,) + tuple(s.shape), s.dtype)


# ------------------------------------------------------------------ the public calls
def while_loop(cond_fun, body_fun, init_val, checkpoint=None):
    """jax.lax.while_loop: `val = body_fun(val)` while `cond_fun(val)`; reverse mode
    works too (the trip count is recorded when the loop runs again)."""
    leaves, tree = as_tensor_leaves(init_val, "while_loop's init_val")
    if checkpoint is not None:
        snapshots(checkpoint, 1)  # a bad policy is refused now, not in backward
    k_specs = [spec(t) for t in leaves]
    if not use_op_path(checkpoint):
        val = init_val
        while _predicate(cond_fun(val)):
            val = body_fun(val)
            out, out_tree = as_tensor_leaves(val, "while_loop body's result")
            check_same_specs("while_loop body function carry", tree, k_specs, out_tree,
                             [spec(t) for t in out])
        return val
    cond = trace_body(lambda *xs: cond_fun(tree_unflatten(tree, xs)), k_specs,
                      "while_loop cond")
    _check_predicate(cond)
    body = trace_body(lambda *xs: body_fun(tree_unflatten(tree, xs)), k_specs,
                      "while_loop body")
    check_same_specs("while_loop body function carry", tree, k_specs, body.out_tree,
                     body.out_specs())
    plan = WhilePlan(cond=cond.graph, body=body.graph, n_cond_consts=cond.n_captured,
                     n_body_consts=body.n_captured, checkpoint=checkpoint)
    outs = While.apply(plan, *cond.captured, *body.captured, *leaves)
    return tree_unflatten(tree, list(outs) if isinstance(outs, tuple) else [outs])


def _predicate(value):
    if isinstance(value, Tensor):
        if value.ndim != 0 or value.dtype is not bool_:
            raise TypeError(f"while_loop: cond_fun must return a boolean scalar, but got "
                            f"a {value.dtype} tensor of shape {list(value.shape)}")
        return bool(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"while_loop: cond_fun must return a boolean scalar, but got "
                    f"{type(value).__name__}")


def _check_predicate(cond):
    specs = cond.out_specs()
    if len(specs) != 1 or specs[0].shape != () or specs[0].dtype.np != np.bool_:
        got = ", ".join(f"{s.dtype.name}{list(s.shape)}" for s in specs) or "nothing"
        raise TypeError(f"while_loop: cond_fun must return a boolean scalar, but got "
                        f"output type(s) [{got}]")


def fori_loop(lower, upper, body_fun, init_val, unroll=1, checkpoint=None):
    """jax.lax.fori_loop: `val = body_fun(i, val)` for i in [lower, upper), i an int64
    0-d tensor. Python-int bounds make it a scan (so reverse mode is a reverse scan)."""
    static = all(isinstance(b, (int, np.integer)) for b in (lower, upper))
    if static and not use_op_path(checkpoint):
        leaves, tree = as_tensor_leaves(init_val, "fori_loop's init_val")
        specs = [spec(t) for t in leaves]
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(tensor(i, dtype=int64), val)
            out, out_tree = as_tensor_leaves(val, "fori_loop body's result")
            check_same_specs("fori_loop body function carry", tree, specs, out_tree,
                             [spec(t) for t in out])
        return val
    if static:  # a scan over the indices (an index the body does not read costs nothing)
        def step(val, i):
            return body_fun(i, val), None
        indices = _make(np.arange(int(lower), max(int(upper), int(lower)), dtype=np.int64))
        val, _ = scan(step, init_val, indices, unroll=unroll, checkpoint=checkpoint)
        return val
    lower_t, upper_t = (_int_tensor(b) for b in (lower, upper))
    _, val = while_loop(lambda c: c[0] < upper_t,
                        lambda c: (c[0] + 1, body_fun(c[0], c[1])), (lower_t, init_val),
                        checkpoint=checkpoint)
    return val


def _int_tensor(b):
    if isinstance(b, Tensor):
        return b.to(dtype=int64)
    return _make(np.asarray(int(b), dtype=np.int64))
