"""Where each node of a derived graph came from: the `origin` the vjp, jvp and vmap
passes put on every node they make.

Owns: `Origin` and `Tagger`, which the passes in autodiff.py drive while they trace.
Each node of the graph a pass is given runs (evaluate.run's `on_node`) in a window of
its own: the nodes traced in that window recompute it ("forward"), or come from its jvp
rule ("tangent") or its batching rule ("batched"). In a vjp, each autograd node's
pre-hook opens the window of its backward rule ("backward") and names the gradients it
receives after their primals. Does not: change what the passes compute (the hooks
return nothing), or draw (pictures.py reads `origin`).
"""
from typing import NamedTuple

from ... import _dispatch
from ..trace import TracerTensor


class Origin(NamedTuple):
    """`role`: "forward", "backward", "tangent" or "batched". `source`: the node of the
    graph the pass was given that this node was made for (None: the pass's own
    plumbing). `primal`: for a gradient or tangent value, the (node, out) of this graph
    whose gradient or tangent it is, else None."""
    role: str
    source: object = None
    primal: object = None

    def merge(self, other):
        """This origin, on a node that now also stands for `other`'s node (cse merged
        them, or simplify replaced that one by this one): a gradient name is kept."""
        if self.primal is None and isinstance(other, Origin) and other.role == self.role:
            return self._replace(primal=other.primal)
        return self


class Tagger:
    """Tags the nodes of the graph being traced, window by window."""

    def __init__(self, source_graph, role):
        self.source_graph, self.role = source_graph, role
        self.graph, self.seen = None, set()
        self.value = {}        # (source node, out) -> (traced node, out)
        self.primal = {}       # traced node -> (traced node, out) it is the gradient of
        self.owner = None      # the source node whose backward rule is running
        self.hooked = set()

    def start(self, args):
        """At the top of the traced function: find the graph being traced, and map the
        source graph's inputs to the traced inputs `args`."""
        self.graph = _dispatch.current_interpreter().graph
        for n, t in zip(self.source_graph.inputs, args):
            self.value[(n, 0)] = (t._node, t._out)
        for n in self.source_graph.nodes_of("const"):
            self.value.pop((n, 0), None)
        self.seen = set(self.graph.nx)

    def close(self, role, source, forward=()):
        """Tag the nodes traced since the last call: those in `forward` (and what they
        were computed from, within the window) "forward", the rest `role`."""
        new = [n for n in self.graph.nx if n not in self.seen]
        self.seen.update(new)
        window, primal, stack = set(new), set(), [n for n in forward if n in new]
        while stack:  # what the primal outputs were computed from, in this window
            n = stack.pop()
            if n not in primal:
                primal.add(n)
                stack.extend(u for u in self.graph.nx.predecessors(n) if u in window)
        # NB: the tracer saw the pass's own frames; the user's line is the source node's
        line = self.source_graph.nx.nodes[source].get("source") if source is not None \
            else None
        for n in new:
            data = self.graph.nx.nodes[n]
            data["origin"] = Origin("forward" if n in primal else role, source)
            if line is not None and data["kind"] == "op":
                data["source"] = line

    def on_node(self, n, values):
        """evaluate.run's hook: the window of source node n is over."""
        traced = [t for t in values if isinstance(t, TracerTensor)]
        for i, t in enumerate(values):
            if isinstance(t, TracerTensor):
                self.value[(n, i)] = (t._node, t._out)
        # under a jvp the values are the primal results (their tangents ride along)
        self.close(self.role, n, [t._node for t in traced] if self.role == "tangent" else ())
        if self.role == "forward":  # a vjp: be told when each backward rule starts
            for t in traced:
                if t.grad_fn is not None and id(t.grad_fn) not in self.hooked:
                    self.hooked.add(id(t.grad_fn))
                    t.grad_fn.register_prehook(self._backward_rule(n, values))

    def _backward_rule(self, n, values):
        outs = {t.output_nr: (t._node, t._out) for t in values if isinstance(t, TracerTensor)}

        def hook(grads):
            self.close("backward", self.owner)
            self.owner = n
            for nr, g in enumerate(grads):
                if isinstance(g, TracerTensor) and nr in outs:
                    self.primal.setdefault(g._node, outs[nr])
        return hook

    def finish(self, derived, inputs=(), outputs=()):
        """After tracing: tag the last window, name the gradients met, and tag the
        derived graph's inputs and outputs: `inputs`/`outputs` are, per index,
        (role, source, primal) with primal a (source node, out) or a traced input index."""
        self.close("backward" if self.role == "forward" else self.role, self.owner)
        g = derived.nx
        for node, primal in self.primal.items():
            origin = g.nodes[node].get("origin") if node in g else None
            if origin is not None and origin.role != "forward":
                g.nodes[node]["origin"] = origin._replace(primal=primal)
        for nodes, tags in ((derived.inputs, inputs), (derived.outputs, outputs)):
            for node, (role, source, primal) in zip(nodes, tags):
                g.nodes[node]["origin"] = Origin(role, source, self._traced(derived, primal))
        for node in derived.outputs:  # what computes a gradient output is that gradient
            origin, (u, _) = g.nodes[node]["origin"], output_value(derived, g.nodes[node]["index"])
            mine = g.nodes[u].get("origin")
            if origin.primal is not None and g.nodes[u]["kind"] == "op" and \
                    mine is not None and mine.role == origin.role and mine.primal is None:
                g.nodes[u]["origin"] = mine._replace(primal=origin.primal)
        return derived

    def _traced(self, derived, primal):
        if primal is None:
            return None
        if isinstance(primal, int):
            return (derived.inputs[primal], 0)
        return self.value.get(tuple(primal))


def output_value(graph, index):
    """(node, out) whose value is output `index` of `graph`."""
    (_, u, out), = graph.args_of(graph.outputs[index])
    return (u, out)
