"""Backfill with reservations, as Slurm's backfill scheduler does it.

A pass tries the waiting units in the queue's order (standing, fair share,
priority, arrival). What happens after a unit does not fit is the policy's
``backfill``:

- ``off``: every later unit that fits starts (first fit; a wide unit can
  wait while narrower ones keep passing it);
- ``fcfs``: nothing passes it: every later unit of the pass waits behind it;
- ``easy``: the first unit that does not fit gets a **reservation** at its
  earliest start, computed from the expected ends of the running work; a
  later unit starts only if it does not delay that reservation;
- ``conservative``: every unit that does not fit (up to ``depth`` of them)
  gets a reservation, each computed with the ones before it; a later unit
  starts only if it delays none.

Expected ends are the running jobs' ``timeLimit`` when they give one, else
their duration as the simulator knows it; a service never ends. A unit's
earliest start is the first instant ``t`` (now, or an expected end) such
that it fits on the nodes as they will be over ``[t, t + its expected
run)``: the running work that ends by ``t`` gone, every reservation that
overlaps that span held. It is found by placing the unit tentatively on the
table so changed (the same placement as any other: gangs, domains, devices),
so a reservation is also where it will go.

A later unit ``C`` that fits now may start when it ends before every
reservation starts; otherwise each row it takes must still hold what every
reservation that starts before ``C`` ends leaves free on that row at its
start (the **shadow** of the reservation: the nodes' free room then, with
the reservations of that instant, and the units started before ``C`` in this
pass that still run then, taken). This is a row check, like capacity
(``Reserved``), so a unit that is refused for it waits with the reason "held
for a reservation: <task> from t=<s>".

Reservations cover the default virtual clusters' tasks (the node table);
work in explicit virtual clusters is not reserved for and not held back.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from suanli.scheduling.filters import Check
from suanli.scheduling.reasons import Why, bound
from suanli.scheduling.statement import Statement
from suanli.scheduling.table import Allocation, CandidateTable

MODES = ("off", "fcfs", "easy", "conservative")


class Block:
    """Allocations summed per row: what the profile gives back or takes as
    one change per row (a gang of 64 one-cpu ranks on 8 nodes: 8 changes)."""

    __slots__ = ("allocs", "rows", "vecs", "total")

    def __init__(self, allocs: list[Allocation]) -> None:
        vec: dict[int, np.ndarray] = {}
        share: dict[int, dict[int, int]] = {}
        for a in allocs:
            vec[a.row] = vec[a.row] + a.vec if a.row in vec else a.vec.astype(np.int64)
            for slot, milli in zip(a.slots, a.milli):
                mine = share.setdefault(a.row, {})
                mine[slot] = mine.get(slot, 0) + milli
        self.allocs = [Allocation(row, v, tuple(share.get(row, {})), tuple(share.get(row, {}).values()))
                       for row, v in vec.items()]
        self.rows = np.fromiter(vec, np.int64, len(vec))
        self.vecs = np.stack(list(vec.values()), axis=1) if vec else np.zeros((0, 0), np.int64)
        self.total = self.vecs.sum(axis=1) if vec else 0

    def add_to(self, free: np.ndarray, sign: int) -> None:
        """``free[:, row] += sign * vec`` for each of its rows (rows are distinct)."""
        if self.rows.size:
            free[:, self.rows] += sign * self.vecs


@dataclass
class Reservation:
    """Where and when a waiting unit is expected to start."""

    seq: int  # the unit's number
    task: str  # its first task, to name it
    start: float
    end: float  # start plus its expected run (inf: it never ends)
    allocs: list[Allocation]  # one per member, as placed (its rows, when it starts)
    block: Block = field(repr=False, default=None)
    shadow: np.ndarray = field(repr=False, default=None)  # int64[R, N]: free room on each row at ``start``
    made_at: float = 0.0  # when it was first reserved (the same unit, later passes)


class Backfill:
    """The reservations of one pass, and the check later units pass."""

    def __init__(self, mode: str, depth: int, ends: Callable[[], list[tuple[float, list[Allocation]]]],
                 expected_s: Callable[[object], float]) -> None:
        """``ends()``: the running work's expected ends on the node table, as
        (time, allocations), soonest first; ``expected_s(unit)``: a waiting
        unit's expected run (inf: unknown or never ending)."""
        self.mode, self.depth = mode, depth
        self._ends_of, self.expected_s = ends, expected_s
        self.now = 0.0
        self.reservations: list[Reservation] = []
        self.blocked_by: str | None = None  # fcfs: the unit everything later waits behind
        self.queued = None  # fcfs: the reasons of those behind it
        self.first_made: dict[int, float] = {}  # unit -> when it was first reserved
        self._last: dict[int, Reservation] = {}  # the last pass's, by unit
        self._ends: list[tuple[float, list[Allocation]]] | None = None
        self._started: list[tuple[float, list[Allocation]]] = []  # started in this pass: (expected end, allocations)
        self.made = 0  # units reserved for (all passes)
        self.backfilled = 0  # units started in a pass after a reservation was made in it

    def begin(self, now: float) -> None:
        """A new pass: reservations are made again from the state now (where
        a unit's last one still holds at its start, on the same rows)."""
        self.now = now
        self._last = {r.seq: r for r in self.reservations}
        self.reservations = []
        self.blocked_by = None
        self._ends = None
        self._started = []

    @property
    def active(self) -> bool:
        return bool(self.reservations) or self.blocked_by is not None

    # ------------------------------------------------------------ a unit that waits

    def failed(self, layer, unit, reasons) -> None:
        """``unit`` did not fit: behind it, nothing passes (fcfs), or it gets a
        reservation (the first one: easy; up to ``depth``: conservative)."""
        if self.mode == "fcfs":
            if self.blocked_by is None:
                self.blocked_by = unit.tasks[0]
                self.queued = bound(Why("queued", task=unit.tasks[0]))  # (one object for all behind it)
            return
        if self.mode == "easy" and self.reservations or len(self.reservations) >= self.depth:
            return
        vcs = layer.state.vcs[unit.app.vc]
        if not vcs.default or any(r.seq == unit.seq for r in self.reservations):
            return
        got = self._earliest(layer, unit, vcs)
        if got is None:
            return
        start, allocs = got
        run = self.expected_s(unit)
        made = self.first_made.setdefault(unit.seq, self.now)
        if made == self.now:
            self.made += 1
        r = Reservation(unit.seq, unit.tasks[0], start, start + run, allocs, Block(allocs), made_at=made)
        self._shadow(r, vcs.table)
        self.reservations.append(r)
        reasons[Why("reservation", task=unit.tasks[0], made=round(made, 3), start=round(start, 3))] += 1

    def _running_ends(self) -> list[tuple[float, Block]]:
        if self._ends is None:
            self._ends = sorted([(t, Block(allocs)) for t, allocs in self._ends_of()] + self._started,
                                key=lambda e: e[0])
        return self._ends

    def _earliest(self, layer, unit, vcs) -> tuple[float, list[Allocation]] | None:
        """The first instant the unit fits for its whole expected run, and its
        allocations then; None when it never does (within what is known)."""
        table = vcs.table
        run = self.expected_s(unit)
        ends = self._running_ends()
        times = sorted({self.now, *(t for t, _ in ends if t > self.now and np.isfinite(t)),
                        *(r.end for r in self.reservations if np.isfinite(r.end))})
        reqs = layer.unit_requests(unit)
        need = sum(r.vec for r in reqs)
        free = table.free[:, :table.n].astype(np.int64)  # each row's room at t (a bound: no attempt below it)
        last = self._last.get(unit.seq)
        k = 0
        with Statement() as released:
            for t in times:
                while k < len(ends) and ends[k][0] <= t:
                    released.give(table, ends[k][1].allocs)
                    ends[k][1].add_to(free, 1)
                    k += 1
                overlap = [r for r in self.reservations if r.start < t + run and r.end > t]
                room = free.copy() if overlap else free
                for r in overlap:
                    r.block.add_to(room, -1)
                if (np.maximum(room, 0).sum(axis=1) < need).any():
                    continue  # too little room on all rows together
                with Statement(released) as probe:
                    for r in overlap:
                        probe.take(table, r.block.allocs)
                    if last is not None and t >= last.start and _room_for(table, last.allocs):
                        return t, last.allocs  # its rows still hold then: the reservations after it stay put
                    saved, layer.backfill = layer.backfill, None  # (no guard while it looks)
                    try:
                        result = layer.attempt(unit, vcs, reqs, allow_fewer=False, stmt=probe)
                    finally:
                        layer.backfill = saved
                    if result.ok:
                        return t, list(result.allocations)
        return None

    def _shadow(self, new: Reservation, table: CandidateTable) -> None:
        """A new reservation's shadow: the free room on each row at its start,
        as the profile says (the ends by then given back; it, and the
        reservations and this pass's started units that run then, taken);
        and the shadows of those that start while it runs lose its room."""
        free = table.free[:, :table.n].astype(np.int64)
        for t, block in self._running_ends():
            if t <= new.start:
                block.add_to(free, 1)
        for other in (*self.reservations, new):
            if other.start <= new.start < other.end:
                other.block.add_to(free, -1)
            if other is not new and new.start <= other.start < new.end:
                new.block.add_to(other.shadow, -1)
        new.shadow = free

    def pin(self, unit, table: CandidateTable) -> Pinned | None:
        """A unit reserved for in the last pass whose reserved rows hold it now
        is placed there (``Pinned``); None otherwise."""
        last = self._last.get(unit.seq)
        if last is None or last.start > self.now or not _room_for(table, last.allocs):
            return None
        return Pinned(last.allocs)

    # ------------------------------------------------------------ a later unit

    def guard(self, unit) -> list[Reservation]:
        """The reservations a unit of the pass must not delay: those that start
        before it would end (none when it ends before all of them)."""
        if not self.reservations:
            return []
        end = self.now + self.expected_s(unit)
        return [r for r in self.reservations if r.start < end]

    def started(self, unit, allocs: list[Allocation]) -> None:
        """A unit of the pass started on ``allocs``: it ends when expected (the
        profile of later reservations gives its room back then), and the
        shadows it runs into lose its room."""
        if not allocs:
            return
        if self.reservations:
            self.backfilled += 1
        end = self.now + self.expected_s(unit)
        block = Block(allocs)
        self._started.append((end, block))
        if self._ends is not None:
            bisect.insort(self._ends, (end, block), key=lambda e: e[0])
        for r in self.reservations:
            if r.start < end:
                block.add_to(r.shadow, -1)
        self.first_made.pop(unit.seq, None)


class Pinned:
    """A reserved unit placed on its reserved rows: each row as many members
    as its reservation put there (so the later reservations, computed with
    these rows taken, stay true)."""

    def __init__(self, allocs: list[Allocation]) -> None:
        self.left: dict[int, int] = {}
        for a in allocs:
            self.left[a.row] = self.left.get(a.row, 0) + 1

    def check(self, table: CandidateTable) -> Check:
        ok = np.zeros(table.n, bool)
        rows = [row for row, n in self.left.items() if n > 0 and row < table.n]
        ok[rows] = True
        return Why("reserved", detail="rows"), ok

    def copies(self, row: int, k: int) -> int:
        return max(0, min(k, self.left.get(row, 0) - 1))

    def note(self, a: Allocation, stmt: Statement) -> None:
        row = a.row
        self.left[row] = self.left.get(row, 0) - 1
        stmt.did(lambda: self.left.__setitem__(row, self.left[row] + 1))


class Reserved:
    """The row check of a unit that must not delay reservations: on each row,
    every held reservation's shadow, less what the unit's earlier members
    took there in this try, must hold the next member."""

    def __init__(self, held: list[Reservation]) -> None:
        self.held = held
        self.pending: dict[int, np.ndarray] = {}  # row -> taken by earlier members of this try
        self._stmt: Statement | None = None

    def _room(self, r: Reservation, n: int) -> np.ndarray:
        room = r.shadow[:, :n]
        if self.pending:
            room = room.copy()
            for row, vec in self.pending.items():
                if row < n:
                    room[:, row] -= vec
        return room

    def check(self, req, table: CandidateTable) -> Check | None:
        """(reason, rows where the next member leaves every reservation its
        room), naming the first reservation it would delay; None when it
        delays none anywhere."""
        ok = np.ones(table.n, bool)
        first = None
        for r in self.held:
            fits = (self._room(r, table.n) >= req.vec[:, None]).all(axis=0)
            if first is None and not fits.all():
                first = r
            ok &= fits
        if first is None:
            return None
        return Why("reserved", task=first.task, start=round(first.start, 3)), ok

    def copies(self, req, row: int, k: int) -> int:
        """Copies after the next one (on ``row``, not yet noted) that leave
        every reservation its room there."""
        vec = req.vec
        cols = np.flatnonzero(vec > 0)
        if not cols.size:
            return k
        taken = self.pending.get(row)
        for r in self.held:
            room = r.shadow[cols, row] - (taken[cols] if taken is not None else 0)
            k = min(k, max(0, int((room // vec[cols]).min()) - 1))
        return k

    def note(self, a: Allocation, stmt: Statement) -> None:
        if self._stmt is not stmt:  # the first member of this try: its tentative figures go with it
            self._stmt = stmt
            stmt.did(self._reset)
            stmt.at_commit(self._reset)
        vec = a.vec.astype(np.int64)
        row = a.row
        self.pending[row] = self.pending[row] + vec if row in self.pending else vec
        stmt.did(lambda: self.pending.__setitem__(row, self.pending[row] - vec) if row in self.pending else None)

    def _reset(self) -> None:
        self.pending.clear()
        self._stmt = None


def _room_for(table: CandidateTable, allocs: list[Allocation]) -> bool:
    """Do ``allocs`` fit on ``table`` as it is (each row's free room, and each
    device slot's, holds what they take there together)?"""
    need: dict[int, np.ndarray] = {}
    slots: dict[tuple[int, int], int] = {}
    for a in allocs:
        need[a.row] = need[a.row] + a.vec if a.row in need else a.vec.astype(np.int64)
        for slot, milli in zip(a.slots, a.milli):
            slots[slot, a.row] = slots.get((slot, a.row), 0) + milli
    if not all(table.enabled[row] and (table.free[:, row] >= vec).all() for row, vec in need.items()):
        return False
    return all(int(table.dev_free[slot, row]) >= milli for (slot, row), milli in slots.items())
