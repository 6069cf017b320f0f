"""Binary elementwise arithmetic with numpy broadcasting and PyTorch's type promotion.

Owns: add, sub, mul, div, pow, maximum, minimum, atan2, and clamp (a maximum then a
minimum, with up to three broadcast operands). Each op is its forward (numpy)
and its partial derivatives (adkit ops); the family turns those into backward and jvp.
Either operand may be a Python number (it then takes part in promotion as a weak scalar).
"""
import math

import numpy as np

from .. import dtypes
from ..tensor import Tensor, zeros_like
from . import _sparsity
from ._families import MATH_CALL_NS, ArrayFunction, BinaryElementwise, public
from ._helpers import (cast_result, float_cast_result, load_mixed, save_mixed, shape_of,
                       sum_to)
from .comparison import Where, align_promoted, not_implemented_for


def _is_bool(v):
    """A bool array or Python/numpy bool (PyTorch refuses these in subtraction)."""
    return v.dtype == np.bool_ if type(v) is np.ndarray else isinstance(v, (bool, np.bool_))


class Add(BinaryElementwise):
    """z = x + y;  dz/dx = 1, dz/dy = 1."""
    public_name = "add"
    ufunc = np.add
    saves = ()

    @staticmethod
    def lower(b, x, y):
        """Native code: b.add(x, y)."""
        return b.add(x, y)

    @staticmethod
    def forward(x, y):
        return cast_result(np.add(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        return 1, 1

    array_rule = partials  # its partials read no tensor method: the same on arrays


class Sub(BinaryElementwise):
    """z = x - y;  dz/dx = 1, dz/dy = -1."""
    public_name = "sub"
    ufunc = np.subtract
    saves = ()
    aliases = ("subtract",)

    @staticmethod
    def lower(b, x, y):
        """Native code: b.sub(x, y)."""
        return b.sub(x, y)

    @staticmethod
    def forward(x, y):
        x_bool, y_bool = _is_bool(x), _is_bool(y)
        if x_bool or y_bool:
            if x_bool and y_bool:
                raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is "
                                   "not supported. Use the `^` or `logical_xor()` operator "
                                   "instead.")
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                               "supported. If you are trying to invert a mask, use the `~` "
                               "or `logical_not()` operator instead.")
        return cast_result(np.subtract(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        return 1, -1

    array_rule = partials  # its partials read no tensor method: the same on arrays


class Mul(BinaryElementwise):
    """z = x * y;  dz/dx = y, dz/dy = x."""
    public_name = "mul"
    ufunc = np.multiply
    saves = ("x", "y")
    only_for_other = ("x", "y")
    aliases = ("multiply",)

    @staticmethod
    def lower(b, x, y):
        """Native code: b.mul(x, y)."""
        return b.mul(x, y)

    @staticmethod
    def forward(x, y):
        return cast_result(np.multiply(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        return y, x

    array_rule = partials  # its partials read no tensor method: the same on arrays


class Div(BinaryElementwise):
    """z = x / y (true division);  dz/dx = 1/y, dz/dy = -x/y^2 (PyTorch's formula: from x,
    not z, so that div_ can use the same rule with x before the write)."""
    public_name = "div"
    # lint_where: where the derivative is infinite or undefined, by argument position:
    # (that domain, a value outside it that safe_where puts in masked lanes, and
    # "positive" when an argument proved positive is outside it)
    singular = {1: ("y == 0", 1.0, "positive")}
    saves = ("x", "y")
    only_for_other = ("x",)  # dz/dx = 1/y reads y alone
    aliases = ("divide", "true_divide")

    @staticmethod
    def lower(b, x, y):
        """Native code: b.div(x, y)."""
        return b.div(x, y)

    @staticmethod
    def forward(x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return float_cast_result(np.true_divide(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        if not isinstance(y, Tensor):  # a Python number: IEEE division (1/0 = inf), as
            with np.errstate(divide="ignore"):  # the forward does
                return np.float64(1.0) / np.float64(y), None
        # x is saved only when y needs a gradient (only_for_other)
        return 1 / y, None if x is None else -x / (y * y)


def _result_dtype(x, y):
    """PyTorch's result dtype of an op on x and y (fast for the common cases: equal dtypes,
    a float array with a Python number)."""
    if type(x) is np.ndarray:
        if type(y) is np.ndarray:
            if x.dtype == y.dtype:
                return x.dtype
        elif x.dtype.kind == "f" and (type(y) is float or type(y) is int):
            return x.dtype
    elif type(y) is np.ndarray and y.dtype.kind == "f" and (type(x) is float or
                                                           type(x) is int):
        return y.dtype
    return dtypes.result_type(x, y).np


def _as_dtype(v, want):
    """An array operand in dtype `want` (Python numbers stay weak, bools become ints)."""
    if isinstance(v, np.ndarray):
        return v if v.dtype == want else v.astype(want)
    if isinstance(v, (bool, np.bool_)) and want.kind != "b":
        return int(v)
    return v


def _in_dtype(result, want):
    result = np.asarray(result)
    return result if result.dtype == want else result.astype(want)


def _binary_in(ufunc, x, y, want):
    """ufunc on both operands converted to the result dtype `want` (as PyTorch computes)."""
    return _in_dtype(ufunc(_as_dtype(x, want), _as_dtype(y, want)), want)


def _integer_power(x, y):
    """x ** y for integers. A Python exponent must be >= 0; a tensor exponent may be
    negative, and then (as in PyTorch) the result is 1/x^|y| truncated: 1, -1 or 0."""
    if not isinstance(y, np.ndarray):
        if y < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return np.power(x, y)
    negative = y < 0
    if not negative.any():
        return np.power(x, y)
    positive = np.power(x, np.where(negative, 0, y))
    reciprocal = np.where(x == 1, 1, np.where(x == -1, 1 - 2 * (y % 2), 0))
    return np.where(negative, reciprocal, positive)


def _pow_dx(x, y):
    """d(x^y)/dx = y x^(y-1), zero where y == 0 (no 0 * inf at x = 0)."""
    if not isinstance(x, Tensor):
        return None
    if not isinstance(y, Tensor):
        return None if y == 0 else y * x ** (y - 1)
    zero = y == 0
    exponent = Where.apply(zero, 1.0, y - 1)  # finite where masked: no 0 * inf, even in
    return Where.apply(zero, 0.0, y * x ** exponent)  # higher derivatives


def _pow_dy(x, y, out):
    """d(x^y)/dy = x^y log(x), zero where x == 0 and y >= 0 (PyTorch's rule)."""
    if not isinstance(y, Tensor):
        return None
    if isinstance(x, Tensor):
        zero = (x == 0) & (y >= 0)
        safe_log = Where.apply(zero, 1.0, x).log()  # 0 where masked: no 0 * -inf
        return Where.apply(zero, 0.0, out * safe_log)
    if x == 0:  # 0 ** y is 0 or 1 for y >= 0 (zero derivative), inf for y < 0
        return Where.apply(y >= 0, 0.0, -math.inf)
    return out * (math.log(x) if x > 0 else math.nan)


def _times(t, d):
    return None if d is None else t * d


def _scaled_to(grad, d, like):
    return None if d is None else sum_to(grad * d, shape_of(like))


class Pow(BinaryElementwise):
    """z = x ** y;  dz/dx = y x^(y-1) (0 where y == 0), dz/dy = z log(x) (0 where
    x == 0 and y >= 0). Integer ** integer stays integer; a negative Python exponent of
    an integer tensor is an error, as in PyTorch."""
    public_name = "pow"
    native_cost = MATH_CALL_NS  # a math library call per element

    @staticmethod
    def singular_at(params):
        """lint_where (see unary.Log's `singular`): x ** y has an infinite derivative at
        x = 0 when y < 1 (y not 0); a tensor exponent's derivative z log(x) at x <= 0."""
        y = params.get("y")
        if y is None:
            return {0: ("x <= 0", 1.0, "positive")}
        if isinstance(y, (int, float)) and (y >= 1 or y == 0):
            return {}
        return {0: ("x == 0 (x ** y with y < 1)", 1.0, "positive")}

    @staticmethod
    def lower(b, x, y):
        """Native code: x**2 as x*x, x**0.5 as sqrt, x**-1 as 1/x (numpy's own fast
        paths, so the results are the same bits), else pow."""
        if isinstance(y, (int, float)) and not isinstance(y, bool):
            if y == 2:
                return b.mul(x, x)
            if y == 1:
                return x
            if y == 0.5:
                return b.sqrt(x)
            if y == -1:
                return b.div(1.0, x)
        return b.pow(x, y)

    @staticmethod
    def forward(x, y):
        want = _result_dtype(x, y)
        if want.kind == "b":
            if isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
                return x.copy() if y else np.ones_like(x)  # x ** True, x ** False
            raise not_implemented_for("pow", want)
        x, y = _as_dtype(x, want), _as_dtype(y, want)
        if want.kind != "f":
            return _in_dtype(_integer_power(x, y), want)
        with np.errstate(all="ignore"):
            return _in_dtype(np.power(x, y), want)

    @staticmethod
    def partials(x, y, out):
        return _pow_dx(x, y), _pow_dy(x, y, out)

    @staticmethod
    def backward(ctx, grad_out):
        (x, y), out = load_mixed(ctx)
        need_x, need_y = ctx.needs_input_grad[:2]
        grad_x = _scaled_to(grad_out, _pow_dx(x, y), x) if need_x else None
        if need_x and grad_x is None:  # x ** 0: a zero gradient, not none (PyTorch's)
            grad_x = zeros_like(x)
        grad_y = _scaled_to(grad_out, _pow_dy(x, y, out), y) if need_y else None
        return grad_x, grad_y

    @staticmethod
    def jvp(ctx, x_t, y_t):
        (x, y), out = load_mixed(ctx)
        terms = []
        if x_t is not None:
            terms.append(_times(x_t, _pow_dx(x, y)))
        if y_t is not None:
            terms.append(_times(y_t, _pow_dy(x, y, out)))
        terms = [t for t in terms if t is not None]
        if not terms:
            return None  # a zero tangent, as in the family's jvp
        total = terms[0] if len(terms) == 1 else terms[0] + terms[1]
        return total if total.shape == out.shape else total.expand(out.shape)


class Maximum(BinaryElementwise):
    """z = max(x, y) elementwise (nan propagates);  dz/dx = 1 where x > y, 1/2 at ties,
    else 0; dz/dy likewise (PyTorch splits the gradient evenly at ties)."""
    public_name = "maximum"

    @staticmethod
    def lower(b, x, y):
        """Native code: b.maximum(x, y)."""
        return b.maximum(x, y)

    @staticmethod
    def forward(x, y):
        return _binary_in(np.maximum, x, y, _result_dtype(x, y))

    @staticmethod
    def partials(x, y, out):
        half_ties = (x == y).to(out.dtype) * 0.5
        return (Where.apply(x < y, 0.0, 1 - half_ties),
                Where.apply(x > y, 0.0, 1 - half_ties))


class Minimum(BinaryElementwise):
    """z = min(x, y) elementwise (nan propagates);  dz/dx = 1 where x < y, 1/2 at ties,
    else 0; dz/dy likewise."""
    public_name = "minimum"

    @staticmethod
    def lower(b, x, y):
        """Native code: b.minimum(x, y)."""
        return b.minimum(x, y)

    @staticmethod
    def forward(x, y):
        return _binary_in(np.minimum, x, y, _result_dtype(x, y))

    @staticmethod
    def partials(x, y, out):
        half_ties = (x == y).to(out.dtype) * 0.5
        return (Where.apply(x > y, 0.0, 1 - half_ties),
                Where.apply(x < y, 0.0, 1 - half_ties))


class Atan2(BinaryElementwise):
    """z = atan2(x, y), the angle of the point (y, x);  dz/dx = y/(x^2 + y^2),
    dz/dy = -x/(x^2 + y^2)."""
    public_name = "atan2"
    singular = {0: ("y == x == 0", 1.0, None)}  # see unary.Log
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x", "y")
    aliases = ("arctan2",)

    @staticmethod
    def lower(b, x, y):
        """Native code: b.atan2(x, y)."""
        return b.atan2(x, y)

    @staticmethod
    def forward(x, y):
        want = _result_dtype(x, y)
        return _binary_in(np.arctan2, x, y, want if want.kind == "f" else
                          dtypes.get_default_dtype().np)

    @staticmethod
    def partials(x, y, out):
        # PyTorch's rule: both partials are 0 at the origin (not 0/0)
        norm = x * x + y * y
        at_origin = norm == 0
        inv_norm = Where.apply(at_origin, 0.0, Where.apply(at_origin, 1.0, norm).reciprocal())
        return y * inv_norm, -x * inv_norm


class Clamp(ArrayFunction):
    """y = min(max(x, min), max); min and max may be None, numbers or tensors.
    grad_x = grad where min <= x <= max; grad_min = grad where x < min < max;
    grad_max = grad where x > max or max < min (PyTorch's clamp_backward_min_max)."""
    sparsity = classmethod(lambda cls, *args: _sparsity.elementwise(args))  # sparsity rule
    public_name = "clamp"
    aliases = ("clip",)

    @staticmethod
    def forward(x, min=None, max=None):  # noqa: A002  (PyTorch's keyword names)
        if min is None and max is None:
            raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
        want = dtypes.result_type(*[a for a in (x, min, max) if a is not None]).np
        if want == np.bool_:
            raise not_implemented_for("clamp_cpu", want)
        out = x if x.dtype == want else x.astype(want)
        if min is not None:
            out = np.maximum(out, min.astype(want, copy=False)
                             if isinstance(min, np.ndarray) else min)
        if max is not None:
            out = np.minimum(out, max.astype(want, copy=False)
                             if isinstance(max, np.ndarray) else max)
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        save_mixed(ctx, inputs)

    @classmethod
    def vmap(cls, info, in_dims, x, lo, hi):
        """Batching rule: batch dims to the front, per-example ranks aligned, all three
        operands in the dtype one example promotes them to (bounds may be batched)."""
        return cls.apply(*align_promoted((x, lo, hi), in_dims)), 0

    @staticmethod
    def masks(x, lo, hi):
        """Where each of x, min, max passes its gradient through (None: never needed)."""
        mask_x = mask_lo = mask_hi = None
        if lo is not None:
            mask_x = x >= lo
            mask_lo = x < lo if hi is None else (x < lo) & (lo < hi)
        if hi is not None:
            mask_x = x <= hi if mask_x is None else mask_x & (x <= hi)
            mask_hi = x > hi if lo is None else (x > hi) | (hi < lo)
        return mask_x, mask_lo, mask_hi

    @staticmethod
    def backward(ctx, grad_out):
        inputs, _ = load_mixed(ctx)
        masks = Clamp.masks(*inputs)
        return tuple(sum_to(Where.apply(m, grad_out, 0.0), shape_of(a)) if need else None
                     for a, m, need in zip(inputs, masks, ctx.needs_input_grad))

    @staticmethod
    def jvp(ctx, x_t, lo_t, hi_t):
        inputs, _ = load_mixed(ctx)
        masks = Clamp.masks(*inputs)
        terms = [Where.apply(m, t, 0.0) for m, t in zip(masks, (x_t, lo_t, hi_t))
                 if t is not None]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        shape = np.broadcast_shapes(*[shape_of(a) for a in inputs if a is not None])
        return total if tuple(total.shape) == shape else total.expand(shape)


@public("clamp_min")
def clamp_min(x, min):  # noqa: A002
    """clamp(x, min=min)."""
    return Clamp.apply(x, min, None)


@public("clamp_max")
def clamp_max(x, max):  # noqa: A002
    """clamp(x, max=max)."""
    return Clamp.apply(x, None, max)
