"""contract_first (ir/passes/contract_first.py, run by fuse): A @ (s c (X @ Q -+ M @ Q))
and sum_to_size of the same over its rows, rewritten to contract c (X -+ M) (c a row
constant), so that the matmul result Y is not read back; a gradient's forward kernel
then stops storing it."""
import numpy as np
import pytest

import adkit as ak
from adkit.codegen import program
from adkit.codegen.row_products import RowProductCall
from adkit.ir.passes.contract_first import contract_first

RNG = np.random.default_rng(5)


def _graph(fn, *arrays):
    """fn's traced graph after jit's passes up to fusion (what fuse gets)."""
    return ak.jit(fn, passes=[ak.ir.passes.simplify, ak.ir.passes.cse,
                              ak.ir.passes.dce]).lower(*[ak.tensor(a) for a in arrays])


def _agree(fn, *arrays, rtol=1e-11):
    """The jitted fn (contract_first inside fuse) agrees with the eager one."""
    tensors = [ak.tensor(a) for a in arrays]
    want = fn(*tensors)
    got = ak.jit(fn, compile="eager")(*tensors)
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=rtol)


def _big_values_of_kernels(compiled, shape):
    """How many kernel calls write a value of `shape` to memory."""
    return sum(1 for s in compiled.steps for c in getattr(s, "calls", ())
               if isinstance(c, program.KernelCall)
               for layout in c.outputs if tuple(layout.shape) == shape)


def _gmm_like(x, q, mu, w):
    """A GMM's log-likelihood shape: y_k = x Q_k - mu_k Q_k, a softmax over k."""
    y = x @ q - mu[:, None, :] @ q
    main = w[:, None] - 0.5 * (y * y).sum(2)
    return ak.logsumexp(main, 0).sum()


def _gmm_data(k=4, n=200, d=5):
    return (RNG.standard_normal((n, d)), RNG.standard_normal((k, d, d)),
            RNG.standard_normal((k, d)), RNG.standard_normal(k))


def test_gradient_of_a_gmm_like_objective():
    """Its gradient needs x^T (r_k * y_k) and sum_i r_ki y_ki: both rewritten; the
    forward kernel no longer stores y [k, n, d]; the values are those of eager."""
    data = _gmm_data()
    grad = ak.func.grad(_gmm_like, argnums=(1, 2, 3))
    _agree(grad, *data)
    compiled = ak.jit(grad, compile="eager").compile(*[ak.tensor(a) for a in data])
    assert _big_values_of_kernels(compiled, (4, 200, 5)) == 0
    assert any(isinstance(c, RowProductCall) for s in compiled.steps
               for c in getattr(s, "calls", ()))


@pytest.mark.parametrize("name, fn", [
    ("minus M Q", lambda a, c, x, q, m: a.T @ (c * (x @ q - m @ q))),
    ("plus M Q", lambda a, c, x, q, m: a.T @ ((x @ q + m @ q) * c)),
    ("no M", lambda a, c, x, q, m: a.T @ (c * (x @ q))),
    ("numbers and neg", lambda a, c, x, q, m: a.T @ -((c * (x @ q - m @ q)) * 3.0)),
    ("x + x", lambda a, c, x, q, m: a.T @ ((c * (x @ q - m @ q)) + (c * (x @ q - m @ q)))),
    ("two row constants", lambda a, c, x, q, m: a.T @ (c * ((2 * c) * (x @ q - m @ q)))),
    ("row sums", lambda a, c, x, q, m: (c * (x @ q - m @ q)).sum_to_size(3, 1, 6)),
    ("row sums, negated", lambda a, c, x, q, m: (-(c * (x @ q))).sum_to_size(3, 1, 6)),
    ("both", lambda a, c, x, q, m: (a.T @ (c * (x @ q - m @ q)),
                                    (c * (x @ q - m @ q)).sum_to_size(3, 1, 6))),
])
def test_rewritten_forms_agree(name, fn):
    """x [n, 4] shared, q [3, 4, 6], m [3, 1, 4]: K = 4 <= N = 6, n = 50 rows."""
    a, x = RNG.standard_normal((50, 7)), RNG.standard_normal((50, 4))
    c, q = RNG.standard_normal((3, 50, 1)), RNG.standard_normal((3, 4, 6))
    m = RNG.standard_normal((3, 1, 4))
    graph = _graph(fn, a, c, x, q, m)
    assert contract_first(graph.copy()) >= 1, name
    _agree(fn, a, c, x, q, m)


def test_far_from_the_origin():
    """Points and means near 1000 (y = (x - mu) Q small beside x Q): x - mu is formed
    first, as the forward pass does, so no digits are lost that it keeps (x^T c x Q -
    x^T c mu Q lost three: 4e-9 relative error)."""
    x, q, mu, w = _gmm_data(n=2000)
    args = [ak.tensor(a) for a in (x + 1000.0, q, mu + 1000.0, w)]
    grad = ak.func.grad(_gmm_like, argnums=(1, 2))
    compiled = ak.jit(grad, compile="eager").compile(*args)
    assert _big_values_of_kernels(compiled, (4, 2000, 5)) == 0  # rewritten
    for got, want in zip(compiled(*args), grad(*args)):
        error = np.abs(got.numpy() - want.numpy()).max() / np.abs(want.numpy()).max()
        assert error < 1e-10


@pytest.mark.parametrize("name, fn, shapes", [
    # X wider than Y: the rewritten products would take more multiply-adds
    ("K > N", lambda a, c, x, q: a.T @ (c * (x @ q)),
     ((50, 7), (50, 1), (50, 6), (6, 4))),
    # few rows: Y is small
    ("short", lambda a, c, x, q: a.T @ (c * (x @ q)), ((8, 7), (8, 1), (8, 4), (4, 6))),
    # c varies along the row: not a diagonal scaling
    ("not a row constant", lambda a, c, x, q: a.T @ (c * (x @ q)),
     ((50, 7), (50, 6), (50, 4), (4, 6))),
    # the contraction runs over Y's columns, not its rows
    ("Y on the left", lambda a, c, x, q: (c * (x @ q)) @ a,
     ((6, 7), (50, 1), (50, 4), (4, 6))),
    # a nonlinear op between the matmul and the product
    ("tanh", lambda a, c, x, q: a.T @ (c * (x @ q).tanh()),
     ((50, 7), (50, 1), (50, 4), (4, 6))),
    # a row subtracted that is not M @ Q: A c X Q - A c t would cancel digits
    ("x Q - t", lambda a, c, x, q, t: a.T @ (c * (x @ q - t)),
     ((50, 7), (50, 1), (50, 4), (4, 6), (1, 6))),
    # M times another matrix
    ("x Q - M P", lambda a, c, x, q, m, p: a.T @ (c * (x @ q - m @ p)),
     ((50, 7), (50, 1), (50, 4), (4, 6), (1, 4), (4, 6))),
])
def test_left_alone(name, fn, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    assert contract_first(_graph(fn, *arrays).copy()) == 0, name
    _agree(fn, *arrays)


def test_float32():
    a, x = RNG.standard_normal((64, 3)), RNG.standard_normal((64, 4))
    c, q, m = RNG.standard_normal((2, 64, 1)), RNG.standard_normal((2, 4, 5)), \
        RNG.standard_normal((2, 1, 4))
    arrays = [v.astype(np.float32) for v in (a, c, x, q, m)]
    fn = lambda a, c, x, q, m: a.T @ (c * (x @ q - m @ q))
    assert contract_first(_graph(fn, *arrays).copy()) == 1
    _agree(fn, *arrays, rtol=2e-4)
