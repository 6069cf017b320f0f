"""Which traced view ops alias their input, decided as eager numpy would decide it.

Owns: each tracer's layout (element offset and strides within its root's memory) and
marking the outputs of view ops as views (`_base`, `_view_fn`, shared version counter),
exactly when numpy would return a view for the same layout. Does not: record nodes
(trace.py) or write through views (autograd's rebase_history/CopySlices do, on the tape).
Why: autograd recognises an in-place write through a view by the written tensor's
`_base`; without it, a gradient traced through `v[:, 1:].mul_(2)` missed the write.
The eager rule is `np.may_share_memory(out, base)`; a tracer has no memory, so numpy's own
forward runs on a probe array laid out like the tracer (as codegen's plan does), and its
result's offset and strides become the view's layout. Fresh values are C-contiguous.
"""
import numpy as np

from ..autograd.views import ViewFn, register_view


def _contiguous(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def layout_of(t):
    """(offset, strides) in elements within t's root memory."""
    layout = t.__dict__.get("_layout")
    return layout if layout is not None else (0, _contiguous(t._data.shape))


def mark_views(cls, args, outputs):
    """Make the outputs of view op `cls` on tracer args[0] views of its root, where
    numpy's forward on a probe laid out like args[0] returns memory it shares."""
    base = args[0]
    root = base._base if base._base is not None else base
    results = _probe(cls, args, base, root)
    if results is None:
        return
    outs = outputs if isinstance(outputs, tuple) else (outputs,)
    memory, itemsize = results[0], base._data.dtype.itemsize
    start = memory.__array_interface__["data"][0]
    for out, r in zip(outs, results[1]):
        if not isinstance(r, np.ndarray) or r.size == 0 or \
                not np.may_share_memory(r, memory):
            continue  # numpy copied (or an empty result): a fresh value, not a view
        offset = (r.__array_interface__["data"][0] - start) // itemsize
        out._layout = (offset, tuple(s // itemsize for s in r.strides))
        out._base = root
        out._version_counter = root._version_counter
        out._view_fn = ViewFn(cls, args[1:], base._view_fn if base._base is not None
                              else None)
        register_view(root, out)


def _probe(cls, args, base, root):
    """(root-sized memory, numpy's results of cls on a probe of base's layout), or None
    when the forward does not run on the probe."""
    dtype = base._data.dtype
    memory = np.empty(max(1, root._data.size), dtype)
    offset, strides = layout_of(base)
    if any(s < 0 for s in strides):
        return None
    probe = np.ndarray(base._data.shape, dtype, buffer=memory, offset=offset * dtype.itemsize,
                       strides=tuple(s * dtype.itemsize for s in strides))
    try:
        result = cls.forward(probe, *args[1:])
    except Exception:  # noqa: BLE001  (then it is no view we can vouch for)
        return None
    return memory, list(result) if isinstance(result, (tuple, list)) else [result]
