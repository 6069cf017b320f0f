"""Comparisons, logical ops, predicates (isnan, ...) and `where`.

Owns: lt le gt ge eq ne, logical_and/or/xor/not, isnan isfinite isinf (bool results with
no gradient) and where(cond, x, y) (differentiable in x and y). Comparisons promote both
operands to their common dtype first, as PyTorch does, so `int_tensor < 1.5` and
`float32_tensor == 0.1` mean what they mean in PyTorch. Batching rules promote operands
by their per-example ranks (`align_promoted`), so vmap computes what each example would.
"""
import numpy as np

from .. import dtypes
from ..tensor import Tensor, from_numpy
from . import _sparsity
from ._families import ArrayFunction, align_batched, public
from ._helpers import load_mixed, save_mixed, shape_of, sum_to


_TORCH_TYPE_NAMES = {"bool": "Bool", "int32": "Int", "int64": "Long", "float16": "Half",
                     "float32": "Float", "float64": "Double"}


def torch_type_name(dtype):
    """PyTorch's scalar type name of a numpy dtype ('Float', 'Long', ...) for messages."""
    name = np.dtype(dtype).name
    return _TORCH_TYPE_NAMES.get(name, name)


def not_implemented_for(kernel, dtype):
    """PyTorch's error for a kernel without an implementation for `dtype`. PyTorch raises
    NotImplementedError (a RuntimeError subclass) here, so adkit does too."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{torch_type_name(dtype)}\'')


def _as_dtype(v, want):
    if isinstance(v, np.ndarray):
        return v if v.dtype == want else v.astype(want)
    return v


def _promoted(x, y):
    """Both operands in their PyTorch result dtype (Python numbers stay weak scalars)."""
    if type(x) is np.ndarray:
        if type(y) is np.ndarray:
            if x.dtype == y.dtype:
                return x, y
        elif x.dtype.kind == "f" and (type(y) is float or type(y) is int):
            return x, y  # numpy computes in x's dtype, as PyTorch does
    elif type(y) is np.ndarray and y.dtype.kind == "f" and (type(x) is float or
                                                           type(x) is int):
        return x, y
    want = dtypes.result_type(x, y).np
    return _as_dtype(x, want), _as_dtype(y, want)


def per_example_dtype(args, in_dims):
    """PyTorch's promoted dtype of one example of args (None args skipped): a batched
    tensor counts with its per-example rank, so a 0-d example stays a 0-d operand."""
    operands = [(a.dtype, a.ndim - (d is not None)) if isinstance(a, Tensor) else a
                for a, d in zip(args, in_dims) if a is not None]
    return dtypes.result_type(*operands)


def cast_tensor(a, want):
    """Tensor `a` converted to dtype `want` (numbers and None pass through)."""
    return a.to(want) if isinstance(a, Tensor) and a.dtype != want else a


def align_promoted(args, in_dims):
    """align_batched on args first cast to their per-example promoted dtype (so that the
    batched op promotes, and so computes, exactly as the per-example op would)."""
    want = per_example_dtype(args, in_dims)
    return align_batched([cast_tensor(a, want) for a in args], in_dims)


class BoolResult(ArrayFunction):
    """Base of ops with a bool result: nothing to save, no gradient, no tangent.
    `promotes`: binary operands are compared in their common dtype (not logical ops)."""

    promotes = True

    @classmethod
    def vmap(cls, info, in_dims, *args):
        """Batching rule: a unary op keeps the batch dim where it is; a binary one moves
        batch dims to the front with per-example ranks aligned (and dtypes promoted)."""
        if len(args) == 1:
            return cls.apply(*args), in_dims[0]
        aligned = align_promoted(args, in_dims) if cls.promotes else \
            align_batched(args, in_dims)
        return cls.apply(*aligned), 0

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grad_outputs):
        return (None,) * len(ctx.needs_input_grad)

    @staticmethod
    def jvp(ctx, *tangents):
        return None


class _Compare(BoolResult):
    """A comparison of two operands in their common dtype: numpy's `ufunc` in eager
    mode, LLVM's float compare `symbol` in a fused kernel (ordered, so False with NaN,
    except != which is True with NaN, as numpy's)."""
    symbol = ufunc = None

    @classmethod
    def lower(cls, b, x, y):
        """Native code: b.compare(symbol, x, y)."""
        return b.compare(cls.symbol, x, y)

    @classmethod
    def forward(cls, x, y):
        return cls.ufunc(*_promoted(x, y))


class Lt(_Compare):
    """z = x < y (bool, no gradient)."""
    public_name = "lt"
    aliases = ("less",)
    symbol, ufunc = "<", staticmethod(np.less)


class Le(_Compare):
    """z = x <= y (bool, no gradient)."""
    public_name = "le"
    aliases = ("less_equal",)
    symbol, ufunc = "<=", staticmethod(np.less_equal)


class Gt(_Compare):
    """z = x > y (bool, no gradient)."""
    public_name = "gt"
    aliases = ("greater",)
    symbol, ufunc = ">", staticmethod(np.greater)


class Ge(_Compare):
    """z = x >= y (bool, no gradient)."""
    public_name = "ge"
    aliases = ("greater_equal",)
    symbol, ufunc = ">=", staticmethod(np.greater_equal)


class Eq(_Compare):
    """z = x == y (bool, no gradient)."""
    public_name = "eq"
    symbol, ufunc = "==", staticmethod(np.equal)


class Ne(_Compare):
    """z = x != y (bool, no gradient)."""
    public_name = "ne"
    aliases = ("not_equal",)
    symbol, ufunc = "!=", staticmethod(np.not_equal)


def _lower_logic(cls, b, x, y):
    """Native code shared by logical and bitwise ops: `cls.logic` (and_, or_, xor) of
    the operands' truth values (bools as they are; on bools bitwise is logical, and
    bools are the only fusible dtype besides floats)."""
    return getattr(b.b, cls.logic)(b.truth(x), b.truth(y))


class _Logical(BoolResult):
    """z = numpy's logical `ufunc` of x != 0 and y != 0 (operands not promoted)."""
    promotes = False
    ufunc = logic = None
    lower = classmethod(_lower_logic)

    @classmethod
    def forward(cls, x, y):
        return cls.ufunc(x, y)


class LogicalAnd(_Logical):
    """z = (x != 0) and (y != 0) (bool, no gradient)."""
    public_name = "logical_and"
    ufunc, logic = staticmethod(np.logical_and), "and_"


class LogicalOr(_Logical):
    """z = (x != 0) or (y != 0) (bool, no gradient)."""
    public_name = "logical_or"
    ufunc, logic = staticmethod(np.logical_or), "or_"


class LogicalXor(_Logical):
    """z = (x != 0) xor (y != 0) (bool, no gradient)."""
    public_name = "logical_xor"
    ufunc, logic = staticmethod(np.logical_xor), "xor"


class LogicalNot(BoolResult):
    """z = (x == 0) (bool, no gradient)."""
    public_name = "logical_not"

    @staticmethod
    def lower(b, x):
        """Native code: not of the truth value."""
        return b.b.not_(b.truth(x))

    @staticmethod
    def forward(x):
        return np.logical_not(x)


class _FloatTest(BoolResult):
    """z = numpy's `ufunc` test of each element; integers and bools are never nan or
    inf, so they all get `otherwise`. In a kernel: `symbol` compares x with itself
    ("uno": nan) or |x| with inf."""
    ufunc = symbol = otherwise = None

    @classmethod
    def lower(cls, b, x):
        """Native code: x unordered with itself, or |x| compared with inf."""
        if cls.symbol == "uno":
            return b.compare("uno", x, x)
        return b.compare(cls.symbol, b.fabs(x), float("inf"))

    @classmethod
    def forward(cls, x):
        if x.dtype.kind == "f":
            return cls.ufunc(x)
        return np.full(x.shape, cls.otherwise, np.bool_)


class Isnan(_FloatTest):
    """z = x is nan (bool, no gradient)."""
    public_name = "isnan"
    ufunc, symbol, otherwise = staticmethod(np.isnan), "uno", False


class Isfinite(_FloatTest):
    """z = x is neither inf nor nan (bool, no gradient)."""
    public_name = "isfinite"
    ufunc, symbol, otherwise = staticmethod(np.isfinite), "<", True  # False for nan


class Isinf(_FloatTest):
    """z = x is +inf or -inf (bool, no gradient)."""
    public_name = "isinf"
    ufunc, symbol, otherwise = staticmethod(np.isinf), "==", False


class _Bitwise(BoolResult):
    """Bitwise ops on bool and integer tensors (bool stays bool, ints promote); PyTorch's
    error for floats. No gradient: the results are never floating point."""

    kernel = None

    @classmethod
    def _check(cls, *arrays):
        for a in arrays:
            if isinstance(a, np.ndarray) and a.dtype.kind == "f":
                raise not_implemented_for(cls.kernel, a.dtype)
            if isinstance(a, float):
                raise TypeError(f"{cls.public_name}(): argument 'other' must be Tensor or an "
                                "integer/bool scalar, not float")


class _BitwiseBinary(_Bitwise):
    """z = numpy's bitwise `ufunc` of x and y in their common dtype."""
    ufunc = logic = None
    lower = classmethod(_lower_logic)

    @classmethod
    def forward(cls, x, y):
        cls._check(x, y)
        return np.asarray(cls.ufunc(*_promoted(x, y)))


class BitwiseAnd(_BitwiseBinary):
    """z = x & y (bitwise; logical for bool)."""
    public_name = "bitwise_and"
    kernel = "bitwise_and_cpu"
    ufunc, logic = staticmethod(np.bitwise_and), "and_"


class BitwiseOr(_BitwiseBinary):
    """z = x | y (bitwise; logical for bool)."""
    public_name = "bitwise_or"
    kernel = "bitwise_or_cpu"
    ufunc, logic = staticmethod(np.bitwise_or), "or_"


class BitwiseXor(_BitwiseBinary):
    """z = x ^ y (bitwise; logical for bool)."""
    public_name = "bitwise_xor"
    kernel = "bitwise_xor_cpu"
    ufunc, logic = staticmethod(np.bitwise_xor), "xor"


class BitwiseNot(_Bitwise):
    """y = ~x (bitwise; logical for bool)."""
    public_name = "bitwise_not"
    kernel = "bitwise_not_cpu"

    @staticmethod
    def lower(b, x):
        """Native code: on bools (the only fusible dtype), not."""
        return b.b.not_(b.truth(x))

    @staticmethod
    def forward(x):
        if x.dtype.kind == "f":
            raise TypeError("~ (operator.invert) is only implemented on integer and "
                            "Boolean-type tensors")
        return np.invert(x)


class Where(ArrayFunction):
    """z = x where cond else y (broadcast; x or y may be a Python number; dtype is
    PyTorch's promotion of x and y);  grad_x = grad where cond, grad_y = grad where not."""
    sparsity = classmethod(lambda cls, *args: _sparsity.elementwise(args))  # sparsity rule
    curvature = "linear"
    public_name = "where"
    variants = ("function",)

    @staticmethod
    def lower(b, condition, x, y):
        """Native code: a select."""
        return b.select(b.truth(condition), x, y)

    @staticmethod
    def forward(condition, x, y):
        condition = np.asarray(condition)
        if condition.dtype != np.bool_:
            raise RuntimeError("where expected condition to be a boolean tensor, but got a "
                               f"tensor with dtype {torch_type_name(condition.dtype)}")
        want = dtypes.result_type(x, y).np
        result = np.where(condition, _as_dtype(x, want), _as_dtype(y, want))
        return result if result.dtype == want else result.astype(want)

    @staticmethod
    def setup_context(ctx, inputs, output):
        # only the condition is saved (x and y only for their shapes), as in PyTorch: x
        # or y may change in place afterwards (x[mask] = v is a where, then a write)
        condition, x, y = inputs
        save_mixed(ctx, (condition,))
        ctx.shapes = (shape_of(x), shape_of(y))

    @classmethod
    def vmap(cls, info, in_dims, condition, x, y):
        """Batching rule: batch dims to the front, per-example ranks aligned, x and y in
        the dtype one example promotes them to."""
        want = per_example_dtype((x, y), in_dims[1:])
        args = (condition, cast_tensor(x, want), cast_tensor(y, want))
        return cls.apply(*align_batched(args, in_dims)), 0

    @staticmethod
    def backward(ctx, grad_out):
        (cond,), _ = load_mixed(ctx)
        _, need_x, need_y = ctx.needs_input_grad
        x_shape, y_shape = ctx.shapes
        grad_x = sum_to(Where.apply(cond, grad_out, 0.0), x_shape) if need_x else None
        grad_y = sum_to(Where.apply(cond, 0.0, grad_out), y_shape) if need_y else None
        return None, grad_x, grad_y

    @staticmethod
    def jvp(ctx, _cond_t, x_t, y_t):
        (cond,), _ = load_mixed(ctx)
        if x_t is None and y_t is None:
            return None
        shape = np.broadcast_shapes(shape_of(cond), *ctx.shapes)
        out_t = Where.apply(cond, 0.0 if x_t is None else x_t, 0.0 if y_t is None else y_t)
        return out_t if tuple(out_t.shape) == shape else out_t.expand(shape)

    @classmethod
    def interface(cls, condition, input=None, other=None):  # noqa: A002  (PyTorch's name)
        """where(cond, x, y); where(cond) alone is nonzero(cond, as_tuple=True)."""
        if input is None and other is None:
            return tuple(from_numpy(np.ascontiguousarray(i))
                         for i in np.nonzero(np.asarray(condition)))
        return cls.apply(condition, input, other)


@public("where", variants=("method",))
def where_method(x, condition, y):
    """`x.where(condition, y)`: x where condition else y (PyTorch's Tensor.where)."""
    return Where.apply(condition, x, y)


@public("isclose")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """|input - other| <= atol + rtol * |other| elementwise (equal infinities are close;
    NaNs only with equal_nan), as torch.isclose; a bool tensor, no gradient."""
    with np.errstate(invalid="ignore"):  # inf - inf: decided by the equality below
        close = (input - other).abs() <= atol + rtol * other.abs()
    close = close | (input == other)
    if equal_nan:
        close = close | (input.isnan() & other.isnan())
    return close


@public("allclose")
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """Whether isclose holds everywhere (a Python bool, as torch.allclose)."""
    close = isclose(input, other, rtol, atol, equal_nan)
    return bool(np.all(close._data))
