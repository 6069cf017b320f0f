"""What the loop and branch ops share: when to build a node, carry checks, plans.

Owns: `PlanOp` (the base of the loop and branch ops), `use_op_path` (a higher-order op
builds its node under tracing or vmap, or when checkpointing asks for it; otherwise
Python runs the loop and autograd records it), `as_tensor_leaves` (a pytree's leaves as
tensors), `check_same_specs` (JAX's carry checks, naming the leaf), `Plan` (the params
object of a higher-order op node: its bodies plus static facts, with a per-plan cache of
derived plans), and small tensor helpers the rules share. Does not: define any op.
"""
import dataclasses

import numpy as np

from .. import _dispatch
from .._pytree import tree_flatten
from ..func._vmap import BatchInterpreter
from ..ir import printing, rules
from ..ir.trace import TracingInterpreter
from ..ops._families import ArrayFunction
from ..tensor import Tensor, _make, tensor, zeros
from .body import is_tensor


def use_op_path(checkpoint=None):
    """Whether a higher-order op becomes one node: under tracing or vmap (its body then
    cannot depend on values anyway), or when reverse mode must checkpoint."""
    if checkpoint is not None:
        return True
    return any(isinstance(i, (TracingInterpreter, BatchInterpreter))
               for i in _dispatch._STACK.get())


def as_tensor_leaves(tree, what):
    """(tensor leaves, tree spec) of `tree`; Python numbers become tensors."""
    leaves, spec = tree_flatten(tree, is_leaf=is_tensor)
    out = []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            out.append(leaf)
        elif isinstance(leaf, (bool, int, float, np.number, np.ndarray)):
            out.append(tensor(leaf))
        else:
            raise TypeError(f"{what} must be a pytree of tensors, but it has a leaf of "
                            f"type {type(leaf).__name__}")
    return out, spec


def leaf_path(spec, i):
    """A readable path to leaf number i of a tree spec, like carry[1]['h']."""
    path, counter = [], [i]

    def walk(s, here):
        if s.kind == "leaf":
            if counter[0] == 0:
                path.extend(here)
                return True
            counter[0] -= 1
            return False
        keys = s.meta if s.kind == "dict" else range(len(s.children))
        return any(walk(c, here + [repr(k) if s.kind == "dict" else str(k)])
                   for k, c in zip(keys, s.children))

    walk(spec, [])
    return "".join(f"[{p}]" for p in path)


def check_same_specs(what, in_tree, in_specs, out_tree, out_specs):
    """JAX's carry rule: the body returns the carry with the structure, shapes and dtypes
    it got (no silent promotion)."""
    if out_tree != in_tree:
        raise TypeError(f"{what} must have the same pytree structure as its input, but "
                        f"the input is {describe_tree(in_tree)} and the output is "
                        f"{describe_tree(out_tree)}")
    for i, (a, b) in enumerate(zip(in_specs, out_specs)):
        if a != b:
            kind = "dtype" if a.shape == b.shape else "shape"
            error = TypeError if kind == "dtype" else ValueError
            raise error(f"{what}{leaf_path(in_tree, i)} is {printing.format_spec(a)} on "
                        f"input but {printing.format_spec(b)} on output: the {kind}s "
                        "differ (carries must keep their shape and dtype)")


def describe_tree(spec):
    if spec.kind == "leaf":
        return "a leaf"
    inner = ", ".join(describe_tree(c) for c in spec.children)
    if spec.kind == "dict":
        inner = ", ".join(f"{k!r}: {describe_tree(c)}" for k, c in zip(spec.meta, spec.children))
        return "{" + inner + "}"
    return f"{spec.kind}({inner})"


class PlanOp(ArrayFunction):
    """A higher-order op: its first argument is its plan (a Plan), the rest tensors.
    What every such op's autograd context keeps: the plan and the tensor arguments."""
    variants = ()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.plan = inputs[0]
        ctx.save_for_backward(*inputs[1:])


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """Params of a higher-order op node: subclasses add bodies (Graph fields named in
    `body_fields`) and static facts. Compared by identity; `cache` holds plans derived
    from this one (its vjp, jvp...) so each is built once."""
    cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    body_fields = ()

    def bodies(self):
        """{name: Graph} of every body (for printing and passes that recurse)."""
        out = {}
        for name in self.body_fields:
            value = getattr(self, name)
            if isinstance(value, tuple):
                out.update({f"{name}[{i}]": g for i, g in enumerate(value)})
            else:
                out[name] = value
        return out

    def with_bodies(self, bodies):
        """A new plan with the bodies replaced ({name: Graph}, as `bodies()` names them)."""
        changes = {}
        for name in self.body_fields:
            value = getattr(self, name)
            if isinstance(value, tuple):
                changes[name] = tuple(bodies.get(f"{name}[{i}]", g)
                                      for i, g in enumerate(value))
            else:
                changes[name] = bodies.get(name, value)
        return dataclasses.replace(self, cache={}, **changes)

    def check_arguments(self, arrays, expected, what):
        """Raise ValueError unless the node's tensor arguments have the specs its bodies
        take (`expected`, in argument order): how validate() catches a body and a node
        that disagree."""
        got = [rules.spec_of(a) for a in arrays]
        if got != list(expected):
            raise ValueError(f"{what}: the node's arguments are "
                             f"{[printing.format_spec(s) for s in got]} but its bodies take "
                             f"{[printing.format_spec(s) for s in expected]}")

    def derived(self, key, build):
        if key not in self.cache:
            self.cache[key] = build()
        return self.cache[key]

    def __repr__(self):
        facts = " ".join(f"{f.name}={getattr(self, f.name)!r}"
                         for f in dataclasses.fields(self)
                         if f.name not in self.body_fields and f.name != "cache")
        return f"{type(self).__name__}({facts})"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class StepPlan(Plan):
    """One step graph as a node's param (a reverse pass's step), so that passes that
    recurse into bodies (dce, fuse...) reach it too."""
    graph: object = None
    body_fields = ("graph",)


def example(spec):
    """A zero tensor of a TensorSpec (what passes trace wrappers with)."""
    return _make(np.zeros(spec.shape, spec.dtype.np))


def stacked(spec, length):
    """The spec of `length` values of `spec` stacked on a new leading dim."""
    return rules.TensorSpec((length,) + tuple(spec.shape), spec.dtype)


def zeros_of(spec):
    return zeros(tuple(spec.shape), dtype=spec.dtype)


def is_float(spec):
    return spec.dtype.np.kind in "fc"


def spec(t):
    return rules.spec_of(t)


def materialize(values, specs):
    """Missing cotangents/tangents (None) as zeros of the matching spec."""
    return [zeros_of(s) if v is None else v for v, s in zip(values, specs)]
