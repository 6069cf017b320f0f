"""`ak.testing.assert_close`: torch.testing.assert_close's semantics and messages, for
adkit tensors, numpy arrays and numbers.

Owns: the default tolerances per dtype and the mismatch report. Does not: compare
gradients (checks.py).
"""
import numpy as np

# torch.testing's defaults: (rtol, atol) by dtype; exact for integers and bools
_DEFAULT_TOLERANCES = {np.dtype(np.float16): (1e-3, 1e-5),
                       np.dtype(np.float32): (1.3e-6, 1e-5),
                       np.dtype(np.float64): (1e-7, 1e-7)}


def _as_array(value):
    data = getattr(value, "_data", None)
    if isinstance(data, np.ndarray):
        return data
    return np.asarray(value)


def _dtype_name(value, array):
    dtype = getattr(value, "dtype", None)
    return repr(dtype) if dtype is not None and not isinstance(dtype, np.dtype) \
        else f"{array.dtype}"


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False,
                 check_dtype=True, msg=None):
    """Raise AssertionError unless |actual - expected| <= atol + rtol * |expected|
    elementwise (shapes equal, dtypes equal when check_dtype)."""
    a, e = _as_array(actual), _as_array(expected)
    if a.shape != e.shape:
        raise AssertionError(msg or f"The values for attribute 'shape' do not match: "
                                    f"{list(a.shape)} != {list(e.shape)}.")
    if check_dtype and a.dtype != e.dtype:
        raise AssertionError(msg or f"The values for attribute 'dtype' do not match: "
                                    f"{_dtype_name(actual, a)} != {_dtype_name(expected, e)}.")
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted, but "
                         f"got no {'rtol' if rtol is None else 'atol'}.")
    if rtol is None:
        rtol, atol = _DEFAULT_TOLERANCES.get(np.result_type(a.dtype, e.dtype), (0.0, 0.0))
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(a64 - e64)
        ok = diff <= atol + rtol * np.abs(e64)
        ok |= a64 == e64  # equal infinities
        if equal_nan:
            ok |= np.isnan(a64) & np.isnan(e64)
    if ok.all():
        return
    raise AssertionError(msg or _report(a64, e64, diff, ok, rtol, atol))


def _report(a, e, diff, ok, rtol, atol):
    bad = ~ok
    total = ok.size
    with np.errstate(all="ignore"):
        relative = np.where(e != 0, diff / np.abs(e), np.inf)
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst_abs = np.unravel_index(np.argmax(np.where(bad, diff, -1)), a.shape) if a.ndim \
        else ()
    worst_rel = np.unravel_index(np.argmax(np.where(bad, relative, -1)), a.shape) if a.ndim \
        else ()
    if total == 1:
        return (f"Scalars are not close!\n\nExpected {e.reshape(-1)[0]} but got "
                f"{a.reshape(-1)[0]}.\nAbsolute difference: {diff.reshape(-1)[0]} (up to "
                f"{atol} allowed)\nRelative difference: {relative.reshape(-1)[0]} (up to "
                f"{rtol} allowed)")
    return ("Tensor-likes are not close!\n\n"
            f"Mismatched elements: {int(bad.sum())} / {total} "
            f"({100.0 * bad.sum() / total:.1f}%)\n"
            f"Greatest absolute difference: {diff[worst_abs]} at index {tuple(worst_abs)} "
            f"(up to {atol} allowed)\n"
            f"Greatest relative difference: {relative[worst_rel]} at index "
            f"{tuple(worst_rel)} (up to {rtol} allowed)")
