"""A call of a jitted function as one op: how `ak.jit` composes with eager autograd and
with every transform (Autodidax's `xla_call`).

Owns: `CallPlan` (the traced graph of one signature, with the plans derived from it:
its vjp, jvp, batched and split graphs, each compiled once), `JitCall` (the node: its
forward runs the compiled graph; its backward, jvp and vmap rules apply JitCall to the
graph's vjp, jvp and batched graphs), `JitCallSavingResiduals` (eager autograd's tape
node: AOTAutograd's split, the forward also returns what the backward reads) and
`call_jitted` (trace the function as a closed body, so closures over tensors become
inputs, and apply the right op). Does not: cache plain calls per signature (jit.py),
optimize or plan graphs (compiled.py); an outer jit inlines JitCall nodes
(passes.inline_calls), so nested jits compile as one program.
"""
import dataclasses

import numpy as np

from .. import _dispatch
from .._pytree import freeze, tree_flatten, tree_unflatten
from ..autograd.grad_mode import is_grad_enabled
from ..control._common import Plan, PlanOp, is_float, materialize, spec
from ..control.body import NonTensorResult, trace_body
from ..control.derive import call, graph_of, jvp_parts, split_vjp, vjp_parts, vmap_graph
from ..ir import rules
from ..ir.passes.cleanup import has_in_place_ops
from ..tensor import Tensor, _make
from .compiled import Compiled
from .pipeline import run_pipeline


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CallPlan(Plan):
    """A jitted function's graph for one signature: (captured tensors..., argument
    leaves...) -> result leaves."""
    graph: object = None
    name: str = "jitted function"
    passes: tuple = ()  # the user's (ak.jit(f, passes=...)): run on every graph compiled
    body_fields = ("graph",)

    def compiled(self):
        return self.derived("compiled", lambda: Compiled(
            run_pipeline(self.graph, self.passes, self.name), self.name))

    def derive(self, key, build):
        """The CallPlan of the graph `build()` makes (cached under `key`)."""
        return self.derived(key, lambda: CallPlan(graph=build(), name=f"{self.name}'s {key}",
                                                  passes=self.passes))

    @property
    def n_out(self):
        return len(self.graph.outputs)

    def in_specs(self):
        return self.derived("in_specs", self.graph.input_specs)

    def out_specs(self):
        return self.derived("out_specs", self.graph.output_specs)


def _run(plan, arrays):
    """The plan's outputs (arrays) for input arrays, from its compiled program."""
    result = plan.compiled().run_checked([_make(a) for a in arrays])
    return tuple(t._data for t in tree_flatten(result, is_leaf=_is_tensor)[0])


def _is_tensor(x):
    return isinstance(x, Tensor)


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _bare(outs):
    return outs[0] if len(outs) == 1 else outs


class JitCall(PlanOp):
    """outputs = plan.graph(arguments), run as compiled code."""
    public_name = "jit_call"
    inlines_call = True  # an outer jit compiles the called graph with its own

    @staticmethod
    def forward(plan, *arrays):
        return _bare(_run(plan, arrays))

    @staticmethod
    def infer(plan, *arrays):
        plan.check_arguments(arrays, plan.in_specs(), plan.name)
        return tuple(plan.out_specs())

    @staticmethod
    def backward(ctx, *cts):
        return (None,) + tuple(call_vjp(ctx.plan, ctx.saved_tensors, cts, _needed(ctx)))

    @staticmethod
    def jvp(ctx, _plan, *tangents):
        plan, args = ctx.plan, ctx.saved_tensors
        tangents = materialize(list(tangents), [spec(a) for a in args])
        n_out, specs = plan.n_out, plan.in_specs()
        jvp = plan.derive("jvp", lambda: graph_of(
            lambda *v: call(jvp_parts(plan.graph), v)[n_out:], specs + specs))
        return JitCall.apply(jvp, *args, *tangents)

    @staticmethod
    def vmap(info, in_dims, plan, *args):
        dims = in_dims[1:]
        args = [a if d is None else a.movedim(d, 0) for a, d in zip(args, dims)]
        body_dims = tuple(None if d is None else 0 for d in dims)
        batched = plan.derive(("vmap", body_dims, info.batch_size), lambda: vmap_graph(
            plan.graph, body_dims, info.batch_size))
        outs = _as_tuple(JitCall.apply(batched, *args))
        return outs, (0,) * len(outs)


def _needed(ctx):
    """Which arguments (after the plan) need a gradient: the others' are not computed."""
    return tuple(bool(n) for n in ctx.needs_input_grad[1:])


def _pruned(plan, key, graph, needed, specs):
    """The CallPlan of `graph` keeping only the gradients of needed float arguments (dce
    then drops the work that only fed the others)."""
    keep = [need and is_float(s) for need, s in zip(needed, plan.in_specs())]
    return plan.derive((key, tuple(keep)), lambda: graph_of(
        lambda *v: [g for g, k in zip(call(graph(), v), keep) if k], specs)), keep


def _placed(grads, keep):
    it = iter(_as_tuple(grads) if any(keep) else ())
    return [next(it) if k else None for k in keep]


def call_vjp(plan, args, cts, needed):
    """The needed arguments' gradients (None for the others): JitCall of the graph's vjp,
    which recomputes the forward inside, so it is differentiable in the arguments
    (create_graph, grad of grad)."""
    n_out, specs = plan.n_out, plan.in_specs()
    cts = materialize(list(cts[:n_out]), plan.out_specs())
    vjp, keep = _pruned(plan, "vjp", lambda: _outputs_after(vjp_parts(plan.graph)[0], n_out),
                        needed, specs + plan.out_specs())
    return _placed(JitCall.apply(vjp, *args, *cts) if any(keep) else (), keep)


def _outputs_after(graph, n):
    """`graph` returning its outputs after the first n."""
    return graph_of(lambda *v: call(graph, v)[n:], graph.input_specs())


def _split(plan):
    """(forward plan: arguments -> outputs + residuals, backward plan: (arguments,
    residuals, output cotangents) -> one gradient per argument): the graph's vjp cut by
    partial evaluation, every value the backward reads that is not an argument stored."""
    def build():
        n_in = len(plan.graph.inputs)
        forward, _, backward = split_vjp(plan.graph, n_in, 0, store_const_values=True)
        return (CallPlan(graph=forward, name=f"{plan.name}'s forward", passes=plan.passes),
                CallPlan(graph=backward, name=f"{plan.name}'s backward",
                         passes=plan.passes))
    return plan.derived("split", build)


class JitCallSavingResiduals(PlanOp):
    """Eager autograd's tape node for a jitted call (AOTAutograd's split): the forward
    runs the compiled forward graph, which returns the outputs and then the residuals
    its backward reads (saved, marked non-differentiable); the backward runs the compiled
    backward graph on them. With create_graph (grad mode on during backward) gradients
    must be differentiable in the arguments: the backward is then `call_vjp`, which
    recomputes the forward inside a differentiable JitCall."""
    public_name = "jit_call"

    @staticmethod
    def forward(plan, *arrays):
        return _bare(_run(_split(plan)[0], arrays))

    @staticmethod
    def infer(plan, *arrays):
        return tuple(_split(plan)[0].out_specs())

    @staticmethod
    def setup_context(ctx, inputs, output):
        plan, args = inputs[0], inputs[1:]
        residuals = _as_tuple(output)[plan.n_out:]
        ctx.plan = plan
        ctx.mark_non_differentiable(*residuals)
        ctx.set_materialize_grads(False)  # no zeros for the residuals' cotangents
        ctx.save_for_backward(*args, *residuals)

    @staticmethod
    def backward(ctx, *cts):
        plan, saved = ctx.plan, ctx.saved_tensors  # reading them checks their versions
        n_in = len(plan.graph.inputs)
        args, residuals = saved[:n_in], saved[n_in:]
        if is_grad_enabled():
            return (None,) + tuple(call_vjp(plan, args, cts, _needed(ctx)))
        cts = materialize(list(cts[:plan.n_out]), plan.out_specs())
        backward = _split(plan)[1]
        pruned, keep = _pruned(plan, "backward", lambda: backward.graph, _needed(ctx),
                               backward.in_specs())
        grads = JitCall.apply(pruned, *args, *residuals, *cts) if any(keep) else ()
        return (None,) + tuple(_placed(grads, keep))


# ------------------------------------------------------------------ calling
@dataclasses.dataclass(frozen=True)
class _Traced:
    plan: CallPlan
    captured: tuple
    body: object


def call_jitted(jitted, args, kwargs):
    """`jitted(*args, **kwargs)` under a transform or eager autograd: one JitCall node
    (one tape node when autograd records), or, for a function the op cannot stand for
    (it writes its arguments in place, or returns no tensors), the function itself."""
    tensors, rebuild, key = _tensor_leaves(jitted, args, kwargs)
    traced = jitted.op_cache.get(key)
    if traced is None:
        traced = _trace(jitted, tensors, rebuild)
        # captured tracers or batched tensors belong to this call alone: not cached
        if traced is not None and all(type(t) is Tensor for t in traced.captured):
            jitted.op_cache[key] = traced
    if traced is None:
        return jitted.fn(*args, **kwargs)
    inputs = list(traced.captured) + tensors
    eager_tape = not _dispatch._STACK.get() and is_grad_enabled()
    op = JitCallSavingResiduals if eager_tape else JitCall
    outs = _as_tuple(op.apply(traced.plan, *inputs))[:traced.plan.n_out]
    return traced.body.unflatten(outs)


def _tensor_leaves(jitted, args, kwargs):
    """(the tensor leaves of the dynamic arguments, a function putting tensors back in
    their places, the signature key). Each argument is flattened once."""
    static = set(jitted.static_argnums)
    flat = [tree_flatten(a, is_leaf=_is_array_like) for a in args]
    owned = [(i, leaf) for i, (leaves, _) in enumerate(flat) for leaf in leaves]
    leaves = [leaf for _, leaf in owned]
    positions = [k for k, (i, leaf) in enumerate(owned)
                 if _is_array_like(leaf) and i not in static]
    tensors = [leaves[k] if isinstance(leaves[k], Tensor) else _make(leaves[k])
               for k in positions]

    def rebuild(new):
        filled = list(leaves)
        for k, t in zip(positions, new):
            filled[k] = t
        out, start = [], 0
        for arg_leaves, tree in flat:
            out.append(tree_unflatten(tree, filled[start:start + len(arg_leaves)]))
            start += len(arg_leaves)
        return out, kwargs
    chosen = set(positions)
    name = getattr(jitted.fn, "__name__", "f")
    key = (tuple(tree for _, tree in flat), tuple(rules.spec_of(t) for t in tensors),
           tuple((k, type(leaf).__name__, static_key(leaf, name, "a static argument"))
                 for k, leaf in enumerate(leaves) if k not in chosen),  # 2 and 2.0 differ
           tuple(sorted((k, type(v).__name__, static_key(v, name, f"keyword {k}="))
                        for k, v in kwargs.items())))
    return tensors, rebuild, key


def static_key(value, fn_name, what):
    """A hashable key for a static value (lists and dicts too), or a TypeError saying
    why jit needs one: static values are compiled in, so they key the cache."""
    try:
        return freeze(value)
    except TypeError:
        raise TypeError(f"ak.jit({fn_name}): {what} is a {type(value).__name__} that is "
                        "or holds a value that cannot be hashed; static (non-tensor) arguments are compiled in "
                        "and key the cache of compiled code, so they must be hashable "
                        "(numbers, strings, tuples, lists or dicts of them)") from None


def _is_array_like(x):
    return isinstance(x, (Tensor, np.ndarray))


def _trace(jitted, tensors, rebuild):
    """The function traced as a closed body on the tensors' specs, or None when a JitCall
    cannot stand for it."""
    def body_fn(*leaves):
        args, kwargs = rebuild(list(leaves))
        return jitted.fn(*args, **kwargs)
    try:
        body = trace_body(body_fn, [rules.spec_of(t) for t in tensors],
                          f"jitted function {getattr(jitted.fn, '__name__', '')}")
    except NonTensorResult:
        return None  # it returns non-tensors: the plain function keeps them
    if not body.graph.outputs or has_in_place_ops(body.graph):
        return None
    name = f"jit({getattr(jitted.fn, '__name__', 'f')})"
    return _Traced(CallPlan(graph=body.graph, name=name, passes=jitted.passes),
                   body.captured, body)


__all__ = ["CallPlan", "JitCall", "JitCallSavingResiduals", "call_jitted", "call_vjp",
           "static_key"]
