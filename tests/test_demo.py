"""The README's first command runs `python -m adkit demo`: it must work and pass."""
import subprocess
import sys
from pathlib import Path


def test_demo_runs_and_its_checks_pass(tmp_path):
    root = Path(__file__).resolve().parent.parent
    out_dir = tmp_path / "new" / "folder"  # --out-dir is created when missing
    result = subprocess.run([sys.executable, "-m", "adkit", "demo", "--out-dir",
                             str(out_dir)], cwd=root, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "gradient check: PASSED" in result.stdout
    assert "equals the eager loss: yes" in result.stdout
    assert "its gradients equal ak.func.grad's: yes" in result.stdout
    assert "jit gradient equals the eager one: yes" in result.stdout
    for name in ("forward", "backward"):
        pictures = list(out_dir.glob(f"adkit-demo-{name}.*"))
        assert pictures and pictures[0].stat().st_size > 0
