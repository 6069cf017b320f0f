"""fuse: group chains of elementwise ops and the reductions of their results into
FusedKernel nodes (still a Graph).

Owns: `FusedKernel` (a Function whose params hold the fused sub-graph: evaluating it
runs the sub-graph with numpy; the jit lowers it to one native loop nest), `fuse` and
`reduction_dims`. Does not: generate code, or know ops by name: what may fuse is
said by each op's class (`lower`, `native_reduction` with `reduced_dims`,
`native_contraction`, `native_broadcast`). A node is fusible when its op has a `lower`
hook, its output is float32/float64 with the same shape and dtype as the rest of its
group, and its tensor arguments have that dtype. A reduction (sum, mean, sum_to_size,
prod, amax, amin) over any dims joins the group of what it reduces; a matmul with a
short contracted dim (`contraction`) starts a group its consumers join. Groups never
create a cycle. First, contract_first.py rewrites long contractions of row-scaled matmul
results to read the matmul's narrow operand instead (what it leaves unread goes).

    before:  c = mul a b;  d = exp c;  e = sum[dim=1] d
    after:   e = fused_kernel[graph=<mul, exp, sum[dim=1]>] a b     (d is never stored)
"""
import math

import numpy as np

from ... import ops
from ...autograd.function import Function
from ...ops._helpers import c_strides
from ...tensor import _make
from .. import evaluate, rules
from ..graph import Graph
from .cleanup import copy_op, dce, has_in_place_ops
from .editing import edits
from .contract_first import contract_first


_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # what kernels compute in

# {op class: how a kernel combines its values ("sum", "prod", "max", "min")}: the ops
# whose class says `native_reduction`
REDUCTIONS = ops.with_rule("native_reduction")


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


_BOOL = np.dtype(np.bool_)


def compute_dtype(graph, n):
    """The float dtype fusible node n computes in; None for an op on bools alone (it
    joins a group of its shape but starts none); False when n is not fusible. Its
    tensors must be bools or floats of that one dtype (comparisons make bools from
    floats, where and to() make floats from bools)."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or getattr(data["op"], "lower", None) is None:
        return False
    if len(data["specs"]) != 1 or any(a is not None for a in data.get("aliases", ())):
        return False
    dtypes = {data["dtype"].np} | {graph.specs_of(u)[out].dtype.np
                                   for _, u, out in graph.args_of(n)}
    floats = dtypes & set(_NATIVE_FLOATS)
    if len(floats) > 1 or not dtypes <= floats | {_BOOL}:
        return False
    return floats.pop() if floats else None


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
    _recompute_cheap_reads(g)
    order = g.topo_order()
    rank = {n: i for i, n in enumerate(order)}
    groups, products = _groups(g, order)  # (all of them before any is replaced)
    for members in groups:  # a lone op too: it still becomes one native loop
        _replace_group(g, sorted(members, key=rank.get), products)
    return g


# Each fused reader of a value recomputes it, instead of one kernel storing it and the
# others loading it, when it is an elementwise op of one value that is in memory anyway
# and of small ones (at most 1/SMALL_FRACTION as many elements): recomputing reads what
# loading would, and no kernel stores it. (A GMM gradient's y = x Q_k - mu_k Q_k, read by
# the objective's sum of squares and by the backward, was stored and reloaded: 80 MB
# each way per call at ADBench's large size.)
SMALL_FRACTION = 8


def _recompute_cheap_reads(g):
    """Give every fused reader but the first of each such value its own copy of it."""
    order = g.topo_order()
    rank = {n: i for i, n in enumerate(order)}
    for v in order:
        if not _cheap_to_recompute(g, v):
            continue
        readers = sorted({w for w in g.nx.successors(v) if _fused_reader(g, w)},
                         key=rank.get)
        data = g.nx.nodes[v]
        args = {pos: (u, out) for pos, u, out in g.args_of(v)}
        for w in readers[1:]:
            copy = copy_op(g, data, args)
            for key, edge in list(g.nx._succ[v][w].items()):  # (networkx's own dict)
                g.nx.remove_edge(v, w, key=key)
                g.nx.add_edge(copy, w, key=key, pos=edge["pos"], out=edge["out"])


def _cheap_to_recompute(g, v):
    """Whether v is an elementwise op of one big value in memory and small ones."""
    data = g.nx.nodes[v]
    dtype = compute_dtype(g, v)  # (a dtype equals None: numpy reads None as float64)
    if dtype is False or dtype is None or contraction(g, v) is not None or \
            reduction_dims(g, v) is not None or unit_view(g, v) or \
            getattr(data["op"], "is_view", False):
        return False
    size = math.prod(data["shape"])  # (numpy's prod costs microseconds on a tuple)
    big = [u for _, u, out in g.args_of(v)
           if SMALL_FRACTION * math.prod(g.specs_of(u)[out].shape) > size]
    return len(big) == 1 and _in_memory(g, big[0])


def _in_memory(g, u):
    """Whether value-making node u's result is stored whatever fuse does: an input, a
    constant, or an op no kernel computes (a BLAS product, a numpy op)."""
    data = g.nx.nodes[u]
    if data["kind"] in ("input", "const"):
        return True
    if contraction(g, u) is not None or reduction_dims(g, u) is not None or unit_view(g, u):
        return False
    return compute_dtype(g, u) is False or getattr(data["op"], "native_contraction", False)


def _fused_reader(g, w):
    """Whether op w will be computed inside a kernel (so it can recompute what it reads)."""
    if g.nx.nodes[w]["kind"] != "op":
        return False
    dtype = compute_dtype(g, w)
    return (dtype is not False and dtype is not None) or reduction_dims(g, w) is not None


def reduction_dims(graph, n):
    """The dims fused reduction node n combines over (of its input's shape), or None
    when n is not one: an op in REDUCTIONS (sum, mean, sum_to_size, prod, amax, amin)
    of a float tensor into the same dtype, over its class's `reduced_dims`. A kernel
    combines such a node's values as it makes them."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or data["op"] not in REDUCTIONS:
        return None
    params = data["params"]
    if params.get("dtype") is not None or data["dtype"].np not in _NATIVE_FLOATS:
        return None
    args = graph.args_of(n)
    if len(args) != 1 or graph.specs_of(args[0][1])[args[0][2]].dtype != data["dtype"]:
        return None
    shape = tuple(graph.specs_of(args[0][1])[args[0][2]].shape)
    return data["op"].reduced_dims(shape, params)


CONTRACT_MAX_K = 16  # matmuls contracting at most this many terms run inside kernels,
# and so do longer ones (up to SMALL_MAX_K terms) whose whole product is at most
# SMALL_PRODUCT multiply-adds: a BLAS call costs more than such a product (a loop
# step's 32x32 matrix-vector product: 1,024 multiply-adds, ~0.1 us of call overhead)
CONTRACT_SMALL_MAX_K = 64
CONTRACT_SMALL_PRODUCT = 4096


def contraction(graph, n):
    """The contracted length K when node n is a matmul (its class says
    `native_contraction`: matmul, mm, bmm) a kernel computes inline, as K multiply-adds
    per element: float operands of the output's dtype, at least one a matrix (the other
    may be a vector), 1 <= K <= CONTRACT_MAX_K, or a small product (BLAS is better at
    long sums of big products). Else None."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or not getattr(data["op"], "native_contraction", False):
        return None
    args = graph.args_of(n)
    specs = [graph.specs_of(u)[out] for _, u, out in args]
    if len(specs) != 2 or data["dtype"].np not in _NATIVE_FLOATS or \
            any(s.dtype != data["dtype"] or not s.shape for s in specs) or \
            max(len(s.shape) for s in specs) < 2:
        return None
    k = specs[0].shape[-1]
    work = k * math.prod(data["shape"])
    small = k <= CONTRACT_SMALL_MAX_K and work <= CONTRACT_SMALL_PRODUCT
    return k if 1 <= k and (k <= CONTRACT_MAX_K or small) else None


# A product C = A @ B whose right operand a kernel makes, with a long contracted dim
# and a small result, is computed by that kernel's call (a "row product", lowered by
# codegen/row_products.py): the kernel makes B a block of rows at a time into a buffer
# that stays in cache, and each block is multiplied into C, whose sums stay in
# registers, so B is never stored whole. (A GMM gradient's x^T @ w_k: 25 products of
# [10, 10000] @ [10000, 10], whose w had been written, 20 MB, and read back by BLAS.)
ROW_PRODUCT_MIN_K = 64  # shorter products: inline (contraction) or BLAS
# elements of one C matrix (M * N): its sums stay in registers a tile at a time, and
# each tile reads the block again from L1 (64 x 64: a d=64 GMM gradient's x^T (c x_k)
# 29 -> 18 ms on one core, where B was stored and BLAS packed it; 64-wide layers'
# weight gradients as quick as BLAS's or quicker)
ROW_PRODUCT_MAX_OUTPUT = 4096


def row_product(graph, n):
    """Whether node n is a matmul (its class says `native_contraction`) C = A @ B that
    the kernel making B may compute as it goes: float operands of C's dtype, not
    inline (`contraction`), A a matrix whose batch dims are none or B's, B [..., K, N]
    with K >= ROW_PRODUCT_MIN_K and N > 1, M * N <= ROW_PRODUCT_MAX_OUTPUT, and B
    made by a fusible op. (Whether it joins B's group is _place_row_product's call, and
    it leaves again when something outside that group reads B: _unread_rows.)"""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or not getattr(data["op"], "native_contraction", False) or \
            contraction(graph, n) is not None:
        return False
    args = sorted(graph.args_of(n))
    if len(args) != 2 or data["dtype"].np not in _NATIVE_FLOATS:
        return False
    (_, a, a_out), (_, b, b_out) = args
    a_spec, b_spec = graph.specs_of(a)[a_out], graph.specs_of(b)[b_out]
    if a_spec.dtype != data["dtype"] or b_spec.dtype != data["dtype"] or \
            len(a_spec.shape) < 2 or len(b_spec.shape) < 2 or \
            tuple(a_spec.shape[:-2]) not in ((), tuple(b_spec.shape[:-2])):
        return False
    (m, k), width = a_spec.shape[-2:], b_spec.shape[-1]
    if k < ROW_PRODUCT_MIN_K or width < 2 or m * width > ROW_PRODUCT_MAX_OUTPUT:
        return False
    dtype = compute_dtype(graph, b)
    return dtype is not False and dtype is not None and graph.nx.number_of_edges(b, n) == 1


def _place_row_product(graph, n, group_of, groups, rank):
    """A row product joins the group making its B when that group iterates over
    exactly B's shape (else it stays a BLAS product); it is a group's end."""
    (_, a, _), (_, b, _) = sorted(graph.args_of(n))
    gid = group_of.get(b)
    if gid is None or group_of.get(a) == gid or b in groups[gid]["ends"] or \
            groups[gid]["mixed"] or \
            groups[gid]["shape"] != tuple(graph.nx.nodes[b]["shape"]) or \
            not _acyclic_with(graph, groups[gid]["nodes"] + [n], group_of, groups, rank):
        return
    groups[gid]["nodes"].append(n)
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


def _groups(graph, order):
    """Fusible nodes grouped greedily in topological order, merging a node into a
    producer's group when shapes and dtypes match and no cycle results. Shapes match
    when they differ only in unit dims (a group then iterates over the shape without
    them; views that only add or drop unit dims join as their input's value), except
    in a group with reductions or inline matmuls, whose dims are exact. A reduction
    joins the group of the member it reduces (else it makes a group of its own); it
    is a group's end: no member of its group may read it. `order`: the graph's
    topological order."""
    group_of, groups = {}, []
    rank = {n: i for i, n in enumerate(order)}
    for n in order:
        data = graph.nx.nodes[n]
        if contraction(graph, n) is not None:  # starts a group: it reads its operands
            groups.append(_group(data["shape"], data["dtype"].np, exact=True))
            groups[-1]["contracts"] = True  # at other indices, so from memory
        elif reduction_dims(graph, n) is not None:
            _place_reduction(graph, n, group_of, groups, rank)
            continue
        elif row_product(graph, n):
            _place_row_product(graph, n, group_of, groups, rank)
            continue
        elif unit_view(graph, n):
            _place_view(graph, n, group_of, groups, rank)
            continue
        else:
            dtype = compute_dtype(graph, n)
            if dtype is False:
                continue
            args = [u for _, u, _ in graph.args_of(n)]
            target = next((gid for gid in map(group_of.get, args) if gid is not None and
                           _fits(groups[gid], data["shape"], dtype) and
                           not any(v in groups[gid]["ends"] for v in args) and
                           _acyclic_with(graph, groups[gid]["nodes"] + [n], group_of,
                                         groups, rank)), None)
            if target is None and dtype is None:  # bools only: no dtype to compute in
                continue
            if target is None:
                groups.append(_group(data["shape"], dtype))
            _join(groups[len(groups) - 1 if target is None else target], n,
                  data["shape"], group_of, groups)
            _absorb_producers(graph, n, args, group_of, groups, rank)
            continue
        group_of[n] = len(groups) - 1
        groups[-1]["nodes"].append(n)
    _unread_rows(graph, groups, group_of)
    return [grp["nodes"] for grp in groups if grp["nodes"]], \
        {n for grp in groups for n in grp.get("products", ())}


def _squeezed(shape):
    """A shape without its unit dims (a 0-d or all-unit shape stays itself)."""
    inner = tuple(d for d in shape if d != 1)
    return inner if inner else tuple(shape)


def _group(shape, dtype, exact=False):
    return {"key": (_squeezed(shape), dtype), "shape": tuple(shape), "nodes": [],
            "ends": set(), "exact": exact, "mixed": False}


def _fits(group, shape, dtype):
    """Whether a node of `shape` computing in `dtype` (None: bools) may join."""
    return group["key"][0] == _squeezed(shape) and dtype in (None, group["key"][1]) and \
        (not group["exact"] or group["shape"] == tuple(shape))


def _join(group, n, shape, group_of, groups):
    group["nodes"].append(n)
    group["mixed"] |= group["shape"] != tuple(shape)
    group_of[n] = groups.index(group)


def _place_reduction(graph, n, group_of, groups, rank):
    """A reduction joins the group of what it reduces when that group iterates over
    exactly its input's shape; else it starts one."""
    (_, u, out), = graph.args_of(n)
    shape, dtype = tuple(graph.specs_of(u)[out].shape), graph.nx.nodes[n]["dtype"].np
    gid = group_of.get(u)
    if gid is None or u in groups[gid]["ends"] or groups[gid]["mixed"] or \
            groups[gid]["shape"] != shape or groups[gid]["key"][1] != dtype or \
            not _acyclic_with(graph, groups[gid]["nodes"] + [n], group_of, groups, rank):
        groups.append(_group(shape, dtype))
        gid = len(groups) - 1
    groups[gid]["nodes"].append(n)
    groups[gid]["ends"].add(n)
    groups[gid]["exact"] = True
    group_of[n] = gid


def _place_view(graph, n, group_of, groups, rank):
    """A unit-dim view joins the group of the member it views (never starts one)."""
    (_, u, _), = graph.args_of(n)
    gid = group_of.get(u)
    if gid is None or u in groups[gid]["ends"] or groups[gid]["exact"] or \
            not _acyclic_with(graph, groups[gid]["nodes"] + [n], group_of, groups, rank):
        return
    _join(groups[gid], n, graph.nx.nodes[n]["shape"], group_of, groups)


def unit_view(graph, n):
    """Whether node n is a view of a float value that only adds or drops unit dims,
    its elements in their order (a reshape to (k, 1), unsqueeze, x[..., 0] of a unit
    dim): inside a kernel it is its input's value."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or not getattr(data["op"], "is_view", False) or \
            data["op"].modifies is not None or len(data["specs"]) != 1:
        return False
    args = graph.args_of(n)
    if len(args) != 1:
        return False
    (pos, u, out), = args
    spec, result = graph.specs_of(u)[out], data["specs"][0]
    if spec.dtype != result.dtype or spec.dtype.np not in _NATIVE_FLOATS or \
            spec.shape == result.shape or _squeezed(spec.shape) != _squeezed(result.shape):
        return False
    # the view of a one-byte-per-element stand-in (calloc'd: no page is touched) keeps
    # the order when it starts at the first byte and steps through it in C order
    probe = np.zeros(math.prod(spec.shape), np.uint8).reshape(spec.shape)
    moved = data["op"].forward(*rules.join_args(data["op"], {pos: probe}, data["params"]))
    if not isinstance(moved, np.ndarray) or not np.may_share_memory(moved, probe) or \
            moved.shape != tuple(result.shape) or \
            moved.__array_interface__["data"][0] != probe.__array_interface__["data"][0]:
        return False
    steps = c_strides(moved.shape)
    return all(s == c for s, c, d in zip(moved.strides, steps, moved.shape) if d != 1)


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
        if not _acyclic_with(graph, merged, group_of, groups, rank):
            continue
        for m in other["nodes"]:
            group_of[m] = group_of[n]
        target["nodes"], other["nodes"] = merged, []
        target["mixed"] |= other["mixed"] or other["shape"] != target["shape"]


def _acyclic_with(graph, members, group_of, groups, rank):
    """Whether contracting `members` into one node keeps the graph of groups acyclic:
    no path leaves the group and comes back into it, where a path that reaches one
    member of another group may go on from any of its members (that group is one node
    too: checking nodes alone misses two groups that feed each other). Nodes after the
    newest member (members[-1], grouping goes in topological order) are in no group
    yet, so no path through them comes back: the search stops there."""
    inside = set(members)
    limit = rank[members[-1]]
    stack = [v for m in members for v in graph.nx.successors(m) if v not in inside]
    seen, seen_groups = set(), set()
    while stack:
        v = stack.pop()
        if v in inside:
            return False
        if v in seen or rank[v] > limit:
            continue
        seen.add(v)
        stack.extend(graph.nx.successors(v))
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


def _replace_group(g, members, products):
    """members: in topological order (node ids need not be: decompose adds nodes);
    `products`: the row products among all groups' members."""
    inside = set(members)
    sub, inputs, mapping = Graph(), [], {}
    for n in members:
        args = {}
        # only elementwise ops broadcast what they read: a matmul (rows and columns)
        # and a reduction (its iteration space) read inputs whole
        whole = contraction(g, n) is not None or reduction_dims(g, n) is not None or \
            n in products
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
