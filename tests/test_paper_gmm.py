"""ADBench's GMM objective (papers/adbench_gmm): adkit's gradients on the smallest
configuration (d=2, k=5, n=1000) against central finite differences, the hand-derived numpy
gradient and a transcription of ADBench's C++ loops; adkit jit against adkit eager. Peers
(HIPS autograd, torch) are optional; jax runs in a subprocess (its LLVM must not share a
process with llvmlite's)."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import adkit as ak

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GMM_DIR = os.path.join(ROOT, "papers", "adbench_gmm")
sys.path.insert(0, GMM_DIR)
import gmm  # noqa: E402

TOL = 1e-8


def rel(a, b):
    return gmm.rel_err(a, b)


@pytest.fixture(scope="module")
def data():
    return gmm.config_data("small")


@pytest.fixture(scope="module")
def reference(data):
    return gmm.numpy_value_and_grad(data)


@pytest.fixture(scope="module")
def adkit_eager(data):
    _, value_and_grad, to_numpy = gmm.make_tool("adkit", data)
    return to_numpy(value_and_grad())


def test_data_follows_adbench_generator(data):
    d, k, n = gmm.CONFIGS["small"]
    assert data["alphas"].shape == (k,) and data["means"].shape == (k, d)
    assert data["icf"].shape == (k, d * (d + 1) // 2) and data["x"].shape == (n, d)
    assert (data["gamma"], data["m"]) == (1.0, 0)
    assert 0.0 <= data["means"].min() and data["means"].max() < 1.0      # uniform [0, 1)
    rs = np.random.RandomState(31337)
    rs.uniform(0, 1, 200 * d)
    first_normals = rs.normal(0, 1, k + 1)
    np.testing.assert_array_equal(data["alphas"], first_normals[:k])   # alphas come first
    assert data["icf"][0, 0] == first_normals[k]                       # then icf rows
    np.testing.assert_array_equal(gmm.config_data("small")["x"], data["x"])  # fixed seed


def test_objective_matches_adbench_loops():
    # d = 4 has 6 lower-triangular entries, so this pins down their order in icf
    for d, k in [(2, 5), (4, 3), (5, 2)]:
        few = gmm.subset(gmm.generate(d, k, 30), 30)
        ref = gmm.adbench_loops_objective(few)
        assert abs(gmm.numpy_objective(few) - ref) <= TOL * abs(ref)
        ns = gmm.AdkitNs()
        layout = gmm.make_layout(ns, d, k, 30, few["gamma"], few["m"])
        params = tuple(ak.tensor(few[name]) for name in ("alphas", "means", "icf"))
        value = gmm.objective(ns, params, ak.tensor(few["x"]), few["gamma"], few["m"], layout)
        assert abs(value.item() - ref) <= TOL * abs(ref)


def test_hand_derived_gradient_matches_finite_differences(data, reference):
    fd = gmm.finite_differences(data)
    assert rel(reference[1], fd) < 1e-6


def test_adkit_eager_value_and_gradient(data, reference, adkit_eager):
    value, grads = adkit_eager
    assert abs(value - reference[0]) <= TOL * abs(reference[0])
    assert abs(value - gmm.numpy_objective(data)) <= TOL * abs(reference[0])
    for g, r in zip(grads, reference[1]):
        assert g.shape == r.shape
    assert rel(grads, reference[1]) < TOL


def test_adkit_eager_gradient_matches_finite_differences(data, adkit_eager):
    assert rel(adkit_eager[1], gmm.finite_differences(data)) < 1e-6


def test_adkit_backward_matches_func_grad(data, adkit_eager):
    _, value_and_grad, to_numpy = gmm.make_tool("adkit-backward", data)
    value, grads = to_numpy(value_and_grad())
    value2, grads2 = to_numpy(value_and_grad())      # .grad is reset, not accumulated
    assert value == value2 and rel(grads2, grads) == 0.0
    assert abs(value - adkit_eager[0]) <= TOL * abs(value)
    assert rel(grads, adkit_eager[1]) < TOL


def test_adkit_jit_matches_eager(data, adkit_eager):
    objective, value_and_grad, to_numpy = gmm.make_tool("adkit-jit", data)
    value, grads = to_numpy(value_and_grad())
    assert abs(value - adkit_eager[0]) <= TOL * abs(value)
    assert rel(grads, adkit_eager[1]) < TOL
    assert abs(objective().item() - adkit_eager[0]) <= TOL * abs(value)
    value_again, grads_again = to_numpy(value_and_grad())          # the cached program
    assert value_again == value and rel(grads_again, grads) == 0.0


def test_hips_autograd_agrees(data, reference):
    pytest.importorskip("autograd")
    _, value_and_grad, to_numpy = gmm.make_tool("autograd", data)
    value, grads = to_numpy(value_and_grad())
    assert abs(value - reference[0]) <= TOL * abs(value) and rel(grads, reference[1]) < TOL


def test_torch_agrees(data, reference):
    pytest.importorskip("torch")
    _, value_and_grad, to_numpy = gmm.make_tool("torch", data)
    value, grads = to_numpy(value_and_grad())
    assert abs(value - reference[0]) <= TOL * abs(value) and rel(grads, reference[1]) < TOL


def test_jax_agrees_in_subprocess(tmp_path, reference):
    if importlib.util.find_spec("jax") is None:     # not imported here: see the docstring
        pytest.skip("jax is not installed")
    out = str(tmp_path / "jax")
    subprocess.run([sys.executable, os.path.join(GMM_DIR, "gmm.py"), "--worker", "jax-jit",
                    "small", out], check=True, capture_output=True, timeout=120)
    saved = np.load(out + ".npz")
    grads = tuple(saved[f"arr_{i}"] for i in range(3))
    assert abs(float(saved["value"]) - reference[0]) <= TOL * abs(reference[0])
    assert rel(grads, reference[1]) < TOL
