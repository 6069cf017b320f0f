"""ak.jit beside jax.jit (and numpy): medians and ratios, one run.

    python benchmarks/jit_vs_jax.py [--quick]
    python benchmarks/jit_vs_jax.py --first-call [--rounds 5] [--cases b,c,d,gmm-small]
    python benchmarks/jit_vs_jax.py --warm-cache [--rounds 5] [--cases b,c,d,gmm-small]

Cases (issue 6): (a) a fused elementwise chain, value and gradient, 1e6 and 1e7 float64;
(b) call overhead on a tiny input; (c) first-call compile time of a ~50-node gradient
graph; (d) an MLP's forward+backward (two hidden layers of 256, batch 128).
`--first-call` (issue 16): the first-call overhead (first call minus a steady call, the
steady call timed once adkit's background compile has finished) of cases b, c, d and of
ADBench's GMM gradient (gmm-small/medium/large, papers/adbench_gmm), for adkit's two
compile modes and jax.jit, in rounds where the frameworks take turns; it prints medians
and the range of the per-round ratios adkit / jax.
`--warm-cache`: the same overhead in a fresh process whose disk cache another process
has filled (adkit's cache of plans and object code; jax's persistent compilation cache,
every entry kept), with adkit's time split into tracing, the key (hashing the traced
graph) and loading the entry (summed over threads: a small graph's first call runs on
numpy while the worker thread computes the key and loads the plan), and the cache hit
itself for both (adkit: key + load; jax: its compile_or_get_cached, which hashes the
lowered module and reads and loads the executable).
Each framework runs in its own subprocess: jax's and llvmlite's LLVMs must not share a
process (they abort together), and a fresh process also makes compile times honest.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

CASES = ["a-1e6", "a-1e7", "b", "c", "d"]
FIRST_CALL_CASES = ["b", "c", "d", "gmm-small", "gmm-medium", "gmm-large"]
HERE = os.path.dirname(os.path.abspath(__file__))


def _time(fn, repeats, warmup=2):
    from _timing import settle  # (this file's folder is on sys.path: it runs as a script)
    for _ in range(warmup):
        fn()
    settle()  # steady calls are native code's, not the numpy tier's
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _chain(np_like, x, n_links=10):
    """A chain of elementwise ops, summed: ~4 ops per link."""
    y = x
    for i in range(n_links):
        y = np_like.sin(np_like.tanh(y * 1.01) * 0.5 + 0.1 * i) + y
    return y.sum() if hasattr(y, "sum") else np_like.sum(y)


def _mlp_data(rng):
    x = rng.standard_normal((128, 64))
    ws = [rng.standard_normal((64, 256)) * 0.1, rng.standard_normal((256, 256)) * 0.1,
          rng.standard_normal((256, 10)) * 0.1]
    return x, ws


def run_adkit(case, repeats):
    import adkit as ak
    import adkit.func as F
    rng = np.random.default_rng(0)
    if case.startswith("a"):
        n = int(float(case.split("-")[1]))
        x = ak.tensor(rng.standard_normal(n))
        f = ak.jit(F.grad_and_value(lambda t: _chain(_AkNp, t, 2)))
        return _time(lambda: f(x), repeats)
    if case == "b":
        f = ak.jit(lambda t: (t * 2.0 + 1.0).tanh())
        x = ak.tensor(rng.standard_normal(10))
        return _time(lambda: f(x), repeats * 50)
    if case == "c":
        x = ak.tensor(rng.standard_normal(1000))
        t0 = time.perf_counter()
        ak.jit(F.grad(lambda t: _chain(_AkNp, t, 12)))(x)
        return time.perf_counter() - t0
    x, ws = _mlp_data(rng)
    x, ws = ak.tensor(x), [ak.tensor(w) for w in ws]

    def loss(ws, x):
        h = (x @ ws[0]).tanh()
        h = (h @ ws[1]).tanh()
        return ((h @ ws[2]) ** 2).mean()
    f = ak.jit(F.grad(loss))
    return _time(lambda: f(ws, x), repeats)


class _AkNp:
    """numpy-style names over adkit tensors, so one chain serves every framework."""

    @staticmethod
    def sin(t):
        return t.sin()

    @staticmethod
    def tanh(t):
        return t.tanh()


def run_jax(case, repeats):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    if case.startswith("a"):
        n = int(float(case.split("-")[1]))
        x = jnp.asarray(rng.standard_normal(n))
        f = jax.jit(jax.value_and_grad(lambda t: _chain(jnp, t, 2)))
        return _time(lambda: f(x)[1].block_until_ready(), repeats)
    if case == "b":
        f = jax.jit(lambda t: jnp.tanh(t * 2.0 + 1.0))
        x = jnp.asarray(rng.standard_normal(10))
        return _time(lambda: f(x).block_until_ready(), repeats * 50)
    if case == "c":
        x = jnp.asarray(rng.standard_normal(1000))
        t0 = time.perf_counter()
        jax.jit(jax.grad(lambda t: _chain(jnp, t, 12)))(x).block_until_ready()
        return time.perf_counter() - t0
    x, ws = _mlp_data(rng)
    x, ws = jnp.asarray(x), [jnp.asarray(w) for w in ws]

    def loss(ws, x):
        h = jnp.tanh(x @ ws[0])
        h = jnp.tanh(h @ ws[1])
        return jnp.mean((h @ ws[2]) ** 2)
    f = jax.jit(jax.grad(loss))
    return _time(lambda: [g.block_until_ready() for g in f(ws, x)], repeats)


def run_numpy(case, repeats):
    """numpy without AD: the forward only (a floor for the value part)."""
    rng = np.random.default_rng(0)
    if case.startswith("a"):
        n = int(float(case.split("-")[1]))
        x = rng.standard_normal(n)
        return _time(lambda: _chain(np, x, 2), repeats)
    if case == "b":
        x = rng.standard_normal(10)
        return _time(lambda: np.tanh(x * 2.0 + 1.0), repeats * 50)
    if case == "d":
        x, ws = _mlp_data(rng)
        return _time(lambda: np.mean((np.tanh(np.tanh(x @ ws[0]) @ ws[1]) @ ws[2]) ** 2),
                     repeats)
    return None


def _first_call_fn(framework, case):
    """A no-argument call of `case` (b, c, d or gmm-<size>) for the framework."""
    rng = np.random.default_rng(0)
    if case.startswith("gmm"):
        sys.path.insert(0, os.path.join(HERE, "..", "papers", "adbench_gmm"))
        import gmm
        tool = "jax-jit" if framework == "jax" else "adkit-jit"
        return gmm.make_tool(tool, gmm.config_data(case.split("-")[1]))[1]
    if framework == "jax":
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        if case == "b":
            f, x = jax.jit(lambda t: jnp.tanh(t * 2.0 + 1.0)), jnp.asarray(rng.standard_normal(10))
            return lambda: f(x).block_until_ready()
        if case == "c":
            x = jnp.asarray(rng.standard_normal(1000))
            f = jax.jit(jax.grad(lambda t: _chain(jnp, t, 12)))
            return lambda: f(x).block_until_ready()
        x, ws = _mlp_data(rng)
        x, ws = jnp.asarray(x), [jnp.asarray(w) for w in ws]
        f = jax.jit(jax.grad(lambda ws, x: jnp.mean((jnp.tanh(jnp.tanh(
            x @ ws[0]) @ ws[1]) @ ws[2]) ** 2)))
        return lambda: [g.block_until_ready() for g in f(ws, x)]
    import adkit as ak
    import adkit.func as F
    if case == "b":
        f, x = ak.jit(lambda t: (t * 2.0 + 1.0).tanh()), ak.tensor(rng.standard_normal(10))
        return lambda: f(x)
    if case == "c":
        x = ak.tensor(rng.standard_normal(1000))
        f = ak.jit(F.grad(lambda t: _chain(_AkNp, t, 12)))
        return lambda: f(x)
    x, ws = _mlp_data(rng)
    x, ws = ak.tensor(x), [ak.tensor(w) for w in ws]
    f = ak.jit(F.grad(lambda ws, x: ((((x @ ws[0]).tanh() @ ws[1]).tanh() @ ws[2]) ** 2)
                      .mean()))
    return lambda: f(ws, x)


def first_call(framework, case, repeats):
    """{"first", "steady", "overhead"} seconds: the first call of a fresh process (which
    includes the import of the framework's compiler: jax's on import, adkit's llvmlite
    on its first compile), and the median call after adkit's compiles have finished."""
    if framework == "adkit-eager":
        import importlib
        importlib.import_module("adkit.codegen.jit").DEFAULT_COMPILE = "eager"
    fn = _first_call_fn("jax" if framework == "jax" else "adkit", case)
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if framework != "jax":
        from adkit.codegen import background
        background.wait()
    steady = _time(fn, max(repeats, 5), warmup=2)
    return {"first": first, "steady": steady, "overhead": first - steady}


def first_call_table(cases, rounds, repeats):
    """Each case in `rounds` rounds, adkit (both modes) and jax taking turns."""
    sys.path.insert(0, HERE)
    from _timing import in_turns
    frameworks = ["adkit", "adkit-eager", "jax"]
    print(f"first-call overhead = first call - steady call; medians of {rounds} rounds; "
          "ratio = adkit / jax per round (min..max)")
    print(f"{'case':<12}{'framework':<24}{'first ms':>10}{'steady ms':>11}"
          f"{'overhead ms':>13}{'/ jax':>8}{'range':>14}")
    for case in cases:
        def one(framework, case=case):
            return _child(["--first-call-worker", framework, case, "--repeats",
                           str(repeats)])
        merged, ratios = in_turns(one, frameworks, rounds, "overhead")
        for name in frameworks:
            r = merged[name]
            if "error" in r or "missing" in r:
                print(f"{case:<12}{name:<24}  {r.get('error') or r.get('missing')}")
                continue
            ratio, spread = _ratio_cells(ratios.get(name))
            print(f"{case:<12}{name:<24}{r['first'] * 1e3:>10.1f}{r['steady'] * 1e3:>11.3f}"
                  f"{r['overhead'] * 1e3:>13.1f}{ratio:>8}{spread:>14}", flush=True)



def _ratio_cells(rs):
    """The median and the range of the per-round ratios, as table cells ("-" for none)."""
    if not rs:
        return "-", "-"
    return f"{statistics.median(rs):.3f}", f"{min(rs):.3f}..{max(rs):.3f}"

def _timed(module, name, totals):
    """Wrap module.name to add its wall time (ms) to totals[name]."""
    fn = getattr(module, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + (time.perf_counter() - t0) * 1e3
    setattr(module, name, timed)


def warm_first_call(framework, case, repeats, cache_dir):
    """first_call with the disk cache in cache_dir (filled by an earlier process):
    jax's persistent cache keeping every entry; also the seconds the cache hits took
    ("hit": from the traced program to code ready to run, the compile a hit replaces)
    and their count (0: a miss). adkit's hit: the plan cache's key (hashing the traced
    graph) and loading its entry (reading, decoding, linking), with the trace timed
    apart. jax's: compiler.compile_or_get_cached (the key, hashing the lowered module,
    and reading and loading the executable), which jax runs after tracing and
    lowering."""
    if framework == "jax":
        return _warm_jax_first_call(case, repeats, cache_dir)
    import adkit  # noqa: F401 -- the modules timed below
    from adkit.codegen import plan_cache
    totals = {}
    _timed(sys.modules["adkit.codegen.jit"], "trace_for", totals)
    _timed(plan_cache, "key", totals)
    _timed(plan_cache, "load", totals)
    timed_load, hits = plan_cache.load, []

    def counted_load(k):
        found = timed_load(k)
        hits.append(found is not None)
        return found
    plan_cache.load = counted_load  # jit.py calls it as plan_cache.load
    result = first_call(framework, case, repeats)
    key, load = totals.get("key", 0) / 1e3, totals.get("load", 0) / 1e3
    return {**result, "trace": totals.get("trace_for", 0) / 1e3, "key": key, "load": load,
            "hit": key + load, "hits": float(sum(hits))}


def _warm_jax_first_call(case, repeats, cache_dir):
    import jax
    from jax._src import compiler, monitoring
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    totals, hits = {}, []
    _timed(compiler, "compile_or_get_cached", totals)  # pxla calls it as compiler.<name>
    monitoring.register_event_listener(
        lambda event, **_: hits.append(1) if event.endswith("/cache_hits") else None)
    result = first_call("jax", case, repeats)
    return {**result, "hit": totals.get("compile_or_get_cached", 0) / 1e3,
            "hits": float(len(hits))}


def warm_cache_table(cases, rounds, repeats):
    """Each case with a warm disk cache: a process fills it, then `rounds` rounds of
    fresh processes, adkit and jax taking turns."""
    import tempfile
    sys.path.insert(0, HERE)
    from _timing import in_turns
    frameworks = ["adkit", "jax"]
    print(f"warm disk cache: overhead = first call - steady call in a fresh process; "
          f"medians of {rounds} rounds; ratio = adkit / jax per round (min..max)")
    print("hit = the disk-cache hit: from the traced program to code ready to run (adkit: "
          "key + load; jax: compiler.compile_or_get_cached, after its trace and lowering)")
    print(f"{'case':<12}{'framework':<10}{'first ms':>10}{'steady ms':>11}"
          f"{'overhead ms':>13}{'trace':>8}{'key':>7}{'load':>7}{'hit':>7}{'/ jax':>8}"
          f"{'range':>14}")
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="adkit-warm-") as cache:
            def one(framework, case=case, cache=cache):
                return _child(["--warm-cache-worker", framework, case, cache, "--repeats",
                               str(repeats)], cache=cache)
            for framework in frameworks:  # fills the caches
                one(framework)
            merged, ratios = in_turns(one, frameworks, rounds, "overhead")
        for name in frameworks:
            r = merged[name]
            if "error" in r or "missing" in r:
                print(f"{case:<12}{name:<10}  {r.get('error') or r.get('missing')}")
                continue
            ratio, spread = _ratio_cells(ratios.get(name))
            split = "".join(f"{r[k] * 1e3:>{w}.1f}" if k in r else f"{'':>{w}}"
                            for k, w in (("trace", 8), ("key", 7), ("load", 7),
                                         ("hit", 7)))
            if r.get("hits") == 0:
                split += " (a miss)"
            print(f"{case:<12}{name:<10}{r['first'] * 1e3:>10.1f}{r['steady'] * 1e3:>11.3f}"
                  f"{r['overhead'] * 1e3:>13.1f}{split}{ratio:>8}{spread:>14}", flush=True)


def _child(args, cache=None):
    """The JSON a worker subprocess prints last (no on-disk compile cache unless one is
    given: first calls are honest), or {"error": ...}."""
    env = dict(os.environ, ADKIT_DISABLE_CACHE="1")
    if cache is not None:
        env.update(ADKIT_CACHE_DIR=cache, ADKIT_DISABLE_CACHE="0")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                         capture_output=True, text=True, env=env, check=False)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(lines[-1])


RUNNERS = {"adkit": run_adkit, "jax": run_jax, "numpy (forward only)": run_numpy}


def worker(name, case, repeats):
    try:
        print(json.dumps({"seconds": RUNNERS[name](case, repeats)}))
    except ImportError as e:
        print(json.dumps({"missing": str(e)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "CASE"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--first-call", action="store_true", help="first-call overheads")
    parser.add_argument("--first-call-worker", nargs=2, metavar=("FRAMEWORK", "CASE"))
    parser.add_argument("--warm-cache", action="store_true",
                        help="first-call overheads with a warm disk cache")
    parser.add_argument("--warm-cache-worker", nargs=3,
                        metavar=("FRAMEWORK", "CASE", "CACHE_DIR"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default=",".join(FIRST_CALL_CASES))
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    if args.worker:
        return worker(args.worker[0], args.worker[1], repeats)
    if args.first_call_worker:
        return print(json.dumps(first_call(*args.first_call_worker, repeats)))
    if args.warm_cache_worker:
        framework, case, cache = args.warm_cache_worker
        return print(json.dumps(warm_first_call(framework, case, repeats, cache)))
    if args.first_call:
        return first_call_table(args.cases.split(","), args.rounds, repeats)
    if args.warm_cache:
        return warm_cache_table(args.cases.split(","), args.rounds, repeats)
    print(f"{'case':<8}{'framework':<24}{'median':>12}{'jax / this':>12}")
    for case in CASES:
        results = {}
        for name in RUNNERS:
            # no on-disk compile cache: case (c) measures a real compile
            env = dict(os.environ, ADKIT_DISABLE_CACHE="1")
            out = subprocess.run([sys.executable, __file__, "--worker", name, case,
                                  "--repeats", str(repeats)], capture_output=True, text=True,
                                 env=env)
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"
            results[name] = json.loads(line).get("seconds")
        base = results.get("jax")
        for name, sec in results.items():
            if sec is None:
                continue
            ratio = f"{base / sec:.2f}x" if base else "-"
            print(f"{case:<8}{name:<24}{sec * 1e3:>10.3f}ms{ratio:>12}")


if __name__ == "__main__":
    main()
