"""The outer loop of multi-dim kernels (codegen/rows.py): the row index stepped like an
odometer, and outputs reduced over the rows combined in registers until the run of
rows sharing their elements ends (at a carry, at the end of a thread's part)."""
import numpy as np
import pytest

import adkit as ak

RNG = np.random.default_rng(12)


@pytest.mark.parametrize("shape", [(3, 7, 5), (2, 3, 4, 10), (4, 300, 20), (3, 2, 33),
                                   (60, 2000, 3)])
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod"])
def test_reductions_over_rows_equal_numpy(shape, op):
    """Over the rows (dim -2), over rows and batch, and with a value of the whole space
    beside them; the (60, 2000, 3) case is big enough for threads to split it."""
    x = RNG.uniform(0.5, 1.5, shape)

    def f(x):
        y = (x * 1.5).tanh() if op != "prod" else (x * 1e-4).exp()  # no underflow
        return getattr(y, op)(-2), getattr(y, op)((0, -2)), y * 2.0
    jitted = ak.jit(f, compile="eager")
    for _ in range(2):
        for got, want in zip(jitted(ak.tensor(x)), f(ak.tensor(x)), strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)


def test_float32_sums_over_rows():
    x = RNG.standard_normal((5, 400, 6)).astype(np.float32)
    f = ak.jit(lambda x: (x * x).sum(1, keepdim=True), compile="eager")
    np.testing.assert_allclose(f(ak.tensor(x)).numpy(), (x * x).sum(1, keepdims=True),
                               rtol=1e-5)


@pytest.mark.parametrize("shape", [(4, 5, 6, 3), (2, 1, 9, 4), (7, 3, 1, 5)])
def test_odometer_steps_through_every_digit(shape):
    """Carries over several outer dims, unit dims among them, a broadcast operand and a
    transposed one (strides that are not the layout's)."""
    x, y = RNG.standard_normal(shape), RNG.standard_normal(shape[1:])
    f = ak.jit(lambda x, y: (x * y + x.transpose(0, 1).transpose(0, 1)).exp(),
               compile="eager")
    np.testing.assert_allclose(f(ak.tensor(x), ak.tensor(y)).numpy(), np.exp(x * y + x),
                               rtol=1e-13)
