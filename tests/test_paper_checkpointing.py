"""papers/checkpointing: the quick run's checkpointed gradients recompute exactly
Revolve's closed form of forward steps and add less memory than keeping every step; the
script prints its table and draws its picture."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "papers", "checkpointing", "scan_checkpointing.py")


def test_quick_run_counts_match_the_closed_form_and_checkpoints_save_memory(tmp_path):
    svg = tmp_path / "scan.svg"
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--no-jax", "--no-torch",
                          "--svg", str(svg)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and cells[0] == "adkit":
            rows[(int(cells[1]), cells[2])] = cells[1:]
    assert set(rows) == {(n, p) for n in (100, 1000) for p in ("none", "sqrt", "10")}
    for (n, policy), cells in rows.items():
        if policy != "none":
            assert cells[7] == cells[8], f"n={n} {policy}: counted {cells[7]}, t(n,s) {cells[8]}"
    assert float(rows[(1000, "none")][3]) > 3 * float(rows[(1000, "10")][3])
    assert svg.read_text().startswith("<svg")
