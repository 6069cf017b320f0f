"""What the jit runs natively: reductions fused with their producers, views as strides,
matmul through BLAS, element moves with index tables, decompositions, and whole graphs
as one native call. Every case is checked against eager mode (numpy)."""
import os
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adkit as ak
from adkit.codegen import pool
import adkit.func as F
import adkit.nn.functional as NF
from adkit.ir import passes
from adkit.ops._families import ArrayFunction
from adkit.ops._helpers import moves_by_forward


def rand(*shape, dtype=np.float64, seed=0):
    return ak.tensor(np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype))


def close(got, want, dtype=np.float64):
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol,
                               atol=rtol * 10)


def step_kinds(jitted, *args):
    return [type(s).__name__ for s in jitted.compile(*args).steps]


def numpy_ops(jitted, *args):
    return [s.op.__name__ for s in jitted.compile(*args).steps
            if type(s).__name__ == "NumpyStep"]


# ----------------------------------------------------------------------------- reductions
REDUCTIONS = [
    ("sum", lambda x, d, k: x.sum(d, keepdim=k)),
    ("mean", lambda x, d, k: x.mean(d, keepdim=k)),
    ("amax", lambda x, d, k: x.amax(d, keepdim=k)),
    ("amin", lambda x, d, k: x.amin(d, keepdim=k)),
    ("prod", lambda x, d, k: (x * 0.3 + 1.0).prod(d, keepdim=k)),
]


@pytest.mark.parametrize("name,reduce", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, (0, 2), (0, 1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_reductions_fuse_with_their_producers(name, reduce, dim, keepdim, dtype):
    f = lambda x, y: reduce((x * y).exp() - x, dim, keepdim)  # noqa: E731
    x, y = rand(3, 5, 7, dtype=dtype), rand(5, 1, dtype=dtype, seed=1)
    jitted = ak.jit(f)
    close(jitted(x, y), f(x, y), dtype)
    kernel, = jitted.compile(x, y).kernels  # producers and the reduction: one loop nest
    assert name.replace("amax", "max").replace("amin", "min").replace("mean", "sum") \
        in repr(kernel)
    assert step_kinds(jitted, x, y) == ["SegmentStep"]


def test_sum_to_size_and_a_reduction_read_elsewhere():
    f = lambda x, y: ((x * y).sum_to_size(5, 1), (x * y).sum(0), x * y)  # noqa: E731
    x, y = rand(4, 5, 3), rand(5, 1, seed=1)
    got, want = ak.jit(f)(x, y), f(x, y)
    for g, w in zip(got, want):
        close(g, w)


def test_max_and_min_propagate_nan_and_handle_infinities():
    a = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0]])
    x = ak.tensor(a)
    for f in (lambda x: x.amax(1), lambda x: x.amin(1), lambda x: x.amax(0),
              lambda x: ak.logsumexp(x, 1), lambda x: ak.logsumexp(x, 0)):
        with np.errstate(all="ignore"):
            close(ak.jit(f)(x), f(x))


@pytest.mark.parametrize("shape,dim", [((1001, 1003), 1), ((1001, 1003), 0),
                                       ((1_000_003,), None), ((3, 700, 501), (0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_large_reductions(shape, dim, dtype):
    f = lambda x: (x.sin() * 2).sum(dim)  # noqa: E731
    x = rand(*shape, dtype=dtype)
    got, want = ak.jit(f)(x), f(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(),
                               rtol=1e-4 if dtype == np.float32 else 1e-10,
                               atol=1e-2 if dtype == np.float32 else 1e-8)


def test_threads_split_only_where_no_two_write_one_element():
    x = rand(1001, 1003)
    workers = {}
    for dim in (0, 1, None):
        compiled = ak.jit(lambda x: x.exp().sum(dim)).compile(x)
        workers[dim] = max(c.workers for calls in compiled.segment_calls for c in calls)
    cpus = pool.threads()  # the pool's workers and the caller
    assert workers[1] == cpus and workers[None] == cpus  # rows; whole sum: partials
    assert workers[0] == 1  # each output column gathers from every row


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       data=st.data(), keepdim=st.booleans())
def test_reductions_match_numpy_property(shape, data, keepdim):
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1))
    dim = tuple(dims)
    x = rand(*shape)
    f = lambda x: (x * x + 1.0).log().sum(dim, keepdim=keepdim)  # noqa: E731
    close(ak.jit(f)(x), f(x))


# ----------------------------------------------------------------------------- views
def test_views_are_strides_not_copies():
    f = lambda x: ((x.t() * 2)[1:, ::2].unsqueeze(0) + 1).sum(1)  # noqa: E731
    x = rand(6, 5)
    jitted = ak.jit(f)
    close(jitted(x), f(x))
    assert step_kinds(jitted, x) == ["SegmentStep"]  # transpose, slices: no steps


def test_views_of_non_contiguous_inputs_and_outputs_that_are_views():
    base = rand(6, 8)
    x = base.t()[::2]  # non-contiguous input
    f = lambda x: (x[1:].t() * 3, x.t()[0])  # noqa: E731
    got, want = ak.jit(f)(x), f(x)
    for g, w in zip(got, want):
        close(g, w)
        assert not np.shares_memory(g.numpy(), base.numpy())


def test_split_outputs_are_views_native_code_reads():
    f = lambda x: [a.exp() for a in x.split([2, 3], 1)]  # noqa: E731
    x = rand(4, 5)
    jitted = ak.jit(f)
    for g, w in zip(jitted(x), f(x)):
        close(g, w)
    assert numpy_ops(jitted, x) == []


# ----------------------------------------------------------------------------- matmul
K = 70  # > fuse.CONTRACT_SMALL_MAX_K: BLAS; shorter sums of small products are computed
# inside kernels
MATMULS = [
    ("mm", (3, K), (K, 5), lambda a, b: a @ b),
    ("transposed", (K, 3), (5, K), lambda a, b: a.t() @ b.t()),
    ("batched", (2, 3, K), (2, K, 5), lambda a, b: a @ b),
    ("broadcast-batch", (3, K), (6, K, 2), lambda a, b: a @ b),
    ("broadcast-1", (2, 1, 3, K), (5, K, 2), lambda a, b: a @ b),
    ("mv", (3, K), (K,), lambda a, b: a @ b),
    ("vm", (K,), (K, 5), lambda a, b: a @ b),
    ("dot", (K,), (K,), lambda a, b: a @ b),
    ("sliced", (6, 2 * K + 8), (K + 4, 3), lambda a, b: a[::2, 1:K + 1] @ b[2:K + 2]),
]


@pytest.mark.parametrize("name,sa,sb,f", MATMULS, ids=[m[0] for m in MATMULS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_matmul_calls_blas_in_place(name, sa, sb, f, dtype):
    a, b = rand(*sa, dtype=dtype), rand(*sb, dtype=dtype, seed=1)
    jitted = ak.jit(lambda a, b: f(a, b) * 2)
    close(jitted(a, b), f(a, b) * 2, dtype)
    assert numpy_ops(jitted, a, b) == []
    assert "cblas_" in jitted.compile(a, b).llvm_ir or \
        jitted.compile(a, b).module.from_cache


def test_dot_and_its_gradient_call_blas():
    a, b = rand(K), rand(K, seed=1)
    for f in (lambda a, b: ak.dot(a, b), lambda a, b: F.grad(lambda a: ak.dot(a, b) ** 2)(a)):
        jitted = ak.jit(f)
        close(jitted(a, b), f(a, b))
        assert numpy_ops(jitted, a, b) == []


CONTRACTIONS = [
    ("mm-then-exp", (7, 3), (3, 9), lambda a, b: (a @ b).exp()),
    ("transposed", (3, 7), (3, 9), lambda a, b: a.t() @ b),
    ("batched-sum", (4, 6, 5), (4, 5, 3), lambda a, b: (a @ b).sum(1)),
    ("broadcast-left", (100, 10), (5, 10, 10), lambda a, b: ((a @ b - 1.0) ** 2).sum(2)),
    ("broadcast-right", (4, 6, 5), (5, 3), lambda a, b: a @ b + 1.0),
    ("k1", (4, 6, 1), (4, 1, 2), lambda a, b: a @ b),
    ("k16", (9, 16), (16, 11), lambda a, b: a @ b),
    ("sliced", (6, 12), (8, 3), lambda a, b: a[::2, 1:5] @ b[2:6]),
    ("k32-small-product", (2, 32), (32, 16), lambda a, b: a @ b),
    ("vector-matrix", (32,), (32, 32), lambda a, b: (a @ b).tanh()),
    ("matrix-vector", (32, 32), (32,), lambda a, b: (a @ b).tanh()),
    ("vector-batched-matrix", (8,), (3, 8, 5), lambda a, b: a @ b + 1.0),
    ("batched-matrix-vector", (3, 5, 8), (8,), lambda a, b: a @ b + 1.0),
    ("vector-strided-matrix", (7,), (9, 14), lambda a, b: a @ b[1:8, ::2].t().t()),
    # inner dims of several vectors: unrolled trips sharing the row's loads, then
    # single vectors, then a scalar tail
    ("unrolled-with-tail", (3, 8), (8, 53), lambda a, b: (a @ b).tanh() * 2.0),
    ("unrolled-row-sums", (5, 12), (12, 41), lambda a, b: (a @ b).exp().sum(-1)),
    ("unrolled-select", (4, 6), (6, 70), lambda a, b: ak.where(a @ b > 0, a @ b, -1.0)),
    ("unrolled-vector-matrix", (16,), (16, 99), lambda a, b: (a @ b).sin()),
]


@pytest.mark.parametrize("name,sa,sb,f", CONTRACTIONS, ids=[c[0] for c in CONTRACTIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_short_matmuls_run_inside_kernels(name, sa, sb, f, dtype):
    a, b = rand(*sa, dtype=dtype), rand(*sb, dtype=dtype, seed=1)
    jitted = ak.jit(f)
    close(jitted(a, b), f(a, b), dtype)
    compiled = jitted.compile(a, b)
    assert any("matmul[K=" in repr(k) for k in compiled.kernels)
    assert not any(type(c).__name__ == "MatmulCall"
                   for calls in compiled.segment_calls for c in calls)


def test_kernels_with_matmul_steps_unroll_their_vector_loop():
    """A 32-wide vector-matrix product takes its 32 outputs in one trip of four vectors
    (sharing the vector's loads); elementwise kernels keep one vector per trip."""
    a, b = rand(32), rand(32, 32, seed=1)
    (product,) = ak.jit(lambda a, b: (a @ b).tanh()).compile(a, b).kernels
    (plain,) = ak.jit(lambda a, b: (a * b).tanh()).compile(b, b).kernels
    assert product.vectors_per_trip(8) == 4 and product.vectors_per_trip(16) == 2
    assert plain.vectors_per_trip(8) == 1


def test_long_sums_of_big_products_call_blas():
    a, b = rand(64, 40), rand(40, 64, seed=1)  # 40 terms, but 164k multiply-adds
    jitted = ak.jit(lambda a, b: (a @ b).exp())
    close(jitted(a, b), (a @ b).exp())
    assert not any("matmul[K=" in repr(k) for k in jitted.compile(a, b).kernels)


def test_short_matmuls_of_expanded_operands():
    x, w = rand(5, 1), rand(4, 3, seed=1)
    for f in (lambda x, w: (x.expand(5, 4) @ w).exp(),
              lambda x, w: x.expand(5, 4) @ w + x.expand(5, 3),
              lambda x, w: x.expand(2, 5, 4) @ w.expand(2, 4, 3),
              lambda x, w: x[0, 0].expand(5, 4) @ w):
        jitted = ak.jit(f)
        close(jitted(x, w), f(x, w))
        assert any("matmul[K=4]" in repr(k) for k in jitted.compile(x, w).kernels)


def test_matmul_numpy_keeps_what_blas_cannot_read():
    a = ak.tensor(np.arange(12).reshape(3, 4))  # integers
    b = ak.tensor(np.arange(8).reshape(4, 2))
    np.testing.assert_array_equal(ak.jit(lambda a, b: a @ b)(a, b).numpy(),
                                  a.numpy() @ b.numpy())
    e = rand(3, 0)  # an empty contraction: zeros
    close(ak.jit(lambda a, b: a @ b)(e, rand(0, 2)), np.zeros((3, 2)))


# ----------------------------------------------------------------------------- moves
MOVES = [
    ("cat", lambda x: ak.cat([x.exp(), x[:, :2] * 2], 1)),
    ("gather", lambda x: x[:, np.array([[0, 2], [4, 4]])].sin()),
    ("copying-reshape", lambda x: x.t().reshape(20) + 1),
    ("flip", lambda x: x.flip(0) * 3),
    ("grad-of-gather", F.grad(lambda x: (x[:, np.array([[0, 2], [4, 4]])] ** 2).sum())),
    ("grad-of-slice", F.grad(lambda x: (x[1:, ::2] ** 3).sum())),
]


@pytest.mark.parametrize("name,f", MOVES, ids=[m[0] for m in MOVES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_element_moves_run_natively(name, f, dtype):
    x = rand(4, 5, dtype=dtype)
    jitted = ak.jit(f)
    close(jitted(x), f(x), dtype)
    assert step_kinds(jitted, x) == ["SegmentStep"]


# ----------------------------------------------------------------------------- decompose
def test_decompose_inlines_logsumexp_as_primitives():
    f = lambda x: ak.logsumexp(x * 2, 1)  # noqa: E731
    x = rand(5, 7)
    graph = passes.decompose(ak.trace(f, x))
    ops = {getattr(graph.nx.nodes[n]["op"], "public_name", None) for n in graph.op_nodes}
    assert {"amax", "exp", "sum", "log"} <= ops and "logsumexp" not in ops
    graph.validate()
    close(graph(x), f(x))


def test_a_whole_gradient_is_one_native_call():
    def f(w, x):
        logits = x @ w
        return (ak.logsumexp(logits, 1) - logits[:, 0]).mean()
    w, x = rand(4, 3), rand(16, 4, seed=1)
    jitted = ak.jit(F.grad_and_value(f))
    (g,), v = (jitted(w, x)[0],), jitted(w, x)[1]
    want_g, want_v = F.grad_and_value(f)(w, x)
    close(g, want_g)
    close(v, want_v)
    assert step_kinds(jitted, w, x) == ["SegmentStep"]


# ----------------------------------------------------------------------------- in place
def _writes_in_place(x):
    a = x * 2  # read before the write below: must see the old values
    x.add_(1)
    b = x * 3
    x[0].mul_(10)  # a write through a view: x.sum() must see it
    return a + b + x.sum()


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_in_place_writes_keep_program_order(layout):
    def make():
        a = np.arange(6.0).reshape(2, 3)
        return ak.tensor(a.copy()) if layout == "contiguous" else \
            ak.tensor(a.T.copy()).t()
    x_eager, x_jit = make(), make()
    want = _writes_in_place(x_eager)
    got = ak.jit(_writes_in_place)(x_jit)
    close(got, want)
    close(x_jit, x_eager)  # the caller's tensor is written as in eager mode
    graph = ak.jit(_writes_in_place).lower(make())
    assert "fused_kernel" not in str(graph)  # fusion would move `x * 2` past add_


# ----------------------------------------------------------------------------- bools
BOOL_CASES = [
    ("where", lambda x, y, m: ak.where(x > y, x, y * 2)),
    ("mask-times", lambda x, y, m: (x > 0).to(x.dtype) * y),
    ("bool-out", lambda x, y, m: (x > 0) & (y < 0.5)),
    ("bool-in", lambda x, y, m: ak.where(m, x.exp(), 0.0) + m.to(x.dtype)),
    ("nan-tests", lambda x, y, m: ak.logical_not(x / y > 1) | ak.isnan(x / (y - y))),
    ("ne-nan", lambda x, y, m: (x / (x - x)) != (x / (x - x))),
    ("sign", lambda x, y, m: x.sign() * y),
    ("relu-grad", lambda x, y, m: F.grad(lambda x: ak.relu(x * y).sum())(x)),
    ("max-grad", lambda x, y, m: F.grad(lambda x: ak.maximum(x, y).sum())(x)),
    ("clamp-grad", lambda x, y, m: F.grad(lambda x: x.clamp(-0.5, 0.5).sum())(x)),
    ("amax-grad", lambda x, y, m: F.grad(lambda x: x.amax(1).sum())(x)),
]


@pytest.mark.parametrize("name,f", BOOL_CASES, ids=[c[0] for c in BOOL_CASES])
@pytest.mark.parametrize("n", [3, 13, 1000])  # scalar tail only, both, mostly vectors
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_bools_inside_kernels(name, f, n, dtype):
    x, y = rand(4, n, dtype=dtype), rand(n, dtype=dtype, seed=1)
    m = ak.tensor(np.random.default_rng(2).uniform(size=(4, n)) > 0.5)
    jitted = ak.jit(f)
    with np.errstate(all="ignore"):
        got, want = jitted(x, y, m), f(x, y, m)
    assert got.dtype == want.dtype
    if got.dtype == ak.bool:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    else:  # exp may differ from numpy's in the last bit
        close(got, want, dtype)
    assert step_kinds(jitted, x, y, m) == ["SegmentStep"]

DECOMPOSED = [
    ("logsumexp", lambda x: ak.logsumexp(x, 1)),
    ("softmax", lambda x: NF.softmax(x, 1)),
    ("log_softmax", lambda x: NF.log_softmax(x, 0)),
    ("var", lambda x: x.var(1)),
    ("var-all", lambda x: x.var()),
    ("std-keepdim", lambda x: x.std(0, keepdim=True)),
    ("std-correction-0", lambda x: x.std(1, correction=0)),
    ("norm", lambda x: x.norm()),
    ("norm-1", lambda x: x.norm(p=1, dim=1)),
    ("cross-entropy-grad", F.grad(lambda x: NF.cross_entropy(
        x, ak.tensor(np.arange(x.shape[0]) % x.shape[1])))),
    ("std-grad", F.grad(lambda x: x.std(1).sum())),
]


@pytest.mark.parametrize("name,f", DECOMPOSED, ids=[c[0] for c in DECOMPOSED])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_decomposed_ops_run_natively(name, f, dtype):
    x = rand(6, 7, dtype=dtype)
    jitted = ak.jit(f)
    close(jitted(x), f(x), dtype)
    assert step_kinds(jitted, x) == ["SegmentStep"]


EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
           ("ij,ij->i", [(3, 4), (3, 4)]), ("i,j->ij", [(3,), (4,)]),
           ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]), ("ij->", [(3, 4)]),
           ("ijk,kl->lji", [(2, 3, 4), (4, 5)]), ("ik,jk->", [(3, 4), (5, 4)]),
           ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), (",i,j->ij", [(), (3,), (4,)]),
           ("ij,jk->ik", [(3, 40), (40, 5)])]  # the last one through BLAS


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_runs_natively(equation, shapes):
    xs = [rand(*s, seed=i) for i, s in enumerate(shapes)]
    f = lambda *xs: ak.einsum(equation, *xs)  # noqa: E731
    g = F.grad(lambda *xs: (ak.einsum(equation, *xs) ** 2).sum(),
               argnums=tuple(range(len(xs))))
    for h in (f, g):
        jitted = ak.jit(h)
        got, want = jitted(*xs), h(*xs)
        for a, b in zip(got if isinstance(got, tuple) else [got],
                        want if isinstance(want, tuple) else [want]):
            close(a, b)
        assert numpy_ops(jitted, *xs) == []
    diagonal = rand(3, 3)  # a repeated label: numpy's einsum
    assert numpy_ops(ak.jit(lambda y: ak.einsum("ii->i", y)), diagonal) == ["Einsum"]


def test_decompositions_that_do_not_apply_leave_the_node():
    x = rand(1, 3)
    for f in (lambda x: x.var(0),  # n - correction = 0: numpy warns, the node stays
              lambda x: x.norm(p=3), lambda x: NF.softmax(x[0, 0], 0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = ak.trace(f, x)
            graph = passes.decompose(traced)
            assert len(graph.op_nodes) == len(traced.op_nodes)
            with np.errstate(all="ignore"):
                close(ak.jit(f)(x), f(x))


def test_softmax_of_rows_with_infinities_matches_eager():
    x = ak.tensor(np.array([[-np.inf, -np.inf], [np.inf, 1.0], [0.0, -np.inf]]))
    for f in (lambda x: NF.softmax(x, 1), lambda x: NF.log_softmax(x, 1)):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(ak.jit(f)(x).numpy(), f(x).numpy())


def test_threads_only_where_the_cost_model_says_one_thread_is_slower():
    from adkit.codegen import plan
    cpus = pool.threads()

    def workers(f, n):
        compiled = ak.jit(f).compile(rand(n))
        return max(c.workers for calls in compiled.segment_calls for c in calls)
    cheap = lambda x: x * 2.0 + 1.0  # noqa: E731
    costly = lambda x: (x.tanh().sin() * 0.5 + x).exp()  # noqa: E731
    assert workers(cheap, 1 << 12) == 1  # the pool's call costs more than the loop
    assert workers(costly, 1 << 10) == 1
    assert workers(costly, 1 << 16) == cpus
    assert workers(cheap, 1 << 18) == cpus
    kernel = ak.jit(costly).compile(rand(1000)).kernels[0]
    # tanh, sin and exp cost their classes' native_cost; * and + plain steps
    from adkit.ops.unary import Exp, Sin, Tanh
    assert plan.estimated_ns(kernel) == pytest.approx(1000 * (
        plan.NS_PER_ELEMENT + Tanh.native_cost + Sin.native_cost + 2 * plan.NS_PER_STEP +
        Exp.native_cost))


# ----------------------------------------------------------------------------- random programs
# Each instruction makes a new [n, n] value from earlier ones (picked by index), with
# bounded functions so that no value overflows; every kind of native node appears:
# elementwise ops, bools, reductions broadcast back, views, short matmuls, moves.
N = 5
INSTRUCTIONS = {
    "tanh": lambda a, b: a.tanh(),
    "sin": lambda a, b: a.sin(),
    "sigmoid": lambda a, b: a.sigmoid(),
    "mul": lambda a, b: a * b,
    "add-scaled": lambda a, b: 0.5 * a + b * 0.25,
    "where": lambda a, b: ak.where(a > b, a, -b),
    "relu": lambda a, b: ak.relu(a - 0.1),
    "row-sum": lambda a, b: a.sum(1, keepdim=True) * 0.2 + b,
    "col-max": lambda a, b: a.amax(0, keepdim=True) - b,
    "mean-all": lambda a, b: a - a.mean(),
    "transpose": lambda a, b: a.t() + b,
    "flip": lambda a, b: a.flip(0),
    "slice-cat": lambda a, b: ak.cat([a[:, 2:], b[:, :2]], 1),
    "matmul": lambda a, b: (a @ b) * (1.0 / N),
    "logsumexp": lambda a, b: ak.logsumexp(a, 1, keepdim=True) - b,
    "softmax": lambda a, b: NF.softmax(a, 0),
    "gather": lambda a, b: a[:, np.array([0, 2, 2, 4, 1])] * b,
    "reshape-t": lambda a, b: a.reshape(N * N).reshape(N, N).t() - b,
    "expand-row": lambda a, b: a[1:2].expand(N, N) * b,
    "var": lambda a, b: a.var(1, keepdim=True) * b,
    "norm": lambda a, b: a / (1.0 + a.norm()),
    "clamp": lambda a, b: a.clamp(-0.5, 0.5) + b,
    "split-swap": lambda a, b: ak.cat(list(reversed(a.split([2, N - 2], 1))), 1),
    "blas": lambda a, b: (a.repeat(1, 4) @ b.repeat(4, 1)) * (0.25 / N),  # K = 20
    "user-function": lambda a, b: _Square.apply(a) * 0.5,
}


class _Square(ak.autograd.Function):
    """A user Function: runs with numpy between native segments."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def _program(steps):
    def run(x, y):
        pool = [x, y]
        for name, i, j in steps:
            pool.append(INSTRUCTIONS[name](pool[i % len(pool)], pool[j % len(pool)]))
        return pool[-1], (pool[-1] * pool[-2]).sum()
    return run


@settings(max_examples=int(os.environ.get("ADKIT_RANDOM_PROGRAMS", 40)), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(INSTRUCTIONS)), st.integers(0, 20),
                          st.integers(0, 20)), min_size=1, max_size=8))
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_random_programs_and_their_gradients_match_eager(dtype, steps):
    f = _program(steps)
    x, y = rand(N, N, dtype=dtype), rand(N, N, dtype=dtype, seed=1)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    for g in (f, F.grad(lambda x, y: f(x, y)[1], argnums=(0, 1))):
        got, want = ak.jit(g)(x, y), g(x, y)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), **tol)


def test_big_element_moves_stay_with_numpy():
    """Index tables cost two int64 per element: above ~1M elements numpy copies."""
    x = rand(1500, 1000)
    index = np.arange(1000)[::-1] % 999
    jitted = ak.jit(lambda x: x[:, index] * 2)
    close(jitted(x), x[:, index] * 2)
    assert numpy_ops(jitted, x) == ["AdvancedIndex"]


@pytest.mark.parametrize("f", [lambda x: x.t().reshape(-1) * 2, lambda x: x.t().contiguous(),
                               lambda x: x[::2].clone() + 1,
                               lambda x: x.t().reshape(x.shape[0], -1)[1:3],
                               lambda x: x.flip((0, 1)), lambda x: x.t().flip(1) * 2,
                               lambda x: ak.cat([x[:, :3], x.t()[:3].t(), x], 1),
                               lambda x: ak.cat([x.t(), x.t()], 0)],
                         ids=["reshape", "contiguous", "clone", "reshape-slice", "flip",
                              "flip-transposed", "cat", "cat-transposed"])
@pytest.mark.parametrize("shape", [(1500, 1000), (7, 5)], ids=["big", "small"])
def test_copies_are_strided_copy_loops(f, shape):
    x = rand(*shape)
    jitted = ak.jit(f)
    np.testing.assert_array_equal(jitted(x).numpy(), f(x).numpy())
    assert numpy_ops(jitted, x) == []
    assert any("[copy]" in repr(k) for k in jitted.compile(x).kernels)


# ----------------------------------------------------------------------------- native rules
# What an op may compile to is said by its class (adkit/ops/_families.py lists the
# rules): a new op reaches native code without a line in codegen.
class _EveryOther(ArrayFunction):
    """y = x[::2] (a view: the default native_view rule is its forward)."""
    is_view = True

    @staticmethod
    def forward(x):
        return x[::2]

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


class _Roll(ArrayFunction):
    """y = x rolled by one along dim 0 (it only moves elements: index tables)."""
    native_moves = classmethod(moves_by_forward)

    @staticmethod
    def forward(x):
        return np.roll(x, 1, axis=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


def calls(jitted, *args):
    return [type(c).__name__ for calls in jitted.compile(*args).segment_calls for c in calls]


def test_a_new_op_lowers_by_the_rules_on_its_class():
    x = rand(6, 4)
    view = ak.jit(lambda t: _EveryOther.apply(t * 2).exp())
    close(view(x), (x * 2)[::2].exp())
    assert step_kinds(view, x) == ["SegmentStep"]
    assert calls(view, x) == ["KernelCall", "KernelCall"]  # the view itself costs nothing
    moved = ak.jit(lambda t: _Roll.apply(t * 2).exp())
    close(moved(x), np.exp(np.roll(x.numpy() * 2, 1, 0)))
    assert calls(moved, x) == ["KernelCall", "CopyCall", "KernelCall"]


def test_codegen_and_fusion_import_no_op_class():
    """Their tables come from the op classes' rules (ops.with_rule), not from imports."""
    import ast
    import importlib
    from pathlib import Path

    from adkit.autograd.function import Function
    root = Path(ak.__file__).parent
    for path in sorted((root / "codegen").glob("*.py")) + [root / "ir/passes/fuse.py",
                                                           root / "ir/passes/fusible.py",
                                                           root / "ir/passes/decompose.py"]:
        package = "adkit." + ".".join(path.relative_to(root).parent.parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                module = importlib.import_module("." * node.level + (node.module or ""),
                                                 package)
                for alias in node.names:
                    value = getattr(module, alias.name, None)
                    assert not (isinstance(value, type) and issubclass(value, Function) and
                                value.__module__.startswith("adkit.ops")), \
                        f"{path.name} imports op class {alias.name}"
    fuse = importlib.import_module("adkit.ir.passes.fuse")
    decompose = importlib.import_module("adkit.ir.passes.decompose")
    assert fuse.REDUCTIONS == ak.ops.with_rule("native_reduction")
    assert {c.__name__ for c in fuse.REDUCTIONS} == {
        "Sum", "Mean", "SumToSize", "Prod", "Amax", "Amin", "MaxOfAll", "MinOfAll"}
    assert {c.__name__ for c in decompose.DECOMPOSITIONS} == {
        "Einsum", "Logsumexp", "Softmax", "LogSoftmax", "Var", "Std", "Norm", "IndexScatter"}


PARTIAL_ROWS = [
    ("elementwise", lambda x, y: (x * y).exp() + x),
    ("row-sum", lambda x, y: (x * y).sin().sum(-1)),
    ("row-max", lambda x, y: (x - y).amax(-1)),
    ("row-prod", lambda x, y: (x * 0.5 + y).prod(-1)),
    ("column-sum", lambda x, y: (x * y).sum(0)),
    ("compare", lambda x, y: ak.where(x > y, x, y * 2.0)),
    ("bool-out", lambda x, y: x > y),
    ("row-broadcast", lambda x, y: x * y[:1]),
    ("short-matmul", lambda x, y: (x @ y.t()[:x.shape[-1]]).tanh()),
]


@pytest.mark.parametrize("name,f", PARTIAL_ROWS, ids=[c[0] for c in PARTIAL_ROWS])
@pytest.mark.parametrize("inner", [2, 3, 5, 7, 9, 13])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_rows_shorter_than_a_vector_are_masked_vectors(name, f, inner, dtype):
    """A row of a kernel whose length is known when compiling ends in one masked vector
    (codegen/masked.py) instead of scalar code: values equal eager for rows shorter
    than a vector and for the remainder after whole vectors, reductions along and
    across the rows included."""
    x, y = rand(37, inner, dtype=dtype), rand(37, inner, dtype=dtype, seed=1)
    jitted = ak.jit(f)
    got, want = jitted(x, y), f(x, y)
    if got.dtype == ak.bool:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    else:
        close(got, want, dtype)


@pytest.mark.parametrize("inner", [3, 13])
def test_a_short_row_is_one_masked_vector(inner, monkeypatch):
    """(37, inner) * (37, 1) cannot collapse to one dim: each row is whole vectors and
    then one masked vector (3 of 4 lanes; 8 then 5 of 8), no scalar loop."""
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")
    x, col = rand(37, inner), rand(37, 1, seed=1)
    jitted = ak.jit(lambda x, c: (x * c).sin())
    close(jitted(x, col), (x * col).sin())
    llvm_ir = jitted.compile(x, col).llvm_ir
    assert "llvm.masked.load" in llvm_ir and "llvm.masked.store" in llvm_ir
    assert "call double @\"sin\"" not in llvm_ir  # no scalar math: vectors only
