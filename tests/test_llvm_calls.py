"""Compiles side by side (llvm_calls.py: parsing, passes and code generation without
llvmlite's lock, each compile in an LLVM context of its own): threads compiling at
once, in both modes, make the object code a compile alone makes, and errors still
surface as Python exceptions."""
import threading

import numpy as np
import pytest

import adkit as ak
from adkit.codegen import runtime


def _module(k):
    """A small module whose code depends on k (a loop of k-dependent arithmetic)."""
    return f"""
target triple = "{runtime.target_machine().triple}"

define double @"f{k}"(ptr %"x", i64 %"n")
{{
entry:
  br label %"loop"
loop:
  %"i" = phi i64 [0, %"entry"], [%"next", %"loop"]
  %"acc" = phi double [0.0, %"entry"], [%"sum", %"loop"]
  %"p" = getelementptr double, ptr %"x", i64 %"i"
  %"v" = load double, ptr %"p"
  %"w" = fmul double %"v", {float(k + 1)!r}
  %"sum" = fadd double %"acc", %"w"
  %"next" = add i64 %"i", 1
  %"more" = icmp slt i64 %"next", %"n"
  br i1 %"more", label %"loop", label %"done"
done:
  ret double %"sum"
}}
"""


def test_threads_compiling_at_once_make_what_one_compile_alone_makes():
    texts = [_module(k) for k in range(12)]
    alone = {(i, quick): runtime._object_code(t, quick) for i, t in enumerate(texts)
             for quick in (True, False)}
    results, errors = {}, []

    def compile_all(quick, order):
        try:
            for i in order:
                results[(i, quick)] = runtime._object_code(texts[i], quick)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=compile_all, args=(quick, order))
               for quick in (True, False) for order in (range(12), range(11, -1, -1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == alone


def test_a_parse_error_is_a_python_error():
    with pytest.raises(RuntimeError, match="LLVM IR parsing error"):
        runtime._object_code("define void @f( {", quick=True)


def test_assembly_comes_back_as_text():
    asm = runtime._object_code(_module(3), quick=True, assembly=True)
    assert isinstance(asm, str) and "f3" in asm


def test_jitted_functions_compiled_on_threads_at_once_agree(monkeypatch):
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")
    x = ak.tensor(np.linspace(-1.0, 1.0, 300))
    fns = [ak.jit(lambda t, k=k: ((t * (k + 1.0)).sin() + t.exp()).sum(), compile="eager")
           for k in range(6)]
    got, errors = {}, []

    def call(k):
        try:
            got[k] = float(fns[k](x).item())
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=call, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(6):
        want = np.sum(np.sin(x.numpy() * (k + 1.0)) + np.exp(x.numpy()))
        assert got[k] == pytest.approx(want, rel=1e-12)



def test_prompt_handoffs_lower_the_switch_interval_while_used_and_put_it_back():
    import sys
    from adkit.codegen import llvm_calls
    before = sys.getswitchinterval()
    with llvm_calls.prompt_handoffs():
        assert sys.getswitchinterval() == pytest.approx(llvm_calls.PROMPT_SWITCH_INTERVAL, rel=0.05)
        with llvm_calls.prompt_handoffs():  # nested (another compile, another thread)
            assert sys.getswitchinterval() == pytest.approx(
                llvm_calls.PROMPT_SWITCH_INTERVAL, rel=0.05)
        assert sys.getswitchinterval() == pytest.approx(llvm_calls.PROMPT_SWITCH_INTERVAL, rel=0.05)
    assert sys.getswitchinterval() == pytest.approx(before, rel=0.05)
    sys.setswitchinterval(1e-4)  # a user's shorter interval is kept
    try:
        with llvm_calls.prompt_handoffs():
            assert sys.getswitchinterval() == pytest.approx(1e-4, rel=0.05)
        assert sys.getswitchinterval() == pytest.approx(1e-4, rel=0.05)
    finally:
        sys.setswitchinterval(before)
