"""The op table that drives every per-op test (in the spirit of PyTorch's OpInfo).

A row says how to call an op, its numpy reference, and how to make sample inputs; the
generic tests (test_ops_*.py) check every row for forward values and dtypes, gradcheck,
gradgradcheck and the method variant. Adding an op = one class in adkit/ops + one row in
the family file here. Rows live by family in op_db_<family>.py.
"""
import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

import adkit as ak

FLOATS = (np.float32, np.float64)


@dataclass
class SampleInput:
    """`args`: ndarrays become tensor arguments (float ones are differentiated in the
    autograd tests); anything else (numbers, tuples, strings) passes through as is."""
    args: tuple
    kwargs: dict = field(default_factory=dict)
    name: str = ""


@dataclass
class OpInfo:
    name: str
    ref: Callable  # numpy reference, called with the same args (arrays) and kwargs
    sample_inputs: Callable  # sample_inputs(dtype, rng) -> list[SampleInput]
    op: Optional[Callable] = None  # default: ak.<name>
    method: Optional[str] = None  # also check tensor.<method>(*rest) against op
    dtypes: tuple = FLOATS
    supports_grad: bool = True
    supports_gradgrad: bool = True
    grad_argnums: Optional[tuple] = None  # which array args to differentiate (default all float)
    atol: dict = field(default_factory=lambda: {np.float32: 1e-5, np.float64: 1e-10})
    rtol: dict = field(default_factory=lambda: {np.float32: 1e-5, np.float64: 1e-10})
    gradcheck_atol: float = 1e-5
    gradcheck_rtol: float = 1e-3
    notes: str = ""

    def __post_init__(self):
        if self.op is None:
            self.op = getattr(ak, self.name)

    def samples(self, dtype):
        rng = np.random.default_rng(zlib.crc32(f"{self.name}-{np.dtype(dtype).name}".encode()))
        return self.sample_inputs(np.dtype(dtype), rng)


# ---------------------------------------------------------------- sample helpers
SHAPES = [(), (5,), (3, 4), (2, 0, 3), (2, 3, 2)]
BROADCAST_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (3,)),
                   ((2, 1, 3), (2, 1)), ((0, 3), (3,))]


def make_array(shape, dtype, rng, low=-2.0, high=2.0):
    """Random values in [low, high), of dtype (ints and bools too)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)  # a 0-d array, not an np.bool_
    if dtype.kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def unary_samples(low=-2.0, high=2.0, shapes=SHAPES):
    """One array per shape, values in [low, high)."""
    def samples(dtype, rng):
        return [SampleInput((make_array(s, dtype, rng, low, high),), name=str(s))
                for s in shapes]
    return samples


def binary_samples(low=-2.0, high=2.0, low_y=None, high_y=None, scalar=1.5):
    """Pairs with broadcasting, plus a Python-scalar second (and first) operand."""
    low_y = low if low_y is None else low_y
    high_y = high if high_y is None else high_y

    def samples(dtype, rng):
        out = [SampleInput((make_array(a, dtype, rng, low, high),
                            make_array(b, dtype, rng, low_y, high_y)), name=f"{a}x{b}")
               for a, b in BROADCAST_PAIRS]
        if scalar is not None:
            out.append(SampleInput((make_array((3,), dtype, rng, low, high), scalar),
                                   name="tensor-scalar"))
        return out
    return samples


def to_tensor_args(args, requires_grad=False, grad_argnums=None):
    """Sample args -> call args: arrays become tensors (float ones requiring grad)."""
    result = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            want = requires_grad and a.dtype.kind == "f" and (
                grad_argnums is None or i in grad_argnums)
            result.append(ak.tensor(a, requires_grad=want))
        elif isinstance(a, list) and a and all(isinstance(x, np.ndarray) for x in a):
            result.append([ak.tensor(x, requires_grad=requires_grad and x.dtype.kind == "f")
                           for x in a])
        else:
            result.append(a)
    return result


def _collect():
    from . import (op_db_elementwise, op_db_indexing, op_db_linalg, op_db_nn,
                   op_db_reduction, op_db_shape, op_db_views)
    rows = []
    for module in (op_db_elementwise, op_db_reduction, op_db_linalg, op_db_shape,
                   op_db_indexing, op_db_nn, op_db_views):
        rows.extend(module.ROWS)
    names = [r.name for r in rows]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate op rows: {dupes}"
    return rows


OP_DB = _collect()
