"""The persistent thread pool (adkit/codegen/pool.py) against a thread made per call,
on 2 threads (the caller and one worker), in rounds with the forms taking turns.

    python benchmarks/thread_pool.py [--rounds 15] [--size 1000000]

1. Cost per call of a small 2-part job (y += 2x over 2 x 256 doubles): through the pool
   vs pthread_create + pthread_join per call (what program.py emits today: part 1 on
   a new thread, part 0 on the caller), vs both parts on the caller. Back to back (a
   native loop of calls: the worker is still spinning for the next job) and spaced
   (1 ms apart: the worker went to sleep on its condition variable).
2. Kernels split in 2 parts through the pool vs 1 thread: memory-bound (y += 2x over
   --size doubles) and compute-bound (y = exp(x), libm's scalar exp).
Each part is a record [x, y, start, stop] given to a part function jitted here; the
forms are emitted with llvmlite here too. Reports medians and ranges of per-round
ratios, and how loaded the machine was: other processes' share of all CPUs while it
ran (from /proc/stat, less this process's own CPU time) and the load averages.
"""
import argparse
import ctypes
import os
import statistics
import time

import numpy as np
from llvmlite import ir

from adkit.codegen import pool, runtime

I32, I64, F64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()
TINY = 256  # doubles per part of the small job


def _loop(b, start, stop, body):
    """for (i = start; i < stop; i++) body(i)."""
    i = b.alloca(I64)
    b.store(start, i)
    head, loop, after = (b.append_basic_block(s) for s in ("head", "loop", "after"))
    b.branch(head)
    b.position_at_end(head)
    k = b.load(i, typ=I64)
    b.cbranch(b.icmp_signed("<", k, stop), loop, after)
    b.position_at_end(loop)
    body(k)
    b.store(b.add(k, ir.Constant(I64, 1)), i)
    b.branch(head)
    b.position_at_end(after)


def _part(module, name, element):
    """i8* name(record [x, y, start, stop]): y[i] = element(b, x[i], y[i]) for i in
    [start, stop)."""
    fn = ir.Function(module, pool.PART, name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    field = [b.gep(fn.args[0], [ir.Constant(I64, k)], source_etype=I64) for k in range(4)]
    x, y = b.load(field[0], typ=PTR), b.load(field[1], typ=PTR)
    start, stop = b.load(field[2], typ=I64), b.load(field[3], typ=I64)

    def body(i):
        xi, yi = (b.gep(p, [i], source_etype=F64) for p in (x, y))
        b.store(element(b, b.load(xi, typ=F64), b.load(yi, typ=F64)), yi)
    _loop(b, start, stop, body)
    b.ret(ir.Constant(PTR, None))
    return fn


def _forms(module, part):
    """Three ways to run the parts r0 and r1: `pool` (emit_run), `threads` (a pthread
    per call for r1, r0 on the caller, then join) and `serial` (both on the caller);
    and `repeat_<form>(r0, r1, count)`, a native loop of calls (no ctypes per call)."""
    sig = ir.FunctionType(VOID, [PTR, PTR])
    forms = {}
    for form in ("pool", "threads", "serial"):
        fn = ir.Function(module, sig, name=f"{part.name}_{form}")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        r0, r1 = fn.args
        if form == "pool":
            pool.emit_run(b, module, part, [r0, r1])
        elif form == "serial":
            b.call(part, [r0])
            b.call(part, [r1])
        else:
            _emit_thread_per_call(b, module, part, r0, r1)
        b.ret_void()
        forms[form] = fn
        rep = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64]),
                          name=f"{part.name}_repeat_{form}")
        b = ir.IRBuilder(rep.append_basic_block("entry"))
        _loop(b, ir.Constant(I64, 0), rep.args[2],
              lambda i, b=b, fn=fn, rep=rep: b.call(fn, rep.args[:2]))
        b.ret_void()


def _emit_thread_per_call(b, module, part, r0, r1):
    """program.py's KernelCall._emit_threads today, for two parts."""
    create = module.globals.get("pthread_create") or ir.Function(
        module, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]), name="pthread_create")
    join = module.globals.get("pthread_join") or ir.Function(
        module, ir.FunctionType(I32, [I64, PTR]), name="pthread_join")
    thread = b.alloca(I64)
    rc = b.call(create, [thread, ir.Constant(PTR, None), part, r1])
    failed = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
    with b.if_then(failed):  # no thread: its share runs here
        b.call(part, [r1])
    b.call(part, [r0])
    with b.if_then(b.not_(failed)):
        b.call(join, [b.load(thread, typ=I64), ir.Constant(PTR, None)])


def build():
    module = ir.Module(name="thread_pool_bench")
    module.triple = runtime.target_machine().triple
    exp = ir.Function(module, ir.FunctionType(F64, [F64]), name="llvm.exp.f64")
    axpy = _part(module, "axpy", lambda b, x, y: b.fadd(b.fmul(x, ir.Constant(F64, 2.0)),
                                                        y))
    # not named "exp": libm's exp, which llvm.exp calls, would resolve to it
    exp_part = _part(module, "exp_part", lambda b, x, y: b.call(exp, [x]))
    _forms(module, axpy)
    _forms(module, exp_part)
    return runtime.compile_module(module)


class Job:
    """Two part records over x and y (split at the middle) and the compiled forms."""

    def __init__(self, native, kind, n):
        self.x = np.random.default_rng(0).uniform(-1, 1, n)
        self.y = np.zeros(n)
        half = n // 2
        self.records = np.array([[self.x.ctypes.data, self.y.ctypes.data, 0, half],
                                 [self.x.ctypes.data, self.y.ctypes.data, half, n]],
                                np.int64)
        self.busy = {}
        r0, r1 = (self.records.ctypes.data + 32 * k for k in range(2))
        self.args = (r0, r1)
        forms = ("pool", "threads", "serial")
        self.once = {f: native.function(f"{kind}_{f}", None, ctypes.c_void_p,
                                        ctypes.c_void_p) for f in forms}
        self.repeat = {f: native.function(f"{kind}_repeat_{f}", None, ctypes.c_void_p,
                                          ctypes.c_void_p, ctypes.c_int64)
                       for f in forms}

    def back_to_back_us(self, form, calls):
        t0 = time.perf_counter()
        self.repeat[form](*self.args, calls)
        return (time.perf_counter() - t0) / calls * 1e6

    def spaced_us(self, form, calls, gap=1e-3):
        samples = []
        for _ in range(calls):
            time.sleep(gap)
            t0 = time.perf_counter()
            self.once[form](*self.args)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples) * 1e6

    def ms(self, form, calls=3):
        """The best of `calls` calls (the others' load only ever adds time); notes the
        process's CPU time over wall time for the calls in `self.busy[form]` (near 2
        when both threads had a core at once, near 1 when they took turns)."""
        wall, cpu = time.perf_counter(), time.process_time()
        best = min(self.back_to_back_us(form, 1) for _ in range(calls)) / 1e3
        self.busy.setdefault(form, []).append(
            (time.process_time() - cpu) / (time.perf_counter() - wall))
        return best


def _busy_seconds():
    """CPU seconds all processors spent busy since boot (steal counts: another guest
    had the core)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds():
    t = os.times()
    return t.user + t.system


class Load:
    """How much of the machine other processes used while the benchmark ran."""

    def __init__(self):
        self.t0, self.busy0 = time.perf_counter(), _busy_seconds()
        self.own0 = _own_seconds()
        self.loadavg0 = os.getloadavg()

    def report(self):
        elapsed = time.perf_counter() - self.t0
        others = (_busy_seconds() - self.busy0) - (_own_seconds() - self.own0)
        cpus = os.cpu_count() or 1
        share = max(others, 0) / (elapsed * cpus)
        before = ", ".join(f"{v:.2f}" for v in self.loadavg0)
        after = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        return (f"{cpus} CPUs; other processes used {share:.0%} of them during the "
                f"{elapsed:.0f} s run; load averages (1, 5, 15 min) {before} before, "
                f"{after} after")


def _spread(values, fmt="{:.2f}"):
    """median [min, max]"""
    return (fmt.format(statistics.median(values)) + " [" + fmt.format(min(values)) + ", "
            + fmt.format(max(values)) + "]")


def _in_turns(rounds, forms, measure):
    """{form: [one sample per round]}, the forms taking turns (the order flips each
    round, so neither always runs first); one round of warm-up first."""
    samples = {f: [] for f in forms}
    for r in range(rounds + 1):
        for form in (forms if r % 2 else forms[::-1]):
            value = measure(form)
            if r:
                samples[form].append(value)
    return samples


def small_job(native, rounds, calls):
    job = Job(native, "axpy", 2 * TINY)
    forms = ("pool", "threads", "serial")
    print(f"\nSmall 2-part job (y += 2x over 2 x {TINY} doubles), us per call, "
          f"median [min, max] over {rounds} rounds:")
    print("| calls | pool | pthread per call | serial (no threads) | pthread / pool "
          "| pool - serial |")
    print("|---|---|---|---|---|---|")
    modes = {"back to back": lambda f: job.back_to_back_us(f, calls),
             "1 ms apart": lambda f: job.spaced_us(f, max(calls // 40, 20))}
    for mode, measure in modes.items():
        s = _in_turns(rounds, forms, measure)
        ratio = [t / p for t, p in zip(s["threads"], s["pool"])]
        over = [p - q for p, q in zip(s["pool"], s["serial"])]
        print(f"| {mode} | {_spread(s['pool'])} | {_spread(s['threads'])} | "
              f"{_spread(s['serial'])} | {_spread(ratio, '{:.1f}x')} | {_spread(over)} |")


def kernels(native, rounds, sizes):
    print(f"\nKernels split in 2 parts (pool, 2 threads) vs 1 thread, ms per call, "
          f"median [min, max] over {rounds} rounds:")
    print("| kernel | n | 1 thread | pool, 2 threads | pthread per call, 2 threads "
          "| 1 thread / pool | pool's CPU / wall |")
    print("|---|---|---|---|---|---|---|")
    for kind, label in (("axpy", "y += 2x (memory-bound)"),
                        ("exp_part", "y = exp(x) (compute-bound)")):
        job = Job(native, kind, sizes[kind])
        s = _in_turns(rounds, ("serial", "pool", "threads"), job.ms)
        speedup = [one / p for one, p in zip(s["serial"], s["pool"])]
        print(f"| {label} | {sizes[kind]:.0e} | {_spread(s['serial'])} | "
              f"{_spread(s['pool'])} | {_spread(s['threads'])} | "
              f"{_spread(speedup, '{:.2f}x')} | {_spread(job.busy['pool'])} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1_000_000, help="exp's n")
    parser.add_argument("--memory-size", type=int, default=10_000_000,
                        help="y += 2x's n (larger than the last-level cache)")
    args = parser.parse_args()
    load = Load()
    workers = pool.ensure(1)  # 2 threads: the caller and one worker
    native = build()
    print(f"pool: {workers} worker + the caller; spins before sleeping: worker "
          f"{pool.WORKER_SPINS}, caller {pool.CALLER_SPINS}")
    small_job(native, args.rounds, args.calls)
    kernels(native, args.rounds, {"axpy": args.memory_size, "exp_part": args.size})
    print("\nMachine: " + load.report())


if __name__ == "__main__":
    main()
