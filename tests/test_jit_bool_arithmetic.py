"""Bools inside jitted float arithmetic: a comparison used as a number (x * (x > 0)) is
0.0/1.0 in the kernel, as numpy and PyTorch promote it (was: an LLVM type error)."""
import numpy as np
import pytest

import adkit as ak

PROGRAMS = {
    "mask_times_x_sum": lambda x: ((x > 0) * x).sum(),
    "mask_plus_x": lambda x: (x > 0) + x,
    "mask_scaled_exp": lambda x: ((x > 0) * 1.5).exp(),
    "mask_divided": lambda x: (x > 0) / 2.0 + x,
    "bool_equality_times_x": lambda x: ((x > 0) == (x < 1)) * x,
    "where_bool_or_number": lambda x: ak.where(x > 0, x > 1, 2.0) * x,
    "maximum_of_bool_and_x": lambda x: ak.maximum(x > 0, x),
    "where_on_bools_stays_bool": lambda x: ak.where(x > 0, x > 1, x < -1),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_jitted_bool_arithmetic_matches_eager(name, dtype):
    fn = PROGRAMS[name]
    x = ak.tensor(np.random.default_rng(0).standard_normal((3, 17)).astype(dtype))
    got, want = ak.jit(fn)(x), fn(x)
    assert got.dtype == want.dtype
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got.numpy().astype(float), want.numpy().astype(float),
                               rtol=tol, atol=tol)


def test_jitted_gradient_through_a_mask():
    grad = ak.func.grad(lambda x: ((x > 0) * x * x).sum())
    x = ak.tensor(np.random.default_rng(1).standard_normal((4, 9)))
    np.testing.assert_allclose(ak.jit(grad)(x).numpy(), grad(x).numpy(), rtol=1e-14)
    np.testing.assert_allclose(grad(x).numpy(), 2 * np.maximum(x.numpy(), 0), rtol=1e-14)
