"""LLVM's three long calls of a compile (parsing IR text, running passes, code
generation) made without llvmlite's process-wide lock, so that compiles on threads run
side by side (runtime._object_code is their one user).

Owns: `parse_assembly`, `run_passes`, `emit_object`, `prompt_handoffs`. Does not:
decide what is compiled or how (runtime.py).

Why: llvmlite wraps every C function in one process-wide re-entrant lock (its
ffi._lib_fn_wrapper), so two threads' compiles ran one after the other: quick code's
parts (module_split.py, kernel_modules.EarlyKernels) and the pool's compile took turns
at code generation, each waiting for the other's whole `emit_object`. LLVM itself allows
concurrent compiles in separate LLVMContexts (LLVM's "Achieving Isolation with
LLVMContext"; Rust's codegen units and ThinLTO's backends run that way), which is how
runtime._object_code compiles: a context of its own per compile, a target machine per
thread (runtime.thread_target_machine), its own pass builder and pass manager. The
process-wide command-line options LLVM's passes read are only set while no code is
generated (runtime.code_generation). Everything else (creating and disposing of
objects, MCJIT, reading results) goes through llvmlite as usual, under its lock. Where
llvmlite does not expose the unlocked function (`_cfn`, present since 0.37), the
locked one is called.
"""
import contextlib
import sys
import threading
from ctypes import c_char_p, string_at

from llvmlite.binding import ffi
from llvmlite.binding.module import ModuleRef


def _unlocked(name):
    """llvmlite's C function `name`, without its lock when llvmlite gives it."""
    wrapped = getattr(ffi.lib, name)
    return getattr(wrapped, "_cfn", wrapped)


def parse_assembly(text, context):
    """llvmlite.binding.parse_assembly(text, context), unlocked."""
    with ffi.OutputString() as errmsg:
        module = ModuleRef(_unlocked("LLVMPY_ParseAssembly")(
            context, c_char_p(text.encode("utf8")), errmsg), context)
        if errmsg:
            module.close()
            raise RuntimeError(f"LLVM IR parsing error\n{errmsg}")
    return module


def run_passes(pass_manager, module, pass_builder):
    """pass_manager.run(module, pass_builder) of a new-PM module pass manager, unlocked."""
    _unlocked("LLVMPY_RunNewModulePassManager")(pass_manager, module, pass_builder)


def emit_object(machine, module, use_object=True):
    """machine.emit_object(module) (emit_assembly's bytes when not `use_object`),
    unlocked."""
    with ffi.OutputString() as errmsg:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(
            machine, module, int(use_object), errmsg)
        if not buffer:
            raise RuntimeError(str(errmsg))
    try:
        return string_at(ffi.lib.LLVMPY_GetBufferStart(buffer),
                         ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


# Python's switch interval while code is made (prompt_handoffs)
PROMPT_SWITCH_INTERVAL = 0.0005
_handoffs = {"users": 0, "saved": None}
_handoffs_lock = threading.Lock()


@contextlib.contextmanager
def prompt_handoffs():
    """Python's switch interval at PROMPT_SWITCH_INTERVAL for the duration
    (process-wide; the previous one is put back when the last user leaves). A thread
    compiling beside the caller's Python takes the GIL back after each of its ~15 calls
    into llvmlite (ctypes releases it for the call), and waits up to the switch
    interval for it each time: with the default 5 ms, GMM large's first call waited 32
    ms for its early kernels' compile to start and 63 ms for 22 ms of LLVM."""
    with _handoffs_lock:
        if _handoffs["users"] == 0:
            _handoffs["saved"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_handoffs["saved"], PROMPT_SWITCH_INTERVAL))
        _handoffs["users"] += 1
    try:
        yield
    finally:
        with _handoffs_lock:
            _handoffs["users"] -= 1
            if _handoffs["users"] == 0:
                sys.setswitchinterval(_handoffs["saved"])


__all__ = ["emit_object", "parse_assembly", "prompt_handoffs", "run_passes"]
