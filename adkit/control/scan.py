"""`ak.scan` and its IR node, `Scan`.

Owns: `ScanPlan` (the node's params: the body Graph and the loop's static facts), the
`Scan` op (forward: the loop on numpy through the body graph; backward: a reverse scan
of the body's vjp over the stacked carries; jvp: a scan of the body's jvp; vmap: a scan
of the batched body) and the public `scan`. Does not: trace bodies (body.py) or derive
bodies (derive.py).

Layout of a Scan node's arguments: (consts..., init carries..., xs...) where consts are
the tensors the body closes over. Its outputs: (final carries..., stacked ys...), plus
(with `history`) the carries entering each step, stacked. The body graph takes
(consts..., carries..., x slices...) and returns (carries..., ys...).
"""
import dataclasses

import numpy as np

from .._pytree import num_leaves, tree_flatten, tree_unflatten
from ..ir.evaluate import array_runner
from ..ir.graph import Graph
from ..ir.rules import TensorSpec
from ..ops.join import Stack
from ._common import (
    Plan,
    PlanOp,
    StepPlan,
    as_tensor_leaves,
    check_same_specs,
    is_float,
    materialize,
    spec,
    stacked,
    use_op_path,
    zeros_of,
)
from .body import fresh, is_tensor, trace_body
from .checkpoint import ScanCheckpointGrad, snapshots
from .derive import call, graph_of, jvp_parts, split, split_vjp, vjp_parts, vmap_graph
from .sparsity_rules import scan_sparsity


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ScanPlan(Plan):
    body: Graph = None
    n_consts: int = 0
    n_carry: int = 0
    length: int = 0
    reverse: bool = False
    unroll: int = 1
    checkpoint: object = None
    history: bool = False
    # consts (positions) a checkpointed reverse pass (ScanCheckpointGrad) gives no
    # gradient: values hoist_invariants made for it, and consts whose gradient nothing
    # reads (dce); a Scan's plan has none
    no_grad: tuple = ()
    body_fields = ("body",)

    @property
    def n_xs(self):
        return len(self.body.inputs) - self.n_consts - self.n_carry

    @property
    def n_ys(self):
        return len(self.body.outputs) - self.n_carry

    def float_positions(self):
        """Which consts, carries, xs and ys are floats (only they carry cotangents)."""
        c_specs, k_specs, x_specs = split(self.input_specs(),
                                          [self.n_consts, self.n_carry, self.n_xs])
        y_specs = self.body.output_specs()[self.n_carry:]
        fc, fk, fx, fy = ([j for j, s in enumerate(specs) if is_float(s)]
                          for specs in (c_specs, k_specs, x_specs, y_specs))
        return [j for j in fc if j not in self.no_grad], fk, fx, fy

    def const_slots(self):
        """{body: (first const input, first const argument, count)} (for hoisting)."""
        return {"body": (0, 0, self.n_consts)}

    def with_more_consts(self, name, k, body):
        return dataclasses.replace(self, body=body, n_consts=self.n_consts + k, cache={})

    def steps(self):
        """Step indices in the order the loop visits them."""
        return range(self.length - 1, -1, -1) if self.reverse else range(self.length)

    def input_specs(self):
        return self.body.input_specs()

    def argument_specs(self):
        """The node's tensor arguments: consts and carries as the body takes them, xs
        with the scan's length in front."""
        specs = self.input_specs()
        head = specs[:self.n_consts + self.n_carry]
        return head + [stacked(s, self.length) for s in specs[len(head):]]

    def output_specs(self):
        body_out = self.body.output_specs()
        carries, ys = body_out[:self.n_carry], body_out[self.n_carry:]
        hist = carries if self.history else []
        return carries + [stacked(s, self.length) for s in ys + hist]


class Scan(PlanOp):
    """A loop over the leading dim of xs: carry, y = body(consts, carry, x) per step."""
    public_name = "scan"
    runs_its_plan = True  # its arguments are laid out as its plan says (hoisting)
    native_loop = True  # codegen makes it an LLVM loop when its body lowers completely

    @staticmethod
    def forward(plan, *arrays):
        consts, carry, xs = split(list(arrays), [plan.n_consts, plan.n_carry, plan.n_xs])
        body = array_runner(plan.body)
        ys, hist = [[] for _ in range(plan.n_ys)], [[] for _ in range(plan.n_carry)]
        for i in plan.steps():
            if plan.history:
                for h, c in zip(hist, carry):
                    h.append(c)
            outs = body(consts + carry + [x[i] for x in xs])
            carry = outs[:plan.n_carry]
            for y, o in zip(ys, outs[plan.n_carry:]):
                y.append(o)
        specs = plan.output_specs()[plan.n_carry:]
        stacks = [_stack(v, s, plan.reverse) for v, s in zip(ys + hist, specs)]
        return fresh(carry + stacks, arrays)

    @staticmethod
    def infer(plan, *arrays):
        plan.check_arguments(arrays, plan.argument_specs(), "scan")
        return tuple(plan.output_specs())

    @classmethod
    def sparsity(cls, plan, *operands):
        """Sparsity rule: the body's sets carried step by step (sparsity_rules.py)."""
        return scan_sparsity(plan, operands)

    @staticmethod
    def backward(ctx, *cts):
        plan, args = ctx.plan, ctx.saved_tensors
        return (None,) + tuple(scan_vjp(plan, args, cts))

    @staticmethod
    def jvp(ctx, _plan, *tangents):
        return scan_jvp(ctx.plan, ctx.saved_tensors, tangents)

    @staticmethod
    def vmap(info, in_dims, plan, *args):
        return scan_vmap(plan, in_dims[1:], args, info.batch_size)


def _stack(values, spec, reverse):
    if not values:
        return np.zeros(spec.shape, spec.dtype.np)
    return np.stack(values[::-1] if reverse else values)


# ------------------------------------------------------------------ reverse mode
def scan_vjp(plan, args, cts):
    """Gradients of every Scan argument: the carries entering each step (recomputed by
    a scan with history), then a scan in the other direction of the body's vjp, which
    carries the carry's cotangent and the consts' accumulated gradients. A cotangent of
    the history (second-order: a gradient read the history) joins the carry's at its
    step."""
    nc, nk, ny = plan.n_consts, plan.n_carry, plan.n_ys
    nh = nk if plan.history else 0
    cts = materialize(list(cts), plan.output_specs())
    consts, init, xs = split(list(args), [nc, nk, plan.n_xs])
    if plan.checkpoint is not None:  # nothing was stored: walk the Revolve schedule
        back = plan.derived("recomputing vjp",
                            lambda: StepPlan(graph=_recomputing_back_body(plan)))
        fc, fk, fx, fy = plan.float_positions()
        outs = ScanCheckpointGrad.apply(plan, back, *args, *[cts[k] for k in fk],
                                        *[cts[nk + j] for j in fy])
        return _placed(outs, plan, len(args))
    forward, back = plan.derived("residual vjp", lambda: _residual_plans(plan))
    fc, fk, fx, fy = plan.float_positions()
    outs = Scan.apply(forward, *args)
    residuals = list(outs[nk + ny:nk + forward.n_ys])
    acc = [zeros_of(spec(consts[j])) for j in fc]
    outs = Scan.apply(back, *consts, *[cts[k] for k in fk], *acc, *residuals, *xs,
                      *[cts[nk + j] for j in fy], *[cts[nk + ny + k] for k in fk[:nh]])
    return _placed(outs, plan, len(args))


def _placed(grads, plan, n_args):
    """One gradient per Scan argument from a reverse pass's results (the float carries'
    cotangents, the float consts' gradients, the float xs' gradients): None for the
    rest."""
    fc, fk, fx, _ = plan.float_positions()
    out, it = [None] * n_args, iter(grads)
    for positions, start in ((fk, plan.n_consts), (fc, 0), (fx, plan.n_consts + plan.n_carry)):
        for j in positions:
            out[start + j] = next(it)
    return out


def _recomputing_back_body(plan):
    """The reverse step for checkpointing, which stores carries only: (consts, float
    carries' cotangents, float consts' gradients so far, the carry entering the step,
    x, float ys' cotangents) -> (cotangents of the float carries before the step, float
    consts' gradients, float xs' gradients); it recomputes the step inside the body's
    vjp."""
    nc, nk, nx = plan.n_consts, plan.n_carry, plan.n_xs
    fc, fk, fx, fy = plan.float_positions()
    vjp, n_out = vjp_parts(plan.body)
    c_specs, k_specs, x_specs = split(plan.input_specs(), [nc, nk, nx])
    y_specs = plan.body.output_specs()[nk:]

    def step(*values):
        consts, ct_carry, acc, carry, x, ct_y = split(
            values, [nc, len(fk), len(fc), nk, nx, len(fy)])
        cts = _widen(ct_carry, fk, k_specs) + _widen(ct_y, fy, y_specs)
        grads = call(vjp, consts + carry + x + cts)[n_out:]
        g_consts, g_carry, g_x = split(grads, [nc, nk, nx])
        return ([g_carry[k] for k in fk] + [a + g_consts[j] for a, j in zip(acc, fc)] +
                [g_x[j] for j in fx])
    pick = lambda specs, positions: [specs[j] for j in positions]  # noqa: E731
    return graph_of(step, c_specs + pick(k_specs, fk) + pick(c_specs, fc) + k_specs +
                    x_specs + pick(y_specs, fy))


def _residual_plans(plan):
    """(forward scan that also stacks the residuals, backward scan that reads them): the
    body's vjp split by partial evaluation (derive.split_vjp). The backward scan runs in
    the other direction and carries the carry's cotangent and the consts' gradients; a
    cotangent of the history (second order) joins the carry's at its step."""
    nc, nk, nx, ny = plan.n_consts, plan.n_carry, plan.n_xs, plan.n_ys
    nh = nk if plan.history else 0
    body_fwd, n_res, body_bwd = split_vjp(plan.body, nc, nk)
    forward = dataclasses.replace(plan, body=body_fwd, cache={})
    res_specs = body_fwd.output_specs()[nk + ny:]
    c_specs, k_specs, x_specs = split(plan.input_specs(), [nc, nk, nx])
    y_specs = plan.body.output_specs()[nk:]

    fc, fk, fx, fy = plan.float_positions()

    def step(*values):
        consts, ct_carry, acc, res, x, ct_y, ct_h = split(
            values, [nc, len(fk), len(fc), n_res, nx, len(fy), len(fk) if nh else 0])
        ct_carry = _widen(ct_carry, fk, k_specs)  # zeros for the non-float ones
        grads = call(body_bwd, consts + res + x + ct_carry + _widen(ct_y, fy, y_specs))
        g_consts, g_carry, g_x = split(grads, [nc, nk, nx])
        g_carry = [g_carry[k] for k in fk]
        g_carry = [g + h for g, h in zip(g_carry, ct_h)] if nh else g_carry
        return (g_carry + [a + g_consts[j] for a, j in zip(acc, fc)] +
                [g_x[j] for j in fx])

    pick = lambda specs, positions: [specs[j] for j in positions]  # noqa: E731
    specs = (c_specs + pick(k_specs, fk) + pick(c_specs, fc) + res_specs + x_specs +
             pick(y_specs, fy) + (pick(k_specs, fk) if nh else []))
    back = ScanPlan(body=graph_of(step, specs), n_consts=nc, n_carry=len(fk) + len(fc),
                    length=plan.length, reverse=not plan.reverse, unroll=plan.unroll)
    return forward, back


def _widen(values, positions, specs):
    """A value per spec: `values` at `positions`, zeros elsewhere."""
    out = [zeros_of(s) for s in specs]
    for j, v in zip(positions, values):
        out[j] = v
    return out


# ------------------------------------------------------------------ forward mode
def scan_jvp(plan, args, tangents):
    """Tangents of the outputs: a scan of the body's jvp, carrying (carry, tangent)."""
    nc, nk, nx, ny = plan.n_consts, plan.n_carry, plan.n_xs, plan.n_ys
    nh = nk if plan.history else 0
    tangents = materialize(list(tangents), [spec(a) for a in args])
    consts, init, xs = split(list(args), [nc, nk, nx])
    t_consts, t_init, t_xs = split(tangents, [nc, nk, nx])
    forward = plan.derived("jvp", lambda: _jvp_plan(plan))
    outs = Scan.apply(forward, *consts, *t_consts, *init, *t_init, *xs, *t_xs)
    _, t_carry, _, t_ys, _, t_hist = split(list(outs), [nk, nk, ny, ny, nh, nh])
    return tuple(t_carry + t_ys + t_hist)


def _jvp_plan(plan):
    nc, nk, nx, ny = plan.n_consts, plan.n_carry, plan.n_xs, plan.n_ys
    jvp = jvp_parts(plan.body)
    c_specs, k_specs, x_specs = split(plan.input_specs(), [nc, nk, nx])

    def step(*values):
        consts, t_consts, carry, t_carry, x, t_x = split(values, [nc, nc, nk, nk, nx, nx])
        outs = call(jvp, consts + carry + x + t_consts + t_carry + t_x)
        new, new_t = outs[:nk + ny], outs[nk + ny:]
        return new[:nk] + new_t[:nk] + new[nk:] + new_t[nk:]

    body = graph_of(step, c_specs * 2 + k_specs * 2 + x_specs * 2)
    # with history, the doubled carry's history is (carries', tangents') entering each step
    return ScanPlan(body=body, n_consts=2 * nc, n_carry=2 * nk, length=plan.length,
                    reverse=plan.reverse, unroll=plan.unroll, history=plan.history)


# ------------------------------------------------------------------ batching
def scan_vmap(plan, dims, args, size):
    """Every carry batched at dim 0 (a carry may become batched inside the loop), each
    batched x at dim 1 (dim 0 is the scan's); ys come out batched at dim 1."""
    nc, nk, nx = plan.n_consts, plan.n_carry, plan.n_xs
    consts, init, xs = split(list(args), [nc, nk, nx])
    c_dims, k_dims, x_dims = split(list(dims), [nc, nk, nx])
    consts = [c if d is None else c.movedim(d, 0) for c, d in zip(consts, c_dims)]
    init = [_batch_front(c, d, size) for c, d in zip(init, k_dims)]
    xs = [x if d is None else x.movedim(d, 1) for x, d in zip(xs, x_dims)]
    body_dims = [None if d is None else 0 for d in c_dims] + [0] * nk + \
        [None if d is None else 0 for d in x_dims]
    key = ("vmap", tuple(body_dims), size)
    batched = plan.derived(key, lambda: dataclasses.replace(
        plan, body=vmap_graph(plan.body, body_dims, size), cache={}))
    outs = Scan.apply(batched, *consts, *init, *xs)
    out_dims = (0,) * nk + (1,) * (len(outs) - nk)
    return outs, out_dims


def _batch_front(t, bdim, size):
    if bdim is None:
        return t.unsqueeze(0).expand((size,) + tuple(t.shape)).contiguous()
    return t.movedim(bdim, 0)


# ------------------------------------------------------------------ the public call
def scan(f, init, xs=None, length=None, reverse=False, unroll=1, checkpoint=None):
    """jax.lax.scan: `f(carry, x) -> (carry, y)` over the leading dim of the pytree `xs`
    (or `length` steps of x=None); returns (final carry, ys stacked on dim 0)."""
    init_leaves, carry_tree = as_tensor_leaves(init, "scan's init")
    x_leaves, x_tree = tree_flatten(xs, is_leaf=is_tensor) if xs is not None else ([], None)
    length = _scan_length(x_leaves, length)
    if not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"scan: unroll must be a positive int, got {unroll!r}")
    if checkpoint is not None:
        snapshots(checkpoint, length)  # a bad policy is refused now, not in backward
    if use_op_path(checkpoint):
        return _scan_node(f, init_leaves, carry_tree, x_leaves, x_tree, length, reverse,
                          unroll, checkpoint)
    return _scan_python(f, init_leaves, carry_tree, x_leaves, x_tree, length, reverse)


def _scan_length(x_leaves, length):
    for x in x_leaves:
        if not is_tensor(x):
            raise TypeError(f"scan: xs must be a pytree of tensors, got a leaf of type "
                            f"{type(x).__name__}")
        if x.ndim == 0:
            raise ValueError("scan: xs leaves must have a leading dim to scan over, got a "
                             "0-d tensor")
    lengths = {int(x.shape[0]) for x in x_leaves}
    if length is not None:
        lengths.add(int(length))
    if not lengths:
        raise ValueError("scan: xs is None, so length must be given")
    if len(lengths) > 1:
        raise ValueError(f"scan got values with different leading axis sizes: "
                         f"{sorted(lengths)} (xs leaves and length must agree)")
    return lengths.pop()


def _x_at(x_leaves, x_tree, i):
    return None if x_tree is None else tree_unflatten(x_tree, [x[i] for x in x_leaves])


def _scan_python(f, init_leaves, carry_tree, x_leaves, x_tree, length, reverse):
    """Eager: the body runs once per step in Python (it may branch on values); autograd
    records every op."""
    carry = tree_unflatten(carry_tree, init_leaves)
    in_specs = [spec(c) for c in init_leaves]
    ys = []
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        carry, y = _pair(f(carry, _x_at(x_leaves, x_tree, i)))
        leaves, tree = as_tensor_leaves(carry, "scan body's carry")
        check_same_specs("scan body function carry", carry_tree, in_specs, tree,
                         [spec(c) for c in leaves])
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:  # no step ran: the ys' shapes come from tracing the body once
        return _scan_node(f, init_leaves, carry_tree, x_leaves, x_tree, 0, reverse, 1, None)
    return carry, _stack_trees(ys)


def _pair(result):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError("scan body function must return a pair (carry, y), got "
                        f"{type(result).__name__}")
    return result


def _stack_trees(ys):
    leaves0, tree = tree_flatten(ys[0], is_leaf=is_tensor)
    per_step = [tree_flatten(y, is_leaf=is_tensor)[0] for y in ys]
    stacks = [None if leaf is None else Stack.apply(0, *[step[k] for step in per_step])
              for k, leaf in enumerate(leaves0)]
    return tree_unflatten(tree, stacks)


def _scan_node(f, init_leaves, carry_tree, x_leaves, x_tree, length, reverse, unroll,
               checkpoint):
    carry_specs = [spec(c) for c in init_leaves]
    x_specs = [TensorSpec(tuple(x.shape[1:]), spec(x).dtype) for x in x_leaves]
    n_carry = len(init_leaves)

    def step(*leaves):
        carry = tree_unflatten(carry_tree, leaves[:n_carry])
        x = None if x_tree is None else tree_unflatten(x_tree, leaves[n_carry:])
        return _pair(f(carry, x))

    body = trace_body(step, carry_specs + x_specs, "scan body")
    carry_out_tree, y_tree = _split_out_tree(body.out_tree)
    check_same_specs("scan body function carry", carry_tree, carry_specs, carry_out_tree,
                     body.out_specs()[:n_carry])
    plan = ScanPlan(body=body.graph, n_consts=body.n_captured, n_carry=n_carry,
                    length=length, reverse=bool(reverse), unroll=unroll,
                    checkpoint=checkpoint)
    outs = Scan.apply(plan, *body.captured, *init_leaves, *x_leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    carry = tree_unflatten(carry_tree, outs[:n_carry])
    y_static = {i - num_leaves(carry_out_tree): v for i, v in body.static.items()}
    y_leaves, it = [], iter(outs[n_carry:])
    for i in range(len(y_static) + plan.n_ys):
        y_leaves.append(y_static[i] if i in y_static else next(it))
    return carry, tree_unflatten(y_tree, y_leaves)


def _split_out_tree(out_tree):
    if out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
        raise TypeError("scan body function must return a pair (carry, y)")
    return out_tree.children

