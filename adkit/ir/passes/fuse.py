"""fuse: group chains of elementwise ops and the reductions of their results into
FusedKernel nodes (still a Graph).

Owns: `FusedKernel` (a Function whose params hold the fused sub-graph: evaluating it
runs the sub-graph with numpy; the jit lowers it to one native loop nest) and `fuse`.
Does not: generate code, know ops by name, or answer what one node is (fusible.py):
what may fuse is said by each op's class (`lower`, `native_reduction` with
`reduced_dims`, `native_contraction`, `native_broadcast`). A node is fusible when its
op has a `lower` hook, its output is float32/float64 with the same shape and dtype as
the rest of its group, and its tensor arguments have that dtype. A reduction (sum, mean, sum_to_size,
prod, amax, amin) over any dims joins the group of what it reduces; a matmul with a
short contracted dim (`contraction`) starts a group its consumers join. Groups never
create a cycle. First, contract_first.py rewrites long contractions of row-scaled matmul
results to read the matmul's narrow operand instead (what it leaves unread goes).

    before:  c = mul a b;  d = exp c;  e = sum[dim=1] d
    after:   e = fused_kernel[graph=<mul, exp, sum[dim=1]>] a b     (d is never stored)
"""
import math

import numpy as np

from ...autograd.function import Function
from ...tensor import _make
from .. import evaluate
from ..graph import Graph
from .cleanup import copy_op, dce, has_in_place_ops
from .contract_first import contract_first
from .editing import edits
# (the questions live in fusible.py; codegen and adkit.control import them from here)
from .fusible import (REDUCTIONS, Facts, compute_dtype, contraction,  # noqa: F401
                      reduction_dims, row_product, squeezed, unit_view)


class FusedKernel(Function):
    """Several elementwise ops as one node: `graph` is the fused sub-graph; the node's
    tensor arguments are its inputs, its outputs the sub-graph's outputs."""

    _arrays_in = True
    public_name = "fused_kernel"

    @staticmethod
    def forward(graph, *arrays):
        outs = evaluate.run(graph, [_make(np.asarray(a)) for a in arrays], as_recorded=True)
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


@edits
def fuse(g):
    """Replace each group of connected fusible nodes (one shape, one dtype) by a
    FusedKernel node. Returns a new graph; the input is unchanged. A graph with
    in-place ops is left as it is: a kernel runs where its last member was, which may
    be after an in-place write its first members must not see."""
    if has_in_place_ops(g):
        return g
    if contract_first(g):  # before grouping: what it leaves unread goes first
        g = dce.in_place(g)
    facts = Facts(g)  # (from here on, edges move between equal values only)
    _recompute_cheap_reads(g, facts)
    order = g.topo_order()
    rank = {n: i for i, n in enumerate(order)}
    groups, products = _groups(g, order, facts)  # (all of them before any is replaced)
    for members in groups:  # a lone op too: it still becomes one native loop
        _replace_group(g, sorted(members, key=rank.get), products, facts)
    return g


# Each fused reader of a value recomputes it, instead of one kernel storing it and the
# others loading it, when it is an elementwise op of one value that is in memory anyway
# and of small ones (at most 1/SMALL_FRACTION as many elements): recomputing reads what
# loading would, and no kernel stores it. (A GMM gradient's y = x Q_k - mu_k Q_k, read by
# the objective's sum of squares and by the backward, was stored and reloaded: 80 MB
# each way per call at ADBench's large size.)
SMALL_FRACTION = 8


def _recompute_cheap_reads(g, facts):
    """Give every fused reader but the first of each such value its own copy of it."""
    order = g.topo_order()
    rank = {n: i for i, n in enumerate(order)}
    for v in order:
        if not _cheap_to_recompute(g, v, facts):
            continue
        readers = sorted({w for w in g.nx.successors(v) if _fused_reader(g, w, facts)},
                         key=rank.get)
        data = g.nx.nodes[v]
        args = {pos: (u, out) for pos, u, out in g.args_of(v)}
        for w in readers[1:]:
            copy = copy_op(g, data, args)
            for key, edge in list(g.nx._succ[v][w].items()):  # (networkx's own dict)
                g.nx.remove_edge(v, w, key=key)
                g.nx.add_edge(copy, w, key=key, pos=edge["pos"], out=edge["out"])


def _cheap_to_recompute(g, v, facts):
    """Whether v is an elementwise op of one big value in memory and small ones."""
    data = g.nx.nodes[v]
    dtype = facts(compute_dtype, v)  # (a dtype equals None: numpy reads None as float64)
    if dtype is False or dtype is None or facts(contraction, v) is not None or \
            facts(reduction_dims, v) is not None or facts(unit_view, v) or \
            getattr(data["op"], "is_view", False):
        return False
    size = math.prod(data["shape"])  # (numpy's prod costs microseconds on a tuple)
    big = [u for _, u, out in g.args_of(v)
           if SMALL_FRACTION * math.prod(g.specs_of(u)[out].shape) > size]
    return len(big) == 1 and _in_memory(g, big[0], facts)


def _in_memory(g, u, facts):
    """Whether value-making node u's result is stored whatever fuse does: an input, a
    constant, or an op no kernel computes (a BLAS product, a numpy op)."""
    data = g.nx.nodes[u]
    if data["kind"] in ("input", "const"):
        return True
    if facts(contraction, u) is not None or facts(reduction_dims, u) is not None or \
            facts(unit_view, u):
        return False
    return facts(compute_dtype, u) is False or \
        getattr(data["op"], "native_contraction", False)


def _fused_reader(g, w, facts):
    """Whether op w will be computed inside a kernel (so it can recompute what it reads)."""
    if g.nx.nodes[w]["kind"] != "op":
        return False
    dtype = facts(compute_dtype, w)
    return (dtype is not False and dtype is not None) or \
        facts(reduction_dims, w) is not None


def _place_row_product(graph, n, group_of, groups, rank):
    """A row product joins the group making its B when that group iterates over
    exactly B's shape (else it stays a BLAS product); it is a group's end."""
    (_, a, _), (_, b, _) = sorted(graph.args_of(n))
    gid = group_of.get(b)
    if gid is None or group_of.get(a) == gid or b in groups[gid]["ends"] or \
            groups[gid]["mixed"] or \
            groups[gid]["shape"] != tuple(graph.nx.nodes[b]["shape"]) or \
            not _acyclic_with(graph, *_with(graph, groups[gid], n), group_of, groups, rank):
        return
    _admit(graph, groups[gid], n)
    groups[gid]["ends"].add(n)
    groups[gid]["exact"] = True
    groups[gid].setdefault("products", set()).add(n)
    group_of[n] = gid


def _unread_rows(graph, groups, group_of):
    """Take out of their groups the row products whose B something outside the group
    reads: B is then stored whole anyway, and BLAS reads it as well."""
    for grp in groups:
        for n in sorted(grp.get("products", ())):
            (_, b, _), = [arg for arg in graph.args_of(n) if arg[0] == 1]
            if any(group_of.get(v) != group_of[n] for v in graph.nx.successors(b)):
                grp["nodes"].remove(n)
                grp["products"].discard(n)
                del group_of[n]


def _groups(graph, order, facts):
    """Fusible nodes grouped greedily in topological order, merging a node into a
    producer's group when shapes and dtypes match and no cycle results. Shapes match
    when they differ only in unit dims (a group then iterates over the shape without
    them; views that only add or drop unit dims join as their input's value), except
    in a group with reductions or inline matmuls, whose dims are exact. A reduction
    joins the group of the member it reduces (else it makes a group of its own); it
    is a group's end: no member of its group may read it. `order`: the graph's
    topological order; `facts`: the graph's Facts."""
    group_of, groups = {}, []
    rank = {n: i for i, n in enumerate(order)}
    for n in order:
        data = graph.nx.nodes[n]
        if facts(contraction, n) is not None:  # starts a group: it reads its operands
            groups.append(_group(data["shape"], data["dtype"].np, exact=True))
            groups[-1]["contracts"] = True  # at other indices, so from memory
        elif facts(reduction_dims, n) is not None:
            _place_reduction(graph, n, group_of, groups, rank)
            continue
        elif row_product(graph, n):
            _place_row_product(graph, n, group_of, groups, rank)
            continue
        elif facts(unit_view, n):
            _place_view(graph, n, group_of, groups, rank)
            continue
        else:
            dtype = facts(compute_dtype, n)
            if dtype is False:
                continue
            args = [u for _, u, _ in graph.args_of(n)]
            target = next((gid for gid in map(group_of.get, args) if gid is not None and
                           _fits(groups[gid], data["shape"], dtype) and
                           not any(v in groups[gid]["ends"] for v in args) and
                           _acyclic_with(graph, *_with(graph, groups[gid], n), group_of,
                                         groups, rank)), None)
            if target is None and dtype is None:  # bools only: no dtype to compute in
                continue
            if target is None:
                groups.append(_group(data["shape"], dtype))
            _join(graph, groups[len(groups) - 1 if target is None else target], n,
                  data["shape"], group_of, groups)
            _absorb_producers(graph, n, args, group_of, groups, rank)
            continue
        group_of[n] = len(groups) - 1
        _admit(graph, groups[-1], n)
    _unread_rows(graph, groups, group_of)
    return [grp["nodes"] for grp in groups if grp["nodes"]], \
        {n for grp in groups for n in grp.get("products", ())}


def _group(shape, dtype, exact=False):
    return {"key": (squeezed(shape), dtype), "shape": tuple(shape), "nodes": [],
            "ends": set(), "exact": exact, "mixed": False, "readers": set()}


def _fits(group, shape, dtype):
    """Whether a node of `shape` computing in `dtype` (None: bools) may join."""
    return group["key"][0] == squeezed(shape) and dtype in (None, group["key"][1]) and \
        (not group["exact"] or group["shape"] == tuple(shape))


def _join(graph, group, n, shape, group_of, groups):
    _admit(graph, group, n)
    group["mixed"] |= group["shape"] != tuple(shape)
    group_of[n] = groups.index(group)


def _admit(graph, group, n):
    """Make n a member of `group`, whose "readers" are its members' readers outside it
    (what _acyclic_with starts from: a walk over every member's readers, for each
    node that may join, made grouping quadratic in a group's size)."""
    group["nodes"].append(n)
    group["readers"].discard(n)
    group["readers"].update(graph.nx._succ[n])


def _with(graph, group, n):
    """(members, readers outside them) of `group` with n joined."""
    readers = group["readers"] | graph.nx._succ[n].keys()
    readers.discard(n)
    return group["nodes"] + [n], readers


def _place_reduction(graph, n, group_of, groups, rank):
    """A reduction joins the group of what it reduces when that group iterates over
    exactly its input's shape; else it starts one."""
    (_, u, out), = graph.args_of(n)
    shape, dtype = tuple(graph.specs_of(u)[out].shape), graph.nx.nodes[n]["dtype"].np
    gid = group_of.get(u)
    if gid is None or u in groups[gid]["ends"] or groups[gid]["mixed"] or \
            groups[gid]["shape"] != shape or groups[gid]["key"][1] != dtype or \
            not _acyclic_with(graph, *_with(graph, groups[gid], n), group_of, groups, rank):
        groups.append(_group(shape, dtype))
        gid = len(groups) - 1
    _admit(graph, groups[gid], n)
    groups[gid]["ends"].add(n)
    groups[gid]["exact"] = True
    group_of[n] = gid


def _place_view(graph, n, group_of, groups, rank):
    """A unit-dim view joins the group of the member it views (never starts one)."""
    (_, u, _), = graph.args_of(n)
    gid = group_of.get(u)
    if gid is None or u in groups[gid]["ends"] or groups[gid]["exact"] or \
            not _acyclic_with(graph, *_with(graph, groups[gid], n), group_of, groups, rank):
        return
    _join(graph, groups[gid], n, graph.nx.nodes[n]["shape"], group_of, groups)


def _absorb_producers(graph, n, args, group_of, groups, rank):
    """Merge into n's group the other groups of its shape and dtype that n reads, when
    the graph of groups stays acyclic: two chains meeting at n (a sum of terms each
    computed by its own chain) become one kernel. Groups with reductions or inline
    matmuls keep their own (their ends and operands must come from memory)."""
    target = groups[group_of[n]]
    for u in args:
        gid = group_of.get(u)
        other = None if gid is None else groups[gid]
        if other is None or other is target or other["key"] != target["key"] or \
                any(g["exact"] for g in (other, target)):
            continue
        merged = sorted(target["nodes"] + other["nodes"], key=rank.get)
        readers = (target["readers"] | other["readers"]).difference(merged)
        if not _acyclic_with(graph, merged, readers, group_of, groups, rank):
            continue
        for m in other["nodes"]:
            group_of[m] = group_of[n]
        target["nodes"], other["nodes"] = merged, []
        target["readers"], other["readers"] = readers, set()
        target["mixed"] |= other["mixed"] or other["shape"] != target["shape"]


def _acyclic_with(graph, members, readers, group_of, groups, rank):
    """Whether contracting `members` into one node keeps the graph of groups acyclic:
    no path leaves the group and comes back into it, where a path that reaches one
    member of another group may go on from any of its members (that group is one node
    too: checking nodes alone misses two groups that feed each other). Nodes after the
    newest member (members[-1], grouping goes in topological order) are in no group
    yet, so no path through them comes back: the search stops there. `readers`: the
    members' readers outside them (a group keeps its own: `_admit`), where the search
    starts."""
    inside = set(members)
    limit = rank[members[-1]]
    succ = graph.nx._succ  # (networkx's own successor dicts)
    stack = [v for v in readers if v not in inside and rank[v] <= limit]
    seen, seen_groups = set(), set()
    while stack:
        v = stack.pop()
        if v in inside:
            return False
        if v in seen or rank[v] > limit:
            continue
        seen.add(v)
        stack.extend(succ[v])
        gid = group_of.get(v)
        if gid is not None and gid not in seen_groups:
            seen_groups.add(gid)
            stack.extend(m for m in groups[gid]["nodes"] if m not in seen)
    return True


def _source(g, u, out):
    """Where a kernel should read argument (u, out): through an expand (broadcast) node,
    its input, since the kernel reads broadcast inputs with zero strides (no copy)."""
    data = g.nx.nodes[u]
    if data["kind"] == "op" and getattr(data["op"], "native_broadcast", False):
        (_, v, v_out), = g.args_of(u)
        return (v, v_out)
    return (u, out)


def _replace_group(g, members, products, facts):
    """members: in topological order (node ids need not be: decompose adds nodes);
    `products`: the row products among all groups' members."""
    inside = set(members)
    sub, inputs, mapping = Graph(), [], {}
    for n in members:
        args = {}
        # only elementwise ops broadcast what they read: a matmul (rows and columns)
        # and a reduction (its iteration space) read inputs whole
        whole = facts(contraction, n) is not None or \
            facts(reduction_dims, n) is not None or n in products
        for pos, u, out in g.args_of(n):
            if u in inside:
                args[pos] = (mapping[u], 0)  # members have one output each
            else:
                key = (u, out) if whole else _source(g, u, out)
                if key not in inputs:
                    inputs.append(key)
                    mapping[key] = sub.add_input(g.specs_of(key[0])[key[1]],
                                                 inputs.index(key))
                args[pos] = (mapping[key], 0)
        data = g.nx.nodes[n]
        mapping[n] = copy_op(sub, data, args, aliases=None)
    exported = [n for n in members
                if any(v not in inside for v in g.nx.successors(n))]
    if not exported:  # dead code (nothing reads the group): a kernel would have no
        g.nx.remove_nodes_from(members)  # outputs; the members are pure, so they go
        return None
    for i, n in enumerate(exported):
        sub.add_output((mapping[n], 0), i)
    specs = [g.nx.nodes[n]["specs"][0] for n in exported]
    node = g.add_op(FusedKernel, {1 + i: key for i, key in enumerate(inputs)},
                    {"graph": sub}, specs)
    for i, n in enumerate(exported):
        # (networkx's own dict of n's readers: its edge views cost more than the moves)
        for v, keyed in list(g.nx._succ[n].items()):
            for key, edge in list(keyed.items()) if v not in inside else ():
                g.nx.remove_edge(n, v, key=key)
                g.nx.add_edge(node, v, key=key, pos=edge["pos"], out=i)
    g.nx.remove_nodes_from(members)
    return node


__all__ = ["fuse", "FusedKernel"]
