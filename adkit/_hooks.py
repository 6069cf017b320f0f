"""Removable hook handles, shared by tensors and autograd nodes.

Owns: `RemovableHandle`. Does not: run hooks (the engine does).
"""
import itertools
import weakref

_next_id = itertools.count()


class RemovableHandle:
    """Returned by `register_hook`; `.remove()` takes the hook out of its dict again."""

    def __init__(self, hooks_dict):
        self.id = next(_next_id)
        self._hooks_ref = weakref.ref(hooks_dict)

    def remove(self):
        hooks = self._hooks_ref()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def add_hook(hooks_dict, fn):
    """Insert `fn` into an ordered hooks dict and return the handle that removes it."""
    handle = RemovableHandle(hooks_dict)
    hooks_dict[handle.id] = fn
    return handle


class HookDict(dict):
    """A dict that can be weakly referenced (plain dicts cannot)."""

    __slots__ = ("__weakref__",)
