"""fuse: group chains of elementwise ops into FusedKernel nodes (still a Graph).

Owns: `FusedKernel` (a Function whose params hold the fused sub-graph: evaluating it
runs the sub-graph with numpy; the jit lowers it to one native loop) and `fuse`.
Does not: generate code. A node is fusible when its op has a `lower` hook, its output
is float32/float64 with the same shape and dtype as the rest of its group, and its
tensor arguments have that dtype. Groups never create a cycle in the graph.

    before:  c = mul a b;  d = exp c;  e = sum d
    after:   d = fused_kernel[graph=<mul, exp>] a b;  e = sum d
"""
import networkx as nx
import numpy as np

from ...autograd.function import Function
from ...ops.reduction import Sum
from ...ops.shape import Expand
from ...tensor import _make
from .. import evaluate
from ..graph import Graph


_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # what kernels compute in


class FusedKernel(Function):
    """Several elementwise ops as one node: `graph` is the fused sub-graph; the node's
    tensor arguments are its inputs, its outputs the sub-graph's outputs."""

    _arrays_in = True
    public_name = "fused_kernel"

    @staticmethod
    def forward(graph, *arrays):
        outs = evaluate.run(graph, [_make(np.asarray(a)) for a in arrays])
        # inputs may be un-expanded (see _source): broadcast back to the node's shapes
        outs = [np.array(np.broadcast_to(o._data, graph.specs_of(n)[0].shape))
                for o, n in zip(outs, graph.outputs)]
        return tuple(outs) if len(outs) > 1 else outs[0]

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("a FusedKernel is made for execution: differentiate the graph "
                           "before fusing it (ak.ir.passes.vjp, or ak.jit(ak.func.grad(f)))")


def _fusible(graph, n):
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or getattr(data["op"], "lower", None) is None:
        return False
    if len(data["specs"]) != 1 or data["dtype"].np not in _NATIVE_FLOATS:
        return False
    if any(a is not None for a in data.get("aliases", ())):
        return False
    return all(graph.specs_of(u)[out].dtype == data["dtype"]
               for _, u, out in graph.args_of(n))


def fuse(graph):
    """Replace each group of connected fusible nodes (one shape, one dtype) by a
    FusedKernel node. Returns a new graph; the input is unchanged."""
    g = graph.copy()
    for members in _groups(graph):  # a lone op too: it still becomes one native loop
        _replace_group(g, members)
    return g


def _total_sum_of_member(graph, n, group_of):
    """The group a whole-tensor sum joins: `n` sums (dim=None, no keepdim, no dtype)
    a group member of the same dtype that nothing else reads; the kernel then adds up
    the values as it makes them, never storing the tensor."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or data["op"] is not Sum:
        return None
    params = data["params"]
    if params.get("dim") is not None or params.get("keepdim") or \
            params.get("dtype") is not None:
        return None
    (_, u, _), = graph.args_of(n)
    gid = group_of.get(u)
    if gid is None or graph.nx.out_degree(u) != 1 or \
            graph.nx.nodes[u]["dtype"] != data["dtype"]:
        return None
    return gid


def _groups(graph):
    """Fusible nodes grouped greedily in topological order, merging a node into a
    producer's group when shapes and dtypes match and no cycle results; whole-tensor
    sums of a member join its group as reductions."""
    group_of, groups = {}, []
    for n in graph.topo_order():
        gid = _total_sum_of_member(graph, n, group_of)
        if gid is not None:
            groups[gid]["nodes"].append(n)
            group_of[n] = gid
            continue
        if not _fusible(graph, n):
            continue
        data = graph.nx.nodes[n]
        target = None
        for _, u, _ in graph.args_of(n):
            gid = group_of.get(u)
            if gid is not None and groups[gid]["key"] == (data["shape"], data["dtype"]) \
                    and _acyclic_with(graph, groups[gid]["nodes"] + [n]):
                target = gid
                break
        if target is None:
            groups.append({"key": (data["shape"], data["dtype"]), "nodes": []})
            target = len(groups) - 1
        groups[target]["nodes"].append(n)
        group_of[n] = target
    return [grp["nodes"] for grp in groups]


def _acyclic_with(graph, members):
    """Whether contracting `members` into one node keeps the graph acyclic: no path
    leaves the group and comes back into it."""
    inside = set(members)
    outside_succ = {v for m in members for v in graph.nx.successors(m) if v not in inside}
    if not outside_succ:
        return True
    reach = set()
    for v in outside_succ:
        reach |= nx.descendants(graph.nx, v) | {v}
    return not (reach & inside)


def _source(g, u, out):
    """Where a kernel should read argument (u, out): through an expand (broadcast) node,
    its input, since the kernel reads broadcast inputs with zero strides (no copy)."""
    data = g.nx.nodes[u]
    if data["kind"] == "op" and data["op"] is Expand:
        (_, v, v_out), = g.args_of(u)
        return (v, v_out)
    return (u, out)


def _replace_group(g, members):
    members = sorted(members)
    inside = set(members)
    sub, inputs, mapping = Graph(), [], {}
    for n in members:
        args = {}
        for pos, u, out in g.args_of(n):
            if u in inside:
                args[pos] = (mapping[u], 0)  # members have one output each
            else:
                key = _source(g, u, out)
                if key not in inputs:
                    inputs.append(key)
                    mapping[key] = sub.add_input(g.specs_of(key[0])[key[1]],
                                                 inputs.index(key))
                args[pos] = (mapping[key], 0)
        data = g.nx.nodes[n]
        mapping[n] = sub.add_op(data["op"], args, data["params"], data["specs"],
                                source=data.get("source"))
    exported = [n for n in members
                if any(v not in inside for v in g.nx.successors(n))]
    for n in exported:
        sub.add_output((mapping[n], 0))
    specs = [g.nx.nodes[n]["specs"][0] for n in exported]
    node = g.add_op(FusedKernel, {1 + i: key for i, key in enumerate(inputs)},
                    {"graph": sub}, specs)
    for i, n in enumerate(exported):
        for _, v, key, edge in list(g.nx.out_edges(n, keys=True, data=True)):
            if v not in inside:
                g.nx.remove_edge(n, v, key=key)
                g.nx.add_edge(node, v, key=key, pos=edge["pos"], out=i)
    g.nx.remove_nodes_from(members)
    return node


__all__ = ["fuse", "FusedKernel"]
