"""Eager autograd overhead: a chain of 100 elementwise ops on 10-element float64 tensors,
forward plus backward, in microseconds per op; adkit beside PyTorch eager and HIPS
autograd (when installed) in one run, and plain numpy (forward only, no AD) as the floor.

    python benchmarks/eager_overhead.py [--repeats 300]

Reported: the median over repeats of (forward + backward time) / number of ops, and the
ratio to PyTorch. Target (issue 2): adkit no slower than 2x PyTorch eager per op.
"""
import argparse
import statistics
import time

import numpy as np

N_ELEMENTS = 10
N_BLOCKS = 25  # 4 ops per block -> 100 ops, plus the final sum


def chain_ops(y, w, sin):
    for _ in range(N_BLOCKS):
        y = y * w
        y = y + 0.5
        y = sin(y)
        y = y * 1.01
    return y.sum()


N_OPS = 4 * N_BLOCKS + 1


def bench_adkit(x0, w0, repeats):
    import adkit as ak
    w = ak.tensor(w0)

    def step():
        x = ak.tensor(x0, requires_grad=True)
        chain_ops(x, w, ak.sin).backward()
        return x.grad
    return _time(step, repeats), np.asarray(step())


def bench_torch(x0, w0, repeats):
    import torch
    torch.set_num_threads(1)
    w = torch.tensor(w0)

    def step():
        x = torch.tensor(x0, requires_grad=True)
        chain_ops(x, w, torch.sin).backward()
        return x.grad
    return _time(step, repeats), step().numpy()


def bench_hips(x0, w0, repeats):
    import autograd
    import autograd.numpy as anp
    grad_fn = autograd.grad(lambda x: chain_ops(x, w0, anp.sin))

    def step():
        return grad_fn(x0)
    return _time(step, repeats), step()


def bench_numpy(x0, w0, repeats):
    def step():
        return chain_ops(x0.copy(), w0, np.sin)
    return _time(step, repeats), None


def _time(step, repeats):
    for _ in range(20):
        step()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) / N_OPS * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    x0, w0 = rng.uniform(-1, 1, N_ELEMENTS), rng.uniform(0.5, 1.5, N_ELEMENTS)
    results, grads = {}, {}
    results["adkit"], grads["adkit"] = bench_adkit(x0, w0, args.repeats)
    for name, fn in (("torch", bench_torch), ("hips-autograd", bench_hips),
                     ("numpy (no AD)", bench_numpy)):
        try:
            results[name], grads[name] = fn(x0, w0, args.repeats)
        except ImportError:
            print(f"{name}: not installed, skipped")
    ref = grads.get("torch")
    if ref is None:
        ref = grads.get("hips-autograd")
    if ref is not None:  # the timings only count if everyone computed the same gradient
        np.testing.assert_allclose(grads["adkit"], ref, rtol=1e-10)
    base = results.get("torch")
    print(f"chain of {N_OPS} ops on {N_ELEMENTS}-element float64 tensors, forward+backward, "
          f"median of {args.repeats}")
    print(f"{'framework':<16}{'us/op':>10}{'vs torch':>12}")
    for name, us in results.items():
        ratio = f"{us / base:.2f}x" if base else "-"
        print(f"{name:<16}{us:>10.2f}{ratio:>12}")
    return results


if __name__ == "__main__":
    main()
