"""Index sets of a whole value, for the sparsity pass: which input elements each of its
elements depends on.

Owns: `Deps` and what the pass does with them: union (an elementwise op), composition
through an op's links (`compose`, `moved_union`: gathers, scatters, reductions), the
all-reading fallback (`everything`), stacking, and conversion to sorted CSR.
Does not: walk graphs or call op rules (sparsity.py does).

Layout (ELLPACK): a Deps of a value of shape S (n elements) is a tuple of blocks, each
an int32 array of shape (width, *S) or (width, n); element k's set is the entries at
element k of every block (the block's column k, flattened), NONE meaning "no entry".
Slicing and broadcasting a value's sets are then numpy views of its blocks, and cat and
stack strided copies (the `Move` and `Slab` links of ops/_sparsity.py). Repeats are allowed until `compacted()` (or the final CSR) removes
them. Blocks are never written after they are made, so values share them: x * x, or
x + f(x) for an elementwise f, holds the same block objects as x, and a union keeps one
of each object. That is why a stencil's sets cost a few gathers per op instead of a
sort per op: the sets are sorted and deduplicated once, at the end, with a sorting
network over the (few) rows of the one block left.
"""
import math

import numpy as np

from ...ops._sparsity import Move, Slab
from . import scratch

INDEX = np.int32
NONE = np.iinfo(INDEX).max
# beyond this many (element, input) pairs in one value the pattern is dense enough that
# a dense Jacobian is the better tool (2**28 pairs are 1 GB of int32 indices)
MAX_PAIRS = 2 ** 28
# a union wider than this many rows is compacted (sorted, repeats dropped) so that
# repeats never pile up along a chain of ops
COMPACT_WIDTH = 16
# sets up to this wide are sorted with a sorting network (a few numpy min/max calls
# per comparator over all elements at once) instead of np.sort's per-element calls
NETWORK_WIDTH = 16


def check_size(n_pairs):
    if n_pairs > MAX_PAIRS:
        raise MemoryError(f"the sparsity pattern needs more than {MAX_PAIRS} index pairs "
                          "for one value: the Jacobian is too dense for sparse methods")


def check_columns(n_cols):
    if n_cols >= NONE:
        raise ValueError(f"sparsity detection numbers input elements with int32: "
                         f"{n_cols} input elements are too many")


class Deps:
    """For each element of a value of `shape`, the input elements it depends on (see
    the module doc)."""

    __slots__ = ("_compact", "_csr", "blocks", "n", "shape", "width")

    def __init__(self, shape, blocks=()):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        self.n = math.prod(self.shape)
        self.blocks, self._csr = tuple(blocks), None
        self._compact = False  # made by compacted(): sorting again would change nothing
        self.width = sum(b.shape[0] for b in self.blocks)  # rows in all

    @classmethod
    def empty(cls, shape):
        return cls(shape)

    @classmethod
    def identity(cls, n, first):
        """Element k depends on input element first + k."""
        check_columns(first + n)
        return cls(n, (np.arange(first, first + n, dtype=INDEX)[None, :],))

    def with_shape(self, shape):
        if tuple(shape) == self.shape:
            return self
        result = Deps(shape, self.blocks)
        result._compact = self._compact  # a reshape keeps each element's set as it was
        return result

    def shaped_blocks(self):
        """The blocks laid out as (width, *shape)."""
        return [b if b.shape[1:] == self.shape else b.reshape(b.shape[:1] + self.shape)
                for b in self.blocks]

    def block(self):
        """All blocks as one (width, n) array (repeats kept)."""
        flat = [b.reshape(b.shape[0], self.n) for b in self.blocks]
        if len(flat) == 1:
            return flat[0]
        if not flat:
            return np.full((0, self.n), NONE, INDEX)
        return np.concatenate(flat, out=scratch.empty((self.width, self.n), INDEX))

    def gather(self, src):
        """The sets of elements src[0], src[1], ... (a flat value)."""
        src = np.asarray(src, np.int64).reshape(-1)
        check_size(self.width * src.size)
        if not self.blocks:
            return Deps(src.size)
        return Deps(src.size, (np.take(self.block(), src, axis=1,
                                       out=scratch.empty((self.width, src.size), INDEX)),))

    def compacted(self):
        """The same sets as one block, each element's entries ascending then NONE, no
        repeats, as few rows as the largest set needs."""
        if self._compact or not self.blocks or \
                (len(self.blocks) == 1 and self.blocks[0].shape[0] <= 1):
            return self
        rows = _sorted_columns(self.block())
        repeat = np.equal(rows[1:], rows[:-1],
                          out=scratch.empty((rows.shape[0] - 1, self.n), bool))
        if repeat.any():
            rows[1:][repeat] = NONE
            rows = _sorted_columns(rows)
        # sorted columns put each set's entries first: row r holds some entry only if
        # its least value is one
        used = sum(1 for row in rows if row.size and row.min() != NONE)
        result = Deps(self.shape, (rows[:used],) if used else ())
        result._compact = True
        return result

    # CSR view (sorted, no repeats), for the final pattern, the Hessian pass and the
    # loop and branch rules
    def csr(self):
        if self._csr is None:
            rows = self.compacted().block()
            # element-major (n, width): each element's entries, ascending, then NONE
            entries = np.ascontiguousarray(rows.T, dtype=np.int64)
            if not rows.size or rows[-1].max() != NONE:  # all sets as wide: no masking
                indptr = np.arange(self.n + 1, dtype=np.int64) * entries.shape[1]
                self._csr = (indptr, entries.reshape(-1))
            else:
                present = entries != NONE
                indptr = np.zeros(self.n + 1, np.int64)
                np.cumsum(present.sum(axis=1), out=indptr[1:])
                self._csr = (indptr, entries[present])
        return self._csr

    @property
    def indptr(self):
        return self.csr()[0]

    @property
    def indices(self):
        return self.csr()[1]

    @property
    def nnz(self):
        return int(self.indices.size)

    def is_empty(self):
        return not self.blocks

    def lengths(self):
        return np.diff(self.indptr)

    def rows(self):
        """The element of each entry of `indices`."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.lengths())


def union(deps_list, shape):
    """Element k's set is the union of its sets in each Deps (all of `shape`)."""
    if len(deps_list) == 1 and deps_list[0].shape == tuple(shape):  # (a unary op's)
        deps = deps_list[0]
        return deps.compacted() if deps.width > COMPACT_WIDTH else deps
    blocks, seen = [], set()
    for d in deps_list:
        for b in d.blocks:
            if id(b) not in seen:
                seen.add(id(b))
                blocks.append(b)
    result = Deps(shape, blocks)
    return result.compacted() if result.width > COMPACT_WIDTH else result


def compose(link, deps, shape):
    """The Deps of a result of `shape` reading `deps`'s elements as `link` says (ops/
    _sparsity.py): a Move or Slab, or (dst, src): result element dst[k] reads element
    src[k]; dst None means result element k reads src[k]; src None too means result
    element k reads element k."""
    if isinstance(link, Move):
        return Deps(shape, [link.move(b) for b in deps.shaped_blocks()])
    if isinstance(link, Slab):
        return slabbed([(deps, link)], shape)
    dst, src = link
    n = math.prod(shape)
    if dst is None and src is None:
        return deps.with_shape(shape) if deps.n == n else deps.gather(np.arange(n))
    if dst is None:
        return deps.gather(src).with_shape(shape)
    dst = np.asarray(dst, np.int64).reshape(-1)
    src = np.arange(dst.size) if src is None else np.asarray(src, np.int64).reshape(-1)
    if dst.size <= n and _all_distinct(dst, n):
        return _scatter([(deps, dst, src)], shape)
    return _grouped(deps, dst, src, shape)


def moved_union(parts, shape):
    """The union over parts (deps, link) of `compose`, for links (dst, src) with dst
    given: when no result element is written by two parts, the parts share rows (the
    result is as wide as the widest part, not the sum of their widths)."""
    flat = [(d, np.asarray(dst, np.int64).reshape(-1),
             np.arange(np.size(dst)) if src is None else np.asarray(src, np.int64).reshape(-1))
            for d, (dst, src) in parts]
    every_dst, n = np.concatenate([dst for _, dst, _ in flat]), math.prod(shape)
    if every_dst.size <= n and _all_distinct(every_dst, n):
        return _scatter(flat, shape)
    return union([compose((dst, src), d, shape) for d, dst, src in flat], shape)


def slabbed(parts, shape):
    """The union over parts (deps, Slab): each fills its slice of the result along a
    dim (strided copies); the slices of a cat or a stack do not meet, so the parts
    share rows."""
    width = max((d.width for d, _ in parts), default=0)
    check_size(width * math.prod(shape))
    if width == 0:
        return Deps(shape)
    dims = {slab.dim for _, slab in parts}
    tiled = len(dims) == 1 and sum(s.stop - s.start for _, s in parts) == shape[dims.pop()]
    # slabs that tile the result (no constant part left out) write each entry once
    rows = scratch.empty((width,) + tuple(shape), INDEX) if tiled else \
        scratch.full((width,) + tuple(shape), NONE, INDEX)
    for d, slab in parts:
        region = rows[(slice(None),) + slab.key()]
        row = 0
        for b in d.blocks:  # block by block: no concatenated copy of d's rows
            region[row:row + b.shape[0]] = b.reshape(b.shape[:1] + region.shape[1:])
            row += b.shape[0]
        region[row:] = NONE
    return Deps(shape, (rows,))


def _all_distinct(dst, n):
    return dst.size == 0 or np.bincount(dst, minlength=n).max() <= 1


def _scatter(parts, shape):
    """Result element dst[k] reads src[k] of its part's Deps; no element twice."""
    width, n = max((d.width for d, _, _ in parts), default=0), math.prod(shape)
    check_size(width * n)
    if width == 0:
        return Deps(shape)
    rows = scratch.full((width, n), NONE, INDEX)
    for d, dst, src in parts:
        if d.blocks:
            rows[:d.width, dst] = d.block()[:, src]
    return Deps(shape, (rows,))


def _grouped(deps, dst, src, shape):
    """Result element dst[k] reads src[k], several k per result element (a reduction,
    a contraction): the k of one result element go to rows rank * width + r."""
    n = math.prod(shape)
    if dst.size == 0 or not deps.blocks:
        return Deps(shape)
    order = np.argsort(dst, kind="stable")
    dst, src = dst[order], src[order]
    counts = np.bincount(dst, minlength=n)
    rank = np.arange(dst.size) - np.repeat(np.cumsum(counts) - counts, counts)
    block, width = deps.block(), deps.width
    check_size(int(counts.max()) * width * n)
    rows = scratch.full((int(counts.max()), width, n), NONE, INDEX)
    rows[rank, :, dst] = block[:, src].T
    return Deps(shape, (rows.reshape(-1, n),)).compacted()


def everything(deps, shape):
    """Every element of a result of `shape` depends on every input element in `deps`."""
    every = np.unique(deps.block())
    every = every[every != NONE]
    n = math.prod(shape)
    check_size(every.size * n)
    if every.size == 0:
        return Deps(shape)
    return Deps(shape, (np.broadcast_to(every.astype(INDEX)[:, None], (every.size, n)),))


def stacked(deps_list):
    """One flat Deps whose elements are those of each Deps in turn (outputs, steps)."""
    if len(deps_list) == 1:
        return deps_list[0]
    n = sum(d.n for d in deps_list)
    width = max((d.width for d in deps_list), default=0)
    check_size(width * n)
    if width == 0:
        return Deps(n)
    rows, start = scratch.full((width, n), NONE, INDEX), 0
    for d in deps_list:
        if d.blocks:
            rows[:d.width, start:start + d.n] = d.block()
        start += d.n
    return Deps(n, (rows,))


def _sorted_columns(block):
    """A new (width, n) array: `block` with each column sorted."""
    width, n = block.shape
    if width > NETWORK_WIDTH:
        rows = scratch.empty(block.shape, block.dtype)
        np.copyto(rows, block)
        rows.sort(axis=0)
        return rows
    # each comparator writes its min and max into new rows, which then stand for rows i
    # and j: two writes per comparator and no copy back (scratch memory is cheap)
    current = list(block)
    for i, j in _network(width):
        low, high = scratch.empty((2, n), block.dtype)
        np.minimum(current[i], current[j], out=low)
        np.maximum(current[i], current[j], out=high)
        current[i], current[j] = low, high
    rows = scratch.empty(block.shape, block.dtype)
    for i, row in enumerate(current):
        rows[i] = row
    return rows


_NETWORKS = {}


def _network(width):
    """Batcher's odd-even merge sort for `width` inputs: the network for the next power
    of two, without the comparators that touch the padding (padding would be +inf,
    which no comparator moves down, so those comparators do nothing)."""
    if width not in _NETWORKS:
        size = 1
        while size < width:
            size *= 2
        _NETWORKS[width] = [(i, j) for i, j in _batcher(size) if j < width]
    return _NETWORKS[width]


def _batcher(size):
    pairs, p = [], 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return pairs
