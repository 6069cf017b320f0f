"""In-place changes through views: how a view is re-derived from its base, and the
`CopySlices` node that gives the base its new history (as in PyTorch).

Owns: `ViewFn` (the chain of view ops from the root base to a view, re-applicable to any
tensor of the base's shape), `rebase_history`, and keeping the other views of a written
base current (`register_view`, `refresh_views`). Does not: decide what is a view (view
ops say `is_view`; _eager.py records them).
"""
import weakref

from .grad_mode import enable_grad
from .node import NO_EDGE, SEQUENCE, Node, gradient_edge


class ViewFn:
    """Re-applies the view ops that made a view: root base -> view (adkit ops, so the
    result is differentiable and shares memory with the tensor it is applied to)."""

    __slots__ = ("op", "rest", "parent")

    def __init__(self, op, rest, parent):
        self.op, self.rest, self.parent = op, tuple(rest), parent

    def __call__(self, root):
        x = root if self.parent is None else self.parent(root)
        return self.op.apply(x, *self.rest)


def _identity(t):
    return t


class CopySlices(Node):
    """The base's history after `fn` (an in-place op) modified one of its views: the
    gradient of the base is the incoming gradient, with the view's region replaced by
    what fn's backward gives for its modified input."""

    def __init__(self, base_edge, view_fn, fn, dirty_index, base_meta):
        self.view_fn = view_fn
        self.fn = fn
        self.dirty_index = dirty_index
        edges = list(fn._edges)
        edges[dirty_index] = base_edge
        self._edges = tuple(edges)
        self._output_meta = (base_meta,)
        self._sequence_nr = next(SEQUENCE)

    def name(self):
        return "CopySlices"

    def _run(self, grads):
        (grad,) = grads
        result = grad.clone()
        region = self.view_fn(result)
        fn_grads = list(self.fn._run([region.clone()]))
        inner = fn_grads[self.dirty_index]
        if inner is None:
            region.zero_()
        else:
            region.copy_(inner)
        fn_grads[self.dirty_index] = result
        return fn_grads

    def _release(self):
        self.fn._release()


def rebase_history(view, fn):
    """After the in-place op node `fn` modified `view`, point view's base at a CopySlices
    node (the base now holds the new values)."""
    base = view._base
    dirty_index = _tensor_position(fn, view)
    base_edge = gradient_edge(base) if base._requires_grad else NO_EDGE
    node = CopySlices(base_edge, view._view_fn or _identity, fn, dirty_index,
                      (base._data.shape, base._data.dtype))
    base._grad_fn, base._output_nr, base._requires_grad = node, 0, True


def _tensor_position(fn, view):
    """Which of fn's arguments (its edges' order) is the modified view."""
    return fn._dirty_positions[id(view)]


def register_view(root, view):
    """Remember `view` (weakly) among the views of its root base."""
    views = root.__dict__.get("_views")
    if views is None:
        views = root._views = weakref.WeakSet()
    views.add(view)


def refresh_views(root):
    """After an in-place op gave `root` new history (written directly or through one of
    its views), every live view of the root gets its history re-derived from the root
    (PyTorch regenerates a view's grad_fn when its base's version changed): otherwise a
    view taken before the write would send its gradient around the write. The written
    view too: its gradient reaches the write's node only through the root's CopySlices,
    so no backward runs that node twice (once directly, once inside CopySlices)."""
    views = root.__dict__.get("_views")
    if not views:
        return
    for view in list(views):
        if view._base is root:
            _regenerate(view, root)


def _regenerate(view, root):
    with enable_grad():
        fresh = view._view_fn(root) if view._view_fn is not None else root
    view._grad_fn, view._output_nr = fresh._grad_fn, fresh._output_nr
    view._requires_grad = fresh._requires_grad
