"""papers/sparse_jacobians: the 2-D Brusselator's Jacobian by detection, coloring and
compressed forward mode equals dense jacfwd (adkit), with at most 8 colors; the script's
table and picture come out (jax left out: it runs in a subprocess)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import adkit as ak

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "papers", "sparse_jacobians")
sys.path.insert(0, HERE)
import brusselator  # noqa: E402


@pytest.mark.parametrize("n", [4, 8])
def test_the_sparse_jacobian_is_the_dense_one(n):
    state, forcing = brusselator.grid_data(n)
    lib, forcing, x = brusselator.AdkitLib(ak), ak.tensor(forcing), ak.tensor(state)

    def f(s):
        return brusselator.residual(lib, s, forcing)
    dense = ak.func.jacfwd(f)(x).numpy()
    pattern = ak.func.jacobian_sparsity(f, x)
    assert pattern.nnz == 6 * 2 * n * n  # five of its own field, one of the other
    structural = np.zeros(dense.shape, bool)
    structural[pattern.rows, pattern.cols] = True
    assert not (dense != 0)[~structural].any()  # never misses a nonzero
    assert ak.ir.passes.color(pattern, "column").max() + 1 <= 8
    sparse = ak.jit(ak.func.sparse_jacobian(f))(x)
    np.testing.assert_allclose(np.asarray(sparse.todense()), dense, rtol=1e-12, atol=1e-9)


def test_the_script_prints_its_table_and_draws_its_picture(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(HERE, "brusselator.py"), "--sizes",
                          "4,8", "--no-jax", "--svg", str(tmp_path / "b.svg")],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert out.returncode == 0, out.stderr
    assert "| 8 | 128 | 768 | " in out.stdout
    assert (tmp_path / "b.svg").read_text().startswith("<svg")
