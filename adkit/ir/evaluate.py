"""Evaluating a Graph: `graph(*args)`.

Owns: calling a graph with tensors or arrays (checked against the traced signature), the
node-by-node interpreter, and `array_runner` (a graph made into a cached list of steps
on arrays, for loop bodies run many times). Every op node runs through `op.apply`, so
evaluating under autograd records a differentiable tape, and under another interpreter
(tracing, a transform) it is that interpreter's business: one loop for all uses
(Autodidax's point). Errors name the node: its printed line and the user source line
that made it.
"""
import weakref

import numpy as np

from .. import _dispatch
from .._pytree import tree_flatten, tree_unflatten
from ..autograd.grad_mode import no_grad
from ..tensor import Tensor, _make
from . import printing, rules


def _is_tensor_leaf(x):
    return isinstance(x, (Tensor, np.ndarray))


def call_graph(graph, args):
    """graph(*args): inputs as the traced function took them, results in its structure."""
    flat = flat_inputs(graph, args)
    outputs = run(graph, flat)
    if graph.out_tree is None:
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
    leaves, it = [], iter(outputs)
    n_leaves = len(graph.static_outputs) + len(outputs)
    for i in range(n_leaves):
        leaves.append(graph.static_outputs[i] if i in graph.static_outputs else next(it))
    return tree_unflatten(graph.out_tree, leaves)


def flat_inputs(graph, args, specs=None):
    """The flat input tensors of a call of `graph` with `args`, checked against the
    traced structure and `specs`, the inputs' TensorSpecs (None: the graph's)."""
    if graph.in_tree is not None:
        leaves, tree = tree_flatten(args, is_leaf=_is_tensor_leaf)
        if tree != graph.in_tree:
            raise TypeError("the graph was traced with arguments structured as "
                            f"{_describe(graph.in_tree)}, but got {_describe(tree)}")
        flat = []
        for i, leaf in enumerate(leaves):
            if i in graph.static_args:
                if not _same(leaf, graph.static_args[i]):
                    raise ValueError(f"static argument {i} was {graph.static_args[i]!r} when "
                                     f"the graph was traced, but got {leaf!r}: trace again")
            else:
                flat.append(leaf)
    else:
        flat = list(args)
    if specs is None:
        specs = [graph.specs_of(node)[0] for node in graph.inputs]
    if len(flat) != len(specs):
        raise TypeError(f"the graph takes {len(specs)} tensor inputs, got {len(flat)}")
    result = []
    for i, (value, want) in enumerate(zip(flat, specs)):
        t = value if isinstance(value, Tensor) else _make(np.asarray(value))
        got = rules.spec_of(t)
        if got != want:
            raise TypeError(f"input {i} of the graph is {printing.format_spec(want)}, got "
                            f"{printing.format_spec(got)} (graphs are specialized to the "
                            "shapes and dtypes they were traced with)")
        result.append(t)
    return result


def _same(a, b):
    try:
        return bool(a == b)
    except Exception:
        return a is b


def _describe(tree):
    """The structure as a user writes it, * for each tensor or value."""
    return f"{tree} (* is one tensor or value)" if tree.kind != "leaf" else "a single leaf"


def run(graph, inputs, *, as_recorded=False, on_node=None):
    """Evaluate node by node; returns the list of outputs in index order. With
    `as_recorded`, every op's value is broadcast to the shape its node records (a fused
    kernel's sub-graph reads some inputs un-expanded, but computes at the node shapes).
    `on_node(n, values)` is called after each op node has run (the vjp/jvp/vmap passes
    note there which new nodes each node of the graph they derive from gave)."""
    env, outputs = {}, {}
    order = graph.topo_order()
    last_use = {u: i for i, n in enumerate(order) for u in graph.nx.predecessors(n)}
    for i, n in enumerate(order):
        data = graph.nx.nodes[n]
        kind = data["kind"]
        if kind == "input":
            env[n] = (inputs[data["index"]],)
        elif kind == "const":
            env[n] = (_make(data["value"]),)
        elif kind == "op":
            env[n] = run_node(graph, n, data, env)
            if as_recorded:
                env[n] = tuple(_broadcast(r, spec) for r, spec in zip(env[n], data["specs"]))
            if on_node is not None:
                on_node(n, env[n])
        else:
            (_, u, out), = graph.args_of(n)
            outputs[data["index"]] = env[u][out]
        for u in graph.nx.predecessors(n):  # free values after their last use
            if last_use.get(u) == i:
                env.pop(u, None)
    return [outputs[i] for i in range(len(outputs))]


def run_node(graph, n, data, env):
    """Apply one op node to the values of its arguments; errors say which node failed."""
    tensors = {pos: env[u][out] for pos, u, out in graph.args_of(n)}
    try:
        args = rules.join_args(data["op"], tensors, data["params"])
        result = data["op"].apply(*args)
    except Exception as e:
        where = f" (traced at {data['source']})" if data.get("source") else ""
        e.add_note(f"While executing node {n}: {printing.node_line(graph, n)}{where}")
        raise
    return result if isinstance(result, tuple) else (result,)


def _broadcast(value, spec):
    if isinstance(value, Tensor) and value._data.shape != tuple(spec.shape):
        return _make(np.broadcast_to(value._data, tuple(spec.shape)))
    return value


def array_runner(graph):
    """graph as a function of numpy arrays (inputs in order) returning a list of arrays
    (outputs in order), built once per Graph object and cached: for loops, which run a
    body many times. Runs without interpreters or autograd."""
    runner = _RUNNERS.get(graph)
    if runner is None:
        runner = _RUNNERS[graph] = ArrayRunner(graph)
    return runner


_RUNNERS = weakref.WeakKeyDictionary()


class ArrayRunner:
    """A graph made into a list of steps once, so that a loop runs its body without
    walking the graph each step: built-in ops call their numpy forward on arrays; other
    ops (user Functions, in-place writes) go through `apply` on tensors."""

    def __init__(self, graph):
        self._graph = weakref.ref(graph)  # for error notes (a strong one: never freed)
        slot = {}
        for n in graph.inputs:
            slot[(n, 0)] = graph.nx.nodes[n]["index"]
        self.n_inputs, self.values, self.steps = len(graph.inputs), [], []
        for n in graph.topo_order():
            data = graph.nx.nodes[n]
            if data["kind"] == "const":
                slot[(n, 0)] = self.n_inputs + len(self.values)
                self.values.append(data["value"])
            elif data["kind"] == "op":
                self.steps.append(_Step(graph, n, data))
        self._slots(graph, slot)

    def _slots(self, graph, slot):
        """Number every op output after the inputs and consts."""
        k = self.n_inputs + len(self.values)
        for step in self.steps:
            step.first = k
            for i in range(step.n_out):
                slot[(step.node, i)] = k + i
            k += step.n_out
        for step in self.steps:
            step.sources = {pos: slot[key] for pos, key in step.arg_keys.items()}
        self.outputs = [slot[(u, out)] for n in graph.outputs
                        for _, u, out in graph.args_of(n)]
        self.size = k
        # each value is dropped after the last step that reads it: a big graph's
        # footprint stays that of its widest point, and malloc reuses the freed memory
        # (fresh large arrays cost page faults)
        last = {src: i for i, step in enumerate(self.steps) for src in step.sources.values()}
        free = [[] for _ in self.steps]
        for src, i in last.items():
            if src not in self.outputs:
                free[i].append(src)
        for step, slots in zip(self.steps, free, strict=True):
            step.free = tuple(slots)

    def __call__(self, arrays):
        env = list(arrays) + self.values + [None] * (self.size - self.n_inputs -
                                                     len(self.values))
        for step in self.steps:
            try:
                step.run(env)
            except Exception as e:
                self._note(e, step.node)
                raise
            for k in step.free:
                env[k] = None
        return [env[i] for i in self.outputs]

    def _note(self, error, n):
        """Name the failing node and the user's line that made it, as run_node does."""
        graph = self._graph()
        if graph is None:
            return
        data = graph.nx.nodes[n]
        where = f" (traced at {data['source']})" if data.get("source") else ""
        error.add_note(f"While executing node {n}: {printing.node_line(graph, n)}{where}")


class _Step:
    """One op node: its forward on the env's arrays, its results into the env."""

    def __init__(self, graph, n, data):
        self.node, self.op = n, data["op"]
        self.n_out = len(data["specs"])
        self.arg_keys = {pos: (u, out) for pos, u, out in graph.args_of(n)}
        self.template = rules.join_args(self.op, dict.fromkeys(self.arg_keys),
                                        data["params"])
        self.direct = getattr(self.op, "_arrays_in", False) and self.op.modifies is None

    def run(self, env):
        call = list(self.template)
        for pos, k in self.sources.items():
            call[pos] = env[k]
        if self.direct:
            raw = self.op.forward(*call)
            outs = raw if isinstance(raw, (tuple, list)) else (raw,)
            outs = [np.asarray(o) for o in outs]
        else:
            tensors = [_make(np.asarray(c)) if k in self.sources else c
                       for k, c in enumerate(call)]
            with _dispatch.no_interpreters(), no_grad():
                result = self.op.apply(*tensors)
            outs = [r._data for r in (result if isinstance(result, tuple) else (result,))]
        env[self.first:self.first + self.n_out] = outs
