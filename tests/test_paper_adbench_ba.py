"""papers/adbench_ba: the per-observation Jacobian blocks (vmap of jacrev under ak.jit)
against the dense Jacobian of the whole residual vector, and the sparse Jacobian
machinery against it too, on a tiny problem; the script prints its table and picture."""
import os
import subprocess
import sys

import numpy as np

import adkit as ak

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "papers", "adbench_ba"), os.path.join(ROOT, "benchmarks")]
import bundle_adjustment as paper  # noqa: E402


def test_blocks_and_sparse_jacobian_match_the_dense_jacobian():
    n, m, p = paper.SIZES["tiny"]
    cams, x, w, obs_cam, obs_pt, feats = paper._data((n, m, p), ak.tensor)
    lib = paper.Lib(ak)
    one = lambda c, q, wi, f: paper.one_observation(lib, c, q, wi, f)  # noqa: E731

    def residuals(cams, x, w):
        return ak.func.vmap(one)(cams[obs_cam], x[obs_pt], w, feats).reshape(-1)
    dense = np.concatenate([j.numpy().reshape(3 * p, -1) for j in
                            ak.func.jacfwd(residuals, argnums=(0, 1, 2))(cams, x, w)], axis=1)
    jac = ak.func.jacrev(one, argnums=(0, 1, 2))
    blocks = ak.jit(lambda c, q, wi, oc, op, f: ak.func.vmap(jac)(c[oc], q[op], wi, f),
                    compile="eager")(cams, x, w, obs_cam, obs_pt, feats)
    oc, op = obs_cam.numpy(), obs_pt.numpy()
    for k in range(0, p, 37):  # observation k's rows against the dense columns it reads
        rows = dense[3 * k:3 * k + 3]
        np.testing.assert_allclose(blocks[0].numpy()[k], rows[:, 11 * oc[k]:11 * oc[k] + 11],
                                   rtol=1e-10, atol=1e-12)
        points = 11 * n + 3 * op[k]
        np.testing.assert_allclose(blocks[1].numpy()[k], rows[:, points:points + 3],
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(blocks[2].numpy()[k], rows[:, 11 * n + 3 * m + k],
                                   rtol=1e-10, atol=1e-12)
    sparse = ak.func.sparse_jacobian(residuals, argnums=(0, 1, 2))(cams, x, w)
    np.testing.assert_allclose(sparse.todense().numpy(), dense, rtol=1e-10, atol=1e-12)


def test_the_script_prints_its_table_and_draws_its_picture(tmp_path):
    svg = tmp_path / "ba.svg"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "papers", "adbench_ba", "bundle_adjustment.py"),
                          "--quick", "--frameworks", "adkit", "--svg", str(svg)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert any(line.startswith("| tiny | 5 | 40 | 200 | adkit |")
               for line in out.stdout.splitlines())
    assert "14 colors" in out.stdout  # 11 camera + 3 point columns; the weights fit
    assert svg.read_text().startswith("<svg")
