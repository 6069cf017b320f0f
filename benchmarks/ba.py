"""ADBench bundle adjustment: the Jacobian under ak.jit beside jax.jit and PyTorch, one run.

    python benchmarks/ba.py [--repeats N] [--size 49,7776,31843] [--frameworks ...] [--rounds 3]

The problem is ADBench's (benchmarks/ba_jit.py defines it for adkit alone, eager against
jit, with its data generator, which this script reuses). Its Jacobian is block sparse:
each observation's 3 residuals depend on 15 parameters (its camera's 11, its point's 3,
its weight), so every framework here computes the blocks the same way, in one jitted
function: gather each observation's camera and point (`cams[obs_cam]`: traced integer
indices), then vmap of jacrev of one observation's residuals, written once below over a
small shim of each framework's functions. The default size is ADBench's ba1 (49
cameras, 7,776 points, 31,843 observations). float64, medians in ms; each framework runs
in its own subprocess (jax's and llvmlite's LLVMs must not share one); pin with
taskset -c 0 for one core.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import in_turns, median_seconds, run_child  # (beside this script)

SIZE = (49, 7776, 31843)


def one_observation(lib, cam, x, w, feat):
    """ADBench's 3 residuals of one observation: w (project(cam, x) - feat), 1 - w^2."""
    y = x - cam[3:6]
    theta = lib.sqrt((cam[0:3] * cam[0:3]).sum())
    axis = cam[0:3] / theta
    cos, sin = lib.cos(theta), lib.sin(theta)
    cross = lib.stack([axis[1] * y[2] - axis[2] * y[1], axis[2] * y[0] - axis[0] * y[2],
                       axis[0] * y[1] - axis[1] * y[0]])
    rotated = y * cos + cross * sin + axis * ((axis * y).sum() * (1 - cos))
    proj = rotated[0:2] / rotated[2]
    rsq = (proj * proj).sum()
    err = w * (proj * (1 + cam[9] * rsq + cam[10] * rsq * rsq) * cam[6] + cam[7:9] - feat)
    return lib.stack([err[0], err[1], 1 - w * w])


class Lib:
    def __init__(self, mod):
        self.sqrt, self.cos, self.sin, self.stack = mod.sqrt, mod.cos, mod.sin, mod.stack


def _data(size, convert):
    import ba_jit
    return tuple(convert(t.numpy()) for t in ba_jit.make_data(*size))


def _time(fn, repeats):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    return {"ms": median_seconds(fn, repeats, warmup=0) * 1e3, "first_s": first}


def run_adkit(size, repeats):
    import adkit as ak
    args = _data(size, ak.tensor)
    lib = Lib(ak)
    jac = ak.func.jacrev(lambda c, x, w, f: one_observation(lib, c, x, w, f), argnums=(0, 1, 2))

    @ak.jit
    def blocks(cams, x, w, obs_cam, obs_pt, feats):
        return ak.func.vmap(jac)(cams[obs_cam], x[obs_pt], w, feats)
    return _time(lambda: blocks(*args), repeats)


def run_jax(size, repeats):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    args = _data(size, jnp.asarray)
    lib = Lib(jnp)
    jac = jax.jacrev(lambda c, x, w, f: one_observation(lib, c, x, w, f), argnums=(0, 1, 2))

    @jax.jit
    def blocks(cams, x, w, obs_cam, obs_pt, feats):
        return jax.vmap(jac)(cams[obs_cam], x[obs_pt], w, feats)
    return _time(lambda: jax.block_until_ready(blocks(*args)), repeats)


def run_torch(size, repeats):
    import torch
    torch.set_num_threads(1)
    args = _data(size, torch.tensor)
    lib = Lib(torch)
    jac = torch.func.jacrev(lambda c, x, w, f: one_observation(lib, c, x, w, f),
                            argnums=(0, 1, 2))

    def blocks(cams, x, w, obs_cam, obs_pt, feats):
        return torch.func.vmap(jac)(cams[obs_cam], x[obs_pt], w, feats)
    return _time(lambda: blocks(*args), repeats)


def _child(framework, size, repeats):
    return run_child(__file__, ["--child", framework, "--repeats", repeats, "--size",
                                ",".join(map(str, size))], ADKIT_DISABLE_CACHE="1")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--size", default=",".join(map(str, SIZE)))
    parser.add_argument("--frameworks", default="adkit,jax,torch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child")
    args = parser.parse_args()
    size = tuple(int(s) for s in args.size.split(","))
    runners = {"adkit": run_adkit, "jax": run_jax, "torch": run_torch}
    if args.child:
        print(json.dumps(runners[args.child](size, args.repeats)))
        return
    frameworks = args.frameworks.split(",")
    results, ratios = in_turns(lambda f: _child(f, size, args.repeats), frameworks,
                               args.rounds, "ms")
    print(f"BA Jacobian blocks (vmap of jacrev), n={size[0]} m={size[1]} p={size[2]}; "
          f"medians over {args.rounds} rounds, frameworks taking turns")
    print("| framework | ms | first call s | / jax.jit (median; rounds' range) |")
    print("|---|---|---|---|")
    for framework, res in results.items():
        if "error" in res:
            print(f"| {framework} | error: {res['error'][:70]} | | |")
            continue
        ratio = ""
        if framework in ratios:
            ratio = (f"{res['ms'] / results['jax']['ms']:.2f}; "
                     f"{min(ratios[framework]):.2f}-{max(ratios[framework]):.2f}")
        print(f"| {framework} | {res['ms']:.2f} | {res['first_s']:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
