"""The ak.func API surface (torch.func's): argnums, has_aux, pytrees, vmap's in_dims /
out_dims / chunk_size, error messages, which results require grad, linearize, and user
autograd.Functions (both styles, with jvp and vmap rules) under every transform."""
from collections import namedtuple

import numpy as np
import pytest

import adkit as ak
import adkit.func as F
from adkit.autograd import Function

F64 = ak.float64
TOL = dict(rtol=1e-10, atol=1e-12)
RNG = np.random.default_rng(1234)


def t(a, requires_grad=False):
    return ak.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def n(x):
    return x.detach().numpy()


def close(got, want):
    np.testing.assert_allclose(n(got), want, **TOL)


X = np.array([0.5, -1.2, 2.0])
Y = np.array([1.5, 0.3])
M = RNG.standard_normal((4, 3))
Pair = namedtuple("Pair", "a b")


def f2(a, b):
    """R^3 x R^2 -> R: sum(sin a) * sum(b^2)."""
    return a.sin().sum() * (b * b).sum()


def df2_da(a, b):
    return np.cos(a) * (b @ b)


def df2_db(a, b):
    return np.sin(a).sum() * 2 * b


# ================================================================ argnums
def test_grad_argnums_int_tuple_negative():
    a, b = t(X), t(Y)
    close(F.grad(f2)(a, b), df2_da(X, Y))
    close(F.grad(f2, argnums=1)(a, b), df2_db(X, Y))
    close(F.grad(f2, argnums=-1)(a, b), df2_db(X, Y))
    close(F.grad(f2, argnums=-2)(a, b), df2_da(X, Y))
    ga, gb = F.grad(f2, argnums=(0, 1))(a, b)
    close(ga, df2_da(X, Y))
    close(gb, df2_db(X, Y))
    (gb_only,) = F.grad(f2, argnums=(-1,))(a, b)  # a 1-tuple argnums gives a 1-tuple
    close(gb_only, df2_db(X, Y))
    gb2, ga2 = F.grad(f2, argnums=(1, 0))(a, b)  # in argnums order
    close(gb2, df2_db(X, Y))
    close(ga2, df2_da(X, Y))


def test_argnums_for_grad_and_value_jacrev_jacfwd_hessian():
    a, b = t(X), t(Y)
    (ga, gb), value = F.grad_and_value(f2, argnums=(0, -1))(a, b)
    close(ga, df2_da(X, Y))
    close(gb, df2_db(X, Y))
    close(value, np.sin(X).sum() * (Y @ Y))
    for jac in (F.jacrev, F.jacfwd):
        close(jac(f2, argnums=-1)(a, b), df2_db(X, Y))
        ja, jb = jac(f2, argnums=(0, 1))(a, b)
        close(ja, df2_da(X, Y))
        close(jb, df2_db(X, Y))
    # d2/db2 of sum(sin a) * b.b = 2 sum(sin a) I
    close(F.hessian(f2, argnums=1)(a, b), 2 * np.sin(X).sum() * np.eye(2))


@pytest.mark.parametrize("argnums", [2, -3, (0, 2)])
def test_argnums_out_of_range(argnums):
    with pytest.raises(RuntimeError, match=r"Got argnums?=.*but only 2 positional inputs"):
        F.grad(f2, argnums=argnums)(t(X), t(Y))


def test_argnums_empty():
    with pytest.raises(RuntimeError, match="argnums must be non-empty"):
        F.grad(f2, argnums=())(t(X), t(Y))


def test_non_differentiated_arguments_may_be_anything():
    def fn(a, scale, name, b):
        assert name == "label"
        return f2(a, b) * scale
    close(F.grad(fn)(t(X), 3.0, "label", t(Y)), 3 * df2_da(X, Y))
    close(F.grad(fn, argnums=3)(t(X), 3.0, "label", t(Y)), 3 * df2_db(X, Y))


# ================================================================ has_aux
def with_aux(a):
    return (a.sin() * a).sum(), {"double": a * 2, "pair": (a.sum(), a[0])}


def _check_aux(aux):
    assert set(aux) == {"double", "pair"} and isinstance(aux["pair"], tuple)
    close(aux["double"], 2 * X)
    close(aux["pair"][0], X.sum())
    close(aux["pair"][1], X[0])


def test_grad_has_aux():
    g, aux = F.grad(with_aux, has_aux=True)(t(X))
    close(g, np.cos(X) * X + np.sin(X))
    _check_aux(aux)


def test_grad_and_value_has_aux():
    g, (value, aux) = F.grad_and_value(with_aux, has_aux=True)(t(X))
    close(g, np.cos(X) * X + np.sin(X))
    close(value, (np.sin(X) * X).sum())
    _check_aux(aux)


def test_vjp_has_aux():
    out, vjp_fn, aux = F.vjp(with_aux, t(X), has_aux=True)
    close(out, (np.sin(X) * X).sum())
    (g,) = vjp_fn(t(2.0))
    close(g, 2 * (np.cos(X) * X + np.sin(X)))
    _check_aux(aux)


def test_jvp_has_aux():
    v = RNG.standard_normal(3)
    out, tangent, aux = F.jvp(with_aux, (t(X),), (t(v),), has_aux=True)
    close(out, (np.sin(X) * X).sum())
    close(tangent, (np.cos(X) * X + np.sin(X)) @ v)
    _check_aux(aux)


@pytest.mark.parametrize("jac", [F.jacrev, F.jacfwd], ids=["jacrev", "jacfwd"])
def test_jacobian_has_aux(jac):
    def fn(a):
        return a.sin() * a.sum(), {"double": a * 2, "pair": (a.sum(), a[0])}
    j, aux = jac(fn, has_aux=True)(t(X))
    want = np.diag(np.cos(X) * X.sum()) + np.sin(X)[:, None]
    close(j, want)
    _check_aux(aux)


@pytest.mark.parametrize("call", [
    lambda fn: F.grad(fn, has_aux=True)(t(X)),
    lambda fn: F.grad_and_value(fn, has_aux=True)(t(X)),
    lambda fn: F.vjp(fn, t(X), has_aux=True),
    lambda fn: F.jvp(fn, (t(X),), (t(X),), has_aux=True),
    lambda fn: F.jacrev(fn, has_aux=True)(t(X)),
    lambda fn: F.jacfwd(fn, has_aux=True)(t(X)),
], ids=["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd"])
def test_has_aux_requires_a_pair(call):
    with pytest.raises(RuntimeError, match=r"output of function f should be a tuple: "
                                           r"\(output, aux\) if has_aux is True"):
        call(lambda a: a.sum())


def test_has_aux_under_vmap():
    """Per-example gradients with a per-example aux."""
    xs = RNG.standard_normal((4, 3))
    g, aux = F.vmap(F.grad(lambda a: ((a * a).sum(), a.sum()), has_aux=True))(t(xs))
    close(g, 2 * xs)
    close(aux, xs.sum(1))


# ================================================================ pytrees
def test_grad_of_dict_tuple_namedtuple_and_nested_inputs():
    a, b = t(X), t(Y)
    g = F.grad(lambda p: f2(p["a"], p["b"]))({"a": a, "b": b})
    assert isinstance(g, dict) and set(g) == {"a", "b"}
    close(g["a"], df2_da(X, Y))
    close(g["b"], df2_db(X, Y))
    g = F.grad(lambda p: f2(*p))((a, b))
    assert isinstance(g, tuple) and len(g) == 2
    close(g[1], df2_db(X, Y))
    g = F.grad(lambda p: f2(p.a, p.b))(Pair(a, b))
    assert type(g) is Pair
    close(g.a, df2_da(X, Y))
    close(g.b, df2_db(X, Y))
    g = F.grad(lambda p: f2(p[0]["a"], p[1][0]))(({"a": a}, [b]))
    assert isinstance(g, tuple) and isinstance(g[0], dict) and isinstance(g[1], list)
    close(g[0]["a"], df2_da(X, Y))
    close(g[1][0], df2_db(X, Y))


def test_vjp_with_pytree_inputs_and_outputs():
    def fn(p):
        return {"prod": p.a[:2] * p.b, "sum": (p.a.sin(), p.b.sum())}
    out, vjp_fn = F.vjp(fn, Pair(t(X), t(Y)))
    assert set(out) == {"prod", "sum"} and isinstance(out["sum"], tuple)
    u_prod, u_sin = RNG.standard_normal(2), RNG.standard_normal(3)
    (g,) = vjp_fn({"prod": t(u_prod), "sum": (t(u_sin), t(0.5))})
    assert type(g) is Pair
    want_a = np.cos(X) * u_sin
    want_a[:2] += u_prod * Y
    close(g.a, want_a)
    close(g.b, u_prod * X[:2] + 0.5)


def test_vjp_with_several_primals():
    out, vjp_fn = F.vjp(lambda a, b: a[:2] * b, t(X), t(Y))
    ga, gb = vjp_fn(t(np.ones(2)))
    close(ga, np.array([Y[0], Y[1], 0.0]))
    close(gb, X[:2])


def test_jvp_with_pytree_primals_and_outputs():
    va, vb = RNG.standard_normal(3), RNG.standard_normal(2)
    out, tangent = F.jvp(lambda p: {"f": f2(p.a, p.b), "neg": -p.b},
                         (Pair(t(X), t(Y)),), (Pair(t(va), t(vb)),))
    assert set(tangent) == {"f", "neg"}
    close(out["f"], np.sin(X).sum() * (Y @ Y))
    close(tangent["f"], df2_da(X, Y) @ va + df2_db(X, Y) @ vb)
    close(tangent["neg"], -vb)
    out, tangent = F.jvp(lambda d: (d["a"] * 2,), ({"a": t(X)},), ({"a": t(va)},))
    assert isinstance(tangent, tuple) and len(tangent) == 1
    close(tangent[0], 2 * va)


@pytest.mark.parametrize("jac", [F.jacrev, F.jacfwd], ids=["jacrev", "jacfwd"])
def test_jacobians_of_pytrees(jac):
    def fn(p):
        return Pair(f2(p["a"], p["b"]), p["a"] * 3)
    j = jac(fn)({"a": t(X), "b": t(Y)})
    assert type(j) is Pair and set(j.a) == {"a", "b"} and set(j.b) == {"a", "b"}
    close(j.a["a"], df2_da(X, Y))
    close(j.a["b"], df2_db(X, Y))
    close(j.b["a"], 3 * np.eye(3))
    close(j.b["b"], np.zeros((3, 2)))


def test_vmap_of_pytrees():
    xs, ys = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 2))
    out = F.vmap(lambda p: {"f": f2(p.a, p.b), "pair": Pair(p.b, p.a.sum())})(
        Pair(t(xs), t(ys)))
    assert set(out) == {"f", "pair"} and type(out["pair"]) is Pair
    close(out["f"], np.array([np.sin(x).sum() * (y @ y) for x, y in zip(xs, ys)]))
    close(out["pair"].a, ys)
    close(out["pair"].b, xs.sum(1))


def test_dict_results_keep_the_callers_key_order():
    params = {"w": t(X), "b": t(Y)}
    grads = F.grad(lambda p: f2(p["w"], p["b"]))(params)
    assert list(grads) == ["w", "b"]
    assert list(F.vmap(lambda a: {"z": a, "a": a})(t(M))) == ["z", "a"]


# ================================================================ vmap in_dims / out_dims
def test_vmap_negative_in_dims():
    xs, ys = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 3))
    got = F.vmap(lambda a, b: a * b, in_dims=(-1, 0))(t(xs), t(ys))
    close(got, xs.T * ys)


def test_vmap_in_dims_none_for_shared_arguments():
    xs = RNG.standard_normal((4, 3))
    got = F.vmap(lambda a, w: a @ w, in_dims=(0, None))(t(xs), t(M.T))
    close(got, xs @ M.T)


def test_vmap_nested_in_dims_prefixes():
    xs, ys = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 4))
    got = F.vmap(lambda p, c: p[0] * p[1] + c, in_dims=((0, 1), None))((t(xs), t(ys)),
                                                                        t(X))
    close(got, xs * ys.T + X)
    got = F.vmap(lambda d: d["a"] * d["b"], in_dims=({"a": 0, "b": None},))(
        {"a": t(xs), "b": t(X)})
    close(got, xs * X)
    got = F.vmap(lambda p: p.a * p.b, in_dims=(Pair(0, 1),))(Pair(t(xs), t(ys)))
    close(got, xs * ys.T)
    # an int prefix covers a whole subtree
    got = F.vmap(lambda d, w: d["a"] + d["b"] * w, in_dims=(0, None))(
        {"a": t(xs), "b": t(xs * 2)}, t(X))
    close(got, xs + 2 * xs * X)


def test_vmap_kwargs_are_not_batched():
    xs = RNG.standard_normal((4, 3))
    close(F.vmap(lambda a, scale=1.0: a * scale)(t(xs), scale=t(X)), xs * X)


def test_vmap_out_dims():
    xs = RNG.standard_normal((4, 3))
    a, s = F.vmap(lambda r: (r * 2, r.sum()), out_dims=(1, 0))(t(xs))
    close(a, 2 * xs.T)
    close(s, xs.sum(1))
    outer = F.vmap(lambda r: r[:, None] * r, out_dims=-1)(t(xs))
    assert tuple(outer.shape) == (3, 3, 4)
    close(outer, np.einsum("bi,bj->ijb", xs, xs))
    d = F.vmap(lambda r: {"p": r * 2, "q": r.sum()}, out_dims={"p": 1, "q": 0})(t(xs))
    close(d["p"], 2 * xs.T)
    close(d["q"], xs.sum(1))


def test_vmap_out_dims_none_for_unbatched_outputs():
    xs = RNG.standard_normal((4, 3))
    batched, shared = F.vmap(lambda r, c: (r * c, c * 2), in_dims=(0, None),
                             out_dims=(0, None))(t(xs), t(X))
    close(batched, xs * X)
    assert tuple(shared.shape) == (3,)
    close(shared, 2 * X)
    # with out_dims=0 an unbatched output is expanded over the batch
    expanded = F.vmap(lambda r, c: c * 2, in_dims=(0, None))(t(xs), t(X))
    close(expanded, np.broadcast_to(2 * X, (4, 3)))


def test_vmap_in_dims_on_middle_dim_and_nested_vmap_dims():
    xs = RNG.standard_normal((2, 5, 3))
    got = F.vmap(lambda r: r.sum(0), in_dims=1)(t(xs))  # r: (2, 3)
    close(got, xs.sum(0))
    got = F.vmap(F.vmap(lambda r: r.max(), in_dims=-1), in_dims=0, out_dims=1)(t(xs))
    assert tuple(got.shape) == (3, 2)
    close(got, xs.max(1).T)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 100])
def test_vmap_chunk_size_equals_no_chunking(chunk_size):
    xs, ys = RNG.standard_normal((3, 5)), RNG.standard_normal((5, 2))

    def fn(a, b, w):
        return {"p": (a[:2] * b).tanh(), "s": (a * w).sum()}
    kwargs = dict(in_dims=(1, 0, None), out_dims={"p": 1, "s": 0})
    want = F.vmap(fn, **kwargs)(t(xs), t(ys), t(np.ones(3)))
    got = F.vmap(fn, chunk_size=chunk_size, **kwargs)(t(xs), t(ys), t(np.ones(3)))
    assert tuple(got["p"].shape) == (2, 5) and tuple(got["s"].shape) == (5,)
    for k in want:
        np.testing.assert_array_equal(n(got[k]), n(want[k]))


@pytest.mark.parametrize("chunk_size", [1, 2, 4])
def test_jacrev_chunk_size_equals_no_chunking(chunk_size):
    fn = lambda a: a.sin() * a.sum()  # noqa: E731
    close(F.jacrev(fn, chunk_size=chunk_size)(t(X)), n(F.jacrev(fn)(t(X))))


def test_vmap_chunk_size_under_grad():
    xs = RNG.standard_normal((5, 3))
    loss = lambda a: F.vmap(lambda r: (r.sin() * r).sum(), chunk_size=2)(a).sum()  # noqa
    close(F.grad(loss)(t(xs)), np.cos(xs) * xs + np.sin(xs))


def test_vmap_chunk_size_with_out_dims_none():
    xs = RNG.standard_normal((4, 3))
    batched, shared = F.vmap(lambda r, c: (r * c, c * 2), in_dims=(0, None),
                             out_dims=(0, None), chunk_size=2)(t(xs), t(X))
    close(batched, xs * X)
    close(shared, 2 * X)


# ================================================================ error messages
@pytest.mark.parametrize("fn,what", [(lambda a: a * 2, "tensor with 1 dims"),
                                     (lambda a: a[None] * a[:, None], "tensor with 2 dims")],
                         ids=["1d", "2d"])
def test_grad_of_non_scalar_output(fn, what):
    with pytest.raises(RuntimeError, match=r"grad_and_value\(f\)\(\*args\): Expected "
                                           rf"f\(\*args\) to return a scalar Tensor, got {what}"
                                           r".*vjp or jacrev"):
        F.grad(fn)(t(X))


def test_grad_of_non_tensor_output():
    with pytest.raises(RuntimeError, match=r"Expected f\(\*args\) to return a"):
        F.grad(lambda a: 3.0)(t(X))


def test_vmap_mismatched_batch_sizes():
    with pytest.raises(ValueError, match=r"vmap: Expected all tensors to have the same size in "
                                         r"the mapped dimension, got sizes \[3, 2\]"):
        F.vmap(lambda a, b: a.sum() + b.sum())(t(X), t(Y))
    with pytest.raises(ValueError, match=r"got sizes \[4, 3\]"):
        F.vmap(lambda a, b: a.sum() + b.sum(), in_dims=(0, 1))(t(M), t(M))


@pytest.mark.parametrize("call", [
    lambda: F.vmap(lambda a, b: a * b, in_dims=(0, 0))(t(X), 2.0),
    lambda: F.vmap(lambda a, d: a * d["k"], in_dims=(0, {"k": 0}))(t(X), {"k": 2.0}),
], ids=["tuple", "nested-dict"])
def test_vmap_in_dims_on_a_non_tensor(call):
    with pytest.raises(ValueError, match=r"Got in_dim=0 for an input but the input is of "
                                         r"type .*float.*We cannot vmap over non-Tensor "
                                         r"arguments, please use None"):
        call()


def test_vmap_other_input_errors():
    with pytest.raises(ValueError, match=r"Got in_dim=1 for some input, but that input is a "
                                         r"Tensor of dimensionality 1"):
        F.vmap(lambda a: a, in_dims=1)(t(X))
    with pytest.raises(ValueError, match=r"Got in_dim=0 for some input, but that input is a "
                                         r"Tensor of dimensionality 0"):
        F.vmap(lambda a: a)(t(1.0))
    with pytest.raises(ValueError, match="in_dims"):
        F.vmap(lambda a, b: a, in_dims=(0,))(t(X), t(X))
    with pytest.raises(ValueError, match="At least one input must be a Tensor batched"):
        F.vmap(lambda a: a, in_dims=None)(t(X))
    with pytest.raises(ValueError, match="chunk_size should be None or greater than 0"):
        F.vmap(lambda a: a, chunk_size=0)
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        F.vmap(lambda a: a, randomness="sometimes")


def test_vmap_output_errors():
    with pytest.raises(ValueError, match="must only return Tensors"):
        F.vmap(lambda a: 3.0)(t(X))
    with pytest.raises(ValueError, match="out_dims=None.*batched"):
        F.vmap(lambda a: a * 2, out_dims=None)(t(X))


def test_jvp_mismatched_structures():
    with pytest.raises(RuntimeError, match=r"jvp\(f, primals, tangents\): Expected primals "
                                           r"and tangents to have the same python structure"):
        F.jvp(lambda a, b: a * b, (t(X), t(X)), (t(X),))
    with pytest.raises(RuntimeError, match="same python structure"):
        F.jvp(lambda d: d["p"], ({"p": t(X)},), ({"q": t(X)},))
    with pytest.raises(RuntimeError, match=r"jvp\(f, primals, tangents\): Expected primals"):
        F.jvp(lambda a: a, [t(X)], [t(X)])
    with pytest.raises(RuntimeError, match="different size"):
        F.jvp(lambda a: a, (t(X),), (t(Y),))


def test_vjp_mismatched_cotangents():
    _, vjp_fn = F.vjp(lambda a: (a, a * 2), t(X))
    with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents to be the "
                                           "same as pytree structure of outputs"):
        vjp_fn(t(X))
    _, vjp_fn = F.vjp(lambda a: a * 2, t(X))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        vjp_fn(t(Y))


# ================================================================ what requires grad
def _leaves(tree):
    if isinstance(tree, ak.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [x for v in tree for x in _leaves(v)]
    return []


def _aux_fn(a):
    return (a.sin() * a).sum(), a.cos()


def _vec_aux_fn(a):
    return a.sin() * a, a.cos()


_NOT_PLAIN = ()  # every top-level result is plain now

PLAIN_RESULTS = {
    "grad": lambda: F.grad(lambda a: (a ** 3).sum())(t(X)),
    "grad_and_value.grad": lambda: F.grad_and_value(lambda a: (a ** 3).sum())(t(X))[0],
    "grad_and_value.value": pytest.param(
        lambda: F.grad_and_value(lambda a: (a ** 3).sum())(t(X))[1], marks=_NOT_PLAIN),
    "grad.aux": pytest.param(lambda: F.grad(_aux_fn, has_aux=True)(t(X))[1],
                             marks=_NOT_PLAIN),
    "vjp.output": pytest.param(lambda: F.vjp(lambda a: a ** 3, t(X))[0], marks=_NOT_PLAIN),
    "vjp.grads": lambda: F.vjp(lambda a: a ** 3, t(X))[1](t(X)),
    "vjp.aux": pytest.param(lambda: F.vjp(_vec_aux_fn, t(X), has_aux=True)[2],
                            marks=_NOT_PLAIN),
    "jvp": lambda: F.jvp(lambda a: a ** 3, (t(X),), (t(X),)),
    "jvp.aux": lambda: F.jvp(_vec_aux_fn, (t(X),), (t(X),), has_aux=True)[2],
    "jacrev": lambda: F.jacrev(lambda a: a ** 3)(t(X)),
    "jacrev.aux": pytest.param(lambda: F.jacrev(_vec_aux_fn, has_aux=True)(t(X))[1],
                               marks=_NOT_PLAIN),
    "jacfwd": lambda: F.jacfwd(_vec_aux_fn, has_aux=True)(t(X)),
    "hessian": lambda: F.hessian(lambda a: (a ** 3).sum())(t(X)),
    "vmap": lambda: F.vmap(lambda a: a ** 3)(t(M)),
    "vmap(grad)": lambda: F.vmap(F.grad(lambda a: (a ** 3).sum()))(t(M)),
    "linearize": lambda: (lambda r: (r[0], r[1](t(X))))(F.linearize(lambda a: a.sin(), t(X))),
}


@pytest.mark.parametrize("make", list(PLAIN_RESULTS.values()), ids=list(PLAIN_RESULTS))
def test_top_level_results_do_not_require_grad(make):
    leaves = _leaves(make())
    assert leaves
    for leaf in leaves:
        assert not leaf.requires_grad and leaf.grad_fn is None


def test_results_depending_on_a_closed_over_tensor_requiring_grad():
    w = t(X, requires_grad=True)
    x = t(np.array([0.3, 0.6, -0.9]))
    g = F.grad(lambda a: (a * w).sin().sum())(x)  # w cos(a w)
    assert g.requires_grad
    (dw,) = ak.autograd.grad(g.sum(), w)
    wx = X * n(x)
    close(dw, np.cos(wx) - wx * np.sin(wx))
    for jac in (F.jacrev, F.jacfwd):
        j = jac(lambda a: (a * w).sin())(x)
        assert j.requires_grad
        (dw,) = ak.autograd.grad(j.sum(), w)
        close(dw, np.cos(wx) - wx * np.sin(wx))
    out = F.vmap(lambda a: (a * w).sin().sum())(t(M))
    assert out.requires_grad
    (dw,) = ak.autograd.grad(out.sum(), w)
    close(dw, (np.cos(M * X) * M).sum(0))
    _, tangent = F.jvp(lambda a: (a * w).sin(), (x,), (t(np.ones(3)),))
    assert tangent.requires_grad
    (dw,) = ak.autograd.grad(tangent.sum(), w)
    close(dw, np.cos(wx) - wx * np.sin(wx))


def test_results_depending_on_the_callers_input_requiring_grad():
    x = t(X, requires_grad=True)
    g = F.grad(lambda a: (a ** 3).sum())(x)
    assert g.requires_grad
    close(g, 3 * X ** 2)
    (dx,) = ak.autograd.grad(g.sum(), x)
    close(dx, 6 * X)
    out, vjp_fn = F.vjp(lambda a: a ** 3, x)
    assert out.requires_grad
    (gx,) = vjp_fn(t(np.ones(3)))
    (dx,) = ak.autograd.grad(gx.sum(), x)
    close(dx, 6 * X)
    _, tangent = F.jvp(lambda a: a ** 3, (x,), (t(np.ones(3)),))
    (dx,) = ak.autograd.grad(tangent.sum(), x)
    close(dx, 6 * X)


def test_caller_tensors_are_not_modified():
    x = t(X)
    F.grad(lambda a: (a ** 3).sum())(x)
    F.jacfwd(lambda a: a ** 3)(x)
    assert not x.requires_grad and x.grad is None and x.grad_fn is None
    np.testing.assert_array_equal(n(x), X)


# ================================================================ linearize
def test_linearize():
    def fn(a, b):
        return a.sin() * b.sum()
    b = t(np.array([1.0, -2.0, 0.5]))
    out, jvp_fn = F.linearize(fn, t(X), b)
    close(out, np.sin(X) * b.numpy().sum())
    for _ in range(2):  # callable repeatedly
        va, vb = RNG.standard_normal(3), RNG.standard_normal(3)
        want = np.cos(X) * va * b.numpy().sum() + np.sin(X) * vb.sum()
        close(jvp_fn(t(va), t(vb)), want)
        _, jv = F.jvp(fn, (t(X), b), (t(va), t(vb)))
        close(jvp_fn(t(va), t(vb)), n(jv))


def test_linearize_under_vmap_of_tangents():
    out, jvp_fn = F.linearize(lambda a: a.exp(), t(X))
    vs = RNG.standard_normal((4, 3))
    close(F.vmap(jvp_fn)(t(vs)), np.exp(X) * vs)


# ================================================================ custom Functions
CALLS = {}


def _bump(key):
    CALLS[key] = CALLS.get(key, 0) + 1


def _backward(ctx, g):
    _bump("backward")
    x, = ctx.saved_tensors
    return g * 3 * x * x


def _jvp(ctx, tangent):
    _bump("jvp")
    x, = ctx.saved_tensors
    return tangent * 3 * x * x


class CtxCube(Function):
    """forward(ctx, x) style."""

    @staticmethod
    def forward(ctx, x):
        _bump("forward")
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        return x * x * x

    backward = staticmethod(_backward)
    jvp = staticmethod(_jvp)


class SetupCube(Function):
    """forward(x) + setup_context style."""

    @staticmethod
    def forward(x):
        _bump("forward")
        return x * x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    backward = staticmethod(_backward)
    jvp = staticmethod(_jvp)


def _with_vmap_rule(base):
    class Cube(base):
        @staticmethod
        def vmap(info, in_dims, x):
            _bump("vmap")
            assert info.batch_size == x.shape[in_dims[0]]
            return Cube.apply(x), in_dims[0]
    Cube.__name__ = base.__name__ + "WithVmap"
    return Cube


def _generated(base):
    return type(base.__name__ + "Generated", (base,), {"generate_vmap_rule": True})


CUBES = {"ctx-vmap": _with_vmap_rule(CtxCube), "ctx-generate": _generated(CtxCube),
         "setup-vmap": _with_vmap_rule(SetupCube), "setup-generate": _generated(SetupCube)}
XS = np.array([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3]])


def _cube_cases(cube):
    """name -> (thunk, expected, rules that must have run)."""
    x, xs = t(X), t(XS)
    v = np.array([0.3, -0.7, 1.1])
    return {
        "grad": (lambda: F.grad(lambda a: cube.apply(a).sum())(x), 3 * X ** 2, {"backward"}),
        "vjp": (lambda: F.vjp(cube.apply, x)[1](t(v))[0], 3 * X ** 2 * v, {"backward"}),
        "jvp": (lambda: F.jvp(cube.apply, (x,), (t(v),))[1], 3 * X ** 2 * v, {"jvp"}),
        "vmap": (lambda: F.vmap(cube.apply)(xs), XS ** 3, set()),
        "vmap-in_dims-1": (lambda: F.vmap(cube.apply, in_dims=1, out_dims=1)(t(XS.T)),
                           XS.T ** 3, set()),
        "jacrev": (lambda: F.jacrev(cube.apply)(x), np.diag(3 * X ** 2), {"backward"}),
        "jacfwd": (lambda: F.jacfwd(cube.apply)(x), np.diag(3 * X ** 2), {"jvp"}),
        "grad-grad": (lambda: F.grad(lambda a: F.grad(lambda b: cube.apply(b).sum())(a)
                                     .sum())(x), 6 * X, {"backward"}),
        "vmap-grad": (lambda: F.vmap(F.grad(lambda a: cube.apply(a).sum()))(xs),
                      3 * XS ** 2, {"backward"}),
        "hessian": (lambda: F.hessian(lambda a: cube.apply(a).sum())(x), np.diag(6 * X),
                    {"backward", "jvp"}),
    }


CUBE_CASES = [pytest.param(c, case, id=f"{c}-{case}") for c in CUBES
              for case in _cube_cases(CtxCube)]


@pytest.mark.parametrize("cube_name,case", CUBE_CASES)
def test_custom_function_under_transforms(cube_name, case):
    cube = CUBES[cube_name]
    thunk, want, rules = _cube_cases(cube)[case]
    CALLS.clear()
    got = thunk()
    close(got, want)
    assert not got.requires_grad
    for rule in rules:
        assert CALLS.get(rule, 0) >= 1, f"the Function's {rule} rule did not run: {CALLS}"
    batched = case.startswith("vmap")  # adkit's jacfwd loops over the basis: no vmap
    if batched and cube_name.endswith("vmap"):
        assert CALLS.get("vmap", 0) >= 1, f"the vmap staticmethod did not run: {CALLS}"


class TwoInputs(Function):
    """out = x * sin(y), setup_context style with a vmap rule handling None in_dims."""

    @staticmethod
    def forward(x, y):
        return x * y.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y.sin(), g * x * y.cos()

    @staticmethod
    def jvp(ctx, tx, ty):
        x, y = ctx.saved_tensors
        return tx * y.sin() + ty * x * y.cos()

    @staticmethod
    def vmap(info, in_dims, x, y):
        x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x
        y = y.movedim(in_dims[1], 0) if in_dims[1] is not None else y
        return TwoInputs.apply(x, y), 0


def test_custom_function_with_two_inputs_under_transforms():
    x, y = t(X), t(np.array([0.4, 1.0, -2.0]))
    yn = n(y)
    gx, gy = F.grad(lambda a, b: TwoInputs.apply(a, b).sum(), argnums=(0, 1))(x, y)
    close(gx, np.sin(yn))
    close(gy, X * np.cos(yn))
    _, jv = F.jvp(TwoInputs.apply, (x, y), (t(np.ones(3)), t(np.ones(3))))
    close(jv, np.sin(yn) + X * np.cos(yn))
    got = F.vmap(TwoInputs.apply, in_dims=(0, None))(t(XS), y)
    close(got, XS * np.sin(yn))
    got = F.vmap(TwoInputs.apply, in_dims=(None, 1))(x, t(XS.T))
    close(got, X * np.sin(XS))
    ja, jb = F.jacfwd(TwoInputs.apply, argnums=(0, 1))(x, y)
    close(ja, np.diag(np.sin(yn)))
    close(jb, np.diag(X * np.cos(yn)))
    ja, jb = F.jacrev(TwoInputs.apply, argnums=(0, 1))(x, y)
    close(ja, np.diag(np.sin(yn)))
    close(jb, np.diag(X * np.cos(yn)))


class NoVmapCube(SetupCube):
    pass


class NoVmapCtxCube(CtxCube):
    pass


@pytest.mark.parametrize("cube", [NoVmapCube, NoVmapCtxCube], ids=["setup", "ctx"])
def test_custom_function_without_vmap_rule_under_vmap(cube):
    message = (r"override (and implement )?the vmap staticmethod or set "
               r"generate_vmap_rule=True")
    with pytest.raises(RuntimeError, match=message):
        F.vmap(cube.apply)(t(XS))
    with pytest.raises(RuntimeError, match=message):
        F.vmap(F.grad(lambda a: cube.apply(a).sum()))(t(XS))
    # adkit's jacfwd runs one jvp per basis vector (not torch's vmap), so, like reverse
    # mode, it needs no batching rule of the Function
    close(F.jacfwd(cube.apply)(t(X)), np.diag(3 * X ** 2))
    close(F.grad(lambda a: cube.apply(a).sum())(t(X)), 3 * X ** 2)
    close(F.jacrev(cube.apply)(t(X)), np.diag(3 * X ** 2))


def test_custom_function_without_jvp_under_forward_mode():
    class NoJvp(Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2
    close(F.jacrev(NoJvp.apply)(t(X)), 2 * np.eye(3))
    with pytest.raises(NotImplementedError, match="You must implement the jvp function"):
        F.jvp(NoJvp.apply, (t(X),), (t(X),))


def test_mixed_second_derivatives_come_back_without_history():
    # the inner grad's fresh leaf is a dead end once it returns: the outer result must
    # not keep a graph to it (torch.func returns plain tensors)
    x, y = ak.tensor(1.5), ak.tensor(0.5)
    f = lambda x, y: (x * y).sin()  # noqa: E731
    for outer in (F.grad(lambda x, y: F.grad(f, argnums=0)(x, y), argnums=1),
                  F.jacrev(F.jacrev(f, argnums=0), argnums=1)):
        got = outer(x, y)
        assert not got.requires_grad and got.grad_fn is None
        # d/dy d/dx sin(xy) = cos(xy) - xy sin(xy)
        np.testing.assert_allclose(got.item(), np.cos(0.75) - 0.75 * np.sin(0.75), rtol=1e-6)
    w = ak.tensor(2.0, requires_grad=True)  # a caller's parameter keeps its history
    inner = F.grad(lambda x, y: f(x, y) * w, argnums=0)
    got = F.grad(lambda x, y: inner(x, y), argnums=1)(x, y)
    assert got.requires_grad
