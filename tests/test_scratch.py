"""The sparsity pass's scratch memory (adkit/ir/passes/scratch.py): blocks are reused
across calls only when no block of an earlier call is alive."""
import threading

import numpy as np

from adkit.ir.passes import scratch


def _address(a):
    return a.__array_interface__["data"][0]


def _one_session(shape=(4, 1000), fill=7):
    with scratch.session():
        block = scratch.empty(shape, np.int32)
        block.fill(fill)
        return block


def test_a_second_call_reuses_the_first_calls_memory():
    _one_session()  # sizes the buffer
    first = _address(_one_session())
    second = _address(_one_session())
    assert first == second


def test_a_block_kept_from_an_earlier_call_is_never_overwritten():
    _one_session()
    kept = _one_session(fill=1)
    again = _one_session(fill=2)
    assert (kept == 1).all() and (again == 2).all()
    assert not np.shares_memory(kept, again)


def test_blocks_of_one_session_do_not_overlap_and_are_aligned():
    _one_session((3, 500))
    with scratch.session():
        a = scratch.full((3, 100), -1, np.int32)
        b = scratch.full((7,), 5, np.int64)
        c = scratch.empty((2, 2), bool)
        assert not np.shares_memory(a, b) and not np.shares_memory(b, c)
        assert _address(b) % scratch.ALIGN == 0 and (a == -1).all() and (b == 5).all()


def test_nested_sessions_share_the_outer_buffer():
    _one_session((8, 1000))
    with scratch.session():
        a = scratch.full((1000,), 1, np.int32)
        with scratch.session():
            b = scratch.full((1000,), 2, np.int32)
        c = scratch.full((1000,), 3, np.int32)
        assert (a == 1).all() and (b == 2).all() and (c == 3).all()


def test_outside_a_session_blocks_are_plain_arrays():
    block = scratch.empty((3, 3), np.float64)
    assert block.base is None and block.shape == (3, 3)


def test_an_overflowing_session_falls_back_and_grows_the_next_buffer():
    with scratch.session():
        big = scratch.empty((1 << 16,), np.int32)
        big.fill(3)
    assert (big == 3).all()
    with scratch.session():
        fits = scratch.empty((1 << 16,), np.int32)
        assert fits.base is not None  # carved from the (grown) buffer


def test_threads_have_their_own_buffers():
    _one_session()
    seen = {}

    def work(name):
        seen[name] = _one_session(fill=ord(name[0]))

    threads = [threading.Thread(target=work, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (seen["a"] == ord("a")).all() and (seen["b"] == ord("b")).all()
    assert not np.shares_memory(seen["a"], seen["b"])
