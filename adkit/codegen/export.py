"""Ahead-of-time export: a jitted function's compiled signatures as a C library.

Owns: `export_jitted(jitted, path, example_args, name)` (what `Jitted.export` calls):
write `path.so` and `path.h` with one C function per signature (export_entry.py's ABI),
or, with no linker, `path.o` and `path.h` and an ExportError giving the link command;
and the object code (one LLVM module: the programs, adkit's thread pool, the BLAS
callees, everything internal but the header's functions). Does not: plan or lower
(plan.py, lowering.py: the same plans as in-process), choose the BLAS
(export_blas.py), the linker (export_link.py) or the CPU (export_target.py), or write
the header (export_header.py).

At run time the library needs only the C library, libm, glibc's libmvec when its code
calls it, and the BLAS found at export time, if one was: no Python, numpy or llvmlite.
It is built for the CPU that `cpu=` names (export_target.py: "native", this machine's,
by default, like in-process code; "generic", any x86-64; or an LLVM CPU name): the
target machine's CPU and features, the vector width its kernels, vector math (which
libmvec variants) and gemm loops use, and the cost models of the optimization passes.
"""
import os
import re
import shlex

import llvmlite.binding as llvm
from llvmlite import ir

from . import export_blas, export_link, export_target, pool, runtime, scalar
from .export_entry import ExportError, Program
from .export_header import header
from .kernels import I64

__all__ = ["ExportError", "export_jitted"]


def export_jitted(jitted, path, example_args, name=None, cpu="native"):
    """Export `jitted` for the signature of `example_args` (with none: every signature
    compiled so far) to `path`.so and `path`.h, built for `cpu` (export_target.py);
    returns the library's path."""
    target = export_target.find_target(cpu)  # a bad name fails before anything is done
    base, library = _paths(path)
    compiled = _signatures(jitted, example_args)
    names = _names(name or jitted.name, len(compiled))
    linker = export_link.find_linker()
    libmvec = export_link.has_libmvec(linker)
    blas = export_blas.find_blas()
    programs, modules = _programs(compiled, names, blas, libmvec, target)
    for prog in programs:
        prog.description = f"ak.jit({jitted.name}) on arguments {prog.graph.in_tree}"
    api = [f"{library}_set_threads"] + [s for p in programs
                                         for s in (p.name, f"{p.name}_work_bytes")]
    data, undefined = object_code(modules + [_threads_module(library)], api, target)
    clash = sorted(set(api) & set(undefined))
    if clash:
        raise ExportError(f"cannot export: {', '.join(clash)} would hide the library "
                          "function of that name; choose another name=")
    extra = export_link.libraries(undefined, blas)
    with open(base + ".h", "w") as f:
        f.write(header(library, programs, _notes(blas, libmvec, undefined, extra, target),
                       target.cpu))
    return _link(linker, base, data, extra)


def _programs(compiled, names, blas, libmvec, target):
    """(the Programs of the Compiled signatures, their llvmlite modules): kernels and
    gemm loops in `target`'s vectors, vector math for it and for a library with or
    without libmvec."""
    without = scalar.WITHOUT_LIBMVEC.set(not libmvec)
    widest = runtime.TARGET_VECTOR_BYTES.set(target.vector_bytes)
    try:
        programs = [Program(n, c.graph) for n, c in zip(names, compiled)]
        export_blas.check_sizes(blas, programs)
        return programs, [_program_module(p, blas, target.vector_bytes) for p in programs]
    finally:
        runtime.TARGET_VECTOR_BYTES.reset(widest)
        scalar.WITHOUT_LIBMVEC.reset(without)


def _link(linker, base, data, extra):
    """Write base.o and link base.so from it (removing the .o); without a linker an
    ExportError that names the object file and gives the command."""
    obj = base + ".o"
    with open(obj, "wb") as f:
        f.write(data)
    if linker is None:
        raise ExportError(
            "no linker found (ADKIT_EXPORT_LINKER=none, or no cc, gcc or clang on PATH "
            f"and no ziglang package: pip install ziglang). Wrote {obj} and {base}.h; "
            "link them with:\n  "
            + shlex.join(export_link.link_command(None, obj, base + ".so", extra)))
    export_link.link(linker, obj, base + ".so", extra)
    os.remove(obj)
    return base + ".so"


def _paths(path):
    """(path without .so, the library's C name) for an export to `path`."""
    base = os.path.abspath(os.fspath(path))
    if base.endswith(".so"):
        base = base[:-3]
    folder = os.path.dirname(base)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"export: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise PermissionError(f"export: the folder {folder} is not writable")
    return base, _identifier(os.path.basename(base))


def _identifier(text):
    """`text` as a C identifier (other characters become _)."""
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else "_" + name


def _signatures(jitted, example_args):
    """The Compiled programs to export."""
    if example_args:
        return [jitted.compile(*example_args)]
    programs = [getattr(p, "native", lambda p=p: p)() for p in list(jitted.cache.values())]
    if not programs:
        raise ValueError(f"export: ak.jit({jitted.name}) has compiled no signature yet; "
                         "pass example arguments: .export(path, *example_args)")
    return programs


# names the library's own code may call: an exported function must not take one
RESERVED = {"malloc", "free", "memcpy", "memmove", "memset", "getpid"} | {
    f + suffix for f in scalar._LIBM | set(scalar._INTRINSICS) for suffix in ("", "f")}
RESERVED_PREFIXES = ("pthread_", "adkit_pool", "_ZGV", "cblas_", "scipy_", "openblas_",
                     "llvm.")


def _names(name, count):
    """The C names of `count` signatures' functions, from `name`."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        name = _identifier(name.rpartition(".")[2])
    names = [name] if count == 1 else [f"{name}_{k}" for k in range(count)]
    for n in names:
        if n in RESERVED or n.startswith(RESERVED_PREFIXES):
            raise ExportError(f"cannot export as {n!r}: it would hide the library "
                              "function of that name; choose another name=")
    return names


def _program_module(prog, blas, vector_bytes):
    """The llvmlite module of one program: its entry, its kernels, its BLAS callees."""
    module = ir.Module(name=prog.name)
    module.triple = runtime.target_machine().triple
    prog.emit(module, vector_bytes)
    export_blas.define_callees(module, blas, vector_bytes)
    return module


def _threads_module(library):
    """int64 <library>_set_threads(int64 n): (re)start the thread pool with n - 1
    workers; the pool's state is initialized on the first call."""
    module = ir.Module(name="threads")
    fn = ir.Function(module, ir.FunctionType(I64, [I64]), name=f"{library}_set_threads")
    ready = ir.GlobalVariable(module, ir.IntType(1), f"{library}.pool_ready")
    ready.initializer = ir.Constant(ir.IntType(1), 0)
    ready.linkage = "internal"
    declare = {n: ir.Function(module, t, name=n) for n, t in (
        ("adkit_pool_init", ir.FunctionType(ir.VoidType(), [])),
        ("adkit_pool_stop", ir.FunctionType(ir.VoidType(), [])),
        ("adkit_pool_start", ir.FunctionType(I64, [I64])))}
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with b.if_then(b.not_(b.load(ready, typ=ir.IntType(1)))):
        b.call(declare["adkit_pool_init"], [])
        b.store(ir.Constant(ir.IntType(1), 1), ready)
    b.call(declare["adkit_pool_stop"], [])
    n = fn.args[0]
    workers = b.sub(n, ir.Constant(I64, 1))
    low, high = ir.Constant(I64, 0), ir.Constant(I64, pool.MAX_WORKERS)
    workers = b.select(b.icmp_signed("<", workers, low), low, workers)
    workers = b.select(b.icmp_signed(">", workers, high), high, workers)
    started = b.call(declare["adkit_pool_start"], [workers])
    b.ret(b.add(started, ir.Constant(I64, 1)))
    return module


def object_code(modules, api, target):
    """(object code, undefined symbols) of `modules` linked with the thread pool into
    one LLVM module, where everything but the `api` functions is internal (so two
    exported libraries in one process never share a symbol), optimized as in-process
    code is and compiled position-independent, both for `target`'s CPU."""
    main = llvm.parse_assembly(str(pool.build_module()))
    for module in modules:
        parsed = llvm.parse_assembly(str(module))
        _internalize(parsed, api)
        main.link_in(parsed)
    _internalize(main, api)
    main.verify()
    machine = export_target.target_machine(target)
    runtime.optimize(main, machine)
    with runtime.code_generation():
        data = machine.emit_object(main)
    undefined = sorted(f.name for f in main.functions
                       if f.is_declaration and not f.name.startswith("llvm."))
    return data, undefined


def _internalize(module, api):
    """Make every definition of `module` internal but the api's functions."""
    for value in list(module.functions) + list(module.global_variables):
        if not value.is_declaration and value.name not in api:
            value.linkage = "internal"


def _notes(blas, libmvec, undefined, extra, target):
    """The header's lines on how the library was built."""
    mvec = any(s.startswith("_ZGV") for s in undefined)
    math = ("glibc's libmvec for vector exp, log, sin... (linked), libm for scalars"
            if mvec else "adkit's polynomials inline and libm for scalars"
            + ("" if libmvec else " (no libmvec at link time)"))
    return [_cpu_note(target), f"Matrix products: {export_blas.describe(blas)}.",
            f"Vector math: {math}.", f"Linked with: {' '.join(extra)}."]


def _cpu_note(target):
    """The header's line on the CPU the library runs on."""
    if target.requested == "native":
        features = runtime.host_features()
        isa = [f for f in ("sse4.2", "avx", "avx2", "fma", "avx512f") if features.get(f)]
        return (f"Built for this machine's CPU ({target.cpu}; {', '.join(isa)}): it needs "
                "these vector extensions (export with cpu='generic' for any "
                f"{export_target.generic_cpu()} CPU).")
    vectors = f"its vector code {target.vector_bytes * 8}-bit"
    if target.requested == "generic":
        return (f"Built for any {target.cpu} CPU (cpu='generic': LLVM's {target.cpu}, "
                f"the baseline instruction set; {vectors}).")
    return (f"Built for CPU {target.cpu} (cpu={target.requested!r}, LLVM's name): it "
            f"needs that CPU's instruction set; {vectors}.")
