"""Second derivatives through the reverse passes that store no residuals: the checkpointed
scan's (`ScanCheckpointGrad`) and while_loop's (`WhileGrad`).

Owns: the derivative rules of those two ops: `scan_checkpoint_grad_backward` and
`scan_checkpoint_grad_jvp` (handed to ScanCheckpointGrad at the end of this module: they
build on scan.py, which imports checkpoint.py) and `while_grad_backward` (WhileGrad's jvp
is loops.py's). Does not: run the first reverse pass (checkpoint.py, loops.py).

Why they differentiate another function: what either op returns (the gradients of a
loop) is also what the ordinary reverse mode of a scan computes (`scan_vjp` with
checkpoint=None: a forward scan stacking every step's residuals, then a reverse scan),
and every transform already goes through those two scans. So the rules here are the vjp
and jvp of that function, recomputed from the op's inputs: the second-order pass stores
every step's residuals (the memory of checkpoint=None). The checkpoint bounds the memory
of the first reverse pass, the one `grad` runs; a second derivative pays for its own.

A while loop's trip count is data-dependent, but it is fixed once its inputs are known:
eagerly, the first-order result is the vjp of a scan of the body with that length. Under
tracing the inputs have no values, and a scan's length must be static: a clear error.
"""
from ..func import jvp, vjp
from ..ir.trace import TracerTensor
from ._common import is_float, spec, zeros_of
from .checkpoint import ScanCheckpointGrad
from .derive import split
from .scan import ScanPlan, scan_vjp


# ------------------------------------------------------------------ the checkpointed scan
def scan_checkpoint_grad_backward(plan, values, needs, cts):
    """One gradient per argument of ScanCheckpointGrad(plan, back, *values) (None where
    `needs` says none is needed) from the cotangents of its outputs."""
    return _pullback(_checkpoint_grad_function(plan), values, needs, cts)


def scan_checkpoint_grad_jvp(plan, values, tangents):
    """The tangents of ScanCheckpointGrad's outputs from those of its arguments."""
    return _pushforward(_checkpoint_grad_function(plan), values, tangents)


def _checkpoint_grad_function(plan):
    """What ScanCheckpointGrad computes, by the reverse pass that stores residuals:
    (consts, init, xs, cotangents of the float carries and ys) -> (cotangents of the
    float init carries, gradients of the float consts and xs)."""
    nc, nk, nx, ny = plan.n_consts, plan.n_carry, plan.n_xs, plan.n_ys
    fc, fk, fx, fy = plan.float_positions()
    stored = plan.derived("second order", lambda: ScanPlan(
        body=plan.body, n_consts=nc, n_carry=nk, length=plan.length,
        reverse=plan.reverse, unroll=plan.unroll))

    def fn(values):
        args, ct_k, ct_y = split(values, [nc + nk + nx, len(fk), len(fy)])
        cts = [None] * (nk + ny)
        for position, ct in zip(fk + [nk + j for j in fy], ct_k + ct_y):
            cts[position] = ct
        grads = scan_vjp(stored, args, cts)
        return ([grads[nc + k] for k in fk] + [grads[j] for j in fc] +
                [grads[nc + nk + j] for j in fx])
    return fn


# ------------------------------------------------------------------ while_loop
def while_grad_backward(plan, values, needs, cts):
    """One gradient per argument of WhileGrad(plan, back, *values): eagerly, the
    first-order result is the vjp of a scan of the body as long as the loop runs for
    these values (the cond consts' gradients are zeros, whatever the values)."""
    nq, nb, nk = plan.n_cond_consts, plan.n_body_consts, plan.n_carry
    if any(isinstance(v, TracerTensor) for v in values):
        raise RuntimeError(
            "while_loop: a second derivative in reverse mode (grad of grad, jacrev of "
            "jacrev) is not supported under tracing (ak.jit, ak.trace): the trip count "
            "depends on values a trace does not have, and reverse mode over the reverse "
            "pass needs it as a fixed length. Use forward over reverse (ak.func.hessian, "
            "jacfwd of grad, jvp of grad), or fori_loop/scan with a fixed trip count")
    cc, bc, init, _ = split([v.detach().numpy() for v in values], [nq, nb, nk, nk])
    fn, outputs = _while_grad_function(plan, plan.trip_count(cc, bc, init))
    grads = _pullback(fn, values[nq:], needs[nq:], [cts[nq + i] for i in outputs])
    return [None] * nq + grads


def _while_grad_function(plan, n):
    """What WhileGrad computes for a loop that runs n times, as a scan's vjp: (fn, the
    positions among its (body consts, init) outputs that fn returns). fn: (body consts,
    init, carries' cotangents) -> (gradients of the float body consts, cotangents of the
    float init carries)."""
    nb, nk = plan.n_body_consts, plan.n_carry
    fixed = plan.derived(("trip count", n), lambda: ScanPlan(
        body=plan.body, n_consts=nb, n_carry=nk, length=n))
    b_specs = plan.const_specs()[1]
    outputs = [i for i, s in enumerate(b_specs + plan.carry_specs()) if is_float(s)]

    def fn(values):
        grads = scan_vjp(fixed, values[:nb + nk], values[nb + nk:])
        return [grads[i] for i in outputs]
    return fn, outputs


# ------------------------------------------------------------------ shared
def _pullback(fn, values, needs, cts):
    """<cts, fn(values)> differentiated with respect to the float values whose gradient
    `needs` asks for (None for the rest). The others stay constants of fn: a fresh leaf
    for them would stay in the history of the results, which an enclosing transform
    would then take for a leaf of its caller's."""
    wanted = [i for i, v in enumerate(values) if needs[i] and is_float(spec(v))]
    out = [None] * len(values)
    if wanted:
        outs, pull = vjp(_of(fn, values, wanted), *[values[i] for i in wanted])
        grads = pull([zeros_of(spec(o)) if c is None else c for o, c in zip(outs, cts)])
        for i, g in zip(wanted, grads):
            out[i] = g
    return out


def _pushforward(fn, values, tangents):
    """The tangents of fn(values) from the values' tangents (None: a constant)."""
    wanted = [i for i, t in enumerate(tangents) if t is not None and is_float(spec(values[i]))]
    primals = tuple(values[i] for i in wanted)
    seeds = tuple(tangents[i] for i in wanted)
    return tuple(jvp(_of(fn, values, wanted), primals, seeds)[1])


def _of(fn, values, positions):
    """fn as a function of the values at `positions` (the rest fixed)."""
    def partial(*replacements):
        args = list(values)
        for i, v in zip(positions, replacements):
            args[i] = v
        return fn(args)
    return partial


ScanCheckpointGrad.second_order_vjp = staticmethod(scan_checkpoint_grad_backward)
ScanCheckpointGrad.second_order_jvp = staticmethod(scan_checkpoint_grad_jvp)
