"""The containers of sparse derivatives: `SparsityPattern` and `SparseMatrix`.

Owns: both classes (coordinates as sorted int64 ndarrays, row-major). Does not: detect
patterns (adkit/ir/passes/sparsity.py), color them (coloring.py) or evaluate
derivatives (func/sparse.py).
"""
from collections import namedtuple

import numpy as np

from ..tensor import Tensor, _make


class SparsityPattern:
    """Where a matrix may be nonzero: `rows[k], cols[k]` for k < nnz, sorted row-major,
    no repeats."""

    def __init__(self, shape, rows, cols):
        self.shape = (int(shape[0]), int(shape[1]))
        self._rows, self._indptr = np.asarray(rows, dtype=np.int64), None
        self.cols = np.asarray(cols, dtype=np.int64)
        if self._rows.shape != self.cols.shape or self._rows.ndim != 1:
            raise ValueError("rows and cols must be 1-D arrays of the same length")

    @classmethod
    def from_csr(cls, shape, indptr, cols):
        """The pattern whose row i holds cols[indptr[i]:indptr[i + 1]] (sorted, no
        repeats): CSR, the row of each entry worked out only when asked for."""
        pattern = cls.__new__(cls)
        pattern.shape = (int(shape[0]), int(shape[1]))
        pattern._indptr = np.asarray(indptr, dtype=np.int64)
        pattern._rows, pattern.cols = None, np.asarray(cols, dtype=np.int64)
        if pattern._indptr.shape != (pattern.shape[0] + 1,) or \
                pattern._indptr[-1] != pattern.cols.size:
            raise ValueError("indptr must have one more entry than rows, ending at len(cols)")
        return pattern

    @property
    def rows(self):
        """The row of each entry."""
        if self._rows is None:
            self._rows = np.repeat(np.arange(self.shape[0], dtype=np.int64),
                                   np.diff(self._indptr))
        return self._rows

    @property
    def indptr(self):
        """CSR row pointers: row i's entries are cols[indptr[i]:indptr[i + 1]]."""
        if self._indptr is None:
            self._indptr = np.zeros(self.shape[0] + 1, np.int64)
            np.cumsum(np.bincount(self._rows, minlength=self.shape[0]), out=self._indptr[1:])
        return self._indptr

    @classmethod
    def from_dense(cls, mask):
        """The pattern of a 2-D array's nonzeros."""
        mask = np.asarray(mask)
        if mask.ndim != 2:
            raise ValueError(f"from_dense takes a 2-D array, got shape {mask.shape}")
        rows, cols = np.nonzero(mask)
        return cls(mask.shape, rows, cols)

    @property
    def nnz(self):
        return int(self.cols.size)

    def todense(self):
        """A boolean ndarray of the shape, True at the pattern's entries."""
        dense = np.zeros(self.shape, bool)
        dense[self.rows, self.cols] = True
        return dense

    def transpose(self):
        order = np.lexsort((self.rows, self.cols))
        return SparsityPattern(self.shape[::-1], self.cols[order], self.rows[order])

    @property
    def T(self):
        return self.transpose()

    def __eq__(self, other):
        return isinstance(other, SparsityPattern) and self.shape == other.shape and \
            np.array_equal(self.rows, other.rows) and np.array_equal(self.cols, other.cols)

    __hash__ = None

    def __repr__(self):
        density = self.nnz / max(1, self.shape[0] * self.shape[1])
        return f"SparsityPattern(shape={self.shape}, nnz={self.nnz}, density={density:.3g})"


_SparseFields = namedtuple("SparseMatrix", ("values", "rows", "cols", "shape"))


class SparseMatrix(_SparseFields):
    """A sparse matrix in coordinate form: `values[k]` (a Tensor) at `(rows[k], cols[k])`.
    A namedtuple, so it is a pytree: `ak.jit` and the transforms return it as they
    return tuples (values traced, coordinates and shape static)."""

    __slots__ = ()

    @property
    def nnz(self):
        return int(np.size(self.rows))

    def todense(self):
        """The dense matrix as a Tensor of concrete values (not recorded by autograd)."""
        dense = np.zeros(self.shape, dtype=self.values._data.dtype)
        np.add.at(dense, (self.rows, self.cols), self.values._data)
        return _make(dense)

    def to_scipy(self):
        """A scipy.sparse.csr_matrix (scipy is optional: ImportError without it)."""
        try:
            import scipy.sparse  # optional dependency, only for this conversion
        except ImportError as e:
            raise ImportError("SparseMatrix.to_scipy needs scipy (pip install scipy)") from e
        values = self.values._data if isinstance(self.values, Tensor) else self.values
        return scipy.sparse.csr_matrix((np.asarray(values), (self.rows, self.cols)),
                                       shape=self.shape)

    def __repr__(self):
        return f"SparseMatrix(shape={self.shape}, nnz={self.nnz})"
