"""ak.func.jacobian(mode="auto") beside jacfwd and jacrev, one run, as ratios to the
better of the two.

    python benchmarks/jacobian_mode.py [--repeats 5]

Cases (issue 14): R^2000 -> R^4 (reverse should win), R^4 -> R^2000 (forward should),
and square and near-square ones where the cost model's constants decide
(adkit/func/jacobian.py). f(x) = sin(A tanh(x)) * 2 + sum(exp(A x)) * 0, float64, eager.
Target: auto within 1.2x of the better mode everywhere.
"""
import argparse
import time

import numpy as np

CASES = [(2000, 4), (4, 2000), (64, 64), (200, 50), (50, 200), (8, 100), (100, 8)]


def _best_of(fn, x, repeats):
    fn(x)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(x)
        samples.append(time.perf_counter() - t0)
    return min(samples)


def main():
    import adkit as ak
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| n -> m | jacfwd ms | jacrev ms | auto ms (mode) | auto / best |")
    print("|---|---|---|---|---|")
    for n, m in CASES:
        a = ak.tensor(rng.standard_normal((m, n)) / n ** 0.5)

        def f(x, a=a):
            return (a @ x.tanh()).sin() * 2 + (a @ x).exp().sum() * 0
        x = ak.tensor(rng.standard_normal(n))
        auto = ak.func.jacobian(f)
        times = {name: _best_of(fn, x, args.repeats) for name, fn in
                 [("fwd", ak.func.jacfwd(f)), ("rev", ak.func.jacrev(f)), ("auto", auto)]}
        best = min(times["fwd"], times["rev"])
        print(f"| {n} -> {m} | {times['fwd'] * 1e3:.2f} | {times['rev'] * 1e3:.2f} | "
              f"{times['auto'] * 1e3:.2f} ({auto.mode_for(x)}) | {times['auto'] / best:.2f} |")


if __name__ == "__main__":
    main()
