"""ak.autograd.functional: jacobian, hessian, vjp, jvp, hvp, vhp against analytic values
and (when installed) torch.autograd.functional."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import functional as F

RNG = np.random.default_rng(0)
X = RNG.uniform(0.5, 1.5, (2, 3))
V = RNG.standard_normal((2, 3))


def cube_sum(x):
    return (x ** 3).sum()


def test_functional_jacobian_of_elementwise_is_diagonal():
    jac = F.jacobian(lambda x: x.exp(), ak.tensor(X))
    assert jac.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(jac.numpy().reshape(6, 6), np.diag(np.exp(X).ravel()))


def test_functional_jacobian_tuple_structure():
    jac = F.jacobian(lambda x, y: (x * y, x.sum()), (ak.tensor(X), ak.tensor(V)))
    assert len(jac) == 2 and len(jac[0]) == 2
    assert jac[0][1].shape == (2, 3, 2, 3) and jac[1][0].shape == (2, 3)


def test_functional_hessian_and_products():
    x, v = ak.tensor(X), ak.tensor(V)
    hess = F.hessian(cube_sum, x)
    np.testing.assert_allclose(hess.numpy().reshape(6, 6), np.diag(6 * X.ravel()))
    out, hv = F.hvp(cube_sum, x, v)
    np.testing.assert_allclose(out.item(), (X ** 3).sum())
    np.testing.assert_allclose(hv.numpy(), 6 * X * V)
    np.testing.assert_allclose(F.vhp(cube_sum, x, v)[1].numpy(), 6 * X * V)


def test_functional_vjp_and_jvp():
    x, v = ak.tensor(X), ak.tensor(V)
    out, vjp = F.vjp(lambda t: t.sin(), x, v)
    np.testing.assert_allclose(vjp.numpy(), np.cos(X) * V)
    out, jvp = F.jvp(lambda t: t.sin(), x, v)
    np.testing.assert_allclose(jvp.numpy(), np.cos(X) * V)
    np.testing.assert_allclose(out.numpy(), np.sin(X))


def test_functional_create_graph_keeps_results_differentiable():
    x = ak.tensor(X, requires_grad=True)
    F.hessian(cube_sum, x, create_graph=True).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full_like(X, 6.0))
    assert not F.hessian(cube_sum, x).requires_grad


def test_functional_errors():
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        F.jacobian(lambda x: x, [1.0])
    with pytest.raises(RuntimeError, match="v can only be None"):
        F.vjp(lambda t: t * 2, ak.tensor(X))
    with pytest.raises(RuntimeError, match="single element"):
        F.hessian(lambda t: t * 2, ak.tensor(X))


def test_functional_matches_torch():
    torch = pytest.importorskip("torch")
    TF = torch.autograd.functional

    def f(x, y):
        return (x.exp() * y).sum(0)

    ours = F.jacobian(f, (ak.tensor(X), ak.tensor(V)))
    theirs = TF.jacobian(f, (torch.tensor(X), torch.tensor(V)))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
