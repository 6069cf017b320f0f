"""ADBench's bundle adjustment (BA) objective and its Jacobian: adkit eager against ak.jit.

    python benchmarks/ba_jit.py [--quick] [--sizes 1000,10000]

The problem is ADBench's (Srajer, Kukelova, Fitzgibbon 2018; microsoft/ADBench, `ba`):
n cameras of 11 parameters (Rodrigues rotation, center, focal length, principal point,
two radial distortion coefficients), m points, p observations (obs_cam, obs_pt) with a
weight w and a measured feature each. The residuals are ADBench's: for each observation
w * (project(cams[obs_cam], X[obs_pt]) - feature) (2 values) and 1 - w^2, so every
residual reads its camera and point through a gather by index tensors, the case
`ak.jit` compiles to native gathers (and, in reverse mode, scatter-adds).

ADBench's Jacobian is sparse: each observation's residuals depend on one camera, one
point and one weight, so its Jacobian is one 2x15 block (and the weight's derivative).
`block_jacobian` computes those blocks the way ADBench's tools do: the cameras and
points gathered per observation, then vmap(jacrev) of one observation's residual
(3 rows: reverse mode is the cheaper one). `dense_jacobian` is ak.func.jacrev of the
whole residual vector (small problems only: rows x columns dense): the gathers' backward
(scatter-adds) batched over the rows.

Data are generated like ADBench's generator files (one camera, point, weight and
feature replicated, observation k seeing camera k mod n and point k mod m), from a fixed
seed instead of ADBench's data file; the rotation is never 0, so the Rodrigues formula
needs no small-angle branch (ADBench's code has one for theta = 0).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import adkit as ak
from _timing import median_seconds

N_CAM_PARAMS = 11


def cross(a, b):
    """Row-wise cross product of (p, 3) tensors."""
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    b0, b1, b2 = b[:, 0], b[:, 1], b[:, 2]
    return ak.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], 1)


def rodrigues_rotate(rot, x):
    """x rotated by the axis-angle vectors rot (rows), ADBench's rodrigues_rotate_point
    for theta != 0."""
    theta = (rot * rot).sum(1, keepdim=True).sqrt()
    w = rot / theta
    cos, sin = theta.cos(), theta.sin()
    tmp = (w * x).sum(1, keepdim=True) * (1.0 - cos)
    return x * cos + cross(w, x) * sin + w * tmp


def project(cams, x):
    """ADBench's project: rotate into the camera, divide by depth, distort, scale."""
    xcam = rodrigues_rotate(cams[:, 0:3], x - cams[:, 3:6])
    proj = xcam[:, 0:2] / xcam[:, 2:3]
    rsq = (proj * proj).sum(1, keepdim=True)
    distortion = 1.0 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq
    return proj * distortion * cams[:, 6:7] + cams[:, 7:9]


def observation_residuals(cams, x, w, feats):
    """Residuals of observations whose cameras and points are given row by row:
    (p, 2) reprojection errors and (p,) weight errors."""
    return (project(cams, x) - feats) * w.unsqueeze(1), 1.0 - w * w


def residuals(cams, x, w, obs_cam, obs_pt, feats):
    """All residuals as one vector: 2 reprojection errors per observation, then the p
    weight errors. The cameras and points are gathered by the index tensors."""
    reproj, werr = observation_residuals(cams[obs_cam], x[obs_pt], w, feats)
    return ak.cat([reproj.reshape(-1), werr])


def dense_jacobian(cams, x, w, obs_cam, obs_pt, feats):
    """d residuals / d (cams, x, w), dense: (3p, n, 11), (3p, m, 3), (3p, p)."""
    return ak.func.jacrev(residuals, argnums=(0, 1, 2))(cams, x, w, obs_cam, obs_pt, feats)


def _one(cam, x, w, feat):
    reproj, werr = observation_residuals(cam[None], x[None], w[None], feat[None])
    return ak.cat([reproj.reshape(-1), werr])


def block_jacobian(cams, x, w, obs_cam, obs_pt, feats):
    """ADBench's sparse Jacobian as blocks: per observation d(3 residuals)/d(11 camera
    parameters, 3 point coordinates, 1 weight): (p, 3, 11), (p, 3, 3), (p, 3)."""
    jac = ak.func.vmap(ak.func.jacrev(_one, argnums=(0, 1, 2)))
    return jac(cams[obs_cam], x[obs_pt], w, feats)


def make_data(n, m, p, dtype=np.float64, seed=31337):
    """ADBench-style data: one camera/point/weight/feature replicated (with a little noise
    so gradients differ), observation k on camera k mod n and point k mod m."""
    rng = np.random.default_rng(seed)
    cam = np.array([0.1, -0.2, 0.3, 0.5, -0.4, -6.0, 500.0, 320.0, 240.0, 1e-3, 1e-6])
    cams = cam + rng.normal(0, 1e-2, (n, N_CAM_PARAMS)) * np.abs(cam)
    x = np.array([0.3, -0.2, 4.0]) + rng.normal(0, 0.1, (m, 3))
    w = 1.0 + rng.normal(0, 0.05, p)
    feats = np.array([300.0, 200.0]) + rng.normal(0, 5.0, (p, 2))
    obs_cam, obs_pt = np.arange(p) % n, np.arange(p) % m
    cams, x, w, feats = (ak.tensor(np.asarray(a, dtype)) for a in (cams, x, w, feats))
    return (cams, x, w, ak.tensor(obs_cam.astype(np.int64)),
            ak.tensor(obs_pt.astype(np.int64)), feats)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000",
                        help="observation counts p (n = p // 20 cameras, m = p // 4 points)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [200] if args.quick else [int(s) for s in args.sizes.split(",")]
    print(f"{'p':>7} {'what':<26} {'eager ms':>10} {'jit ms':>10} {'speedup':>8} "
          f"{'compile s':>10}")
    for p in sizes:
        data = make_data(max(p // 20, 1), max(p // 4, 1), p)
        for name, fn in (("residuals", residuals), ("block Jacobian", block_jacobian)):
            jitted = ak.jit(fn)
            t0 = time.perf_counter()
            jitted(*data)
            compile_s = time.perf_counter() - t0
            eager = median_seconds(lambda fn=fn, data=data: fn(*data), 7, warmup=0)
            native = median_seconds(lambda jitted=jitted, data=data: jitted(*data), 7,
                                    warmup=0)
            print(f"{p:>7} {name:<26} {eager * 1e3:>10.2f} {native * 1e3:>10.3f} "
                  f"{eager / native:>7.1f}x {compile_s:>10.2f}")


if __name__ == "__main__":
    main()
