"""Op rows: reductions."""
import numpy as np

from .op_db import OpInfo, SampleInput, make_array


def _sum_samples(dtype, rng):
    x = make_array((2, 3, 4), dtype, rng)
    return [SampleInput((x,)), SampleInput((x, 1)), SampleInput((x, (0, 2), True)),
            SampleInput((x, -1), {"keepdim": True}), SampleInput((make_array((), dtype, rng),)),
            SampleInput((make_array((0, 3), dtype, rng), 0))]


def _sum_ref(x, dim=None, keepdim=False):
    return np.sum(x, axis=dim if not isinstance(dim, list) else tuple(dim), keepdims=keepdim)


ROWS = [
    OpInfo("sum", _sum_ref, _sum_samples, method="sum"),
]
