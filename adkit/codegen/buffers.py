"""Where a compiled graph's values live: the buffer list a plan runs on, and Layouts.

Owns: `Buffer` and one subclass per way a buffer gets its array (an input, a constant, a
reused intermediate, a graph result, a numpy step's published value, the status of a
failed check), `Layout` (a value as a buffer, an element offset and element strides)
and the stride helpers. Does not: decide which values get buffers (plan.py), emit code
(program.py) or run (jit.py).
Native code sees buffers only by index: entry functions read the data pointers of a
Python list of arrays, one per Buffer, that jit.py fills per call.
"""
import ctypes
import functools
import sys
from collections import namedtuple

import numpy as np

from ..ops._helpers import c_strides

# A value in memory: buffer index, element offset of its first element, shape, element
# strides (0 where broadcast, negative where flipped), numpy dtype.
Layout = namedtuple("Layout", ("buffer", "offset", "shape", "strides", "dtype"))


contiguous_strides = c_strides  # element strides of a C-ordered array of a shape


def contiguous(buffer, shape, dtype):
    """The Layout of a whole C-ordered buffer."""
    shape = tuple(shape)
    return Layout(buffer, 0, shape, contiguous_strides(shape), np.dtype(dtype))


ALIGN = 64  # bytes: an AVX-512 register; a vector load that crosses a line costs two


def aligned_empty(shape, dtype):
    """np.empty whose data starts on an ALIGN-byte boundary (malloc gives 16: a loop
    that reads a 32x32 weight at every step ran 1.5x slower when it was misaligned)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def new_blocks(sizes):
    """Fresh memory blocks of these byte sizes (a plan's shared blocks), ALIGN-aligned,
    cut from one allocation. One of _HUGE_FROM bytes or more starts on a 2 MB boundary
    and asks Linux for transparent huge pages (madvise): its first touch then faults a
    2 MB page at a time, not a 4 KB one. Fresh 4 KB pages cost ~2.4 us each on this
    CI's virtual machine: 2.5 of a GMM gradient's first call's 5.2 ms at ADBench's
    medium size (4.3 MB of blocks), 0.3-0.5 ms with huge pages."""
    offsets, total = [], 0
    for n in sizes:
        offsets.append(total)
        total += -(-int(n) // ALIGN) * ALIGN
    arena = _huge_empty(total) if total >= _HUGE_FROM else aligned_empty(total, np.uint8)
    return [arena[start:start + int(n)] for start, n in zip(offsets, sizes)]


_HUGE_PAGE = 1 << 21
_HUGE_FROM = 1 << 20
_MADV_HUGEPAGE = 14  # Linux's


def _huge_empty(nbytes):
    """nbytes of new memory on a huge-page boundary, advised to use huge pages (where
    the kernel offers them only on request: THP "madvise", Debian's default)."""
    span = -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE
    raw = np.empty(span + _HUGE_PAGE, np.uint8)
    start = -raw.ctypes.data % _HUGE_PAGE
    arena = raw[start:start + span]
    madvise = _madvise()
    if madvise is not None:
        madvise(arena.ctypes.data, span, _MADV_HUGEPAGE)  # (a refusal changes nothing)
    return arena[:nbytes]


@functools.lru_cache(maxsize=None)
def _madvise():
    """libc's madvise on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


def aligned(array):
    """`array`, or an aligned copy of it when its data is not ALIGN-byte aligned."""
    if array.ctypes.data % ALIGN == 0:
        return array
    copy = aligned_empty(array.shape, array.dtype)
    copy[...] = array
    return copy


def broadcast_strides(layout, shape):
    """Element strides for reading `layout` at the indices of `shape` (broadcasting)."""
    lead = len(shape) - len(layout.shape)
    return (0,) * lead + tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(
        layout.shape, shape[lead:], layout.strides))


def unit_strides(strides, shape, new_shape):
    """Element strides for `new_shape`, which has the dims of `shape` but for unit ones,
    addressing the same elements as `strides` does for `shape` (0 along unit dims);
    None when the two shapes differ in more than unit dims."""
    if [d for d in shape if d != 1] != [d for d in new_shape if d != 1]:
        return None
    kept = iter(s for s, d in zip(strides, shape) if d != 1)
    return tuple(0 if d == 1 else next(kept) for d in new_shape)


def element_offsets(layout):
    """Each element's offset in its buffer, in row-major (logical) order."""
    offsets = np.full(layout.shape, layout.offset, np.int64)
    for d, (n, s) in enumerate(zip(layout.shape, layout.strides)):
        shape = [1] * len(layout.shape)
        shape[d] = n
        offsets = offsets + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return offsets.reshape(-1)


class Buffer:
    """Entry `index` of the buffer list: an array of `shape` and `dtype`. Subclasses say
    where the array comes from; this base is for arrays each call supplies."""

    reused = False  # whether its memory is this thread's, kept between calls

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, tuple(shape), np.dtype(dtype)

    @property
    def nbytes(self):
        return max(1, int(np.prod(self.shape)) * self.dtype.itemsize)

    def template(self, blocks):
        """Its array in a thread's reusable buffer list (`blocks`: the shared memory
        blocks), or None when each call puts one in."""
        return None

    def __repr__(self):
        return f"<{type(self).__name__} {self.index}: {self.dtype.name}{list(self.shape)}>"


class InputBuffer(Buffer):
    """Flat input `position`: each call puts in the caller's array (C-contiguous and
    aligned, else a contiguous copy)."""

    def __init__(self, index, shape, dtype, position):
        super().__init__(index, shape, dtype)
        self.position = position


class ConstantBuffer(Buffer):
    """An array fixed when the plan is made: a graph constant or an index table."""

    def __init__(self, index, array):
        super().__init__(index, array.shape, array.dtype)
        self.array = aligned(np.ascontiguousarray(array))

    def template(self, blocks):
        return self.array


class TempBuffer(Buffer):
    """An intermediate made by native code, kept between calls on each thread. `block`
    is the shared memory block it is a view of (its lifetime overlaps no other user of
    the block; see Planner.share_buffers), or None for memory of its own."""

    reused = True

    def __init__(self, index, shape, dtype):
        super().__init__(index, shape, dtype)
        self.block = None

    def template(self, blocks):
        if self.block is None:
            return aligned_empty(self.shape, self.dtype)
        return np.ndarray(self.shape, self.dtype, buffer=blocks[self.block])


class ResultBuffer(Buffer):
    """A graph output made by native code: fresh memory per call (jit.py recycles a
    large one once the caller has let go of it)."""


class StatusBuffer(Buffer):
    """Where a native call whose check failed (an index out of range) reports why: three
    int64 (the bad value, the dim, its size) per thread, read by the segment's Python
    side when the entry function returns the check's code (see program.Entry.fail)."""

    def __init__(self, index):
        super().__init__(index, (3,), np.int64)

    def template(self, blocks):
        return np.zeros(3, np.int64)


class PublishedBuffer(Buffer):
    """The result of a numpy step that native code reads: that step puts it in each
    call (C-contiguous, checked against the traced shape and dtype)."""
