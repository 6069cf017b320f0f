"""One level of family bases for built-in ops, plus `public` for irregular signatures.

Owns: `ArrayFunction` (forward on ndarrays), `UnaryElementwise`, `BinaryElementwise`,
`Reduction`: each turns one per-op formula into backward and jvp. Does not: hold any
op's math. A built-in op declares `public_name` (ak.NAME) and `variants` ("function",
"method"); `ops/__init__.py` binds them. Zero gradients are explicit `None` returns.
"""
import numpy as np

from ..autograd._fastpath import Recipe
from ..autograd.function import Function
from ..tensor import Tensor
from . import _sparsity
from ._helpers import normalize_dims


# `native_cost` of an op whose lowering calls a math library function (sin, tanh, pow,
# erf...): ns per element on the 2-core development machine, for the thread cost model
# of codegen/plan.py (exp and log are cheaper, plain arithmetic much cheaper: ops
# without a native_cost cost plan.NS_PER_STEP)
MATH_CALL_NS = 1.2


class ArrayFunction(Function):
    """A built-in op: `forward` receives ndarrays (and static params) and returns
    ndarrays; `setup_context(ctx, inputs, output)` sees tensors.

    Native rules (what `ak.jit` may compile an op to) live on the op's class too, so a
    new op reaches native code through its class alone: `decomposition` (its forward in
    primitive ops, inlined before fusion), `lower(b, *args)` (its scalar arithmetic in
    a fused kernel), `native_reduction` and `reduced_dims` (a reduction a kernel
    combines), `native_contraction` (a matmul a kernel computes inline),
    `native_broadcast` (a kernel reads its input in its place), `native_gemm` (BLAS),
    `native_view` (its results are views: strides into its input), `native_copy` (a
    strided copy loop; with `native_parts_in_place`, its pieces depend on shapes alone
    and each input lands whole, so the kernel making an input may write it in place),
    `native_moves` (index tables), `native_index` (a gather or
    scatter at index tensors, bounds checked: see _indexed.py) and `native_cost` (ns
    per element, for the thread cost model); an in-place op's `traced_out_of_place`
    names the op tracing records when nobody else sees its write. Each is documented
    where it is defined; passes and codegen find them by attribute (`ops.with_rule`),
    never by op name."""

    _arrays_in = True
    public_name = None
    variants = ("function", "method")
    aliases = ()
    # sparsity(*args): which input elements each result element reads (see
    # ops/_sparsity.py); None: unknown, so the sparsity pass assumes all of them.
    # curvature: "linear", "bilinear" or "nonlinear", for the Hessian sparsity pass
    sparsity = None
    curvature = "nonlinear"

    @classmethod
    def interface(cls, *args, **kwargs):
        """The public call; ops with irregular signatures (varargs shapes...) override."""
        return cls.apply(*args, **kwargs)

    @classmethod
    def native_view(cls, *args):
        """The results of forward(*args) as numpy makes them when they are views of the
        tensor argument (a probe array laid out like the compiled value), else None.
        Compiled code then reads each result through its strides into the input's
        memory, copying nothing. A view op's forward is its own rule here."""
        if not cls.is_view or cls.modifies is not None:
            return None
        return cls.forward(*args)


def public(name, variants=("function", "method")):
    """Register a plain function as `ak.name` and/or `Tensor.name` (for public calls that
    choose between several Functions, e.g. `max`)."""
    def register(fn):
        fn.public = (name, variants)
        return fn
    return register


class UnaryElementwise(ArrayFunction):
    """y = f(x) elementwise. Subclasses give `forward(x)` (numpy) and
    `derivative(x, out)` (adkit ops, so differentiable): then
    backward: grad_x = grad_out * f'(x);   jvp: out_t = x_t * f'(x).
    `derivative` returning None means the op has zero derivative (floor, sign...).
    `saves` names what derivative reads ("x", "out"); the rest arrives as None. Saving
    only that keeps in-place changes of the rest legal, as in PyTorch."""

    saves = ("x", "out")
    # the numpy ufunc forward applies to a floating array (forward(x) is then ufunc(x),
    # a new array of x's dtype), which the eager fast path calls directly; None: it
    # calls forward
    ufunc = None
    # derivative(x, out) on ndarrays (x, out: float arrays of one dtype, None where not
    # saved): the same values, through the same numpy ufuncs (so the same warnings);
    # backward without create_graph computes with it on the tensors' arrays. None:
    # derivative, on tensors. An operators-only derivative is its own: `array_rule =
    # derivative`.
    array_rule = None

    # linear when derivative(x, out) is a constant, else nonlinear
    curvature = _sparsity.CurvatureOfFormula("derivative", 1)

    @classmethod
    def sparsity(cls, *args):
        """Sparsity rule: result element k reads x[k] (ops/_sparsity.py)."""
        return _sparsity.elementwise(args)

    @classmethod
    def infer(cls, x):
        """Shape/dtype rule for tracing: x's shape; the dtype forward gives on one element."""
        return _spec_array(cls.forward(_tiny(x)), x.shape)

    @classmethod
    def vmap(cls, info, in_dims, x):
        """Batching rule: elementwise, so the batch dim stays where it is."""
        return cls.apply(x), in_dims[0]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._saves_x, cls._saves_out = "x" in cls.saves, "out" in cls.saves

    @classmethod
    def eager_recipe(cls):
        """What the generated eager fast path of this op needs (autograd/_fastpath.py),
        or None when the op records otherwise (its own setup_context)."""
        if not cls._plain_arrays or cls.setup_context is not UnaryElementwise.setup_context:
            return None
        rule = cls.derivative if _family_backward(cls, UnaryElementwise) else None
        return Recipe(1, _declared(cls, "forward", "ufunc"), bool(cls.saves), cls._saves_x,
                      cls._saves_out, None, rule,
                      rule and _declared(cls, "derivative", "array_rule"))

    @staticmethod
    def setup_context(ctx, inputs, output):
        cls = ctx._forward_cls
        if cls.saves:  # NB: to_save set directly: known to be tensors
            ctx.to_save = (inputs[0] if cls._saves_x else None,
                           output if cls._saves_out else None)

    @staticmethod
    def derivative(x, out):
        raise NotImplementedError("UnaryElementwise subclasses define derivative(x, out)")

    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors or (None, None)
        d = ctx._forward_cls.derivative(x, out)
        return None if d is None else grad_out * d

    @staticmethod
    def jvp(ctx, x_t):
        x, out = ctx.saved_tensors or (None, None)
        d = ctx._forward_cls.derivative(x, out)
        return x_t * 0 if d is None else x_t * d


class BinaryElementwise(ArrayFunction):
    """z = f(x, y) elementwise with numpy broadcasting; x or y may be a Python number.
    Subclasses give `forward(x, y)` and `partials(x, y, out) -> (dz/dx, dz/dy)`, each a
    tensor, a number, or None (zero). Then
    backward: grad_x = sum_to(grad_out * dz/dx, x.shape), likewise y;
    jvp:      out_t = dz/dx * x_t + dz/dy * y_t.
    `saves` names what partials read ("x", "y", "out"); unsaved tensors arrive as None
    (a Python-number operand arrives as itself, unless `saves` is empty). `only_for_other` names the
    operands read only by the other operand's partial (mul: dz/dy = x): beside a Python
    number, which has no derivative, such an operand is not saved, as in PyTorch (so
    writing it in place later is no error)."""

    saves = ("x", "y", "out")
    only_for_other = ()
    # the numpy ufunc forward applies to floating operands of one dtype (tensors of it,
    # Python numbers): forward(x, y) is then ufunc(x, y), a new array of that dtype
    # (see UnaryElementwise.ufunc)
    ufunc = None
    # partials(x, y, out) on ndarrays (saved operands as float arrays of one dtype,
    # Python numbers as they are, None where not saved), an ndarray wherever partials
    # gives a tensor (see UnaryElementwise.array_rule)
    array_rule = None
    ctx_defaults = {"constants": (None, None)}  # set only when an operand is a number

    # from partials(x, y, out): constants (add) linear, (y, x) (mul) bilinear
    curvature = _sparsity.CurvatureOfFormula("partials", 2)

    @classmethod
    def sparsity(cls, *args):
        """Sparsity rule: result element k reads the elements broadcast to k."""
        return _sparsity.elementwise(args)

    @classmethod
    def infer(cls, x, y):
        """Shape/dtype rule for tracing: the broadcast shape; the dtype forward gives on
        one element of each (0-d stays 0-d: PyTorch's promotion treats it differently)."""
        x_shape, y_shape = np.shape(x), np.shape(y)
        try:
            shape = np.broadcast_shapes(x_shape, y_shape)
        except ValueError:
            raise ValueError(f"operands could not be broadcast together with shapes "
                             f"{x_shape} {y_shape}") from None
        return _spec_array(cls.forward(_tiny(x), _tiny(y)), shape)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._keep = _keep_table(cls.saves, cls.only_for_other)
        cls._saves_out = "out" in cls.saves

    @classmethod
    def eager_recipe(cls):
        """See UnaryElementwise.eager_recipe."""
        if not cls._plain_arrays or \
                cls.setup_context is not BinaryElementwise.setup_context:
            return None
        rule = cls.partials if _family_backward(cls, BinaryElementwise) else None
        return Recipe(2, _declared(cls, "forward", "ufunc"), bool(cls.saves), None,
                      cls._saves_out, cls._keep, rule,
                      rule and _declared(cls, "partials", "array_rule"))

    @staticmethod
    def setup_context(ctx, inputs, output):
        """Save an operand only when a gradient that reads it is needed, as PyTorch
        does (so writing the other operand in place later is no error); keep Python
        numbers as constants. to_save is (x, y), or (x, y, out) when partials read out."""
        cls = ctx._forward_cls
        if not cls.saves:  # partials read nothing (add, sub): numbers included
            return
        x, y = inputs
        x_tensor, y_tensor = isinstance(x, Tensor), isinstance(y, Tensor)
        if not (x_tensor and y_tensor):
            ctx.constants = (None if x_tensor else x, None if y_tensor else y)
        needs = ctx.needs_input_grad  # (an in-place op's has a third, hidden input)
        keep_x, keep_y = cls._keep[needs[0]][needs[1]]
        x = x if keep_x and x_tensor else None
        y = y if keep_y and y_tensor else None
        if cls._saves_out:
            ctx.to_save = (x, y, output)
        elif x is not None or y is not None:
            ctx.to_save = (x, y)

    @staticmethod
    def partials(x, y, out):
        raise NotImplementedError("BinaryElementwise subclasses define partials(x, y, out)")

    @classmethod
    def vmap(cls, info, in_dims, x, y):
        """Batching rule: batch dims to the front, per-example dims padded to a common
        rank (so broadcasting lines up), then the dtype the per-example op would give."""
        logical = [_logical(a, d) for a, d in zip((x, y), in_dims)]
        xb, yb = align_batched((x, y), in_dims)
        out = cls.apply(xb, yb)
        want = cls.infer(*logical).dtype
        return (out if out._data.dtype == want else out.to(want)), 0

    @staticmethod
    def backward(ctx, grad_out):
        """NB: a gradient broadcast to the output's shape is summed back to its input's
        by the engine (PyTorch's validate_outputs does the same)."""
        needs = ctx.needs_input_grad
        dx, dy = ctx._forward_cls.partials(*_operands(ctx))
        return (_scale(grad_out, dx) if needs[0] else None,
                _scale(grad_out, dy) if needs[1] else None)

    @staticmethod
    def jvp(ctx, x_t, y_t):
        dx, dy = ctx._forward_cls.partials(*_operands(ctx))
        out_shape = ctx._output_meta[0][0]
        terms = [_scale(t, d) for t, d in ((x_t, dx), (y_t, dy)) if t is not None]
        terms = [t for t in terms if t is not None]
        if not terms:
            return None
        total = terms[0] if len(terms) == 1 else terms[0] + terms[1]
        return total.expand(out_shape) if total._data.shape != out_shape else total


def _declared(cls, method, attribute):
    """`attribute` as declared by the class that defines cls's `method` (None if it
    does not): a subclass that redefines forward does not inherit its parent's ufunc,
    nor one that redefines its rule the parent's array_rule."""
    for klass in cls.__mro__:
        if method in vars(klass):
            value = vars(klass).get(attribute)
            return value.__func__ if isinstance(value, staticmethod) else value
    return None


def _family_backward(cls, family):
    """Whether cls's backward is its family's (no backward or vjp of its own)."""
    return cls.backward is family.backward and cls.vjp is Function.vjp


def _keep_table(saves, only_for_other):
    """keep[need_x][need_y] = (save x?, save y?) for a binary op: an operand is saved
    when a gradient that reads it is needed (one `only_for_other` is read by the other
    operand's partial alone; any other saved one, conservatively, by both)."""
    def keep(name, need_own, need_other):
        if name not in saves:
            return False
        return need_other or (need_own and name not in only_for_other)
    return tuple(tuple((keep("x", need_x, need_y), keep("y", need_y, need_x))
                       for need_y in (False, True)) for need_x in (False, True))


def _operands(ctx):
    """(x, y, out) as a binary op's partials read them: the saved tensors, the Python
    numbers among the operands, None for the rest."""
    x, y = ctx.constants
    saved = ctx.saved_tensors
    if not saved:
        return x, y, None
    if saved[0] is not None:
        x = saved[0]
    if saved[1] is not None:
        y = saved[1]
    return x, y, (saved[2] if len(saved) == 3 else None)


def align_batched(args, in_dims):
    """Tensors batched along in_dims, with the batch dim moved to the front and their
    per-example dims padded with 1s to the largest per-example rank, so that numpy
    broadcasting matches the per-example op. Unbatched arguments are left as they are."""
    rank = max((np.ndim(a) - (d is not None) for a, d in zip(args, in_dims)), default=0)
    result = []
    for a, d in zip(args, in_dims):
        if d is not None:
            a = a.movedim(d, 0)
            extra = rank - (a.ndim - 1)
            if extra:
                a = a.reshape((a.shape[0],) + (1,) * extra + tuple(a.shape[1:]))
        result.append(a)
    return result


def _logical(a, d):
    """A zero-cost stand-in for one example of a (possibly batched) argument."""
    if not isinstance(a, Tensor):
        return a
    shape = tuple(a.shape)
    if d is not None:
        shape = shape[:d] + shape[d + 1:]
    return np.broadcast_to(np.zeros((), a._data.dtype), shape)


def _tiny(x):
    """A one-element stand-in for an array argument (numbers pass through)."""
    if isinstance(x, np.ndarray):
        return np.zeros((1,) * min(x.ndim, 1), x.dtype)
    return x


def _spec_array(result, shape):
    """A zero-cost array with `shape` and the dtype of `result` (strides 0 over one
    element: ndarray's constructor costs a third of np.broadcast_to's)."""
    dtype = np.asarray(result).dtype
    return np.ndarray(shape, dtype, np.zeros(1, dtype), 0, (0,) * len(shape))


def _unbroadcast(grad, shape):
    """sum_to(grad, shape), skipping the op when the shape already matches."""
    if grad is None or grad._data.shape == shape:
        return grad
    return grad.sum_to_size(shape)


def _scale(t, d):
    """t * d, skipping the multiplication for the constants 1 and -1 and None (zero)."""
    if isinstance(d, Tensor):
        return t * d
    if d is None:
        return None
    if d == 1:
        return t
    if d == -1:
        return -t
    return t * d


class ShapeOp(ArrayFunction):
    """Ops that rearrange or broadcast values (reshape, expand, sum_to_size...): their
    rules need only the input and output shapes, which setup_context records."""

    curvature = "linear"

    @classmethod
    def sparsity(cls, *args):
        """Sparsity rule: forward on numbered elements shows where each one goes."""
        return _sparsity.moved(cls, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)
        ctx.output_shape = tuple(output.shape)


class Reduction(ArrayFunction):
    """y = reduce(x, dim, keepdim). Subclasses give `forward(x, dim=None,
    keepdim=False)` and `backward`; the family supplies the metadata every reduction
    keeps (`ctx.dims`, `ctx.keepdim`, input shape) in `setup_context`."""

    @classmethod
    def sparsity(cls, x, dim=None, keepdim=False, *rest):
        """Sparsity rule: a result element reads the elements reduced into it."""
        return _sparsity.reduced(x, dim, keepdim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, keepdim = inputs[0], inputs[1], inputs[2]
        ctx.dims = normalize_dims(dim, x.ndim)
        ctx.keepdim = keepdim
        ctx.input_shape = tuple(x.shape)
        ctx.save_for_backward(x, output)

    @classmethod
    def vmap(cls, info, in_dims, x, dim=None, keepdim=False, *rest):
        """Batching rule: batch dim to the front, reduced dims shifted past it."""
        if any(d is not None for d in in_dims[1:]):
            raise RuntimeError(f"vmap: {cls.__name__} cannot batch over a non-tensor argument")
        x = x.movedim(in_dims[0], 0)
        ndim = x.ndim - 1
        if ndim == 0:  # a per-example scalar: reduce a size-1 dim (() would mean "all")
            normalize_dims(dim, 0)  # still reject an out-of-range dim, as PyTorch does
            return cls.apply(x.reshape((x.shape[0], 1)), (1,), False, *rest), 0
        dims = tuple(range(ndim)) if dim is None or dim == () else normalize_dims(dim, ndim)
        return cls.apply(x, tuple(d + 1 for d in dims), keepdim, *rest), 0

    @staticmethod
    def grad_to_input(ctx, grad):
        """Bring a gradient of the reduced output back to the input's shape:
        re-insert the reduced dims (if not keepdim), then broadcast."""
        if not ctx.keepdim:
            shape = list(ctx.input_shape)
            for d in ctx.dims:
                shape[d] = 1
            grad = grad.reshape(tuple(shape))
        return grad.expand(ctx.input_shape)
