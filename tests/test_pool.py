"""The native thread pool (adkit/codegen/pool.py): every part of every job runs exactly
once, whatever the interleaving, the worker count or the number of callers; nothing
hangs: not at exit (idle, or with a job running on another thread), not after a fork,
not when a part raises. Whatever could hang runs in a subprocess of its own (a session,
killed whole) with a timeout, so a hang fails the test instead of blocking CI.

The parts are jitted here with llvmlite: `count_part` spins a while (so parts overlap
and finish out of order) and then adds 1 to its record's counter; `job3` is what a
kernel entry emits (pool.emit_run); `nested_part` calls the pool again from a part;
`alternate` runs two jobs in turn from a native loop.
"""
import atexit
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
from llvmlite import ir

from adkit.codegen import pool, runtime

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the pool uses glibc's pthreads")

ROOT = Path(__file__).resolve().parent.parent
I64 = ir.IntType(64)
PTR = ir.PointerType()
TIMEOUT = 60


# --- the jitted parts --------------------------------------------------------------------
def build_test_module():
    """count_part(record: [runs, spins]), job3(r0, r1, r2) and nested_part(record:
    [args pointer, n]) as an llvmlite.ir.Module."""
    module = ir.Module(name="pool_test")
    module.triple = runtime.target_machine().triple
    count = ir.Function(module, pool.PART, name="count_part")
    b = ir.IRBuilder(count.append_basic_block("entry"))
    record = count.args[0]
    spins = b.load(b.gep(record, [ir.Constant(I64, 1)], source_etype=I64), typ=I64)
    barrier = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}",
                           side_effect=True)  # keeps the spin loop from being deleted
    k = b.alloca(I64)
    b.store(ir.Constant(I64, 0), k)
    head, body, done = (count.append_basic_block(s) for s in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    b.cbranch(b.icmp_signed("<", b.load(k, typ=I64), spins), body, done)
    b.position_at_end(body)
    b.call(barrier, [])
    b.store(b.add(b.load(k, typ=I64), ir.Constant(I64, 1)), k)
    b.branch(head)
    b.position_at_end(done)
    b.atomic_rmw("add", record, ir.Constant(I64, 1), "acq_rel")
    b.ret(ir.Constant(PTR, None))

    job3 = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * 3), name="job3")
    b = ir.IRBuilder(job3.append_basic_block("entry"))
    pool.emit_run(b, module, count, list(job3.args))
    b.ret_void()

    alternate = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64] * 2 + [I64]),
                            name="alternate")
    _emit_alternate(alternate, count)

    nested = ir.Function(module, pool.PART, name="nested_part")
    b = ir.IRBuilder(nested.append_basic_block("entry"))
    args = b.load(nested.args[0], typ=PTR)
    n = b.load(b.gep(nested.args[0], [ir.Constant(I64, 1)], source_etype=I64), typ=I64)
    b.call(module.globals[pool.RUN_NAME], [count, args, n])
    b.ret(ir.Constant(PTR, None))
    return module


def _emit_alternate(fn, count):
    """alternate(a, na, b, nb, reps): reps times, the job (count_part, a, na) then the
    job (count_part, b, nb), back to back from native code: the tightest interleaving
    of a job's end, a late worker and the next job."""
    a, na, b_args, nb, reps = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    k = b.alloca(I64)
    b.store(ir.Constant(I64, 0), k)
    head, body, done = (fn.append_basic_block(s) for s in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    b.cbranch(b.icmp_signed("<", b.load(k, typ=I64), reps), body, done)
    b.position_at_end(body)
    run = fn.module.globals[pool.RUN_NAME]
    b.call(run, [count, a, na])
    b.call(run, [count, b_args, nb])
    b.store(b.add(b.load(k, typ=I64), ir.Constant(I64, 1)), k)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()


@functools.lru_cache(maxsize=None)
def native():
    """The test module compiled (through the disk cache, like kernels): ensures the
    pool first, as emit_run does, so adkit_pool_run resolves by name."""
    compiled = runtime.compile_module(build_test_module())
    # never freed: a daemon thread may run these parts while the interpreter exits
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(compiled))

    def address(name):
        return ctypes.cast(compiled.function(name, ctypes.c_void_p, ctypes.c_void_p),
                           ctypes.c_void_p).value
    job3 = compiled.function("job3", None, *[ctypes.c_void_p] * 3)
    alternate = compiled.function("alternate", None, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    return compiled, address("count_part"), address("nested_part"), job3, alternate


class Parts:
    """n part records (int64 [runs, spins]) and the i8** array of their addresses."""

    def __init__(self, n, spins=0):
        self.records = np.zeros((n, 2), np.int64)
        self.records[:, 1] = spins
        base = self.records.ctypes.data
        self.pointers = (ctypes.c_void_p * max(n, 1))(*[base + 16 * i for i in range(n)])
        self.n = n

    @property
    def address(self):
        return ctypes.addressof(self.pointers)

    def run(self, fn=None):
        pool.run(fn or native()[1], self.address, self.n)
        return self

    def check(self, times=1):
        runs = self.records[:, 0]
        assert (runs == times).all(), f"part run counts {runs.tolist()} (want {times})"


def random_jobs(rng, count, sizes=(0, 1, 2, 3, 5, 8, 64, 1000), spins=200_000):
    """(n, spins per part) for `count` jobs: sizes below, at and far above the thread
    count; spins from none to ~0.05 ms, so parts end in every order."""
    for _ in range(count):
        n = int(rng.choice(sizes))
        yield n, rng.integers(0, spins, n) * (rng.random() < 0.7)


# --- scenarios (run in a subprocess each: `python -c "import tests.test_pool as t; ..."`) -
def scenario_correct(workers, jobs=300):
    started = pool.ensure(workers)
    assert started == workers, (started, workers)
    rng = np.random.default_rng(workers)
    done = []
    for n, spins in random_jobs(rng, jobs):
        done.append(Parts(n, spins).run())
        done[-1].check()
    for parts in done:  # no late worker ran an old job's part again
        parts.check()
    job3 = native()[3]
    parts = Parts(3, 5000)
    for k in range(1, 201):  # emit_run's call, from code compiled after the pool
        job3(*parts.pointers)
        parts.check(k)
    print("ok", started)


def scenario_back_to_back(workers, reps=20000):
    """Tiny jobs back to back from native code, on two sets of records: a worker that
    ran a part of one job in the next would count a record twice."""
    pool.ensure(workers)
    alternate = native()[4]
    for na, nb, spins in ((2, 3, 0), (3, 2, 0), (2, 9, 300), (5, 1, 0)):
        a, b = Parts(na, spins), Parts(nb)
        alternate(a.address, na, b.address, nb, reps)
        a.check(reps)
        b.check(reps)
    print("ok")


def scenario_concurrent(workers, callers=4, jobs=150):
    pool.ensure(workers)
    _, count, nested, _, _ = native()
    errors = []

    def caller(seed):
        try:
            rng = np.random.default_rng(seed)
            for n, spins in random_jobs(rng, jobs):
                if rng.random() < 0.2:  # a job whose parts call the pool again
                    inner = [Parts(int(rng.integers(0, 9)), 2000) for _ in range(3)]
                    outer = Parts(3)
                    outer.records[:] = [(p.address, p.n) for p in inner]
                    pool.run(nested, outer.address, 3)
                    for p in inner:
                        p.check()
                else:
                    Parts(n, spins).run(count).check()
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))
    threads = [threading.Thread(target=caller, args=(s,)) for s in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    print("ok")


def _report_after_shutdown(began):
    """atexit runs handlers last-registered first: registered before the pool's,
    this one runs after shutdown() and reports what it left."""
    def report():
        print("workers after exit:", pool._workers, "shutdown took %.3f s"
              % (time.perf_counter() - began[0]), flush=True)
    atexit.register(report)


def scenario_exit_idle():
    began = [0.0]
    _report_after_shutdown(began)
    pool.ensure()
    Parts(16, 1000).run().check()
    began[0] = time.perf_counter()


def scenario_exit_running():
    """A daemon thread is inside a long job (4000 parts of ~1 ms) when the interpreter
    exits: the workers leave after their current part, the caller's thread is stopped
    with the process."""
    began = [0.0]
    _report_after_shutdown(began)
    pool.ensure()
    parts = Parts(4000, 4_000_000)
    native()
    threading.Thread(target=parts.run, daemon=True).start()
    while parts.records[:, 0].sum() < 4:
        time.sleep(0.001)
    print("job running", flush=True)
    began[0] = time.perf_counter()


def _fork_and_wait(child):
    """Fork; the child runs child() and exits 0 when it returns (1 when it raises);
    returns the child's exit status."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child()
            code = 0
        except Exception:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _busy_background(stop):
    """Jobs back to back on another thread, so a fork lands inside one: the child then
    inherits the pool's mutexes held by threads that do not exist there."""
    def loop():
        while not stop.is_set():
            Parts(8, 3000).run().check()
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def scenario_fork(workers):
    pool.ensure(workers)
    Parts(20, 1000).run().check()

    def child():
        assert pool._workers == workers  # the at-fork hook started them again
        for n, spins in random_jobs(np.random.default_rng(1), 30, spins=20_000):
            Parts(n, spins).run().check()
    assert _fork_and_wait(child) == 0
    stop = threading.Event()
    thread = _busy_background(stop)
    for _ in range(20):  # forks in the middle of the other thread's jobs
        time.sleep(0.002)
        assert _fork_and_wait(child) == 0
    stop.set()
    thread.join()
    for n, spins in random_jobs(np.random.default_rng(2), 100):  # the parent still works
        Parts(n, spins).run().check()
    print("ok")


def scenario_raw_fork():
    """A fork the at-fork hooks do not see (libc's fork, as C code would call it): the
    child's adkit_pool_run sees another pid and runs the job serially."""
    pool.ensure(1)
    stop = threading.Event()
    thread = _busy_background(stop)
    # the child only runs code that keeps the GIL (a raw fork leaves Python's own
    # locks as they were): libc's fork and adkit_pool_run called through PyDLL/PYFUNCTYPE
    libc_fork = ctypes.PyDLL(None).fork
    run = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        pool._native.run_address)
    count = native()[1]
    for _ in range(10):
        parts = Parts(50, 1000)
        time.sleep(0.002)
        pid = libc_fork()
        if pid == 0:
            run(count, parts.address, 50)
            os._exit(0 if (parts.records[:, 0] == 1).all() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    stop.set()
    thread.join()
    print("ok")


def scenario_raising_parts():
    """Parts that are Python callbacks and raise: ctypes reports each exception and
    returns; the job still ends with every other part run once, and the pool works."""
    pool.ensure(1)
    runs = np.zeros(64, np.int64)

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def part(arg):
        runs[arg or 0] += 1
        if (arg or 0) % 3 == 0:
            raise RuntimeError(f"part {arg} failed")
    pointers = (ctypes.c_void_p * 64)(*range(64))
    for _ in range(5):
        runs[:] = 0
        pool.run(ctypes.cast(part, ctypes.c_void_p).value, ctypes.addressof(pointers), 64)
        assert (runs == 1).all(), runs
    Parts(100, 1000).run().check()
    print("ok")


def scenario_parallel():
    """Two parts that each wait (up to 20 s) for the other to start: they can only
    both finish if the worker runs one while the caller runs the other."""
    pool.ensure(1)
    started, alone = [False, False], []

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def part(arg):
        me = arg or 0
        started[me] = True
        deadline = time.monotonic() + 20
        while not started[1 - me]:
            if time.monotonic() > deadline:
                alone.append(me)  # (an exception would not leave the callback)
                return
            time.sleep(0.0005)  # lets the other thread's callback take the GIL
    pointers = (ctypes.c_void_p * 2)(0, 1)
    for _ in range(3):
        started[:] = [False, False]
        pool.run(ctypes.cast(part, ctypes.c_void_p).value, ctypes.addressof(pointers), 2)
        assert not alone, f"part {alone} waited 20 s for the other to start"
    print("ok")


def scenario_threads():
    print(pool.ensure(), pool.threads())


def scenario_cached_module():
    """The test module's object code from the disk cache, in another process: its
    adkit_pool_run resolves to this process's pool (by name, not a baked address)."""
    compiled, _, _, job3, _ = native()
    parts = Parts(3, 1000)
    job3(*parts.pointers)
    parts.check()
    print("from cache:", compiled.from_cache)


# --- the tests -----------------------------------------------------------------------
def run_scenario(call, timeout=TIMEOUT, **env):
    """Run `tests.test_pool.<call>` in a fresh interpreter (its own session, killed
    whole on timeout); returns its stdout, fails on a non-zero exit or a timeout."""
    code = f"import tests.test_pool as t; t.{call}"
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, **env), start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(f"{call} hung (killed after {timeout} s)\n{out}\n{err[-3000:]}")
    assert child.returncode == 0, f"{call} exited {child.returncode}\n{out}\n{err[-3000:]}"
    return out


@pytest.mark.parametrize("workers", [0, 1, 3, 8])
def test_pool_runs_every_part_exactly_once(workers):
    assert run_scenario(f"scenario_correct({workers})").split() == ["ok", str(workers)]


@pytest.mark.parametrize("workers", [1, 3])
def test_pool_tiny_jobs_back_to_back(workers):
    assert "ok" in run_scenario(f"scenario_back_to_back({workers})")


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_pool_concurrent_and_nested_callers(workers):
    assert "ok" in run_scenario(f"scenario_concurrent({workers})")


def test_pool_shuts_down_at_exit_when_idle():
    out = run_scenario("scenario_exit_idle()")
    assert "workers after exit: None" in out, out


def test_pool_shuts_down_at_exit_while_a_job_runs():
    out = run_scenario("scenario_exit_running()")
    assert "job running" in out and "workers after exit: None" in out, out
    took = float(out.split("shutdown took")[1].split()[0])
    assert took < 1.5, f"exit waited {took} s: the workers finished the whole job first"


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_pool_fork_child_runs_jobs_and_parent_still_works(workers):
    assert "ok" in run_scenario(f"scenario_fork({workers})")


def test_pool_fork_unseen_by_hooks_runs_serially():
    assert "ok" in run_scenario("scenario_raw_fork()")


def test_pool_worker_runs_a_part_while_the_caller_runs_another():
    assert "ok" in run_scenario("scenario_parallel()")


def test_pool_survives_raising_parts():
    out = run_scenario("scenario_raising_parts()")
    assert "ok" in out


def test_pool_symbol_resolves_in_code_loaded_from_the_disk_cache(tmp_path):
    first = run_scenario("scenario_cached_module()", ADKIT_CACHE_DIR=str(tmp_path))
    again = run_scenario("scenario_cached_module()", ADKIT_CACHE_DIR=str(tmp_path))
    assert "from cache: False" in first and "from cache: True" in again, (first, again)


def test_pool_worker_count_from_adkit_num_threads(monkeypatch):
    cpus = pool.usable_cpus()
    monkeypatch.delenv("ADKIT_NUM_THREADS", raising=False)
    assert pool.default_workers() == max(cpus - 1, 0)
    monkeypatch.setenv("ADKIT_NUM_THREADS", "1")
    assert pool.default_workers() == 0
    monkeypatch.setenv("ADKIT_NUM_THREADS", "2")
    assert pool.default_workers() == min(cpus - 1, 1)
    for bad in ("0", "two", "-3"):
        monkeypatch.setenv("ADKIT_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="ADKIT_NUM_THREADS"):
            pool.default_workers()
    out = run_scenario("scenario_threads()", ADKIT_NUM_THREADS="1")
    assert out.split() == ["0", "1"]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity masks here")
def test_pool_workers_follow_the_affinity_mask():
    """Pinned to one CPU (taskset, a container, a Dask worker), a job runs on one
    thread: a second would only take turns with the first."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from adkit.codegen import pool; print(pool.usable_cpus(), pool.default_workers())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={k: v for k, v in os.environ.items()
                                          if k != "ADKIT_NUM_THREADS"})
    assert out.stdout.split() == ["1", "0"]


def test_pool_emit_run_puts_the_array_in_the_entry_block():
    module = build_test_module()
    job3 = module.get_global("job3")
    entry = job3.entry_basic_block
    assert any(i.opname == "alloca" for i in entry.instructions)
    text = str(module)
    assert text.count(f'declare void @"{pool.RUN_NAME}"') == 1, text
