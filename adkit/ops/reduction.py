"""Reductions: sum, mean, prod, var, std, amax, amin, logsumexp, norm, and sum_to_size
(the unbroadcast used by every binary op's backward); max/min with indices, argmax and
argmin are in extrema.py.

Owns: each reduction's forward (numpy, over `dim` with `keepdim`) and rules.
Conventions (PyTorch's): `dim` None or () reduces every dim; a 0-d tensor accepts dim 0
or -1 and reduces nothing. Masks in backward rules (ties, zeros) are constants built with
comparisons, so every rule stays differentiable where the function is.
"""
import math
import warnings

import numpy as np

from .. import dtypes
from . import _sparsity
from ._families import Reduction, ShapeOp
from ._helpers import NoDecomposition, as_float_array, normalize_dims
from .binary import Maximum, Minimum

_TORCH_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double", "int32": "Int",
                "int64": "Long", "bool": "Bool"}


def _dims(dim, ndim):
    """Reduced dims as a sorted tuple: None or () -> all; nothing for a 0-d tensor."""
    if dim is None or (not isinstance(dim, (int, np.integer)) and len(dim) == 0):
        return tuple(range(ndim))
    dims = normalize_dims(dim, ndim)
    return dims if ndim else ()


def _reduced_dims(shape, params):
    """The native rule `reduced_dims`: the dims of an input of `shape` that the
    reduction with static arguments `params` combines over (a fused kernel's reduced
    dims)."""
    return _dims(params.get("dim"), len(shape))


def _infer_reduction(cls, x, dim=None, keepdim=False, *rest):
    """Shape/dtype rule for tracing: x's shape without the reduced dims (1s with
    keepdim); the dtype forward gives on one element of each dim (the tracer's default,
    forward on zeros of x's shape, cost a GMM gradient's trace 25-55 ms at ADBench's
    sizes). An empty x runs forward itself, so its errors are forward's. Not for var
    and std: on one element they warn where x may not."""
    if x.size == 0:
        return cls.forward(x, dim, keepdim, *rest)
    one = cls.forward(np.zeros((1,) * x.ndim, x.dtype), dim, keepdim, *rest)
    dims = _dims(dim, x.ndim)
    shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape)
                  if keepdim or d not in dims)
    return np.broadcast_to(np.zeros((), np.asarray(one).dtype), shape)


def _count(shape, dims):
    """Number of elements reduced into each output element."""
    return math.prod(shape[d] for d in dims)


def _save_meta(ctx, x, dim, keepdim):
    ctx.dims = _dims(dim, x.ndim)
    ctx.keepdim = keepdim
    ctx.input_shape = tuple(x.shape)


def _keep(ctx, t):
    """A reduced tensor with the reduced dims re-inserted as size 1 (broadcasts to x)."""
    if ctx.keepdim or not ctx.dims:
        return t
    shape = list(ctx.input_shape)
    for d in ctx.dims:
        shape[d] = 1
    return t.reshape(tuple(shape))


def _to_grad_dtype(grad, dtype):
    return grad if grad.dtype == dtype else grad.to(dtype)


def _require_float(x, message):
    """PyTorch's error for a float-only op; '{}' in message becomes the dtype's name."""
    if x.dtype.kind != "f":
        raise RuntimeError(message.format(_TORCH_NAMES[x.dtype.name]))


def _extreme(name, x, dim, keepdim):
    """amax/amin's forward; PyTorch refuses them over an empty dim."""
    dims = _dims(dim, x.ndim)
    if not all(x.shape[d] for d in dims):
        if dim is None or (not isinstance(dim, (int, np.integer)) and len(dim) == 0):
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                               "input.numel() == 0. Specify the reduction dim with the "
                               "'dim' argument.")
        bad = next(d for d in dims if x.shape[d] == 0)
        raise IndexError(f"{name}(): Expected reduction dim {bad} to have non-zero size.")
    return np.asarray(getattr(x, name[1:])(axis=dims, keepdims=keepdim))  # x.max, x.min


class Sum(Reduction):
    """y = sum of x over dim;  grad_x = grad_out broadcast back over the reduced dims."""
    curvature = "linear"
    public_name = "sum"
    averages = False  # Mean shares these rules, with a factor 1/n
    # native code: a fused kernel adds the values up as it makes them (a mean then
    # scales the sums by 1/n: `averages`)
    native_reduction = "sum"
    reduced_dims = staticmethod(_reduced_dims)
    infer = classmethod(_infer_reduction)

    @staticmethod
    def forward(x, dim=None, keepdim=False, dtype=None):
        dims = _dims(dim, x.ndim)
        if dtype is not None:
            x = x.astype(dtypes.to_dtype(dtype).np, copy=False)
        elif x.dtype.kind in "bi":
            return x.sum(axis=dims, keepdims=keepdim, dtype=np.int64)
        return np.asarray(x.sum(axis=dims, keepdims=keepdim))

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save_meta(ctx, inputs[0], inputs[1], inputs[2])
        ctx.input_dtype = inputs[0].dtype

    @staticmethod
    def backward(ctx, grad_out):
        grad = Reduction.grad_to_input(ctx, grad_out)
        if ctx._forward_cls.averages:
            grad = grad / _count(ctx.input_shape, ctx.dims)
        return _to_grad_dtype(grad, ctx.input_dtype), None, None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _keepdim, dtype):
        return getattr(x_t, ctx._forward_cls.public_name)(ctx.dims, ctx.keepdim, dtype=dtype)


class SumToSize(ShapeOp):
    """y = x summed down to `shape` (the inverse of broadcasting x from shape);
    grad_x = grad_out expanded to x's shape."""
    sparsity = classmethod(lambda cls, x, shape: _sparsity.summed_to(x, shape))
    curvature = "linear"
    public_name = "sum_to_size"
    variants = ("method",)
    native_reduction = "sum"  # inside a fused kernel (see Sum)

    @staticmethod
    def reduced_dims(x_shape, params):
        """The native rule (see reduction._reduced_dims): the dims summed away."""
        return SumToSize.summed_dims(x_shape, tuple(params["shape"]))

    @staticmethod
    def summed_dims(x_shape, shape):
        """The dims of x_shape summed to reach shape; PyTorch's error if it cannot."""
        lead = len(x_shape) - len(shape)
        if lead < 0 or any(s != 1 and s != n for s, n in zip(shape, x_shape[lead:])):
            raise RuntimeError(f"size {list(shape)} is not expandable to size "
                               f"{list(x_shape)}")
        return tuple(range(lead)) + tuple(
            lead + i for i, s in enumerate(shape) if s == 1 and x_shape[lead + i] != 1)

    @staticmethod
    def infer(x, shape):
        """Shape/dtype rule for tracing: `shape`, with forward's dtype (a sum of bools
        or ints is int64), without summing (see _infer_reduction)."""
        dims = SumToSize.summed_dims(x.shape, tuple(shape))
        dtype = np.zeros(1, x.dtype).sum().dtype if dims else x.dtype
        return np.broadcast_to(np.zeros((), dtype), tuple(shape))

    @staticmethod
    def forward(x, shape):
        shape = tuple(shape)
        dims = SumToSize.summed_dims(x.shape, shape)
        return x.sum(axis=dims).reshape(shape) if dims else x.copy()

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.expand(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, _):
        return x_t.sum_to_size(ctx.output_shape)

    @classmethod
    def vmap(cls, info, in_dims, x, shape):
        """Batching rule: batch dim to the front and kept in the target shape (the
        per-example leading dims summed away become 1s, then are dropped)."""
        x = x.movedim(in_dims[0], 0)
        shape = tuple(shape)
        lead = x.ndim - 1 - len(shape)
        cls.summed_dims(tuple(x.shape[1:]), shape)  # the per-example check
        out = cls.apply(x, tuple(x.shape[:1]) + (1,) * lead + shape)
        return (out.reshape(tuple(x.shape[:1]) + shape) if lead else out), 0

    @classmethod
    def interface(cls, x, *size):
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = size[0]
        return cls.apply(x, tuple(int(s) for s in size))


class Mean(Sum):
    """y = sum(x) / n over dim (n elements reduced);  grad_x = grad_out / n, broadcast."""
    public_name = "mean"
    averages = True

    @staticmethod
    def forward(x, dim=None, keepdim=False, dtype=None):
        if dtype is not None:
            x = x.astype(dtypes.to_dtype(dtype).np, copy=False)
        else:
            _require_float(x, "mean(): could not infer output dtype. Input dtype must be "
                              "either a floating point or complex dtype. Got: {}")
        dims = _dims(dim, x.ndim)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(x.sum(axis=dims, keepdims=keepdim) / _count(x.shape, dims))


class _Smooth(Reduction):
    """Reductions given by their derivative dy/dx (`derivative(ctx)`: adkit ops, shaped
    like x; None means zero). Then
    backward: grad_x = grad_out (reduced dims re-inserted) * dy/dx;
    jvp:      y_t = sum over dim of x_t * dy/dx."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save_meta(ctx, inputs[0], inputs[1], inputs[2])
        ctx.save_for_backward(inputs[0], output)

    @staticmethod
    def derivative(ctx):
        raise NotImplementedError(f"{ctx._forward_cls.__name__} has no derivative rule")

    @staticmethod
    def backward(ctx, grad_out):
        x, _ = ctx.saved_tensors
        d = ctx._forward_cls.derivative(ctx)
        grad = None if d is None else _to_grad_dtype(_keep(ctx, grad_out) * d, x.dtype)
        return (grad,) + (None,) * (len(ctx.needs_input_grad) - 1)

    @staticmethod
    def jvp(ctx, x_t, *_static):
        _, out = ctx.saved_tensors
        d = ctx._forward_cls.derivative(ctx)
        if d is None:
            return out * 0
        out_t = (x_t * d).sum(ctx.dims, ctx.keepdim)
        return _to_grad_dtype(out_t, out.dtype)


def _prod_others(x, dims):
    """prod_{j != i} x_j within each reduced group, without dividing by zero.
    z marks the zeros; safe = x + z has none, so P / safe_i (P = prod(safe)) is the
    product of the other nonzeros. A group with one zero x_k needs a further factor x_k
    for i != k and 1 for i == k: q = 1 + sum(w) - w with w = x * z - z, which is linear
    in x_k, so first and second derivatives come out right too. Groups with two or more
    zeros give 0."""
    z = x.eq(0).to(x.dtype)
    safe = x + z
    total = safe.prod(dims, keepdim=True)
    zeros = z.sum(dims, keepdim=True)
    w = x * z  # the zero entries themselves (value 0, derivative 1)
    q = w.sum(dims, keepdim=True) - w + 1 - zeros + z
    at_most_one = zeros.eq(0).to(x.dtype) + zeros.eq(1).to(x.dtype)
    return total / safe * q * at_most_one


class Prod(_Smooth):
    """y = prod of x over dim;  dy/dx_i = prod_{j != i} x_j (exact with zeros in x; see
    _prod_others)."""
    public_name = "prod"
    native_reduction = "prod"  # inside a fused kernel (see Sum)
    reduced_dims = staticmethod(_reduced_dims)
    infer = classmethod(_infer_reduction)

    @staticmethod
    def forward(x, dim=None, keepdim=False, dtype=None):
        dims = _dims(dim, x.ndim)
        if dtype is not None:
            x = x.astype(dtypes.to_dtype(dtype).np, copy=False)
        elif x.dtype.kind in "bi":
            return x.prod(axis=dims, keepdims=keepdim, dtype=np.int64)
        return np.asarray(x.prod(axis=dims, keepdims=keepdim))

    @staticmethod
    def derivative(ctx):
        x, _ = ctx.saved_tensors
        return _prod_others(x, ctx.dims)


def _variance(x, dims, keepdim, correction):
    _require_float(x, "std and var only support floating point and complex dtypes")
    n = _count(x.shape, dims)
    if n - correction <= 0:
        warnings.warn("var(): degrees of freedom is <= 0. Correction should be strictly "
                      "less than the reduction factor (input numel divided by output "
                      "numel).", UserWarning, stacklevel=4)
    with np.errstate(invalid="ignore", divide="ignore"):
        centered = x - x.sum(axis=dims, keepdims=True) / n
        squares = (centered * centered).sum(axis=dims, keepdims=keepdim)
        return np.asarray(squares / max(0, n - correction))


class _Spread(_Smooth):
    """var/std: forward(x, dim, keepdim, correction); public calls also take PyTorch's
    older `unbiased` flag, positionally (var(x, unbiased), var(x, dim, unbiased,
    keepdim)) or by keyword."""

    @staticmethod
    def centered(ctx):
        """(x - mean(x)) / (n - correction), half the derivative of var."""
        x, _ = ctx.saved_tensors
        denom = max(0, _count(ctx.input_shape, ctx.dims) - ctx.correction)
        return (x - x.mean(ctx.dims, keepdim=True)) * (1.0 / denom if denom else math.inf)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _Smooth.setup_context(ctx, inputs, output)
        ctx.correction = inputs[3]

    @classmethod
    def interface(cls, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        if correction is None:
            correction = 1 if unbiased is None else int(bool(unbiased))
        elif unbiased is not None:
            raise RuntimeError("Cannot specify both unbiased and correction")
        return cls.apply(x, dim, keepdim, correction)


def _dims_of(x, dim):
    """The dims a decomposition reduces (of a traced x), sorted."""
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return tuple(range(x.ndim))
    return tuple(sorted({d % x.ndim for d in ((dim,) if isinstance(dim, int) else dim)}))


def _variance_ops(x, dim=None, keepdim=False, correction=1):
    """var's decomposition: sum((x - mean)^2) / (n - correction) in primitive ops, as
    the forward computes it."""
    dims = _dims_of(x, dim)
    n = int(np.prod([x.shape[d] for d in dims]))
    if x.ndim == 0 or n - correction <= 0:  # numpy's path warns: keep it
        raise NoDecomposition
    centered = x - x.sum(dims, keepdim=True) / n
    return (centered * centered).sum(dims, keepdim=keepdim) / (n - correction)


class Var(_Spread):
    """y = sum((x - mean(x))^2) / (n - correction);
    dy/dx = 2 (x - mean(x)) / (n - correction)."""
    public_name = "var"
    decomposition = staticmethod(_variance_ops)  # for fusion (ir/passes/decompose.py)

    @staticmethod
    def forward(x, dim=None, keepdim=False, correction=1):
        return _variance(x, _dims(dim, x.ndim), keepdim, correction)

    @staticmethod
    def derivative(ctx):
        return _Spread.centered(ctx) * 2


class Std(_Spread):
    """y = sqrt(var(x));  dy/dx = (x - mean(x)) / ((n - correction) y)."""
    public_name = "std"

    @staticmethod
    def decomposition(x, dim=None, keepdim=False, correction=1):
        """For fusion: sqrt of var's decomposition."""
        return _variance_ops(x, dim, keepdim, correction).sqrt()

    @staticmethod
    def forward(x, dim=None, keepdim=False, correction=1):
        return np.sqrt(_variance(x, _dims(dim, x.ndim), keepdim, correction))

    @staticmethod
    def derivative(ctx):
        _, out = ctx.saved_tensors
        return _Spread.centered(ctx) / _keep(ctx, out)


class _Extremum(_Smooth):
    """amax/amin: y = max (min) of x over dim. The gradient is split evenly among the
    elements equal to y (ties), as in PyTorch: dy/dx = [x == y] / count(x == y)."""
    reduced_dims = staticmethod(_reduced_dims)  # native: see Sum
    infer = classmethod(_infer_reduction)

    @staticmethod
    def derivative(ctx):
        x, out = ctx.saved_tensors
        mask = x.eq(_keep(ctx, out)).to(x.dtype)
        return mask / mask.sum(ctx.dims, keepdim=True)


class Amax(_Extremum):
    __doc__ = _Extremum.__doc__
    public_name = "amax"
    native_reduction = "max"  # inside a fused kernel (see Sum); NaN wins, as in numpy

    @staticmethod
    def forward(x, dim=None, keepdim=False):
        return _extreme("amax", x, dim, keepdim)


class Amin(_Extremum):
    __doc__ = _Extremum.__doc__
    public_name = "amin"
    native_reduction = "min"  # inside a fused kernel (see Sum); NaN wins, as in numpy

    @staticmethod
    def forward(x, dim=None, keepdim=False):
        return _extreme("amin", x, dim, keepdim)


class _ExtremumOfAll(_Extremum):
    """max(x)/min(x) over every element: as amax/amin, except that a NaN result sends
    the gradient evenly to the NaN elements (PyTorch's evenly_distribute_backward; amax
    gives NaN there): dy/dx = m / count(m), m = [x == y or (x and y are NaN)]."""

    @staticmethod
    def derivative(ctx):
        x, out = ctx.saved_tensors
        y = _keep(ctx, out)
        mask = (x.eq(y) | (x.isnan() & y.isnan())).to(x.dtype)
        return mask / mask.sum(ctx.dims, keepdim=True)


class MaxOfAll(_ExtremumOfAll):
    __doc__ = _ExtremumOfAll.__doc__
    native_reduction = "max"

    @staticmethod
    def forward(x, dim=None, keepdim=False):
        return _extreme("amax", x, dim, keepdim)


class MinOfAll(_ExtremumOfAll):
    __doc__ = _ExtremumOfAll.__doc__
    native_reduction = "min"

    @staticmethod
    def forward(x, dim=None, keepdim=False):
        return _extreme("amin", x, dim, keepdim)


class Logsumexp(_Smooth):
    """y = log(sum(exp(x))) over dim, computed as m + log(sum(exp(x - m))) with m the
    (finite) max;  dy/dx = exp(x - y)."""
    public_name = "logsumexp"
    infer = classmethod(_infer_reduction)

    @staticmethod
    def decomposition(x, dim, keepdim=False):
        """For fusion: m + log(sum(exp(x - m))) in primitive ops, m the max clamped to the
        finite range: a row of -inf gives -inf and one with +inf gives +inf, as the
        forward (which shifts by 0 there) does; NaN stays NaN."""
        big = float(np.finfo(x.dtype.np).max)
        m = Minimum.apply(Maximum.apply(x.amax(dim, keepdim=True), -big), big)
        out = (x - m).exp().sum(dim, keepdim=True).log() + m
        if keepdim:
            return out
        dims = {d % x.ndim for d in ((dim,) if isinstance(dim, int) else dim)} \
            if x.ndim else ()
        return out.reshape(tuple(n for i, n in enumerate(out.shape) if i not in dims))

    @staticmethod
    def forward(x, dim, keepdim=False):
        x = as_float_array(x)
        dims = _dims(dim, x.ndim)
        m = x.max(axis=dims, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0)  # all -inf (or an inf) in a group: no shift
        with np.errstate(divide="ignore"):
            out = np.log(np.exp(x - m).sum(axis=dims, keepdims=True)) + m
        return out if keepdim else out.reshape(
            [n for i, n in enumerate(x.shape) if i not in dims])

    @staticmethod
    def derivative(ctx):
        x, out = ctx.saved_tensors
        return (x - _keep(ctx, out)).exp()


def _vector_norm(x, dims, keepdim, p):
    a = np.abs(x)
    if p == 2:
        return np.sqrt((x * x).sum(axis=dims, keepdims=keepdim))
    if p == 1:
        return a.sum(axis=dims, keepdims=keepdim)
    if p == math.inf:
        return a.max(axis=dims, keepdims=keepdim, initial=0)
    if p == -math.inf:
        return a.min(axis=dims, keepdims=keepdim, initial=math.inf)
    if p == 0:
        return (a != 0).sum(axis=dims, keepdims=keepdim).astype(x.dtype)
    with np.errstate(divide="ignore"):
        return (a ** p).sum(axis=dims, keepdims=keepdim) ** (1.0 / p)


class Norm(_Smooth):
    """y = (sum |x|^p)^(1/p) over dim (p = inf: max |x|, -inf: min |x|, 0: count of
    nonzeros);  dy/dx = sign(x) |x|^(p-1) / y^(p-1) (p = 2: x / y; +-inf:
    sign(x) [|x| == y] / count; 0: zero), taken as 0 where y == 0 and, for p < 1,
    where x == 0, as in PyTorch."""
    public_name = "norm"

    @staticmethod
    def decomposition(x, dim=None, keepdim=False, p=2.0):
        """For fusion: p = 2: sqrt(sum(x * x)); p = 1: sum(|x|) (other orders stay one
        node)."""
        if x.ndim == 0 or p not in (1, 2):
            raise NoDecomposition
        dims = _dims_of(x, dim)
        return (x * x).sum(dims, keepdim=keepdim).sqrt() if p == 2 else \
            x.abs().sum(dims, keepdim=keepdim)

    @staticmethod
    def forward(x, dim=None, keepdim=False, p=2.0):
        _require_float(x, "linalg.vector_norm: Expected a floating point or complex tensor "
                          "as input. Got {}")
        return np.asarray(_vector_norm(x, _dims(dim, x.ndim), keepdim, p))

    @staticmethod
    def setup_context(ctx, inputs, output):
        _Smooth.setup_context(ctx, inputs, output)
        ctx.p = inputs[3]

    @staticmethod
    def derivative(ctx):
        x, out = ctx.saved_tensors
        p, y = ctx.p, _keep(ctx, out)
        if p == 0:
            return None
        if p == 1:
            return x.sign()
        if p in (math.inf, -math.inf):
            mask = x.abs().eq(y).to(x.dtype)
            return x.sign() * mask / mask.sum(ctx.dims, keepdim=True)
        safe_y = y + y.eq(0).to(y.dtype)  # y == 0 only if x == 0 there: gradient 0
        if p == 2:
            return x / safe_y
        if p < 1:
            a = x.abs()
            return x.sign() * (a + a.eq(0).to(a.dtype)) ** (p - 1) * y ** (1 - p)
        return x.sign() * x.abs() ** (p - 1) / safe_y ** (p - 1)

    @classmethod
    def interface(cls, x, p="fro", dim=None, keepdim=False, dtype=None):
        if isinstance(p, str):
            if p != "fro":
                raise RuntimeError(f"linalg.matrix_norm: Order {p} not supported.")
            if dim is not None and not isinstance(dim, (int, np.integer)) and len(dim) > 2:
                raise RuntimeError("linalg.matrix_norm: dim must be a 2-tuple. Got " +
                                   " ".join(str(d) for d in dim))
            p = 2
        if dtype is not None:
            x = x.to(dtype)
        return cls.apply(x, dim, keepdim, float(p))
