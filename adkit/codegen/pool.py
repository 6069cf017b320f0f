"""A persistent native thread pool for parallel kernels, written in LLVM IR.

Owns: `ensure()` (compile the pool once per process, register `adkit_pool_run` as a
global symbol, start the workers), `emit_run(builder, module, fn, arg_pointers)` (the
call a kernel entry emits), `shutdown()` (at exit), `threads()`, `default_workers()`.
Does not: split work into parts (program.py's KernelCall does), compile kernels
(runtime.py) or make the pool's code (pool_ir.py: its IR, and the protocol its threads
follow). Like runtime.py it touches llvmlite.binding: the pool has its own engine.
"""
import atexit
import ctypes
import os
import threading

import llvmlite.binding as llvm
from llvmlite import ir

from .. import _config
from . import disk_cache, pool_ir, runtime
from .on_thread import OnThread
from .pool_ir import (CALLER_SPINS, I64, MAX_WORKERS, PART, PTR, RUN,  # noqa: F401
                      RUN_NAME, WORKER_SPINS, entry_alloca, build_module)


def _object_code():
    """The pool's object code, through the disk cache like kernels' (loading it costs
    ~1 ms). Compiled quick, at opt level 0 (runtime.quick_object): ~10 ms where O3 took
    30-90 of a process's first call, and a pool's code is waiting and handing out
    parts. Keyed by pool_ir.py's text (the IR is made there, from nothing else), so a
    process that finds it skips making the IR too (~10 ms of Python)."""
    with open(pool_ir.__file__, "rb") as f:
        source = f.read().decode()
    key = disk_cache.key(source, runtime.version_key() + ";adkit_pool;source")
    data = disk_cache.load(key)
    if data is None:
        data = runtime.quick_object(str(build_module()), level=0)
        disk_cache.store(key, data)
    return data


def _compile_and_link():
    """The prefetch thread's work: the pool's object code, linked here too (not on the
    first call's path; its workers start there)."""
    data = _object_code()
    _link(wait=False, data=data)
    return data


_prefetched = None  # the OnThread prefetch() started, until ensure() takes its code


def prefetch():
    """Start making the pool's object code on a thread (once, while no pool is
    compiled): planning and emitting code that calls the pool need only its symbol's
    name, and the code is linked after its own compile (runtime.Compiles.finish ensures
    the pool then). The pool's compile (~10 ms of LLVM, twice that as a process's
    first) then runs beside the caller's, where ensure() made the planning wait."""
    global _prefetched
    if _native is None and _prefetched is None:
        with _lock:
            if _native is None and _prefetched is None:
                _prefetched = OnThread(_compile_and_link, "adkit-pool-compile")


def _native_object_code():
    """The pool's object code: prefetch()'s (None when its thread never ran to the end:
    a fork's child has no such thread), or made now."""
    global _prefetched
    started, _prefetched = _prefetched, None
    data = started.result() if started is not None else None
    return data if data is not None else _object_code()


class _Native:
    """The compiled pool: its engine, never freed (workers, and callers on daemon
    threads, may run its code while the interpreter finalizes), and its entry points."""

    def __init__(self, data):
        self.engine = runtime.linked_engine([data])
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.engine))  # immortal, see above
        self.run_address = self._address(RUN_NAME)
        self.init = ctypes.CFUNCTYPE(None)(self._address("adkit_pool_init"))
        self.start = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(
            self._address("adkit_pool_start"))
        self.stop = ctypes.CFUNCTYPE(None)(self._address("adkit_pool_stop"))
        self.run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            self.run_address)

    def _address(self, name):
        address = self.engine.get_function_address(name)
        if not address:
            raise RuntimeError(f"adkit's thread pool has no function {name!r}")
        return address


_lock = threading.RLock()  # compile, link, start and stop one at a time
_native = None  # the compiled pool, once per process
_workers = None  # workers running; None before ensure() and after shutdown()


def usable_cpus():
    """The CPUs this process may run on (os.cpu_count() counts the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def default_workers():
    """Workers besides the caller: one per other CPU this process may run on (its
    affinity mask: taskset, a container's or a Dask worker's share), capped by
    ADKIT_NUM_THREADS (the most threads a job runs on, the caller's included)."""
    count = max(usable_cpus() - 1, 0)
    cap = _config.num_threads()
    return count if cap is None else min(count, cap - 1)


def _link(wait=True, data=None):
    """Link the compiled pool (`data`, else _native_object_code()) and register
    `adkit_pool_run` (once per process, under _lock): ~1.5 ms of a first call's path
    when only ensure() did it, now done by the prefetch thread once its compile is
    done. That thread does not `wait` for the lock: ensure() may hold it while it
    waits for that thread (it then links the code)."""
    global _native
    if not _lock.acquire(blocking=wait):
        return
    try:
        if _native is None:
            native = _Native(data if data is not None else _native_object_code())
            native.init()
            llvm.add_symbol(RUN_NAME, native.run_address)  # now modules may call it
            atexit.register(shutdown)
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _native = native
    finally:
        _lock.release()


def ensure(workers=None):
    """Compile the pool and register `adkit_pool_run` (once per process), and start
    `workers` threads (default: default_workers()), restarting it when the pool runs
    another number. Returns the number of workers running (fewer than asked when the
    system makes no more threads). Call it before a module that calls adkit_pool_run is
    compiled or loaded: its symbol is resolved then (emit_run does)."""
    global _workers
    if workers is None and _workers is not None:
        return _workers  # the common case, from every emit_run
    with _lock:
        _link()
        want = default_workers() if workers is None else workers
        want = max(0, min(int(want), MAX_WORKERS))
        if _workers is not None and (workers is None or want == _workers):
            return _workers
        if _workers is not None:
            _native.stop()
        _workers = _native.start(want)
        return _workers


def threads():
    """How many threads a job runs on: the workers and the caller."""
    return ensure() + 1


def planned_threads():
    """What threads() would say, without compiling or starting the pool."""
    return (default_workers() if _workers is None else _workers) + 1


def shutdown():
    """Stop and join the workers (registered with atexit). A job running on another
    thread is finished by its caller; later jobs run serially until ensure()."""
    global _workers
    with _lock:
        if _native is not None and _workers is not None:
            _native.stop()
        _workers = None


def _after_fork_in_child():
    """In a forked child only the forking thread exists: the workers are gone and a
    mutex may be held, or a condition variable waited on, by a thread that is not
    there. Fresh sync objects and state, then as many workers as the parent had."""
    global _lock, _workers, _prefetched
    _lock = threading.RLock()  # another parent thread may have held it at the fork
    _prefetched = None  # its thread is not in the child
    if _native is None:
        return
    _native.init()
    if _workers is not None:
        _workers = _native.start(_workers)


def run(fn_address, args_address, n):
    """adkit_pool_run from Python (tests, benchmarks): fn and args are addresses."""
    ensure()
    _native.run(fn_address, args_address, n)


def _ensure_before_link(texts):
    """runtime.Compiles.finish's hook: the pool, before code that calls it is linked."""
    if any(RUN_NAME in text for text in texts):
        ensure()


runtime.BEFORE_LINK.append(_ensure_before_link)


def emit_run(builder, module, fn, arg_pointers):
    """Emit adkit_pool_run(fn, [arg_pointers], len(arg_pointers)) at the builder: fn is
    an ir.Function i8*(i8*) (a part; program.py's _trampoline) or a pointer to one,
    arg_pointers pointer values, one per part. The array is stack room in the entry
    block of the builder's function, however often the call runs. Starts compiling
    the pool (prefetch): the module resolves the symbol when it is linked, after
    ensure() (runtime.Compiles.finish calls it, _ensure_before_link)."""
    prefetch()
    run_fn = module.globals.get(RUN_NAME) or ir.Function(module, RUN, name=RUN_NAME)
    array = entry_alloca(builder, PTR, len(arg_pointers))
    for i, pointer in enumerate(arg_pointers):
        builder.store(pointer, builder.gep(array, [ir.Constant(I64, i)], source_etype=PTR))
    return builder.call(run_fn, [fn, array, ir.Constant(I64, len(arg_pointers))])
