"""Reusable memory for the index blocks the sparsity pass makes and drops in one call.

Owns: `session()` (a pass call's scope) and `empty(shape, dtype)` (a block carved from
the session's buffer). Does not: know what the blocks hold (index_sets.py).

Why: a pass call makes a few MB of index blocks and frees them all when it returns. With
glibc's malloc, a free that large at the top of the heap is handed back to the system, so
the next call pays a page fault for every 4 KB it writes again (at Brusselator N = 128
that doubled the pass's time in a fresh process). Blocks carved from one buffer that
outlives the call reuse the same pages.

Safety: every block is a numpy view, and a view keeps its base array referenced. A buffer
is reused only when nothing but this module references it (no block of an earlier call
is alive: a caller kept a Deps, say); otherwise the session takes a new buffer and the
old one lives on with its blocks. Buffers are per thread.
"""
import contextlib
import sys
import threading

import numpy as np

# bytes; a call that needs more than this carves what fits and allocates the rest
MAX_BYTES = 64 << 20
# block starts are aligned to this many bytes (a cache line: SIMD loads stay aligned)
ALIGN = 64


class _State(threading.local):
    buffer = None  # uint8, the current session's memory
    used = 0  # bytes carved so far in this session
    wanted = 0  # bytes the last sessions asked for (the next buffer's size)
    depth = 0  # nested sessions (a loop body's pass inside the graph's)


_STATE = _State()
# sys.getrefcount of a buffer referenced only by _STATE.buffer (that attribute and the
# getrefcount argument)
_UNREFERENCED = 2


@contextlib.contextmanager
def session():
    """Blocks made inside share one reusable buffer (see the module doc)."""
    state = _STATE
    if state.depth == 0:
        _start(state)
    state.depth += 1
    try:
        yield
    finally:
        state.depth -= 1
        if state.depth == 0:
            state.wanted = min(max(state.wanted, state.used), MAX_BYTES)


def _start(state):
    reusable = state.buffer is not None and \
        sys.getrefcount(state.buffer) == _UNREFERENCED and \
        state.buffer.size >= state.wanted
    if not reusable:
        state.buffer = np.empty(state.wanted + ALIGN, np.uint8) if state.wanted else None
    # the first block starts at an aligned address (numpy aligns only to 16 bytes)
    state.used = 0 if state.buffer is None else \
        -state.buffer.__array_interface__["data"][0] % ALIGN


def empty(shape, dtype):
    """An uninitialized array, from the session's buffer when one is open and has room."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= s
    state = _STATE
    start = state.used
    if state.depth == 0 or state.buffer is None or start + nbytes > state.buffer.size:
        if state.depth:
            state.used = start + nbytes  # the next session's buffer holds it
        return np.empty(shape, dtype)
    state.used = start + -(-nbytes // ALIGN) * ALIGN
    return state.buffer[start:start + nbytes].view(dtype).reshape(shape)


def full(shape, value, dtype):
    block = empty(shape, dtype)
    block.fill(value)
    return block
