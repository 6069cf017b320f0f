"""ADBench's GMM gradient through an exported C library (ctypes) against in-process ak.jit.

    python benchmarks/export_gmm.py [--configs small,medium,large,d64k10] [--rounds 40]
                                    [--blas auto|loops|numpy|PATH]

For each configuration the gradient (grad_and_value of the objective, as
examples/export_c/export_gmm.py exports it) is exported once, then called in turns:
one call through the library (ctypes, inputs, outputs and its work buffer allocated
once), one call of the jitted function in this process, `--rounds` times; each side's
best time, their ratio (library / in-process; issue 18's target is <= 1.2) and the
median of the rounds' ratios are printed, with the largest relative difference of the
results. The library runs on as
many threads as in-process code (its _set_threads). `--blas numpy` links the OpenBLAS
inside numpy's wheel (what in-process code calls) instead of what the export would find.
"""
import argparse
import ctypes
import glob
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "export_c"))

from export_gmm import gmm, gmm_gradient  # noqa: E402  (the example's problem)

from adkit._pytree import tree_flatten  # noqa: E402
from adkit.codegen import export_blas, pool  # noqa: E402

SIZES = {"d64k10": (64, 10, 10000)}  # beside ADBench's CONFIGS (as benchmarks/grad_bound.py)


def numpy_openblas():
    found = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs",
                                   "*openblas*"))
    if not found:
        sys.exit("--blas numpy: this numpy has no OpenBLAS of its own")
    return os.path.realpath(found[0])


class Library:
    """The exported gradient, ready to call with the example arguments."""

    def __init__(self, path, args, like):
        lib = ctypes.CDLL(path)
        self.fn = lib.gmm_grad
        self.fn.restype = ctypes.c_int64
        lib.gmm_grad_work_bytes.restype = ctypes.c_int64
        set_threads = lib.gmm_set_threads
        set_threads.restype = ctypes.c_int64
        self.threads = set_threads(ctypes.c_int64(pool.threads()))
        self.ins = [np.ascontiguousarray(a.numpy()) for a in args]
        self.outs = [np.empty(t.shape, np.float64) for t in like]
        self.work = np.empty(lib.gmm_grad_work_bytes(), np.uint8)
        self.pointers = [a.ctypes.data_as(ctypes.c_void_p)
                         for a in self.ins + self.outs + [self.work]]

    def __call__(self):
        code = self.fn(*self.pointers)
        if code:
            raise RuntimeError(f"gmm_grad returned {code}")
        return self.outs


def measure(config, rounds, folder):
    if config in SIZES:
        gmm.CONFIGS[config] = SIZES[config]
    jitted, args = gmm_gradient(config)
    like = tree_flatten(jitted(*args))[0]
    os.makedirs(os.path.join(folder, config), exist_ok=True)
    path = jitted.export(os.path.join(folder, config, "gmm"), *args, name="gmm_grad")
    lib = Library(path, args, like)
    error = max(float(np.abs(g - w.numpy()).max() / max(1.0, np.abs(w.numpy()).max()))
                for g, w in zip(lib(), like))
    times = {"library": [], "in-process": []}
    calls = {"library": lib, "in-process": lambda: jitted(*args)}
    for _ in range(rounds):  # in turns: both see the same drift of this shared machine
        for side, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[side].append(time.perf_counter() - t0)
    best = {side: min(t) for side, t in times.items()}
    best["ratio"] = statistics.median(a / b for a, b in zip(*times.values()))
    return best, error, lib.threads


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="small,medium,large,d64k10")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--blas", default=None)
    options = parser.parse_args()
    if options.blas is not None:
        os.environ["ADKIT_EXPORT_BLAS"] = (numpy_openblas() if options.blas == "numpy"
                                           else options.blas)
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; best of "
          f"{options.rounds} calls each, in turns")
    print(f"{'config (d, k, n)':<26}{'library ms':>12}{'ak.jit ms':>12}{'ratio':>8}"
          f"{'median':>8}{'threads':>9}{'max rel diff':>14}")
    with tempfile.TemporaryDirectory() as folder:
        for config in options.configs.split(","):
            best, error, threads = measure(config, options.rounds, folder)
            label = f"{config} {tuple(gmm.CONFIGS[config])}"
            print(f"{label:<26}{best['library'] * 1e3:>12.2f}{best['in-process'] * 1e3:>12.2f}"
                  f"{best['library'] / best['in-process']:>8.2f}{best['ratio']:>8.2f}"
                  f"{threads:>9}{error:>14.2g}")
    print(f"# the library's matrix products: {export_blas.describe(export_blas.find_blas())}")


if __name__ == "__main__":
    main()
