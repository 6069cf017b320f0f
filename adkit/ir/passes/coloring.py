"""Coloring sparsity patterns, so that one jvp (vjp, Hessian-vector product) per color
recovers a whole sparse Jacobian (Hessian).

Owns: `color(pattern, kind)` ("column": columns sharing a row get different colors;
"row": the same on the transpose; "star": a star coloring of a symmetric pattern's
adjacency graph, where every path on four vertices uses at least three colors) and
`check_coloring` (the same conditions, checked directly). Greedy, largest degree
first, on adjacency lists held as CSR int64 arrays. Does not: detect patterns
(sparsity.py) or evaluate derivatives (adkit/func/sparse.py).
"""
import numpy as np

from ...func.sparse_types import SparsityPattern

KINDS = ("column", "row", "star")


def color(pattern, kind="column"):
    """An int64 array of colors (0, 1, ...): one per column ("column"), per row ("row")
    or per row/column of a square symmetric pattern ("star")."""
    _check_kind(pattern, kind)
    if kind == "row":
        pattern = pattern.transpose()
    if kind in ("column", "row"):
        return _greedy(_column_intersection(pattern), _distance_one)
    return _greedy(_adjacency(pattern), _star_forbidden)


def _check_kind(pattern, kind):
    if not isinstance(pattern, SparsityPattern):
        raise TypeError(f"color takes a SparsityPattern, got {type(pattern).__name__}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "star" and pattern.shape[0] != pattern.shape[1]:
        raise ValueError(f"a star coloring needs a square (symmetric) pattern, got shape "
                         f"{pattern.shape}")


class _Graph:
    """An undirected graph as CSR neighbor lists (no self loops)."""

    def __init__(self, n, u, v):
        keep = u != v
        u, v = np.concatenate([u[keep], v[keep]]), np.concatenate([v[keep], u[keep]])
        keys = np.unique(u * max(n, 1) + v)
        u, v = np.divmod(keys, max(n, 1))
        self.n = n
        self.indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(u, minlength=n), out=self.indptr[1:])
        self.indices = v

    def neighbors(self, v):
        return self.indices[self.indptr[v]:self.indptr[v + 1]]

    def degrees(self):
        return np.diff(self.indptr)


def _column_intersection(pattern):
    """Columns are neighbors when some row holds both: all pairs within each row."""
    rows, cols = pattern.rows, pattern.cols
    counts = np.bincount(rows, minlength=pattern.shape[0])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    per_entry = counts[rows]  # each entry pairs with every entry of its row
    first = np.repeat(np.arange(rows.size), per_entry)
    offset = np.arange(first.size) - np.repeat(np.cumsum(per_entry) - per_entry, per_entry)
    second = starts[rows[first]] + offset
    return _Graph(pattern.shape[1], cols[first], cols[second])


def _adjacency(pattern):
    """A symmetric pattern's off-diagonal entries as edges."""
    return _Graph(pattern.shape[0], pattern.rows, pattern.cols)


def _greedy(graph, forbidden_colors):
    """Each vertex, largest degree first, takes the smallest color not forbidden."""
    colors = np.full(graph.n, -1, np.int64)
    order = np.argsort(-graph.degrees(), kind="stable")
    taken = np.zeros(graph.n + 1, bool)
    for v in order:
        forbidden = forbidden_colors(graph, colors, v)
        taken[forbidden] = True
        colors[v] = int(np.argmin(taken))
        taken[forbidden] = False
    return colors


def _distance_one(graph, colors, v):
    used = colors[graph.neighbors(v)]
    return used[used >= 0]


def _star_forbidden(graph, colors, v):
    """Colors v may not take: its neighbors' colors, and the color of any x two steps
    away (v - w - x) that would close a path on four vertices with two colors: v at its
    end (x has another neighbor y colored like w) or inside (v has another neighbor u
    colored like w)."""
    near = graph.neighbors(v)
    near_colors = colors[near]
    forbidden = list(near_colors[near_colors >= 0])
    repeated = {c for c in forbidden if forbidden.count(c) > 1}
    for w, cw in zip(near, near_colors):
        if cw < 0:
            continue
        for x in graph.neighbors(w):
            cx = colors[x]
            if x == v or cx < 0:
                continue
            if cw in repeated or _has_other_neighbor_colored(graph, colors, x, w, cw):
                forbidden.append(cx)
    return np.asarray(forbidden, np.int64)


def _has_other_neighbor_colored(graph, colors, x, w, c):
    others = graph.neighbors(x)
    return bool(np.any((colors[others] == c) & (others != w)))


def check_coloring(pattern, colors, kind="column"):
    """Whether `colors` is a valid coloring of `pattern` of this kind (column: no row
    holds two columns of one color; row: the transpose; star: neighbors differ and no
    path on four vertices has only two colors)."""
    _check_kind(pattern, kind)
    colors = np.asarray(colors)
    if kind == "row":
        pattern = pattern.transpose()
    if colors.shape != (pattern.shape[1],) or (colors < 0).any():
        return False
    if kind in ("column", "row"):
        keys = pattern.rows * (int(colors.max(initial=0)) + 1) + colors[pattern.cols]
        return bool(np.unique(keys).size == keys.size)
    graph = _adjacency(pattern)
    u = np.repeat(np.arange(graph.n), graph.degrees())
    if (colors[u] == colors[graph.indices]).any():
        return False
    for v, w in zip(u, graph.indices):  # a two-colored path u - v - w - x?
        if _has_other_neighbor_colored(graph, colors, v, w, colors[w]) and \
                _has_other_neighbor_colored(graph, colors, w, v, colors[v]):
            return False
    return True
