"""Static sparsity detection: the Jacobian's (and a Hessian's) pattern of a graph.

Owns: `sparsity(graph)` and `hessian_sparsity(graph)`, which propagate index sets
through the graph: each element of each value carries the set of input elements it
depends on, held for a whole value as blocks of indices (`Deps`, index_sets.py), never
as a dense boolean matrix. Each op says which of its inputs' elements each result element
reads through its class's `sparsity` rule (ops/_sparsity.py); an op without one (a
user Function, a loop, a branch) is assumed to read everything: the pattern may then
hold entries that are always zero, but it never misses one. Integer and bool values
carry no derivative, so they depend on nothing.
Does not: color patterns (coloring.py) or evaluate derivatives (adkit/func/sparse.py).
"""
import math

import networkx as nx
import numpy as np

from ...func.sparse_types import SparsityPattern
from ...ops._sparsity import Operand, Slab, link_arrays
from .. import rules
from . import cleanup, scratch
from .index_sets import (
    Deps,
    check_size,
    compose,
    everything,
    moved_union,
    slabbed,
    stacked,
    union,
)


def _size(spec):
    return math.prod(spec.shape)


def _is_float(spec):
    return spec.dtype.np.kind in "fc"


def _rule_links(graph, n, data, args):
    """The op's sparsity rule applied to this node (its arguments `args`, as
    graph.args_of gives them): one {position: link} per output, or None when the op
    has no rule or its rule cannot tell."""
    op = data["op"]
    if getattr(op, "sparsity", None) is None:
        return None
    operands = {}
    for pos, u, out in args:
        node = graph.nx.nodes[u]
        spec = node["specs"][out] if node["kind"] == "op" else graph.specs_of(u)[out]
        value = node["value"] if node["kind"] == "const" else None
        operands[pos] = Operand(spec.shape, spec.dtype.np, value)
    try:
        links = op.sparsity(*rules.join_args(op, operands, data["params"]))
    except Exception as e:
        e.add_note(f"in the sparsity rule of {op.__name__} (node {n})")
        raise
    if links is None:
        return None
    return links if isinstance(links, tuple) else (links,)


def _op_deps(graph, n, data, env, on_node):
    """Deps of each output of op node n, from its arguments' Deps."""
    args = graph.args_of(n)
    arg_deps = {pos: env[u][out] for pos, u, out in args}
    specs = data["specs"]
    live = {pos: d for pos, d in arg_deps.items() if not d.is_empty()}
    if not live or not any(map(_is_float, specs)):
        return [Deps.empty(s.shape) for s in specs]
    links = _rule_links(graph, n, data, args)
    results = []
    for k, spec in enumerate(specs):
        if not _is_float(spec):
            results.append(Deps.empty(spec.shape))
            continue
        if links is None:
            per_pos = {pos: everything(d, spec.shape) for pos, d in live.items()}
        else:
            per_pos = {pos: link for pos, link in links[k].items() if pos in live}
        result = _result_deps(per_pos, live, spec.shape, links is None, on_node is not None)
        results.append(result)
        if on_node is not None:
            on_node(data["op"], per_pos, result, links is None)
    return results


def _result_deps(per_pos, live, shape, unknown, keep_parts):
    """One result's Deps from {position: link} (or, when `unknown`, {position: Deps})
    and the live arguments' Deps; with `keep_parts`, per_pos is turned into {position:
    Deps} in place (what the Hessian pass looks at)."""
    if unknown:
        return union(list(per_pos.values()), shape)
    if not keep_parts:  # the parts of a cat or a stack share one block
        if per_pos and all(isinstance(link, Slab) for link in per_pos.values()):
            return slabbed([(live[pos], link) for pos, link in per_pos.items()], shape)
        moves = {pos: link for pos, link in per_pos.items()
                 if isinstance(link, tuple) and link[0] is not None}
        if len(moves) > 1:
            parts = [compose(link, live[pos], shape) for pos, link in per_pos.items()
                     if pos not in moves]
            parts.append(moved_union([(live[pos], moves[pos]) for pos in moves], shape))
            return union(parts, shape)
    for pos, link in per_pos.items():
        per_pos[pos] = compose(link, live[pos], shape)
    return union(list(per_pos.values()), shape)


def _propagate(graph, wrt, on_node=None):
    """(Deps of each output, number of input elements): input elements are numbered
    through the `wrt` inputs (float inputs only; None: all), flattened and concatenated."""
    if _has_foldable(graph):
        graph = cleanup.fold_constants(graph)  # constant indices become visible to rules
    wrt = set(range(len(graph.inputs)) if wrt is None else wrt)
    input_deps, n_cols = [], 0
    for i, spec in enumerate(graph.input_specs()):
        size = _size(spec)
        if i in wrt and _is_float(spec):
            input_deps.append(Deps.identity(size, n_cols))
        else:
            input_deps.append(Deps.empty(size))
        n_cols += size if i in wrt else 0
    return _run(graph, input_deps, on_node), n_cols


def _has_foldable(graph):
    """Whether some op node reads only const nodes (fold_constants would fold it)."""
    kinds = graph.nx.nodes(data="kind")
    return any(kind == "op" and graph.nx.pred[n] and
               all(kinds[u] == "const" for u in graph.nx.pred[n])
               for n, kind in kinds)


def _run(graph, input_deps, on_node=None):
    """Deps of each output of `graph` when its inputs carry `input_deps`."""
    env, outputs, done = {}, {}, []
    for n in graph.topo_order():  # program order: writes in place rely on it
        data = graph.nx.nodes[n]
        kind = data["kind"]
        if kind == "op":
            env[n] = _op_deps(graph, n, data, env, on_node)
            aliases = data.get("aliases")
            if aliases and any(a is not None for a in aliases):
                _write_through(graph, n, data, env, done)
            done.append(n)
        elif kind == "output":
            (_, u, out), = graph.args_of(n)
            outputs[data["index"]] = env[u][out]
        elif kind == "input":
            env[n] = [input_deps[data["index"]].with_shape(graph.specs_of(n)[0].shape)]
        else:
            env[n] = [Deps.empty(graph.specs_of(n)[0].shape)]
    return [outputs[i] for i in range(len(outputs))]


def _write_through(graph, n, data, env, done):
    """Node n wrote its results into arguments (in place): those values, the values
    they are views of (up to the root of their memory) and every view of that root
    made so far now hold the new sets."""
    args = {pos: (u, out) for pos, u, out in graph.args_of(n)}
    for i, pos in enumerate(data.get("aliases", ())):
        if pos is None:
            continue
        u, out = args[pos]
        env[u][out] = env[n][i]
        root = _write_up_to_root(graph, u, out, env)
        _refresh_views(graph, root, env, done)


def _view_base(graph, u):
    """(base node, its output) when node u is a view op of its argument 0, else None."""
    data = graph.nx.nodes[u]
    if data["kind"] != "op" or not getattr(data["op"], "is_view", False):
        return None
    base = [(v, out) for pos, v, out in graph.args_of(u) if pos == 0]
    return base[0] if base else None


def _write_up_to_root(graph, u, out, env):
    """Carry value (u, out)'s sets into the values it views, up to the root node."""
    while (base := _view_base(graph, u)) is not None:
        v, v_out = base
        links = _rule_links(graph, u, graph.nx.nodes[u], graph.args_of(u))
        old, new = env[v][v_out], env[u][out]
        n_base = old.n
        if links is None or 0 not in links[out]:  # unknown view: every element, all
            every = union([old, new], old.shape)
            env[v][v_out] = everything(every, old.shape)
        else:
            dst, src = link_arrays(links[out][0], old.shape, new.shape)
            dst = np.arange(src.size) if dst is None else np.asarray(dst).reshape(-1)
            pick = np.arange(n_base, dtype=np.int64)
            pick[np.asarray(src, np.int64).reshape(-1)] = n_base + dst
            env[v][v_out] = stacked([old, new]).gather(pick).with_shape(old.shape)
        u, out = v, v_out
    return u


def _refresh_views(graph, root, env, done):
    """Recompute, in order, the sets of the views of `root` already made."""
    group = {root}
    for w in done:
        base = _view_base(graph, w)
        if base is None or base[0] not in group:
            continue
        group.add(w)
        data = graph.nx.nodes[w]
        env[w] = _op_deps(graph, w, data, env, None)


def body_deps(body, input_deps):
    """Deps of each output of a loop's or branch's body graph whose inputs carry
    `input_deps` (one Deps per input): how the sparsity rules of loops and branches
    (adkit/control/sparsity_rules.py) see through their bodies."""
    return _run(body, input_deps)


def numbered(sizes, live):
    """Deps numbering the elements of values of these sizes one after the other (an
    op's operands, for its rule): identity for the live ones, empty for the others."""
    starts = np.cumsum([0] + list(sizes))
    return [Deps.identity(n, int(s)) if keep else Deps.empty(n)
            for n, s, keep in zip(sizes, starts, live)]


def as_links(deps, sizes, positions):
    """A rule's links ({position: (dst, src)}) from the Deps of one result over
    operands numbered by `numbered(sizes, ...)`, operand k at argument positions[k]."""
    starts = np.cumsum([0] + list(sizes))
    rows, cols = deps.rows(), deps.indices
    links = {}
    for k, pos in enumerate(positions):
        inside = (cols >= starts[k]) & (cols < starts[k + 1])
        links[pos] = (rows[inside], cols[inside] - starts[k])
    return links


def _wrt_list(graph, wrt):
    if wrt is None:
        return None
    wrt = (wrt,) if isinstance(wrt, int) else tuple(wrt)
    n = len(graph.inputs)
    bad = [i for i in wrt if not 0 <= i < n]
    if bad:
        raise ValueError(f"wrt {bad}: the graph has {n} inputs")
    return wrt


def sparsity(graph, wrt=None):
    """The Jacobian's sparsity pattern of `graph`: rows are the outputs' elements
    (flattened row-major, outputs concatenated), columns the elements of the inputs
    numbered `wrt` (an int or a sequence; None: all inputs), flattened and concatenated.
    Conservative: an entry left out is zero at every point."""
    with scratch.session():  # the index blocks reuse the last call's memory
        outputs, n_cols = _propagate(graph, _wrt_list(graph, wrt))
        deps = stacked(outputs)
        return SparsityPattern.from_csr((deps.n, n_cols), deps.indptr, deps.indices)


def hessian_sparsity(graph, wrt=None):
    """The sparsity pattern of the Hessian of `graph`'s output (for several outputs or a
    non-scalar one: of their sum, the union of their patterns), symmetric, with inputs
    numbered as `sparsity` numbers them. Each op adds the pairs of input elements its
    second derivative couples: none for a linear op, the pairs across its arguments for
    a bilinear one (x * y, x @ y), all pairs within each result element's set for
    any other (an op without a sparsity rule: within all its arguments' elements)."""
    pairs = _PairSet()
    relevant = set(graph.nx.nodes)
    if not any(any(a is not None for a in d.get("aliases", ()))  # writes reach further
               for _, d in graph.nx.nodes(data=True) if d["kind"] == "op"):
        relevant = set().union(*(nx.ancestors(graph.nx, out) for out in graph.outputs))

    def on_node(op, per_pos, result, unknown):
        if op.curvature == "linear":
            return
        if unknown:
            every = np.unique(result.indices[:result.indptr[1]]) if result.nnz else None
            if every is not None:
                pairs.add(*np.meshgrid(every, every, indexing="ij"))
        elif op.curvature == "bilinear":  # across arguments (one alone: linear in it)
            sets = list(per_pos.values())
            for k, a in enumerate(sets):
                for b in sets[k + 1:]:
                    pairs.add(*_pairs_per_element(a, b))
        else:
            pairs.add(*_pairs_per_element(result, result))

    graph_wrt = _wrt_list(graph, wrt)
    with scratch.session():
        _, n_cols = _propagate(_only(graph, relevant), graph_wrt, on_node)
    rows, cols = pairs.result()
    return SparsityPattern((n_cols, n_cols), rows, cols)


def _only(graph, keep):
    """A copy of `graph` without the op nodes that no output reads."""
    g = graph.copy()
    drop = [n for n, kind in g.nx.nodes(data="kind") if kind == "op" and n not in keep]
    g.nx.remove_nodes_from(drop)
    return g


def _pairs_per_element(a, b):
    """For every element k: all pairs (i, j), i in a's set of k, j in b's set of k."""
    la, lb = a.lengths(), b.lengths()
    counts = la * lb
    total = int(counts.sum())
    check_size(total)
    element = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    t = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    width = lb[element]
    return (a.indices[a.indptr[:-1][element] + t // width],
            b.indices[b.indptr[:-1][element] + t % width])


class _PairSet:
    """A growing symmetric set of (i, j) pairs, kept as unique int64 keys i * n + j."""

    def __init__(self):
        self.parts = []

    def add(self, i, j):
        i, j = np.ravel(i).astype(np.int64), np.ravel(j).astype(np.int64)
        if i.size:
            self.parts.append((np.minimum(i, j), np.maximum(i, j)))
        if sum(p[0].size for p in self.parts) > 2 ** 22:
            self.parts = [self._unique()]

    def _unique(self):
        if not self.parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        i = np.concatenate([p[0] for p in self.parts])
        j = np.concatenate([p[1] for p in self.parts])
        width = int(j.max()) + 1
        return np.divmod(np.unique(i * width + j), width)

    def result(self):
        """Both triangles, sorted row-major."""
        i, j = self._unique()
        rows, cols = np.concatenate([i, j]), np.concatenate([j, i])
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        keep = np.ones(rows.size, bool)
        keep[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        return rows[keep], cols[keep]
