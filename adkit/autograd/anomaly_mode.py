"""Anomaly detection: detect_anomaly and set_detect_anomaly.

Owns: the thread-local flags, recording the forward traceback on each node, and the check
of backward results for NaN. Does not: walk the graph (the engine calls `check_node`).
"""
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


def check_node(node, grads):
    """After `node` ran in backward: raise if it returned NaN (PyTorch's message; the engine
    warns with the forward trace, as for any error in backward)."""
    if not STATE.check_nan:
        return
    for i, g in enumerate(grads):
        if g is not None and g._data.dtype.kind == "f" and np.isnan(g._data).any():
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th "
                               f"output.")


def forward_trace(node):
    return "".join(node.metadata.get("traceback_", [
        "(no forward trace recorded: the node was created before anomaly mode was "
        "enabled)\n"]))


def warn_backward_error(node):
    """Anomaly mode: say which forward call made the node whose backward failed."""
    warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused "
                  f"the error:\n{forward_trace(node)}", stacklevel=3)
