"""Rematerialization: recompute cheap forward values of a vjp graph next to their
backward uses, so that an interpreter which frees values after their last use can drop
the forward values early (the graph-level twin of `ak.checkpoint`).

Owns: `remat`, its default policy `recompute_elementwise`, and the rule that splits a
vjp graph into forward and backward (`forward_nodes`, `count_forward_outputs`).
Does not: free anything (the interpreter does), or change what the graph computes.
The split, from structure alone: `vjp(g)` puts g's outputs first, so the forward nodes
are the op nodes that are ancestors of those first outputs; every other op node that
some output depends on is a backward node (gradient rules, including ones that read
primals only, like `cos a` for `sin a`); dead nodes are neither (run `dce` first). The
cotangents are the last inputs; the forward outputs depend on none of them.
"""
import math

import networkx as nx

from ...ops._families import BinaryElementwise, UnaryElementwise
from .cleanup import copy_op, has_in_place_ops


def recompute_elementwise(node_data):
    """The default policy: recompute elementwise ops (cheap: one pass over their
    operands), keep everything else (matmul, reductions, shape and indexing ops...)."""
    op = node_data["op"]
    return isinstance(op, type) and issubclass(op, (UnaryElementwise, BinaryElementwise))


def remat(graph, policy=None, *, max_depth=None, n_outputs=None):
    """Duplicate forward op nodes whose values backward nodes read, and let the backward
    nodes read the duplicates, placed just before their first use.

    `policy(node_data) -> bool` says which forward ops may be recomputed (default
    `recompute_elementwise`); the others are kept, as are forward values that are graph
    outputs. A duplicate reads the duplicates of its recomputable arguments, so a chain
    of them is recomputed from the nearest kept values; `max_depth` bounds such a chain
    (a recomputable node deeper than that is kept instead, a checkpoint). The default,
    the square root of the longest chain, keeps about sqrt(n) values of an n-op chain
    and recomputes the rest once (Chen et al. 2016). `n_outputs`: how many leading
    outputs are the forward's (default: `count_forward_outputs`).

    In: a vjp graph without in-place ops (one with them comes back unchanged). Out: the
    same outputs from the same inputs; validate() holds; the recomputed forward values
    are read by no backward node; nodes are renumbered in schedule order (the
    interpreter's lexicographic topological order runs each duplicate just before its
    first use); a duplicate carries `recomputes` = the id of the node it copies.

    The vjp graph of `a.sin().exp().sum()`: backward read `d`, which is now recomputed
    (h, i) right before its use, so `d` dies after the forward's `sum`:

        before                                        after
        { lambda ; a:f64[4] b:f64[]. let              { lambda ; a:f64[4] b:f64[]. let
            c:f64[4] = sin a                              c:f64[4] = sin a
            d:f64[4] = exp c                              d:f64[4] = exp c
            e:f64[] = sum[...] d                          e:f64[] = sum[...] d
            f:f64[1] = reshape[shape=(1,)] b              f:f64[1] = reshape[shape=(1,)] b
            g:f64[4] = expand[shape=(4,)] f               g:f64[4] = expand[shape=(4,)] f
            h:f64[4] = mul g d                            h:f64[4] = sin a
            i:f64[4] = cos a                              i:f64[4] = exp h
            j:f64[4] = mul h i                            j:f64[4] = mul g i
          in (e, j) }                                     k:f64[4] = cos a
                                                          l:f64[4] = mul j k
                                                        in (e, l) }
    """
    g = graph.copy()
    if has_in_place_ops(g):
        return g
    policy = recompute_elementwise if policy is None else policy
    schedule = g.topo_order()  # before any edit: the duplicates slot into this order
    forward = forward_nodes(g, n_outputs)
    recomputable = _recomputable(g, forward, policy)
    recomputable = _cut_chains(g, forward, recomputable, max_depth)
    dups = _redirect_backward_reads(g, forward, recomputable)
    if not dups:
        return g
    result = _renumbered(g, schedule, dups)
    result.validate()
    return result


# ------------------------------------------------------------------ the split
def forward_nodes(graph, n_outputs=None):
    """The op nodes that are ancestors of the first `n_outputs` outputs, in topological
    order (see the module docstring)."""
    k = count_forward_outputs(graph) if n_outputs is None else int(n_outputs)
    found = set()
    for out in graph.outputs[:k]:
        found |= nx.ancestors(graph.nx, out)
    return [n for n in graph.op_nodes if n in found]


def count_forward_outputs(graph):
    """How many leading outputs of a vjp graph are the forward's: the largest k such
    that the outputs split as k forward outputs (specs of the last k inputs, the
    cotangents, and depending on none of them) plus one gradient per other input."""
    inputs, outputs = graph.inputs, graph.outputs
    if len(inputs) != len(outputs):
        raise ValueError(f"remat: a vjp graph has as many outputs as inputs (got "
                         f"{len(outputs)} and {len(inputs)}); pass n_outputs=")
    specs_in = [graph.specs_of(n)[0] for n in inputs]
    specs_out = [graph.specs_of(n)[0] for n in outputs]
    for k in range(len(inputs) - 1, 0, -1):
        n_in = len(inputs) - k
        if specs_out[:k] != specs_in[n_in:] or specs_out[k:] != specs_in[:n_in]:
            continue
        cotangents = set(inputs[n_in:])
        if not any(cotangents & nx.ancestors(graph.nx, out) for out in outputs[:k]):
            return k
    raise ValueError("remat: cannot tell which outputs are the forward's (is this a vjp "
                     "graph?); pass n_outputs=")


# ------------------------------------------------------------------ what to recompute
def _recomputable(graph, forward, policy):
    """Forward op nodes the policy allows and whose value no output node reads."""
    found = set()
    for n in forward:
        read_by_output = any(graph.nx.nodes[v]["kind"] == "output"
                             for v in graph.nx.successors(n))
        if not read_by_output and policy(graph.nx.nodes[n]):
            found.add(n)
    return found


def _cut_chains(graph, forward, recomputable, max_depth):
    """Keep (drop from `recomputable`) every node at which a chain of recomputable nodes
    from kept values would exceed `max_depth` (default: sqrt of the longest chain)."""
    if max_depth is None:
        longest = max(_depths(graph, forward, recomputable, math.inf).values(), default=0)
        max_depth = max(1, math.ceil(math.sqrt(longest)))
    depth = _depths(graph, forward, recomputable, max_depth)
    return {n for n in recomputable if depth[n] > 0}


def _depths(graph, forward, recomputable, max_depth):
    """{node: length of the recomputation chain ending there}, 0 for a node kept (not
    recomputable, or cut because the chain would be longer than max_depth)."""
    depth = {}
    for n in forward:
        if n not in recomputable:
            depth[n] = 0
            continue
        d = 1 + max((depth.get(u, 0) for _, u, _ in graph.args_of(n)), default=0)
        depth[n] = d if d <= max_depth else 0
    return depth


# ------------------------------------------------------------------ editing
def _redirect_backward_reads(graph, forward, recomputable):
    """Make each backward op node read duplicates instead of recomputable forward
    values; returns {forward node: its duplicate}, one duplicate per forward node.
    Dead op nodes (no output depends on them) are left alone: duplicating for them
    would only make work."""
    forward_set = set(forward)
    live = set()
    for out in graph.outputs:
        live |= nx.ancestors(graph.nx, out)
    dups = {}
    for n in graph.op_nodes:
        if n in forward_set or n not in live:
            continue
        for u, _, key, data in list(graph.nx.in_edges(n, keys=True, data=True)):
            if u in recomputable:
                graph.nx.remove_edge(u, n, key=key)
                graph.nx.add_edge(_duplicate(graph, u, recomputable, dups), n, key=key,
                                  **data)
    return dups


def _duplicate(graph, n, recomputable, dups):
    """The duplicate of forward node n (made once), reading the duplicates of its
    recomputable arguments and the originals of the others. Iterative: chains can be
    longer than Python's recursion limit."""
    stack = [n]
    while stack:
        m = stack[-1]
        if m in dups:
            stack.pop()
            continue
        missing = [u for _, u, _ in graph.args_of(m) if u in recomputable and u not in dups]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        data = graph.nx.nodes[m]
        args = {pos: (dups.get(u, u), out) for pos, u, out in graph.args_of(m)}
        dups[m] = copy_op(graph, data, args)
        graph.nx.nodes[dups[m]]["recomputes"] = m
    return dups[n]


def _renumbered(graph, schedule, dups):
    """A copy whose ids follow the schedule: the original nodes in their original order
    (`schedule`), each duplicate (and the duplicates it reads) just before its first
    reader."""
    is_dup = set(dups.values())
    order, done = [], set()
    for n in schedule:
        _emit(graph, n, is_dup, order, done)
    mapping = {old: new for new, old in enumerate(order)}
    result = graph.copy()
    result.nx = nx.relabel_nodes(graph.nx, mapping, copy=True)
    for d in dups.values():
        result.nx.nodes[mapping[d]]["recomputes"] = mapping[graph.nx.nodes[d]["recomputes"]]
    return result


def _emit(graph, n, is_dup, order, done):
    """Append n to `order` after the duplicates it reads that are not there yet."""
    stack = [n]
    while stack:
        m = stack[-1]
        if m in done:
            stack.pop()
            continue
        waiting = [u for _, u, _ in graph.args_of(m) if u in is_dup and u not in done]
        if waiting:
            stack.extend(reversed(waiting))
            continue
        stack.pop()
        done.add(m)
        order.append(m)


__all__ = ["remat", "recompute_elementwise", "forward_nodes", "count_forward_outputs"]
