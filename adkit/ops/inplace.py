"""In-place ops (Tensor methods): add_, sub_, mul_, div_, copy_, zero_, fill_, clamp_, exp_.

Owns: each op's forward, which writes into x's own array (`ufunc(..., out=x)`) and returns
that same array, so the core hands back x itself; setup_context calls `ctx.mark_dirty(x)`
and the core bumps x's version and rebases its history onto this node. x keeps its dtype;
a result type x cannot hold raises PyTorch's cast error. Each op's batching rule writes
into the physical x (its batch dim stays) with the other operands laid out like x, cast to
the per-example result dtype. Does not: implement `x[i] = v`
(indexing.py) or the out-of-place ops these mirror (binary.py, unary.py).
NB: a rule that needs x's value from *before* the write (mul_, div_, clamp_) gets it as
a hidden tensor argument `original`, a clone the public call makes only when a gradient
may need it (PyTorch's `original_self`): forward cannot see whether grad is needed.
"""
import numpy as np

from .. import _dispatch, dtypes
from ..autograd.grad_mode import STATE
from ..tensor import Tensor, _make, as_tensor, zeros_like
from . import _sparsity
from ._families import ArrayFunction
from ._helpers import shape_of, sum_to, unwritable_error
from .binary import Add, Clamp, Div, Mul, Sub
from .unary import Exp

_TORCH_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double",
                "int32": "Int", "int64": "Long", "bool": "Bool"}


def _can_cast(src, dst):
    """PyTorch's canCast: no float -> integral/bool, no non-bool -> bool."""
    if src.is_floating_point and not dst.is_floating_point:
        return False
    return dst.is_bool <= src.is_bool


def _check_cast(result, x):
    """`result` (a DType) must fit into the array x that receives it."""
    dst = dtypes.from_numpy_dtype(x.dtype)
    if not _can_cast(result, dst):
        raise RuntimeError(f"result type {_TORCH_NAMES[result.name]} can't be cast to the "
                           f"desired output type {_TORCH_NAMES[dst.name]}")


def _check_shape(x_shape, *operand_shapes):
    """x's shape must not change under broadcasting with the operands' shapes."""
    shape = np.broadcast_shapes(x_shape, *operand_shapes)
    if shape != x_shape:
        raise RuntimeError(f"output with shape {list(x_shape)} doesn't match the broadcast "
                           f"shape {list(shape)}")


def _check_target(x, *operands):
    """x must be writable and keep its shape under broadcasting with the operands."""
    _check_shape(x.shape, *[shape_of(o) for o in operands])
    if not x.flags.writeable:
        raise unwritable_error(x)


def _in_dtype(operand, dtype):
    """An array operand converted to the computation dtype (numbers stay weak)."""
    if isinstance(operand, np.ndarray) and operand.dtype != dtype.np:
        return operand.astype(dtype.np)
    return operand


def _grad_possible(*operands):
    """Whether a rule may later run on these operands (grad, or any transform level)."""
    if _dispatch._STACK.get():
        return True
    if any(isinstance(t, Tensor) and t._fw for t in operands):
        return True  # forward-AD tangents: the jvp needs the same values
    return STATE.enabled and any(isinstance(t, Tensor) and t.requires_grad for t in operands)


def _unalias(x, other):
    """A saved operand must not be x itself (x is overwritten): use a copy of it."""
    data, x_data = getattr(other, "_data", None), getattr(x, "_data", None)
    if isinstance(data, np.ndarray) and isinstance(x_data, np.ndarray) and \
            np.may_share_memory(data, x_data):
        return other.clone()
    return other


def _zero_grad(ctx, grad):
    return zeros_like(grad) if ctx.needs_input_grad[0] else None


def _guarded_apply(cls, x, *args, **kwargs):
    """The public call of an op with a regular signature: check x, then apply."""
    return cls.apply(x, *args, **kwargs)


def _total(*terms):
    """The sum of the terms that are not None (tangent terms of absent tangents)."""
    terms = [t for t in terms if t is not None]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


class _InplaceOf(ArrayFunction):
    """x <- op(x, *operands), where op is the out-of-place Function a subclass also
    derives from (`class MulInplace(_InplaceOf, Mul)`): op's numpy forward computes the
    value, which must fit x (PyTorch's cast and shape errors) and is written into x's own
    array; op's own rules (saves, partials/derivative/masks, backward, jvp) differentiate
    it, reading the hidden last input `original` (x before the write, passed by the public
    call when a rule may read it) where they read x. Nothing of op's math is restated."""
    modifies = 0
    variants = ("method",)
    infer = None  # run on zeros: the tracer then sees that the output is x (an alias)
    lower = None  # written in place: never fused into a kernel

    @classmethod
    def out_of_place(cls):
        return next(b for b in cls.__mro__[1:] if "forward" in vars(b)
                    and not issubclass(b, _InplaceOf))

    @classmethod
    def write(cls, x, *operands):
        """op(x, *operands) written into x; x itself is returned."""
        given = [o for o in operands if o is not None]
        _check_target(x, *given)
        # operands in the promoted dtype first (PyTorch computes in it: a float64 0-d
        # operand does not make a float32 x compute in float64)
        want = dtypes.result_type(x, *given)
        operands = [_in_dtype(o, want) for o in operands]
        result = np.asarray(cls.out_of_place().forward(x, *operands))
        _check_cast(dtypes.from_numpy_dtype(result.dtype), x)
        np.copyto(x, result, casting="unsafe")
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        *given, original = inputs
        ctx.mark_dirty(given[0])
        # op's rules read x's value only where the public call passed `original`; else
        # they get a stand-in with x's shape and dtype and no memory (saving x itself
        # would make any later write to x an error at backward, unlike PyTorch)
        given[0] = original if original is not None else _shape_only(given[0])
        ctx._forward_cls.out_of_place().setup_context(ctx, tuple(given), output)

    @staticmethod
    def backward(ctx, grad):
        grads = ctx._forward_cls.out_of_place().backward(ctx, grad)
        return (grads if isinstance(grads, tuple) else (grads,)) + (None,)

    @staticmethod
    def jvp(ctx, *tangents):
        return ctx._forward_cls.out_of_place().jvp(ctx, *tangents[:-1])


def _shape_only(t):
    return _make(np.broadcast_to(np.zeros((), t._data.dtype), t._data.shape))


# ---------------------------------------------------------------- batching (vmap)
_UNBATCHED_SELF = ("vmap: inplace arithmetic(self, *extra_args) is not possible because there "
                   "exists a Tensor `other` in extra_args that has more elements than `self`. "
                   "This happened due to `other` being vmapped over but `self` not being "
                   "vmapped over in a vmap. Please try to use out-of-place operators instead "
                   "of inplace arithmetic.")


def _self_dim(in_dims):
    """x's batch dim; PyTorch's error when x is unbatched but another operand is batched."""
    if in_dims[0] is None:
        raise RuntimeError(_UNBATCHED_SELF)
    return in_dims[0]


def _example_shape(a, d):
    """The per-example shape of an operand batched along d (None: unbatched)."""
    shape = shape_of(a)
    return shape if d is None else shape[:d] + shape[d + 1:]


def _example(a, d):
    """A zero-cost stand-in for one example of an operand (numbers pass through)."""
    if not isinstance(a, (Tensor, np.ndarray)):
        return a
    dtype = a._data.dtype if isinstance(a, Tensor) else a.dtype
    return np.broadcast_to(np.zeros((), dtype), _example_shape(a, d))


def _like_self(a, d, x, xd, dtype=None):
    """Operand a (batched along d, or None) laid out like the physical x (batched along
    xd): cast to `dtype`, its batch dim moved to xd (a size-1 dim there if unbatched),
    its per-example dims padded with leading 1s to x's per-example rank."""
    if isinstance(a, np.ndarray):
        a = as_tensor(a)
    if not isinstance(a, Tensor):
        return a
    if dtype is not None and a._data.dtype != dtype.np:
        a = a.to(dtype.np)
    if d is None and a.ndim == 0:
        return a  # broadcasts anywhere
    a = a.movedim(d, 0) if d is not None else a.unsqueeze(0)
    extra = x.ndim - a.ndim
    if extra:
        a = a.reshape((a.shape[0],) + (1,) * extra + tuple(a.shape[1:]))
    return a.movedim(0, xd)


def _operands_like_self(in_dims, x, operands, result_type):
    """x's batch dim, and the operands (batched along in_dims[1:]) laid out like x and cast
    to the per-example result dtype (so promotion and broadcasting are per example)."""
    xd = _self_dim(in_dims)
    dims = in_dims[1:1 + len(operands)]
    given = [(a, d) for a, d in zip(operands, dims) if a is not None]
    dtype = result_type(_example(x, xd), *[_example(a, d) for a, d in given])
    _check_shape(_example_shape(x, xd), *[_example_shape(a, d) for a, d in given])
    return xd, [_like_self(a, d, x, xd, dtype) for a, d in zip(operands, dims)]


def _self_only_rule(cls, info, in_dims, x, *hidden):
    """Batching rule: write into the physical x; its batch dim stays where it is (an
    unused hidden `original` is passed on as it came)."""
    return cls.apply(x, *hidden), in_dims[0]


def _alpha_times(x, other, alpha):
    """alpha * other for add_/sub_, as an op (so its gradient carries alpha); PyTorch's
    refusal of a float alpha for an integral result."""
    if alpha == 1:
        return other
    result = dtypes.result_type(x._data, getattr(other, "_data", other))
    if isinstance(alpha, float) and not result.is_floating_point:
        raise RuntimeError("For integral input tensors, argument alpha must not be a "
                           "floating point number.")
    return other * alpha


def _add_sub_interface(cls, x, other, *, alpha=1):
    return cls.apply(x, _alpha_times(x, other, alpha), None)


def _add_sub_rule(cls, info, in_dims, x, other, original=None):
    """Batching rule: write into the physical x (its batch dim stays), other laid out
    like x."""
    xd, (other,) = _operands_like_self(in_dims, x, (other,), dtypes.result_type)
    return cls.apply(x, other, None), xd


class AddInplace(_InplaceOf, Add):
    """x <- x + alpha * y, with Add's rules (alpha scales y first, as an op)."""
    public_name = "add_"

    @classmethod
    def forward(cls, x, other, original=None):
        return cls.write(x, other)

    interface = classmethod(_add_sub_interface)
    vmap = classmethod(_add_sub_rule)


class SubInplace(_InplaceOf, Sub):
    """x <- x - alpha * y, with Sub's rules (and its refusals of bool operands)."""
    public_name = "sub_"
    aliases = ("subtract_",)

    @classmethod
    def forward(cls, x, other, original=None):
        return cls.write(x, other)

    interface = classmethod(_add_sub_interface)
    vmap = classmethod(_add_sub_rule)


def _mul_div_interface(cls, x, other):
    """Clone x (as `original`) only when the other operand may need a gradient."""
    if not _grad_possible(x, other):
        return cls.apply(x, other, None)
    other = _unalias(x, other)
    return cls.apply(x, other, x.clone() if _grad_possible(other) else None)


def _mul_div_rule(cls, info, in_dims, x, other, original=None):
    """Batching rule: write into the physical x (its batch dim stays), other and the
    hidden `original` laid out like x."""
    result = dtypes.float_result_type if cls is DivInplace else dtypes.result_type
    xd, (other,) = _operands_like_self(in_dims, x, (other,), result)
    original = _like_self(original, in_dims[2], x, xd)
    return cls.apply(x, _unalias(x, other), original), xd


class MulInplace(_InplaceOf, Mul):
    """x <- x * y, with Mul's rules (x before the write as the hidden `original`)."""
    public_name = "mul_"
    aliases = ("multiply_",)

    @classmethod
    def forward(cls, x, other, original=None):
        return cls.write(x, other)

    interface = classmethod(_mul_div_interface)
    vmap = classmethod(_mul_div_rule)


class DivInplace(_InplaceOf, Div):
    """x <- x / y, with Div's rules (x before the write as the hidden `original`)."""
    public_name = "div_"
    aliases = ("divide_", "true_divide_")

    @classmethod
    def forward(cls, x, other, original=None):
        with np.errstate(divide="ignore", invalid="ignore"):
            return cls.write(x, other)

    interface = classmethod(_mul_div_interface)
    vmap = classmethod(_mul_div_rule)


class CopyInplace(ArrayFunction):
    """x <- src broadcast to x's shape and cast to x's dtype;
    grad_x = 0, grad_src = sum_to(grad, src.shape) in src's dtype."""
    sparsity = classmethod(_sparsity.moved)  # sparsity rule: it only moves elements
    curvature = "linear"
    modifies = 0
    public_name = "copy_"
    variants = ("method",)

    @staticmethod
    def forward(x, src, non_blocking=False):
        _check_same_or_broadcast(x.shape, src.shape)
        _check_target(x)
        np.copyto(x, src, casting="unsafe")
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.src_shape = tuple(inputs[1].shape)
        ctx.src_dtype = inputs[1].dtype
        ctx.x_dtype = inputs[0].dtype

    @staticmethod
    def backward(ctx, grad):
        grad_src = None
        if ctx.needs_input_grad[1]:
            grad_src = sum_to(grad, ctx.src_shape)
            if grad_src.dtype != ctx.src_dtype:
                grad_src = grad_src.to(ctx.src_dtype)
        return _zero_grad(ctx, grad), grad_src, None

    @staticmethod
    def jvp(ctx, x_t, src_t, _non_blocking):
        if src_t is None:
            return zeros_like(x_t)
        src_t = src_t if src_t.dtype == ctx.x_dtype else src_t.to(ctx.x_dtype)
        return src_t.expand(x_t.shape) if x_t is not None else src_t

    @classmethod
    def vmap(cls, info, in_dims, x, src, non_blocking=False):
        """Batching rule: write into the physical x (its batch dim stays), src laid out
        like x."""
        xd = _self_dim(in_dims)
        _check_same_or_broadcast(_example_shape(x, xd), _example_shape(src, in_dims[1]))
        return cls.apply(x, _like_self(src, in_dims[1], x, xd), non_blocking), xd

    @classmethod
    def interface(cls, x, src, non_blocking=False):
        if not isinstance(src, Tensor):
            raise TypeError(f"copy_(): argument 'src' (position 1) must be Tensor, not "
                            f"{type(src).__name__}")
        return cls.apply(x, src, non_blocking)


def _check_same_or_broadcast(shape, src_shape):
    """PyTorch's messages when src cannot be broadcast to x's shape."""
    if len(src_shape) > len(shape):
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast "
                           f"shape {list(np.broadcast_shapes(shape, src_shape))}")
    for i in range(1, len(src_shape) + 1):
        if src_shape[-i] not in (1, shape[-i]):
            raise RuntimeError(f"The size of tensor a ({shape[-i]}) must match the size of "
                               f"tensor b ({src_shape[-i]}) at non-singleton dimension "
                               f"{len(shape) - i}")


class ZeroInplace(ArrayFunction):
    """x <- 0;  grad_x = 0."""
    sparsity = classmethod(lambda cls, *args: _sparsity.no_derivative())  # dy/dx = 0
    curvature = "linear"
    modifies = 0
    public_name = "zero_"
    variants = ("method",)

    @staticmethod
    def forward(x):
        _check_target(x)
        x.fill(0)
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        return zeros_like(grad)

    @staticmethod
    def jvp(ctx, x_t):
        return zeros_like(x_t)

    interface = classmethod(_guarded_apply)
    vmap = classmethod(_self_only_rule)


class FillInplace(ArrayFunction):
    """x <- value (a number or 0-d tensor, cast to x's dtype);
    grad_x = 0, grad_value = sum(grad)."""
    sparsity = classmethod(lambda cls, *args: _sparsity.no_derivative())  # dy/dx = 0
    curvature = "linear"
    modifies = 0
    public_name = "fill_"
    variants = ("method",)

    @staticmethod
    def forward(x, value):
        if isinstance(value, np.ndarray) and value.ndim != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor "
                               f"with {value.ndim} dimensions.")
        _check_target(x)
        x[...] = value
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.x_dtype = inputs[0].dtype

    @staticmethod
    def backward(ctx, grad):
        return _zero_grad(ctx, grad), grad.sum() if ctx.needs_input_grad[1] else None

    @staticmethod
    def jvp(ctx, x_t, value_t):
        if value_t is None:
            return zeros_like(x_t)
        value_t = value_t if value_t.dtype == ctx.x_dtype else value_t.to(ctx.x_dtype)
        return value_t.expand(x_t.shape) if x_t is not None else value_t

    @classmethod
    def vmap(cls, info, in_dims, x, value):
        """Batching rule: write into the physical x (its batch dim stays); a batched value
        (one number per example) is copied in, laid out like x."""
        xd = _self_dim(in_dims)
        if in_dims[1] is None:
            return cls.apply(x, value), xd
        if value.ndim != 1:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor "
                               f"with {value.ndim - 1} dimensions.")
        return CopyInplace.apply(x, _like_self(value, in_dims[1], x, xd), False), xd

    interface = classmethod(_guarded_apply)


class ClampInplace(_InplaceOf, Clamp):
    """x <- clamp(x, min, max), with Clamp's rules (x before the write as the hidden
    `original`, which the masks read)."""
    public_name = "clamp_"
    aliases = ("clip_",)

    @classmethod
    def forward(cls, x, min=None, max=None, original=None):  # noqa: A002
        return cls.write(x, min, max)

    @classmethod
    def interface(cls, x, min=None, max=None):
        if not _grad_possible(x, min, max):
            return cls.apply(x, min, max, None)
        lo, hi = _unalias(x, min), _unalias(x, max)
        return cls.apply(x, lo, hi, x.clone())

    @classmethod
    def vmap(cls, info, in_dims, x, min=None, max=None, original=None):
        """Batching rule: write into the physical x (its batch dim stays), the bounds and
        the hidden `original` laid out like x."""
        xd, bounds = _operands_like_self(in_dims, x, (min, max), dtypes.result_type)
        lo, hi = [_unalias(x, b) for b in bounds]
        return cls.apply(x, lo, hi, _like_self(original, in_dims[3], x, xd)), xd


class ExpInplace(_InplaceOf, Exp):
    """x <- exp(x), with Exp's rules (it saves the output: x after the write)."""
    public_name = "exp_"

    @classmethod
    def forward(cls, x, original=None):
        return cls.write(x)

    interface = classmethod(_guarded_apply)
    vmap = classmethod(_self_only_rule)
