"""Anomaly detection: detect_anomaly and set_detect_anomaly.

Owns: the thread-local flags, recording the forward traceback on each node, and the check
of backward results for NaN. Does not: walk the graph (the engine calls `check_node`).
"""
import os
import threading
import traceback
import warnings

import numpy as np


class _AnomalyState(threading.local):
    def __init__(self):
        self.enabled = False
        self.check_nan = True


STATE = _AnomalyState()


def is_anomaly_enabled():
    return STATE.enabled


def is_anomaly_check_nan_enabled():
    return STATE.check_nan


class detect_anomaly:
    """Context manager (and decorator) that records where each op was created in the
    forward pass and raises as soon as a backward function returns NaN."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the "
                      "runtime and should only be enabled for debugging.", stacklevel=2)

    def __enter__(self):
        self._prev = (STATE.enabled, STATE.check_nan)
        STATE.enabled, STATE.check_nan = True, self.check_nan

    def __exit__(self, *exc):
        STATE.enabled, STATE.check_nan = self._prev
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper


class set_detect_anomaly:
    """Turn anomaly detection on or off; as a context manager, restore it afterwards."""

    def __init__(self, mode, check_nan=True):
        self._prev = (STATE.enabled, STATE.check_nan)
        STATE.enabled, STATE.check_nan = bool(mode), check_nan

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        STATE.enabled, STATE.check_nan = self._prev
        return False


def record_forward_trace(node):
    """Remember the Python stack that created `node` (anomaly mode only)."""
    node.metadata["traceback_"] = traceback.format_stack()[:-3]


def record_sender(receiver, sender):
    """Backward: `sender` passed a gradient to `receiver` (anomaly mode only), so that a
    NaN can be traced back to the where whose masked branch made it."""
    receiver.metadata.setdefault("senders_", []).append(sender)


def check_node(node, grads, incoming=()):
    """After `node` ran in backward: raise if it returned NaN (PyTorch's message, and the
    where whose masked branch made it when one did: see masked_branch_note; the engine
    warns with the forward trace, as for any error in backward)."""
    if not STATE.check_nan:
        return
    for i, g in enumerate(grads):
        if g is not None and g._data.dtype.kind == "f" and np.isnan(g._data).any():
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th "
                               f"output.{masked_branch_note(node, incoming)}")


def masked_branch_note(node, incoming):
    """When `node`'s gradient came (through other nodes) from a where's backward and is
    zero somewhere: the NaN is 0 * inf in a masked branch. Names the where and where it
    was made."""
    zero = any(g is not None and g._data.dtype.kind == "f" and (g._data == 0).any()
               for g in incoming)
    where = _where_upstream(node) if zero else None
    if where is None:
        return ""
    made = _user_frame(where.metadata.get("traceback_", [])) or \
        "(no forward trace: it was made before anomaly mode was enabled)"
    return (f" It was born in a masked branch of a where ({where.name()}): the where's "
            f"backward gave the lanes it does not take a zero gradient, and "
            f"{node.name()} multiplied it by an infinite derivative (0 * inf = NaN). The "
            f"where was made at:\n{made}\nak.ir.passes.lint_where finds such branches "
            f"and ak.ir.passes.safe_where guards them (the double where).")


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_frame(frames):
    """The last frame of a formatted stack that is not adkit's own: the user's call."""
    for frame in reversed(frames):
        if not frame.strip().startswith(f'File "{_PACKAGE}'):
            return frame.rstrip()
    return ""


def _where_upstream(node, depth=16):
    """The nearest where backward node that sent gradient to `node`, directly or through
    others, or None."""
    frontier, seen = [node], set()
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for sender in n.metadata.get("senders_", ()) if n._metadata else ():
                if id(sender) in seen:
                    continue
                seen.add(id(sender))
                if sender.name().startswith("WhereBackward"):
                    return sender
                nxt.append(sender)
        frontier = nxt
    return None


def forward_trace(node):
    return "".join(node.metadata.get("traceback_", [
        "(no forward trace recorded: the node was created before anomaly mode was "
        "enabled)\n"]))


def warn_backward_error(node):
    """Anomaly mode: say which forward call made the node whose backward failed."""
    warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused "
                  f"the error:\n{forward_trace(node)}", stacklevel=3)
