"""Special functions: erf, with a float64 rational approximation of its own.

Owns: `Erf` and `erf_float64` (numpy has no erf; the approximation is within a few ulp
of the exact value on all of float64, checked in tests/test_elementwise.py). Does not:
hold other unary ops (unary.py).
"""
import math

import numpy as np

from ._families import MATH_CALL_NS, UnaryElementwise
from ._helpers import as_float_array

# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23
# (1969); coefficients of netlib specfun CALERF. Relative error below 1e-15 in float64.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)
_INV_SQRT_PI = 5.6418958354775628695e-1


def _rational(t, num, den, lead, n):
    """Cody's nested evaluation: (num[lead] t^(n+1) + ... ) / (t^(n+1) + ...)."""
    xnum, xden = num[lead] * t, t
    for i in range(n):
        xnum = (xnum + num[i]) * t
        xden = (xden + den[i]) * t
    return xnum + num[n], xden + den[n]


def _exp_neg_square(y):
    """exp(-y^2) without the rounding error of squaring y: split y = y16 + rest."""
    y16 = np.trunc(y * 16) / 16
    return np.exp(-y16 * y16) * np.exp(-(y - y16) * (y + y16))


def _erfc_positive(y):
    """erfc(y) for float64 y > 0.46875 (Cody's second and third intervals)."""
    out = np.empty_like(y)
    mid = y <= 4.0
    ym = y[mid]
    num, den = _rational(ym, _ERF_C, _ERF_D, 8, 7)
    out[mid] = _exp_neg_square(ym) * num / den
    yb = np.minimum(y[~mid], 27.0)  # erfc underflows to 0 beyond 26.6
    t = 1.0 / (yb * yb)
    num, den = _rational(t, _ERF_P, _ERF_Q, 5, 4)
    out[~mid] = _exp_neg_square(yb) * (_INV_SQRT_PI - t * num / den) / yb
    return out


def erf_float64(x):
    """erf of a float64 array, vectorized (nan stays nan, erf(+-inf) = +-1)."""
    y = np.abs(x)
    out = x.copy()  # nan entries fall in no interval and stay nan
    small = y <= 0.46875
    xs = x[small]
    num, den = _rational(xs * xs, _ERF_A, _ERF_B, 4, 3)
    out[small] = xs * num / den
    large = y > 0.46875
    out[large] = np.copysign(1.0 - _erfc_positive(y[large]), x[large])
    return out


class Erf(UnaryElementwise):
    """y = erf(x) = 2/sqrt(pi) int_0^x exp(-t^2) dt;  dy/dx = 2/sqrt(pi) exp(-x^2)."""
    public_name = "erf"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.erf(x)."""
        return b.erf(x)

    @staticmethod
    def forward(x):
        x = as_float_array(x)
        return erf_float64(np.asarray(x, dtype=np.float64)).astype(x.dtype, copy=False)

    @staticmethod
    def derivative(x, out):
        return (-(x * x)).exp() * (2 / math.sqrt(math.pi))
