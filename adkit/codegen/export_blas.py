"""Which BLAS an exported library's matrix products call, found at export time.

Owns: `Blas` (the choice: a library and the symbols it exports, or adkit's own loops),
`find_blas()` (ADKIT_EXPORT_BLAS: "auto", "loops" or a library's path) and
`define_callees(module, blas, vector_bytes)`, which gives the names program.MatmulCall
calls (numpy's OpenBLAS's: `scipy_cblas_dgemm64_`, `openblas_set_num_threads_local`)
bodies that call the chosen library, or export_gemm.py's loops. Does not: emit the
products (program.MatmulCall) or link (export_link.py).

In-process, products call the OpenBLAS inside numpy's wheel. An exported library must not
need numpy, so "auto" looks for a system BLAS with a CBLAS interface (OpenBLAS, BLIS,
a reference CBLAS) in the usual library folders and links it; with none, products run
on adkit's own register-tiled loops (export_gemm.py), in the library itself.
"""
import ctypes
import glob
import os
from collections import namedtuple

import numpy as np
from llvmlite import ir

from . import program
from .export_entry import ExportError
from .export_gemm import define_gemm
from .kernels import I64

# what MatmulCall calls, by element size, and its per-thread BLAS thread count
CALLED = {8: "scipy_cblas_dgemm64_", 4: "scipy_cblas_sgemm64_"}
THREADS = program._BLAS_THREADS_LOCAL
# the CBLAS symbol families a library may export: (dgemm, sgemm, bits of its integers)
FAMILIES = (("cblas_dgemm", "cblas_sgemm", 32), ("cblas_dgemm64_", "cblas_sgemm64_", 64),
            ("scipy_cblas_dgemm64_", "scipy_cblas_sgemm64_", 64),
            ("scipy_cblas_dgemm", "scipy_cblas_sgemm", 32))
SYSTEM_NAMES = ("openblas", "blis", "cblas", "blas")  # lib<name>.so*, best first
SYSTEM_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
               "/usr/lib", "/usr/local/lib", "/lib/x86_64-linux-gnu", "/lib64")

# path None: adkit's loops. dgemm, sgemm: the library's symbols; bits: 32 or 64;
# threads: whether it has openblas_set_num_threads_local
Blas = namedtuple("Blas", ("path", "dgemm", "sgemm", "bits", "threads"))
LOOPS = Blas(None, None, None, 64, False)


def find_blas(choice=None):
    """The BLAS to link: ADKIT_EXPORT_BLAS (or `choice`) "loops", a library's path, or
    "auto" (the default): the first system library of SYSTEM_NAMES that has a CBLAS
    interface, else LOOPS."""
    choice = (choice if choice is not None else
              os.environ.get("ADKIT_EXPORT_BLAS", "")).strip() or "auto"
    if choice == "loops":
        return LOOPS
    if choice != "auto":
        blas = inspect_library(choice)
        if blas is None:
            raise ExportError(f"ADKIT_EXPORT_BLAS={choice!r}: not a library with a CBLAS "
                              f"interface ({', '.join(f[0] for f in FAMILIES)}); give "
                              "a BLAS library's path, 'auto' or 'loops'")
        return blas
    for path in system_candidates():
        blas = inspect_library(path)
        if blas is not None:
            return blas
    return LOOPS


def system_candidates():
    """Paths of system libraries that may be a BLAS, best first."""
    found = []
    for name in SYSTEM_NAMES:
        for folder in SYSTEM_DIRS:
            for path in sorted(glob.glob(os.path.join(folder, f"lib{name}.so*"))):
                real = os.path.realpath(path)
                if real not in found:
                    found.append(real)
    return found


def inspect_library(path):
    """The Blas of the library at `path` (its CBLAS symbols), or None."""
    try:
        lib = ctypes.CDLL(os.path.abspath(path) if os.path.exists(path) else path)
    except OSError:
        return None
    for dgemm, sgemm, bits in FAMILIES:
        if hasattr(lib, dgemm) and hasattr(lib, sgemm):
            return Blas(os.path.abspath(path) if os.path.exists(path) else path,
                        dgemm, sgemm, bits, hasattr(lib, THREADS))
    return None


def describe(blas):
    """One line for the header: what the products call."""
    if blas.path is None:
        return ("adkit's own register-tiled loops, in the library (no BLAS was found "
                "at export time; ADKIT_EXPORT_BLAS chooses one)")
    return f"{blas.dgemm}/{blas.sgemm} of {blas.path} ({blas.bits}-bit integers), linked"


def check_sizes(blas, programs):
    """A 32-bit BLAS takes sizes below 2^31: refuse programs with larger buffers."""
    if blas.bits == 64:
        return
    for prog in programs:
        for buf in prog.planner.buffers:
            if int(np.prod(buf.shape, dtype=np.int64)) >= 2 ** 31:
                raise ExportError(f"{prog.name}: a buffer of {list(buf.shape)} elements is "
                                  f"too large for {blas.path}'s 32-bit sizes; set "
                                  "ADKIT_EXPORT_BLAS=loops")


def define_callees(module, blas, vector_bytes):
    """Bodies for the BLAS functions the module's products declare (none when the
    library exports those very names)."""
    for itemsize, name in CALLED.items():
        if name not in module.globals:
            continue
        if blas.path is None:
            define_gemm(module, name, np.float64 if itemsize == 8 else np.float32,
                        vector_bytes)
        elif (blas.dgemm if itemsize == 8 else blas.sgemm) != name:
            _define_wrapper(module, name, blas.dgemm if itemsize == 8 else blas.sgemm,
                            blas.bits)
    if THREADS in module.globals and not blas.threads:
        fn = module.globals[THREADS]  # no such control: one call, one thread count
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(fn.args[0])


def _define_wrapper(module, name, target, bits):
    """Body of `name` (MatmulCall's 64-bit-size gemm): a call of the library's `target`,
    its integers narrowed to `bits`."""
    fn = module.globals[name]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    int_type = ir.IntType(bits)
    types = [arg.type if arg.type != I64 else int_type for arg in fn.args]
    callee = program._declare(module, target, ir.VoidType(), types)
    args = [b.trunc(arg, int_type) if arg.type == I64 and bits < 64 else arg
            for arg in fn.args]
    b.call(callee, args)
    b.ret_void()

