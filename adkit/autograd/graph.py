"""adkit.autograd.graph: hooks on what the graph saves, and the graph's node type.

Owns: `saved_tensors_hooks`, `disable_saved_tensors_hooks` (thread-local stack kept in
node.py, where saving happens) and `allow_mutation_on_saved_tensors` (copy-on-write of
saved tensors, built on saved-tensor hooks). Does not: change how nodes run.
"""
from .node import MUTATION_WATCH, SAVED_HOOKS, Node

__all__ = ["Node", "saved_tensors_hooks", "disable_saved_tensors_hooks",
           "allow_mutation_on_saved_tensors"]


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


class allow_mutation_on_saved_tensors:
    """Inside the block, a tensor saved for backward may be modified in place: it is
    copied just before its first in-place write, and backward reads the copy (PyTorch's
    copy-on-write; no 'modified by an inplace operation' error). Writes made by a custom
    Function's forward (mark_dirty) happen before adkit sees them and are not covered."""

    def __enter__(self):
        if MUTATION_WATCH.watched is not None:
            raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
        watched = MUTATION_WATCH.watched = {}

        def pack(tensor):
            holder = [tensor, None]
            watched.setdefault(id(tensor._version_counter), []).append(holder)
            return holder

        def unpack(holder):
            return holder[0] if holder[1] is None else holder[1]
        self._hooks = saved_tensors_hooks(pack, unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        MUTATION_WATCH.watched = None
        return False
