"""Matmuls inside kernels (kernels.Contraction) with LOOP_MIN_K terms or more are a loop
over their terms, `chains` partial sums per point, and the terms left after the last
trip: every length, remainder, width (scalar, vector, a partial vector) and operand
layout computes what numpy does, in quick code and optimized code alike."""
import numpy as np
import pytest

import adkit as ak
from adkit.codegen import kernels
from adkit.codegen.compiled import Compiled

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("k", [kernels.Contraction.LOOP_MIN_K, 13, 17, 20, 31, 64])
@pytest.mark.parametrize("width", [1, 3, 8, 19])
def test_looped_contractions_equal_numpy(k, width):
    a, b = RNG.standard_normal((3, k)), RNG.standard_normal((k, width))  # (inline: small)
    f = ak.jit(lambda a, b: (a @ b).tanh(), compile="eager")
    compiled = f.compile(ak.tensor(a), ak.tensor(b))
    assert any("matmul" in repr(kern) for kern in compiled.kernels)  # inside a kernel
    want = np.tanh(a @ b)
    np.testing.assert_allclose(f(ak.tensor(a), ak.tensor(b)).numpy(), want, rtol=1e-12,
                               atol=1e-13)
    quick = Compiled(compiled.graph, "quick", quick=True)
    np.testing.assert_allclose(quick(ak.tensor(a), ak.tensor(b)).numpy(), want,
                               rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("k", [12, 20, 29])
def test_looped_contractions_with_a_transposed_operand_and_a_vector(k):
    a, b, v = RNG.standard_normal((k, 6)), RNG.standard_normal((k, 4)), RNG.standard_normal(k)
    f = ak.jit(lambda a, b, v: ((a.T @ b).sin(), (a.T @ v).exp()), compile="eager")
    got = f(ak.tensor(a), ak.tensor(b), ak.tensor(v))
    np.testing.assert_allclose(got[0].numpy(), np.sin(a.T @ b), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got[1].numpy(), np.exp(a.T @ v), rtol=1e-12, atol=1e-13)


def test_a_looped_contraction_is_a_loop_in_the_ir():
    a, b = RNG.standard_normal((5, 20)), RNG.standard_normal((20, 3))
    compiled = ak.jit(lambda a, b: (a @ b).tanh(), compile="eager").compile(
        ak.tensor(a), ak.tensor(b))
    quick = Compiled(compiled.graph, "quick", quick=True)
    assert "contract.end" in quick.module.llvm_ir
