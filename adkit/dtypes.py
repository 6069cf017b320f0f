"""dtype objects, the default dtype and type promotion.

Owns: `DType` (a thin named wrapper over a numpy dtype), the default float dtype and the
ONE promotion table (PyTorch's rules). Does not: touch tensors or arrays' data.
Invariant: every op that computes a result dtype asks `result_type` here.
"""
import threading

import numpy as np


class DType:
    """A tensor element type, printed as `adkit.float32`. Compares equal to its numpy dtype."""

    __slots__ = ("name", "np", "is_floating_point", "is_bool", "itemsize", "_rank")

    def __init__(self, name, np_dtype, rank):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = self.np.kind == "f"
        self.is_bool = self.np.kind == "b"
        self.itemsize = self.np.itemsize
        self._rank = rank  # order inside the category, for promotion

    @property
    def category(self):
        """0 bool, 1 integer, 2 floating."""
        return 2 if self.is_floating_point else (0 if self.is_bool else 1)

    def __repr__(self):
        return f"adkit.{self.name}"

    def __eq__(self, other):
        if isinstance(other, DType):
            return self is other
        try:
            return self.np == np.dtype(other)
        except TypeError:
            return NotImplemented

    def __hash__(self):
        return hash(self.np)

    def __reduce__(self):
        return (from_numpy_dtype, (self.np.str,))


bool_ = DType("bool", np.bool_, 0)
int32 = DType("int32", np.int32, 32)
int64 = DType("int64", np.int64, 64)
float16 = DType("float16", np.float16, 16)
float32 = DType("float32", np.float32, 32)
float64 = DType("float64", np.float64, 64)
ALL = (bool_, int32, int64, float16, float32, float64)
_BY_NUMPY = {d.np: d for d in ALL}
_EXTRA_NUMPY = {  # numpy integer types adkit maps onto its own
    np.dtype(np.int8): int32, np.dtype(np.int16): int32, np.dtype(np.uint8): int32,
    np.dtype(np.uint16): int32, np.dtype(np.uint32): int64,
}


def from_numpy_dtype(np_dtype):
    """The adkit DType for a numpy dtype; TypeError for one adkit does not support."""
    np_dtype = np.dtype(np_dtype)
    dt = _BY_NUMPY.get(np_dtype) or _EXTRA_NUMPY.get(np_dtype)
    if dt is None:
        raise TypeError(f"adkit does not support numpy dtype {np_dtype}; "
                        "supported: bool, int32, int64, float16, float32, float64")
    return dt


def to_dtype(spec):
    """Accept a DType, numpy dtype, Python type or string; return a DType (None passes)."""
    if spec is None or isinstance(spec, DType):
        return spec
    if spec is float:
        return get_default_dtype()
    if spec is int:
        return int64
    if spec is bool:
        return bool_
    return from_numpy_dtype(spec)


_state = threading.local()


def get_default_dtype():
    """The dtype Python floats become (float32 unless changed)."""
    return getattr(_state, "default", float32)


def set_default_dtype(dtype):
    dtype = to_dtype(dtype)
    if not dtype.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _state.default = dtype


def promote_types(a, b):
    """PyTorch's promote_types: bool < integers < floats, wider wins within a category."""
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    return a if a._rank >= b._rank else b


def _combine_categories(higher, lower):
    # PyTorch's combine_categories: a lower-priority participant only matters if it is of
    # a higher category (e.g. a float 0-d tensor or Python float next to an int tensor).
    if higher is None:
        return lower
    if lower is None or higher.is_floating_point:
        return higher
    if higher.is_bool or lower.is_floating_point:
        return promote_types(higher, lower)
    return higher


def _scalar_dtype(value):
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int64
    if isinstance(value, float):
        return get_default_dtype()
    raise TypeError(f"expected a tensor or a number, got {type(value).__name__}")


def result_type(*operands):
    """Result dtype of an op on operands (DTypes with ndim via `(dtype, ndim)` pairs,
    arrays, or Python numbers), by PyTorch's three tiers: dimensioned tensors,
    zero-dim tensors, Python scalars."""
    dim = zero = wrapped = None
    for op in operands:
        if isinstance(op, np.ndarray):
            dt, ndim = from_numpy_dtype(op.dtype), op.ndim
        elif isinstance(op, tuple):
            dt, ndim = op
        elif isinstance(op, np.generic):  # numpy scalars act as 0-d tensors
            dt, ndim = from_numpy_dtype(op.dtype), 0
        else:
            dt = _scalar_dtype(op)
            wrapped = dt if wrapped is None else promote_types(wrapped, dt)
            continue
        if ndim:
            dim = dt if dim is None else promote_types(dim, dt)
        else:
            zero = dt if zero is None else promote_types(zero, dt)
    return _combine_categories(dim, _combine_categories(zero, wrapped))


def float_result_type(*operands):
    """Like result_type, but integer and bool results become the default float dtype
    (true division, exp, sin, ...)."""
    dt = result_type(*operands)
    return dt if dt.is_floating_point else get_default_dtype()
