"""ADBench's GMM objective and gradient: adkit (eager, jit) beside jax.jit, torch, HIPS autograd.

    python benchmarks/gmm.py [--quick] [--configs small,medium,large] [--tools ...]

The problem, the data and the implementations are those of papers/adbench_gmm/gmm.py
(Srajer, Kukelova, Fitzgibbon 2018; microsoft/ADBench). For each configuration and tool it
prints the median time of the objective alone and of objective + gradient, the paper's
ratio gradient / objective, the gradient time relative to jax.jit's, the first call
(trace + compile for the jit tools, with adkit's disk cache off; adkit's first call runs
on numpy while LLVM compiles in the background) and its overhead (first call minus a
steady one; `benchmarks/jit_vs_jax.py --first-call` compares it with jax's in rounds). Each (tool,
configuration) runs in its own subprocess:
jax's and llvmlite's LLVMs must not share a process, and a fresh process makes first-call
times honest. Tools that are not installed are skipped; the script always exits 0.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "papers", "adbench_gmm"))

import gmm  # noqa: E402  (papers/adbench_gmm/gmm.py)

TOOLS = ["numpy", "manual", "adkit", "adkit-backward", "adkit-jit", "jax-jit", "torch",
         "autograd"]
LABELS = {"numpy": "numpy (objective only)", "manual": "numpy, hand-derived grad",
          "adkit": "adkit eager (func.grad)", "adkit-backward": "adkit eager (.backward)",
          "adkit-jit": "adkit jit", "jax-jit": "jax.jit", "torch": "torch eager",
          "autograd": "HIPS autograd"}
BASE = "jax-jit"


def _median(fn, repeats, min_seconds):
    """Median over `repeats` calls, more if they take less than min_seconds in all."""
    samples = []
    t_start = time.perf_counter()
    while len(samples) < repeats or time.perf_counter() - t_start < min_seconds:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if len(samples) >= 200:
            break
    return statistics.median(samples)


def run(tool, config, repeats, min_seconds):
    data = gmm.config_data(config)
    objective, value_and_grad, _ = gmm.make_tool(tool, data)
    result = {}
    t0 = time.perf_counter()
    (value_and_grad or objective)()
    result["first"] = time.perf_counter() - t0       # trace + compile for the jit tools
    objective()
    if "adkit.codegen" in sys.modules:  # the medians below time native code
        sys.modules["adkit.codegen"].background.wait()
    result["objective"] = _median(objective, repeats, min_seconds)
    if value_and_grad is not None:
        result["gradient"] = _median(value_and_grad, repeats, min_seconds)
    return result


def worker(tool, config, repeats, min_seconds):
    try:
        out = run(tool, config, repeats, min_seconds)
    except ImportError as e:
        out = {"missing": str(e)}
    print(json.dumps(out), flush=True)


def _ms(seconds):
    return f"{seconds * 1e3:.2f}" if seconds is not None else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--configs", default="small,medium,large")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "CONFIG"))
    args = parser.parse_args()
    repeats, min_seconds = (3, 0.2) if args.quick else (args.repeats, 1.0)
    if args.worker:
        return worker(args.worker[0], args.worker[1], repeats, min_seconds)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# {os.cpu_count()} CPUs, load average {load:.2f} at start; medians of >= {repeats}"
          f" calls{' (--quick)' if args.quick else ''}")
    print(f"{'config (d, k, n)':<24}{'tool':<26}{'objective':>11}{'obj+grad':>11}"
          f"{'grad/obj':>10}{'grad/jax':>10}{'first call':>12}{'overhead':>10}")
    print(f"{'':<24}{'':<26}{'ms':>11}{'ms':>11}{'(paper)':>10}{'(x)':>10}{'ms':>12}"
          f"{'ms':>10}")
    for config in args.configs.split(","):
        results = {}
        for tool in args.tools.split(","):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", tool, config,
                   "--repeats", str(args.repeats)]
            if args.quick:
                cmd.append("--quick")
            # no on-disk compile cache: the first call is an honest trace + compile
            env = dict(os.environ, ADKIT_DISABLE_CACHE="1")
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            lines = proc.stdout.strip().splitlines()
            try:
                results[tool] = json.loads(lines[-1])
            except (IndexError, json.JSONDecodeError):
                err = proc.stderr.strip().splitlines()
                results[tool] = {"error": err[-1] if err else f"exit {proc.returncode}"}
        base = results.get(BASE, {}).get("gradient")
        label = f"{config} {tuple(gmm.CONFIGS[config])}"
        for tool, r in results.items():
            name = LABELS.get(tool, tool)
            if "missing" in r or "error" in r:
                print(f"{label:<24}{name:<26}  {r.get('missing') or r.get('error')}")
                continue
            g, o = r.get("gradient"), r["objective"]
            ratio = f"{g / o:.2f}" if g else "-"
            vs = f"{g / base:.2f}x" if g and base else "-"
            print(f"{label:<24}{name:<26}{_ms(o):>11}{_ms(g):>11}{ratio:>10}{vs:>10}"
                  f"{_ms(r['first']):>12}{_ms(r['first'] - (g or o)):>10}")
            label = ""
    return 0


if __name__ == "__main__":
    sys.exit(main())
