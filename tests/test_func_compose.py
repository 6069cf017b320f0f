"""Composing the ak.func transforms: every transform inside every other (grad, jacrev,
jacfwd, vmap, jvp-as-a-function), deeper nests (grad of grad of grad, vmap of vmap,
jacobians of jacobians, per-example gradients), and value-dependent Python control flow.

The references are closed-form derivatives of a small smooth function (checked against
finite differences in test_reference_derivatives_match_finite_differences) and Python
loops over examples for vmap.
"""
import numpy as np
import pytest

import adkit as ak
import adkit.func as F

F64 = ak.float64
TOL = dict(rtol=1e-10, atol=1e-12)

A = np.array([[0.7, -0.3, 0.5],
              [0.2, 0.9, -0.4],
              [-0.6, 0.1, 0.8]])
X0 = np.array([0.3, -0.8, 0.5])
BATCH = np.array([[0.3, -0.8, 0.5],
                  [-0.2, 0.4, 0.9],
                  [1.1, 0.6, -0.7],
                  [0.05, -0.5, -0.3]])
V = np.array([0.4, -1.2, 0.7])  # the fixed tangent inside jvp-as-a-function


def t(a):
    return ak.tensor(np.asarray(a, dtype=np.float64))


def n(x):
    return x.detach().numpy()


# ================================================================ the function, in closed form
def f(x):
    """R^3 -> R: sum(sin(A x)) + (x.x)^2 / 4."""
    sq = (x * x).sum()
    return (t(A) @ x).sin().sum() + sq * sq / 4


def f_np(x):
    return np.sin(A @ x).sum() + (x @ x) ** 2 / 4


def grad_np(x):
    return A.T @ np.cos(A @ x) + (x @ x) * x


def hess_np(x):
    return -A.T @ np.diag(np.sin(A @ x)) @ A + (x @ x) * np.eye(3) + 2 * np.outer(x, x)


def third_np(x):
    eye = np.eye(3)
    trig = -np.einsum("m,mi,mj,mk->ijk", np.cos(A @ x), A, A, A)
    return trig + 2 * (np.einsum("k,ij->ijk", x, eye) + np.einsum("i,jk->ijk", x, eye)
                       + np.einsum("j,ik->ijk", x, eye))


def _fd(fn, x, eps=1e-5):
    """Central differences of a numpy function: shape fn(x).shape + x.shape."""
    out = np.asarray(fn(x))
    jac = np.zeros(out.shape + x.shape)
    for idx in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        jac[(Ellipsis,) + idx] = (np.asarray(fn(x + d)) - np.asarray(fn(x - d))) / (2 * eps)
    return jac


def test_reference_derivatives_match_finite_differences():
    for x in BATCH:
        np.testing.assert_allclose(grad_np(x), _fd(f_np, x), rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(hess_np(x), _fd(grad_np, x), rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(third_np(x), _fd(hess_np, x), rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(hess_np(x), hess_np(x).T, rtol=0, atol=1e-14)


def test_function_value():
    np.testing.assert_allclose(n(f(t(X0))), f_np(X0), **TOL)


# ================================================================ the composition matrix
class Inner:
    """A transformed f: how to build it, an example input, its value and its Jacobian
    (shape value.shape + input.shape), in closed form."""

    def __init__(self, build, example, value, jacobian):
        self.build, self.example, self.value, self.jacobian = build, example, value, jacobian


def _vmap_f_jacobian(xs):
    jac = np.zeros((len(xs), len(xs), 3))
    for b, x in enumerate(xs):
        jac[b, b] = grad_np(x)
    return jac


INNERS = {
    "grad": Inner(lambda: F.grad(f), X0, grad_np, hess_np),
    "jacrev": Inner(lambda: F.jacrev(f), X0, grad_np, hess_np),
    "jacfwd": Inner(lambda: F.jacfwd(f), X0, grad_np, hess_np),
    "vmap": Inner(lambda: F.vmap(f), BATCH, lambda xs: np.array([f_np(x) for x in xs]),
                  _vmap_f_jacobian),
    "jvp": Inner(lambda: (lambda x: F.jvp(f, (x,), (t(V),))[1]), X0,
                 lambda x: grad_np(x) @ V, lambda x: hess_np(x) @ V),
}


def _weights(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _outer_grad(inner, spec):
    w = _weights(np.shape(spec.value(spec.example)), 1)
    got = F.grad(lambda z: (inner(z) * t(w)).sum())(t(spec.example))
    want = np.tensordot(w, spec.jacobian(spec.example), axes=w.ndim)
    return got, want


def _outer_jacrev(inner, spec):
    return F.jacrev(inner)(t(spec.example)), spec.jacobian(spec.example)


def _outer_jacfwd(inner, spec):
    return F.jacfwd(inner)(t(spec.example)), spec.jacobian(spec.example)


def _outer_vmap(inner, spec):
    # two examples of the inner function's input, the second one shifted
    examples = np.stack([spec.example, spec.example[..., ::-1] * 0.9 + 0.1])
    got = F.vmap(inner)(t(examples))
    loop = np.stack([n(inner(t(e))) for e in examples])
    np.testing.assert_allclose(n(got), loop, **TOL)  # against a Python loop too
    return got, np.stack([spec.value(e) for e in examples])


def _outer_jvp(inner, spec):
    u = _weights(spec.example.shape, 2)
    primal, tangent = F.jvp(inner, (t(spec.example),), (t(u),))
    np.testing.assert_allclose(n(primal), spec.value(spec.example), **TOL)
    return tangent, np.tensordot(spec.jacobian(spec.example), u, axes=u.ndim)


OUTERS = {"grad": _outer_grad, "jacrev": _outer_jacrev, "jacfwd": _outer_jacfwd,
          "vmap": _outer_vmap, "jvp": _outer_jvp}


@pytest.mark.parametrize("inner_name", list(INNERS))
def test_inner_alone(inner_name):
    spec = INNERS[inner_name]
    got = spec.build()(t(spec.example))
    np.testing.assert_allclose(n(got), spec.value(spec.example), **TOL)


@pytest.mark.parametrize("inner_name", list(INNERS))
@pytest.mark.parametrize("outer_name", list(OUTERS))
def test_composition_matrix(outer_name, inner_name):
    spec = INNERS[inner_name]
    got, want = OUTERS[outer_name](spec.build(), spec)
    assert tuple(got.shape) == np.shape(want)
    assert got.dtype == F64
    assert not got.requires_grad
    np.testing.assert_allclose(n(got), want, **TOL)


def test_grad_of_scalar_valued_jvp_function():
    """grad(jvp-as-function) literally (its output is a scalar): H v."""
    got = F.grad(INNERS["jvp"].build())(t(X0))
    np.testing.assert_allclose(n(got), hess_np(X0) @ V, **TOL)


# ================================================================ depth
def scalar_f(x):
    return x.exp() * x.sin()


@pytest.mark.parametrize("x", [0.7, -1.3, 2.0])
def test_grad_grad_grad_is_the_third_derivative(x):
    xt = ak.tensor(x, dtype=F64)
    e, s, c = np.exp(x), np.sin(x), np.cos(x)
    np.testing.assert_allclose(n(F.grad(scalar_f)(xt)), e * (s + c), **TOL)
    np.testing.assert_allclose(n(F.grad(F.grad(scalar_f))(xt)), 2 * e * c, **TOL)
    np.testing.assert_allclose(n(F.grad(F.grad(F.grad(scalar_f)))(xt)), 2 * e * (c - s),
                               **TOL)
    np.testing.assert_allclose(n(F.grad(F.grad(F.grad(F.grad(scalar_f))))(xt)), -4 * e * s,
                               **TOL)


SAVES_OUTPUT = {  # f, its second derivative (elementwise), for ops whose backward reads
    # the forward output
    "exp": (lambda x: x.exp(), np.exp),
    "tanh": (lambda x: x.tanh(), lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    "sqrt": (lambda x: x.sqrt(), lambda x: -0.25 * x ** -1.5),
    "sigmoid": (lambda x: x.sigmoid(),
                lambda x: (lambda s: s * (1 - s) * (1 - 2 * s))(1 / (1 + np.exp(-x)))),
}
POSITIVE_POINTS = np.array([0.5, 1.0, 2.0])


@pytest.mark.parametrize("name", list(SAVES_OUTPUT))
def test_reverse_over_reverse_through_ops_that_save_outputs(name):
    fn, d2 = SAVES_OUTPUT[name]
    x = t(POSITIVE_POINTS)
    close = dict(rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(n(F.jacrev(F.jacrev(lambda a: fn(a).sum()))(x)),
                               np.diag(d2(POSITIVE_POINTS)), **close)


@pytest.mark.parametrize("name", list(SAVES_OUTPUT))
def test_forward_over_reverse_through_ops_that_save_outputs(name):
    fn, d2 = SAVES_OUTPUT[name]
    x = t(POSITIVE_POINTS)
    want = np.diag(d2(POSITIVE_POINTS))
    close = dict(rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(n(F.hessian(lambda a: fn(a).sum())(x)), want, **close)
    _, hvp = F.jvp(F.grad(lambda a: fn(a).sum()), (x,), (t(np.ones(3)),))
    np.testing.assert_allclose(n(hvp), d2(POSITIVE_POINTS), **close)


@pytest.mark.parametrize("case", ["grad^3-of-square", "jacrev^2-of-linear",
                                  "grad-of-constant", "vjp-of-constant"])
def test_reverse_mode_of_input_independent_outputs_is_zero(case):
    x = t(X0)
    if case == "grad^3-of-square":
        got = F.grad(F.grad(F.grad(lambda a: a * a)))(ak.tensor(1.5, dtype=F64))
        want = 0.0
    elif case == "jacrev^2-of-linear":
        got, want = F.jacrev(F.jacrev(lambda a: (a * 2).sum()))(x), np.zeros((3, 3))
    elif case == "grad-of-constant":
        got, want = F.grad(lambda a: ak.tensor(1.0, dtype=F64))(x), np.zeros(3)
    else:
        got = F.vjp(lambda a: ak.ones(3, dtype=F64), x)[1](t(np.ones(3)))[0]
        want = np.zeros(3)
    np.testing.assert_allclose(n(got), want, **TOL)


def test_vmap_of_grad_grad_elementwise():
    xs = np.array([0.7, -1.3, 2.0, 0.0])
    got = F.vmap(F.grad(F.grad(scalar_f)))(t(xs))
    np.testing.assert_allclose(n(got), 2 * np.exp(xs) * np.cos(xs), **TOL)


def test_hessian_four_ways():
    x = t(X0)
    want = hess_np(X0)
    for name, fn in [("hessian", F.hessian(f)), ("jacfwd(jacrev)", F.jacfwd(F.jacrev(f))),
                     ("jacrev(jacrev)", F.jacrev(F.jacrev(f))),
                     ("jacrev(jacfwd)", F.jacrev(F.jacfwd(f))),
                     ("jacfwd(jacfwd)", F.jacfwd(F.jacfwd(f)))]:
        got = fn(x)
        assert tuple(got.shape) == (3, 3), name
        np.testing.assert_allclose(n(got), want, err_msg=name, **TOL)


def test_third_order_jacobians():
    x = t(X0)
    want = third_np(X0)
    for name, fn in [("jacrev^3", F.jacrev(F.jacrev(F.jacrev(f)))),
                     ("jacfwd(hessian)", F.jacfwd(F.hessian(f))),
                     ("jacrev(jacfwd(grad))", F.jacrev(F.jacfwd(F.grad(f))))]:
        got = fn(x)
        assert tuple(got.shape) == (3, 3, 3), name
        np.testing.assert_allclose(n(got), want, err_msg=name, **TOL)


def two_outputs(x):
    return x.sin() * x.sum(), (x * x).sum()


def _two_outputs_np(x):
    return np.sin(x) * x.sum(), (x * x).sum()


def test_vmap_of_vmap_against_loops():
    xs = np.random.default_rng(0).standard_normal((4, 5, 3))
    a, b = F.vmap(F.vmap(two_outputs))(t(xs))
    assert tuple(a.shape) == (4, 5, 3) and tuple(b.shape) == (4, 5)
    for i in range(4):
        for j in range(5):
            wa, wb = _two_outputs_np(xs[i, j])
            np.testing.assert_allclose(n(a)[i, j], wa, **TOL)
            np.testing.assert_allclose(n(b)[i, j], wb, **TOL)


def test_vmap_of_vmap_with_in_dims():
    xs = np.random.default_rng(1).standard_normal((5, 4, 3))
    # outer maps dim 1 (size 4); inner maps dim 0 of each (5, 3) slice
    a, b = F.vmap(F.vmap(two_outputs, in_dims=0), in_dims=1)(t(xs))
    assert tuple(a.shape) == (4, 5, 3) and tuple(b.shape) == (4, 5)
    for i in range(4):
        for j in range(5):
            wa, wb = _two_outputs_np(xs[j, i])
            np.testing.assert_allclose(n(a)[i, j], wa, **TOL)
            np.testing.assert_allclose(n(b)[i, j], wb, **TOL)


def test_vmap_of_vmap_outer_product():
    def h(u, w):
        return (u * w).sum().tanh()
    us = np.random.default_rng(2).standard_normal((4, 3))
    ws = np.random.default_rng(3).standard_normal((6, 3))
    got = F.vmap(F.vmap(h, in_dims=(0, None)), in_dims=(None, 0))(t(us), t(ws))
    assert tuple(got.shape) == (6, 4)
    want = np.array([[np.tanh(us[j] @ ws[i]) for j in range(4)] for i in range(6)])
    np.testing.assert_allclose(n(got), want, **TOL)


def test_grad_of_vmap():
    got = F.grad(lambda xs: F.vmap(f)(xs).sum())(t(BATCH))
    np.testing.assert_allclose(n(got), np.stack([grad_np(x) for x in BATCH]), **TOL)


B2 = np.array([[0.5, -1.0, 0.3], [0.8, 0.2, -0.6]])


def vector_f(x):
    return (t(B2) @ x).tanh()


def test_vmap_of_jacrev_and_jacfwd():
    for transform in (F.jacrev, F.jacfwd):
        got = F.vmap(transform(vector_f))(t(BATCH))
        assert tuple(got.shape) == (4, 2, 3)
        for b, x in enumerate(BATCH):
            want = (1 - np.tanh(B2 @ x) ** 2)[:, None] * B2
            np.testing.assert_allclose(n(got)[b], want, **TOL)
            np.testing.assert_allclose(n(got)[b], n(transform(vector_f)(t(x))), **TOL)


def test_vmap_of_hessian():
    got = F.vmap(F.hessian(f))(t(BATCH))
    assert tuple(got.shape) == (4, 3, 3)
    for b, x in enumerate(BATCH):
        np.testing.assert_allclose(n(got)[b], hess_np(x), **TOL)


def test_vmap_of_vmap_of_grad():
    xs = np.stack([BATCH, BATCH[::-1] * 0.5])
    got = F.vmap(F.vmap(F.grad(f)))(t(xs))
    want = np.array([[grad_np(x) for x in row] for row in xs])
    np.testing.assert_allclose(n(got), want, **TOL)


def test_jvp_of_grad_is_hessian_vector_product():
    u = _weights(3, 4)
    _, hvp = F.jvp(F.grad(f), (t(X0),), (t(u),))
    np.testing.assert_allclose(n(hvp), hess_np(X0) @ u, **TOL)


def test_vjp_of_grad_is_hessian_vector_product():
    u = _weights(3, 5)
    _, vjp_fn = F.vjp(F.grad(f), t(X0))
    (hvp,) = vjp_fn(t(u))
    np.testing.assert_allclose(n(hvp), hess_np(X0).T @ u, **TOL)


# ================================================================ per-example gradients
def _mlp_params(rng):
    return {"w1": rng.standard_normal((3, 5)) * 0.5, "b1": rng.standard_normal(5) * 0.1,
            "w2": rng.standard_normal(5) * 0.5, "b2": np.array(0.2)}


def mlp_loss(params, x, y):
    h = (x @ params["w1"] + params["b1"]).tanh()
    out = h @ params["w2"] + params["b2"]
    return (out - y) ** 2


def _mlp_data():
    rng = np.random.default_rng(7)
    return _mlp_params(rng), rng.standard_normal((6, 3)), rng.standard_normal(6)


def test_per_example_gradients_match_python_loop():
    params_np, xs, ys = _mlp_data()
    params = {k: t(v) for k, v in params_np.items()}
    per_example = F.vmap(F.grad(mlp_loss), in_dims=(None, 0, 0))(params, t(xs), t(ys))
    assert set(per_example) == set(params)
    for k, g in per_example.items():
        assert tuple(g.shape) == (6,) + tuple(params[k].shape)
        assert not g.requires_grad
    for i in range(6):
        loop = F.grad(mlp_loss)(params, t(xs[i]), t(ys[i]))
        for k in params:
            np.testing.assert_allclose(n(per_example[k])[i], n(loop[k]), **TOL)
    # their mean is the gradient of the mean loss
    mean_grad = F.grad(lambda p: F.vmap(mlp_loss, in_dims=(None, 0, 0))(p, t(xs), t(ys))
                       .mean())(params)
    for k in params:
        np.testing.assert_allclose(n(per_example[k]).mean(0), n(mean_grad[k]), **TOL)


def test_per_example_gradients_match_torch_func():
    torch = pytest.importorskip("torch")
    import torch.func as tf
    params_np, xs, ys = _mlp_data()
    params = {k: t(v) for k, v in params_np.items()}
    got = F.vmap(F.grad(mlp_loss), in_dims=(None, 0, 0))(params, t(xs), t(ys))
    tparams = {k: torch.tensor(v) for k, v in params_np.items()}
    want = tf.vmap(tf.grad(mlp_loss), in_dims=(None, 0, 0))(tparams, torch.tensor(xs),
                                                            torch.tensor(ys))
    for k in params:
        np.testing.assert_allclose(n(got[k]), want[k].numpy(), **TOL)


def test_per_example_gradients_of_argnums_tuple():
    params_np, xs, ys = _mlp_data()
    w1, rest = t(params_np["w1"]), {k: t(v) for k, v in params_np.items() if k != "w1"}

    def loss(w1, x, rest, y):
        return mlp_loss(dict(rest, w1=w1), x, y)
    gw, gx = F.vmap(F.grad(loss, argnums=(0, 1)), in_dims=(None, 0, None, 0))(
        w1, t(xs), rest, t(ys))
    assert tuple(gw.shape) == (6, 3, 5) and tuple(gx.shape) == (6, 3)
    for i in range(6):
        lw, lx = F.grad(loss, argnums=(0, 1))(w1, t(xs[i]), rest, t(ys[i]))
        np.testing.assert_allclose(n(gw)[i], n(lw), **TOL)
        np.testing.assert_allclose(n(gx)[i], n(lx), **TOL)


# ================================================================ value-dependent control flow
def branchy(x):
    if x.sum() > 0:
        return (x ** 3).sum()
    return x.sin().sum()


def _branchy_grad(x):
    return 3 * x ** 2 if x.sum() > 0 else np.cos(x)


def _branchy_hess(x):
    return np.diag(6 * x) if x.sum() > 0 else np.diag(-np.sin(x))


POSITIVE = np.array([0.5, 1.0, -0.2])
NEGATIVE = np.array([-0.5, 0.3, -1.0])


@pytest.mark.parametrize("x", [POSITIVE, NEGATIVE], ids=["then", "else"])
def test_control_flow_under_grad_jvp_jacrev(x):
    np.testing.assert_allclose(n(F.grad(branchy)(t(x))), _branchy_grad(x), **TOL)
    v = _weights(3, 6)
    out, jv = F.jvp(branchy, (t(x),), (t(v),))
    np.testing.assert_allclose(n(jv), _branchy_grad(x) @ v, **TOL)
    np.testing.assert_allclose(n(F.jacrev(branchy)(t(x))), _branchy_grad(x), **TOL)
    _, vjp_fn = F.vjp(branchy, t(x))
    np.testing.assert_allclose(n(vjp_fn(ak.tensor(2.0, dtype=F64))[0]), 2 * _branchy_grad(x),
                               **TOL)
    np.testing.assert_allclose(n(F.jacrev(F.grad(branchy))(t(x))), _branchy_hess(x), **TOL)


def test_control_flow_with_value_dependent_loop():
    def halve_until_small(x):
        while x.norm() > 1:
            x = x / 2
        return x.sum()
    x = np.array([3.0, 4.0, 0.0])  # norm 5: halved three times
    np.testing.assert_allclose(n(F.grad(halve_until_small)(t(x))), np.full(3, 1 / 8), **TOL)
    _, jv = F.jvp(halve_until_small, (t(x),), (t(np.ones(3)),))
    np.testing.assert_allclose(n(jv), 3 / 8, **TOL)


@pytest.mark.parametrize("x", [POSITIVE, NEGATIVE], ids=["then", "else"])
def test_control_flow_under_jacfwd_and_hessian(x):
    np.testing.assert_allclose(n(F.jacfwd(branchy)(t(x))), _branchy_grad(x), **TOL)
    np.testing.assert_allclose(n(F.hessian(branchy)(t(x))), _branchy_hess(x), **TOL)


def test_control_flow_under_vmap_raises_a_clear_error():
    xs = t(np.stack([POSITIVE, NEGATIVE]))
    with pytest.raises(RuntimeError, match=r"vmap: bool\(tensor\).*needs the value of a "
                                           r"batched tensor.*ak\.where"):
        F.vmap(branchy)(xs)
    with pytest.raises(RuntimeError, match=r"vmap: bool\(tensor\)"):
        F.vmap(F.grad(branchy))(xs)
    with pytest.raises(RuntimeError, match=r"vmap: .*item\(\)"):
        F.vmap(lambda x: x.sum().item())(xs)


def test_control_flow_on_unbatched_value_under_vmap_is_fine():
    """Only batched values are off limits: a branch on an unbatched argument works."""
    def fn(x, flag):
        return x.sin() if flag.sum() > 0 else x.cos()
    xs = np.stack([POSITIVE, NEGATIVE])
    got = F.vmap(fn, in_dims=(0, None))(t(xs), t([1.0]))
    np.testing.assert_allclose(n(got), np.sin(xs), **TOL)
