"""Kernels compiled in modules of their own, on threads, beside the Python emitting the
rest of a plan's code (compiled.kernel_module_groups decides when).

Owns: `KERNEL_MODULES` (set while a Compiled emits its code) and `KernelModules`
(which module each kernel goes to, their declarations in the entry's module, lowering
them afterwards), `kernel_abi`. Does not: lower kernels (kernels.py), emit entries
(program.py) or compile (runtime.Compiles).
"""
import contextvars

from llvmlite import ir

from . import kernels
from .kernels import I64, PTR


# Set while a Compiled emits its code: the KernelModules its kernels go to (or None:
# the entry's module)
KERNEL_MODULES = contextvars.ContextVar("adkit_kernel_modules", default=None)


def kernel_abi(kernel):
    """The type of a kernel's function: void (i64 start, i64 stop, a pointer per
    input, a pointer per output), as kernels.lower_kernel makes it."""
    return ir.FunctionType(ir.VoidType(),
                           [I64, I64] + [PTR] * (len(kernel.strides) + len(kernel.outputs)))


class KernelModules:
    """A plan's kernels lowered into `groups` modules of their own (of about equal
    size: steps and outputs), after the entry's module: the entry declares each kernel
    it calls (kernel_abi), so its IR is complete, and can be compiled on a thread,
    before any kernel is lowered (the entry, which holds row products' loops and the
    matmuls, is often the largest module). `texts()` lowers them, group by group,
    each kernel's type checked against its declaration. Symbols resolve across the
    modules linked into one engine; every other function and global of a kernel module
    is internal (each module has its own math helpers)."""

    def __init__(self, plan_kernels, triple, groups):
        weights = [1 + len(k.steps) + len(k.outputs) for k in plan_kernels]
        share, total = sum(weights) / max(groups, 1), 0
        self.group_of = {}
        for kernel, weight in zip(plan_kernels if groups else (), weights):
            self.group_of[kernel.name] = min(int(total // share), groups - 1)
            total += weight
        self.groups, self.triple = groups, triple
        self._asked = []  # (kernel, vector width, its declaration), as asked for

    def lower(self, kernel, module, vector_bytes):
        """`kernel`'s declaration in `module` (lowered later, by texts())."""
        declared = ir.Function(module, kernel_abi(kernel), name=kernel.name)
        self._asked.append((kernel, vector_bytes, declared))
        return declared

    def texts(self):
        """Each group's module IR, its kernels lowered as this is iterated."""
        for group in range(self.groups):
            m = ir.Module(name=f"adkit_kernels{group}")
            m.triple = self.triple
            for kernel, vector_bytes, declared in self._asked:
                if self.group_of[kernel.name] != group:
                    continue
                fn = kernels.lower_kernel(kernel, m, vector_bytes)
                if str(fn.function_type) != str(declared.function_type):
                    raise RuntimeError(f"{kernel.name} was lowered as {fn.function_type}, "
                                       f"declared as {declared.function_type}")
            _localize(m, self.group_of)
            if m.functions:
                yield str(m)


class EarlyKernels:
    """Kernels lowered before the entry's code, into a module of their own (`text`):
    quick code's slowest kernels (compiled.quick_cold says which), whose compile at
    LLVM's level 1 is the longest of a plan's, then runs on a thread while the Python
    emitting the entry and the other kernels goes on. The entry's module declares them
    (kernel_abi). As in KernelModules, every other function and global of their module
    is internal."""

    def __init__(self, plan_kernels, triple, vector_bytes):
        self.group_of = {kernel.name: 0 for kernel in plan_kernels}
        m = ir.Module(name="adkit_kernels_early")
        m.triple = triple
        for kernel in plan_kernels:
            kernels.lower_kernel(kernel, m, vector_bytes)
        _localize(m, self.group_of)
        self.text = str(m)

    def lower(self, kernel, module, vector_bytes):
        """`kernel`'s declaration in `module` (its code is in `text`)."""
        return ir.Function(module, kernel_abi(kernel), name=kernel.name)

    def texts(self):
        return iter(())  # (its one module's text was made first: `text`)


def _localize(module, exported):
    """Make every function and global `module` defines internal, except `exported`."""
    for value in module.global_values:
        defined = not value.is_declaration if isinstance(value, ir.Function) \
            else getattr(value, "initializer", None) is not None
        if defined and value.name not in exported:
            value.linkage = "internal"


__all__ = ["KERNEL_MODULES", "EarlyKernels", "KernelModules", "kernel_abi"]
