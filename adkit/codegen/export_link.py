"""Linking an exported library: which linker, which system libraries, the command.

Owns: `Linker` (a compiler driver's command and name), `find_linker()`
(ADKIT_EXPORT_LINKER: "auto", "cc", "zig", "none" or a compiler's command),
`libraries(symbols, blas)` (what the object's undefined symbols need), `has_libmvec`,
`link_command` and `link`. Does not: make the object code (export.py) or choose the
BLAS (export_blas.py).

"auto" takes the system C compiler (cc, gcc or clang on PATH), else the Zig toolchain
from PyPI (`pip install ziglang`, adkit's `export` extra: `python -m ziglang cc`), else
none: export then writes the object file and raises an error with the command that links
it. Either compiler driver links a shared library from the object and libm, glibc's
libmvec when the code calls it, pthreads (the thread pool) and the BLAS, if any.
"""
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections import namedtuple

from .export_entry import ExportError

Linker = namedtuple("Linker", ("command", "name"))  # command: a list (the driver)
CC_NAMES = ("cc", "gcc", "clang")
ZIG = ("zig", "ziglang")


def find_linker(choice=None):
    """The linker ADKIT_EXPORT_LINKER (or `choice`) asks for, or None for "none" (and
    for "auto" when there is none)."""
    choice = (choice if choice is not None else
              os.environ.get("ADKIT_EXPORT_LINKER", "")).strip() or "auto"
    if choice == "none":
        return None
    if choice in ZIG:
        if not _zig_installed():
            raise ExportError(f"ADKIT_EXPORT_LINKER={choice}: the ziglang package is not "
                              "installed (pip install ziglang, or adkit's 'export' extra)")
        return _zig()
    if choice != "auto":
        words = shlex.split(choice)
        if not words or shutil.which(words[0]) is None:
            raise ExportError(f"ADKIT_EXPORT_LINKER={choice!r}: no such program; expected "
                              "'auto', 'cc', 'zig', 'none' or a C compiler's command")
        return Linker(words, os.path.basename(words[0]))
    for name in CC_NAMES:
        if shutil.which(name):
            return Linker([name], name)
    return _zig() if _zig_installed() else None


def _zig_installed():
    return importlib.util.find_spec("ziglang") is not None


def _zig():
    return Linker([sys.executable, "-m", "ziglang", "cc"], "zig")


def has_libmvec(linker):
    """Whether the linker can link glibc's libmvec (vector exp, log, sin...): Zig ships
    it for x86-64 Linux; a system compiler has it where `-print-file-name` finds it.
    Without a linker, whether this process found it."""
    if linker is None:
        return os.path.exists("/lib/x86_64-linux-gnu/libmvec.so.1") or \
            os.path.exists("/usr/lib64/libmvec.so.1")
    if linker.name == "zig":
        return sys.platform.startswith("linux") and os.uname().machine == "x86_64"
    try:
        out = subprocess.run(linker.command + ["-print-file-name=libmvec.so"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return os.path.isabs(out) and os.path.exists(out)


def libraries(symbols, blas):
    """Linker arguments for the object's undefined `symbols` and the BLAS."""
    args = []
    if blas.path is not None:
        folder = os.path.dirname(blas.path)
        args += [blas.path] + ([f"-Wl,-rpath,{folder}"] if folder and
                               not _system_folder(folder) else [])
    if any(s.startswith("_ZGV") for s in symbols):
        args.append("-lmvec")
    if any(s.startswith("pthread_") for s in symbols):
        args.append("-lpthread")
    return args + ["-lm"]


def _system_folder(folder):
    return folder in ("/usr/lib", "/usr/lib64", "/lib", "/lib64") or \
        folder.startswith(("/usr/lib/", "/lib/"))


def link_command(linker, obj, out, extra):
    """The command linking object `obj` into shared library `out`."""
    driver = linker.command if linker is not None else ["cc"]
    soname = f"-Wl,-soname,{os.path.basename(out)}"  # programs find it by name, not path
    return driver + ["-shared", "-o", out, obj, soname] + extra


def link(linker, obj, out, extra):
    """Run the link; an ExportError with its output when it fails."""
    command = link_command(linker, obj, out, extra)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        raise ExportError(f"linking failed: {e}\n  command: {shlex.join(command)}") from e
    if result.returncode != 0:
        raise ExportError(f"linking {out} failed (exit {result.returncode}):\n"
                          f"{(result.stderr or result.stdout).strip()}\n"
                          f"  command: {shlex.join(command)}\n  the object file "
                          f"{obj} is kept")
