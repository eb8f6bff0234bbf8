"""Units parked until a row they could go to has room for them, and which of
them a pass tries when rows gain room.

A parked unit watches the rows that could ever hold it (within its bound,
passing every check on what a row is). It did not fit on any of them when it
was last tried, so it can fit again only on a row that has since gained
something free. For each watched row the table keeps what the row had free
when last looked at (``seen``); a row whose free capacity rose above that is
*risen*.

When rows rise, the parked units that could use them are tried in the order
the pass would have tried them, merged with the units that are ready: per
risen row and per shape of request (what the dynamic checks read), the
row's watchers are kept sorted by that order, and the pass walks them as a
merge. Within a pass rows only lose room, so once a risen row cannot hold a
shape, none of its later watchers of that shape is looked at: freeing one
share of a device wakes the one unit that takes it, not every unit waiting
near it. A unit the walk reaches is tried only when that row still holds its
shape at its turn, which is exactly when the pass that tries every waiting
unit would place it there or somewhere better; the others would fail.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections import Counter
from typing import Hashable

import numpy as np

from suanli.scheduling.nearby import dynamic_ok

COUNTS: Counter = Counter()  # "reached": units a walk offered; "stopped": rows a walk left; "together": units woken with several tenants waiting


def _now(table, rows: np.ndarray) -> np.ndarray:
    """float64[k, m]: what ``rows`` have free, their device shares and whether they are in service."""
    return np.vstack([table.free[:, rows], table.dev_free[:, rows], table.enabled[rows][None, :]]).T.astype(float)


def shape_of(req) -> tuple:
    """What the dynamic checks read of a request: two requests of one shape fit the same rows."""
    needs = tuple((n.kind, None if n.models is None else tuple(n.models.tolist()), n.milli) for n in req.accels)
    return (tuple(np.asarray(req.plain[0][:2]).tolist()), needs, req.whole_node)


class _Table:
    """The watch on one table: rows -> shape -> watchers sorted by pass order, and ``seen``."""

    __slots__ = ("table", "pos", "version", "lists", "slot", "seen", "free_slots", "reqs", "units")

    def __init__(self, table) -> None:
        self.table, self.pos, self.version = table, table.logged, table.version
        self.units: set[int] = set()
        self.lists: dict[int, dict[tuple, list]] = {}
        self.slot = np.full(table.n, -1, np.int64)  # row -> its line of ``seen``
        self.seen = np.zeros((0, 0))
        self.free_slots: list[int] = []
        self.reqs: dict[tuple, object] = {}  # shape -> a request of that shape

    def remember(self, rows: np.ndarray, lower_only: bool) -> None:
        """``seen`` at ``rows`` := what they have free now (``lower_only``: at most that)."""
        if rows.size == 0:
            return
        now = _now(self.table, rows)
        new = rows[self.slot[rows] < 0]
        if new.size:
            if self.seen.shape[1] != now.shape[1]:
                self.seen = np.zeros((0, now.shape[1]))
            need = new.size - len(self.free_slots)
            if need > 0:
                start = self.seen.shape[0]
                grow = max(need, start)
                self.seen = np.vstack([self.seen, np.zeros((grow, now.shape[1]))])
                self.free_slots += range(start, start + grow)
            for row in new.tolist():
                self.slot[row] = self.free_slots.pop()
        at = self.slot[rows]
        fresh = np.isin(rows, new) if new.size else np.zeros(rows.size, bool)
        if lower_only:
            now = np.where(fresh[:, None], now, np.minimum(self.seen[at], now))
        self.seen[at] = now

    def forget_row(self, row: int) -> None:
        self.free_slots.append(int(self.slot[row]))
        self.slot[row] = -1

    def risen(self, rows: np.ndarray) -> list[int]:
        """Of watched ``rows``, those with more of something free than ``seen``;
        the others are remembered as they are now (they only lost room)."""
        if rows.size == 0:
            return []
        now = _now(self.table, rows)
        at = self.slot[rows]
        up = (now > self.seen[at]).any(axis=1)
        self.seen[at[~up]] = now[~up]
        return rows[up].tolist()

    def fits(self, row: int, shape: tuple) -> bool:
        return bool(dynamic_ok(self.table, self.reqs[shape], np.array([row]))[0])


class RoomWait:
    """The units parked for room (see the module's text)."""

    def __init__(self) -> None:
        self._tables: dict[int, _Table] = {}
        self._of: dict[int, tuple[int, np.ndarray, tuple, tuple]] = {}  # uid -> (table id, rows, shape, entry)
        self.tenants: Counter = Counter()  # tenant -> units parked
        self._tenant: dict[int, Hashable] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._of

    def __len__(self) -> int:
        return len(self._of)

    def items(self) -> list[int]:
        return list(self._of)

    def add(self, uid: int, table, rows: np.ndarray, req, key: tuple, tenant: Hashable) -> None:
        """Watch ``rows`` of ``table`` for ``uid``, whose place in a pass's order is ``key``."""
        tid = id(table)
        w = self._tables.get(tid)
        if w is None:
            w = self._tables[tid] = _Table(table)
        elif w.slot.size < table.n:  # rows were added: its units are tried afresh at the next ``due``
            w.slot = np.concatenate([w.slot, np.full(table.n - w.slot.size, -1, np.int64)])
        shape = shape_of(req)
        w.reqs.setdefault(shape, req)
        entry = (key, uid)
        for row in rows.tolist():
            insort(w.lists.setdefault(row, {}).setdefault(shape, []), entry)
        w.remember(rows, lower_only=True)
        self._of[uid] = (tid, rows, shape, entry)
        w.units.add(uid)
        self.tenants[tenant] += 1
        self._tenant[uid] = tenant

    def discard(self, uid: int) -> None:
        got = self._of.pop(uid, None)
        if got is None:
            return
        tid, rows, shape, entry = got
        tenant = self._tenant.pop(uid)
        self.tenants[tenant] -= 1
        if not self.tenants[tenant]:
            del self.tenants[tenant]
        w = self._tables[tid]
        w.units.discard(uid)
        for row in rows.tolist():
            by_shape = w.lists[row]
            lst = by_shape[shape]
            i = bisect_right(lst, entry) - 1
            del lst[i]
            if not lst:
                del by_shape[shape]
                if not by_shape:
                    del w.lists[row]
                    w.forget_row(row)
        if not w.units:
            del self._tables[tid]

    def due(self) -> tuple[dict[int, list[int]], list[int]]:
        """Read what changed since the last call: (table id -> its risen rows,
        units whose table gained rows, to be tried afresh)."""
        risen: dict[int, list[int]] = {}
        fresh: list[int] = []
        for tid, w in list(self._tables.items()):
            table = w.table
            if table.version != w.version:
                fresh += sorted(w.units)
                continue
            logged = table.since(w.pos)
            rows = np.fromiter(w.lists, np.int64, len(w.lists)) if logged is None else np.unique(logged)
            if logged is not None and rows.size:
                rows = rows[w.slot[rows] >= 0]
            w.pos = table.logged
            up = w.risen(rows)
            if up:
                risen[tid] = up
        return risen, fresh

    def settle(self, risen: dict[int, list[int]]) -> None:
        """After a pass: the risen rows are remembered as they are now (every
        parked watcher was found not to fit them at its turn)."""
        for tid, rows in risen.items():
            w = self._tables.get(tid)
            if w is None:
                continue
            rows = np.asarray(rows, np.int64)
            w.remember(rows[w.slot[rows] >= 0], lower_only=False)

    def fitting(self, risen: dict[int, list[int]]) -> list[int]:
        """Every watcher of a risen row that the row could hold now, in no order."""
        out: dict[int, None] = {}
        for tid, rows in risen.items():
            w = self._tables[tid]
            for row in rows:
                for shape, lst in w.lists.get(row, {}).items():
                    if w.fits(row, shape):
                        out.update((uid, None) for _, uid in lst)
        COUNTS["together"] += len(out)
        return list(out)

    def walk(self, risen: dict[int, list[int]]) -> "Walk":
        return Walk(self, risen)


class Walk:
    """The watchers of risen rows in pass order (``peek``/``next``), each
    offered once and only while the row it was reached through could still
    hold it (``next`` checks that at the unit's turn)."""

    def __init__(self, room: RoomWait, risen: dict[int, list[int]]) -> None:
        self.room = room
        self.heap: list = []
        self.done: set[int] = set()
        for tid, rows in risen.items():
            w = room._tables[tid]
            for row in rows:
                for shape, lst in w.lists.get(row, {}).items():
                    self.heap.append((lst[0], tid, row, shape))
        heapq.heapify(self.heap)

    def peek(self) -> tuple | None:
        """The pass-order key of the next watcher, or None when none is left."""
        return self.heap[0][0][0] if self.heap else None

    def next(self, wanted) -> int | None:
        """The next watcher to try now, or None when the one at the head was not
        (already tried, no longer parked (``wanted`` says), or the row cannot
        hold it any more: then none after it on that row either)."""
        entry, tid, row, shape = heapq.heappop(self.heap)
        uid = entry[1]
        w = self.room._tables.get(tid)
        if w is None:
            return None
        lst = w.lists.get(row, {}).get(shape)
        if uid in self.done or uid not in self.room or not wanted(uid):
            self._push_after(lst, entry, tid, row, shape)
            return None
        if not w.fits(row, shape):
            COUNTS["stopped"] += 1
            return None  # room only shrinks in a pass: this row holds none of its later watchers of this shape
        self.done.add(uid)
        COUNTS["reached"] += 1
        self._push_after(lst, entry, tid, row, shape)
        return uid

    def _push_after(self, lst, entry, tid, row, shape) -> None:
        if not lst:
            return
        i = bisect_right(lst, entry)
        if i < len(lst):
            heapq.heappush(self.heap, (lst[i], tid, row, shape))
