"""papers/per_example_gradients: the DP-SGD step (jit(vmap(clipped grad))) equals the
loop of per-example gradients and a numpy transcription of the clipping; the script
prints its table and draws its picture (adkit alone, smallest sizes)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import adkit as ak

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "papers", "per_example_gradients")
sys.path.insert(0, HERE)
import dpsgd  # noqa: E402
import frameworks  # noqa: E402


def _numpy_dp_step(params, x, target, noise, batch, grads_of_one):
    """DP-SGD by hand: per-example gradients (adkit's eager grad, one at a time), their
    joint norm, the clipping, the noisy mean."""
    total = [np.zeros_like(p) for p in params]
    for i in range(batch):
        grads = [g.numpy() for g in grads_of_one(x[i], target[i])]
        norm = np.sqrt(sum(float((g * g).sum()) for g in grads))
        scale = max(norm / dpsgd.CLIP, 1.0)
        total = [t + g / scale for t, g in zip(total, grads)]
    return [p - dpsgd.LEARNING_RATE * (t + dpsgd.NOISE_MULTIPLIER * dpsgd.CLIP * n) / batch
            for p, t, n in zip(params, total, noise)]


@pytest.mark.parametrize("model", ["logreg", "ffnn"])
def test_dp_step_matches_the_loop_and_numpy(model):
    sizes, batch = dpsgd.MODELS[model], 6
    params, (x, y) = dpsgd.init_params(sizes), dpsgd.batch_data(sizes, batch)
    params = tuple(p.astype(np.float64) for p in params)
    x, target = x.astype(np.float64), dpsgd._targets(sizes, y).astype(np.float64)
    noise = tuple(np.random.default_rng(2).standard_normal(p.shape) for p in params)
    steps = frameworks.adkit_steps(params, x, target, noise, batch)
    dp, loop = steps["dp"](), steps["loop"]()
    lib = frameworks.adkit_lib()
    grad_one = ak.func.grad(lambda p, xi, ti: dpsgd.loss(lib, p, xi, ti))
    P = tuple(ak.tensor(p) for p in params)
    want = _numpy_dp_step(params, x, target, noise, batch,
                          lambda xi, ti: grad_one(P, ak.tensor(xi), ak.tensor(ti)))
    for got_dp, got_loop, w in zip(dp, loop, want):
        np.testing.assert_allclose(got_dp.numpy(), w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got_loop.numpy(), w, rtol=1e-10, atol=1e-12)
    # clipping took effect for some example (else the test would not test it)
    norms = [np.sqrt(sum(float((g.numpy() ** 2).sum()) for g in
                         grad_one(P, ak.tensor(x[i]), ak.tensor(target[i]))))
             for i in range(batch)]
    assert max(norms) > dpsgd.CLIP or model == "logreg"


def test_the_script_prints_its_table_and_draws_its_picture(tmp_path):
    svg = tmp_path / "dpsgd.svg"
    out = subprocess.run([sys.executable, os.path.join(HERE, "dpsgd.py"), "--frameworks",
                          "adkit", "--models", "logreg,ffnn", "--batch-sizes", "16",
                          "--repeats", "3", "--svg", str(svg)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("| ffnn | 16 |")]
    assert len(lines) == 1
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert all(float(c) > 0 for c in cells[2:6])  # sgd, dp, loop, dp/sgd
    assert svg.read_text().startswith("<svg") and "polyline" in svg.read_text()
