"""Reverse mode through a long scan with at most s stored carries: peak memory, time and
recomputed steps against the number of steps n, for `checkpoint=None`, `"sqrt"` and a
fixed s, beside the closed forms of Chen et al. (2016) and Griewank & Walther (2000).

    python papers/checkpointing/scan_checkpointing.py [--steps 1000,3000,10000,30000,100000]
        [--policies none,sqrt,10] [--width 64] [--counted-up-to 10000] [--svg PATH] [--quick]

The scan: h_{t+1} = tanh(W h_t + b) on a float64 carry of --width, W and b constants,
loss = sum(h_n); its gradient with respect to h_0 (ak.func.grad), compiled with ak.jit.
Per (n, policy):
- memory: the peak of memory traced by tracemalloc over a call of the jitted gradient
  on a new thread (so that it allocates every buffer: the residual stack, snapshot
  slots, temporaries), minus the same for the jitted forward alone: what reverse mode
  adds;
- time: a steady call of the jitted gradient, and its ratio to the forward;
- steps: the forward steps the schedule evaluates (the first sweep included), counted
  by running the gradient eagerly (ScanCheckpointGrad counts what it runs; only up to
  --counted-up-to steps, as the eager loop is slow), against Revolve's closed form
  t(n, s) = binomial_forward_steps(n, s); for `"sqrt"` s = sqrt_snapshots(n).
Beside each n, jax.jit's gradient of the same scan (papers/checkpointing/jax_peer.py, a
child process): every residual kept, and the sqrt scheme JAX users write by hand
(nested scans with jax.checkpoint), memory as XLA accounts for it; and PyTorch's
(torch_peer.py: eager, every step recorded, or torch.utils.checkpoint over sqrt n
segments), times only (its memory is not measured: see torch_peer.py).
Writes scan_checkpointing.svg (memory against n, log-log; adkit's rows).
"""
import argparse
import importlib
import math
import os
import sys
import threading
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "benchmarks"))
from _timing import best_seconds  # noqa: E402  (benchmarks/_timing.py)


def _policy(name):
    return None if name == "none" else ("sqrt" if name == "sqrt" else int(name))


def make_loss(ak, n, width, policy, seed=0):
    rng = np.random.default_rng(seed)
    w = ak.tensor(rng.standard_normal((width, width)) * (0.9 / math.sqrt(width)))
    b = ak.tensor(rng.standard_normal(width) * 0.1)

    def step(h, _):
        return ak.tanh(ak.matmul(w, h) + b), None

    def loss(h0):
        h, _ = ak.scan(step, h0, length=n, checkpoint=policy)
        return h.sum()
    return loss


def _traced_peak(fn):
    """Peak traced bytes of one call of fn (above what was live before), made on a new
    thread: a compiled function keeps its buffers per thread, so a thread that never
    called it allocates all of them, as a first call does, without the compile."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    worker = threading.Thread(target=fn)
    worker.start()
    worker.join()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak



def counted_steps(ak, n, width, policy):
    """Forward steps the eager checkpointed gradient runs (None: no schedule)."""
    checkpoint = importlib.import_module("adkit.control.checkpoint")
    checkpoint.LAST_RUN.update(forward_steps=-1)
    h0 = ak.tensor(np.full(width, 0.1))
    ak.func.grad(make_loss(ak, n, width, policy))(h0)
    return checkpoint.LAST_RUN["forward_steps"]


def measure(ak, n, width, policy, counted_up_to):
    loss = make_loss(ak, n, width, policy)
    h0 = ak.tensor(np.full(width, 0.1))
    forward = ak.jit(loss, compile="eager")  # native from the first call: timed steady
    gradient = ak.jit(ak.func.grad(loss), compile="eager")
    row = {"n": n, "policy": "none" if policy is None else str(policy)}
    forward(h0), gradient(h0)  # compiled (and, with a background compile, native) first
    forward_peak = _traced_peak(lambda: forward(h0))
    row["memory"] = max(_traced_peak(lambda: gradient(h0)) - forward_peak, 0)
    row["forward_s"] = best_seconds(lambda: forward(h0), warmup=0)  # both called above
    row["grad_s"] = best_seconds(lambda: gradient(h0), warmup=0)
    revolve = importlib.import_module("adkit.control.revolve")
    snapshots = importlib.import_module("adkit.control.checkpoint").snapshots
    if policy is not None:
        s = snapshots(policy, n)
        row["slots"], row["closed_form"] = s, revolve.binomial_forward_steps(n, s)
        if n <= counted_up_to:
            row["counted"] = counted_steps(ak, n, width, policy)
    return row


def jax_rows(n, width):
    """jax.jit's rows for n steps (none, and the hand-written sqrt scheme), from a
    child process; [] when jax is not installed or fails."""
    import json
    import subprocess
    out = subprocess.run([sys.executable, os.path.join(HERE, "jax_peer.py"), str(n),
                          str(width)], capture_output=True, text=True)
    if out.returncode != 0:
        return []
    results = json.loads(out.stdout.strip().splitlines()[-1])
    return [{"n": n, "policy": policy, "tool": "jax.jit", **r}
            for policy, r in results.items()]


def torch_rows(n, width):
    """PyTorch's rows for n steps (none, and torch.utils.checkpoint's sqrt scheme),
    one child process each (torch_peer.py); [] when torch is missing or fails."""
    import json
    import subprocess
    rows = []
    for policy in ("none", "sqrt"):
        out = subprocess.run([sys.executable, os.path.join(HERE, "torch_peer.py"), str(n),
                              str(width), policy], capture_output=True, text=True)
        if out.returncode == 0:
            rows.append({"n": n, "policy": policy, "tool": "torch",
                         **json.loads(out.stdout.strip().splitlines()[-1])})
    return rows


def _print(row):
    mib = "-" if row["memory"] is None else f"{row['memory'] / 2 ** 20:.2f}"
    counted = row.get("counted", "-")
    slots = row.get("slots", row["n"] if row["policy"] == "none" else math.isqrt(row["n"] - 1) + 1)
    print(f"| {row.get('tool', 'adkit')} | {row['n']} | {row['policy']} | {slots} | {mib} | "
          f"{row['forward_s'] * 1e3:.3g} | {row['grad_s'] * 1e3:.3g} | "
          f"{row['grad_s'] / row['forward_s']:.2f} | {counted} | "
          f"{row.get('closed_form', '-')} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1000,3000,10000,30000,100000")
    parser.add_argument("--policies", default="none,sqrt,10")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--counted-up-to", type=int, default=10000)
    parser.add_argument("--svg", default=os.path.join(HERE, "scan_checkpointing.svg"))
    parser.add_argument("--quick", action="store_true", help="n = 100 and 1000")
    parser.add_argument("--no-jax", action="store_true", help="leave jax out")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    args = parser.parse_args()
    if args.quick:
        args.steps = "100,1000"
    import adkit as ak
    print("| tool | n | checkpoint | carries stored | extra memory MiB | forward ms | "
          "gradient ms | gradient / forward | forward steps counted | closed form t(n, s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n in map(int, args.steps.split(",")):
        for name in args.policies.split(","):
            rows.append(measure(ak, n, args.width, _policy(name), args.counted_up_to))
            _print(rows[-1])
        for row in ([] if args.no_jax else jax_rows(n, args.width)):
            _print(row)
        for row in ([] if args.no_torch else torch_rows(n, args.width)):
            _print(row)
    from plot import write_svg  # noqa: PLC0415
    write_svg(rows, args.svg)
    print(f"wrote {args.svg}")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
