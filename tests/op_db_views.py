"""Op-table rows for in-place ops through views, and bools and ints mixed with floats:
every generic per-op test (forward, gradcheck/gradgradcheck, forward AD, func and pass
transforms, jit) runs them too. Each in-place row writes into a clone of its first
argument through a view and returns the clone (the base)."""
import numpy as np

import adkit as ak

from .op_db import OpInfo, SampleInput, make_array


def _pair(shape=(3, 4)):
    def samples(dtype, rng):
        return [SampleInput((make_array(shape, dtype, rng, 0.5, 1.5),
                             make_array(shape, dtype, rng, 0.5, 1.5)), name=str(shape))]
    return samples


def _single(shape=(3, 4)):
    def samples(dtype, rng):
        return [SampleInput((make_array(shape, dtype, rng, -1.5, 1.5),), name=str(shape))]
    return samples


def _written(fn):
    """x -> a clone of x written by fn(clone, *rest); works for adkit and numpy alike."""
    def op(x, *rest):
        v = x.clone() if hasattr(x, "clone") else x.copy()
        fn(v, *rest)
        return v
    return op


def _np_mul_slice(v, y):
    v[:, 1:] *= y[:, 1:]


def _np_add_transposed(v, y):
    v.T[1:] += y.T[1:] * 2.0


def _np_exp_view_of_view(v):
    v[1:][:, :2] = np.exp(v[1:][:, :2])


def _np_copy_into_view(v, y):
    v[:, -1:] = np.sin(y[:, :1])


def _np_div_flat_view(v, y):
    flat = v.reshape(-1)
    flat[::2] /= 1.0 + y.reshape(-1)[::2]


def _np_base_then_old_view(v):
    view = v[:, :1]
    v *= 3.0
    view += 1.0


ROWS = [
    OpInfo("mul_ through a slice", _written(_np_mul_slice), _pair(),
           op=_written(lambda v, y: v[:, 1:].mul_(y[:, 1:]))),
    OpInfo("add_ through a transpose", _written(_np_add_transposed), _pair(),
           op=_written(lambda v, y: v.t()[1:].add_(y.t()[1:] * 2.0))),
    OpInfo("exp_ through a view of a view", _written(_np_exp_view_of_view), _single(),
           op=_written(lambda v: v[1:][:, :2].exp_())),
    OpInfo("copy_ into a view", _written(_np_copy_into_view), _pair(),
           op=_written(lambda v, y: v[:, -1:].copy_(y[:, :1].sin()))),
    OpInfo("div_ through a flat view", _written(_np_div_flat_view), _pair(),
           op=_written(lambda v, y: v.view(-1)[::2].div_(1.0 + y.reshape(-1)[::2]))),
    OpInfo("base written while a view exists", _written(_np_base_then_old_view), _single(),
           op=_written(lambda v: (lambda view: (v.mul_(3.0), view.add_(1.0)))(v[:, :1]))),
    OpInfo("bool mask times x", lambda x: (x > 0) * x, _single(),
           op=lambda x: (x > 0) * x),
    OpInfo("int tensor times x", lambda x: np.arange(4) * x, _single(),
           op=lambda x: ak.arange(4) * x),
]
