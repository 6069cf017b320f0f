"""The generated eager fast paths (autograd/_fastpath.py) do what the general path does:
each covered op, entered every way (apply, operator, reflected operator, method) on
every kind of operand, makes the same output and records the same node (edges,
needs_input_grad, saved values, constants, output metadata) as `_eager.apply_unary` /
`apply_binary`; calls the fast path does not take (ints, bools, mixed dtypes, numpy
scalars, anomaly mode, saved-tensor hooks) still work. And the `ufunc` an op declares
is what its forward computes on floating operands."""
import warnings

import numpy as np
import pytest

import adkit as ak
from adkit.autograd import _eager
from adkit.ops import ALL_CLASSES, FUNCTIONS, METHODS
from adkit.tensor import Tensor

COVERED = [cls for cls in ALL_CLASSES
           if getattr(cls, "eager_recipe", None) and cls.eager_recipe() is not None]
UNARY = [c for c in COVERED if c.eager_recipe().arity == 1]
BINARY = [c for c in COVERED if c.eager_recipe().arity == 2]
FLOATS = (np.float16, np.float32, np.float64)


def test_the_common_ops_are_covered():
    names = {c.public_name for c in COVERED}
    assert {"add", "sub", "mul", "div", "sin", "exp", "neg", "log"} <= names


def _values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.2, 0.9, shape).astype(dtype)  # inside every op's domain


def _leaf(arr, requires):
    return ak.tensor(arr.copy(), requires_grad=requires)


def _nonleaf(arr):
    return _leaf(arr, True) * 1.0


def _same_node(fast, slow):
    """Compare what the two paths recorded (None when nothing was)."""
    assert type(fast) is type(slow)
    if fast is None:
        return
    assert len(fast._edges) == len(slow._edges)
    for (fn, nr), (sn, snr) in zip(fast._edges, slow._edges):
        assert nr == snr and (fn is sn or type(fn) is type(sn) is not None)
    assert [e is _eager.NOT_TENSOR for e in fast._edges] == \
        [e is _eager.NOT_TENSOR for e in slow._edges]
    assert fast.needs_input_grad == slow.needs_input_grad
    assert fast._output_meta == slow._output_meta
    assert fast.to_save == slow.to_save == ()
    assert getattr(fast, "constants", None) == getattr(slow, "constants", None)
    assert len(fast._saved) == len(slow._saved)
    for pf, ps in zip(fast._saved, slow._saved):
        assert (pf is None) == (ps is None)
        if pf is not None:
            assert len(pf) == len(ps)
            if len(pf) == 2:  # an input: the same tensor at the same version
                assert pf[0] is ps[0] and pf[1] == ps[1]
            else:  # the output: its data and version
                np.testing.assert_array_equal(pf[0], ps[0])
                assert pf[2:4] == ps[2:4]


def _same_result(fast, slow):
    assert type(fast) is Tensor and type(slow) is Tensor
    assert fast._data.dtype == slow._data.dtype and fast._data.shape == slow._data.shape
    np.testing.assert_array_equal(fast._data, slow._data)
    assert fast.requires_grad == slow.requires_grad
    assert fast._output_nr == slow._output_nr == 0 and fast._base is None
    assert fast._data is not slow._data
    _same_node(fast.grad_fn, slow.grad_fn)


def _operand_kinds(dtype, shape, seed):
    """Each kind of operand the fast path handles: leaf with and without grad, non-leaf,
    Python float and int."""
    arr = _values(shape, dtype, seed)
    return [_leaf(arr, False), _leaf(arr, True), _nonleaf(arr), 0.5, 2]


@pytest.mark.parametrize("cls", BINARY, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((), ()), ((), (2,))])
def test_binary_fast_path_records_what_the_general_path_records(cls, dtype, shapes):
    general = _eager.array_entry(2)
    for x in _operand_kinds(dtype, shapes[0], 0):
        for y in _operand_kinds(dtype, shapes[1], 1):
            if not (isinstance(x, Tensor) or isinstance(y, Tensor)):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _same_result(cls._array_op(cls, (x, y)), general(cls, (x, y)))


@pytest.mark.parametrize("cls", UNARY, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape", [(3,), (), (0,)])
def test_unary_fast_path_records_what_the_general_path_records(cls, dtype, shape):
    general = _eager.array_entry(1)
    for x in _operand_kinds(dtype, shape, 0)[:3]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _same_result(cls._array_op(cls, (x,)), general(cls, (x,)))


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_declared_ufunc_is_what_forward_computes_on_floats(cls):
    """On floating operands of one dtype (tensors' arrays, Python numbers), forward gives
    a new array of that dtype, and ufunc's values when the op declares one."""
    recipe = cls.eager_recipe()
    for dtype in FLOATS:
        for shapes in (((4,), (4,)), ((2, 4), (4,)), ((), ())):
            x, y = _values(shapes[0], dtype, 2), _values(shapes[1], dtype, 3)
            for args in ([(x,)] if recipe.arity == 1 else [(x, y), (x, 1.5), (3, y)]):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = np.asarray(cls.forward(*args))
                    want = None if recipe.ufunc is None else np.asarray(recipe.ufunc(*args))
                assert out.dtype == dtype
                assert not any(out is a for a in args)
                if want is not None:
                    assert want.dtype == out.dtype
                    np.testing.assert_array_equal(out, want)


def test_operators_methods_and_functions_reach_the_fast_path():
    x, w = _nonleaf(np.array([0.5, 0.25])), _leaf(np.array([2.0, 4.0]), False)
    for out in (x * w, w * x, 2.0 * x, x * 2, x - 1.0, 1.0 - x, -x, x.sin(), ak.sin(x),
                FUNCTIONS["mul"](x, w), METHODS["exp"](x)):
        assert out.requires_grad and out.grad_fn is not None
    ((x * w).sin() - 1.0 + (2.0 - x).exp()).sum().backward()


def test_calls_the_fast_path_declines_still_work():
    i = ak.tensor([1, 2, 3])
    assert (i * 2).dtype == ak.int64 and (i * 2.5).dtype == ak.float32
    assert ak.sin(i).dtype == ak.float32
    b = ak.tensor([True, False])
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool"):
        b - 1
    f32 = ak.tensor([1.0, 2.0], dtype=ak.float32, requires_grad=True)
    f64 = ak.tensor([1.0, 2.0], dtype=ak.float64)
    assert (f32 * f64).dtype == ak.float64 and (f32 * f64).requires_grad
    assert (f32 * np.float64(2.0)).dtype == ak.float32
    assert (f32 * True).dtype == ak.float32
    assert (f32 * np.array([1.0, 2.0])).dtype == ak.float64
    with pytest.raises(TypeError, match="must be Tensor, not list"):
        ak.exp([1.0, 2.0])


def test_anomaly_mode_and_saved_tensor_hooks_take_the_general_path():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"), \
            ak.autograd.detect_anomaly():
        y = x * x
    assert "traceback_" in y.grad_fn.metadata
    packed = []
    with ak.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t,
                                               lambda t: t):
        z = (x * x).sin()
    assert len(packed) == 3  # both operands of mul, then sin's input
    z.sum().backward()
    v = np.array([1.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), np.cos(v * v) * 2 * v)


def test_inference_tensors_saved_outside_inference_mode_are_refused():
    with ak.inference_mode():
        w = ak.tensor([1.0, 2.0])
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved"):
        x * w
    with ak.inference_mode():
        y = x * 2.0
    assert y.is_inference() and not y.requires_grad


WITH_RULE = [c for c in COVERED if c.eager_recipe().rule is not None]


def _same_gradients(fast, slow, g):
    assert len(fast) == len(slow)
    for f, s in zip(fast, slow):
        assert (f is None) == (s is None)
        assert (f is g) == (s is g)  # passed on as is (add's), or a new tensor
        if f is not None:
            assert f._data.dtype == s._data.dtype
            np.testing.assert_array_equal(f._data, s._data)
            assert f.requires_grad == s.requires_grad


@pytest.mark.parametrize("cls", WITH_RULE, ids=lambda c: c.__name__)
@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(3,), ()])
def test_generated_node_run_gives_the_family_backward_s_gradients(cls, create_graph, dtype,
                                                                 shape):
    """The node's generated _run (the engine's call; on arrays without create_graph
    when the op declares array_rule) against BackwardCFunction._run (the family's
    backward through saved_tensors, on tensors), for every operand kind, with and
    without grad mode (create_graph): the same values, dtypes and warnings."""
    from adkit.autograd.function import BackwardCFunction
    arity = cls.eager_recipe().arity
    kinds = _operand_kinds(dtype, shape, 0)
    calls = [(x,) for x in kinds[1:3]] if arity == 1 else \
        [(x, y) for x in kinds for y in _operand_kinds(dtype, shape, 1)
         if getattr(x, "requires_grad", False) or getattr(y, "requires_grad", False)]
    g = ak.tensor(np.linspace(0.5, 1.5, 3).astype(dtype).reshape(-1)[:int(np.prod(shape))]
                  .reshape(shape), requires_grad=create_graph)
    for args in calls:
        node = cls.apply(*args).grad_fn
        with ak.set_grad_enabled(create_graph):
            fast, fast_warnings = _with_warnings(node._run, [g])
            slow, slow_warnings = _with_warnings(BackwardCFunction._run, node, [g])
        _same_gradients(fast, slow, g)
        assert fast_warnings == slow_warnings


def _with_warnings(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [(w.category, str(w.message)) for w in caught]


WITH_ARRAY_RULE = [c for c in WITH_RULE if c.eager_recipe().array_rule is not None]


def test_the_chain_s_ops_declare_array_rules():
    assert {"Sin", "Mul", "Add", "Exp", "Tanh"} <= {c.__name__ for c in WITH_ARRAY_RULE}


@pytest.mark.parametrize("cls", WITH_ARRAY_RULE, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
def test_array_rule_is_the_rule_on_arrays(cls, dtype):
    """What an op declares as its rule on arrays gives its rule's values and dtypes, an
    ndarray where the rule gives a tensor, and the same warnings, on ordinary and
    special values (0, inf, nan, huge) and 0-d arrays."""
    recipe = cls.eager_recipe()
    values = np.array([0.3, -1.2, 0.0, np.inf, -np.inf, np.nan, 1e30, 60000.0])
    with np.errstate(over="ignore"):
        values = values.astype(dtype)
    for arr in (values, np.array(0.7, dtype), np.array(np.inf, dtype)):
        arrays = [arr, np.flip(arr).copy()] if arr.ndim else [arr, arr * 2]
        operands = [(arrays[0] if recipe.saves_x else None,
                     arrays[1] if recipe.saves_out else None)] if recipe.arity == 1 else \
            [(arrays[0], arrays[1], None), (arrays[0], 2.5, None), (None, 3, None),
             (1.5, arrays[1], None)]
        for ops in operands:
            tensors = [ak.tensor(o) if isinstance(o, np.ndarray) else o for o in ops]
            got, got_warnings = _with_warnings(recipe.array_rule, *ops)
            want, want_warnings = _with_warnings(recipe.rule, *tensors)
            assert got_warnings == want_warnings
            got = got if recipe.arity == 2 else (got,)
            want = want if recipe.arity == 2 else (want,)
            for a, t in zip(got, want):
                if isinstance(t, ak.Tensor):
                    assert type(a) is np.ndarray or isinstance(a, np.generic)
                    assert np.asarray(a).dtype == t._data.dtype
                    np.testing.assert_array_equal(np.asarray(a), t._data)
                else:
                    assert not isinstance(a, np.ndarray) and (a is t or a == t)


def test_generated_node_run_keeps_the_general_errors_and_zeros():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    a = x * 1.0
    y = a.sin()
    a.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.grad_fn._run([ak.ones(2)])
    z = x.exp()
    z.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second"):
        z.grad_fn._run([ak.ones(2)])
    g, none = (x * 3.0).grad_fn._run([None])  # materialized as zeros
    assert g.tolist() == [0.0, 0.0] and none is None


def test_function_entries_bind_and_refuse_as_apply_does():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    assert ak.mul(x=x, y=2.0).tolist() == [2.0, 4.0] and ak.sin(x=x).requires_grad
    assert ak.mul is ak.multiply and ak.sin.__name__ == "sin"
    with pytest.raises(TypeError, match=r"Sin.apply\(\): missing a required argument: 'x'"):
        ak.sin()
    with pytest.raises(TypeError, match=r"Mul.apply\(\): missing a required argument: 'y'"):
        ak.mul(x)
    with pytest.raises(TypeError, match=r"Mul.apply\(\): too many positional arguments"):
        ak.mul(x, x, x)
    graph = ak.trace(lambda t: ak.exp(ak.add(t, 1.0)), ak.tensor([1.0, 2.0]))
    assert "exp" in str(graph) and "add" in str(graph)


def test_output_metadata_is_the_output_s_even_after_data_was_replaced():
    """y.data = ... keeps y's node (whose metadata says y's old shape): a node recorded
    from y afterwards describes its own output, as PyTorch's does."""
    x = ak.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2.0
    y.data = ak.ones((2, 2), dtype=ak.float64)
    z = y.sin()
    assert z.grad_fn._output_meta == (((2, 2), np.dtype(np.float64)),)
    with pytest.raises(RuntimeError, match=r"SinBackward0 returned an invalid gradient at "
                                           r"index 0 - got \[2, 2\] but expected shape "
                                           r"compatible with \[3\]"):
        z.sum().backward()
