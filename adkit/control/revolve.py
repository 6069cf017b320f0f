"""Binomial (Revolve) checkpointing schedules for reversing a chain of steps.

Owns: the arithmetic and the offline schedules of Griewank's binomial
checkpointing (A. Griewank and A. Walther, "Algorithm 799: revolve", ACM TOMS
26(1), 2000): the minimal number of forward steps needed to reverse ``n``
steps with ``s`` snapshot slots, an optimal schedule achieving it, the snapshot
count behind ``checkpoint="sqrt"``, a reference simulator that checks a
schedule, and a flat numpy encoding of schedules for loop executors.

Does not own: running anything.  This module knows nothing about tensors,
carries, tapes or adkit (it imports no adkit module); the loop ops in
``adkit.control`` interpret the actions below with their own step functions.

The model
---------
A chain ``x_{i+1} = f_i(x_i)``, ``i = 0 .. n-1``, is to be reversed: the
adjoint of step ``n-1`` first, then ``n-2``, ..., down to step ``0``.  There
are ``s`` snapshot slots, ``0 .. s-1``; slot 0 holds the initial state
``x_0`` (so the initial carry counts among the ``s``).  Actions:

* ``ADVANCE k``   -- evaluate ``k`` steps forward from the state in hand,
  recording nothing.
* ``TAKESHOT j``  -- copy the state in hand into slot ``j`` (overwriting it).
* ``RESTORE j``   -- make the state in slot ``j`` the state in hand.
* ``FIRSTURN i``  -- the first reverse step: the state in hand is ``x_i`` with
  ``i = n-1``; evaluate step ``i`` under the tape/VJP and reverse it.
* ``YOUTURN i``   -- the same for every later step ``i < n-1``.

After a turn the state in hand is used up; the next action restores a slot.

Counting convention
-------------------
``binomial_forward_steps(n, s)`` and ``simulate(...).forward_steps`` count the
step evaluations done by ``ADVANCE`` actions, *including the first forward
sweep* from ``x_0`` to ``x_{n-1}``.  They do *not* count the ``n`` evaluations
of step ``i`` inside its turn (every reverse step evaluates its own step once
under the VJP, whatever the schedule, so that part is schedule independent).
Hence:

* total step evaluations = ``binomial_forward_steps(n, s) + n``;
* with no recomputation (``s >= n - 1``) the count is ``n - 1`` (the sweep);
* recomputations beyond that sweep = ``binomial_forward_steps(n, s) - (n-1)``;
* ``s = 1`` (recompute from ``x_0`` for every step) gives ``n (n - 1) / 2``.

This is the count of the paper's ``t(l, c) = r l - beta(c + 1, r - 1)``.  The
spec's example: ``n = 1000, s = 10`` gives 3636 (= 999 for the sweep + 2637
recomputed steps; 4636 evaluations if the 1000 taped ones are added).

Why ``s >= n - 1`` already means "no recomputation": ``x_{n-1}`` is never
snapshotted, it goes straight into the first turn.

Executor note: the actions before ``FIRSTURN`` only advance and take
snapshots (exactly ``n - 1`` steps), so an executor can run that prefix in the
primal pass and the rest in the backward pass.
"""

from __future__ import annotations

import enum
import math
import operator
from typing import NamedTuple, Sequence

import numpy as np

__all__ = [
    "Kind", "Action", "SimResult", "beta", "repetition_number",
    "binomial_forward_steps", "schedule", "sqrt_snapshots", "simulate",
    "as_arrays",
]


class Kind(enum.IntEnum):
    """Action kinds; the integer values are the codes used by ``as_arrays``."""

    ADVANCE = 0   # arg: number of steps (>= 1)
    TAKESHOT = 1  # arg: slot index
    RESTORE = 2   # arg: slot index
    FIRSTURN = 3  # arg: step index reversed (always n - 1)
    YOUTURN = 4   # arg: step index reversed


class Action(NamedTuple):
    """One schedule action: an immutable ``(kind, arg)`` pair."""

    kind: Kind
    arg: int

    def __repr__(self) -> str:
        return f"{self.kind.name}({self.arg})"


class SimResult(NamedTuple):
    """What ``simulate`` measured on a schedule."""

    forward_steps: int         # steps evaluated by ADVANCE (see module doc)
    slots_used: int            # 1 + the largest slot index written
    reversed_steps: tuple      # step indices in the order they were reversed


# --------------------------------------------------------------------------
# Arithmetic
# --------------------------------------------------------------------------

def _check(n, s) -> tuple[int, int]:
    """Validate and normalize ``(n, s)``; numpy integers are accepted."""
    n, s = operator.index(n), operator.index(s)
    if n < 0:
        raise ValueError(f"number of steps n must be >= 0, got n={n}")
    if s < 0:
        raise ValueError(f"number of snapshots s must be >= 0, got s={s}")
    if n > 1 and s < 1:
        # With no slot, x_0 is lost after the first advance and nothing
        # before step n-1 can be reversed.
        raise ValueError(
            f"reversing n={n} steps needs at least one snapshot slot "
            f"(slot 0 holds the initial state), got s={s}")
    return n, s


def beta(s: int, t: int) -> int:
    """``C(s + t, s)``: the most steps ``s`` slots reverse with ``t`` repetitions.

    Defined as 0 for ``t < 0`` so that the closed forms below need no
    special cases at ``t = 0``.
    """
    return math.comb(s + t, s) if t >= 0 else 0


def repetition_number(n: int, s: int) -> int:
    """Smallest ``t >= 0`` with ``beta(s, t) >= n``.

    ``t`` is the largest number of times any single step is evaluated by
    ``ADVANCE`` in an optimal schedule (0 for ``n <= 1``; ``n - 1`` for
    ``s = 1``).
    """
    n, s = _check(n, s)
    if n <= 1:
        return 0
    if s == 1:                      # beta(1, t) = t + 1; avoid an O(n) loop
        return n - 1
    t, b = 0, 1                     # b = beta(s, t), updated incrementally
    while b < n:
        t += 1
        b = b * (s + t) // t
    return t


def binomial_forward_steps(n: int, s: int) -> int:
    """Minimal ``ADVANCE`` step evaluations to reverse ``n`` steps with ``s`` slots.

    Closed form ``t*n - beta(s + 1, t - 1)`` with ``t = repetition_number(n, s)``
    (Griewank & Walther 2000).  Counts the first forward sweep, not the ``n``
    taped evaluations inside the turns; see the module docstring.  Examples:
    ``(1000, 10) -> 3636``; ``s >= n - 1 -> n - 1``; ``s = 1 -> n(n-1)/2``.
    """
    n, s = _check(n, s)
    t = repetition_number(n, s)
    return t * n - beta(s + 1, t - 1)


def sqrt_snapshots(n: int) -> int:
    """Slots used for ``checkpoint="sqrt"``: ``ceil(sqrt(n))``, at least 1.

    With ``s >= sqrt(n)`` the repetition number is at most 3, and the
    binomial schedule then costs under ``2.5 n`` advance steps, since
    ``3n - beta(s + 1, 2) < 3n - n/2`` (e.g. n=1000 -> s=32 -> 2405).
    """
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"number of steps n must be >= 0, got n={n}")
    return max(1, math.isqrt(n - 1) + 1) if n > 0 else 1


def _split(n: int, s: int) -> int:
    """An optimal first advance ``m`` (1 <= m < n) for ``n >= 2`` steps, ``s`` slots.

    The cost of advancing ``m``, reversing the tail ``n - m`` with ``s - 1``
    slots, then the head ``m`` with ``s`` slots is
    ``m + F(n - m, s - 1) + F(m, s)``.  ``F(., s)`` is piecewise linear and
    convex with slope ``r`` on ``[beta(s, r-1), beta(s, r)]``; by Pascal's rule
    the sum equals ``F(n, s)`` exactly when the head lies in the slope-(t-1)
    piece and the tail in the slope-t piece of ``F(., s-1)``.  That
    intersection is never empty; any point of it is optimal.
    """
    if s == 1:
        return n - 1                # no slot for the tail: walk to x_{n-1}
    t = repetition_number(n, s)
    lo = max(1, n - beta(s - 1, t), beta(s, t - 2))
    hi = min(n - 1, n - beta(s - 1, t - 1), beta(s, t - 1))
    assert lo <= hi, (n, s, lo, hi)
    # The largest m keeps tails short, so fewer snapshots get written.
    return hi


# --------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------

def schedule(n: int, s: int) -> tuple[Action, ...]:
    """An optimal offline Revolve schedule reversing ``n`` steps with ``s`` slots.

    Slot ``j`` is only ever written at recursion depth ``j``, so slot indices
    stay below ``s``.  The schedule reverses steps ``n-1, ..., 0`` exactly
    once each and its ``ADVANCE`` steps add up to ``binomial_forward_steps``.
    ``n = 0`` gives ``()``; ``n = 1`` gives ``(FIRSTURN(0),)`` (no snapshot is
    needed: ``x_0`` is in hand).  Built iteratively, because ``s = 1`` nests
    ``n`` deep and would overflow Python's recursion limit.
    """
    n, s = _check(n, s)
    if n == 0:
        return ()
    out: list[Action] = []
    if n >= 2:
        out.append(Action(Kind.TAKESHOT, 0))
    in_hand: int | None = 0           # index of the state in hand, if any
    # Tasks (a, b, slot, slots): reverse steps a..b-1; x_a is in `slot`
    # (or in hand when b - a == 1); `slots` counts `slot` and those above it.
    stack = [(0, n, 0, s)]
    while stack:
        a, b, slot, slots = stack.pop()
        if in_hand != a:
            out.append(Action(Kind.RESTORE, slot))
            in_hand = a
        if b - a == 1:
            kind = Kind.FIRSTURN if a == n - 1 else Kind.YOUTURN
            out.append(Action(kind, a))
            in_hand = None
            continue
        m = _split(b - a, slots)
        out.append(Action(Kind.ADVANCE, m))
        in_hand = a + m
        if b - in_hand >= 2:
            # A single-step tail is turned straight from the hand; longer
            # tails are revisited after RESTORE, so they need the slot.
            out.append(Action(Kind.TAKESHOT, slot + 1))
        stack.append((a, a + m, slot, slots))              # head: later
        stack.append((a + m, b, slot + 1, slots - 1))      # tail: next
    return tuple(out)


def simulate(actions: Sequence[Action], n: int) -> SimResult:
    """Run ``actions`` on a symbolic chain of ``n`` steps and measure them.

    States are tracked by index only.  Raises ``ValueError`` on any action an
    executor could not carry out: advancing or turning without the right
    state in hand, restoring an empty slot, going past ``x_n``, a
    ``FIRSTURN`` that is not the first turn on step ``n-1``, a negative slot,
    or an unknown kind.  It does not itself demand the full reversal; callers
    compare ``reversed_steps`` with what they expect.
    """
    n = operator.index(n)
    slots: dict[int, int] = {}
    in_hand: int | None = 0
    forward = 0
    reversed_steps: list[int] = []
    for pos, (kind, arg) in enumerate(actions):
        where = f"action {pos} ({Kind(kind).name} {arg})"
        if kind == Kind.ADVANCE:
            if in_hand is None or arg < 1 or in_hand + arg > n:
                raise ValueError(f"{where}: cannot advance from {in_hand}")
            in_hand += arg
            forward += arg
        elif kind == Kind.TAKESHOT:
            if in_hand is None or arg < 0:
                raise ValueError(f"{where}: nothing to store or bad slot")
            slots[arg] = in_hand
        elif kind == Kind.RESTORE:
            if arg not in slots:
                raise ValueError(f"{where}: slot {arg} is empty")
            in_hand = slots[arg]
        elif kind in (Kind.FIRSTURN, Kind.YOUTURN):
            first = not reversed_steps
            if (kind == Kind.FIRSTURN) != first or (first and arg != n - 1):
                raise ValueError(f"{where}: FIRSTURN must be the first turn, on step n-1")
            if in_hand != arg:
                raise ValueError(f"{where}: state in hand is {in_hand}, not {arg}")
            reversed_steps.append(arg)
            in_hand = None
        else:
            raise ValueError(f"{where}: unknown action kind")
    used = 1 + max(slots) if slots else 0
    return SimResult(forward, used, tuple(reversed_steps))


def as_arrays(actions: Sequence[Action]) -> tuple[np.ndarray, np.ndarray]:
    """Encode a schedule as two int64 arrays ``(kinds, args)`` of equal length.

    ``kinds[i]`` is the ``Kind`` code (0 ADVANCE, 1 TAKESHOT, 2 RESTORE,
    3 FIRSTURN, 4 YOUTURN) and ``args[i]`` its argument (steps, slot, or step
    index), so a native or Python loop can walk the schedule without Python
    objects.  ``Action(Kind(k), int(a))`` inverts it.
    """
    kinds = np.fromiter((int(a.kind) for a in actions), dtype=np.int64,
                        count=len(actions))
    args = np.fromiter((int(a.arg) for a in actions), dtype=np.int64,
                       count=len(actions))
    return kinds, args
