"""Grad modes: context managers, decorators, thread-locality."""
import threading

import pytest

import adkit as ak


def test_grad_mode_no_grad_context():
    x = ak.tensor([1.0], requires_grad=True)
    with ak.no_grad():
        assert not ak.is_grad_enabled()
        y = x * 2
    assert ak.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None


def test_grad_mode_no_grad_decorator_with_and_without_parentheses():
    x = ak.tensor([1.0], requires_grad=True)

    @ak.no_grad()
    def f(a):
        return a * 2

    @ak.no_grad
    def g(a):
        return a * 2

    assert not f(x).requires_grad and not g(x).requires_grad
    assert ak.is_grad_enabled()


def test_grad_mode_no_grad_decorates_generators():
    @ak.no_grad()
    def gen():
        yield ak.is_grad_enabled()
        yield ak.is_grad_enabled()

    assert list(gen()) == [False, False]
    assert ak.is_grad_enabled()


def test_grad_mode_enable_grad_inside_no_grad():
    x = ak.tensor([1.0], requires_grad=True)
    with ak.no_grad():
        with ak.enable_grad():
            y = x * 2
        z = x * 2
    assert y.requires_grad and not z.requires_grad


def test_grad_mode_set_grad_enabled_function_and_context():
    try:
        ak.set_grad_enabled(False)
        assert not ak.is_grad_enabled()
    finally:
        ak.set_grad_enabled(True)
    with ak.set_grad_enabled(False):
        assert not ak.is_grad_enabled()
    assert ak.is_grad_enabled()

    @ak.set_grad_enabled(False)
    def f():
        return ak.is_grad_enabled()

    assert ak.is_grad_enabled()  # decorating does not switch the mode
    assert f() is False and ak.is_grad_enabled()


def test_grad_mode_inference_mode():
    x = ak.tensor([1.0], requires_grad=True)
    with ak.inference_mode():
        assert ak.is_inference_mode_enabled() and not ak.is_grad_enabled()
        y = x * 2
    assert not y.requires_grad
    assert not ak.is_inference_mode_enabled()

    @ak.inference_mode()
    def f():
        return ak.is_inference_mode_enabled()

    assert f() is True
    with ak.inference_mode(False):
        assert not ak.is_inference_mode_enabled() and ak.is_grad_enabled()


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError):
        with ak.no_grad():
            raise ValueError
    assert ak.is_grad_enabled()


def test_grad_mode_is_thread_local():
    seen = {}
    started, release = threading.Event(), threading.Event()

    def worker():
        seen["before"] = ak.is_grad_enabled()
        started.set()
        release.wait(5)
        x = ak.tensor([1.0], requires_grad=True)
        seen["records"] = (x * 2).requires_grad

    with ak.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        started.wait(5)
        release.set()
        t.join(5)
        assert not ak.is_grad_enabled()
    assert seen == {"before": True, "records": True}
