"""papers/enzyme_optimize_first: the quick ablation runs, every variant's gradient equals
the one optimized after AD (the script asserts it), and optimization removes nodes."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "papers", "enzyme_optimize_first", "ablation.py")


def test_quick_ablation_prints_its_table():
    out = subprocess.run([sys.executable, SCRIPT, "--quick"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0] in ("chain", "gmm"):
            rows[cells[0]] = cells
    assert set(rows) == {"chain", "gmm"}
    for cells in rows.values():
        compiled = [int(n) for n in cells[2].split(" / ")]
        assert compiled[1] < compiled[0]  # jit's pipeline removes nodes AD made
        assert all(float(ms) > 0 for ms in cells[3:7])
