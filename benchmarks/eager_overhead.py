"""Eager autograd overhead: a chain of 100 elementwise ops on 10-element float64 tensors,
in microseconds per op, forward alone (recording the tape), forward+backward, and the
same forward on tensors that require no grad (no tape); adkit beside PyTorch eager and
HIPS autograd (when installed) in one process, and plain numpy (no AD) as the floor.

    python benchmarks/eager_overhead.py [--rounds 15] [--repeats 40]

The machine's speed drifts and other jobs share its cores, so the frameworks take turns:
each round times every framework (median of `repeats` calls each), and the per-round
ratios to PyTorch are reported as their median and range. Target (issue 16): adkit's
forward and forward+backward per op no slower than PyTorch eager's (ratio <= 1).
Also printed: the Python memory blocks per op that adkit's recorded graph holds (nodes,
edges, saved tensors; PyTorch keeps its graph in C++, so it has no such number).
"""
import argparse
import gc
import statistics
import sys
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
# what each framework's step functions measure, in the order they come (None: not
# measured): recording the tape, forward+backward, forward on tensors needing no grad
KINDS = ("forward", "both", "plain")


def steps_adkit(x0, w0):
    """The step functions (forward, forward+backward, forward without grad: KINDS), and
    the gradient they compute."""
    import adkit as ak
    w = ak.tensor(w0)

    def forward():
        return chain_ops(ak.tensor(x0, requires_grad=True), w, ak.sin)

    def both():
        x = ak.tensor(x0, requires_grad=True)
        chain_ops(x, w, ak.sin).backward()
        return x.grad

    def plain():
        return chain_ops(ak.tensor(x0), w, ak.sin)
    return forward, both, plain, np.asarray(both())


def steps_torch(x0, w0):
    import torch
    torch.set_num_threads(1)
    w = torch.tensor(w0)

    def forward():
        return chain_ops(torch.tensor(x0, requires_grad=True), w, torch.sin)

    def both():
        x = torch.tensor(x0, requires_grad=True)
        chain_ops(x, w, torch.sin).backward()
        return x.grad

    def plain():
        return chain_ops(torch.tensor(x0), w, torch.sin)
    return forward, both, plain, both().numpy()


def steps_hips(x0, w0):
    import autograd
    import autograd.numpy as anp

    def f(x):
        return chain_ops(x, w0, anp.sin)
    make_vjp, grad_fn = autograd.make_vjp(f), autograd.grad(f)

    def forward():  # records the trace, as the others record their tapes
        return make_vjp(x0)

    def both():
        return grad_fn(x0)
    return forward, both, None, both()


def steps_numpy(x0, w0):
    def forward():
        return chain_ops(x0.copy(), w0, np.sin)
    return forward, None, forward, None


FRAMEWORKS = {"adkit": steps_adkit, "torch": steps_torch, "hips-autograd": steps_hips,
              "numpy (no AD)": steps_numpy}


def _median_us_per_op(step, repeats):
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) / N_OPS * 1e6


def run_rounds(steps, rounds, repeats):
    """{framework: {"forward": [us/op per round], "both": [...], "plain": [...]}}, the
    frameworks and the measurements taking turns within every round."""
    times = {name: {kind: [] for kind in KINDS} for name in steps}
    for fns in steps.values():  # warm up: caches, lazy imports, allocator
        for _ in range(20):
            for fn in fns:
                if fn is not None:
                    fn()
    for _ in range(rounds):
        for name, fns in steps.items():
            for kind, fn in zip(KINDS, fns, strict=True):
                if fn is not None:
                    times[name][kind].append(_median_us_per_op(fn, repeats))
    return times


def tape_blocks_per_op(forward):
    """Python memory blocks per op held by the graph one forward records (its result
    kept alive): sys.getallocatedblocks before and after."""
    gc.collect()
    before = sys.getallocatedblocks()
    result = forward()
    blocks = sys.getallocatedblocks() - before
    del result
    return blocks / N_OPS


def _cell(samples, base):
    """'us/op  ratio [min-max]' of one framework's rounds against torch's rounds."""
    if not samples:
        return f"{'-':>8}{'':>20}"
    us = statistics.median(samples)
    if not base:
        return f"{us:>8.2f}{'':>20}"
    ratios = [s / b for s, b in zip(samples, base, strict=True)]
    spread = f"[{min(ratios):.2f}-{max(ratios):.2f}]"
    return f"{us:>8.2f}{statistics.median(ratios):>7.2f}x {spread:<12}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    x0, w0 = rng.uniform(-1, 1, N_ELEMENTS), rng.uniform(0.5, 1.5, N_ELEMENTS)
    steps, grads = {}, {}
    for name, make in FRAMEWORKS.items():
        try:
            *fns, grads[name] = make(x0, w0)  # (forward, both, plain) as in KINDS
        except ImportError:
            print(f"{name}: not installed, skipped")
            continue
        steps[name] = fns
    ref = grads.get("torch")
    if ref is None:
        ref = grads.get("hips-autograd")
    if ref is not None:  # the timings only count if everyone computed the same gradient
        np.testing.assert_allclose(grads["adkit"], ref, rtol=1e-10)
    times = run_rounds(steps, args.rounds, args.repeats)
    base = times.get("torch", dict.fromkeys(KINDS))
    print(f"chain of {N_OPS} ops on {N_ELEMENTS}-element float64 tensors; us/op = median "
          f"over {args.rounds} rounds (each the median of {args.repeats} calls); ratio to "
          "torch = median [range] of the per-round ratios")
    print(f"{'framework':<16}{'forward us/op, vs torch':>36}{'fwd+bwd us/op, vs torch':>36}"
          f"{'no grad us/op, vs torch':>36}")
    for name, t in times.items():
        print(f"{name:<16}" + "".join(_cell(t[kind], base[kind]) for kind in KINDS))
    print(f"adkit's tape: {tape_blocks_per_op(steps['adkit'][0]):.1f} Python memory blocks "
          "per op")
    return times


if __name__ == "__main__":
    main()
