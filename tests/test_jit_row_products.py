"""Row products (fuse.row_product, codegen/row_products.py): C = A @ B with a long
contracted dim and a small C, computed by the call of the kernel that makes B, a block
of B's rows at a time, so B is never stored whole."""
import numpy as np
import pytest

import adkit as ak
from adkit.codegen import program
from adkit.codegen.folded_products import FoldedProductCall
from adkit.codegen.row_products import RowProductCall

RNG = np.random.default_rng(11)


def _calls(compiled, kind):
    return [c for s in compiled.steps for c in getattr(s, "calls", ()) if isinstance(c, kind)]


@pytest.mark.parametrize("a_shape, b_shape", [
    ((300, 10), (300, 10)),          # no batch: one product
    ((300, 10), (4, 300, 10)),       # A shared by the batch (a gradient's x^T @ w_k)
    ((4, 300, 3), (4, 300, 20)),     # A batched too
    ((2, 3, 200, 5), (2, 3, 200, 7)),  # two batch dims
    ((129, 1), (3, 129, 33)),        # M = 1; rows of 33 (a vector and one element)
    ((300, 64), (2, 300, 64)),       # the largest C: 64 x 64, in tiles
])
def test_values_equal_numpy(a_shape, b_shape):
    """x^T @ (c * u * 2): K (the 300) spans several blocks of rows, the last one short."""
    a, u = RNG.standard_normal(a_shape), RNG.standard_normal(b_shape)
    c = RNG.standard_normal(b_shape[:-1] + (1,))
    f = ak.jit(lambda a, c, u: a.transpose(-2, -1) @ (c * u * 2.0), compile="eager")
    tensors = [ak.tensor(v) for v in (a, c, u)]
    assert _calls(f.compile(*tensors), RowProductCall)
    assert not _calls(f.compile(*tensors), program.MatmulCall)
    want = np.swapaxes(a, -2, -1) @ (c * u * 2.0)
    for _ in range(2):  # the second call reuses the buffers
        np.testing.assert_allclose(f(*tensors).numpy(), want, rtol=1e-12, atol=1e-12)


def test_the_kernel_keeps_its_other_outputs():
    """The kernel making B also sums and averages it over K and returns another value
    of its iteration space: all as without the product."""
    x, u = RNG.standard_normal((500, 6)), RNG.standard_normal((5, 500, 9))

    def f(x, u):
        w = (u * 3.0).tanh()
        return x.transpose(0, 1) @ w, w.sum(1), w.mean(1), (w * w).sum()
    jitted = ak.jit(f, compile="eager")
    tensors = [ak.tensor(x), ak.tensor(u)]
    assert _calls(jitted.compile(*tensors), RowProductCall)
    for got, want in zip(jitted(*tensors), f(*tensors), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_float32():
    x, u = RNG.standard_normal((400, 12)).astype(np.float32), \
        RNG.standard_normal((3, 400, 5)).astype(np.float32)
    f = ak.jit(lambda x, u: x.transpose(0, 1) @ u.exp(), compile="eager")
    tensors = [ak.tensor(x), ak.tensor(u)]
    assert _calls(f.compile(*tensors), RowProductCall)
    np.testing.assert_allclose(f(*tensors).numpy(), x.T @ np.exp(u), rtol=2e-5, atol=1e-4)


def test_b_read_elsewhere_or_a_big_result_stays_blas():
    """B that is also returned is stored whole anyway (BLAS reads it); a C of more than
    ROW_PRODUCT_MAX_OUTPUT elements per matrix is BLAS's too."""
    x, u = RNG.standard_normal((300, 10)), RNG.standard_normal((4, 300, 10))
    tensors = [ak.tensor(x), ak.tensor(u)]
    both = ak.jit(lambda x, u: (x.transpose(0, 1) @ (u * 2.0), u * 2.0), compile="eager")
    assert _calls(both.compile(*tensors), program.MatmulCall)
    assert not _calls(both.compile(*tensors), RowProductCall)
    big = [ak.tensor(RNG.standard_normal((300, 80))), ak.tensor(RNG.standard_normal((300, 80)))]
    wide = ak.jit(lambda x, u: x.transpose(0, 1) @ (u * 2.0), compile="eager")
    assert not _calls(wide.compile(*big), RowProductCall)
    np.testing.assert_allclose(both(*tensors)[0].numpy(), x.T @ (u * 2.0), rtol=1e-12)


def test_a_gaussian_mixture_gradient():
    """The case that asked for it: the gradient of a GMM-like objective, whose
    backward computes x^T @ (r * y) per component."""
    x, mu = RNG.standard_normal((700, 3)), RNG.standard_normal((4, 3))
    q = RNG.standard_normal((4, 3, 3)) * 0.3

    def loss(mu, q):
        y = x @ q - (mu[:, None, :] @ q)
        return ak.logsumexp(-0.5 * (y * y).sum(2), 0).sum()
    args = [ak.tensor(mu), ak.tensor(q)]
    grad = ak.func.grad(loss, argnums=(0, 1))
    jitted = ak.jit(grad, compile="eager")
    assert _calls(jitted.compile(*args), RowProductCall)
    for got, want in zip(jitted(*args), grad(*args), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("batch, k, n, dtype", [
    ((4,), 300, 10, np.float64),      # rows of 10 in pairs: 20 = 5 vectors of 4
    ((5,), 300, 10, np.float64),      # a last group of one
    ((2, 3), 200, 10, np.float64),    # two batch dims, flattened
    ((7,), 250, 3, np.float64),       # groups of 4 (12 = 3 vectors of 4)
    ((6,), 300, 6, np.float32),
    ((25,), 10000, 10, np.float64),   # a GMM medium's: threads may split the batch
])
def test_folded_products_equal_numpy(batch, k, n, dtype):
    """A shared by the batch, rows that fill their vectors poorly: groups of batch
    elements side by side in one product (FoldedProductCall); the kernel's other
    outputs (the sums over K) as without it."""
    a = RNG.standard_normal((k, 7)).astype(dtype)
    x = RNG.standard_normal((k, n)).astype(dtype)
    c = RNG.standard_normal(batch + (k, 1)).astype(dtype)
    f = ak.jit(lambda a, x, c: (a.transpose(0, 1) @ (c * x), (c * x).sum(-2)),
               compile="eager")
    tensors = [ak.tensor(v) for v in (a, x, c)]
    assert _calls(f.compile(*tensors), FoldedProductCall)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for _ in range(2):  # the second call reuses the buffers
        got, sums = f(*tensors)
        np.testing.assert_allclose(got.numpy(), a.T @ (c * x), rtol=tol, atol=tol)
        np.testing.assert_allclose(sums.numpy(), (c * x).sum(-2), rtol=tol, atol=tol)


def test_rows_that_fill_their_vectors_do_not_fold():
    """Rows of 8 float64s are two whole vectors of 4: nothing to gain."""
    x, c = RNG.standard_normal((300, 8)), RNG.standard_normal((4, 300, 1))
    f = ak.jit(lambda x, c: x.transpose(0, 1) @ (c * x), compile="eager")
    calls = _calls(f.compile(ak.tensor(x), ak.tensor(c)), RowProductCall)
    assert calls and not any(isinstance(call, FoldedProductCall) for call in calls)
    np.testing.assert_allclose(f(ak.tensor(x), ak.tensor(c)).numpy(), x.T @ (c * x),
                               rtol=1e-12)
