"""Static sparsity detection: the Jacobian's (and a Hessian's) pattern of a graph.

Owns: `sparsity(graph)` and `hessian_sparsity(graph)`, which propagate index sets
through the graph: each element of each value carries the set of input elements it
depends on, held for a whole value as CSR arrays (`Deps`: indptr, indices), never as a
dense boolean matrix. Each op says which of its inputs' elements each result element
reads through its class's `sparsity` rule (ops/_sparsity.py); an op without one (a
user Function, a loop, a branch) is assumed to read everything: the pattern may then
hold entries that are always zero, but it never misses one. Integer and bool values
carry no derivative, so they depend on nothing.
Does not: color patterns (coloring.py) or evaluate derivatives (adkit/func/sparse.py).
"""
import networkx as nx
import numpy as np

from ...func.sparse_types import SparsityPattern
from ...ops._sparsity import Operand
from .. import rules
from . import cleanup

# beyond this many (element, input) pairs in one value the pattern is dense enough that
# a dense Jacobian is the better tool (2**28 pairs are 2 GB of int64 indices)
MAX_PAIRS = 2 ** 28


class Deps:
    """For each of `len(indptr) - 1` elements, the sorted input elements it depends on:
    indices[indptr[k]:indptr[k + 1]] (CSR)."""

    __slots__ = ("indptr", "indices")

    def __init__(self, indptr, indices):
        self.indptr, self.indices = indptr, indices

    @classmethod
    def empty(cls, n):
        return cls(np.zeros(n + 1, np.int64), np.zeros(0, np.int64))

    @classmethod
    def identity(cls, n, first):
        return cls(np.arange(n + 1, dtype=np.int64), np.arange(first, first + n, dtype=np.int64))

    @property
    def nnz(self):
        return int(self.indices.size)

    def lengths(self):
        return np.diff(self.indptr)

    def rows(self):
        """The element of each entry of `indices`."""
        return np.repeat(np.arange(self.indptr.size - 1, dtype=np.int64), self.lengths())

    def gather(self, src):
        """The sets of elements src[0], src[1], ... (CSR row gather)."""
        lengths = self.lengths()[src]
        indptr = np.zeros(src.size + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        _check_size(indptr[-1])
        offsets = np.repeat(self.indptr[:-1][src] - indptr[:-1], lengths)
        return Deps(indptr, self.indices[offsets + np.arange(indptr[-1], dtype=np.int64)])


def _check_size(n_pairs):
    if n_pairs > MAX_PAIRS:
        raise MemoryError(f"the sparsity pattern needs more than {MAX_PAIRS} index pairs "
                          "for one value: the Jacobian is too dense for sparse methods")


def _from_pairs(n, rows, cols, presorted_runs=False):
    """Deps of n elements from (element, input element) pairs, repeats dropped.
    `presorted_runs`: the pairs are a few runs each sorted by (element, input), which
    a stable sort merges in linear time."""
    if rows.size == 0:
        return Deps.empty(n)
    width = int(cols.max()) + 1
    keys = np.sort(rows * width + cols, kind="stable" if presorted_runs else None)
    if keys.size > 1:
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    rows, cols = np.divmod(keys, width)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return Deps(indptr, cols)


def _union(deps_list, n):
    deps_list = [d for d in deps_list if d.nnz]
    if not deps_list:
        return Deps.empty(n)
    if all(d is deps_list[0] for d in deps_list):  # one argument, or x * x
        return deps_list[0]
    return _from_pairs(n, np.concatenate([d.rows() for d in deps_list]),
                       np.concatenate([d.indices for d in deps_list]), presorted_runs=True)


def _compose(link, deps, n):
    """The Deps of n result elements that read `deps`'s elements as `link` says."""
    dst, src = link
    src = np.asarray(src, np.int64).reshape(-1)
    if dst is None:
        return deps.gather(src)
    dst = np.asarray(dst, np.int64).reshape(-1)
    if dst.size <= n and np.bincount(dst, minlength=n).max(initial=0) <= 1:
        return _scattered(deps, dst, src, n)  # a move: each result reads one element
    gathered = deps.gather(src)
    return _from_pairs(n, np.repeat(dst, gathered.lengths()), gathered.indices)


def _scattered(deps, dst, src, n):
    """Result element dst[k] reads element src[k] (no dst twice); the others nothing."""
    lengths = np.zeros(n, np.int64)
    lengths[dst] = deps.lengths()[src]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    gathered = deps.gather(src[np.argsort(dst, kind="stable")])
    return Deps(indptr, gathered.indices)


def _everything(deps, n):
    """Every one of n elements depends on every input element in `deps`."""
    every = np.unique(deps.indices)
    _check_size(every.size * n)
    return Deps(np.arange(n + 1, dtype=np.int64) * every.size, np.tile(every, n))


def _size(spec):
    return int(np.prod(spec.shape, dtype=np.int64))


def _is_float(spec):
    return spec.dtype.np.kind in "fc"


def _rule_links(graph, n, data):
    """The op's sparsity rule applied to this node: one {position: link} per output,
    or None when the op has no rule or its rule cannot tell."""
    op = data["op"]
    if getattr(op, "sparsity", None) is None:
        return None
    operands = {}
    for pos, u, out in graph.args_of(n):
        spec = graph.specs_of(u)[out]
        node = graph.nx.nodes[u]
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
    arg_deps = {pos: env[u][out] for pos, u, out in graph.args_of(n)}
    specs = data["specs"]
    live = {pos: d for pos, d in arg_deps.items() if d.nnz}
    if not live or not any(map(_is_float, specs)):
        return [Deps.empty(_size(s)) for s in specs]
    links = _rule_links(graph, n, data)
    results = []
    for k, spec in enumerate(specs):
        size = _size(spec)
        if not _is_float(spec):
            results.append(Deps.empty(size))
            continue
        if links is None:
            per_pos = {pos: _everything(d, size) for pos, d in live.items()}
        else:
            per_pos = {pos: _compose(link, arg_deps[pos], size)
                       for pos, link in links[k].items() if pos in live}
        result = _union(list(per_pos.values()), size)
        results.append(result)
        if on_node is not None:
            on_node(data["op"], per_pos, result, links is None)
    return results


def _propagate(graph, wrt, on_node=None):
    """(Deps of each output, number of input elements): input elements are numbered
    through the `wrt` inputs (float inputs only; None: all), flattened and concatenated."""
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


def _run(graph, input_deps, on_node=None):
    """Deps of each output of `graph` when its inputs carry `input_deps`."""
    env, outputs, done = {}, {}, []
    for n in graph.topo_order():
        data = graph.nx.nodes[n]
        kind = data["kind"]
        if kind == "op":
            env[n] = _op_deps(graph, n, data, env, on_node)
            if any(a is not None for a in data.get("aliases", ())):
                _write_through(graph, n, data, env, done)
            done.append(n)
        elif kind == "output":
            (_, u, out), = graph.args_of(n)
            outputs[data["index"]] = env[u][out]
        elif kind == "input":
            env[n] = [input_deps[data["index"]]]
        else:
            env[n] = [Deps.empty(_size(graph.specs_of(n)[0]))]
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
        links = _rule_links(graph, u, graph.nx.nodes[u])
        old = env[v][v_out]
        n_base = old.indptr.size - 1
        if links is None or 0 not in links[out]:  # unknown view: every element, all
            every = _union([old, env[u][out]], n_base)
            env[v][v_out] = _everything(every, n_base)
        else:
            dst, src = links[out][0]
            dst = np.arange(len(src)) if dst is None else np.asarray(dst)
            pick = np.arange(n_base, dtype=np.int64)
            pick[np.asarray(src, np.int64).reshape(-1)] = n_base + dst.reshape(-1)
            env[v][v_out] = stacked([old, env[u][out]]).gather(pick)
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


def stacked(deps_list):
    """One Deps whose elements are those of each Deps in turn (a stack, a concat)."""
    if len(deps_list) == 1:
        return deps_list[0]
    starts = np.cumsum([0] + [d.nnz for d in deps_list])
    indptr = np.concatenate([[0]] + [d.indptr[1:] + s for d, s in zip(deps_list, starts)])
    indices = np.concatenate([np.zeros(0, np.int64)] + [d.indices for d in deps_list])
    return Deps(indptr.astype(np.int64), indices)


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
    outputs, n_cols = _propagate(graph, _wrt_list(graph, wrt))
    deps = stacked(outputs)
    return SparsityPattern((deps.indptr.size - 1, n_cols), deps.rows(), deps.indices)


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
    _check_size(total)
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
