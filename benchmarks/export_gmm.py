"""ADBench's GMM gradient through an exported C library (ctypes) against in-process ak.jit.

    python benchmarks/export_gmm.py [--configs small,medium,large,d64k10] [--rounds 40]
                                    [--blas auto|loops|numpy|PATH] [--cpu native,generic]

For each configuration the gradient (grad_and_value of the objective, as
examples/export_c/export_gmm.py exports it) is exported once, then called in turns:
one call through the library (ctypes, inputs, outputs and its work buffer allocated
once), one call of the jitted function in this process, `--rounds` times; each side's
best time, their ratio (library / in-process; issue 18's target is <= 1.2) and the
median of the rounds' ratios are printed, with the largest relative difference of the
results. The library runs on as
many threads as in-process code (its _set_threads). `--blas numpy` links the OpenBLAS
inside numpy's wheel (what in-process code calls) instead of what the export would find.
`--cpu` lists the CPUs to build libraries for (export's cpu=: native, generic, an LLVM
name): each is called in the same turns, and with several, each one's best time is
also given against the first's ("vs native").
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


def relative_error(got, like):
    """The largest difference of arrays `got` from tensors `like`, relative to the
    largest magnitude (at least 1) of each."""
    return max(float(np.abs(g - w.numpy()).max() / max(1.0, np.abs(w.numpy()).max()))
               for g, w in zip(got, like))


def measure(config, cpus, rounds, folder):
    """{side: best seconds} (a library per CPU, and "in-process"), {cpu: the median of
    its rounds' ratios to in-process}, {cpu: largest relative difference}, threads."""
    if config in SIZES:
        gmm.CONFIGS[config] = SIZES[config]
    jitted, args = gmm_gradient(config)
    like = tree_flatten(jitted(*args))[0]
    libs = {}
    for cpu in cpus:  # a folder each: the same path would dlopen the first library again
        os.makedirs(os.path.join(folder, config, cpu), exist_ok=True)
        libs[cpu] = Library(jitted.export(os.path.join(folder, config, cpu, "gmm"), *args,
                                          name="gmm_grad", cpu=cpu), args, like)
    errors = {cpu: relative_error(lib(), like) for cpu, lib in libs.items()}
    calls = {**libs, "in-process": lambda: jitted(*args)}
    times = {side: [] for side in calls}
    for _ in range(rounds):  # in turns: all see the same drift of this shared machine
        for side, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[side].append(time.perf_counter() - t0)
    best = {side: min(t) for side, t in times.items()}
    ratios = {cpu: statistics.median(a / b for a, b in zip(times[cpu], times["in-process"]))
              for cpu in cpus}
    return best, ratios, errors, libs[cpus[0]].threads


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="small,medium,large,d64k10")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--blas", default=None)
    parser.add_argument("--cpu", default="native",
                        help="CPUs to build for, comma-separated: native, generic, "
                        "an LLVM CPU name")
    options = parser.parse_args()
    cpus = options.cpu.split(",")
    if options.blas is not None:
        os.environ["ADKIT_EXPORT_BLAS"] = (numpy_openblas() if options.blas == "numpy"
                                           else options.blas)
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; best of "
          f"{options.rounds} calls each, in turns")
    versus = f"vs {cpus[0]}" if len(cpus) > 1 else ""
    print(f"{'config (d, k, n)':<26}{'cpu':>11}{'library ms':>12}{'ak.jit ms':>12}"
          f"{'ratio':>8}{'median':>8}{versus:>12}{'threads':>9}{'max rel diff':>14}")
    with tempfile.TemporaryDirectory() as folder:
        for config in options.configs.split(","):
            best, ratios, errors, threads = measure(config, cpus, options.rounds, folder)
            label = f"{config} {tuple(gmm.CONFIGS[config])}"
            for cpu in cpus:
                first = f"{best[cpu] / best[cpus[0]]:.2f}" if versus else ""
                print(f"{label:<26}{cpu:>11}{best[cpu] * 1e3:>12.2f}"
                      f"{best['in-process'] * 1e3:>12.2f}"
                      f"{best[cpu] / best['in-process']:>8.2f}{ratios[cpu]:>8.2f}"
                      f"{first:>12}{threads:>9}{errors[cpu]:>14.2g}")
    print(f"# the library's matrix products: {export_blas.describe(export_blas.find_blas())}")


if __name__ == "__main__":
    main()
