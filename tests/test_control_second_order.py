"""Second derivatives through the reverse passes that store no residuals: scans and
fori_loops with checkpoint=s, and while_loop. Grad of grad, hessian, jvp of grad and
jacrev of jacrev, each against central differences of the first derivative (float64) and
against the same function unrolled in a Python loop; eagerly and under ak.jit. Under
tracing, grad of grad through while_loop (a data-dependent trip count) is a clear error."""
import functools

import numpy as np
import pytest

import adkit as ak
from adkit.control import checkpoint, revolve

RNG = np.random.default_rng(7)
W = ak.tensor(RNG.standard_normal((3, 3)) * 0.5)  # closed over by every body
K = ak.tensor([1, 2, 3])  # an int tensor closed over
XS = ak.tensor(RNG.standard_normal((6, 3)) * 0.5)
X = ak.tensor(RNG.standard_normal(3) * 0.5)
U = ak.tensor(RNG.standard_normal(3))  # the direction grad of grad and jvp contract with
POLICIES = [2, "sqrt", 5]


# ------------------------------------------------------------------ programs
def scan_program(x, policy):
    """A pytree carry (a dict with a tuple holding an int counter), xs, ys, reverse."""
    def step(c, xt):
        h, (a, k) = c["h"], c["rest"]
        h2 = (h @ W * K + xt).tanh() + 0.1 * a * k
        return {"h": h2, "rest": (a * xt.cos(), k + 1)}, (h2 * a).sum()
    init = {"h": x, "rest": (x.sin(), ak.tensor(1))}
    c, ys = ak.scan(step, init, XS, reverse=True, checkpoint=policy)
    return (c["h"] ** 2).sum() + c["rest"][0].sum() + (ys ** 2 * ak.arange(6, dtype=ak.float64)).sum()


def scan_python(x):
    h, a, k, total = x, x.sin(), 1, 0.0
    for i in reversed(range(6)):
        h2 = (h @ W * K + XS[i]).tanh() + 0.1 * a * k
        total = total + (h2 * a).sum() ** 2 * i
        h, a, k = h2, a * XS[i].cos(), k + 1
    return (h ** 2).sum() + a.sum() + total


def _fori_body(i, v):
    return (v @ W).sin() * 0.9 + v * (i + 1) * 0.05


def fori_program(x, policy):
    """The loop index (the int64 xs of the scan fori_loop becomes) enters the body."""
    return (ak.fori_loop(0, 7, _fori_body, x, checkpoint=policy) ** 3).sum()


def fori_dynamic_program(x, policy):
    """Tensor bounds make fori_loop a while_loop."""
    return (ak.fori_loop(ak.tensor(0), ak.tensor(7), _fori_body, x, checkpoint=policy)
            ** 3).sum()


def fori_python(x):
    for i in range(7):
        x = _fori_body(i, x)
    return (x ** 3).sum()


def _grow(c):
    k, v = c
    return k + 1, v * 1.25 + (v @ W).sin() * 0.2


def _growing(c):
    k, v = c
    return (k < 12) & ((v * v).sum() < 20.0)


def while_program(x, policy):
    """A trip count that depends on the values: v grows until |v|^2 >= 20."""
    _, v = ak.while_loop(_growing, _grow, (ak.tensor(0), x), checkpoint=policy)
    return (v * v.cos()).sum()


def while_python(x):
    c = (ak.tensor(0), x)
    while bool(_growing(c)):
        c = _grow(c)
    return (c[1] * c[1].cos()).sum()


PROGRAMS = {"scan": (scan_program, scan_python), "fori": (fori_program, fori_python),
            "while": (while_program, while_python),
            "fori_dynamic": (fori_dynamic_program, fori_python)}
WHILE_PROGRAMS = ("while", "fori_dynamic")


# ------------------------------------------------------------------ transforms
def grad_of_grad(f):
    return ak.func.grad(lambda y: (ak.func.grad(f)(y) * U).sum())


def jvp_of_grad(f):
    return lambda x: ak.func.jvp(ak.func.grad(f), (x,), (U,))[1]


def jacrev_of_jacrev(f):
    return ak.func.jacrev(ak.func.jacrev(f))


TRANSFORMS = {"grad_of_grad": (grad_of_grad, True), "hessian": (ak.func.hessian, False),
              "jvp_of_grad": (jvp_of_grad, True), "jacrev_of_jacrev": (jacrev_of_jacrev, False)}
REVERSE_OVER_REVERSE = ("grad_of_grad", "jacrev_of_jacrev")


@functools.cache
def numeric_hessian(name, policy, eps=1e-6):
    """Central differences of the (checkpointed) first derivative at X, as a matrix."""
    f = PROGRAMS[name][0]
    grad = ak.func.grad(lambda y: f(y, policy))
    x = X.numpy()
    rows = [(grad(ak.tensor(x + d)).numpy() - grad(ak.tensor(x - d)).numpy()) / (2 * eps)
            for d in np.eye(3) * eps]
    return np.stack(rows)


def close(got, want, tol):
    got, want = (v.detach().numpy() if isinstance(v, ak.Tensor) else v for v in (got, want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


CASES = [(p, policy, tr, path) for p in PROGRAMS for policy in POLICIES for tr in TRANSFORMS
         for path in ("eager", "jit")
         if not (p in WHILE_PROGRAMS and tr in REVERSE_OVER_REVERSE and path == "jit")]


@pytest.mark.parametrize("program,policy,transform,path", CASES)
def test_second_derivative_matches_differences_and_the_unrolled_loop(program, policy,
                                                                     transform, path):
    f, f_python = PROGRAMS[program]
    make, contracts_with_u = TRANSFORMS[transform]
    d2 = make(lambda y: f(y, policy))
    got = (d2 if path == "eager" else ak.jit(d2))(X).numpy()
    hessian = numeric_hessian(program, policy)
    close(got, hessian @ U.numpy() if contracts_with_u else hessian, 1e-6)
    close(got, make(f_python)(X).numpy(), 1e-10)


def test_the_first_reverse_pass_still_walks_the_revolve_schedule():
    checkpoint.LAST_RUN.update(forward_steps=-1, stored_carries=-1, reversed_steps=-1)
    grad_of_grad(lambda y: scan_program(y, 2))(X)
    assert checkpoint.LAST_RUN["forward_steps"] == revolve.binomial_forward_steps(6, 2)
    assert checkpoint.LAST_RUN["stored_carries"] <= 2
    assert checkpoint.LAST_RUN["reversed_steps"] == 6


# ------------------------------------------------------------------ consts and xs
def rnn(x, w, xs, policy):
    """The body closes over w; xs are scanned over."""
    h, ys = ak.scan(lambda h, xt: ((h @ w + xt).tanh(), (h * xt).sum()), x, xs,
                    checkpoint=policy)
    return (h ** 2).sum() + (ys ** 2).sum()


def rnn_python(x, w, xs):
    total = 0.0
    for i in range(xs.shape[0]):
        total = total + (x * xs[i]).sum() ** 2
        x = (x @ w + xs[i]).tanh()
    return (x ** 2).sum() + total


def mixed(f):
    """d/dw and d/dxs of <U, df/dx>: second derivatives through the consts' and the
    xs' gradients."""
    return ak.func.grad(lambda x, w, xs: (ak.func.grad(f)(x, w, xs) * U).sum(),
                        argnums=(1, 2))


def numeric_mixed(f, eps=1e-6):
    g = lambda x, w, xs: float((ak.func.grad(f)(x, w, xs) * U).sum())
    out = []
    for k, a in ((1, W), (2, XS)):
        d_a = np.zeros(a.shape)
        for i in np.ndindex(a.shape):
            d = np.zeros(a.shape)
            d[i] = eps
            args = [X, W, XS]
            plus, minus = list(args), list(args)
            plus[k], minus[k] = ak.tensor(a.numpy() + d), ak.tensor(a.numpy() - d)
            d_a[i] = (g(*plus) - g(*minus)) / (2 * eps)
        out.append(d_a)
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("path", ["eager", "jit"])
def test_second_derivatives_of_closed_over_consts_and_xs(policy, path):
    f = lambda x, w, xs: rnn(x, w, xs, policy)
    d2 = mixed(f)
    got = (d2 if path == "eager" else ak.jit(d2))(X, W, XS)
    for g, want, python in zip(got, numeric_mixed(f), mixed(rnn_python)(X, W, XS)):
        close(g, want, 1e-6)
        close(g, python, 1e-10)


# ------------------------------------------------------------------ deeper and batched
@pytest.mark.parametrize("program", ["scan", "while"])
def test_third_derivative_through_the_second_order_rules(program):
    f, f_python = PROGRAMS[program]
    third = lambda g: ak.func.grad(lambda y: (grad_of_grad(g)(y) * U).sum())
    got = third(lambda y: f(y, 2))(X)
    close(got, third(f_python)(X), 1e-10)
    assert not got.requires_grad  # the rules leave no leaf of their own in its history


@pytest.mark.parametrize("policy", [None, 2])
def test_vmap_of_grad_of_grad_through_while_loop(policy):
    """Under vmap a while_loop is one node even without checkpoint (WhileGrad then
    runs the batched loop, whose trip count is the longest example's)."""
    xb = ak.tensor(RNG.standard_normal((4, 3)) * np.array([[0.2], [0.5], [1.0], [2.0]]))
    got = ak.func.vmap(grad_of_grad(lambda y: while_program(y, policy)))(xb).numpy()
    want = np.stack([grad_of_grad(while_python)(xb[i]).numpy() for i in range(4)])
    close(got, want, 1e-10)


def test_grad_of_grad_through_a_while_loop_that_never_runs():
    def f(v):
        _, v = ak.while_loop(lambda c: c[0] < 0, _grow, (ak.tensor(0), v), checkpoint=2)
        return (v ** 3).sum()
    close(grad_of_grad(f)(X).numpy(), 6 * X.numpy() * U.numpy(), 1e-12)


# ------------------------------------------------------------------ the traced while_loop
@pytest.mark.parametrize("program", WHILE_PROGRAMS)
@pytest.mark.parametrize("transform", REVERSE_OVER_REVERSE)
@pytest.mark.parametrize("policy", [None, 2])
def test_reverse_over_reverse_through_a_traced_while_loop_is_a_clear_error(program,
                                                                          transform,
                                                                          policy):
    f = PROGRAMS[program][0]
    d2 = TRANSFORMS[transform][0](lambda y: f(y, policy))
    with pytest.raises(RuntimeError, match=r"not supported under tracing .*"
                                           r"ak\.func\.hessian.*fori_loop/scan"):
        ak.jit(d2)(X)
    with pytest.raises(RuntimeError, match="trip count depends on values"):
        ak.trace(d2, X)
