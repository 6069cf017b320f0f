"""The differential fuzzer (adkit.testing): a fixed seed in CI, and proof that each part
can fail: a wrong rule, a wrong pass, a planted bug shrunk to a short runnable repro."""
import numpy as np
import pytest

import adkit as ak
from adkit.testing import checks
from adkit.testing import fuzzer as fuzz
from adkit.testing.fuzz import main as fuzz_main
from adkit.testing.programs import Program, generate

CLEAN_CHECKS = None  # every check


def test_fuzzer_fixed_seed_finds_nothing():
    failures = fuzz.fuzz(programs=600, seed=11, names=CLEAN_CHECKS, log=lambda *_: None)
    assert not failures, "\n\n".join(f.repro() for f in failures)


class _WrongSin(ak.autograd.Function):
    """sin with a jvp and a backward that are off by a factor of 2."""

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * x.cos()

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return 2 * x_t * x.cos()


@pytest.mark.parametrize("name", ["reverse", "jvp", "forward_ad"])
def test_each_derivative_check_catches_a_wrong_rule(name):
    ctx = checks.Context(np.random.default_rng(0))
    arrays = [np.linspace(0.2, 1.2, 6).reshape(2, 3)]
    with pytest.raises(checks.Mismatch, match="finite differences"):
        checks.CHECKS[name](lambda x: _WrongSin.apply(x), arrays, ctx)
    checks.CHECKS[name](lambda x: x.sin(), arrays, ctx)  # the right rule passes


def test_forward_check_catches_a_wrong_value():
    ctx = checks.Context(np.random.default_rng(0))
    arrays = [np.ones(3)]
    with pytest.raises(checks.Mismatch, match="eager forward vs numpy"):
        checks.check_forward(lambda x: x * 2, arrays, ctx, reference=np.ones(3) * 3)


def _negating_pass(graph):
    """A broken user pass: every output negated (a copy; the input graph is untouched)."""
    out = graph.copy()
    for n, data in out.nx.nodes(data=True):
        if data["kind"] == "const":
            data["value"] = -np.asarray(data["value"])
    return out


def test_a_broken_user_pass_is_caught_and_named():
    ctx = checks.Context(np.random.default_rng(0), user_passes=(_negating_pass,),
                         builtin_passes=False)
    arrays = [np.linspace(0.2, 1.2, 6)]
    three = ak.tensor([3.0], dtype=ak.float64)  # closed over: a const node of the graph
    with pytest.raises(checks.Mismatch, match="_negating_pass"):
        checks.check_passes(lambda x: x * three + 1.0, arrays, ctx)
    checks.check_passes(lambda x: x * three + 1.0, arrays,
                        checks.Context(np.random.default_rng(0), builtin_passes=False))


def _fails_when_output_is_non_negative(fn, arrays, ctx, reference=None):
    """A planted bug: 'fails' whenever the program's output is >= 0 everywhere."""
    if np.all(fn(*[ak.tensor(a) for a in arrays]).numpy() >= 0):
        raise checks.Mismatch("planted: non-negative output")


def test_shrinking_reduces_a_planted_bug_to_its_cause_and_prints_runnable_code(monkeypatch):
    monkeypatch.setitem(checks.CHECKS, "planted", _fails_when_output_is_non_negative)
    program = Program([np.array([0.5, -0.7, 1.3])],
                      [("sin", "v0", ["x0"]), ("square", "v1", ["v0"]),
                       ("mask_times", "v2", ["v1"]), ("tanh", "v3", ["v2"])], ["v3"])
    assert "planted" in fuzz.check_program(program, ["planted"])
    small = fuzz.shrink(program, "planted")
    assert [s[0] for s in small.steps] == ["sin", "square"]
    source = fuzz.Failure("planted", "planted", small, (0,)).repro()
    scope = {}
    exec(source.split("from adkit.testing import checks")[0], scope)  # noqa: S102
    (out,) = scope["program"](scope["x0"])
    np.testing.assert_allclose(out.numpy(), np.sin(small.inputs[0]) ** 2)


def test_generated_programs_are_valid_and_reproducible():
    a = generate(np.random.default_rng([3, 4]))
    b = generate(np.random.default_rng([3, 4]))
    assert a.steps == b.steps and all(np.array_equal(x, y) for x, y in zip(a.inputs, b.inputs))
    (out,) = a.run(np, [x.copy() for x in a.inputs], lib="np")
    assert np.all(np.isfinite(out))


def test_command_line_runs_and_reports(capsys):
    assert fuzz_main(["--programs", "3", "--seed", "2", "--checks", "forward,reverse"]) == 0
    assert "3 programs, seed 2" in capsys.readouterr().out


def test_traced_in_place_writes_through_views_under_jit_grad():
    """The issue's example: the traced gradient used to miss the write (off by 0.97)."""
    def f(x):
        v = x.clone()
        v[:, 1:].mul_(2.0)
        return v.sin()
    grad = ak.func.grad(lambda x: f(x).sum())
    x = ak.tensor(np.random.default_rng(0).standard_normal((3, 4)))
    np.testing.assert_allclose(ak.jit(grad)(x).numpy(), grad(x).numpy(), rtol=1e-14)
    want = np.cos(x.numpy() * [1, 2, 2, 2]) * [1, 2, 2, 2]
    np.testing.assert_allclose(ak.trace(grad, x)(x).numpy(), want, rtol=1e-14)


@pytest.mark.slow
def test_fuzzer_long_run():
    failures = fuzz.fuzz(programs=5000, seed=0, names=CLEAN_CHECKS, log=lambda *_: None)
    assert not failures, "\n\n".join(f.repro() for f in failures)
