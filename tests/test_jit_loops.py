"""Native loops: jitted scans (and fori_loops) whose bodies lower completely run as one
LLVM loop; results equal the interpreted loop in every layout the loop must handle."""
import numpy as np
import pytest

import adkit as ak
from adkit.codegen.steps import SegmentStep

RNG = np.random.default_rng(3)


def t(*shape):
    return ak.tensor(RNG.standard_normal(shape))


def native(jitted, *args):
    """Whether the compiled program is all native (one segment, no numpy step)."""
    return all(isinstance(s, SegmentStep) for s in jitted.compile(*args).steps)


def close(got, want, tol=1e-12):
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_with_several_carries_ys_and_xs(n, reverse):
    w, xs, zs = t(4, 4), t(n, 4), t(n, 2, 4)

    def f(h, c, w, xs, zs):
        def step(carry, x):
            h, c = carry
            a, z = x
            h2 = (h @ w + a).tanh()
            c2 = c * 0.5 + (z * h2).sum(0)
            return (h2, c2), (h2 * 2, c2.sum())
        return ak.scan(step, (h, c), (xs, zs), reverse=reverse)
    args = (t(4), t(4), w, xs, zs)
    jf = ak.jit(f)
    close(jf(*args)[0], f(*args)[0])
    close(jf(*args)[1], f(*args)[1])
    assert native(jf, *args)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_gradients_of_a_native_loop_equal_the_interpreted_ones(n):
    w, xs = t(5, 5) * 0.4, t(n, 5)

    def loss(w, h, xs):
        h, ys = ak.scan(lambda h, x: ((h @ w).sin() + x, (h * x).sum()), h, xs)
        return h.sum() + (ys * ys).sum()
    grad = ak.func.grad(loss, argnums=(0, 1, 2))
    jg = ak.jit(grad)
    args = (w, t(5), xs)
    close(jg(*args), grad(*args), 1e-10)
    assert native(jg, *args)


def test_history_outputs_and_non_contiguous_xs():
    w = t(3, 3)
    xs = t(3, 6).t()  # a transposed view: its slices are not contiguous

    def f(h, w, xs):
        carry, ys = ak.scan(lambda h, x: ((h @ w).tanh() + x, h), h, xs)
        return carry, ys
    jf, h = ak.jit(f), t(3)
    close(jf(h, w, xs), f(h, w, xs))


def test_nested_native_loops():
    w = t(3, 3) * 0.5

    def f(h):
        def outer(h, _):
            inner = ak.fori_loop(0, 4, lambda i, v: (v @ w).tanh(), h)
            return inner * 0.9 + h * 0.1, inner.sum()
        return ak.scan(outer, h, None, length=6)
    h = t(3)
    jf = ak.jit(f)
    close(jf(h), f(h))
    g = ak.func.grad(lambda h: f(h)[1].sum())
    close(ak.jit(g)(h), g(h), 1e-10)


def test_a_body_numpy_must_run_falls_back_and_stays_right():
    def f(h, xs):  # sort has no native lowering: the loop runs its body with numpy
        return ak.scan(lambda h, x: (h.sort()[0] * 0.5 + x, None), h, xs)[0]
    args = (t(4), t(5, 4))
    jf = ak.jit(f)
    close(jf(*args), f(*args))
    assert not native(jf, *args)


def test_the_compiled_code_does_not_grow_with_the_trip_count():
    w = t(8, 8) * 0.3
    sizes = []
    for n in (10, 5000):
        g = ak.jit(ak.func.grad(lambda h: ak.fori_loop(0, n, lambda i, h: (h @ w).tanh(),
                                                       h).sum()))
        g(t(8))
        sizes.append(len(g.compile(t(8)).llvm_ir.splitlines()))
    assert sizes[0] == sizes[1]  # the same instructions (only constants differ)


@pytest.mark.parametrize("unroll", [1, 2, 3, 8])
def test_unrolled_native_loops_agree(unroll):
    w = t(4, 4) * 0.5

    def f(h, xs):
        return ak.scan(lambda h, x: ((h @ w).tanh() + x, h.sum()), h, xs, unroll=unroll)
    args = (t(4), t(7, 4))
    jf = ak.jit(f)
    close(jf(*args)[0], f(*args)[0])
    close(jf(*args)[1], f(*args)[1])
    assert native(jf, *args)
    n_lines = len(jf.compile(*args).llvm_ir.splitlines())
    assert unroll == 1 or n_lines > len(ak.jit(lambda h, xs: ak.scan(
        lambda h, x: ((h @ w).tanh() + x, h.sum()), h, xs)).compile(*args).llvm_ir.splitlines())


@pytest.mark.parametrize("limit", [0.5, 3.0, 40.0])
def test_native_while_loops(limit):
    w = t(3) * 0.2

    def f(v, lim):
        def body(c):
            k, v = c
            return k + 1.0, v * 1.1 + (v * w).sin().abs()
        return ak.while_loop(lambda c: c[1].abs().sum() < lim, body,
                             (ak.tensor(0.0, dtype=ak.float64), v))
    v, lim = ak.tensor([0.1, -0.2, 0.3], dtype=ak.float64), ak.tensor(limit, dtype=ak.float64)
    jf = ak.jit(f)
    close(jf(v, lim), f(v, lim))
    assert native(jf, v, lim)
    g = ak.func.grad(lambda v: f(v, lim)[1].sum())
    close(ak.jit(g)(v), g(v), 1e-10)


def _at_offset(array, offset_bytes):
    """A C-contiguous copy of `array` whose data starts `offset_bytes` past a 64-byte
    boundary (numpy's own arrays start wherever malloc put them)."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + offset_bytes
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


@pytest.mark.parametrize("offset", [0, 8, 16, 32, 48])
def test_loops_read_constants_and_carries_at_any_alignment(offset):
    """A loop constant that is not 64-byte aligned is read through an aligned copy made
    before the loop (a vector load across two cache lines costs two); results and
    gradients are those of the interpreted loop whatever the inputs' alignment."""
    w = ak.from_numpy(_at_offset(RNG.standard_normal((16, 16)) / 4, offset))
    h = ak.from_numpy(_at_offset(RNG.standard_normal(16), offset))
    assert w.numpy().ctypes.data % 64 == offset

    def loss(w, h):
        h = ak.fori_loop(0, 9, lambda i, h: (h @ w).tanh(), h)
        k, h = ak.while_loop(lambda c: c[0] < 3.0, lambda c: (c[0] + 1.0, (h @ w).sin()),
                             (ak.tensor(0.0, dtype=ak.float64), h))
        return (h * h).sum()
    jl, jg = ak.jit(loss), ak.jit(ak.func.grad(loss, argnums=(0, 1)))
    close(jl(w, h), loss(w, h))
    close(jg(w, h), ak.func.grad(loss, argnums=(0, 1))(w, h), 1e-10)
    assert native(jl, w, h)
    w_again = ak.from_numpy(_at_offset(w.numpy(), (offset + 16) % 64))  # same plan, moved
    close(jl(w_again, h), loss(w, h))


def test_compiled_intermediates_are_aligned():
    from adkit.codegen import buffers
    for shape in [(3,), (5, 7), (1000,)]:
        assert buffers.aligned_empty(shape, np.float64).ctypes.data % buffers.ALIGN == 0
    x = t(37)
    compiled = ak.jit(lambda x: ak.fori_loop(0, 3, lambda i, h: h.sin(), x.exp())).compile(x)
    for buf, array in zip(compiled.buffers, compiled._template()):
        if type(buf).__name__ in ("TempBuffer", "ConstantBuffer") and array is not None:
            assert array.ctypes.data % buffers.ALIGN == 0, buf


@pytest.mark.parametrize("sizes", [[1, 100, 64, 7], [3 << 20, 5, 1 << 19]])
def test_a_plans_new_blocks_are_aligned_apart_and_writable(sizes):
    from adkit.codegen import buffers
    blocks = buffers.new_blocks(sizes)
    assert [b.nbytes for b in blocks] == sizes
    starts = [b.ctypes.data for b in blocks]
    assert all(start % buffers.ALIGN == 0 for start in starts)
    for (a, n), b in zip(zip(starts, sizes), starts[1:]):
        assert a + n <= b  # no two overlap
    if sum(sizes) >= buffers._HUGE_FROM:  # a huge-page arena starts on a 2 MB boundary
        assert starts[0] % buffers._HUGE_PAGE == 0
    for i, block in enumerate(blocks):
        block[:] = i
    assert [int(b.min()) == int(b.max()) == i for i, b in enumerate(blocks)] == \
        [True] * len(blocks)


STACKED_BODIES = {
    # a y that is the carry a step starts from: the carry lives in that y's stack
    "y-is-old-carry": lambda h, x: ((h * x).sin(), h),
    "old-carry-twice": lambda h, x: (h.cos() + x, (h, h * 2.0, h)),
    "carry-passed-through": lambda h, x: (h, (h, x * h)),
    "reshaped-old-carry": lambda h, x: ((h + x).tanh(), h.reshape(2, 2)),
}


@pytest.mark.parametrize("name", STACKED_BODIES)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 6])
@pytest.mark.parametrize("reverse", [False, True])
def test_a_carry_that_is_also_a_y_is_kept_in_its_stack(name, n, reverse):
    body, xs, h = STACKED_BODIES[name], t(n, 4), t(4)
    f = lambda h, xs: ak.scan(body, h, xs, reverse=reverse)  # noqa: E731
    jf = ak.jit(f)
    got, want = jf(h, xs), f(h, xs)
    close(got[0], want[0])
    for a, b in zip(got[1] if isinstance(got[1], tuple) else (got[1],),
                    want[1] if isinstance(want[1], tuple) else (want[1],)):
        close(a, b)
    assert native(jf, h, xs)
    loss = lambda h, xs: (f(h, xs)[0] ** 2).sum() + sum(  # noqa: E731
        (y * y).sum() for y in (f(h, xs)[1] if isinstance(f(h, xs)[1], tuple)
                                else (f(h, xs)[1],)))
    grad = ak.func.grad(loss, argnums=(0, 1))
    close(ak.jit(grad)(h, xs), grad(h, xs), 1e-10)
