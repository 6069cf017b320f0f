"""NaN through where: lint_where flags every masked branch whose gradient is NaN (and no
safe pattern), safe_where fixes each one with forward values bit-identical, and
detect_anomaly names the where whose masked branch made the NaN."""
import numpy as np
import pytest

import adkit as ak
from adkit.ir import passes

X = np.array([2.0, 1.0, 0.5, 0.0, -0.0, -0.5, -1.0, -3.0, 1e3])


def t(values=X):
    return ak.tensor(np.asarray(values, np.float64))


def grad_through(graph, x):
    """The gradient of sum(graph(x)) by the vjp pass."""
    outputs = graph(x)
    ones = ak.ones_like(outputs)
    return passes.vjp(graph)(x, ones)[1]


# (function, the op the lint must name, the gradient the user meant at every point)
UNSAFE = {
    "sqrt": (lambda x: ak.where(x > 0, x.sqrt(), 0.0), "sqrt",
             lambda x: np.where(x > 0, 0.5 / np.sqrt(np.abs(x) + (x <= 0)), 0.0)),
    "log": (lambda x: ak.where(x > 0, x.log(), -1.0), "log",
            lambda x: np.where(x > 0, 1 / np.where(x > 0, x, 1), 0.0)),
    "division": (lambda x: ak.where(x != 0, 1.0 / x, 0.0), "div",
                 lambda x: np.where(x != 0, -1 / np.where(x != 0, x, 1) ** 2, 0.0)),
    "false-branch": (lambda x: ak.where(x <= 0, 0.0, x.sqrt() * 3), "sqrt",
                     lambda x: np.where(x > 0, 1.5 / np.sqrt(np.where(x > 0, x, 1)), 0.0)),
    "pow-half": (lambda x: ak.where(x > 0, x ** 0.5, 0.0), "pow",
                 lambda x: np.where(x > 0, 0.5 / np.sqrt(np.where(x > 0, x, 1)), 0.0)),
    "asin": (lambda x: ak.where(x.abs() < 1, x.asin(), 0.0), "asin",
             lambda x: np.where(np.abs(x) < 1, 1 / np.sqrt(1 - np.where(np.abs(x) < 1, x, 0) ** 2),
                                0.0)),
    "deep-branch": (lambda x: ak.where(x > 0, (x.sqrt() + 1).sin() * x, x), "sqrt",
                    lambda x: np.where(x > 0, _deep_grad(x), 1.0)),
    "shared-value": (lambda x: (lambda s: ak.where(x > 0, s, 0.0) + ak.where(x > 1, s * 2, 0.0))(
        x.sqrt()), "sqrt", lambda x: np.where(x > 0, 0.5 / np.sqrt(np.where(x > 0, x, 1)), 0.0)
        * np.where(x > 1, 3.0, 1.0)),
    "exp-overflow": (lambda x: ak.where(x < 0, x.exp() - 1, x), "exp",
                     lambda x: np.where(x < 0, np.exp(np.minimum(x, 0)), 1.0)),
    "rsqrt": (lambda x: ak.where(x > 0.25, x.rsqrt(), 2.0), "rsqrt",
              lambda x: np.where(x > 0.25, -0.5 * np.where(x > 0.25, x, 1) ** -1.5, 0.0)),
}


def _deep_grad(x):
    s = np.sqrt(np.where(x > 0, x, 1))
    return np.cos(s + 1) * 0.5 / s * x + np.sin(s + 1)


@pytest.mark.parametrize("name", UNSAFE)
def test_lint_flags_each_nan_where_and_safe_where_fixes_it(name):
    f, op_name, meant = UNSAFE[name]
    x = t(X * (1 if name != "exp-overflow" else -1) if name != "exp-overflow" else
          np.append(X, 800.0))
    graph = ak.trace(f, x)
    diagnostics = passes.lint_where(graph)
    assert diagnostics and {d.op_name for d in diagnostics} == {op_name}
    diagnostic = diagnostics[0]
    assert "NaN" in str(diagnostic)
    assert ":" in diagnostic.where_source and ":" in diagnostic.op_source
    assert np.isnan(grad_through(graph, x).numpy()).any()  # the bug is real
    fixed = passes.safe_where(graph)
    assert passes.lint_where(fixed) == []
    np.testing.assert_array_equal(fixed(x).numpy(), graph(x).numpy())  # bit-identical
    got = grad_through(fixed, x).numpy()
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, meant(x.numpy()), rtol=1e-12, atol=1e-300)


SAFE = {
    "double-where": lambda x: ak.where(x > 0, ak.where(x > 0, x, 1.0).sqrt(), 0.0),
    "no-singular-op": lambda x: ak.where(x > 0, x * 2 + x.sin(), -x),
    "positive-argument": lambda x: ak.where(x > 0, (x * x + 1).sqrt() + x.sigmoid().log(), 0.0),
    "constant-argument": lambda x: ak.where(x > 0, x * ak.tensor(2.0).sqrt(), 0.0),
    "relu-style": lambda x: ak.where(x > 0, x, 0.01 * x),
    "clamp-then-log": lambda x: ak.where(x > 1, (x.abs() + 1).log(), x),
    "sigmoid-division": lambda x: ak.where(x > 0, 1 / x.sigmoid(), 0.0),
    "no-where": lambda x: (x * x + 1).sqrt(),
}


@pytest.mark.parametrize("name", SAFE)
def test_no_false_alarms_on_safe_patterns(name):
    x = t()
    graph = ak.trace(SAFE[name], x)
    assert passes.lint_where(graph) == []
    assert not np.isnan(grad_through(graph, x).numpy()).any()
    fixed = passes.safe_where(graph)
    np.testing.assert_array_equal(fixed(x).numpy(), graph(x).numpy())


def test_both_branches_and_nested_wheres_are_fixed():
    def f(x):
        inner = ak.where(x >= 0, x.sqrt(), (-x).sqrt())
        return ak.where(x > 0, inner.log(), x)
    x = t()
    graph = ak.trace(f, x)
    assert {d.op_name for d in passes.lint_where(graph)} == {"sqrt", "log"}
    fixed = passes.safe_where(graph)
    assert passes.lint_where(fixed) == []
    np.testing.assert_array_equal(fixed(x).numpy(), graph(x).numpy())
    assert not np.isnan(grad_through(fixed, x).numpy()).any()


def test_a_condition_broader_than_the_argument_is_a_clear_error():
    def f(x, s):
        return ak.where(x > 0, s.sqrt() * x, 0.0)  # s is one number, the condition a row
    graph = ak.trace(f, t(), ak.tensor(0.0, dtype=ak.float64))
    assert len(passes.lint_where(graph)) == 1
    with pytest.raises(ValueError, match="broader than sqrt's argument"):
        passes.safe_where(graph)


def test_op_classes_declare_where_their_derivatives_are_singular():
    from adkit.ir.passes.where_lint import singular_arguments
    from adkit.ops.binary import Div, Pow
    from adkit.ops.unary import Log, Sin, Sqrt
    assert singular_arguments(Sqrt, {})[0][0] == "x <= 0"
    assert singular_arguments(Log, {})[0][1] == 1.0
    assert singular_arguments(Div, {}) == {1: ("y == 0", 1.0, "positive")}
    assert singular_arguments(Sin, {}) == {}
    assert singular_arguments(Pow, {"y": 2}) == {} and 0 in singular_arguments(Pow, {"y": 0.5})
    assert 0 in singular_arguments(Pow, {})  # a tensor exponent: log(x) in dz/dy


def test_detect_anomaly_names_the_where_whose_masked_branch_made_the_nan():
    x = ak.tensor([1.0, 0.0], dtype=ak.float64, requires_grad=True)
    with pytest.warns(UserWarning), ak.autograd.detect_anomaly():
        y = ak.where(x > 0, x.sqrt() * 2, 0.0)  # the line the error must name
        with pytest.raises(RuntimeError) as error:
            y.sum().backward()
    message = str(error.value)
    assert message.startswith("Function 'SqrtBackward0' returned nan values in its 0th output.")
    assert "masked branch of a where" in message and "test_where_lint.py" in message
    assert "y = ak.where(x > 0, x.sqrt() * 2, 0.0)" in message


def test_detect_anomaly_says_nothing_of_where_for_other_nans():
    x = ak.tensor([-1.0, 4.0], dtype=ak.float64, requires_grad=True)
    with pytest.warns(UserWarning), ak.autograd.detect_anomaly():
        y = x.sqrt()  # NaN forward and backward at -1: no where involved
        with pytest.raises(RuntimeError) as error:
            y.sum().backward()
    assert "returned nan values" in str(error.value)
    assert "where" not in str(error.value)
