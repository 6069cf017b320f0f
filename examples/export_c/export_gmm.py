"""Export the gradient of ADBench's GMM objective as a C library, with test data.

    python examples/export_c/export_gmm.py [build folder] [--size small|medium|large]
                                           [--cpu native|generic|LLVM CPU name]

Writes, into the build folder (default: examples/export_c/build):
  gmm.so, gmm.h       the library: int64_t gmm_grad(alphas, means, icf, x, d_alphas,
                      d_means, d_icf, objective, work), see gmm.h
  inputs.bin          alphas, means, icf and x (float64, in that order)
  expected.bin        what ak.jit computes in this process: the three gradients, then
                      the objective (float64)
main.c reads both files, calls the library and compares (see README.md). The library
is built for this machine's CPU, or with --cpu generic for any x86-64 one.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "papers", "adbench_gmm"))

import adkit as ak  # noqa: E402
import gmm  # noqa: E402  (papers/adbench_gmm/gmm.py: ADBench's problem and data)


def gmm_gradient(size):
    """(jitted grad_and_value of the objective, its example arguments)."""
    d, k, n = gmm.CONFIGS[size]
    data = gmm.generate(d, k, n)
    ns = gmm.AdkitNs()
    layout = gmm.make_layout(ns, d, k, n, data["gamma"], data["m"])

    def objective(alphas, means, icf, x):
        return gmm.objective(ns, (alphas, means, icf), x, data["gamma"], data["m"], layout)
    grad_and_value = ak.func.grad_and_value(objective, argnums=(0, 1, 2))
    args = tuple(ak.tensor(data[key]) for key in ("alphas", "means", "icf", "x"))
    return ak.jit(grad_and_value), args


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", nargs="?", default=os.path.join(HERE, "build"))
    parser.add_argument("--size", default="small", choices=sorted(gmm.CONFIGS))
    parser.add_argument("--cpu", default="native",
                        help="the CPU the library is for: native, generic (any x86-64) "
                        "or an LLVM CPU name such as x86-64-v3")
    options = parser.parse_args()
    os.makedirs(options.build, exist_ok=True)
    jitted, args = gmm_gradient(options.size)
    library = jitted.export(os.path.join(options.build, "gmm"), *args, name="gmm_grad",
                            cpu=options.cpu)
    (d_alphas, d_means, d_icf), value = jitted(*args)
    with open(os.path.join(options.build, "inputs.bin"), "wb") as f:
        for a in args:
            f.write(a.numpy().tobytes())
    with open(os.path.join(options.build, "expected.bin"), "wb") as f:
        for a in (d_alphas, d_means, d_icf, value):
            f.write(np.ascontiguousarray(a.numpy(), np.float64).tobytes())
    print(f"wrote {library}, {library[:-3]}.h and the test data "
          f"(GMM {options.size}: d, k, n = {gmm.CONFIGS[options.size]}; "
          f"cpu={options.cpu})")


if __name__ == "__main__":
    main()
