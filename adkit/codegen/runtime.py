"""The only module that touches llvmlite.binding: the host target machine, the
optimization pipeline (LLVM's new pass manager), the JIT engine, the native libraries
compiled code may call (glibc's libmvec, numpy's OpenBLAS), and ctypes wrappers.

Owns: `compile_module(ir_module) -> NativeModule`, `host_vector_isa()`,
`mvec_available()`, `blas_library()`. Does not: generate IR (kernels.py, scalar.py).
"""
import contextlib
import contextvars
import ctypes
import functools
import glob
import os
import threading

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from . import disk_cache

LIBMVEC_CANDIDATES = ("libmvec.so.1", "/lib/x86_64-linux-gnu/libmvec.so.1",
                      "/usr/lib/x86_64-linux-gnu/libmvec.so.1")


@functools.lru_cache(maxsize=None)
def _initialized():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


def new_target_machine(reloc="default", codemodel="jitdefault"):
    """A target machine for the host's CPU and features (opt level 3). NB: an execution
    engine takes ownership of the one it is given, so each engine gets its own. A shared
    library's code (export.py) wants reloc="pic", codemodel="default"."""
    _initialized()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, reloc=reloc, codemodel=codemodel)


@functools.lru_cache(maxsize=None)
def target_machine():
    """The shared target machine for passes and code emission (never given away)."""
    return new_target_machine()


@functools.lru_cache(maxsize=None)
def host_features():
    _initialized()
    return dict(llvm.get_host_cpu_features())


def host_vector_isa():
    """libmvec's ISA letter and vector width in bytes for this CPU: AVX-512 'e' (64),
    AVX2 'd' (32), SSE 'b' (16)."""
    features = host_features()
    if features.get("avx512f"):
        return "e", 64
    if features.get("avx2"):
        return "d", 32
    return "b", 16


# The widest vector, in bytes, of the CPU code is made for when that is not this
# machine's: an export for another CPU sets it (export.py); None: the host's
TARGET_VECTOR_BYTES = contextvars.ContextVar("adkit_target_vector_bytes", default=None)


def target_vector_bytes():
    """The widest vector of the CPU code is planned and emitted for (what vector widths
    and libmvec variants follow): TARGET_VECTOR_BYTES, else this machine's."""
    return TARGET_VECTOR_BYTES.get() or host_vector_isa()[1]


@functools.lru_cache(maxsize=None)
def mvec_available():
    """Load glibc's libmvec (vector exp, log, sin...) into the JIT's symbol space."""
    _initialized()
    for name in LIBMVEC_CANDIDATES:
        try:
            llvm.load_library_permanently(name)
            return True
        except RuntimeError:
            continue
    return False


@functools.lru_cache(maxsize=None)
def blas_library():
    """Path of the OpenBLAS that numpy ships (its cblas symbols carry a scipy_ prefix
    and a 64 suffix), loaded into the JIT's symbol space; None if not found."""
    _initialized()
    libs = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*")
    for path in sorted(glob.glob(libs)):
        llvm.load_library_permanently(path)
        return path
    return None


@functools.lru_cache(maxsize=None)
def array_data_offset():
    """Where a numpy array object keeps its data pointer (after PyObject_HEAD in
    PyArrayObject): checked on a real array, so compiled code never guesses."""
    arr = np.arange(3.0)
    want = arr.__array_interface__["data"][0]
    for offset in (16, 24, 32):
        if ctypes.c_void_p.from_address(id(arr) + offset).value == want:
            return offset
    raise RuntimeError("adkit could not find the data pointer in numpy's array object")


def version_key():
    """What compiled code depends on: llvmlite/LLVM versions and the host CPU."""
    features = ",".join(sorted(k for k, v in host_features().items() if v))
    return (f"llvmlite={llvmlite.__version__};llvm={llvm.llvm_version_info};"
            f"cpu={llvm.get_host_cpu_name()};features={features};codegen=no-misched")


def optimize(module, machine=None):
    """Run LLVM's default O3 pipeline with loop and SLP vectorization on `module`, its
    cost models those of `machine`'s CPU (default: the host's, target_machine())."""
    tm = machine or target_machine()
    options = llvm.create_pipeline_tuning_options()
    options.speed_level = 3
    options.loop_vectorization = True
    options.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(module, builder)


@contextlib.contextmanager
def code_generation():
    """LLVM's code generation as adkit wants it, for the duration (the options are
    process-wide: they are put back for other users of llvmlite, such as numba): no
    pre-register-allocation machine scheduling. Our kernels are long straight blocks (a
    matmul's unrolled multiply-adds, inline math); that scheduler hoisted their loads and
    constants and spilled them. Without it, measured in one process against the same
    code: the tanh loop's forward step 0.84x, its gradient 0.91x; GMM, BA, LSTM and
    elementwise chains unchanged (within 3%)."""
    with _CODEGEN_LOCK:
        llvm.set_option("", "-enable-misched=false")
        try:
            yield
        finally:
            llvm.set_option("", "-enable-misched=true")


_CODEGEN_LOCK = threading.Lock()


class NativeModule:
    """A compiled module: its functions as ctypes callables, its LLVM IR and assembly."""

    def __init__(self, llvm_ir, engine, module):
        self.llvm_ir = llvm_ir
        self._engine = engine  # keeps the code alive
        self._module = module
        self._asm = None

    @property
    def asm(self):
        if self._asm is None:
            with code_generation():
                self._asm = target_machine().emit_assembly(self._module)
        return self._asm

    @property
    def from_cache(self):
        return self._module is None

    def function(self, name, restype, *argtypes):
        address = self._engine.get_function_address(name)
        if not address:
            raise RuntimeError(f"compiled module has no function {name!r}")
        return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def compile_module(ir_module):
    """Verify, optimize and JIT-compile an llvmlite.ir.Module, through the on-disk
    cache of object code (see disk_cache.py) when it is enabled."""
    _initialized()
    mvec_available()
    text = str(ir_module)
    if "cblas_" in text:  # loading OpenBLAS costs a process's first compile ~15 ms
        blas_library()
    key = disk_cache.key(text, version_key())
    cached = disk_cache.load(key)
    if cached is not None:
        try:
            return _from_object(text, cached)
        except RuntimeError:  # a damaged cache file: compile again (and overwrite it)
            pass
    module = llvm.parse_assembly(text)
    module.verify()
    optimize(module)
    with code_generation():
        data = target_machine().emit_object(module)  # once: run and cache
    disk_cache.store(key, data)
    native = _from_object(text, data)
    native._module = module
    native._asm = None
    return native


def _from_object(text, data):
    """A NativeModule from cached object code (no optimization or code generation)."""
    empty = llvm.parse_assembly("")
    engine = llvm.create_mcjit_compiler(empty, new_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    native = NativeModule(text, engine, None)
    native._asm = "(loaded from the on-disk cache: no assembly listing)"
    return native


@functools.lru_cache(maxsize=None)
def list_items_offset():
    """Where a Python list object keeps the pointer to its items (PyListObject's
    ob_item): checked on a real list, so compiled code never guesses."""
    items = [object()]
    for offset in (24, 32, 16):
        address = ctypes.c_void_p.from_address(id(items) + offset).value
        if address and ctypes.c_void_p.from_address(address).value == id(items[0]):
            return offset
    raise RuntimeError("adkit could not find the items pointer in Python's list object")
