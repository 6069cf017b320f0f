"""`ak.cond` and `ak.switch` and their IR node, `Switch`.

Owns: `SwitchPlan` (the branch Graphs), the `Switch` op (forward: the chosen branch on
numpy; backward: a switch of the branches' vjps; jvp: a switch of their jvps; vmap: a
switch of the batched branches, or, when the index differs per example, every branch
and a select) and the public `cond` and `switch`. Does not: trace bodies (body.py).

A Switch node's arguments: (index, consts..., operands...); every branch graph takes
(consts..., operands...), where consts are the tensors any branch closes over (a
branch ignores those it does not read), and returns the same structure.
"""
import dataclasses

import numpy as np

from .._pytree import tree_unflatten
from ..dtypes import bool_, int64
from ..ir.evaluate import array_runner
from ..ir.printing import format_spec
from ..ops import FUNCTIONS
from ..tensor import Tensor, tensor
from ._common import (
    Plan,
    PlanOp,
    as_tensor_leaves,
    describe_tree,
    is_float,
    materialize,
    spec,
    use_op_path,
)
from .body import fresh, trace_body
from .derive import call, graph_of, jvp_parts, vjp_parts, vmap_graph
from .sparsity_rules import switch_sparsity


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SwitchPlan(Plan):
    branches: tuple = ()
    n_consts: int = 0
    body_fields = ("branches",)

    def input_specs(self):
        g = self.branches[0]
        return g.input_specs()

    def output_specs(self):
        g = self.branches[0]
        return g.output_specs()


class Switch(PlanOp):
    """outputs = branches[clamp(index)](consts, operands). The index is an integer or
    bool 0-d tensor (cond's predicate stays a bool: native code reads it as made)."""
    public_name = "switch"
    native_switch = True  # codegen calls the chosen branch natively when all lower

    @staticmethod
    def forward(plan, index, *arrays):
        chosen = int(np.clip(int(index), 0, len(plan.branches) - 1))
        return fresh(array_runner(plan.branches[chosen])(list(arrays)), arrays)

    @staticmethod
    def infer(plan, index, *arrays):
        if np.asarray(index).shape != () or np.asarray(index).dtype.kind not in "iub":
            raise ValueError("switch: the index must be an integer 0-d tensor")
        plan.check_arguments(arrays, plan.input_specs(), "switch")
        return tuple(plan.output_specs())

    @classmethod
    def sparsity(cls, plan, index, *operands):
        """Sparsity rule: what any branch reads (sparsity_rules.py)."""
        return switch_sparsity(plan, index, operands)

    @staticmethod
    def backward(ctx, *cts):
        plan, (index, *args) = ctx.plan, ctx.saved_tensors
        cts = materialize(list(cts), plan.output_specs())
        back = plan.derived("vjp", lambda: _backward_plan(plan))
        grads = Switch.apply(back, index, *args, *cts)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return (None, None) + tuple(g if is_float(spec(a)) else None
                                    for g, a in zip(grads, args))

    @staticmethod
    def jvp(ctx, _plan, _index, *tangents):
        plan, (index, *args) = ctx.plan, ctx.saved_tensors
        tangents = materialize(list(tangents), [spec(a) for a in args])
        forward = plan.derived("jvp", lambda: _jvp_plan(plan))
        outs = Switch.apply(forward, index, *args, *tangents)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(outs[len(plan.output_specs()):])

    @staticmethod
    def vmap(info, in_dims, plan, index, *args):
        return switch_vmap(plan, in_dims[1], index, in_dims[2:], args, info.batch_size)


def _derived_branches(plan, make_step, specs):
    return dataclasses.replace(plan, branches=tuple(graph_of(make_step(g), specs)
                                                    for g in plan.branches), cache={})


def _backward_plan(plan):
    """Branches (args..., cotangents...) -> one gradient per arg."""
    n_out = len(plan.output_specs())

    def make_step(branch):
        vjp, _ = vjp_parts(branch)
        return lambda *values: call(vjp, values)[n_out:]
    return _derived_branches(plan, make_step, plan.input_specs() + plan.output_specs())


def _jvp_plan(plan):
    """Branches (args..., tangents...) -> (outputs..., output tangents...)."""
    def make_step(branch):
        jvp = jvp_parts(branch)
        return lambda *values: call(jvp, values)
    return _derived_branches(plan, make_step, plan.input_specs() * 2)


def switch_vmap(plan, index_dim, index, dims, args, size):
    """A shared index: a switch of the batched branches. An index batched per example:
    every batched branch runs, and each example takes its branch's results."""
    args = [a if d is None else a.movedim(d, 0) for a, d in zip(args, dims)]
    body_dims = [None if d is None else 0 for d in dims]
    key = ("vmap", tuple(body_dims), size)
    batched = plan.derived(key, lambda: dataclasses.replace(
        plan, branches=tuple(vmap_graph(g, body_dims, size) for g in plan.branches),
        cache={}))
    n_out = len(plan.output_specs())
    if index_dim is None:
        outs = Switch.apply(batched, index, *args)
        return (outs if isinstance(outs, tuple) else (outs,)), (0,) * n_out
    index = index.movedim(index_dim, 0).clamp(0, len(plan.branches) - 1)
    results = [call(g, args) for g in batched.branches]
    chosen = list(results[0])
    for k, outs in enumerate(results[1:], 1):
        for j, o in enumerate(outs):
            mask = (index == k).reshape((size,) + (1,) * (o.ndim - 1))
            chosen[j] = FUNCTIONS["where"](mask, o, chosen[j])
    return tuple(chosen), (0,) * n_out


# ------------------------------------------------------------------ the public calls
def switch(index, branches, *operands):
    """jax.lax.switch: `branches[index](*operands)`, the index clamped into range."""
    branches = list(branches)
    if not branches or not all(callable(b) for b in branches):
        raise TypeError("switch: branches must be a non-empty sequence of callables")
    index = _as_index(index, "switch", "index")
    return _branch("switch", index, branches, operands)


def cond(pred, true_fn, false_fn, operands=()):
    """torch.cond / jax.lax.cond: `true_fn(*operands)` if pred else `false_fn(*operands)`;
    a single tensor operand may be passed bare."""
    if isinstance(operands, Tensor) or not isinstance(operands, (tuple, list)):
        operands = (operands,)
    pred = _as_index(pred, "cond", "pred")
    return _branch("cond", pred, [false_fn, true_fn], tuple(operands))


def _as_index(value, name, what):
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return tensor(int(value))
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ValueError(f"{name}: {what} must be a Python bool/int or a 0-d tensor, got "
                             f"a tensor of shape {list(value.shape)}")
        if is_float(spec(value)):
            if name == "switch":
                raise TypeError("switch: index must be an integer or bool, got a "
                                f"{value.dtype} tensor")
            value = value != 0
        return value if value.dtype == bool_ else value.to(dtype=int64)
    raise TypeError(f"{name}: {what} must be a Python bool/int or a 0-d tensor, got "
                    f"{type(value).__name__}")


def _branch(name, index, branches, operands):
    leaves, tree = as_tensor_leaves(operands, f"{name}'s operands")
    if not use_op_path():  # eager: Python takes the branch
        chosen = int(np.clip(int(index), 0, len(branches) - 1))
        return branches[chosen](*tree_unflatten(tree, leaves))
    bodies = [trace_body(lambda *xs, b=b: b(*tree_unflatten(tree, xs)), [spec(t) for t in leaves],
                         f"{name} branch {k}") for k, b in enumerate(branches)]
    _check_same_results(name, bodies)
    captured, graphs = _union_of_captures(bodies, len(leaves))
    plan = SwitchPlan(branches=tuple(graphs), n_consts=len(captured))
    outs = Switch.apply(plan, index, *captured, *leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return bodies[0].unflatten(list(outs))


def _check_same_results(name, bodies):
    first = bodies[0]
    for k, b in enumerate(bodies[1:], 1):
        if b.out_tree != first.out_tree or b.static != first.static:
            raise TypeError(f"{name}: branch 0 returns {describe_tree(first.out_tree)} but "
                            f"branch {k} returns {describe_tree(b.out_tree)}; branches must "
                            "return the same structure")
        if b.out_specs() != first.out_specs():
            raise TypeError(f"{name}: branches must return results of the same shapes and "
                            f"dtypes, but branch 0 returns {_fmt(first.out_specs())} and "
                            f"branch {k} returns {_fmt(b.out_specs())}")


def _fmt(specs):
    return "(" + ", ".join(format_spec(s) for s in specs) + ")"


def _union_of_captures(bodies, n_operands):
    """(every captured tensor once, each branch's graph taking all of them first)."""
    captured, where = [], {}
    for b in bodies:
        for t in b.captured:
            if id(t) not in where:
                where[id(t)] = len(captured)
                captured.append(t)
    graphs = []
    for b in bodies:
        mapping = [where[id(t)] for t in b.captured]
        graphs.append(_widened(b.graph, mapping, [spec(t) for t in captured], n_operands))
    return captured, graphs


def _widened(graph, mapping, captured_specs, n_operands):
    """A copy of `graph` whose inputs are (all captured..., operands...): its own
    captured input k becomes input mapping[k]; the captures it does not read are
    unused inputs."""
    g = graph.copy()
    own = len(mapping)
    for n in g.inputs:
        data = g.nx.nodes[n]
        i = data["index"]
        data["index"] = mapping[i] if i < own else len(captured_specs) + i - own
    used = set(mapping)
    for k, s in enumerate(captured_specs):
        if k not in used:
            g.add_input(s, index=k)
    return g
