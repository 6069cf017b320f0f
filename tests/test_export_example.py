"""examples/export_c: export the GMM gradient (for this machine's CPU, and for any
x86-64 one), build main.c against the library with cc and run it with an empty
environment (no Python anywhere near it): its results are within 1e-12 of in-process
ak.jit."""
import os
import shutil
import subprocess
import sys

import pytest

from adkit.codegen import export_target

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "export_c")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
@pytest.mark.parametrize("cpu", ["native", "generic"])
def test_export_c_example_builds_and_runs(tmp_path, cpu):
    env = dict(os.environ, ADKIT_EXPORT_LINKER="cc")
    subprocess.run([sys.executable, os.path.join(EXAMPLE, "export_gmm.py"), str(tmp_path),
                    "--size", "small", "--cpu", cpu], check=True, env=env,
                   capture_output=True)
    for name in ("gmm.so", "gmm.h", "inputs.bin", "expected.bin"):
        assert (tmp_path / name).exists()
    main = tmp_path / "main"
    subprocess.run(["cc", "-O2", f"-I{tmp_path}", "-o", str(main),
                    os.path.join(EXAMPLE, "main.c"), str(tmp_path / "gmm.so"), "-lm",
                    "-Wl,-rpath,$ORIGIN"], check=True)
    run = subprocess.run([str(main), str(tmp_path), "2"], env={}, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: within 1e-12 of adkit" in run.stdout
    assert "2 threads" in run.stdout
    assert f"built for CPU {export_target.find_target(cpu).cpu}" in run.stdout
