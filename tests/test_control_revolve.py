"""Tests for adkit.control.revolve: binomial checkpointing arithmetic and schedules.

The closed form is checked against two independent minima: a dynamic
program over "advance m, snapshot, reverse tail, reverse head" splits, and,
for tiny chains, an exhaustive shortest-path search over every sequence of
actions (which assumes nothing about the shape of optimal schedules).
"""

from collections import deque
from functools import lru_cache
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from adkit.control import revolve as rv
from adkit.control.revolve import Action, Kind


# --------------------------------------------------------------------------
# Reference minima
# --------------------------------------------------------------------------

@lru_cache(maxsize=None)
def dp_min(n, s):
    """Minimal ADVANCE steps to reverse n steps, x_0 in a slot, s slots in all."""
    if n <= 1:
        return 0
    if s == 0:
        return math.inf
    return min(m + dp_min(n - m, s - 1) + dp_min(m, s) for m in range(1, n))


def exhaustive_min(n, s):
    """Shortest path over all action sequences (0-1 BFS; ADVANCE 1 costs 1).

    State: (state in hand or -1, slot contents, next step to reverse).
    """
    start = (0, (-1,) * s, n - 1)
    dist = {start: 0}
    todo = deque([(0, start)])
    while todo:
        d, state = todo.popleft()
        if d > dist[state]:
            continue
        hand, slots, nxt = state
        if nxt < 0:
            return d
        moves = []
        if hand >= 0 and hand < nxt:
            moves.append((1, (hand + 1, slots, nxt)))
        if hand == nxt:
            moves.append((0, (-1, slots, nxt - 1)))
        for j in range(s):
            if hand >= 0:
                moves.append((0, (hand, slots[:j] + (hand,) + slots[j + 1:], nxt)))
            if slots[j] >= 0:
                moves.append((0, (slots[j], slots, nxt)))
        for cost, new in moves:
            if d + cost < dist.get(new, math.inf):
                dist[new] = d + cost
                (todo.append if cost else todo.appendleft)((d + cost, new))
    return math.inf


def check_schedule(n, s):
    """Simulate schedule(n, s) and check every property the spec asks for."""
    actions = rv.schedule(n, s)
    res = rv.simulate(actions, n)
    assert res.reversed_steps == tuple(range(n - 1, -1, -1))
    assert res.slots_used <= s
    assert all(a.arg < s for a in actions if a.kind in (Kind.TAKESHOT, Kind.RESTORE))
    assert res.forward_steps == rv.binomial_forward_steps(n, s)
    # The part before FIRSTURN is a plain forward sweep to x_{n-1}.
    first = [a.kind for a in actions].index(Kind.FIRSTURN)
    prefix = actions[:first]
    assert all(a.kind in (Kind.ADVANCE, Kind.TAKESHOT) for a in prefix)
    assert sum(a.arg for a in prefix if a.kind == Kind.ADVANCE) == n - 1
    return actions, res


# --------------------------------------------------------------------------
# Closed form
# --------------------------------------------------------------------------

def test_closed_form_equals_dp_minimum():
    for s in range(1, 7):
        for n in range(0, 41):
            assert rv.binomial_forward_steps(n, s) == dp_min(n, s), (n, s)


def test_closed_form_equals_exhaustive_minimum():
    for s in range(1, 5):
        for n in range(1, 10 if s < 4 else 7):
            assert rv.binomial_forward_steps(n, s) == exhaustive_min(n, s), (n, s)


def test_repetition_number_brackets_n():
    for s in range(1, 9):
        for n in range(2, 300):
            t = rv.repetition_number(n, s)
            assert rv.beta(s, t - 1) < n <= rv.beta(s, t), (n, s, t)
    assert rv.repetition_number(0, 3) == rv.repetition_number(1, 3) == 0
    assert rv.repetition_number(1000, 10) == 4


def test_spec_example_1000_steps_10_snapshots():
    assert rv.binomial_forward_steps(1000, 10) == 3636
    _, res = check_schedule(1000, 10)
    assert res.forward_steps == 3636
    assert res.slots_used == 10
    # Documented split: 999 for the first sweep, the rest recomputation.
    assert res.forward_steps - (1000 - 1) == 2637


def test_known_counts():
    for n in range(1, 60):
        assert rv.binomial_forward_steps(n, 1) == n * (n - 1) // 2
        for s in (n - 1, n, n + 5):
            if s >= 1:
                assert rv.binomial_forward_steps(n, s) == n - 1
    assert rv.binomial_forward_steps(0, 1) == 0
    assert rv.binomial_forward_steps(10**6, 10**9) == 10**6 - 1


# --------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------

@pytest.mark.parametrize("s", [1, 2, 3, 4, 5, 8, 13])
def test_schedule_small_grid(s):
    for n in range(1, 80):
        check_schedule(n, s)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2000), s=st.integers(1, 70))
def test_schedule_property(n, s):
    check_schedule(n, s)


def test_schedule_large_edges():
    for n, s in [(2000, 1), (2000, 2), (2000, 1999), (2000, 5000), (5000, 7)]:
        check_schedule(n, s)


def test_edge_schedules():
    assert rv.schedule(0, 1) == ()
    assert rv.schedule(0, 0) == ()
    assert rv.simulate((), 0) == (0, 0, ())
    assert rv.schedule(1, 1) == (Action(Kind.FIRSTURN, 0),)
    assert rv.schedule(1, 0) == (Action(Kind.FIRSTURN, 0),)
    # s = 1: walk from x_0 each time, never snapshot anything but x_0.
    acts, res = check_schedule(6, 1)
    assert {a.arg for a in acts if a.kind == Kind.TAKESHOT} == {0}
    assert res.forward_steps == 15
    # Store-everything regime: every advance is one step, no step twice.
    acts, res = check_schedule(6, 5)
    assert all(a.arg == 1 for a in acts if a.kind == Kind.ADVANCE)
    assert res.forward_steps == 5 and res.slots_used == 5


def test_exact_small_schedule():
    k = Kind
    assert rv.schedule(3, 2) == (
        Action(k.TAKESHOT, 0), Action(k.ADVANCE, 1), Action(k.TAKESHOT, 1),
        Action(k.ADVANCE, 1), Action(k.FIRSTURN, 2), Action(k.RESTORE, 1),
        Action(k.YOUTURN, 1), Action(k.RESTORE, 0), Action(k.YOUTURN, 0))


def test_numpy_integers_accepted():
    assert rv.schedule(np.int64(7), np.int32(3)) == rv.schedule(7, 3)
    assert rv.binomial_forward_steps(np.int64(1000), np.int64(10)) == 3636


@pytest.mark.parametrize("fn", [rv.schedule, rv.binomial_forward_steps,
                                rv.repetition_number])
def test_invalid_input(fn):
    with pytest.raises(ValueError, match="n must be >= 0"):
        fn(-1, 3)
    with pytest.raises(ValueError, match="at least one snapshot"):
        fn(2, 0)
    with pytest.raises(ValueError, match="s must be >= 0"):
        fn(1, -1)
    with pytest.raises(TypeError):
        fn(5, 2.0)


# --------------------------------------------------------------------------
# sqrt policy, simulator, array encoding
# --------------------------------------------------------------------------

def test_sqrt_snapshots():
    assert [rv.sqrt_snapshots(n) for n in (0, 1, 2, 4, 5, 9, 10, 1000)] == \
        [1, 1, 2, 2, 3, 3, 4, 32]
    for n in range(1, 3000):
        s = rv.sqrt_snapshots(n)
        assert (s - 1) ** 2 < n <= s * s
        assert rv.binomial_forward_steps(n, s) < 2.5 * n
    with pytest.raises(ValueError):
        rv.sqrt_snapshots(-1)


@pytest.mark.parametrize("actions, n, msg", [
    ([(Kind.YOUTURN, 0)], 1, "FIRSTURN must be the first"),
    ([(Kind.FIRSTURN, 0)], 2, "FIRSTURN must be the first"),
    ([(Kind.ADVANCE, 1), (Kind.FIRSTURN, 1), (Kind.FIRSTURN, 0)], 2,
     "FIRSTURN must be the first"),
    ([(Kind.ADVANCE, 1), (Kind.FIRSTURN, 1), (Kind.YOUTURN, 0)], 2,
     "state in hand is None"),
    ([(Kind.RESTORE, 0)], 2, "slot 0 is empty"),
    ([(Kind.ADVANCE, 3)], 2, "cannot advance"),
    ([(Kind.ADVANCE, 0)], 2, "cannot advance"),
    ([(Kind.TAKESHOT, -1)], 2, "bad slot"),
    ([(9, 0)], 2, "9"),
])
def test_simulate_rejects_bad_schedules(actions, n, msg):
    with pytest.raises(ValueError, match=msg):
        rv.simulate(actions, n)


def test_as_arrays_round_trip():
    acts = rv.schedule(50, 4)
    kinds, args = rv.as_arrays(acts)
    assert kinds.dtype == args.dtype == np.int64
    assert kinds.shape == args.shape == (len(acts),)
    assert tuple(Action(Kind(k), int(a)) for k, a in zip(kinds, args)) == acts
    assert rv.simulate(list(zip(kinds.tolist(), args.tolist())), 50) == \
        rv.simulate(acts, 50)
    empty_k, empty_a = rv.as_arrays(())
    assert empty_k.shape == empty_a.shape == (0,) and empty_k.dtype == np.int64


def test_actions_are_immutable():
    a = rv.schedule(4, 2)[0]
    with pytest.raises(AttributeError):
        a.kind = Kind.RESTORE
    assert repr(a) == "TAKESHOT(0)"
