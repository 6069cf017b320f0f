"""Every speed comparison of issue 16 in one run: eager overhead against PyTorch, first
calls (cold, and with the disk cache warm) and steady calls against jax.jit, gradients at the cheap-gradient bound, the MLP
against its own matrix products, and the thread pool.

    python benchmarks/speed_report.py [--out benchmarks/results/speed_report.md] [--quick]

Each part is its own benchmark script (named in each section), run here one after the
other as a subprocess, so the numbers come from one sitting of one machine; this script
adds the machine, the date and the load, and writes everything to one markdown file.
The README's peer table is read off that file. Install the peers first:
`pip install jax jaxlib torch==2.13.0 autograd`.
"""
import argparse
import datetime
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (title, script, arguments, arguments with --quick)
PARTS = [
    ("Eager overhead per op, against PyTorch eager (target: ratio <= 1)",
     "eager_overhead.py", [], ["--rounds", "5"]),
    ("First-call overhead, against jax.jit (target: ratio <= 0.25)",
     "jit_vs_jax.py", ["--first-call"], ["--first-call", "--rounds", "2"]),
    ("First calls of a fresh process with the disk cache warm, against jax.jit's "
     "persistent cache (target: a disk-cache hit, column hit, <= 10 ms)", "jit_vs_jax.py",
     ["--warm-cache"],
     ["--warm-cache", "--rounds", "2"]),
    ("Gradient / objective (target <= 2), gradient / jax.jit, MLP / its matmuls "
     "(target <= 1.15)", "grad_bound.py", [], ["--rounds", "2"]),
    ("Steady calls, against jax.jit and numpy", "jit_vs_jax.py", [], ["--quick"]),
    ("The persistent thread pool on 2 threads", "thread_pool.py", [], ["--rounds", "5"]),
]


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"load averages {load} at the start")


def run_part(script, args):
    """The script's output (stdout, then stderr's last lines if it failed) and seconds."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                         capture_output=True, text=True, check=False)
    text = out.stdout.rstrip()
    if out.returncode != 0:
        tail = "\n".join(out.stderr.strip().splitlines()[-5:])
        text += f"\n(exit code {out.returncode})\n{tail}"
    return text, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results", "speed_report.md"))
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args(argv)
    lines = ["# adkit speed report (issue 16)", "", machine(), ""]
    for title, script, full, quick in PARTS:
        part_args = quick if args.quick else full
        text, seconds = run_part(script, part_args)
        command = " ".join(["python", f"benchmarks/{script}", *part_args])
        lines += [f"## {title}", "", f"`{command}` ({seconds:.0f} s)", "", "```", text,
                  "```", ""]
        print(f"{script} {' '.join(part_args)}: {seconds:.0f} s", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
