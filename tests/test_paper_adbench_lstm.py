"""papers/adbench_lstm: adkit's D-LSTM gradient (ak.scan under ak.jit) against central
differences and the eager Python-loop form; the script prints its table and picture."""
import os
import subprocess
import sys

import numpy as np

import adkit as ak

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "papers", "adbench_lstm"), os.path.join(ROOT, "benchmarks")]
import lstm  # noqa: E402


def test_gradient_matches_differences_and_the_python_loop():
    data = lstm.lstm_data(np.random.default_rng(3), layers=2, chars=8)
    main, extra, state, seq = (ak.tensor(a) for a in data)
    lib = lstm.Lib(ak.exp, ak.log, ak.tanh, ak.stack, ak.cat)

    def f(m, e, scan=ak.scan):
        return lstm.lstm_objective(lib, scan, m, e, state, seq)
    gm, ge = ak.jit(ak.func.grad(f, (0, 1)), compile="eager")(main, extra)
    lm, le = ak.func.grad(lambda m, e: f(m, e, lstm.python_scan), (0, 1))(main, extra)
    np.testing.assert_allclose(gm.numpy(), lm.numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(ge.numpy(), le.numpy(), rtol=1e-10, atol=1e-13)
    rng, h = np.random.default_rng(4), 1e-6
    for _ in range(3):
        dm, de = rng.standard_normal(main.shape), rng.standard_normal(extra.shape)
        plus = f(main + h * ak.tensor(dm), extra + h * ak.tensor(de)).item()
        minus = f(main - h * ak.tensor(dm), extra - h * ak.tensor(de)).item()
        want = (plus - minus) / (2 * h)
        got = float((gm.numpy() * dm).sum() + (ge.numpy() * de).sum())
        assert abs(got - want) <= 1e-6 * max(1.0, abs(want))


def test_the_script_prints_its_table_and_draws_its_picture(tmp_path):
    svg = tmp_path / "lstm.svg"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "papers", "adbench_lstm",
                                                       "lstm.py"), "--quick", "--frameworks",
                          "adkit", "--svg", str(svg)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 2 | 64 | adkit |")]
    assert len(rows) == 1
    assert float(rows[0].strip("|").split("|")[-1]) > 0
    assert svg.read_text().startswith("<svg")
