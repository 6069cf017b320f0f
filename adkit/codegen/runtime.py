"""The only module that touches llvmlite.binding: the host target machine, the
optimization pipeline (LLVM's new pass manager), the JIT engine, the native libraries
compiled code may call (glibc's libmvec, numpy's OpenBLAS), and ctypes wrappers.

Owns: `compile_module(ir_module, quick) -> NativeModule` (optimized code, or quick code
to run until it is made), `host_vector_isa()`, `mvec_available()`, `blas_library()`,
`one_blas_thread()`. Does not: generate IR (kernels.py, scalar.py).
"""
import contextlib
import contextvars
import ctypes
import functools
import os
import threading

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from . import disk_cache, llvm_calls, module_split
from .on_thread import OnThread

LIBMVEC_CANDIDATES = ("libmvec.so.1", "/lib/x86_64-linux-gnu/libmvec.so.1",
                      "/usr/lib/x86_64-linux-gnu/libmvec.so.1")


@functools.lru_cache(maxsize=None)
def _initialized():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


def new_target_machine(reloc="default", codemodel="jitdefault", opt=3):
    """A target machine for the host's CPU and features (opt level 3 unless told). NB:
    an execution engine takes ownership of the one it is given, so each engine gets its
    own. A shared library's code (export.py) wants reloc="pic", codemodel="default"."""
    cpu, features = _host_cpu()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc=reloc,
                                        codemodel=codemodel)


@functools.lru_cache(maxsize=None)
def _host_cpu():
    """(name, features) of this CPU, as LLVM says."""
    return llvm.get_host_cpu_name(), _host_feature_map().flatten()


@functools.lru_cache(maxsize=None)
def _host_feature_map():
    """LLVM's FeatureMap of this CPU, asked once (0.2-0.4 ms an asking)."""
    _initialized()
    return llvm.get_host_cpu_features()


@functools.lru_cache(maxsize=None)
def target_machine():
    """The shared target machine for passes and code emission (never given away)."""
    return new_target_machine()


@functools.lru_cache(maxsize=None)
def host_features():
    return dict(_host_feature_map())


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
def _numpy_openblas():
    """Path of the OpenBLAS that numpy ships (its cblas symbols carry a scipy_ prefix
    and a 64 suffix), or None."""
    libs = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    try:  # (a listing, not glob: glob's pattern took 0.3 ms of a warm first call)
        names = sorted(name for name in os.listdir(libs) if "openblas" in name)
    except OSError:
        return None
    return os.path.join(libs, names[0]) if names else None


@functools.lru_cache(maxsize=None)
def blas_library():
    """Path of numpy's OpenBLAS, loaded into the JIT's symbol space; None if not found."""
    _initialized()
    path = _numpy_openblas()
    if path is not None:
        llvm.load_library_permanently(path)
    return path


@functools.lru_cache(maxsize=None)
def _blas_threads_local():
    """numpy's OpenBLAS's `int openblas_set_num_threads_local(int)` (it returns the
    previous count; NB: process-wide, despite its name, in pthreads builds), or None."""
    path = _numpy_openblas()
    try:
        fn = ctypes.CDLL(path).openblas_set_num_threads_local if path else None
    except (OSError, AttributeError):
        return None
    if fn is not None:
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
    return fn


@contextlib.contextmanager
def one_blas_thread():
    """numpy's matrix products on one OpenBLAS thread for the duration, as compiled
    code runs its own (program.py): OpenBLAS's workers spin-wait between calls, and on
    busy cores a small product that waits for them took 15-40 ms instead of 0.3 (an
    MLP's first call on numpy: 8-200 ms instead of 4-7). The count is process-wide:
    other threads' products meanwhile run on one thread too."""
    set_local = _blas_threads_local()
    previous = set_local(1) if set_local is not None else None
    try:
        yield
    finally:
        if previous is not None:
            set_local(previous)


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


@functools.lru_cache(maxsize=None)
def version_key():
    """What compiled code depends on: llvmlite/LLVM versions and the host CPU (made
    once per process: neither changes, and asking LLVM took 0.2-1 ms a time, three
    times in a warm first call: the plan's key, the pool's and the code's)."""
    features = ",".join(sorted(k for k, v in host_features().items() if v))
    return (f"llvmlite={llvmlite.__version__};llvm={llvm.llvm_version_info};"
            f"cpu={_host_cpu()[0]};features={features};codegen=no-misched")


def optimize(module, machine=None, own_context=False):
    """Run LLVM's default O3 pipeline with loop and SLP vectorization on `module`, its
    cost models those of `machine`'s CPU (default: the host's, target_machine()).
    `own_context`: the module is in an LLVM context of its own, and the passes run
    without llvmlite's lock (llvm_calls.py)."""
    tm = machine or target_machine()
    options = llvm.create_pipeline_tuning_options()
    options.speed_level = 3
    options.loop_vectorization = True
    options.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, options)
    passes = builder.getModulePassManager()
    if own_context:
        llvm_calls.run_passes(passes, module, builder)
    else:
        passes.run(module, builder)


@contextlib.contextmanager
def code_generation(quick=False):
    """LLVM's code generation as adkit wants it, for the duration (the options are
    process-wide: they are put back for other users of llvmlite, such as numba): no
    pre-register-allocation machine scheduling. Our kernels are long straight blocks (a
    matmul's unrolled multiply-adds, inline math); that scheduler hoisted their loads and
    constants and spilled them. Without it, measured in one process against the same
    code: the tanh loop's forward step 0.84x, its gradient 0.91x; GMM, BA, LSTM and
    elementwise chains unchanged (within 3%). `quick` (quick_object): no loop strength
    reduction either (a fifth of the code generation's time, for nothing measurable).
    Compiles in one mode run side by side (threads: runtime.Compiles); one in the
    other mode waits for them."""
    with _CODEGEN:
        _CODEGEN.wait_for(lambda: not _CODEGEN.users or _CODEGEN.quick == quick)
        if not _CODEGEN.users:
            llvm.set_option("", "-enable-misched=false")
            llvm.set_option("", "-disable-lsr" if quick else "-disable-lsr=false")
            _CODEGEN.quick = quick
        _CODEGEN.users += 1
    try:
        yield
    finally:
        with _CODEGEN:
            _CODEGEN.users -= 1
            if not _CODEGEN.users:
                llvm.set_option("", "-enable-misched=true")
                llvm.set_option("", "-disable-lsr=false")
                _CODEGEN.notify_all()


# who is generating code now: how many, in which mode (code_generation)
_CODEGEN = threading.Condition()
_CODEGEN.users, _CODEGEN.quick = 0, False


class NativeModule:
    """Compiled modules linked together (one engine: their symbols resolve across
    them): their functions as ctypes callables, their LLVM IR and assembly;
    `optimized` is False for quick_object's code. `texts`: each module's IR (or a
    function giving them: the plan cache reads them lazily)."""

    def __init__(self, texts, engine, from_cache=True, optimized=True):
        self._texts = texts
        self._engine = engine  # keeps the code alive
        self.from_cache, self.optimized = from_cache, optimized
        self._asm = None

    @property
    def texts(self):
        if callable(self._texts):
            self._texts = self._texts()
        return self._texts

    @property
    def llvm_ir(self):
        return "\n".join(self.texts)

    @property
    def asm(self):
        """The assembly, made again from the IR as it was compiled (no LLVM module is
        kept: each lives in an LLVM context of its own, disposed after its compile)."""
        if self._asm is None:
            self._asm = "\n".join(_object_code(text, not self.optimized, assembly=True)
                                  for text in self.texts)
        return self._asm

    def function(self, name, restype, *argtypes):
        address = self._engine.get_function_address(name)
        if not address:
            raise RuntimeError(f"compiled module has no function {name!r}")
        return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def compile_module(ir_module, quick=False):
    """Verify, optimize and JIT-compile an llvmlite.ir.Module, through the on-disk
    cache of object code (see disk_cache.py) when it is enabled. `quick`: when the
    cache has no optimized code for it, compile with quick_object (not cached) and
    leave the NativeModule's `optimized` False; `compile_texts(native.texts)` makes the
    optimized one later."""
    return compile_texts([str(ir_module)], quick)


def compile_text(text, quick=False):
    """compile_module of a module's LLVM IR text."""
    return compile_texts([text], quick)


def compile_texts(texts, quick=False):
    """compile_module of several modules' IR, linked into one NativeModule (compiled
    one after another: Compiles runs them on threads)."""
    compiles = Compiles(quick, threads=False)
    for text in texts[:-1]:
        compiles.add(text)
    return compiles.finish(texts[-1])


# functions of the modules' IR texts that Compiles.finish calls before it links them:
# pool.py's, which compiles the pool when the code calls it (its symbol is resolved then)
BEFORE_LINK = []


class Compiles:
    """Modules compiled as their IR comes (`add`: on a thread of its own, LLVM runs
    without the GIL, beside the Python making the next module), then linked with the
    last one (`finish`, compiled in the caller's thread) into one NativeModule. A
    module the disk cache has is loaded, not compiled; with `quick`, the others are
    compiled by quick_object (and not cached), else at O3 (and cached)."""

    def __init__(self, quick=False, threads=True, cold=None):
        self.quick, self.threads, self.cold = quick, threads, cold
        self.texts, self._results, self._running = [], {}, []
        _initialized()
        mvec_available()

    def add(self, text):
        index = len(self.texts)
        self.texts.append(text)
        if not self.threads:
            self._results[index] = self._object(text)
            return
        worker = threading.Thread(target=self._compile_into, args=(index, text),
                                  name="adkit-llvm", daemon=True)
        worker.start()
        self._running.append(worker)

    def _compile_into(self, index, text):
        try:
            self._results[index] = self._object(text)
        except BaseException as e:  # noqa: BLE001 -- finish() raises it in the caller
            self._results[index] = e

    def _object(self, text, use_cache=True):
        """(object code, whether the disk cache had it, optimized) of one module's IR."""
        if "cblas_" in text:  # loading OpenBLAS costs a process's first compile ~15 ms
            blas_library()
        key = disk_cache.key(text, version_key())
        cached = disk_cache.load(key) if use_cache else None
        if cached is not None:
            return cached, True, True
        data = quick_object(text, cold=self.cold) if self.quick else optimized_object(text)
        if not self.quick:
            disk_cache.store(key, data)
        return data, False, not self.quick

    def wait(self):
        """Join the threads (also when the caller gives up: none may outlive it)."""
        for worker in self._running:
            worker.join()
        self._running = []

    def finish(self, text):
        """The NativeModule of every module added and of `text`."""
        try:
            self._results[len(self.texts)] = self._object(text)
            self.texts.append(text)
        finally:
            self.wait()
        results = [self._results[i] for i in range(len(self.texts))]
        for result in results:
            if isinstance(result, BaseException):
                raise result
        for hook in BEFORE_LINK:
            hook(self.texts)
        try:
            return _linked(self.texts, results)
        except RuntimeError:  # a damaged cache file: compile again (and overwrite it)
            if not any(cached for _, cached, _ in results):
                raise
            return _linked(self.texts, [self._object(t, use_cache=False)
                                        for t in self.texts])


def _linked(texts, results):
    # (quick code of a module may be two objects: quick_object)
    objects = [part for data, _, _ in results
               for part in (data if isinstance(data, list) else [data])]
    native = from_object_code(texts, objects)
    native.from_cache = all(cached for _, cached, _ in results)
    native.optimized = all(optimized for _, _, optimized in results)
    return native


def optimized_object(text):
    """The object code of LLVM IR text: verified, O3, code generation at O3."""
    return _object_code(text, quick=False)


def quick_object(text, level=1, cold=None):
    """The object code of LLVM IR text compiled 5-7x faster than at O3, for code
    that runs while the optimized code is made: accumulators out of memory into
    registers (SROA), instructions combined, branches simplified, then code generation
    at opt level 1 without loop strength reduction. Our kernels come vectorized, so
    this code ran as fast as O3's (GMM gradient, MLP, a 50-node chain), where O3 spent
    5-9x as long compiling it (its loop passes, strength reduction). Code generation at
    opt level 0 compiled 2x faster still, but its register allocator kept loop values
    on the stack: GMM's gradient ran 2.5-3x slower (`level` 0 is for code whose speed
    does not matter). `cold(name)`: whether a function is compiled without optimization,
    for code whose speed matters little (compiled.quick_cold: a plan's entries, small
    kernels): in a module of its own at code generation level 0, on a thread beside
    the rest (module_split.py; the result is then a list of two objects), or, when the
    module cannot be split, as LLVM's optnone (instruction selection and register
    allocation at their fastest, but the per-function cost of level 1)."""
    halves = module_split.split_cold(text, cold) if cold is not None and level else None
    if halves is None:
        return _object_code(text, quick=True, level=level, cold=cold)
    cold_text, hot_text = halves  # (module_split.py says why)
    cold_object = OnThread(lambda: _object_code(cold_text, quick=True, level=0,
                                                passes=False), "adkit-llvm-cold")
    try:
        hot_object = _object_code(hot_text, quick=True, level=level)
    finally:
        cold_object.thread.join()
    return [cold_object.result(), hot_object]


def _object_code(text, quick, level=1, assembly=False, cold=None, passes=True):
    """Object code (or assembly) of IR text, in an LLVM context of its own (a context
    is not thread safe, and compiles run on threads, side by side: llvm_calls.py),
    disposed before this returns (a context and its modules left to the garbage
    collector may be freed in either order, and a module freed after its context
    crashes). Quick code without `passes`: code generation only (module_split's cold
    half). Few calls into llvmlite: each takes the GIL again, and a thread compiling
    beside Python that emits IR waits up to the switch interval (5 ms) for it."""
    context = llvm.create_context()
    module = llvm_calls.parse_assembly(text, context)
    try:
        module.verify()
        machine = thread_target_machine(level if quick else 3)
        if not quick:
            optimize(module, machine, own_context=True)
        elif passes:
            _mark_unoptimized(module, text, cold)
            builder = llvm.create_pass_builder(machine,
                                               llvm.create_pipeline_tuning_options())
            pass_manager = llvm.create_new_module_pass_manager()
            pass_manager.add_sroa_pass()
            pass_manager.add_instruction_combine_pass()
            pass_manager.add_simplify_cfg_pass()
            llvm_calls.run_passes(pass_manager, module, builder)
            del pass_manager, builder  # before anything they point to
        with code_generation(quick):
            data = llvm_calls.emit_object(machine, module, use_object=not assembly)
        return data.decode() if assembly else data
    finally:
        module.close()
        context.close()


def _mark_unoptimized(module, text, cold):
    """LLVM's optnone on the functions `cold(name)` says, found by name in the text
    (not by walking the module's functions through llvmlite, three calls each)."""
    if cold is None:
        return
    for name in module_split.defined_functions(text):
        if cold(name):
            fn = module.get_function(name)
            fn.add_function_attribute("noinline")  # (optnone requires it)
            fn.add_function_attribute("optnone")


def thread_target_machine(level):
    """This thread's target machine at opt level `level` (compiles run on threads: a
    target machine is not shared between them)."""
    machines = _THREAD_MACHINES.__dict__.setdefault("by_level", {})
    if level not in machines:
        machines[level] = new_target_machine(opt=level)
    return machines[level]


_THREAD_MACHINES = threading.local()


@functools.lru_cache(maxsize=None)
def _default_target():
    return llvm.Target.from_default_triple()


def linked_engine(objects):
    """An MCJIT engine with these object files loaded and linked (their relocations
    resolved, their memory made executable). LLVM's engine is made with a module;
    it is an empty one, taken out again before linking: left in, linking generated
    code for it, which builds LLVM's whole code generation pipeline (~0.7 ms an
    engine, ~1.4 the process's first: a 7 KB pool's link 1.43 -> 0.06 ms)."""
    _initialized()
    empty = llvm.parse_assembly("")
    # the engine's target machine makes no code (it links object code only), so it is
    # a generic one: without the host's ~115 features to parse (0.15 ms an engine)
    engine = llvm.create_mcjit_compiler(
        empty, _default_target().create_target_machine(codemodel="jitdefault"))
    engine.remove_module(empty)
    for data in objects:
        engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    return engine


def from_object_code(texts, objects):
    """A NativeModule of object code (no optimization or code generation): cached
    code, or code just made, one object per module. `texts`: each module's IR (or a
    function giving them: the plan cache reads them lazily). `object_code` keeps the
    objects (the plan cache stores them). Code calling libmvec, OpenBLAS or the
    thread pool needs them loaded first (Compiles does; plan_cache.py for the code it
    stores)."""
    native = NativeModule(texts, linked_engine(objects))  # (only optimized code is cached)
    native.object_code = list(objects)
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
