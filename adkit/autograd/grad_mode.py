"""Grad modes: no_grad, enable_grad, set_grad_enabled, inference_mode.

Owns: the thread-local flags `STATE.enabled` and `STATE.inference` read by
`Function.apply`. Does not: decide anything about graphs. Each mode is a context
manager and a decorator (with or without parentheses), restoring the previous state.
"""
import functools
import inspect
import threading

from ..tensor import CREATION


class _GradState(threading.local):
    def __init__(self):
        self.enabled = True

    @property
    def inference(self):
        """Inside inference_mode: kept where tensors are made (tensor.CREATION), which
        marks them as inference tensors."""
        return CREATION.inference

    @inference.setter
    def inference(self, value):
        CREATION.inference = value


STATE = _GradState()


def is_grad_enabled():
    return STATE.enabled


def is_inference_mode_enabled():
    return STATE.inference


class _DecoratorContextManager:
    """Context manager that also decorates functions (and generator functions)."""

    def __new__(cls, orig_func=None, *args, **kwargs):
        self = super().__new__(cls)
        if callable(orig_func) and not isinstance(orig_func, bool) and cls._bare_ok:
            self.__init__()
            return self(orig_func)
        return self

    _bare_ok = True  # `@no_grad` works like `@no_grad()`

    def __call__(self, func):
        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def gen_wrapper(*args, **kwargs):
                gen = func(*args, **kwargs)
                with self.clone():
                    response = gen.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with self.clone():
                            gen.close()
                        raise
                    try:
                        with self.clone():
                            response = gen.send(request)
                    except StopIteration as stop:
                        return stop.value
            return gen_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)
        return wrapper

    def clone(self):
        return type(self)()

    def __enter__(self):
        self._prev = (STATE.enabled, STATE.inference)
        self._set()

    def __exit__(self, *exc):
        STATE.enabled, STATE.inference = self._prev
        return False


class no_grad(_DecoratorContextManager):
    """Disable gradient recording inside the block."""

    def __init__(self, orig_func=None):
        pass

    def _set(self):
        STATE.enabled = False


class enable_grad(_DecoratorContextManager):
    """Enable gradient recording inside the block (e.g. within no_grad)."""

    def __init__(self, orig_func=None):
        pass

    def _set(self):
        STATE.enabled = True


class set_grad_enabled(_DecoratorContextManager):
    """Set grad mode to `mode`; takes effect at once, and a `with` block restores it."""

    _bare_ok = False

    def __init__(self, mode):
        self._prev = (STATE.enabled, STATE.inference)
        self.mode = bool(mode)
        STATE.enabled = self.mode

    def clone(self):
        return type(self)(self.mode)

    def __call__(self, func):
        STATE.enabled = self._prev[0]  # as a decorator, it must not change the mode now
        return super().__call__(func)

    def __enter__(self):
        pass  # already set in __init__

    def _set(self):
        STATE.enabled = self.mode


class inference_mode(_DecoratorContextManager):
    """Like no_grad, and also marks the block as inference (`is_inference_mode_enabled`)."""

    _bare_ok = True

    def __init__(self, mode=True):
        self.mode = bool(mode) if not callable(mode) else True

    def clone(self):
        return type(self)(self.mode)

    def _set(self):
        if self.mode:
            STATE.enabled = False
            STATE.inference = True
        else:
            STATE.inference = False
