"""Op rows: shape ops."""
import numpy as np

from .op_db import OpInfo, SampleInput, make_array


def _reshape_samples(dtype, rng):
    x = make_array((2, 3, 4), dtype, rng)
    return [SampleInput((x, (6, 4))), SampleInput((x, (-1,))), SampleInput((x, (4, -1, 2))),
            SampleInput((make_array((), dtype, rng), (1, 1))),
            SampleInput((make_array((0, 3), dtype, rng), (3, 0)))]


def _expand_samples(dtype, rng):
    return [SampleInput((make_array((3, 1), dtype, rng), (3, 4))),
            SampleInput((make_array((4,), dtype, rng), (2, 3, 4))),
            SampleInput((make_array((), dtype, rng), (2,))),
            SampleInput((make_array((1, 2), dtype, rng), (-1, 2)))]


def _expand_ref(x, shape):
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return np.broadcast_to(x, shape)


ROWS = [
    OpInfo("reshape", np.reshape, _reshape_samples, method="reshape"),
    OpInfo("expand", _expand_ref, _expand_samples, op=lambda x, s: x.expand(s)),
    OpInfo("clone", np.copy, lambda dt, rng: [SampleInput((make_array((3, 2), dt, rng),))]),
]
