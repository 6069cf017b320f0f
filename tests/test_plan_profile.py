"""plan_profile: each native call and numpy step of a compiled plan timed alone."""
import numpy as np

import adkit as ak
from adkit.codegen import plan_profile, program, steps


def test_one_row_per_call_and_step_and_the_plan_still_runs():
    rng = np.random.default_rng(0)
    x, w = ak.tensor(rng.standard_normal((64, 32))), ak.tensor(rng.standard_normal((32, 8)))

    def f(x, w):
        h = (x @ w).tanh()
        return (h * h).sum(1), ak.sort(h, 0).values  # a gemm, kernels, a numpy step
    compiled = ak.jit(f, compile="eager").compile(x, w)
    rows = plan_profile.profile(compiled, x, w, repeats=3)
    calls = [c for s in compiled.steps if isinstance(s, steps.SegmentStep) for c in s.calls]
    numpy_steps = [s for s in compiled.steps if isinstance(s, steps.NumpyStep)]
    assert len(rows) == len(calls) + len(numpy_steps)
    assert all(r.seconds > 0 for r in rows)
    gemm = next(r for r in rows if r.kind == "MatmulCall")
    assert gemm.read_bytes == (64 * 32 + 32 * 8) * 8 and gemm.written_bytes == 64 * 8 * 8
    assert any(isinstance(c, program.KernelCall) for c in calls) and numpy_steps
    text = plan_profile.report(rows)
    assert text.splitlines()[-1].endswith("total") and "gemm [64, 32] @ [32, 8]" in text
    got = compiled(x, w)  # profiling left the Compiled as it was
    want = f(x, w)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-12)
