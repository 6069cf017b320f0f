"""ak.jit(f).export(..., cpu=): libraries built for another CPU than this one.

"generic" (the x86-64 baseline) has no AVX or AVX-512 instruction anywhere in the
library (`objdump -d`: no ymm or zmm register, no VEX-encoded instruction), calls
libmvec's SSE variants only (no AVX2 or AVX-512 one), and gives what in-process code
gives within 1e-12, with its gemm loops and thread pool; "x86-64-v3" uses 256-bit
vectors and no 512-bit ones; "native" uses this machine's widest (zmm on an AVX-512
machine); names LLVM does not know, or CPUs without 64-bit mode, are a ValueError
saying how to list the valid ones.
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import adkit as ak
from adkit.codegen import export_target, runtime

from .test_export import (
    _system_linker,  # noqa: F401  (the autouse fixture: cc, auto BLAS)
    assert_outputs_close,
    assert_round_trip,
    call_library,
    rand,
)

F = ak.func
x86_64 = runtime.target_machine().triple.startswith("x86_64")
pytestmark = [pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)"),
              pytest.mark.skipif(not x86_64, reason="the CPU levels here are x86-64's")]
needs_objdump = pytest.mark.skipif(shutil.which("objdump") is None,
                                   reason="no objdump (binutils)")


def disassembly(lib):
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], check=True,
                          capture_output=True, text=True).stdout


def vector_registers(text):
    """The kinds of vector register the code names: xmm (SSE), ymm (AVX), zmm (AVX-512)."""
    return set(re.findall(r"%([xyz]mm)\d", text))


def vex_instructions(text):
    """Instructions in AVX's encodings (VEX, EVEX): v-prefixed ones on vector registers."""
    return [line for line in text.splitlines()
            if re.match(r"\s*[0-9a-f]+:\s+v\w+\s", line) and "mm" in line]


def libmvec_variants(lib):
    """libmvec's ISA letters among the library's undefined symbols (_ZGV<isa>N...)."""
    symbols = subprocess.run(["objdump", "-T", lib], check=True, capture_output=True,
                             text=True).stdout
    return set(re.findall(r"_ZGV([a-z])N", symbols))


def loss(w, x):
    """A matrix product, vector math (exp, sin, log1p), reductions: and a gradient."""
    h = (x @ w).tanh()
    return (h.exp() * h.sin()).sum() + (x * x).log1p().mean()


@needs_objdump
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("cpu, registers, mvec", [
    ("generic", {"xmm"}, {"b"}), ("x86-64-v3", {"xmm", "ymm"}, {"b", "d"})])
def test_export_for_a_cpu_level(tmp_path, monkeypatch, dtype, cpu, registers, mvec):
    monkeypatch.setenv("ADKIT_EXPORT_BLAS", "loops")  # export_gemm.py's loops, inside
    tol = 1e-12 if dtype == np.float64 else 1e-5
    w, x = rand(48, 10, dtype=dtype), rand(300, 48, dtype=dtype, seed=1)  # rows of 10
    lib = assert_round_trip(tmp_path, F.grad_and_value(loss), w, x, rtol=tol, atol=tol,
                            cpu=cpu)
    text = disassembly(lib)
    assert vector_registers(text) == registers
    if cpu == "generic":
        assert vex_instructions(text) == []
    assert libmvec_variants(lib) <= mvec  # SSE's, AVX2's: no wider than the CPU's
    header = open(lib[:-3] + ".h").read()
    llvm_name = export_target.generic_cpu() if cpu == "generic" else cpu
    assert f'#define LIB_TARGET_CPU "{llvm_name}"' in header
    _same_on_two_threads(lib, (w, x), tol)


def _same_on_two_threads(lib, args, tol):
    """The library's own thread pool, built for the same CPU, gives the same results."""
    set_threads = ctypes.CDLL(lib).lib_set_threads
    set_threads.restype = ctypes.c_int64
    assert set_threads(ctypes.c_int64(2)) == 2
    want = ak.jit(F.grad_and_value(loss))(*args)
    code, got = call_library(lib, "f", args, want)
    assert code == 0
    assert_outputs_close(got, want, tol, tol)
    set_threads(ctypes.c_int64(1))


@needs_objdump
def test_export_native_uses_this_machines_widest_vectors(tmp_path):
    if not runtime.host_features().get("avx512f"):
        pytest.skip("this machine has no AVX-512")
    lib = assert_round_trip(tmp_path, lambda x: (x.exp() * x + 1.0) * x.sin(),
                            rand(64, 256))
    assert "zmm" in vector_registers(disassembly(lib))
    assert "this machine's CPU" in open(lib[:-3] + ".h").read()


@pytest.mark.parametrize("cpu", ["skylake_avx512x", "no-such-cpu", "i386", "help", ""])
def test_export_refuses_cpus_it_cannot_build_for(tmp_path, cpu):
    with pytest.raises(ValueError, match="python -m adkit.codegen.export_target") as info:
        ak.jit(lambda x: x + 1.0).export(tmp_path / "bad", rand(3), cpu=cpu)
    assert repr(cpu) in str(info.value)
    assert not os.listdir(tmp_path)
    if cpu == "skylake_avx512x":
        assert "skylake-avx512" in str(info.value)  # close names suggested
    with pytest.raises(TypeError, match="must be a string"):
        ak.jit(lambda x: x + 1.0).export(tmp_path / "bad", rand(3), cpu=None)


def test_export_lists_the_cpu_names():
    names = export_target.cpu_names()
    assert {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "haswell"} <= set(names)
    listing = subprocess.run([sys.executable, "-m", "adkit.codegen.export_target"],
                             check=True, capture_output=True, text=True).stdout
    assert "x86-64-v3" in listing.split()
