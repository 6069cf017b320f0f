"""The interpreter stack that `Function.apply` consults.

Owns: a ContextVar holding the active interpreters (innermost last) and the
`Interpreter` base class. An empty stack means "eager". Does not: know about autograd,
tracing or batching; those interpreters subclass `Interpreter` in their own modules.
"""
import contextlib
import contextvars

_STACK = contextvars.ContextVar("adkit_interpreters", default=())
# The active interpreters, innermost last; an empty tuple means eager.
interpreters = _STACK.get


class Interpreter:
    """Base class for a transformation level (forward AD, batching, tracing).

    `process(fn_cls, args)` receives a Function subclass and its bound positional
    arguments and must return that Function's outputs.
    """

    def process(self, fn_cls, args):
        raise NotImplementedError(f"{type(self).__name__} must define process()")

    def random(self, draw, shape):
        """A random tensor of `shape` as this level wants it (`draw(shape)` makes one
        eagerly). By default the level is transparent: the next level out decides."""
        with outside(self):
            return draw_random(draw, shape)


def current_interpreter():
    """The innermost active interpreter, or None when running eagerly."""
    stack = _STACK.get()
    return stack[-1] if stack else None


def draw_random(draw, shape):
    """A random tensor of `shape`, drawn by `draw(shape)` as the active levels want it
    (a vmap level refuses, shares one draw, or draws one per example: its randomness)."""
    interpreter = current_interpreter()
    return draw(shape) if interpreter is None else interpreter.random(draw, shape)


@contextlib.contextmanager
def interpreting(interpreter):
    """Make `interpreter` the innermost level for the duration of the block."""
    token = _STACK.set(_STACK.get() + (interpreter,))
    try:
        yield interpreter
    finally:
        _STACK.reset(token)


@contextlib.contextmanager
def outside(interpreter):
    """Run the block with `interpreter` and every level inside it removed, so that ops
    go to the next outer level (how a level runs its rules on its own inputs)."""
    stack = _STACK.get()
    token = _STACK.set(stack[:stack.index(interpreter)])
    try:
        yield
    finally:
        _STACK.reset(token)


@contextlib.contextmanager
def no_interpreters():
    """Run the block eagerly, with every interpreter set aside (shape inference runs ops
    on stand-in zeros this way)."""
    token = _STACK.set(())
    try:
        yield
    finally:
        _STACK.reset(token)
