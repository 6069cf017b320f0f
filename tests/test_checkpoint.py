"""ak.checkpoint and the remat pass: gradients equal the plain function's (bit for bit),
gradcheck/gradgradcheck, the segment runs twice and keeps no intermediate, memory is
lower; remat keeps results on a deep chain and on random programs, validate() holds,
and the forward values it recomputes are no longer read by backward nodes."""
import gc
import importlib.util
import tracemalloc
import weakref
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import adkit as ak
from adkit.autograd import forward_ad as fwad
from adkit.func.checkpoint import checkpoint
from adkit.ir.passes import vjp
from adkit.ir.passes.remat import count_forward_outputs, forward_nodes, remat
from adkit.ops.linalg import Matmul
from adkit.ops.reduction import Sum
from adkit.ops.unary import Sin, Tanh

F64 = ak.float64
STYLES = [False, True]  # use_reentrant
RNG = np.random.default_rng(0)


# ================================================================ helpers
def leaf(arr, requires_grad=True):
    return ak.tensor(np.array(arr, dtype=np.float64), requires_grad=requires_grad)


def grads_of(fn, arrays, wrt=None):
    """Gradients of fn(*leaves).sum-of-outputs with respect to the leaves `wrt` (default
    all), through backward(); None where a leaf got none."""
    wrt = range(len(arrays)) if wrt is None else wrt
    leaves = [leaf(a, i in wrt) for i, a in enumerate(arrays)]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.sum() * (k + 1) for k, o in enumerate(outs)).backward()
    return [None if t.grad is None else t.grad.numpy() for t in leaves]


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            assert g is not None and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)  # the same ops on the same values


class Counter:
    """A segment that counts its runs: w * sin(x) -> tanh -> * scale (+ exp)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x, w, scale=2.0):
        self.calls += 1
        y = (x * w).sin()
        return y.tanh() * scale + y.exp()


def block(y, n=8):
    for i in range(n):
        y = y.sin() if i % 2 else (y * 1.01).tanh()
    return y


# ================================================================ checkpoint: gradients
@pytest.mark.parametrize("use_reentrant", STYLES)
@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4)])
def test_checkpoint_grads_equal_plain_function(shape, use_reentrant):
    x, w = RNG.standard_normal(shape), RNG.standard_normal(shape)
    seg = Counter()
    want = grads_of(seg, [x, w])
    got = grads_of(lambda a, b: checkpoint(seg, a, b, use_reentrant=use_reentrant), [x, w])
    assert_same(got, want)


@pytest.mark.parametrize("use_reentrant", STYLES)
def test_checkpoint_non_tensor_args(use_reentrant):
    def seg(x, scale, mode, nothing):
        assert nothing is None
        return (x * scale).sin() if mode == "sin" else (x * scale).cos()

    x = RNG.standard_normal(6)
    for mode in ("sin", "cos"):
        want = grads_of(lambda a: seg(a, 3.0, mode, None), [x])
        got = grads_of(lambda a: checkpoint(seg, a, 3.0, mode, None,
                                            use_reentrant=use_reentrant), [x])
        assert_same(got, want)


def test_checkpoint_keyword_and_nested_arguments():
    def seg(pair, *, scale, extra=None):
        a, b = pair
        return (a * b).tanh() * scale + extra["shift"].exp()

    x, y, z = RNG.standard_normal((3, 4))

    def run(ck):
        def fn(a, b, c):
            args = ((a, b),)
            kwargs = dict(scale=1.5, extra={"shift": c})
            return checkpoint(seg, *args, **kwargs) if ck else seg(*args, **kwargs)
        return grads_of(fn, [x, y, z])
    assert_same(run(True), run(False))


def test_checkpoint_reentrant_refuses_keyword_arguments_and_warns_without_grad():
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(Counter(), leaf([1.0]), leaf([2.0]), scale=1.0, use_reentrant=True)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        checkpoint(Counter(), leaf([1.0], False), leaf([2.0], False), use_reentrant=True)


@pytest.mark.parametrize("use_reentrant", STYLES)
def test_checkpoint_several_outputs(use_reentrant):
    def seg(x, w):
        y = (x * w).sin()
        return y.exp(), y.sum(), (y * 2).tanh()

    x, w = RNG.standard_normal((2, 3, 2))
    want = grads_of(seg, [x, w])
    got = grads_of(lambda a, b: checkpoint(seg, a, b, use_reentrant=use_reentrant), [x, w])
    assert_same(got, want)
    # only some outputs reach the loss
    part = grads_of(lambda a, b: seg(a, b)[1], [x, w])
    assert_same(grads_of(lambda a, b: checkpoint(seg, a, b, use_reentrant=use_reentrant)[1],
                         [x, w]), part)


def test_checkpoint_dict_output_and_closed_over_weights():
    w = leaf(RNG.standard_normal((4, 4)))

    def seg(x):
        h = (x @ w).tanh()
        return {"h": h, "norm": (h * h).sum()}

    x0 = RNG.standard_normal((3, 4))
    results = []
    for ck in (False, True):
        x = leaf(x0)
        out = checkpoint(seg, x) if ck else seg(x)
        gx, gw = ak.autograd.grad(out["h"].sum() + out["norm"], (x, w))
        results.append([gx.numpy(), gw.numpy()])
    assert_same(results[1], results[0])


@pytest.mark.parametrize("use_reentrant", STYLES)
def test_checkpoint_nested(use_reentrant):
    w = leaf(RNG.standard_normal((4, 4)), requires_grad=False)

    def inner(x):
        return (x @ w).tanh().sin()

    def outer(x):
        y = checkpoint(inner, x, use_reentrant=use_reentrant)
        return checkpoint(inner, y * 2, use_reentrant=use_reentrant).exp()

    def plain(x):
        return inner(inner(x) * 2).exp()

    x = RNG.standard_normal((3, 4))
    want = grads_of(plain, [x])
    assert_same(grads_of(lambda a: checkpoint(outer, a, use_reentrant=use_reentrant), [x]),
                want)


@pytest.mark.parametrize("use_reentrant", STYLES)
def test_checkpoint_segment_inside_larger_graph(use_reentrant):
    w1, w2 = RNG.standard_normal((2, 4, 4))

    def model(x, a, b, ck):
        h = (x @ a).relu() + 0.1
        seg = (lambda h, b: block(h @ b))
        h = checkpoint(seg, h, b, use_reentrant=use_reentrant) if ck else seg(h, b)
        return (h.log_softmax(-1) * x).sum() + h.sum() * h.mean()

    x = RNG.standard_normal((5, 4))
    want = grads_of(lambda x, a, b: model(x, a, b, False), [x, w1, w2])
    got = grads_of(lambda x, a, b: model(x, a, b, True), [x, w1, w2])
    assert_same(got, want)


@pytest.mark.parametrize("use_reentrant", STYLES)
def test_checkpoint_requires_grad_on_some_inputs(use_reentrant):
    seg = Counter()
    x, w = RNG.standard_normal((2, 5))
    for wrt in ([0], [1]):
        want = grads_of(seg, [x, w], wrt)
        got = grads_of(lambda a, b: checkpoint(seg, a, b, use_reentrant=use_reentrant),
                       [x, w], wrt)
        assert_same(got, want)
        assert got[1 - wrt[0]] is None


def test_checkpoint_integer_input_and_autograd_grad():
    def seg(x, idx):
        return x.index_select(0, idx).sin() * 3

    x0, idx = RNG.standard_normal((5, 2)), ak.tensor([4, 0, 4])
    x = leaf(x0)
    (want,) = ak.autograd.grad(seg(x, idx).sum(), x)
    (got,) = ak.autograd.grad(checkpoint(seg, x, idx).sum(), x)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_checkpoint_wrapper_form():
    seg = Counter()
    wrapped = checkpoint(seg.__call__)
    assert wrapped.__name__ == "__call__" and callable(wrapped)
    x, w = RNG.standard_normal((2, 4))
    assert_same(grads_of(wrapped, [x, w]), grads_of(seg, [x, w]))
    reentrant = checkpoint(seg, use_reentrant=True)
    assert_same(grads_of(reentrant, [x, w]), grads_of(seg, [x, w]))
    with pytest.raises(TypeError, match="expected a function"):
        checkpoint(3)


# ================================================================ higher order, modes
def test_checkpoint_gradcheck_and_gradgradcheck():
    w = leaf(RNG.standard_normal(4), requires_grad=False)

    def fn(x, v):
        return checkpoint(Counter(), x, v, 1.5)

    x, v = leaf(RNG.standard_normal(4)), leaf(RNG.standard_normal(4))
    assert ak.autograd.gradcheck(fn, (x, v))
    assert ak.autograd.gradgradcheck(fn, (x, v))
    assert ak.autograd.gradcheck(lambda x: checkpoint(Counter(), x, w), (x,))
    # (use_reentrant=True refuses grad(), which gradcheck uses, as PyTorch's does)


def test_checkpoint_double_backward_equals_plain():
    def second(fn):
        x = leaf(np.linspace(-1, 1, 5))
        (g,) = ak.autograd.grad(fn(x).sum(), x, create_graph=True)
        (h,) = ak.autograd.grad((g * g).sum(), x)
        return [g.detach().numpy(), h.numpy()]

    seg = (lambda x: block(x, 6).exp())
    assert_same(second(lambda x: checkpoint(seg, x)), second(seg))


def test_checkpoint_reentrant_refuses_double_backward_and_grad():
    x = leaf([0.5, 1.0])
    y = checkpoint(lambda t: t.sin().exp(), x, use_reentrant=True).sum()
    with pytest.raises(RuntimeError, match="create_graph=True"):
        y.backward(create_graph=True)
    y = checkpoint(lambda t: t.sin().exp(), x, use_reentrant=True).sum()
    with pytest.raises(RuntimeError, match="not compatible with ak.autograd.grad"):
        ak.autograd.grad(y, x)


def test_checkpoint_forward_ad_and_func_grad():
    x0, t0 = RNG.standard_normal((2, 6))
    seg = (lambda x: block(x, 4).exp())
    outs = []
    for fn in (seg, lambda x: checkpoint(seg, x)):
        with fwad.dual_level():
            out = fn(fwad.make_dual(ak.tensor(x0), ak.tensor(t0)))
            outs.append(fwad.unpack_dual(out).tangent.numpy())
        outs.append(ak.func.grad(lambda x: fn(x).sum())(ak.tensor(x0)).numpy())
    assert_same(outs[2:], outs[:2])


def test_checkpoint_traced_grad_recomputes_the_segment():
    def fwd_bwd(x):
        x = x.detach().requires_grad_(True)
        y = checkpoint(lambda t: t.sin().exp(), x).sum()
        return ak.autograd.grad(y, x)

    g = ak.trace(fwd_bwd, ak.randn(3, dtype=F64))
    ops = [g.nx.nodes[n]["op"] for n in g.op_nodes]
    assert ops.count(Sin) == 2  # the forward, and its recomputation in the backward
    x = ak.randn(3, dtype=F64)
    np.testing.assert_allclose(g(x)[0].numpy(), (x.cos() * x.sin().exp()).numpy())


# ================================================================ recomputation, memory
@pytest.mark.parametrize("use_reentrant", STYLES)
def test_checkpoint_segment_runs_twice_only_when_backward_runs(use_reentrant):
    seg = Counter()
    x, w = leaf(RNG.standard_normal(5)), leaf(RNG.standard_normal(5))
    y = checkpoint(seg, x, w, use_reentrant=use_reentrant)
    assert seg.calls == 1
    y.sum().backward()
    assert seg.calls == 2
    with ak.no_grad():
        checkpoint(seg, x, w, use_reentrant=use_reentrant)
    assert seg.calls == 3


def test_checkpoint_retain_graph_reruns_once():
    seg = Counter()
    x, w = leaf(RNG.standard_normal(5)), leaf(RNG.standard_normal(5))
    y = checkpoint(seg, x, w).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    assert seg.calls == 2
    np.testing.assert_array_equal(x.grad.numpy(), 2 * first)


@pytest.mark.parametrize("use_reentrant", [None] + STYLES)
def test_checkpoint_keeps_no_intermediate(use_reentrant):
    arrays = []

    def seg(x):
        y = x
        for _ in range(6):
            y = (y * 1.1).tanh()
            arrays.append(weakref.ref(y._data))
        return y

    x = leaf(RNG.standard_normal(8))
    out = seg(x) if use_reentrant is None else checkpoint(seg, x, use_reentrant=use_reentrant)
    gc.collect()
    alive = sum(r() is not None for r in arrays[:-1])  # the last one is the output
    if use_reentrant is None:
        assert alive == 5  # plain: tanh saves its output, for the backward
    else:
        assert alive == 0
    out.sum().backward()


def _peak(step):
    gc.collect()
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("use_reentrant", STYLES)
def test_checkpoint_lowers_peak_memory(use_reentrant):
    x0 = RNG.standard_normal(20_000)

    def step(every):
        x = leaf(x0)
        y = x
        for _ in range(10):  # plain keeps every block's saved values, checkpointing one's
            y = checkpoint(block, y, use_reentrant=use_reentrant) if every else block(y)
        y.sum().backward()

    plain, checkpointed = _peak(lambda: step(False)), _peak(lambda: step(True))
    assert checkpointed < 0.5 * plain, (plain, checkpointed)


# ================================================================ checkpoint: errors
def test_checkpoint_determinism_check():
    state = {"n": 3}

    def seg(x):
        state["n"] += 1
        return (x[:state["n"]] * 2).sin().sum()

    y = checkpoint(seg, leaf(RNG.standard_normal(8)))
    with pytest.raises(RuntimeError, match="recomputation .* differs"):
        y.backward()
    with pytest.raises(ValueError, match="determinism_check"):
        checkpoint(seg, leaf([1.0]), determinism_check="strict")


def test_checkpoint_preserves_rng_state():
    def seg(x):
        return x * ak.rand(*x.shape, dtype=F64)

    for preserve in (True, False):
        ak.manual_seed(0)
        x = leaf(np.ones(16))
        y = checkpoint(seg, x, preserve_rng_state=preserve)
        mask = y.detach().numpy().copy()
        y.sum().backward()
        assert np.array_equal(x.grad.numpy(), mask) == preserve


def test_checkpoint_input_modified_in_place_is_caught():
    x = leaf(RNG.standard_normal(4))
    a = x * 1
    y = checkpoint(lambda t: t.sin().exp(), a)
    a.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ================================================================ remat
CHAIN_STEPS = (lambda y: y.sin(), lambda y: y * 1.01, lambda y: y.tanh(), lambda y: y + 0.5)


def deep_chain(n_ops):
    def f(x):
        for i in range(n_ops):
            x = CHAIN_STEPS[i % 4](x)
        return x.sum()
    return f


def snapshot(g):
    return str(g), sorted((u, v, k, d["pos"], d["out"])
                          for u, v, k, d in g.nx.edges(keys=True, data=True))


def checked_remat(g, **kwargs):
    before = snapshot(g)
    h = remat(g, **kwargs)
    assert snapshot(g) == before, "remat changed its input graph"
    assert h.validate()
    return h


def assert_same_results(g, h, args):
    for a, b in zip(g(*args), h(*args)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(b.numpy(), a.numpy())


def recomputed(h):
    """{duplicate: the forward node it recomputes}."""
    return {n: d["recomputes"] for n, d in h.nx.nodes(data=True) if "recomputes" in d}


def assert_recomputed_values_not_read_by_backward(h, n_outputs=None):
    """Backward nodes: op nodes some output depends on, other than the forward nodes
    (dead nodes, which remat leaves alone, are neither)."""
    forward = set(forward_nodes(h, n_outputs))
    live = set().union(*(nx.ancestors(h.nx, out) for out in h.outputs))
    for dup, orig in recomputed(h).items():
        assert dup not in forward and orig in forward
        assert h.nx.nodes[dup]["op"] is h.nx.nodes[orig]["op"]
        readers = set(h.nx.successors(orig)) & live
        assert readers <= forward, f"backward nodes {readers - forward} still read {orig}"


def _freeing_interpreter():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "checkpoint_memory.py"
    spec = importlib.util.spec_from_file_location("checkpoint_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_freeing


def test_remat_deep_chain():
    n = 60
    g = vjp(ak.trace(deep_chain(n), ak.randn(50, dtype=F64)))
    h = checked_remat(g)
    args = (ak.randn(50, dtype=F64), ak.tensor(1.0, dtype=F64))
    assert_same_results(g, h, args)
    assert len(h.op_nodes) > len(g.op_nodes)
    assert_recomputed_values_not_read_by_backward(h)
    run_freeing = _freeing_interpreter()
    plain, rematted = run_freeing(g, list(args))[1], run_freeing(h, list(args))[1]
    assert rematted < 0.5 * plain, (plain, rematted)


@pytest.mark.parametrize("max_depth", [1, 3, 10 ** 6])
def test_remat_max_depth_bounds_each_recomputation(max_depth):
    g = vjp(ak.trace(deep_chain(30), ak.randn(7, dtype=F64)))
    h = checked_remat(g, max_depth=max_depth)
    dups = recomputed(h)
    assert dups
    for d in dups:  # the chain of duplicates that ends at d is at most max_depth long
        sub = h.nx.subgraph(set(dups) & (nx.ancestors(h.nx, d) | {d}))
        assert nx.dag_longest_path_length(sub) + 1 <= max_depth
    assert_same_results(g, h, (ak.randn(7, dtype=F64), ak.tensor(2.0, dtype=F64)))
    assert_recomputed_values_not_read_by_backward(h)


def test_remat_default_policy_keeps_matmul_and_reductions():
    def f(x, w):
        y = (x @ w).sin()
        z = y.sum(1).exp()
        return (z * y.mean()).tanh()

    g = vjp(ak.trace(f, ak.randn(3, 4, dtype=F64), ak.randn(4, 5, dtype=F64)))
    h = checked_remat(g, max_depth=100)
    ops = {h.nx.nodes[d]["op"] for d in recomputed(h)}
    assert ops and not any(issubclass(op, (Matmul, Sum)) for op in ops)
    args = (ak.randn(3, 4, dtype=F64), ak.randn(4, 5, dtype=F64), ak.randn(3, dtype=F64))
    assert_same_results(g, h, args)
    assert_recomputed_values_not_read_by_backward(h)


def test_remat_policy_callable():
    g = vjp(ak.trace(deep_chain(12), ak.randn(4, dtype=F64)))
    assert str(checked_remat(g, policy=lambda data: False)) == str(g)
    h = checked_remat(g, policy=lambda data: data["op"] is Tanh, max_depth=100)
    assert {h.nx.nodes[d]["op"] for d in recomputed(h)} == {Tanh}
    assert_same_results(g, h, (ak.randn(4, dtype=F64), ak.tensor(1.0, dtype=F64)))


def test_remat_forward_outputs_of_a_vjp_graph():
    def f(x, w):
        return (x * w).sin(), (x + w).exp().sum()

    g = vjp(ak.trace(f, ak.randn(3, dtype=F64), ak.randn(3, dtype=F64)))
    assert count_forward_outputs(g) == 2
    h = checked_remat(g, n_outputs=2)
    args = [ak.randn(3, dtype=F64) for _ in range(3)] + [ak.tensor(1.0, dtype=F64)]
    assert_same_results(g, h, args)
    assert_recomputed_values_not_read_by_backward(h, 2)
    with pytest.raises(ValueError, match="n_outputs"):
        remat(ak.trace(lambda x: x.sin(), ak.randn(3)))


def test_remat_leaves_graphs_with_in_place_ops_alone():
    def f(x):
        y = x.sin()
        y.add_(1.0)
        return y.exp().sum()

    g = ak.trace(f, ak.randn(3, dtype=F64))
    assert snapshot(checked_remat(g, n_outputs=1)) == snapshot(g)


UNARY = [lambda a: a.sin(), lambda a: a.tanh(), lambda a: a.exp(), lambda a: a * 0.7,
         lambda a: a.sigmoid(), lambda a: a * a.sum(-1, keepdim=True)]
BINARY = [lambda a, b: a * b, lambda a, b: a + b, lambda a, b: a - b,
          lambda a, b: a @ b.transpose(0, 1), lambda a, b: (a * a + b * b).sqrt()]
STEP = st.tuples(st.integers(0, 1), st.integers(0, 5), st.integers(0, 99), st.integers(0, 99))


def program(steps, n_outputs):
    """A random program over a pool of values (each step reads one or two of them)."""
    def f(x, y):
        pool = [x, y]
        for binary, op, i, j in steps:
            a, b = pool[i % len(pool)], pool[j % len(pool)]
            pool.append(BINARY[op % len(BINARY)](a, b) if binary else UNARY[op](a))
        return tuple(pool[-k] for k in range(1, n_outputs + 1))
    return f


@given(steps=st.lists(STEP, min_size=1, max_size=12), n_outputs=st.integers(1, 2),
       max_depth=st.sampled_from([None, 1, 2, 100]))
def test_remat_random_programs(steps, n_outputs, max_depth):
    shape = (3, 3)
    g = vjp(ak.trace(program(steps, n_outputs), ak.zeros(*shape, dtype=F64),
                     ak.zeros(*shape, dtype=F64)))
    h = checked_remat(g, max_depth=max_depth, n_outputs=n_outputs)
    rng = np.random.default_rng(len(steps))
    args = [ak.tensor(rng.uniform(0.1, 0.9, shape)) for _ in range(2)]
    args += [ak.tensor(rng.standard_normal(g.specs_of(n)[0].shape))
             for n in g.inputs[2:]]
    assert_same_results(g, h, args)
    assert_recomputed_values_not_read_by_backward(h, n_outputs)
