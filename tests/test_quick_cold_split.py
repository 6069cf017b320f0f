"""Quick code's cold half (compiled.quick_cold, module_split.split_cold,
runtime.quick_object): a plan's entries, trampolines and small kernels are compiled at
LLVM's code generation level 0 in a module of their own, beside the rest at level 1;
the two objects link into one engine and compute what one module's code computes."""
import ctypes

import numpy as np
import pytest

import adkit as ak
from adkit.codegen import compiled as compiled_module
from adkit.codegen import module_split, plan, plan_cache, runtime
from adkit.codegen.compiled import Compiled

# f(x) = helper(x) * 2 + g(x); g(x) = helper(x) + 1; helper is internal, the table private
MODULE = """
target triple = "{triple}"

@"table" = private constant [2 x double] [double 1.5, double 2.5]

define internal double @"helper"(double %"x")
{{
entry:
  %"p" = getelementptr [2 x double], ptr @"table", i64 0, i64 1
  %"t" = load double, ptr %"p"
  %"r" = fmul double %"x", %"t"
  ret double %"r"
}}

define double @"g"(double %"x")
{{
entry:
  %"h" = call double @"helper"(double %"x")
  %"r" = fadd double %"h", 1.0
  ret double %"r"
}}

define double @"f"(double %"x")
{{
entry:
  %"h" = call double @"helper"(double %"x")
  %"d" = fmul double %"h", 2.0
  %"gx" = call double @"g"(double %"x")
  %"r" = fadd double %"d", %"gx"
  ret double %"r"
}}
"""


def _module_text():
    return MODULE.format(triple=runtime.target_machine().triple)


def _call_f(objects, x):
    native = runtime.from_object_code([_module_text()], objects)
    return native.function("f", ctypes.c_double, ctypes.c_double)(x), native


def test_split_declares_across_halves_and_copies_local_definitions():
    cold, hot = module_split.split_cold(_module_text(), lambda name: name == "g")
    assert 'define double @"g"' in cold and 'declare double @"f"' in cold
    assert 'define double @"f"' in hot and 'declare double @"g"' in hot
    for half in (cold, hot):  # module-local code and data go to both
        assert 'define internal double @"helper"' in half and '@"table" = private' in half


def test_the_two_halves_link_and_compute_what_one_module_does():
    objects = runtime.quick_object(_module_text(), cold=lambda name: name == "g")
    assert isinstance(objects, list) and len(objects) == 2
    value, _native = _call_f(objects, 2.0)
    whole, _native2 = _call_f([runtime.quick_object(_module_text())], 2.0)
    assert value == whole == 2.0 * 2.5 * 2 + (2.0 * 2.5 + 1.0)


@pytest.mark.parametrize("cold", [lambda name: False, lambda name: name in ("f", "g")],
                         ids=["nothing-cold", "everything-cold"])
def test_no_split_when_one_half_would_be_empty(cold):
    assert module_split.split_cold(_module_text(), cold) is None


def test_no_split_when_a_global_is_defined_for_other_modules():
    text = _module_text().replace('@"table" = private constant', '@"table" = constant')
    assert module_split.split_cold(text, lambda name: name == "g") is None
    objects = runtime.quick_object(text, cold=lambda name: name == "g")  # optnone instead
    assert isinstance(objects, bytes)
    assert _call_f([objects], 1.0)[0] == 1.0 * 2.5 * 2 + 2.5 + 1.0


def test_cold_functions_are_entries_trampolines_and_small_kernels(monkeypatch):
    monkeypatch.setattr(plan_cache, "key", lambda graph, passes: None)
    big, small = ak.tensor(np.random.default_rng(0).standard_normal((400, 1000))), \
        ak.tensor(np.random.default_rng(1).standard_normal(8))
    jitted = ak.jit(lambda a, b: ((a.exp() * 2.0).sin().sum(1), (b * 3.0).tanh()),
                    compile="eager")
    jitted(big, small)
    program = next(iter(jitted.cache.values()))
    cold = compiled_module.quick_cold(program.steps, program.kernels)
    by_cost = {k.name: plan.estimated_ns(k) for k in program.kernels}
    assert any(ns >= compiled_module.QUICK_COLD_NS for ns in by_cost.values())
    assert any(ns < compiled_module.QUICK_COLD_NS for ns in by_cost.values())
    for name, ns in by_cost.items():
        assert cold(name) == (ns < compiled_module.QUICK_COLD_NS)
    assert all(cold(name) for name in program.segments)
    assert cold("kernel0_worker")


def test_quick_code_with_a_cold_half_agrees_with_optimized_code(monkeypatch):
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")  # (the optimized code would be found)
    rng = np.random.default_rng(2)
    a, b = ak.tensor(rng.standard_normal((300, 700))), ak.tensor(rng.standard_normal(5))

    def f(a, b):
        return ak.func.grad(lambda t: ((t.exp() * b.sum()).sin()).sum())(a), (b * 3.0).tanh()
    jitted = ak.jit(f, compile="eager")
    want = jitted(a, b)
    optimized = next(iter(jitted.cache.values()))
    quick = Compiled(optimized.graph, "quick", quick=True)
    assert len(quick.module.object_code) == 2  # the cold half and the rest
    got = quick(a, b)
    for u, v in zip(got, want, strict=True):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12)


def test_quick_code_lowers_only_its_smallest_kernels_as_scalar_loops(monkeypatch):
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")
    rng = np.random.default_rng(3)  # (b: wide enough for vectors)
    a, b = ak.tensor(rng.standard_normal((300, 700))), ak.tensor(rng.standard_normal(64))
    jitted = ak.jit(lambda a, b: ((a * 2.0).exp().sum(1), (b * 3.0).tanh()),
                    compile="eager")
    want = jitted(a, b)
    optimized = next(iter(jitted.cache.values()))
    assert not any(k.scalar for k in optimized.kernels)  # optimized code keeps vectors
    assert all(" x double>" in optimized.module.llvm_ir.split(f'@"{k.name}"(')[1]
               .split("\n}\n")[0] for k in optimized.kernels)
    quick = Compiled(optimized.graph, "quick", quick=True)
    small = [k for k in quick.kernels if plan.estimated_ns(k) < compiled_module.SCALAR_NS]
    assert small and all(k.scalar for k in small)
    assert not all(k.scalar for k in quick.kernels)
    for kernel in small:
        body = quick.module.llvm_ir.split(f'@"{kernel.name}"(')[1].split("\n}\n")[0]
        assert " x double>" not in body
    for u, v in zip(quick(a, b), want, strict=True):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12)


def test_quick_code_lowers_its_slowest_kernels_first_in_a_module_of_their_own(monkeypatch):
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")
    monkeypatch.setattr(compiled_module, "kernel_module_groups", lambda n: 0)
    rng = np.random.default_rng(4)
    a, b = ak.tensor(rng.standard_normal((300, 700))), ak.tensor(rng.standard_normal(64))
    jitted = ak.jit(lambda a, b: ((a * 2.0).exp().sum(1), (b * 3.0).tanh()),
                    compile="eager")
    want = jitted(a, b)
    quick = Compiled(next(iter(jitted.cache.values())).graph, "quick", quick=True)
    cold = compiled_module.quick_cold(quick.steps, quick.kernels)
    slow = [k.name for k in quick.kernels if not cold(k.name)]
    early, entry = quick.module.texts
    assert slow and all(f'define void @"{name}"(' in early for name in slow)
    assert all(f'declare void @"{name}"(' in entry for name in slow)
    assert not any("define i64 @\"segment" in line for line in early.splitlines())
    for u, v in zip(quick(a, b), want, strict=True):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12)
    optimized = quick.optimize()  # the same two modules at O3
    assert optimized.optimized and len(optimized.module.texts) == 2
    for u, v in zip(optimized(a, b), want, strict=True):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12)
