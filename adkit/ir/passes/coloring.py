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
        return _column_coloring(pattern)
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
        keys = np.sort(u * max(n, 1) + v)
        if keys.size > 1:
            keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        u, v = np.divmod(keys, max(n, 1))
        self.n = n
        self.indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(u, minlength=n), out=self.indptr[1:])
        self.indices = v

    def neighbors(self, v):
        return self.indices[self.indptr[v]:self.indptr[v + 1]]

    def degrees(self):
        return np.diff(self.indptr)

    def neighbor_lists(self):
        """Python lists of neighbors: the greedy loops run faster on them than on
        numpy slices."""
        return _lists(self.indices, self.degrees())


def _column_coloring(pattern):
    """Greedy distance-2 coloring of the columns in the bipartite row/column graph:
    column j may not take the color of any column sharing a row with it. Largest
    first by the number of entries in j's rows; no column-intersection graph is built:
    each row keeps the set of colors its columns took, and j may not take any color of
    its rows' sets (unions of small sets in C: walking every column of j's rows in
    Python took 1.2 s of bundle adjustment's ba1, a camera's columns being in 1,300
    rows of 14 columns)."""
    n_rows, n_cols = pattern.shape
    row_lengths = np.bincount(pattern.rows, minlength=n_rows)
    degrees = np.bincount(pattern.cols, weights=row_lengths[pattern.rows], minlength=n_cols)
    by_column = pattern.transpose()
    rows_of_col = _lists(by_column.cols, np.bincount(by_column.rows, minlength=n_cols))
    taken = [set() for _ in range(n_rows)]
    colors = [-1] * n_cols
    for v in np.argsort(-degrees, kind="stable").tolist():
        rows = rows_of_col[v]
        forbidden = set().union(*[taken[r] for r in rows])
        c = 0
        while c in forbidden:
            c += 1
        colors[v] = c
        for r in rows:
            taken[r].add(c)
    return np.asarray(colors, dtype=np.int64).reshape(n_cols)


def _lists(values, lengths):
    """values split into consecutive Python lists of the given lengths (slices of one
    list: np.split makes an array per piece, 0.75 s for ba1's 150,000 rows and columns)."""
    flat, ends = values.tolist(), np.cumsum(lengths).tolist()
    return [flat[start:end] for start, end in zip([0] + ends[:-1], ends)]


def _adjacency(pattern):
    """A symmetric pattern's off-diagonal entries as edges."""
    return _Graph(pattern.shape[0], pattern.rows, pattern.cols)


def _greedy(graph, forbidden_colors):
    """Each vertex, largest degree first, takes the smallest color not forbidden."""
    neighbors = graph.neighbor_lists()
    colors = [-1] * graph.n
    for v in np.argsort(-graph.degrees(), kind="stable").tolist():
        forbidden = forbidden_colors(neighbors, colors, v)
        c = 0
        while c in forbidden:
            c += 1
        colors[v] = c
    return np.asarray(colors, dtype=np.int64).reshape(graph.n)


def _star_forbidden(neighbors, colors, v):
    """Colors v may not take: its neighbors' colors, and the color of any x two steps
    away (v - w - x) that would close a path on four vertices with two colors: v at its
    end (x has another neighbor y colored like w) or inside (v has another neighbor u
    colored like w)."""
    near_colors = [colors[w] for w in neighbors[v]]
    forbidden = {c for c in near_colors if c >= 0}
    repeated = {c for c in forbidden if near_colors.count(c) > 1}
    for w, cw in zip(neighbors[v], near_colors):
        if cw < 0:
            continue
        for x in neighbors[w]:
            cx = colors[x]
            if x == v or cx < 0 or cx in forbidden:
                continue
            if cw in repeated or any(colors[y] == cw and y != w for y in neighbors[x]):
                forbidden.add(cx)
    return forbidden


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
