"""The on-disk cache of compiled code: a second process reuses it; it can be moved or
disabled with environment variables; a damaged file is compiled again."""
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import numpy as np, adkit as ak
f = ak.jit(lambda t: ((t * 2.0).exp() + 1.0).tanh())
x = ak.tensor(np.linspace(-1, 1, 1000))
y = f(x)
print(f.compile(x).module.from_cache, repr(float(y.sum())))
"""
ROOT = Path(__file__).resolve().parent.parent


def _run(env):
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    from_cache, total = out.stdout.split()
    return from_cache == "True", total


def test_jit_cache_is_reused_by_a_second_process(tmp_path):
    env = {"ADKIT_CACHE_DIR": str(tmp_path)}
    first, value1 = _run(env)
    second, value2 = _run(env)
    assert not first and second and value1 == value2
    files = list(tmp_path.rglob("*.o"))
    assert files and all(f.stat().st_size > 0 for f in files)
    assert not list(tmp_path.rglob("*.tmp"))  # writes are atomic


def test_jit_cache_can_be_disabled(tmp_path):
    env = {"ADKIT_CACHE_DIR": str(tmp_path), "ADKIT_DISABLE_CACHE": "1"}
    assert _run(env)[0] is False and _run(env)[0] is False
    assert not list(tmp_path.rglob("*.o"))


def test_jit_cache_damaged_file_is_recompiled(tmp_path):
    env = {"ADKIT_CACHE_DIR": str(tmp_path)}
    _, value = _run(env)
    for f in [*tmp_path.rglob("*.o"), *tmp_path.rglob("*.plan")]:
        f.write_bytes(b"not an object file")
    from_cache, again = _run(env)
    assert not from_cache and again == value
