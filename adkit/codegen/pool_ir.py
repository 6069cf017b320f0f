"""The persistent native thread pool's code, written in LLVM IR (pool.py compiles it,
starts and stops its threads).

Owns: `build_module()` (the pool's llvmlite.ir.Module), the types and names compiled
code reaches it by (`PART`, `RUN`, `RUN_NAME`), its limits and spin counts.
Does not: compile, load or start anything (pool.py).

Native API: void adkit_pool_run(i8* (*fn)(i8*), i8** args, i64 n) runs fn(args[i]) for
every i < n on the pool's threads and the caller's, and returns when all are done. Parts
are claimed with an atomic counter. Compiled modules reach it by name (add_symbol), never
by address: object code from the disk cache is loaded into other processes.

Protocol (one job at a time; `mutex` guards the job's description and `active`):
- the caller trylocks `run_mutex`; if another job holds it (a second Python thread, or a
  part calling the pool again) the caller runs every part itself, so nothing can wait
  on itself or on a busy pool;
- under `mutex` it waits until `active` (workers still inside the previous job) is 0,
  since such a worker may still bump the part counter; then it publishes fn, args, n,
  resets the counters, bumps `generation` and wakes the workers;
- a worker joins a job only under `mutex` and only when `generation` moved, reading the
  job's description there, so a late waker sees the newest job whole or not at all;
- the caller takes parts too, then waits for `done == n` (a short spin, then a condition
  variable the worker finishing the last part broadcasts).
A stop flag makes workers leave after their current part (the caller finishes the job);
in a process other than the pool's (a fork the at-fork hook did not see) or with no
workers, adkit_pool_run runs the parts serially.
"""

from llvmlite import ir

from . import runtime

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
PART = ir.FunctionType(PTR, [PTR])  # i8* part(i8* arg), a pthread start routine's type
PART_PTR = ir.PointerType(PART)
RUN = ir.FunctionType(VOID, [PTR, PTR, I64])
RUN_NAME = "adkit_pool_run"
MAX_WORKERS = 256
SYNC_WORDS = 8  # 64 bytes: room for glibc's pthread_mutex_t (40) and pthread_cond_t (48)
# Spins before sleeping (each a load and a `pause`, ~25 ns on Zen 4, so ~50 and ~25 us):
# a worker waits this long for the next job, since kernels come in bursts and waking a
# sleeping worker costs ~4 us more per job (benchmarks/thread_pool.py); the caller waits
# less for the last part (it is usually nearly done).
WORKER_SPINS = 1 << 11
CALLER_SPINS = 1 << 10

LIBC = {  # resolved in-process (glibc >= 2.34 has pthread in libc itself)
    "pthread_mutex_init": (I32, [PTR, PTR]), "pthread_mutex_lock": (I32, [PTR]),
    "pthread_mutex_unlock": (I32, [PTR]), "pthread_mutex_trylock": (I32, [PTR]),
    "pthread_cond_init": (I32, [PTR, PTR]), "pthread_cond_wait": (I32, [PTR, PTR]),
    "pthread_cond_broadcast": (I32, [PTR]), "pthread_create": (I32, [PTR, PTR, PTR, PTR]),
    "pthread_join": (I32, [I64, PTR]), "getpid": (I32, []),
}
SYNC = ("mutex", "run_mutex", "work_cond", "done_cond")
COUNTERS = ("generation", "next", "done", "active", "stop", "workers", "n")


class _Module:
    """The pool's LLVM module: its state as internal globals (each on its own cache
    line, so the part counter and the done counter do not false-share), libc external."""

    def __init__(self):
        self.module = ir.Module(name="adkit_pool")
        self.module.triple = runtime.target_machine().triple
        self.g = {}
        for name in SYNC:
            self._global(name, ir.ArrayType(I64, SYNC_WORDS))
        for name in COUNTERS:
            self._global(name, I64)
        self._global("fn", PTR)
        self._global("args", PTR)
        self._global("pid", I32)
        self._global("threads", ir.ArrayType(I64, MAX_WORKERS))
        self.libc = {name: ir.Function(self.module, ir.FunctionType(ret, args), name=name)
                     for name, (ret, args) in LIBC.items()}
        self.pause = None
        if self.module.triple.startswith(("x86_64", "i686", "i386")):
            self.pause = ir.Function(self.module, ir.FunctionType(VOID, []),
                                     name="llvm.x86.sse2.pause")

    def _global(self, name, typ):
        gv = ir.GlobalVariable(self.module, typ, "adkit_pool." + name)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(typ, None)
        gv.align = 64
        self.g[name] = gv

    def function(self, name, ftype, internal=True):
        fn = ir.Function(self.module, ftype, name=name)
        if internal:
            fn.linkage = "internal"
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    # --- small emitters ---------------------------------------------------------------
    def call(self, b, name, *args):
        return b.call(self.libc[name], list(args))

    def load(self, b, name, typ=I64):
        align = 4 if typ == I32 else 8
        return b.load_atomic(self.g[name], "acquire", align, typ=typ)

    def store(self, b, name, value):
        # an atomic exchange: llvmlite 0.50's store_atomic wants a typed pointer
        b.atomic_rmw("xchg", self.g[name], value, "release")

    def add(self, b, name, value):
        """Atomically add to a counter; returns the old value."""
        return b.atomic_rmw("add", self.g[name], ir.Constant(I64, value), "acq_rel")

    def lock(self, b):
        self.call(b, "pthread_mutex_lock", self.g["mutex"])

    def unlock(self, b):
        self.call(b, "pthread_mutex_unlock", self.g["mutex"])

    def relax(self, b):
        if self.pause is not None:  # tells the core (and its SMT sibling) we are spinning
            b.call(self.pause, [])


def _loop(b, test, body):
    """while (test()) body(): test and body emit at the builder's position."""
    head, loop, after = (b.append_basic_block(s) for s in ("while", "do", "end"))
    b.branch(head)
    b.position_at_end(head)
    b.cbranch(test(), loop, after)
    b.position_at_end(loop)
    body()
    b.branch(head)
    b.position_at_end(after)


def entry_alloca(b, typ, count=1):
    """Stack room in the entry block of b's function: made once per call, where an
    alloca in a loop would grow the stack each time round."""
    entry = b
    if b.block is not b.function.entry_basic_block:
        entry = ir.IRBuilder()  # (one block through two builders would confuse them)
        entry.position_at_start(b.function.entry_basic_block)
    return entry.alloca(typ, size=None if count == 1 else ir.Constant(I64, count))


def _spin(m, b, keep_waiting, spins):
    """Spin at most `spins` times while keep_waiting() (emitted each time) holds."""
    k = entry_alloca(b, I64)
    b.store(ir.Constant(I64, 0), k)

    def test():
        more = b.icmp_signed("<", b.load(k, typ=I64), ir.Constant(I64, spins))
        return b.and_(more, keep_waiting())

    def body():
        m.relax(b)
        b.store(b.add(b.load(k, typ=I64), ir.Constant(I64, 1)), k)
    _loop(b, test, body)


def _emit_init(m):
    """void adkit_pool_init(): fresh sync objects and an idle state. Run once before any
    job, and in a forked child (where a thread that no longer exists may hold a mutex
    or wait on a condition variable, and `active` may count vanished workers)."""
    _, b = m.function("adkit_pool_init", ir.FunctionType(VOID, []), internal=False)
    null = ir.Constant(PTR, None)
    for name in SYNC:
        kind = "mutex" if name.endswith("mutex") else "cond"
        m.call(b, f"pthread_{kind}_init", m.g[name], null)
    for name in ("active", "stop", "workers", "next", "done", "n"):
        m.store(b, name, ir.Constant(I64, 0))
    b.ret_void()


def _emit_work(m):
    """void work(part fn, i8** args, i64 n, i1 worker): claim parts until none is left
    (a worker also stops claiming when the pool stops). The worker that finishes the
    last part wakes a caller that went to sleep; the broadcast under the mutex after
    the count went up cannot be lost (the caller tests the count under the mutex)."""
    fn, b = m.function("adkit_pool.work", ir.FunctionType(VOID, [PART_PTR, PTR, I64, I1]))
    part, args, n, worker = fn.args
    head, run, leave = (fn.append_basic_block(s) for s in ("claim", "run", "leave"))
    b.branch(head)
    b.position_at_end(head)
    stopping = b.and_(worker, b.icmp_signed("!=", m.load(b, "stop"), ir.Constant(I64, 0)))
    with b.if_then(stopping, likely=False):
        b.ret_void()
    i = m.add(b, "next", 1)
    b.cbranch(b.icmp_signed("<", i, n), run, leave)
    b.position_at_end(run)
    b.call(part, [b.load(b.gep(args, [i], source_etype=PTR), typ=PTR)])
    finished = b.add(m.add(b, "done", 1), ir.Constant(I64, 1))
    with b.if_then(b.and_(worker, b.icmp_signed("==", finished, n))):
        m.lock(b)
        m.call(b, "pthread_cond_broadcast", m.g["done_cond"])
        m.unlock(b)
    b.branch(head)
    b.position_at_end(leave)
    b.ret_void()
    return fn


def _emit_worker(m, work):
    """i8* worker(i8* generation): wait for a job newer than the last one seen, run
    parts of it, tell a waiting caller when no worker is inside it any more; leave when
    the pool stops."""
    fn, b = m.function("adkit_pool.worker", PART)
    seen = b.alloca(I64)
    b.store(b.ptrtoint(fn.args[0], I64), seen)
    zero = ir.Constant(I64, 0)

    def idle():  # no new job and no stop
        same = b.icmp_signed("==", m.load(b, "generation"), b.load(seen, typ=I64))
        return b.and_(same, b.icmp_signed("==", m.load(b, "stop"), zero))
    top = fn.append_basic_block("top")
    b.branch(top)
    b.position_at_end(top)
    _spin(m, b, idle, WORKER_SPINS)
    m.lock(b)
    _loop(b, idle, lambda: m.call(b, "pthread_cond_wait", m.g["work_cond"], m.g["mutex"]))
    with b.if_then(b.icmp_signed("!=", m.load(b, "stop"), zero), likely=False):
        m.unlock(b)
        b.ret(ir.Constant(PTR, None))
    b.store(m.load(b, "generation"), seen)  # join this job, under the mutex
    m.add(b, "active", 1)
    job = [b.inttoptr(b.ptrtoint(m.load(b, "fn", PTR), I64), PART_PTR),
           m.load(b, "args", PTR), m.load(b, "n")]
    m.unlock(b)
    b.call(work, job + [ir.Constant(I1, 1)])
    m.lock(b)
    was = m.add(b, "active", -1)
    with b.if_then(b.icmp_signed("==", was, ir.Constant(I64, 1))):
        m.call(b, "pthread_cond_broadcast", m.g["done_cond"])
    m.unlock(b)
    b.branch(top)
    return fn


def _emit_serial(m):
    """void serial(part fn, i8** args, i64 n): every part on the calling thread."""
    fn, b = m.function("adkit_pool.serial", ir.FunctionType(VOID, [PART_PTR, PTR, I64]))
    part, args, n = fn.args
    i = b.alloca(I64)
    b.store(ir.Constant(I64, 0), i)

    def body():
        k = b.load(i, typ=I64)
        b.call(part, [b.load(b.gep(args, [k], source_etype=PTR), typ=PTR)])
        b.store(b.add(k, ir.Constant(I64, 1)), i)
    _loop(b, lambda: b.icmp_signed("<", b.load(i, typ=I64), n), body)
    b.ret_void()
    return fn


def _emit_run(m, work, serial):
    """void adkit_pool_run(part fn, i8** args, i64 n): see the module's docstring."""
    fn, b = m.function(RUN_NAME, ir.FunctionType(VOID, [PART_PTR, PTR, I64]),
                       internal=False)
    part, args, n = fn.args
    zero = ir.Constant(I64, 0)
    alone = b.or_(b.icmp_signed("<=", n, ir.Constant(I64, 1)),
                  b.icmp_signed("==", m.load(b, "workers"), zero))
    with b.if_then(alone, likely=False):
        b.call(serial, [part, args, n])
        b.ret_void()
    forked = b.icmp_signed("!=", m.call(b, "getpid"), m.load(b, "pid", I32))
    with b.if_then(forked, likely=False):  # a fork the at-fork hook did not see
        b.call(serial, [part, args, n])
        b.ret_void()
    taken = m.call(b, "pthread_mutex_trylock", m.g["run_mutex"])
    with b.if_then(b.icmp_signed("!=", taken, ir.Constant(I32, 0)), likely=False):
        b.call(serial, [part, args, n])  # another job holds the pool (or this thread does)
        b.ret_void()
    m.lock(b)
    _loop(b, lambda: b.icmp_signed("!=", m.load(b, "active"), zero),
          lambda: m.call(b, "pthread_cond_wait", m.g["done_cond"], m.g["mutex"]))
    m.store(b, "fn", b.inttoptr(b.ptrtoint(part, I64), PTR))
    m.store(b, "args", args)
    m.store(b, "n", n)
    m.store(b, "next", zero)
    m.store(b, "done", zero)
    m.add(b, "generation", 1)
    m.call(b, "pthread_cond_broadcast", m.g["work_cond"])
    m.unlock(b)
    b.call(work, [part, args, n, ir.Constant(I1, 0)])

    def unfinished():
        return b.icmp_signed("!=", m.load(b, "done"), n)
    _spin(m, b, unfinished, CALLER_SPINS)
    with b.if_then(unfinished(), likely=False):
        m.lock(b)
        _loop(b, unfinished,
              lambda: m.call(b, "pthread_cond_wait", m.g["done_cond"], m.g["mutex"]))
        m.unlock(b)
    m.call(b, "pthread_mutex_unlock", m.g["run_mutex"])
    b.ret_void()


def _emit_start(m, worker):
    """i64 adkit_pool_start(i64 count): start up to `count` workers (fewer if a thread
    cannot be made: the callers run more parts themselves); returns how many started."""
    fn, b = m.function("adkit_pool_start", ir.FunctionType(I64, [I64]), internal=False)
    m.store(b, "stop", ir.Constant(I64, 0))
    m.store(b, "pid", m.call(b, "getpid"))
    first = b.inttoptr(m.load(b, "generation"), PTR)  # the newest job a worker skips
    i = b.alloca(I64)
    b.store(ir.Constant(I64, 0), i)
    head, make, made, done = (fn.append_basic_block(s)
                              for s in ("head", "make", "made", "done"))
    b.branch(head)
    b.position_at_end(head)
    k = b.load(i, typ=I64)
    b.cbranch(b.icmp_signed("<", k, fn.args[0]), make, done)
    b.position_at_end(make)
    slot = b.gep(m.g["threads"], [ir.Constant(I64, 0), k],
                 source_etype=m.g["threads"].value_type)
    rc = m.call(b, "pthread_create", slot, ir.Constant(PTR, None), worker, first)
    b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), made, done)
    b.position_at_end(made)
    b.store(b.add(k, ir.Constant(I64, 1)), i)
    b.branch(head)
    b.position_at_end(done)
    started = b.load(i, typ=I64)
    m.store(b, "workers", started)
    b.ret(started)


def _emit_stop(m):
    """void adkit_pool_stop(): new jobs run serially from now on; the workers leave
    after their current part (a running job's caller finishes it) and are joined."""
    _, b = m.function("adkit_pool_stop", ir.FunctionType(VOID, []), internal=False)
    count = m.load(b, "workers")
    m.store(b, "workers", ir.Constant(I64, 0))
    m.lock(b)
    m.store(b, "stop", ir.Constant(I64, 1))
    m.call(b, "pthread_cond_broadcast", m.g["work_cond"])
    m.unlock(b)
    i = b.alloca(I64)
    b.store(ir.Constant(I64, 0), i)

    def join():
        k = b.load(i, typ=I64)
        slot = b.gep(m.g["threads"], [ir.Constant(I64, 0), k],
                     source_etype=m.g["threads"].value_type)
        m.call(b, "pthread_join", b.load(slot, typ=I64), ir.Constant(PTR, None))
        b.store(b.add(k, ir.Constant(I64, 1)), i)
    _loop(b, lambda: b.icmp_signed("<", b.load(i, typ=I64), count), join)
    b.ret_void()


def build_module():
    """The pool's llvmlite.ir.Module (what ensure() compiles)."""
    m = _Module()
    work, serial = _emit_work(m), _emit_serial(m)
    worker = _emit_worker(m, work)
    _emit_init(m)
    _emit_start(m, worker)
    _emit_stop(m)
    _emit_run(m, work, serial)
    return m.module
