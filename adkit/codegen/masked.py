"""Masked vector memory access: the last, partial vector of a kernel's inner loop.

Owns: `lane_mask(width, count)` (the first `count` of `width` lanes on), `load` and
`store` (LLVM's masked load and store intrinsics: lanes that are off are neither read
nor written, so a row's last vector never touches memory past the row, or past its
buffer). Does not: decide when a kernel uses them (kernels.py).

A kernel whose inner dim is shorter than a vector (the (batch, 3) values vmap makes) or
is not a multiple of one ends each row with one such vector instead of a scalar loop.
"""
from llvmlite import ir

I1 = ir.IntType(1)
I32 = ir.IntType(32)
PTR = ir.PointerType()


def lane_mask(width, count):
    """<width x i1>: lanes below `count` on."""
    return ir.Constant(ir.VectorType(I1, width), [ir.Constant(I1, int(k < count))
                                                  for k in range(width)])


def load(b, address, typ, mask, align):
    """The lanes of `typ` (a vector type) at `address` that `mask` has on; zeros in
    the others."""
    fn = _intrinsic(b.module, f"llvm.masked.load.{_suffix(typ)}.p0",
                    typ, [PTR, I32, mask.type, typ])
    return b.call(fn, [address, ir.Constant(I32, align), mask, ir.Constant(typ, None)])


def store(b, value, address, mask, align):
    """Write the lanes of `value` that `mask` has on to `address`."""
    fn = _intrinsic(b.module, f"llvm.masked.store.{_suffix(value.type)}.p0",
                    ir.VoidType(), [value.type, PTR, I32, mask.type])
    b.call(fn, [value, address, ir.Constant(I32, align), mask])


def _suffix(typ):
    """LLVM's name for a vector type in an intrinsic's name: v4f64, v8i8..."""
    elem = typ.element
    name = {"double": "f64", "float": "f32"}.get(str(elem), str(elem))
    return f"v{typ.count}{name}"


def _intrinsic(module, name, ret, args):
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name=name)
