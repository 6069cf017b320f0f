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
        self.rows = np.asarray(rows, dtype=np.int64)
        self.cols = np.asarray(cols, dtype=np.int64)
        if self.rows.shape != self.cols.shape or self.rows.ndim != 1:
            raise ValueError("rows and cols must be 1-D arrays of the same length")

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
        return int(self.rows.size)

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
