"""Native branches: jitted cond/switch nodes whose branches lower completely are one native
call (codegen/branches.py). Results equal eager mode and the numpy interpreter on the same
optimized graph, for every index (clamped like jax.lax.switch), in loop bodies, and for
the derived switches of grad and jvp; each test also checks where the node ran."""
import numpy as np
import pytest

import adkit as ak
from adkit._pytree import tree_flatten
from adkit.codegen.branches import SwitchCall
from adkit.codegen.loops import NativeBody
from adkit.codegen.steps import NumpyStep, SegmentStep
from adkit.control import Switch
from adkit.ir import evaluate

RNG = np.random.default_rng(11)
INDICES = [-7, -1, 0, 1, 2, 3, 50]  # for three branches: below, in and above the range


def t(*shape, dtype=np.float64):
    return ak.tensor(RNG.standard_normal(shape).astype(dtype))


def index(k):
    return ak.tensor(np.int64(k))


# ------------------------------------------------------------------ where the node ran
def _bodies(call):
    """The NativeBodies a native call runs (a loop's body, a switch's branches...)."""
    for value in vars(call).values():
        for x in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(x, NativeBody):
                yield x


def native_switches(steps):
    """The SwitchCalls of a plan's native code, also those in loop and branch bodies."""
    found = []
    for step in steps:
        for call in step.calls if isinstance(step, SegmentStep) else ():
            if isinstance(call, SwitchCall):
                found.append(call)
            for body in _bodies(call):
                found += native_switches(body.plan.steps)
    return found


def numpy_switches(compiled):
    return [s for s in compiled.steps if isinstance(s, NumpyStep) and s.op is Switch]


def all_native(compiled):
    """One native call per run: every step is a native segment (no numpy step)."""
    return all(isinstance(s, SegmentStep) for s in compiled.steps)


# ------------------------------------------------------------------ comparing results
def leaves(value):
    return [np.asarray(x.numpy() if isinstance(x, ak.Tensor) else x)
            for x in tree_flatten(value, is_leaf=lambda x: isinstance(x, ak.Tensor))[0]]


def close(got, want, tol):
    got, want = leaves(got), leaves(want)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def check(jitted, f, *args, tol=1e-12):
    """jitted(*args) against eager f(*args) and against the interpreter on the compiled
    graph; returns the Compiled."""
    compiled = jitted.compile(*args)
    got = jitted(*args)
    close(got, f(*args), tol)
    close(got, evaluate.call_graph(compiled.graph, args), tol)
    return compiled


def numeric_grad(f, x, eps=1e-6):
    """Central differences of a scalar f at x (float64)."""
    x = x.numpy()
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (float(f(ak.tensor(x + d))) - float(f(ak.tensor(x - d)))) / (2 * eps)
    return g


# ------------------------------------------------------------------ cond
W = {dtype: ak.tensor(RNG.standard_normal((4, 4)).astype(dtype) * 0.5)
     for dtype in (np.float32, np.float64)}
XS = t(6, 3)


def two_way(x, scale):
    """Branches of different cost and two outputs in a pytree; consts closed over."""
    w = W[np.float32 if x.dtype == ak.float32 else np.float64]

    def heavy(a):
        h = (a @ w).tanh() * scale
        return {"h": h, "s": (h * a).sum()}

    def light(a):
        return {"h": a, "s": a.sum() * 0.0 + 1.0}
    return ak.cond(x.sum() > 0, heavy, light, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cond_on_a_native_comparison_is_one_native_call(dtype):
    def f(x, scale):
        return two_way(x, scale)
    jf = ak.jit(f)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    x, scale = t(3, 4, dtype=dtype), t(dtype=dtype)
    for sign in (1.0, -1.0):  # both branches of the same compiled program
        x = ak.tensor(np.abs(x.numpy()) * dtype(sign))
        compiled = check(jf, f, x, scale, tol=tol)
    assert all_native(compiled) and len(compiled.steps) == 1
    assert len(native_switches(compiled.steps)) == 1 and not numpy_switches(compiled)


def test_cond_keeps_its_predicate_a_bool():
    graph = ak.trace(lambda x: ak.cond(x.sum() > 0, lambda a: a * 2, lambda a: a, x), t(3))
    switch, = [n for n in graph.op_nodes if graph.nx.nodes[n]["op"] is Switch]
    (_, u, out), *_ = graph.args_of(switch)
    assert graph.specs_of(u)[out].dtype == ak.bool  # no cast to int64 in between


@pytest.mark.parametrize("pred", [True, False])
def test_cond_on_a_python_bool_and_on_a_bool_input(pred):
    def on_python(x):
        return ak.cond(pred, lambda a: a.sin(), lambda a: a.cos() * 3, x)

    def on_input(p, x):
        return ak.cond(p, lambda a: a.sin(), lambda a: a.cos() * 3, x)
    x = t(5)
    compiled = check(ak.jit(on_python), on_python, x)
    assert all_native(compiled) and native_switches(compiled.steps)
    jf, p = ak.jit(on_input), ak.tensor(pred)
    compiled = check(jf, on_input, p, x)
    assert all_native(compiled) and native_switches(compiled.steps)


def test_cond_on_a_float_predicate_and_with_no_operands():
    y = t(3)

    def f(p):  # a float predicate is `p != 0`; the branches only close over y
        return ak.cond(p, lambda: y * 2, lambda: y - 1)
    jf = ak.jit(f)
    for p in (0.0, 2.5, -1.0):
        compiled = check(jf, f, ak.tensor(p))
    assert all_native(compiled) and native_switches(compiled.steps)


def test_nested_conds_and_a_branch_returning_its_operand_and_a_const():
    c = t(3)

    def f(x):
        def outer_true(a):
            return ak.cond(a[0] > 0, lambda b: (b.exp(), c), lambda b: (b, b), a)
        return ak.cond(x.sum() > 0, outer_true, lambda a: (a * c, a + 1), x)
    jf = ak.jit(f)
    for x in (ak.tensor(np.array([1.0, 2.0, 3.0])), ak.tensor(np.array([-1.0, 2.0, 3.0])),
              -t(3) ** 2 - 1):
        compiled = check(jf, f, x)
    assert all_native(compiled) and len(native_switches(compiled.steps)) == 2


def test_strided_operands_are_read_as_laid_out():
    def f(x):  # x.t() is a view: the branch reads a transposed operand
        return ak.cond(x[0, 0] > 0, lambda a: (a * 2, a), lambda a: (a + 1, a.exp()), x.t())
    jf = ak.jit(f)
    for sign in (1.0, -1.0):
        x = ak.tensor(np.abs(RNG.standard_normal((3, 4))) * sign)
        compiled = check(jf, f, x)
    assert all_native(compiled) and native_switches(compiled.steps)


# ------------------------------------------------------------------ switch
BRANCHES = [lambda a, b: (a * b, a.sum()),
            lambda a, b: ((a @ b.t()).tanh() @ b, (a * a).sum()),
            lambda a, b: (a - b, a.max())]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_switch_on_an_int_input_clamps_like_the_interpreter(dtype):
    def f(k, a, b):
        return ak.switch(k, BRANCHES, a, b)
    jf = ak.jit(f)
    a, b = t(2, 3, dtype=dtype), t(2, 3, dtype=dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for k in INDICES:  # one compiled program reads each index at run time
        compiled = check(jf, f, index(k), a, b, tol=tol)
    assert len(jf.cache) == 1
    assert all_native(compiled) and native_switches(compiled.steps)


@pytest.mark.parametrize("k", INDICES)
def test_switch_on_a_constant_index(k):
    a, b = t(2, 3), t(2, 3)

    def f(a, b):
        return ak.switch(ak.tensor(k), BRANCHES, a, b)
    compiled = check(ak.jit(f), f, a, b)
    assert all_native(compiled) and native_switches(compiled.steps)


def test_switch_on_a_bool_index_picks_branch_0_or_1():
    def f(p, a, b):
        return ak.switch(p, BRANCHES, a, b)
    jf = ak.jit(f)
    for p in (True, False):
        compiled = check(jf, f, ak.tensor(p), t(2, 3), t(2, 3))
    assert all_native(compiled) and native_switches(compiled.steps)


def test_an_index_numpy_computes_keeps_the_switch_on_numpy():
    def f(x):  # argmax makes an int64 on numpy: native code cannot read it
        return ak.switch(x.argmax() - 1, [lambda a: a * 2, lambda a: a.exp(),
                                          lambda a: -a], x)
    jf = ak.jit(f)
    for x in (ak.tensor([3.0, 0.0, 1.0]), ak.tensor([0.0, 3.0, 1.0]),
              ak.tensor([0.0, 1.0, 3.0])):
        compiled = check(jf, f, x)
    assert numpy_switches(compiled) and not native_switches(compiled.steps)


def test_an_int32_index_is_cast_on_numpy_and_clamped_the_same():
    def f(k, a, b):  # switch casts an int32 index to int64: numpy makes the index
        return ak.switch(k, BRANCHES, a, b)
    jf = ak.jit(f)
    for k in INDICES:
        compiled = check(jf, f, ak.tensor(np.int32(k)), t(2, 3), t(2, 3))
    assert numpy_switches(compiled) and not native_switches(compiled.steps)


def test_a_branch_numpy_must_run_keeps_the_switch_on_numpy():
    def f(x):  # sort has no native lowering
        return ak.cond(x.sum() > 0, lambda a: a.sort()[0] * 2, lambda a: a + 1, x)
    jf = ak.jit(f)
    for x in (ak.tensor([3.0, -1.0, 2.0]), ak.tensor([-3.0, 1.0, 0.5])):
        compiled = check(jf, f, x)
    assert numpy_switches(compiled) and not native_switches(compiled.steps)


# ------------------------------------------------------------------ in loop bodies
def flip(h):
    """A step whose predicate changes from step to step (both branches run)."""
    return ak.cond(h.sum() > 0, lambda a: a * 0.5 - 1.5, lambda a: (a + 2.0).tanh() + 0.7, h)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cond_in_a_fori_loop_keeps_the_loop_native(dtype):
    def f(h):
        return ak.fori_loop(0, 9, lambda i, h: flip(h), h)
    jf = ak.jit(f)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for h in (t(4, dtype=dtype), ak.tensor(np.full(4, 3.0, dtype))):
        compiled = check(jf, f, h, tol=tol)
    assert all_native(compiled) and len(compiled.steps) == 1
    assert len(native_switches(compiled.steps)) == 1 and not numpy_switches(compiled)


def test_switch_in_a_scan_with_xs_ys_and_consts():
    w, v = t(3, 3) * 0.6, t(3)

    def f(h, k, xs):
        def step(h, x):
            h = ak.switch(k, [lambda a, x: (a @ w + x).tanh(), lambda a, x: a * v - x,
                              lambda a, x: a], h, x)
            return h, (h * x).sum()
        return ak.scan(step, h, xs)
    jf = ak.jit(f)
    for k in INDICES:
        compiled = check(jf, f, t(3), index(k), t(6, 3))
    assert all_native(compiled) and native_switches(compiled.steps)


def test_cond_in_a_while_loop_body():
    def f(h):
        def body(h):
            return ak.cond(h[0] > 0, lambda a: a * 1.5 + 0.25, lambda a: a.abs() + 0.5, h)
        return ak.while_loop(lambda h: h.sum() < 20.0, body, h)
    jf = ak.jit(f)
    for h in (t(3), ak.tensor([-1.0, 2.0, 0.5])):
        compiled = check(jf, f, h)
    assert all_native(compiled) and native_switches(compiled.steps)


def test_an_int_carry_as_the_index_stays_native():
    xs = t(5, 2)

    def f(h, k):  # the int carry passes through each step unchanged
        def step(carry, x):
            h, k = carry
            h = ak.switch(k, [lambda a: a + x, lambda a: a * x, lambda a: a - x], h)
            return (h, k), None
        return ak.scan(step, (h, k), xs)[0]
    jf = ak.jit(f)
    for k in INDICES:
        compiled = check(jf, f, t(2), index(k))
    assert all_native(compiled) and native_switches(compiled.steps)


def test_switch_on_the_loop_index_is_native_and_right():
    def f(h):  # the loop's int64 indices are a constant native code reads (issue 13)
        return ak.fori_loop(0, 5, lambda i, h: ak.switch(i, [lambda a: a + 1, lambda a: a * 2,
                                                             lambda a: a.sin()], h), h)
    compiled = check(ak.jit(f), f, t(3))
    assert all_native(compiled)


# ------------------------------------------------------------------ derivatives
def loss(x):
    out = two_way(x, ak.tensor(1.3, dtype=ak.float64))
    return (out["h"] ** 2).sum() + out["s"]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_grad_through_cond_is_native_and_matches_finite_differences(sign):
    x = ak.tensor(np.abs(RNG.standard_normal((2, 4))) * sign)
    grad = ak.func.grad(loss)
    jg = ak.jit(grad)
    compiled = check(jg, grad, x, tol=1e-10)
    np.testing.assert_allclose(jg(x).numpy(), numeric_grad(loss, x), rtol=1e-6, atol=1e-6)
    assert all_native(compiled) and native_switches(compiled.steps)


@pytest.mark.parametrize("k", INDICES)
def test_jvp_through_switch_is_native_and_matches_finite_differences(k):
    b = t(2, 3)

    def f(a):
        return ak.switch(index(k), BRANCHES, a, b)[0]

    def jvp(a, v):
        return ak.func.jvp(f, (a,), (v,))
    a, v = t(2, 3), t(2, 3)
    compiled = check(ak.jit(jvp), jvp, a, v, tol=1e-10)
    eps = 1e-6
    numeric = (f(a + v * eps).numpy() - f(a - v * eps).numpy()) / (2 * eps)
    np.testing.assert_allclose(ak.jit(jvp)(a, v)[1].numpy(), numeric, rtol=1e-6, atol=1e-6)
    assert all_native(compiled) and native_switches(compiled.steps)


def test_grad_of_a_loop_with_a_cond_keeps_both_passes_native():
    w = t(3, 3) * 0.4

    def loop_loss(h):
        def step(h, x):
            h = ak.cond((h * x).sum() > 0, lambda a: (a @ w).sin() + x, lambda a: a * 0.9 - x, h)
            return h, h.sum()
        h, ys = ak.scan(step, h, XS)
        return (h * h).sum() + (ys * ys).sum()
    grad = ak.func.grad(loop_loss)
    jg = ak.jit(grad)
    h = t(3)
    compiled = check(jg, grad, h, tol=1e-10)
    np.testing.assert_allclose(jg(h).numpy(), numeric_grad(loop_loss, h), rtol=1e-6, atol=1e-6)
    assert all_native(compiled)
    assert len(native_switches(compiled.steps)) >= 2  # the forward's and the vjp's


def test_vmap_with_a_per_example_bool_predicate():
    def f(x):
        return ak.cond(x.sum() > 0, lambda a: a.exp(), lambda a: a * -3.0, x)
    xs = t(5, 3)
    want = np.stack([f(xs[i]).numpy() for i in range(5)])
    np.testing.assert_allclose(ak.func.vmap(f)(xs).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(ak.jit(ak.func.vmap(f))(xs).numpy(), want, rtol=1e-12)


def test_vmap_with_a_shared_index_is_a_native_switch():
    def f(k, xs):
        return ak.func.vmap(lambda x: ak.switch(k, [lambda a: a.sin(), lambda a: a * 2,
                                                    lambda a: a.sum() + a], x))(xs)
    jf = ak.jit(f)
    for k in INDICES:
        compiled = check(jf, f, index(k), t(4, 3))
    assert all_native(compiled) and native_switches(compiled.steps)
