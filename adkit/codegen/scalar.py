"""ScalarBuilder: the arithmetic an op's `lower(b, *args)` hook emits for one element,
or for one vector of lanes at once (the same code: every value has the builder's type).

Owns: the one table from math names to LLVM (instructions, intrinsics, glibc libmvec
vector functions or vecmath.py's polynomials, libm). Does not: build loops (kernels.py)
or compile (runtime.py).
"""
import contextvars
import os

import numpy as np
from llvmlite import ir

from . import runtime, vecmath


# float64 functions whose polynomial beats libmvec where both exist (benchmarks/
# vector_math.py: tanh 1.36 vs 1.91 ms per 1e6; and no call inside a loop step)
POLYNOMIAL_FIRST = {"tanh"}


def use_polynomial_math(name=None, itemsize=8):
    """Whether vector loops compute `name` (exp, log, sin...) with vecmath.py's
    polynomials: ADKIT_VECTOR_MATH=polynomial, where the host has no libmvec, and by
    default for the float64 functions of POLYNOMIAL_FIRST. ADKIT_VECTOR_MATH=libmvec
    insists on libmvec where it exists."""
    choice = os.environ.get("ADKIT_VECTOR_MATH", "").lower()
    if choice == "polynomial":
        return True
    if not mvec_usable():
        return True
    return choice != "libmvec" and name in POLYNOMIAL_FIRST and itemsize == 8


# True while code is emitted for a library that will be linked without libmvec (an
# exported one, export.py): vector math then uses the polynomials and libm
WITHOUT_LIBMVEC = contextvars.ContextVar("adkit_without_libmvec", default=False)


def mvec_usable():
    """Whether vector code may call glibc's libmvec: found in this process, and not
    turned off by WITHOUT_LIBMVEC."""
    return not WITHOUT_LIBMVEC.get() and runtime.mvec_available()


# name -> LLVM intrinsic (vectorized by LLVM itself)
_INTRINSICS = {"sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor",
               "ceil": "llvm.ceil", "rint": "llvm.rint", "maximum": "llvm.maximum",
               "minimum": "llvm.minimum"}
# math functions found in glibc's libmvec (vector) and libm (scalar)
_LIBM = {"exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sinh", "cosh",
         "asin", "acos", "atan", "erf", "pow", "atan2", "log2", "log10", "exp2"}
_BINARY = {"pow", "atan2"}
# libmvec's ISA letter for each vector width in bytes: SSE, AVX2, AVX-512
_MVEC_ISA = {16: "b", 32: "d", 64: "e"}
_MVEC_BYTES = {isa: width for width, isa in _MVEC_ISA.items()}


class ScalarBuilder:
    """Emits arithmetic on values of one float type: `dtype` (float32 or float64) times
    `lanes` (1: scalars; more: LLVM vectors, with libmvec for transcendental functions)."""

    def __init__(self, builder, module, np_dtype, lanes):
        self.b = builder
        self.module = module
        self.elem = ir.DoubleType() if np_dtype.itemsize == 8 else ir.FloatType()
        self.suffix = "" if np_dtype.itemsize == 8 else "f"
        self.itemsize = np_dtype.itemsize
        self.lanes = lanes
        self.type = self.elem if lanes == 1 else ir.VectorType(self.elem, lanes)

    # ------------------------------------------------------------ values
    def const(self, value):
        c = ir.Constant(self.elem, float(value))
        return c if self.lanes == 1 else ir.Constant(self.type, [c] * self.lanes)

    def value(self, v):
        """An emitted value, or a Python or numpy number as a constant. A bool operand of
        arithmetic is 0.0/1.0 of the builder's type, as numpy promotes it (x * (x > 0))."""
        if isinstance(v, (int, float, np.number, np.bool_)):
            return self.const(v)
        return self.to_float(v)

    # ------------------------------------------------------------ arithmetic
    def add(self, x, y):
        return self.b.fadd(self.value(x), self.value(y))

    def sub(self, x, y):
        return self.b.fsub(self.value(x), self.value(y))

    def mul(self, x, y):
        return self.b.fmul(self.value(x), self.value(y))

    def div(self, x, y):
        return self.b.fdiv(self.value(x), self.value(y))

    def neg(self, x):
        return self.b.fneg(self.value(x))

    def select(self, cond, x, y):
        if self.is_bool(x) and self.is_bool(y):  # where() on bools stays a bool
            return self.b.select(self.truth(cond), x, y)
        return self.b.select(self.truth(cond), self.value(x), self.value(y))

    def compare(self, op, x, y):
        """op in <, <=, >, >=, ==, !=, uno; ordered (False with NaN) except != and uno
        (True with NaN). The result is a bool (i1) per lane."""
        fn = self.b.fcmp_unordered if op in ("!=", "uno") else self.b.fcmp_ordered
        return fn(op, self.value(x), self.value(y))

    @staticmethod
    def is_bool(v):
        t = getattr(v, "type", None)  # a Python number (a static param) is not
        return getattr(t, "element", t) == ir.IntType(1)

    def truth(self, v):
        """A bool per lane: bools as they are, numbers != 0 (NaN is true, as numpy)."""
        return v if self.is_bool(v) else self.compare("!=", self.value(v), 0.0)

    def to_float(self, v):
        """Bools as 0.0/1.0 of this builder's type; floats as they are."""
        return self.b.select(v, self.const(1.0), self.const(0.0)) if self.is_bool(v) else v

    def __getattr__(self, name):
        if name in _INTRINSICS or name in _LIBM:
            return lambda *args: self.call_math(name, *args)
        raise AttributeError(f"ScalarBuilder has no operation {name!r}")

    # ------------------------------------------------------------ math functions
    def call_math(self, name, *args):
        args = [self.value(a) for a in args]
        if name in _INTRINSICS:
            elem = "f64" if self.itemsize == 8 else "f32"
            suffix = elem if self.lanes == 1 else f"v{self.lanes}{elem}"
            fn = self._declare(f"{_INTRINSICS[name]}.{suffix}", len(args))
            return self.b.call(fn, args)
        if self.lanes > 1 and name in vecmath.POLYNOMIAL and \
                use_polynomial_math(name, self.itemsize):
            return vecmath.emit(self, name, args)
        isa = _MVEC_ISA.get(self.lanes * self.itemsize)  # libmvec's name for this width
        if self.lanes > 1 and isa is not None and mvec_usable() and \
                _MVEC_BYTES[isa] <= runtime.target_vector_bytes():
            vname = f"_ZGV{isa}N{self.lanes}{'v' * len(args)}_{name}{self.suffix}"
            return self.b.call(self._declare(vname, len(args)), args)
        scalar = self._libm(name, len(args))
        if self.lanes == 1:
            return self.b.call(scalar, args)
        result = ir.Constant(self.type, ir.Undefined)  # scalarize: lane by lane
        for i in range(self.lanes):
            lane = [self.b.extract_element(a, ir.Constant(ir.IntType(32), i)) for a in args]
            result = self.b.insert_element(result, self.b.call(scalar, lane),
                                           ir.Constant(ir.IntType(32), i))
        return result

    def _declare(self, name, nargs):
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(self.type, [self.type] * nargs),
                           name=name)

    def _libm(self, name, nargs):
        full = name + self.suffix
        existing = self.module.globals.get(full)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(self.elem, [self.elem] * nargs),
                           name=full)
