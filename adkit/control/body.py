"""Bodies of higher-order ops: a Python callable traced once, on abstract values, into a
closed sub-Graph.

Owns: `trace_body` (the callable's tensor leaves in, its result's leaves out; every
tensor it closes over becomes an explicit extra input, JAX's "consts"), `Body` (the
graph, the captured tensors, the result's structure) and `fresh` (a loop's or a
branch's results as arrays of their own). Does not: run bodies (ir.evaluate's
array_runner), know which op a body belongs to, or transform bodies (the op rules call
ir.passes).

Why every closed-over tensor becomes an input, whatever it is (a tracer of an outer
trace, a vmap-batched tensor, a forward-AD dual, a leaf that requires grad, a plain
constant): the node's edges then show every dependency, and each outer level sees the
value as an argument of the op, so its rule (vjp, jvp, batching) handles it.
"""
import dataclasses

import numpy as np

from .. import _dispatch
from .._pytree import tree_flatten, tree_unflatten
from ..autograd.grad_mode import no_grad
from ..ir import rules
from ..ir.graph import Graph
from ..ir.trace import TracerTensor, TracingInterpreter
from ..tensor import Tensor, _make


class NonTensorResult(TypeError):
    """A traced body returned something other than tensors, numbers and None (a jitted
    function called under a transform then runs as Python: codegen/call.py)."""


def is_tensor(x):
    return isinstance(x, Tensor)


class _BodyTracer(TracingInterpreter):
    """A trace in which any tensor that is not this trace's own becomes a new input."""

    def __init__(self, graph):
        super().__init__(graph)
        self.captured = []  # the outer tensors, in the order their inputs were made
        self._captured_ids = {}

    def lift(self, value):
        if isinstance(value, TracerTensor) and value._interpreter is self:
            return value._node, value._out
        key = id(value)
        if key not in self._captured_ids:
            spec = rules.spec_of(value)
            node = self.graph.add_input(spec, index=-1 - len(self.captured))
            self._captured_ids[key] = node
            self.captured.append(value)
        return self._captured_ids[key], 0


@dataclasses.dataclass(frozen=True, eq=False)
class Body:
    """A traced body: `graph` takes (captured..., explicit leaves...) and returns the
    result's tensor leaves; `static` holds the result's non-tensor leaves by position
    (only None is allowed there), `out_tree` the result's structure."""
    graph: Graph
    captured: tuple
    out_tree: object
    static: dict

    @property
    def n_captured(self):
        return len(self.captured)

    def out_specs(self):
        return self.graph.output_specs()

    def unflatten(self, tensors):
        """The result's structure filled with `tensors` (and its None leaves)."""
        it = iter(tensors)
        n = len(self.static) + len(self.graph.outputs)
        leaves = [self.static[i] if i in self.static else next(it) for i in range(n)]
        return tree_unflatten(self.out_tree, leaves)


def trace_body(fn, arg_specs, what):
    """Trace fn(*tracers of arg_specs) into a Body. `what` names the callable in errors
    ("scan body", "true branch"...). Runs without autograd: a body that differentiates
    something inside (a gradient step) turns grad mode on itself, as func.grad does."""
    graph = Graph()
    tracer = _BodyTracer(graph)
    tracer.purpose = what  # so a shape error in the body names it
    leaves = [tracer.new_input(spec, i) for i, spec in enumerate(arg_specs)]
    with _dispatch.no_interpreters(), _dispatch.interpreting(tracer), no_grad():
        result = fn(*leaves)
        out_leaves, out_tree = tree_flatten(result, is_leaf=is_tensor)
        static = {}
        for i, leaf in enumerate(out_leaves):
            if isinstance(leaf, (int, float, bool, np.number)) and not isinstance(leaf, Tensor):
                leaf = _make(np.asarray(leaf))  # a Python number: a constant tensor
            if isinstance(leaf, Tensor):
                graph.add_output(tracer.lift(leaf))
            elif leaf is None:
                static[i] = None
            else:
                raise NonTensorResult(f"the {what} returned a {type(leaf).__name__} "
                                      "among its results; results must be tensors (or None)")
    _number_inputs(graph, len(tracer.captured))
    return Body(graph, tuple(tracer.captured), out_tree, static)


def _number_inputs(graph, n_captured):
    """Captured inputs (numbered -1, -2, ... while tracing) first, then the explicit
    ones, so the graph's inputs are (captured..., explicit...)."""
    for n in graph.nx.nodes:
        data = graph.nx.nodes[n]
        if data["kind"] == "input":
            index = data["index"]
            data["index"] = -1 - index if index < 0 else index + n_captured


def fresh(outputs, inputs):
    """The outputs as arrays of their own: one that is, or views, an input's memory (a
    loop that ran no step, a branch returning its operand) is copied, so an op's results
    never alias its arguments."""
    out = []
    for o in outputs:
        o = np.asarray(o)
        # may_share_memory: a bounds check (shares_memory's exact answer can cost far
        # more); a false alarm only costs a copy
        if any(np.may_share_memory(o, a) for a in inputs if isinstance(a, np.ndarray)):
            o = o.copy()
        out.append(o)
    return tuple(out)
