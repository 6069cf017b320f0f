"""What brings gradients near the cheap-gradient bound (issue 16): batched BLAS products
whose shared matrix lets BLAS do the batch as one product (program._fold_batch), the
batch laid out side by side for that (plan._side_by_side), the per-thread BLAS thread
count put back after each call, and values each fused reader recomputes instead of
one kernel storing them (fuse._recompute_cheap_reads)."""
import numpy as np
import pytest

import importlib

import adkit as ak
from adkit.codegen import program

RNG = np.random.default_rng(7)


def _gemm_calls(compiled):
    return [c for s in compiled.steps for c in getattr(s, "calls", ())
            if isinstance(c, program.MatmulCall)]


@pytest.mark.parametrize("a_shape, b_shape", [
    ((7, 5), (3, 5, 4)), ((3, 7, 5), (5, 4)), ((3, 7, 5), (3, 5, 4)), ((2, 3, 7, 5), (5, 4)),
    ((7, 5), (2, 3, 5, 4)), ((3, 1, 5), (3, 5, 4)), ((5,), (3, 5, 4)), ((3, 7, 5), (5,)),
    ((40, 30), (4, 30, 40)), ((4, 40, 30), (30, 40))])
def test_batched_products_equal_numpy(a_shape, b_shape):
    a, b = RNG.standard_normal(a_shape), RNG.standard_normal(b_shape)
    f = ak.jit(lambda x, y: (x * 1.5) @ (y * 0.5))
    np.testing.assert_allclose(f(ak.tensor(a), ak.tensor(b)).numpy(), (a * 1.5) @ (b * 0.5),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("transposed", [False, True])
def test_side_by_side_batch_is_one_product(transposed):
    """x @ (kernel-made q[k]) and x^T @ (kernel-made w[k]): rows of 80 doubles are laid
    out side by side, one gemm; the kernels reading the result read it strided. (An
    80 x 80 result is too big for a row product.)"""
    x, q = RNG.standard_normal((300, 80)), RNG.standard_normal((4, 80, 80))
    w = RNG.standard_normal((4, 300, 80))
    if transposed:
        f = ak.jit(lambda x, w: (x.transpose(0, 1) @ (w * 2.0)).tanh())
        args, want = (x, w), np.tanh(x.T @ (w * 2.0))
    else:
        f = ak.jit(lambda x, q: (x @ q.exp()).tanh().sum(2))
        args, want = (x, q), np.tanh(x @ np.exp(q)).sum(2)
    tensors = [ak.tensor(a) for a in args]
    compiled = f.compile(*tensors)
    call, = _gemm_calls(compiled)
    assert call.b.strides == (80, 320, 1) and call.out.strides == (80, 320, 1)
    for _ in range(2):  # the second call reuses the buffers
        np.testing.assert_allclose(f(*tensors).numpy(), want, rtol=1e-12, atol=1e-12)


def test_short_rows_and_returned_results_stay_contiguous():
    """Rows of 20 doubles are not worth it; a returned product must be contiguous. (K = 40:
    a [20, 20] right operand is multiplied inside the kernel, fusible.CONTRACT_NARROW_B.)"""
    x, q = RNG.standard_normal((50, 40)), RNG.standard_normal((3, 40, 20))
    f = ak.jit(lambda x, q: (x @ (q * 2.0)).tanh())
    call, = _gemm_calls(f.compile(ak.tensor(x), ak.tensor(q)))
    assert call.out.strides == (1000, 20, 1)
    x, q = RNG.standard_normal((50, 40)), RNG.standard_normal((3, 40, 40))
    g = ak.jit(lambda x, q: x @ (q * 2.0))
    call, = _gemm_calls(g.compile(ak.tensor(x), ak.tensor(q)))
    assert call.out.strides == (2000, 40, 1)
    np.testing.assert_allclose(g(ak.tensor(x), ak.tensor(q)).numpy(), x @ (q * 2.0),
                               rtol=1e-12)


def test_gradient_through_side_by_side_products():
    x, q = RNG.standard_normal((200, 40)), RNG.standard_normal((3, 40, 40))
    loss = lambda q, x: ((x @ q.exp()).tanh() ** 2).sum()  # noqa: E731
    got = ak.jit(ak.func.grad(loss))(ak.tensor(q), ak.tensor(x)).numpy()
    want = ak.func.grad(loss)(ak.tensor(q), ak.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("rows,batch", [(50, 3), (3000, 8)], ids=["one-thread", "on-threads"])
def test_blas_thread_count_is_restored(rows, batch):
    """Compiled products run BLAS on one thread and put the caller's count back, also
    when they are split over the pool's threads (OpenBLAS's count is process-wide:
    parts setting and restoring it raced, and could leave it at 1)."""
    import ctypes
    from adkit.codegen import runtime
    lib = ctypes.CDLL(runtime.blas_library())
    local = lib.openblas_set_num_threads_local
    local.restype, local.argtypes = ctypes.c_int, [ctypes.c_int]
    before = local(2)
    try:
        x, q = RNG.standard_normal((rows, 40)), RNG.standard_normal((batch, 40, 40))
        f = ak.jit(lambda x, q: (x @ q).tanh(), compile="eager")
        for _ in range(20):
            f(ak.tensor(x), ak.tensor(q))
            assert local(2) == 2
    finally:
        local(before)


def _kernel_outputs(graph):
    fk = importlib.import_module("adkit.ir.passes.fuse").FusedKernel
    return [graph.specs_of(n) for n in graph.op_nodes if graph.nx.nodes[n]["op"] is fk]


def test_value_of_a_product_is_recomputed_by_each_reader():
    """y = x @ q - c (x @ q from BLAS, c small) read by a sum of squares and by a second
    kernel that needs that sum (so it cannot join the first): each computes y from the
    product; none stores it. (K = 40: a narrower product runs inside the kernels, below.)"""
    x, q = RNG.standard_normal((500, 40)), RNG.standard_normal((3, 40, 20))
    c = RNG.standard_normal((3, 1, 20))

    def f(x, q, c):
        y = x @ q - c
        r = (y * y).sum(2, keepdim=True)
        return (y * (-r).exp()).sum(1)
    args = [ak.tensor(a) for a in (x, q, c)]
    shapes = [tuple(spec.shape) for specs in _kernel_outputs(ak.jit(f).lower(*args))
              for spec in specs]
    assert (3, 500, 20) not in shapes
    y = x @ q - c
    want = (y * np.exp(-(y * y).sum(2, keepdims=True))).sum(1)
    np.testing.assert_allclose(ak.jit(f)(*args).numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("rows, k, width, inline", [
    (20000, 20, 20, True), (12000, 32, 32, True), (6000, 20, 60, False),
    (20000, 40, 20, False), (500, 20, 20, False)])
def test_products_by_a_narrow_right_operand_run_inside_the_kernel(rows, k, width, inline):
    """GMM's x @ Q_k^T ([n, d] @ [K, d, d], d = 20): K multiply-adds per element inside
    the kernel reading the product, which is then never stored (BLAS wrote it, 80 MB at
    ADBench's large size); a wider or longer right operand, or a product of less than
    CONTRACT_NARROW_MIN_OUTPUT elements, stays BLAS's (fusible.CONTRACT_NARROW_*)."""
    x, q = RNG.standard_normal((rows, k)), RNG.standard_normal((3, k, width))
    t = RNG.standard_normal((3, 1, width))

    def f(x, q, t):
        return ((x @ q - t) ** 2).sum(2)
    args = [ak.tensor(a) for a in (x, q, t)]
    compiled = ak.jit(f).compile(*args)
    stored = [tuple(spec.shape) for specs in _kernel_outputs(compiled.graph)
              for spec in specs]
    assert (not _gemm_calls(compiled)) == inline
    assert (3, rows, width) not in stored
    np.testing.assert_allclose(ak.jit(f)(*args).numpy(), ((x @ q - t) ** 2).sum(2),
                               rtol=1e-12)


def test_numpy_reads_a_side_by_side_value_as_its_layout(monkeypatch):
    """A numpy step handed a value laid out side by side gets the strided view of it,
    not the whole buffer (the planner avoids this, the fetch does not rely on it)."""
    from adkit.codegen import plan
    monkeypatch.setattr(plan, "_read_in_place", lambda graph, n, gemm_ok: True)
    x, q = RNG.standard_normal((30, 40)), RNG.standard_normal((3, 40, 40))
    f = ak.jit(lambda x, q: ak.sort(x @ q.exp(), 1)[0] * 1.0)
    compiled = f.compile(ak.tensor(x), ak.tensor(q))
    call, = _gemm_calls(compiled)
    assert call.out.strides == (40, 120, 1)
    np.testing.assert_allclose(compiled(ak.tensor(x), ak.tensor(q)).numpy(),
                               np.sort(x @ np.exp(q), 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("a_shape, b_shape, transpose_a", [
    ((8, 200, 64), (8, 64, 64), False),    # a batch split over threads
    ((8, 200, 64), (64, 64), False),       # one product of 1600 rows, rows split
    ((64, 1000), (6, 1000, 64), True),     # x^T @ w[k] (x stored 1000 x 64): side by side
    ((1000, 64), (6, 64, 64), False)])     # x @ q[k]: side by side, rows split
def test_products_on_threads_equal_numpy(a_shape, b_shape, transpose_a):
    a, b = RNG.standard_normal(a_shape), RNG.standard_normal(b_shape)
    if transpose_a:  # `a` is passed stored as its transpose, the product reads a view
        f = ak.jit(lambda x, y: (x.transpose(0, 1) @ y.exp()).tanh())
        want = np.tanh(a @ np.exp(b))
        a = np.ascontiguousarray(a.T)
    else:
        f = ak.jit(lambda x, y: (x @ y.exp()).tanh())
        want = np.tanh(a @ np.exp(b))
    args = (ak.tensor(a), ak.tensor(b))
    assert count_of_fmas(a_shape, b_shape) >= program.GEMM_PARALLEL_MIN_FMAS
    for _ in range(2):
        np.testing.assert_allclose(f(*args).numpy(), want, rtol=1e-11, atol=1e-11)


def count_of_fmas(a_shape, b_shape):
    out = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    return int(np.prod(out)) * b_shape[-2]
