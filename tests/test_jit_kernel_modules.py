"""Kernels compiled in modules of their own, on threads (compiled.kernel_module_groups,
kernel_modules.KernelModules, runtime.Compiles): the same results as one module, in
quick and optimized code, linked across modules in one engine. The split is off on
2-CPU machines; these tests turn it on."""
import numpy as np
import pytest

import adkit as ak
from adkit.codegen import compiled as compiled_module
from adkit.codegen import pool
from adkit.codegen.compiled import Compiled


def _loss(w, x, mu):
    d = (x[:, None, :] - mu[None]) @ w  # a batch of products, rows, reductions
    z = (-(d ** 2).sum(2) * 0.5).exp()
    return (z.sum(1).log() + (w.tanh() ** 2).sum() + (mu.sin() * 0.1).sum()).mean()


def _args():
    rng = np.random.default_rng(0)
    return (ak.tensor(rng.standard_normal((6, 6)) * 0.3),
            ak.tensor(rng.standard_normal((200, 6))), ak.tensor(rng.standard_normal((5, 6))))


@pytest.mark.parametrize("cpus", [4, 3])
def test_split_kernels_compute_what_one_module_does(monkeypatch, cpus):
    f = ak.func.grad_and_value(_loss, argnums=(0, 2))
    args = _args()
    graph = ak.jit(f, compile="eager").lower(*args)
    whole = Compiled(graph)
    assert len(whole.module.texts) == 1
    monkeypatch.setattr(pool, "usable_cpus", lambda: cpus)
    assert compiled_module.kernel_module_groups(len(whole.kernels)) == cpus - 2
    for quick in (True, False):
        split = Compiled(graph, quick=quick)
        assert len(split.module.texts) == 1 + (cpus - 2) and split.optimized != quick
        a = ak._pytree.tree_flatten(split(*args))[0]
        b = ak._pytree.tree_flatten(whole(*args))[0]
        for u, v in zip(a, b, strict=True):
            np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12)
        if quick:
            assert len(split.optimize().module.texts) == 1 + (cpus - 2)
            assert all(k.name in split.asm for k in split.kernels)


def test_two_cpus_keep_one_module(monkeypatch):
    monkeypatch.setattr(pool, "usable_cpus", lambda: 2)
    assert compiled_module.kernel_module_groups(100) == 0
    monkeypatch.setattr(pool, "usable_cpus", lambda: 8)
    assert compiled_module.kernel_module_groups(3) == 0
    assert compiled_module.kernel_module_groups(4) == 2
