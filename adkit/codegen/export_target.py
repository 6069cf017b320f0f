"""The CPU an exported library is built for: `cpu=` of ak.jit(f).export.

Owns: `Target` (the LLVM CPU name and features a library's code is compiled for, and
the widest vector its kernels, vector math and gemm loops use), `find_target(cpu)`
(checks the name), `target_machine(target)` and `cpu_names()`; run as
`python -m adkit.codegen.export_target` it prints the CPU names. Does not: emit or
compile code (export.py) or say what the header says about it (export.py's notes).

The choices:
- "native" (the default): this machine's CPU and features, as in-process code is
  compiled: the fastest library here, which stops with an illegal instruction on a CPU
  that lacks one of them (built on an AVX-512 machine: on any CPU without AVX-512).
- "generic": LLVM's "x86-64", the x86-64 baseline (SSE2, 128-bit vectors), which every
  64-bit x86 CPU runs, and so does a virtual machine whose CPU model hides extensions
  (QEMU's default qemu64 has no SSE4.2, so not even x86-64-v2), and a low-power Atom,
  Celeron or Pentium (embedded ones without AVX were new in 2021: not x86-64-v3).
  "generic" is for a library whose machine is not known; where it is, name its level.
  On another architecture it is LLVM's "generic" CPU of that architecture.
- any LLVM CPU name: the psABI levels "x86-64-v2" (SSE4.2: Nehalem, 2008, on),
  "x86-64-v3" (AVX2 and FMA: Haswell, 2013, and Zen on) and "x86-64-v4" (AVX-512), or
  a processor ("haswell", "skylake-avx512", "znver3"...): LLVM derives its features
  from the name.

llvmlite cannot report the features a CPU name stands for, so the widest vector is
read off code LLVM generates for that CPU (PROBE_IR: 512-bit float vectors in zmm
registers means AVX-512, 256-bit integer adds in ymm registers AVX2, else 128 bits, as
runtime.host_vector_isa reads the host's features). The probe runs in a child process:
LLVM aborts the process for a name it does not know, or for a CPU without 64-bit mode
(i386, pentium, k6...), which makes the name a ValueError here.
"""
import difflib
import functools
import re
import subprocess
import sys
from collections import namedtuple

import llvmlite.binding as llvm

from . import runtime

# cpu: LLVM's CPU name; features: LLVM's feature string ("" for a name's own);
# vector_bytes: the widest vector kernels use (16, 32 or 64); requested: what cpu= said
Target = namedtuple("Target", ("cpu", "features", "vector_bytes", "requested"))
LIST_COMMAND = "python -m adkit.codegen.export_target"

# *a = *a op *b on one vector of `type`
PROBE = """
define void @{name}(ptr %a, ptr %b) {{
  %x = load {type}, ptr %a
  %y = load {type}, ptr %b
  %z = {op} {type} %x, %y
  store {type} %z, ptr %a
  ret void
}}
"""
PROBE_IR = (PROBE.format(name="wide", type="<8 x double>", op="fadd")
            + PROBE.format(name="int256", type="<4 x i64>", op="add"))
# run in a child process: argv[1] the CPU name, argv[2] LLVM IR; prints its assembly
CHILD = """
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
machine = llvm.Target.from_default_triple().create_target_machine(cpu=sys.argv[1])
module = llvm.parse_assembly(sys.argv[2])
module.triple = machine.triple
print(machine.emit_assembly(module))
"""


def find_target(cpu="native"):
    """The Target of `cpu`: "native", "generic" or an LLVM CPU name; a ValueError that
    says how to list the names when LLVM does not know it for this machine's triple."""
    if not isinstance(cpu, str):
        raise TypeError(f"export: cpu must be a string ('native', 'generic' or an LLVM "
                        f"CPU name), not {type(cpu).__name__}")
    if cpu == "native":
        return Target(llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(),
                      runtime.host_vector_isa()[1], cpu)
    if not cpu:  # LLVM would take it for its default CPU
        raise ValueError(_unknown(cpu, ""))
    name = generic_cpu() if cpu == "generic" else cpu
    return Target(name, "", _vector_bytes(name), cpu)


def generic_cpu():
    """LLVM's name of the baseline CPU of this machine's architecture."""
    return "x86-64" if llvm.get_default_triple().startswith("x86_64") else "generic"


def target_machine(target):
    """A target machine making position-independent code (a shared library's) for
    `target`; "native" is exactly the host's machine of in-process code."""
    if target.requested == "native":
        return runtime.new_target_machine(reloc="pic", codemodel="default")
    runtime.target_machine()  # LLVM's targets initialized
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=target.cpu, features=target.features, opt=3, reloc="pic",
        codemodel="default")


@functools.lru_cache(maxsize=None)
def _vector_bytes(cpu):
    """The widest vector, in bytes, of LLVM's CPU `cpu` (its probe's assembly)."""
    run = _child(cpu, PROBE_IR)
    if run.returncode != 0 or "not a recognized processor" in run.stderr:
        raise ValueError(_unknown(cpu, run.stderr))
    if "%zmm" in run.stdout:
        return 64
    return 32 if re.search(r"vpaddq\s[^\n]*%ymm", run.stdout) else 16


def _child(cpu, text):
    try:
        return subprocess.run([sys.executable, "-c", CHILD, cpu, text], check=False,
                              timeout=120, capture_output=True, text=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"export: could not ask LLVM about cpu={cpu!r}: {e}") from e


def _unknown(cpu, stderr):
    """The ValueError's message for a CPU name LLVM refused."""
    why = ("LLVM does not know it" if "not a recognized processor" in stderr or
           cpu not in cpu_names() else "it has no 64-bit mode")
    close = difflib.get_close_matches(cpu, [n for n in cpu_names() if n != cpu], n=3,
                                      cutoff=0.7)
    return (f"export: cpu={cpu!r} cannot build this library ({why}, for "
            f"{llvm.get_default_triple()}). Give 'native' (this machine's CPU), "
            f"'generic' (any {generic_cpu()} CPU) or an LLVM CPU name such as x86-64-v2, "
            "x86-64-v3, haswell or znver3"
            + (f"; close to yours: {', '.join(close)}" if close else "")
            + f". The names: {LIST_COMMAND}")


@functools.lru_cache(maxsize=None)
def cpu_names():
    """The CPU names LLVM knows for this machine's triple (what `llc -mcpu=help` lists,
    for llvmlite's LLVM), CPUs without 64-bit mode included."""
    listing = _child("help", "").stderr  # LLVM lists them, then aborts the child
    names, inside = [], False
    for line in listing.splitlines():
        if line.startswith("Available CPUs"):
            inside = True
        elif line.startswith("Available features"):
            break
        elif inside and line.strip():
            names.append(line.split()[0])
    return tuple(names)


def main():
    print(f"CPU names for cpu= of ak.jit(f).export on {llvm.get_default_triple()} "
          "(LLVM's; besides 'native' and 'generic'; those without 64-bit mode, such as "
          "i386, are refused):")
    print("\n".join(cpu_names()))


if __name__ == "__main__":
    main()
