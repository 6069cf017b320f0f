"""adkit.autograd.graph: hooks on what the graph saves, and the graph's node type.

Owns: `saved_tensors_hooks` and `disable_saved_tensors_hooks` (thread-local stack kept in
node.py, where saving happens). Does not: change how nodes run.
"""
from .node import SAVED_HOOKS, Node

__all__ = ["Node", "saved_tensors_hooks", "disable_saved_tensors_hooks"]


class saved_tensors_hooks:
    """Inside the block, every tensor saved for backward goes through `pack_hook(tensor)`
    and is read back, when backward needs it, through `unpack_hook(packed)`.

        with saved_tensors_hooks(lambda t: t.numpy().copy(), lambda a: ak.tensor(a)):
            y = x.exp()      # exp saves its output: packed as an ndarray copy
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        SAVED_HOOKS.stack.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        SAVED_HOOKS.stack.pop()
        return False


class disable_saved_tensors_hooks:
    """Inside the block, using saved_tensors_hooks raises RuntimeError(error_message)."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        self._prev = SAVED_HOOKS.disabled_message
        SAVED_HOOKS.disabled_message = self.error_message

    def __exit__(self, *exc):
        SAVED_HOOKS.disabled_message = self._prev
        return False
