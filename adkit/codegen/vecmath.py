"""Polynomial vector math: exp, expm1, log, log1p, sin, cos, tan, tanh, sinh, cosh and
atan as plain LLVM IR on float64 vectors (float32 vectors are widened, computed and
rounded back), for hosts without glibc's libmvec or when ADKIT_VECTOR_MATH=polynomial.

Owns: `POLYNOMIAL` (the functions it has) and `emit(sb, name, args)`. Does not: choose
between libmvec, these and libm (scalar.py). The methods are the classic ones (fdlibm,
Cody and Waite): reduce the argument exactly (k ln2, k pi/2 in two or three parts), then
a Taylor polynomial on the small remainder, then rebuild. sin, cos and tan fall back to
libm lane by lane when some |x| > 1e6, where a three-part pi/2 reduction is no longer
exact. The error bound (<= 4 ulp against numpy) is tested in tests/test_codegen_math.py.
"""
import math

from llvmlite import ir

F64 = ir.DoubleType()
I64 = ir.IntType(64)

POLYNOMIAL = {"exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sinh", "cosh",
              "atan"}

LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # fdlibm
# pi/2 in 33-bit parts and the tail (fdlibm's pio2_1, pio2_2, pio2_3, pio2_3t)
PIO2_1, PIO2_2, PIO2_3, PIO2_3T = (1.57079632673412561417e+00, 6.07710050630396597660e-11,
                                   2.02226624871116645580e-21, 8.47842766036889956997e-32)
TRIG_EXACT_UP_TO = 1e6  # |k| < 2^20: k * PIO2_1 and k * PIO2_2 are exact


class _Vec:
    """Arithmetic on <lanes x double> values (Python numbers become splat constants)."""

    def __init__(self, sb, lanes):
        self.sb, self.b, self.lanes = sb, sb.b, lanes
        self.type = ir.VectorType(F64, lanes)
        self.itype = ir.VectorType(I64, lanes)

    def c(self, v):
        if not isinstance(v, (int, float)):
            return v
        return ir.Constant(self.type, [ir.Constant(F64, float(v))] * self.lanes)

    def ic(self, v):
        return ir.Constant(self.itype, [ir.Constant(I64, v)] * self.lanes)

    def add(self, x, y):
        return self.b.fadd(self.c(x), self.c(y))

    def sub(self, x, y):
        return self.b.fsub(self.c(x), self.c(y))

    def mul(self, x, y):
        return self.b.fmul(self.c(x), self.c(y))

    def div(self, x, y):
        return self.b.fdiv(self.c(x), self.c(y))

    def cmp(self, op, x, y):
        fn = self.b.fcmp_unordered if op in ("!=", "uno") else self.b.fcmp_ordered
        return fn(op, self.c(x), self.c(y))

    def sel(self, cond, x, y):
        return self.b.select(cond, self.c(x), self.c(y))

    def intrinsic(self, name, *args):
        fname = f"llvm.{name}.v{self.lanes}f64"
        fn = self.sb.module.globals.get(fname) or ir.Function(
            self.sb.module, ir.FunctionType(self.type, [self.type] * len(args)), name=fname)
        return self.b.call(fn, [self.c(a) for a in args])

    def horner(self, x, coefficients):
        """c0 + x (c1 + x (c2 + ...)) for coefficients [c0, c1, ...], each step one
        fused multiply-add where the CPU has one ('contract')."""
        acc = self.c(coefficients[-1])
        for coef in reversed(coefficients[:-1]):
            acc = self.b.fadd(self.b.fmul(acc, self.c(x), flags=("contract",)),
                              self.c(coef), flags=("contract",))
        return acc

    def to_int(self, x):
        """rint'ed x as i64 (NaN becomes 0 first: fptosi of NaN is poison)."""
        return self.b.fptosi(self.sel(self.cmp("uno", x, x), 0.0, x), self.itype)

    def pow2(self, k):
        """2.0**k for i64 lanes k in [-1022, 1023], from the exponent bits."""
        return self.b.bitcast(self.b.shl(self.b.add(k, self.ic(1023)), self.ic(52)),
                              self.type)

    def keep_zero(self, x, y):
        """y, but x itself where x is +-0 (functions with f(+-0) = +-0)."""
        return self.sel(self.cmp("==", x, 0.0), x, y)

    def with_sign_of(self, x, y):
        return self.sel(self.cmp("<", x, 0.0), self.b.fneg(y), y)


def _exp(v, x):
    """exp(x) = 2^k exp(r), k = rint(x / ln2), |r| <= ln2 / 2 (degree-13 Taylor)."""
    x = v.intrinsic("minimum", v.intrinsic("maximum", x, -1000.0), 1000.0)  # NaN stays
    k = v.intrinsic("rint", v.mul(x, 1 / math.log(2)))
    r = v.sub(v.sub(x, v.mul(k, LN2_HI)), v.mul(k, LN2_LO))
    p = v.horner(r, [1.0 / math.factorial(i) for i in range(14)])
    ki = v.to_int(k)  # in [-1443, 1443]: two scalings keep each power of 2 normal
    k1 = v.b.ashr(ki, v.ic(1))
    return v.mul(v.mul(p, v.pow2(k1)), v.pow2(v.b.sub(ki, k1)))


def _expm1(v, x):
    """Taylor (degree 20) for |x| < 1, where exp(x) - 1 would cancel; else exp(x) - 1."""
    small = v.mul(x, v.horner(x, [1.0 / math.factorial(i + 1) for i in range(20)]))
    big = v.sub(_exp(v, x), 1.0)
    return v.keep_zero(x, v.sel(v.cmp("<", v.intrinsic("fabs", x), 1.0), small, big))


def _log_parts(v, x):
    """(e, log(m)) with x = m 2^e, m in [sqrt(1/2), sqrt(2)), for x > 0 finite; log(m)
    = f - (hfsq - s (hfsq + R)), s = f / (2 + f) (fdlibm's form, Taylor R)."""
    b = v.b
    tiny = v.cmp("<", x, 2.0 ** -1022)  # subnormal: scale into the normal range
    x = v.sel(tiny, v.mul(x, 2.0 ** 54), x)
    bits = b.bitcast(x, v.itype)
    e = b.sub(b.and_(b.lshr(bits, v.ic(52)), v.ic(0x7FF)), v.ic(1023))
    e = b.sub(e, b.select(tiny, v.ic(54), v.ic(0)))
    m = b.bitcast(b.or_(b.and_(bits, v.ic((1 << 52) - 1)), v.ic(1023 << 52)), v.type)
    high = v.cmp(">", m, math.sqrt(2.0))
    m = v.sel(high, v.mul(m, 0.5), m)
    e = b.add(e, b.select(high, v.ic(1), v.ic(0)))
    f = v.sub(m, 1.0)
    s = v.div(f, v.add(f, 2.0))
    z = v.mul(s, s)
    big_r = v.mul(z, v.horner(z, [2.0 / (2 * i + 3) for i in range(11)]))
    hfsq = v.mul(v.mul(f, f), 0.5)
    return b.sitofp(e, v.type), f, hfsq, s, big_r


def _special_log(v, x, y):
    """log's results at 0 (-inf), below 0 (nan), +inf and nan."""
    y = v.sel(v.cmp("==", x, 0.0), -math.inf, y)
    y = v.sel(v.cmp("<", x, 0.0), math.nan, y)
    y = v.sel(v.cmp("==", x, math.inf), math.inf, y)
    return v.sel(v.cmp("uno", x, x), x, y)


def _log(v, x):
    dk, f, hfsq, s, big_r = _log_parts(v, x)
    inner = v.sub(v.sub(hfsq, v.add(v.mul(s, v.add(hfsq, big_r)), v.mul(dk, LN2_LO))), f)
    return _special_log(v, x, v.sub(v.mul(dk, LN2_HI), inner))


def _log1p(v, x):
    """log(u) x / (u - 1) with u = 1 + x: the rounding of u cancels (Goldberg's trick)."""
    u = v.add(x, 1.0)
    y = v.mul(_log(v, u), v.div(x, v.sub(u, 1.0)))
    y = v.sel(v.cmp("==", u, 1.0), x, y)
    return v.sel(v.cmp("==", x, math.inf), math.inf, y)


def _reduce_pio2(v, x):
    """(r, n): x = n pi/2 + r, |r| <= pi/4, n mod 4 as i64."""
    k = v.intrinsic("rint", v.mul(x, 2 / math.pi))
    r = v.sub(v.sub(x, v.mul(k, PIO2_1)), v.mul(k, PIO2_2))  # both products exact
    r = v.sub(v.sub(r, v.mul(k, PIO2_3)), v.mul(k, PIO2_3T))
    return r, v.b.and_(v.to_int(k), v.ic(3))


def _sin_cos_poly(v, r):
    z = v.mul(r, r)
    sin = v.add(r, v.mul(v.mul(z, r), v.horner(
        z, [(-1) ** (i + 1) / math.factorial(2 * i + 3) for i in range(9)])))
    cos = v.horner(z, [(-1) ** i / math.factorial(2 * i) for i in range(11)])
    return sin, cos


def _quadrant(v, n, values):
    """values[n] per lane (n in 0..3)."""
    out = values[3]
    for q in (2, 1, 0):
        out = v.sel(v.b.icmp_signed("==", n, v.ic(q)), values[q], out)
    return out


def _trig(name):
    def emit(v, x):
        r, n = _reduce_pio2(v, x)
        s, c = _sin_cos_poly(v, r)
        neg_s, neg_c = v.b.fneg(s), v.b.fneg(c)
        if name == "sin":
            y = v.keep_zero(x, _quadrant(v, n, [s, c, neg_s, neg_c]))
        elif name == "cos":
            y = _quadrant(v, n, [c, neg_s, neg_c, s])
        else:
            odd = v.b.icmp_signed("==", v.b.and_(n, v.ic(1)), v.ic(1))
            y = v.keep_zero(x, v.sel(odd, v.div(neg_c, s), v.div(s, c)))
        return _libm_where(v, name, x, v.cmp(">", v.intrinsic("fabs", x),
                                             TRIG_EXACT_UP_TO), y)
    return emit


def _libm_where(v, name, x, cond, y):
    """y, with the lanes where cond holds computed by scalar libm (a branch taken only
    when some lane needs it)."""
    b = v.b
    mask = b.bitcast(cond, ir.IntType(v.lanes))
    before = b.block
    slow = b.append_basic_block(f"{name}.libm")
    done = b.append_basic_block(f"{name}.done")
    b.cbranch(b.icmp_unsigned("!=", mask, ir.Constant(ir.IntType(v.lanes), 0)), slow, done)
    b.position_at_end(slow)
    fn = v.sb.module.globals.get(name) or ir.Function(
        v.sb.module, ir.FunctionType(F64, [F64]), name=name)
    fixed = y
    for i in range(v.lanes):
        lane = ir.Constant(ir.IntType(32), i)
        value = b.call(fn, [b.extract_element(x, lane)])
        keep = b.extract_element(y, lane)
        fixed = b.insert_element(fixed, b.select(b.extract_element(cond, lane), value, keep),
                                 lane)
    slow_end = b.block
    b.branch(done)
    b.position_at_end(done)
    phi = b.phi(v.type)
    phi.add_incoming(y, before)
    phi.add_incoming(fixed, slow_end)
    return phi


# tanh(a) = a + a^3 P(a^2) for a < 0.55: P's near-minimax (Chebyshev) fit of degree
# 10 on [0, 0.55^2]; exp(r) on |r| <= ln2 / 2 to degree 11 (error 3e-18). Both fitted
# with mpmath at 50 digits.
TANH_SMALL = 0.55
TANH_P = (-0.3333333333333333, 0.13333333333332714, -0.053968253967434016,
          0.021869488493666944, -0.008863234397814355, 0.003592110378689024,
          -0.001455661830100716, 0.0005889360520074057, -0.0002346347410887237,
          8.511313685577671e-05, -2.060276537636634e-05)
EXP_R = (1.0, 1.0, 0.5000000000000019, 0.1666666666666668, 0.0416666666664881,
         0.008333333333319601, 0.0013888888952314775, 0.00019841269890047113,
         2.4801485482328494e-05, 2.755724091857897e-06, 2.763263963904103e-07,
         2.5110037605963777e-08)


def _tanh(v, x):
    """On a = |x|: a + a^3 P(a^2) below 0.55, else 1 - 2 / (exp(2a) + 1) (>= 0.5 there,
    so the subtraction loses at most a bit); then x's sign (which also makes tanh(-0)
    -0). exp's argument is capped at 40, where the quotient is below half an ulp of 1:
    no overflow, and the result rounds to exactly 1. NaN takes the first branch
    (an unordered compare), which keeps it. About 40 vector operations and no branch,
    2 ulp (tests/test_codegen_math.py)."""
    a = v.intrinsic("fabs", x)
    z = v.mul(a, a)
    small = v.b.fadd(a, v.mul(v.mul(a, z), v.horner(z, TANH_P)), flags=("contract",))
    y = v.intrinsic("minnum", v.mul(a, 2.0), 40.0)  # finite: k converts exactly
    k = v.intrinsic("rint", v.mul(y, 1 / math.log(2)))
    r = v.sub(v.sub(y, v.mul(k, LN2_HI)), v.mul(k, LN2_LO))
    e = v.mul(v.horner(r, EXP_R), v.pow2(v.b.fptosi(k, v.itype)))
    big = v.sub(1.0, v.div(2.0, v.add(e, 1.0)))
    near_zero = v.b.fcmp_unordered("<", a, v.c(TANH_SMALL))  # or NaN
    return v.intrinsic("copysign", v.sel(near_zero, small, big), x)


def _sinh(v, x):
    """(t + t / (t + 1)) / 2, t = expm1(|x|), below 1; (e - 1/e) / 2 up to 22;
    (w / 2) w with w = exp(|x| / 2) above (no overflow before sinh's own)."""
    a = v.intrinsic("fabs", x)
    t = _expm1(v, a)
    small = v.mul(v.add(t, v.div(t, v.add(t, 1.0))), 0.5)
    e = _exp(v, a)
    mid = v.mul(v.sub(e, v.div(1.0, e)), 0.5)
    w = _exp(v, v.mul(a, 0.5))
    large = v.mul(v.mul(w, 0.5), w)
    y = v.sel(v.cmp("<", a, 1.0), small, v.sel(v.cmp("<", a, 22.0), mid, large))
    return v.keep_zero(x, v.with_sign_of(x, y))


def _cosh(v, x):
    a = v.intrinsic("fabs", x)
    e = _exp(v, a)
    w = _exp(v, v.mul(a, 0.5))
    return v.sel(v.cmp("<", a, 22.0), v.mul(v.add(e, v.div(1.0, e)), 0.5),
                 v.mul(v.mul(w, 0.5), w))


def _atan(v, x):
    """atan(|x|): 1/|x| above 1 (pi/2 - atan), (t - 1)/(t + 1) above tan(pi/8) (pi/4 +
    atan), then the Taylor series (degree 43) on |u| <= tan(pi/8)."""
    a = v.intrinsic("fabs", x)
    inverse = v.cmp(">", a, 1.0)
    t = v.sel(inverse, v.div(1.0, a), a)
    middle = v.cmp(">", t, math.tan(math.pi / 8))
    u = v.sel(middle, v.div(v.sub(t, 1.0), v.add(t, 1.0)), t)
    z = v.mul(u, u)
    p = v.add(u, v.mul(v.mul(z, u), v.horner(z, [(-1) ** (i + 1) / (2 * i + 3)
                                                 for i in range(21)])))
    y = v.sel(middle, v.add(p, math.pi / 4), p)
    y = v.sel(inverse, v.sub(math.pi / 2, y), y)
    return v.keep_zero(x, v.with_sign_of(x, y))


_EMIT = {"exp": _exp, "expm1": _expm1, "log": _log, "log1p": _log1p, "sin": _trig("sin"),
         "cos": _trig("cos"), "tan": _trig("tan"), "tanh": _tanh, "sinh": _sinh,
         "cosh": _cosh, "atan": _atan}


def emit(sb, name, args):
    """`name` of the vector `args` (sb's type, float32 or float64 lanes) as inline IR."""
    v = _Vec(sb, sb.lanes)
    (x,) = args
    wide = x if sb.itemsize == 8 else sb.b.fpext(x, v.type)
    y = _EMIT[name](v, wide)
    return y if sb.itemsize == 8 else sb.b.fptrunc(y, sb.type)
