"""Tiered jit (`ak.jit(f, compile="background")`, the default): first calls run on numpy
while LLVM compiles on a worker thread; later calls run the native code. Results agree
with `compile="eager"` (floats to rounding, integers and bools exactly), calls are
thread safe, a failed background compile is retried (and reported) by the next call,
exit waits for a compile in progress, and the disk cache is used."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import adkit as ak
from adkit.codegen import background, plan_cache, tiered
from adkit.codegen import compiled as compiled_module
from adkit.codegen.compiled import Compiled

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_plan_cache(monkeypatch):
    """These tests watch the tiers at work: a plan another test stored in the disk
    cache of plans would skip them (tests/test_jit_plan_cache.py tests that cache)."""
    monkeypatch.setattr(plan_cache, "key", lambda graph, passes: None)


def rand(*shape, seed=0):
    return ak.tensor(np.random.default_rng(seed).standard_normal(shape))


def _mixed(x, y):
    s = (x * y).exp().sum(1)
    return {"s": s, "mask": x > y, "n": (x > 0).sum(), "t": (s.tanh(), y.t() @ x)}


FUNCTIONS = [
    (lambda x, y: (x * 2.0 + y).tanh(), "elementwise"),
    (lambda x, y: ak.func.grad(lambda a: (a.sin() * y).sum())(x), "gradient"),
    (_mixed, "pytree-with-int-and-bool"),
    (lambda x, y: (x, x[1:].t()), "returns-its-input"),
]


def _leaves(out):
    if isinstance(out, dict):
        return [leaf for v in out.values() for leaf in _leaves(v)]
    if isinstance(out, (tuple, list)):
        return [leaf for v in out for leaf in _leaves(v)]
    return [out]


def _assert_same(a, b):
    for u, v in zip(_leaves(a), _leaves(b), strict=True):
        u, v = u.numpy(), v.numpy()
        assert u.dtype == v.dtype and u.shape == v.shape
        if u.dtype.kind in "biu":
            np.testing.assert_array_equal(u, v)
        else:
            np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [f for f, _ in FUNCTIONS], ids=[i for _, i in FUNCTIONS])
def test_background_calls_agree_with_eager_ones(fn):
    x, y = rand(3, 4), rand(3, 4, seed=1)
    want = ak.jit(fn, compile="eager")(x, y)
    jitted = ak.jit(fn, compile="background")
    first = jitted(x, y)  # numpy
    assert isinstance(next(iter(jitted.cache.values())), tiered.Pending)
    _assert_same(first, want)
    assert background.wait(timeout=120)
    native = jitted(x, y)
    assert isinstance(next(iter(jitted.cache.values())), Compiled)
    assert all(isinstance(p, Compiled) for p in jitted._fast.values())
    _assert_same(native, want)


def test_first_call_results_are_fresh_memory():
    x = rand(4)
    out = ak.jit(lambda t: t, compile="background")(x)
    assert not np.shares_memory(out.numpy(), x.numpy())
    np.testing.assert_array_equal(out.numpy(), x.numpy())


def test_compile_waits_and_lower_gives_the_optimized_graph():
    jitted = ak.jit(lambda t: (t.exp() + 1.0).log(), compile="background")
    x = rand(8)
    jitted(x)
    compiled = jitted.compile(x)
    assert isinstance(compiled, Compiled) and compiled.llvm_ir
    assert jitted.lower(x) is compiled.graph
    assert "1 signature compiled" in repr(jitted)


def test_unknown_compile_mode_is_refused():
    with pytest.raises(ValueError, match="'background', 'eager'"):
        ak.jit(lambda t: t, compile="lazy")


def test_threads_calling_during_the_background_compile_all_get_right_results():
    def fn(t):
        return ((t * 1.5).sin() * t).sum(0)
    jitted = ak.jit(fn, compile="background")
    inputs = [rand(16, 8 + i % 3, seed=i) for i in range(24)]  # three signatures
    results, errors = {}, []

    def work(i):
        try:
            for _ in range(5):
                results[i] = jitted(inputs[i])
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, x in enumerate(inputs):
        np.testing.assert_allclose(results[i].numpy(), fn(x).numpy(), rtol=1e-12)
    assert background.wait(timeout=120)
    jitted(inputs[0])
    assert len(jitted.cache) == 3


def test_a_failed_background_compile_is_retried_by_the_next_call(monkeypatch):
    failures = []

    def fails_once(graph, name):
        if not failures:
            failures.append(name)
            raise MemoryError("simulated")
        return Compiled(graph, name)
    monkeypatch.setattr(tiered, "Compiled", fails_once)
    jitted = ak.jit(lambda t: t * 3.0, compile="background")
    x = rand(5)
    np.testing.assert_allclose(jitted(x).numpy(), 3 * x.numpy())  # numpy
    assert background.wait(timeout=120) and failures
    np.testing.assert_allclose(jitted(x).numpy(), 3 * x.numpy())  # compiled here
    assert isinstance(next(iter(jitted.cache.values())), Compiled)


def test_a_background_compile_that_always_fails_is_reported_by_the_next_call(monkeypatch):
    def fails(graph, name):
        raise RuntimeError("codegen broke")
    monkeypatch.setattr(tiered, "Compiled", fails)
    jitted = ak.jit(lambda t: t * 3.0, compile="background")
    x = rand(5)
    jitted(x)
    assert background.wait(timeout=120)
    with pytest.raises(RuntimeError, match="codegen broke") as info:
        jitted(x)
    assert "background compile had failed too" in "".join(info.value.__notes__)


EXIT_SCRIPT = """
import numpy as np, adkit as ak, adkit.func as F
def chain(t):
    for i in range(40):
        t = (t * 1.01).tanh().sin() + t
    return t.sum()
f = ak.jit(F.grad(chain))
print(float(f(ak.tensor(np.linspace(-1, 1, 100))).sum()))
"""


def test_exit_with_a_compile_running_is_clean():
    env = {**os.environ, "ADKIT_DISABLE_CACHE": "1"}
    out = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], cwd=ROOT, capture_output=True,
                         text=True, env=env, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and float(out.stdout)


CACHE_SCRIPT = """
import numpy as np, adkit as ak
from adkit.codegen import background
f = ak.jit(lambda t: ((t * 2.0).exp() + 1.0).tanh(), compile="{mode}")
x = ak.tensor(np.linspace(-1, 1, 1000))
f(x)
background.wait()
print(f.compile(x).module.from_cache)
"""


@pytest.mark.parametrize("mode", ["background", "eager"])
def test_the_disk_cache_is_written_and_read_in_both_modes(tmp_path, mode):
    env = {**os.environ, "ADKIT_CACHE_DIR": str(tmp_path)}
    env.pop("ADKIT_DISABLE_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", CACHE_SCRIPT.format(mode=mode)], cwd=ROOT,
                           capture_output=True, text=True, env=env, timeout=120, check=False)
            for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["False", "True"], runs[-1].stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_compiles_what_the_parent_left_queued():
    jitted = ak.jit(lambda t: (t * 2.0).cos(), compile="background")
    x = rand(6)
    jitted(x)  # its compile is queued or running
    pid = os.fork()
    if pid == 0:  # the child: compiles for itself (nothing may hang)
        ok = np.allclose(jitted.compile(x)(x).numpy(), np.cos(2 * x.numpy()))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_allclose(jitted.compile(x)(x).numpy(), np.cos(2 * x.numpy()))


def _big_graphs(monkeypatch, tmp_path):
    """Every graph counts as too big for numpy, and quick code's blocks as big enough to
    be touched on a thread of their own; a fresh disk cache."""
    monkeypatch.setattr(tiered, "NUMPY_BYTES_PER_NODE", 0)
    monkeypatch.setattr(compiled_module, "_TOUCH_BYTES", 0)
    monkeypatch.setenv("ADKIT_CACHE_DIR", str(tmp_path))


def test_a_graph_numpy_would_be_slow_on_runs_quick_native_code_first(monkeypatch, tmp_path):
    _big_graphs(monkeypatch, tmp_path)
    jitted = ak.jit(lambda t: ((t * 2.0).exp() + 1.0).log(), compile="background")
    x = rand(7)
    want = np.log(np.exp(2 * x.numpy()) + 1.0)
    np.testing.assert_allclose(jitted(x).numpy(), want, rtol=1e-12)
    pending = next(iter(jitted.cache.values()))
    assert isinstance(pending, tiered.Pending) and pending.native_first
    quick = pending._quick
    assert isinstance(quick, Compiled) and not quick.optimized
    assert quick._first_blocks is None  # the touched blocks went to the first call
    assert background.wait(timeout=120)
    np.testing.assert_allclose(jitted(x).numpy(), want, rtol=1e-12)
    promoted = next(iter(jitted.cache.values()))
    assert promoted is quick and quick.optimized  # the same plan, its module at O3
    assert quick.module.llvm_ir == quick._replaced[0].llvm_ir
    assert list(tmp_path.rglob("*.o"))  # the optimized code, for the next process


def test_quick_code_runs_on_blocks_touched_while_it_compiled(monkeypatch, tmp_path):
    _big_graphs(monkeypatch, tmp_path)

    def f(t):  # products between kernels: intermediates in blocks
        return ((t @ t.T).tanh() @ t).exp().sum(0)
    x = rand(9, 5)
    jitted = ak.jit(f, compile="background")
    np.testing.assert_allclose(jitted(x).numpy(), f(x).numpy(), rtol=1e-12)
    quick = next(iter(jitted.cache.values()))._quick
    assert quick._block_sizes and quick._first_blocks is None
    np.testing.assert_allclose(jitted(x).numpy(), f(x).numpy(), rtol=1e-12)


def test_quick_code_is_skipped_when_the_disk_cache_has_the_optimized_code(monkeypatch,
                                                                       tmp_path):
    _big_graphs(monkeypatch, tmp_path)

    def f(t):
        return (t * 3.0).sin().sum(0)
    x = rand(5, 3)
    # optimized code into the cache: made from quick code's IR (whose small kernels are
    # scalar loops, compiled.SCALAR_NS), as another process's background compile makes it
    first = ak.jit(f, compile="background")
    first(x)
    assert background.wait(timeout=120)
    jitted = ak.jit(f, compile="background")
    np.testing.assert_allclose(jitted(x).numpy(), np.sin(3 * x.numpy()).sum(0), rtol=1e-12)
    compiled = next(iter(jitted.cache.values()))
    assert isinstance(compiled, Compiled) and compiled.optimized
    assert compiled.module.from_cache and compiled._replaced == []


def test_a_failed_optimizing_compile_of_quick_code_is_retried(monkeypatch, tmp_path):
    _big_graphs(monkeypatch, tmp_path)
    real = Compiled.optimize
    failures = []

    def fails_once(self):
        if not failures:
            failures.append(self)
            raise MemoryError("simulated")
        return real(self)
    monkeypatch.setattr(Compiled, "optimize", fails_once)
    jitted = ak.jit(lambda t: t * 4.0 + 1.0, compile="background")
    x = rand(6)
    jitted(x)
    assert background.wait(timeout=120) and failures
    np.testing.assert_allclose(jitted(x).numpy(), 4 * x.numpy() + 1, rtol=1e-15)
    compiled = next(iter(jitted.cache.values()))
    assert isinstance(compiled, Compiled) and compiled.optimized
