"""ak.jit(f).export (issue 18, item 1): exported C libraries called through ctypes give
what in-process ak.jit gives (within 1e-12 for float64), for plain functions, gradients,
matrix products, native loops, several outputs, float32, integer and bool inputs; and
the errors (a node that runs on numpy, a bad path, no linker, an index out of range).
Linking uses the system C compiler: the tests skip where there is none."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import adkit as ak
from adkit._pytree import tree_flatten
from adkit.codegen import export_blas, export_gemm, export_link, runtime
from adkit.codegen.export import ExportError
from adkit.tensor import Tensor

F = ak.func
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
pytestmark = needs_cc


@pytest.fixture(autouse=True)
def _system_linker(monkeypatch):
    """The tests pick the linker and BLAS they mean (the defaults read the environment)."""
    monkeypatch.setenv("ADKIT_EXPORT_LINKER", "cc")
    monkeypatch.setenv("ADKIT_EXPORT_BLAS", "auto")


def rand(*shape, dtype=np.float64, seed=0):
    return ak.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _leaves(tree):
    return tree_flatten(tree, is_leaf=lambda x: isinstance(x, Tensor))[0]


def call_library(path, name, args, like, work=True):
    """Call `name` in the library at `path` on the flat tensors of `args`; outputs shaped
    like the flat tensors of `like`. Returns (return code, [output arrays])."""
    lib = ctypes.CDLL(path)
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int64
    ins = [np.ascontiguousarray(t.numpy()) for t in _leaves(args)]
    outs = [np.empty(t.shape, t.numpy().dtype) for t in _leaves(like)]
    size = getattr(lib, f"{name}_work_bytes")
    size.restype = ctypes.c_int64
    scratch = np.empty(size(), np.uint8) if work else None
    pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in ins + outs]
    code = fn(*pointers, None if scratch is None else scratch.ctypes.data_as(ctypes.c_void_p))
    return code, outs


def assert_round_trip(tmp_path, fn, *args, name="f", rtol=1e-12, atol=1e-12,
                      cpu="native"):
    """Export jit(fn) for args (built for `cpu`), call it, compare with the in-process
    result."""
    jitted = ak.jit(fn)
    want = jitted(*args)
    lib = jitted.export(tmp_path / "lib", *args, name=name, cpu=cpu)
    assert lib == str(tmp_path / "lib.so") and os.path.exists(tmp_path / "lib.h")
    for work in (True, False):
        code, got = call_library(lib, name, args, want, work=work)
        assert code == 0
        assert_outputs_close(got, want, rtol, atol)
    return lib


def assert_outputs_close(got, want, rtol, atol):
    """A library's output arrays against the flat tensors of `want`."""
    for g, w in zip(got, _leaves(want), strict=True):
        scale = max(1.0, float(np.abs(w.numpy()).max(initial=0)))  # sums' rounding
        np.testing.assert_allclose(g, w.numpy(), rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_export_elementwise_and_reductions(tmp_path, dtype):
    tol = 1e-12 if dtype == np.float64 else 1e-6

    def f(x, y):
        return ((x * y).exp() + x.sin() * y.tanh()).sum(1), (x - y).abs().amax()
    assert_round_trip(tmp_path, f, rand(5, 7, dtype=dtype), rand(5, 7, dtype=dtype, seed=1),
                      rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_export_matmul_and_its_gradient(tmp_path, dtype):
    tol = 1e-12 if dtype == np.float64 else 1e-5

    def loss(w, x):
        return ((x @ w).tanh() @ w.T).sum()
    w, x = rand(48, 40, dtype=dtype), rand(70, 48, dtype=dtype, seed=1)
    assert_round_trip(tmp_path, F.grad_and_value(loss), w, x, rtol=tol, atol=tol)


def test_export_grad_of_a_pytree(tmp_path):
    def loss(params, x):
        w, b = params["w"], params["b"]
        return (((x @ w) + b).relu() ** 2).mean()
    params = {"w": rand(6, 3), "b": rand(3, seed=1)}
    lib = assert_round_trip(tmp_path, F.grad(loss), params, rand(10, 6, seed=2),
                            name="loss_grad")
    text = open(lib[:-3] + ".h").read()
    assert "args[0]['w']" in text and "result['b']" in text
    assert "int64_t loss_grad(const double *x0, const double *x1, const double *x2, " \
        "double *y0, double *y1, void *work);" in text


def test_export_value_and_grad_of_a_native_loop(tmp_path):
    w = rand(8, 8) * 0.3

    def loss(h):
        return ak.fori_loop(0, 20, lambda i, h: (h @ w).tanh(), h).sum()
    assert_round_trip(tmp_path, F.grad_and_value(loss), rand(4, 8))


def test_export_scan_with_outputs_per_step(tmp_path):
    def f(h, xs, w):
        return ak.scan(lambda h, x: ((h @ w).sin() + x, (h * x).sum()), h, xs)
    assert_round_trip(tmp_path, f, rand(3), rand(12, 3, seed=1), rand(3, 3, seed=2))


@pytest.mark.parametrize("positive", [True, False])
def test_export_cond_and_while_loop(tmp_path, positive):
    def f(x):
        y = ak.cond(x.sum() > 0, lambda v: v.exp(), lambda v: v * v, x)
        return ak.while_loop(lambda c: c[0].sum() < 100.0, lambda c: (c[0] * 1.5 + 1.0,), (y,))
    x = rand(5).abs() * (1.0 if positive else -1.0)
    assert_round_trip(tmp_path, f, x)


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32], ids=["int64", "int32"])
def test_export_integer_indices_and_bool_outputs(tmp_path, index_dtype):
    def f(x, i):
        picked = x[i]
        return picked * 2.0, picked > 0
    index = ak.tensor(np.array([5, 0, 2, 2], index_dtype))
    lib = assert_round_trip(tmp_path, f, rand(6, 4), index)
    c_type = "int64_t" if index_dtype == np.int64 else "int32_t"
    assert f"const {c_type} *x1" in open(lib[:-3] + ".h").read()


def test_export_views_and_inputs_returned(tmp_path):
    def f(x, y):
        return x.T, y, (x + 1.0)[1:, ::2]
    assert_round_trip(tmp_path, f, rand(3, 5), rand(2, seed=1))


def test_export_index_out_of_range_returns_the_check_code(tmp_path):
    jitted = ak.jit(lambda x, i: x[i] * 2.0)
    x, i = rand(6, 4), ak.tensor(np.array([1, 2], np.int64))
    lib = jitted.export(tmp_path / "g", x, i, name="g")
    code, _ = call_library(lib, "g", (x, ak.tensor(np.array([1, 7], np.int64))), jitted(x, i))
    assert code == 1
    assert " *   1: " in open(tmp_path / "g.h").read()


def test_export_threads_give_the_same_results(tmp_path):
    def f(x):
        return (x.exp() * x.sin()).sum(0)
    x = rand(400, 300)
    lib = assert_round_trip(tmp_path, f, x)
    set_threads = ctypes.CDLL(lib).lib_set_threads
    set_threads.restype = ctypes.c_int64
    assert set_threads(ctypes.c_int64(2)) == 2
    code, (got,) = call_library(lib, "f", (x,), ak.jit(f)(x))
    assert code == 0
    np.testing.assert_allclose(got, ak.jit(f)(x).numpy(), rtol=1e-12, atol=1e-12)
    assert set_threads(ctypes.c_int64(1)) == 1


def test_export_every_compiled_signature(tmp_path):
    jitted = ak.jit(lambda x: (x * x).sum())
    small, big = rand(3), rand(2, 5)
    jitted(small), jitted(big)
    lib = jitted.export(tmp_path / "sq", name="sq")
    for k, x in enumerate((small, big)):
        code, (got,) = call_library(lib, f"sq_{k}", (x,), jitted(x))
        assert code == 0 and got == pytest.approx(float(jitted(x)), rel=1e-12)


@pytest.mark.parametrize("choice", ["loops", "numpy", "scipy"])
def test_export_blas_choices(tmp_path, monkeypatch, choice):
    """Own loops; the OpenBLAS in numpy's wheel (64-bit sizes, the very names in-process
    code calls); scipy's (32-bit sizes: called through a wrapper)."""
    if choice == "loops":
        monkeypatch.setenv("ADKIT_EXPORT_BLAS", "loops")
    else:
        path = _bundled_openblas(choice)
        if path is None:
            pytest.skip(f"no {choice} wheel with an OpenBLAS of its own here")
        monkeypatch.setenv("ADKIT_EXPORT_BLAS", path)
    x, w = rand(130, 70), rand(70, 90, seed=1)
    lib = assert_round_trip(tmp_path, lambda x, w: (x @ w, x.T @ (x @ w)), x, w)
    header = open(lib[:-3] + ".h").read()
    assert ("own register-tiled loops" in header) == (choice == "loops")


def _bundled_openblas(package):
    module = pytest.importorskip(package)
    libs = os.path.join(os.path.dirname(module.__file__), "..", f"{package}.libs")
    found = sorted(p for p in os.listdir(libs) if "openblas" in p) \
        if os.path.isdir(libs) else []
    return os.path.realpath(os.path.join(libs, found[0])) if found else None


@pytest.fixture(scope="module")
def own_gemm():
    """export_gemm's float64 and float32 gemm, JIT-compiled in this process."""
    from llvmlite import ir
    module = ir.Module()
    module.triple = runtime.target_machine().triple
    _, vector_bytes = runtime.host_vector_isa()
    for name, dtype in (("gemm64", np.float64), ("gemm32", np.float32)):
        export_gemm.define_gemm(module, name, dtype, vector_bytes)
    native = runtime.compile_module(module)
    i32, i64, p = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
    yield native, {dtype: native.function(name, None, i32, i32, i32, i64, i64, i64, real, p, i64,
                                   p, i64, real, p, i64)
            for name, dtype, real in (("gemm64", np.float64, ctypes.c_double),
                                      ("gemm32", np.float32, ctypes.c_float))}  # alive


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("ta, tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_export_own_gemm_matches_numpy(own_gemm, dtype, ta, tb):
    """Every remainder of the row and column tiles, k across depth blocks and 0, alpha
    and beta (C not read when beta is 0: NaN there does not leak)."""
    rng = np.random.default_rng(0)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    for m, n, k in [(1, 1, 1), (3, 17, 5), (8, 16, 3), (15, 33, 300), (9, 7, 0),
                    (0, 4, 4), (21, 40, 600)]:
        for alpha, beta in ((1.0, 0.0), (1.5, 0.5)):
            a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
            b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
            c = np.full((m, n), np.nan if beta == 0 else 1.0, dtype)
            want = alpha * (a.T if ta else a).astype(np.float64) @ \
                (b.T if tb else b).astype(np.float64) + beta * np.nan_to_num(c)
            own_gemm[1][dtype](101, 112 if ta else 111, 112 if tb else 111, m, n, k, alpha,
                            a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], beta,
                            c.ctypes.data, n)
            scale = max(1.0, float(np.abs(want).max(initial=0)))
            np.testing.assert_allclose(c, want, rtol=tol, atol=tol * scale)


def test_export_without_libmvec_uses_polynomials(tmp_path, monkeypatch):
    monkeypatch.setattr(export_link, "has_libmvec", lambda linker: False)

    def f(x):
        return x.exp().sum() + x.sin().sum() + x.log1p().sum()
    lib = assert_round_trip(tmp_path, f, rand(1000).abs(), rtol=1e-12, atol=1e-10)
    header = open(lib[:-3] + ".h").read()
    assert "polynomials" in header and "-lmvec" not in header


def test_export_refuses_nodes_that_run_on_numpy(tmp_path):
    def f(x):
        return x.sort()[0] * 2.0
    with pytest.raises(ExportError, match=r"run on numpy:\n.*sort"):
        ak.jit(f).export(tmp_path / "s", rand(5))
    assert not os.path.exists(tmp_path / "s.so")


def test_export_bad_path_and_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ak.jit(lambda x: x + 1.0).export(tmp_path / "missing" / "lib", rand(3))
    with pytest.raises(ExportError, match="hide the library function"):
        ak.jit(lambda x: x + 1.0).export(tmp_path / "e", rand(3), name="malloc")
    with pytest.raises(ValueError, match="compiled no signature"):
        ak.jit(lambda x: x + 1.0).export(tmp_path / "n")


def test_export_without_a_linker_writes_the_object_and_says_how_to_link(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("ADKIT_EXPORT_LINKER", "none")
    jitted = ak.jit(lambda x: (x * 3.0).exp())
    x = rand(4)
    with pytest.raises(ExportError, match="no linker found") as info:
        jitted.export(tmp_path / "nolink", x, name="h")
    obj, so = tmp_path / "nolink.o", tmp_path / "nolink.so"
    assert obj.exists() and (tmp_path / "nolink.h").exists() and not so.exists()
    command = str(info.value).splitlines()[-1].split()
    assert command[:4] == ["cc", "-shared", "-o", str(so)] and str(obj) in command
    subprocess.run(command, check=True)  # the command it printed links the library
    code, (got,) = call_library(str(so), "h", (x,), jitted(x))
    assert code == 0
    np.testing.assert_allclose(got, jitted(x).numpy(), rtol=1e-12)


def test_export_linker_choice_errors(monkeypatch):
    monkeypatch.setenv("ADKIT_EXPORT_LINKER", "no-such-compiler-here")
    with pytest.raises(ExportError, match="no such program"):
        export_link.find_linker()
    monkeypatch.setenv("ADKIT_EXPORT_BLAS", "/no/such/libblas.so")
    with pytest.raises(ExportError, match="CBLAS"):
        export_blas.find_blas()


zig = pytest.mark.skipif(not export_link._zig_installed(), reason="ziglang not installed")


@zig
def test_export_finds_zig_when_asked(monkeypatch):
    monkeypatch.setenv("ADKIT_EXPORT_LINKER", "zig")
    linker = export_link.find_linker()
    assert linker.name == "zig" and linker.command[-3:] == ["-m", "ziglang", "cc"]
    assert export_link.has_libmvec(linker) == (os.uname().machine == "x86_64")


@zig
@pytest.mark.slow  # ~1 minute the first time: Zig builds its glibc stubs into its cache
def test_export_links_with_zig(tmp_path, monkeypatch):
    monkeypatch.setenv("ADKIT_EXPORT_LINKER", "zig")

    def loss(w, x):
        return ((x @ w).tanh()).sum()
    assert_round_trip(tmp_path, F.grad(loss), rand(20, 30), rand(40, 20, seed=1))
