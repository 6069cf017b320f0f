"""Loops and branches as higher-order ops (ak.scan, fori_loop, while_loop, cond, switch):
semantics against plain Python loops on pytrees, every transform against finite
differences eagerly, traced and jitted, one node whatever the trip count, errors."""
import numpy as np
import pytest

import adkit as ak
from adkit.control import Scan, Switch, While

RNG = np.random.default_rng(0)
W = ak.tensor(RNG.standard_normal((3, 3)) * 0.5)
XS = ak.tensor(RNG.standard_normal((5, 3)))


def t(*shape):
    return ak.tensor(RNG.standard_normal(shape))


def numeric_grad(f, x, eps=1e-6):
    """Central differences of a scalar f at x (float64)."""
    x = x.numpy().astype(np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (float(f(ak.tensor(x + d))) - float(f(ak.tensor(x - d)))) / (2 * eps)
    return g


def close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# ------------------------------------------------------------------ programs
def rnn_loss(h0):
    def step(h, x):
        h = (h @ W + x).tanh()
        return h, (h * h).sum()
    h, ys = ak.scan(step, h0, XS)
    return h.sum() + (ys * ak.arange(5, dtype=ak.float64)).sum()


def rnn_loss_python(h0):
    h, total = h0, 0.0
    for i in range(5):
        h = (h @ W + XS[i]).tanh()
        total = total + (h * h).sum() * i
    return h.sum() + total


def fori_loss(v):
    def body(i, v):
        return v + 0.1 * (v * (i + 1)).sin() * W[0]
    return (ak.fori_loop(0, 6, body, v) ** 2).sum()


def while_loss(v):
    def body(c):
        k, v = c
        return k + 1, v * 1.3 + (v * W[1]).sin() * 0.1
    _, v = ak.while_loop(lambda c: c[0] < 4, body, (ak.tensor(0), v))
    return (v * v).sum()


def cond_loss(v):
    out = ak.cond(v.sum() > 0, lambda a: (a @ W).tanh(), lambda a: a.exp() * 2, (v,))
    return (out * out).sum()


def switch_loss(v):
    branches = [lambda a: a.sin(), lambda a: a @ W, lambda a: a.exp() - 1]
    total = 0.0
    for k in range(-1, 4):  # out-of-range indices clamp
        total = total + ak.switch(ak.tensor(k), branches, v).sum() * (k + 2)
    return total


PROGRAMS = [rnn_loss, fori_loss, while_loss, cond_loss, switch_loss]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("path", ["eager", "trace", "jit"])
def test_grad_matches_finite_differences(f, path):
    x = t(3)
    grad = ak.func.grad(f)
    g = {"eager": grad, "trace": ak.trace(grad, x), "jit": ak.jit(grad)}[path](x)
    close(g.numpy(), numeric_grad(f, x))


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("path", ["eager", "jit"])
def test_jvp_matches_finite_differences(f, path):
    x, v = t(3), t(3)
    jvp = lambda x, v: ak.func.jvp(f, (x,), (v,))[1]  # noqa: E731
    got = (jvp if path == "eager" else ak.jit(jvp))(x, v)
    close(float(got), float(np.dot(numeric_grad(f, x), v.numpy())))


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("path", ["eager", "jit"])
def test_hessian_matches_finite_differences_of_the_gradient(f, path):
    x = t(3)
    h = ak.func.hessian(f)
    got = (h if path == "eager" else ak.jit(h))(x).numpy()
    rows = [numeric_grad(lambda y, k=k: ak.func.grad(f)(y)[k], x, eps=1e-5) for k in range(3)]
    close(got, np.stack(rows), tol=1e-5)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("path", ["eager", "jit"])
def test_vmap_and_vmap_of_grad_match_a_loop(f, path):
    xb = t(4, 3)
    for fn in (f, ak.func.grad(f)):
        batched = ak.func.vmap(fn)
        got = (batched if path == "eager" else ak.jit(batched))(xb)
        close(got.numpy(), np.stack([fn(xb[i]).numpy() for i in range(4)]))


def test_scan_equals_the_python_loop_and_grad_of_grad_through_traced_scan():
    h0 = t(3)
    close(rnn_loss(h0), rnn_loss_python(h0), 1e-12)
    close(ak.jit(rnn_loss)(h0), rnn_loss_python(h0), 1e-12)
    v = t(3)
    g2 = lambda h: ak.func.vjp(ak.func.grad(rnn_loss), h)[1](v)[0]  # noqa: E731
    g2_ref = lambda h: ak.func.vjp(ak.func.grad(rnn_loss_python), h)[1](v)[0]  # noqa: E731
    close(ak.jit(g2)(h0), g2_ref(h0), 1e-10)


# ------------------------------------------------------------------ semantics
def test_scan_on_pytrees_reverse_and_none_ys_agree_with_python():
    init = {"h": t(2), "n": (ak.tensor(0.0, dtype=ak.float64),)}
    xs = (t(4, 2), {"b": t(4)})

    def step(c, x):
        a, d = x
        h = (c["h"] * a).sin() + d["b"]
        return {"h": h, "n": (c["n"][0] + h.sum(),)}, (h * 2, None)

    for reverse in (False, True):
        carry, (ys, none) = ak.scan(step, init, xs, reverse=reverse)
        c, ys_ref = init, []
        order = range(3, -1, -1) if reverse else range(4)
        for i in order:
            c, (y, _) = step(c, (xs[0][i], {"b": xs[1]["b"][i]}))
            ys_ref.append(y)
        if reverse:
            ys_ref.reverse()
        assert none is None
        close(carry["h"], c["h"], 1e-12)
        close(carry["n"][0], c["n"][0], 1e-12)
        close(ys, ak.stack(ys_ref), 1e-12)
        traced = ak.trace(lambda i, x: ak.scan(step, i, x, reverse=reverse), init, xs)
        (tc, (tys, tnone)) = traced(init, xs)
        assert tnone is None
        close(tc["h"], c["h"], 1e-12)
        close(tys, ak.stack(ys_ref), 1e-12)


def test_scan_with_length_and_no_xs_and_zero_steps():
    carry, ys = ak.scan(lambda c, x: (c * 2, c), ak.tensor(1.0), None, length=4)
    assert x_is_none_ok(carry, ys)
    carry, ys = ak.jit(lambda c: ak.scan(lambda c, x: (c * 2, c), c, None, length=0))(
        ak.tensor(1.0))
    assert float(carry) == 1.0 and list(ys.shape) == [0]


def x_is_none_ok(carry, ys):
    return float(carry) == 16.0 and ys.tolist() == [1.0, 2.0, 4.0, 8.0]


def test_one_node_whatever_the_trip_count():
    def loop(n):
        return lambda v: ak.fori_loop(0, n, lambda i, v: (v @ W).tanh() + i, v)
    sizes = {n: len(ak.trace(ak.func.grad(lambda v: loop(n)(v).sum()), t(3)))
             for n in (10, 1000)}
    assert sizes[10] == sizes[1000]
    graph = ak.trace(loop(1000), t(3))
    assert [graph.nx.nodes[n]["op"] for n in graph.op_nodes] == [Scan]


def test_cond_switch_and_while_are_one_node_each_under_tracing():
    ops = lambda f: [g.nx.nodes[n]["op"] for g in [ak.trace(f, t(3))] for n in g.op_nodes]  # noqa: E731
    assert Switch in ops(cond_loss)
    assert While in ops(while_loss)


def test_fori_loop_with_traced_bounds_is_a_while_loop():
    f = lambda v, n: ak.fori_loop(0, n, lambda i, v: v * 2.0, v)  # noqa: E731
    n = ak.tensor(3)
    graph = ak.trace(f, t(2), n)
    assert While in [graph.nx.nodes[k]["op"] for k in graph.op_nodes]
    x = t(2)
    close(graph(x, n), x * 8.0, 1e-12)
    close(graph(x, ak.tensor(5)), x * 32.0, 1e-12)


def test_eager_loops_may_branch_on_values():
    def body(c, x):
        return (c + x if float(x) > 0 else c - x), None
    carry, _ = ak.scan(body, ak.tensor(0.0), ak.tensor([1.0, -2.0, 3.0]))
    assert float(carry) == 6.0


def test_closures_over_outer_tensors_become_inputs_of_the_node():
    w = ak.tensor([2.0, 3.0], dtype=ak.float64)
    graph = ak.trace(lambda v: ak.scan(lambda c, x: (c * w, None), v, None, length=2)[0], t(2))
    (n,) = graph.op_nodes
    assert len(graph.args_of(n)) == 2  # the captured w, then the carry
    close(graph(ak.ones(2, dtype=ak.float64)), [4.0, 9.0], 1e-12)


def test_printing_shows_the_body_and_pictures_draw_a_cluster():
    graph = ak.trace(rnn_loss, t(3))
    text = str(graph)
    assert "= scan[" in text and "body = { lambda" in text and "tanh" in text
    assert "subgraph cluster_" in graph.to_dot()
    branches = str(ak.trace(cond_loss, t(3)))
    assert "branches[0] = { lambda" in branches and "branches[1] = { lambda" in branches


def test_passes_recurse_into_bodies():
    def f(v):
        def step(c, x):
            dead = (c * 3.0).exp()  # noqa: F841  (dead code inside the body)
            return c + x, None
        return ak.scan(step, v, XS)[0]
    graph = ak.trace(f, t(3))
    (n,) = graph.op_nodes
    body = graph.nx.nodes[n]["params"]["plan"].body
    cleaned = ak.ir.passes.dce(graph)
    (m,) = cleaned.op_nodes
    new_body = cleaned.nx.nodes[m]["params"]["plan"].body
    assert len(new_body.op_nodes) < len(body.op_nodes)
    assert len(graph.nx.nodes[n]["params"]["plan"].body.op_nodes) == len(body.op_nodes)
    cleaned.validate()
    x = t(3)
    close(cleaned(x), graph(x), 1e-12)


# ------------------------------------------------------------------ errors
def test_a_carry_that_changes_dtype_shape_or_structure_is_refused():
    for path in ("eager", "trace"):
        run = (lambda f, v: f(v)) if path == "eager" else (lambda f, v: ak.trace(f, v))
        with pytest.raises(TypeError, match="dtype"):
            run(lambda v: ak.scan(lambda c, x: (c.to(ak.float32), None), v, None, length=2), t(2))
        with pytest.raises(ValueError, match="shape"):
            run(lambda v: ak.scan(lambda c, x: (c.sum(), None), v, None, length=2), t(2))
        with pytest.raises(TypeError, match="structure"):
            run(lambda v: ak.scan(lambda c, x: ((c, c), None), v, None, length=2), t(2))


def test_scan_argument_errors():
    with pytest.raises(ValueError, match="length"):
        ak.scan(lambda c, x: (c, None), ak.tensor(0.0))
    with pytest.raises(ValueError, match="different leading axis sizes"):
        ak.scan(lambda c, x: (c, None), ak.tensor(0.0), (t(3), t(4)))
    with pytest.raises(TypeError, match="pair"):
        ak.scan(lambda c, x: c, ak.tensor(0.0), t(3))


def test_cond_and_switch_errors():
    with pytest.raises(ValueError, match="0-d"):
        ak.cond(ak.tensor([True, False]), lambda: 1, lambda: 2)
    with pytest.raises(TypeError, match="bool"):
        ak.cond("yes", lambda: 1, lambda: 2)
    with pytest.raises(TypeError, match="same"):
        ak.trace(lambda v: ak.cond(v.sum() > 0, lambda a: a, lambda a: (a, a), v), t(2))
    with pytest.raises(TypeError, match="same shapes"):
        ak.trace(lambda v: ak.cond(v.sum() > 0, lambda a: a, lambda a: a.sum(), v), t(2))
    assert float(ak.switch(7, [lambda a: a, lambda a: a * 2], ak.tensor(1.0))) == 2.0


def test_while_loop_cond_must_return_a_boolean_scalar():
    with pytest.raises(TypeError, match="boolean scalar"):
        ak.while_loop(lambda v: v.sum(), lambda v: v, t(2))
    with pytest.raises(TypeError, match="boolean scalar"):
        ak.trace(lambda v: ak.while_loop(lambda v: v, lambda v: v, v), t(2))


def test_grad_of_grad_through_while_loop_in_reverse_mode_is_a_clear_error():
    g = ak.func.grad(lambda v: ak.func.grad(while_loss)(v).sum())
    with pytest.raises(RuntimeError, match="second derivative in reverse mode"):
        ak.jit(g)(t(3))
