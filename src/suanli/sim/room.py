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
site and per shape of request (what the dynamic checks read), a site's
watchers are kept sorted by that order, and the pass walks the risen sites'
lists as a merge. Within a pass rows only lose room, so once no watched row
of a site can hold a shape, none of its later watchers of that shape is
looked at: freeing one share of a device wakes the one unit that takes it,
not every unit waiting near it. A unit the walk reaches is tried at its turn
only while a watched row of that site can hold its shape; a unit the walk
passes over would have failed in the pass that tries every waiting unit.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections import Counter
from typing import Hashable

import numpy as np

from suanli.scheduling import kernels
from suanli.scheduling.nearby import dynamic_ok, site_rows

COUNTS: Counter = Counter()  # "reached": units a walk offered; "stopped": rows a walk left; "together": units woken with several tenants waiting


def shape_of(req) -> tuple:
    """What the dynamic checks read of a request: two requests of one shape fit the same rows."""
    needs = tuple((n.kind, None if n.models is None else tuple(n.models.tolist()), n.milli) for n in req.accels)
    return (tuple(np.asarray(req.plain[0][:2]).tolist()), needs, req.whole_node)


class _Table:
    """The watch on one table: sites -> shape -> watchers sorted by pass order,
    and per watched row what it had free when last looked at (``seen``)."""

    __slots__ = ("table", "pos", "version", "lists", "slot", "seen", "free_slots", "reqs", "units", "count")

    def __init__(self, table) -> None:
        self.table, self.pos, self.version = table, table.logged, table.version
        self.units: set[int] = set()
        self.lists: dict[int, dict[tuple, list]] = {}
        self.count = np.zeros(table.n, np.int32)  # row -> units watching it
        self.slot = np.full(table.n, -1, np.int64)  # row -> its line of ``seen``
        self.seen = np.zeros((0, 0))
        self.free_slots: list[int] = []
        self.reqs: dict[tuple, object] = {}  # shape -> a request of that shape

    def grow(self) -> None:
        n = self.table.n
        if self.slot.size < n:
            self.slot = np.concatenate([self.slot, np.full(n - self.slot.size, -1, np.int64)])
            self.count = np.concatenate([self.count, np.zeros(n - self.count.size, np.int32)])

    def watch(self, rows: np.ndarray) -> None:
        """Count a watcher on ``rows`` (distinct); ``seen`` there := at most what they have free now."""
        if rows.size == 0:
            return
        table = self.table
        width = table.free.shape[0] + table.dev_free.shape[0] + 1  # (what ``kernels._room_now`` writes)
        new = rows[self.slot[rows] < 0]
        if new.size:
            if self.seen.shape[1] != width:
                self.seen = np.zeros((0, width))
            need = new.size - len(self.free_slots)
            if need > 0:
                start = self.seen.shape[0]
                grow = max(need, start)
                self.seen = np.vstack([self.seen, np.zeros((grow, width))])
                self.free_slots += range(start, start + grow)
            for row in new.tolist():
                self.slot[row] = self.free_slots.pop()
        kernels.room_watch(rows, self.slot, self.count, self.seen, table.free, table.dev_free, table.enabled)

    def unwatch(self, rows: np.ndarray) -> None:
        self.free_slots += kernels.room_unwatch(rows, self.slot, self.count).tolist()

    def remember(self, rows: np.ndarray) -> None:
        """``seen`` at watched ``rows`` := what they have free now."""
        table = self.table
        kernels.room_remember(rows, self.slot, self.seen, table.free, table.dev_free, table.enabled)

    def risen(self, rows: np.ndarray) -> list[int]:
        """Of watched ones among ``rows`` (repeats allowed), the sites of those
        with more of something free than ``seen``, ascending; the others are
        remembered as they are now (they only lost room)."""
        table = self.table
        return kernels.room_risen(rows, self.count, self.slot, self.seen, table.free, table.dev_free, table.enabled,
                                  table.site).tolist()

    def fits(self, site: int, shape: tuple) -> bool:
        """Could a watched row of ``site`` hold a request of ``shape`` now?"""
        order, start = site_rows(self.table)
        lo, hi = int(start[site]), int(start[site + 1])
        (v0, v1), needs, whole = shape
        if not needs and not whole:  # (cpu and memory alone: ``dynamic_ok`` in one compiled loop)
            return kernels.room_fits(order, lo, hi, self.count, self.table.enabled, self.table.free, v0, v1)
        rows = order[lo:hi]
        rows = rows[self.count[rows] > 0]
        return bool(rows.size) and bool(dynamic_ok(self.table, self.reqs[shape], rows).any())


class RoomWait:
    """The units parked for room (see the module's text)."""

    def __init__(self) -> None:
        self._tables: dict[int, _Table] = {}
        self._of: dict[int, tuple[int, np.ndarray, list[int], tuple, tuple]] = {}  # uid -> (table, rows, sites, shape, entry)
        self.tenants: Counter = Counter()  # tenant -> units parked
        self._tenant: dict[int, Hashable] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._of

    def __len__(self) -> int:
        return len(self._of)

    def items(self) -> list[int]:
        return list(self._of)

    def add(self, uid: int, table, rows: np.ndarray, sites: list[int], req, key: tuple, tenant: Hashable) -> None:
        """Watch ``rows`` of ``table`` (on ``sites``, ascending) for ``uid``, whose
        place in a pass's order is ``key``."""
        tid = id(table)
        w = self._tables.get(tid)
        if w is None:
            w = self._tables[tid] = _Table(table)
        else:
            w.grow()  # rows were added: its units are tried afresh at the next ``due``
        shape = shape_of(req)
        w.reqs.setdefault(shape, req)
        entry = (key, uid)
        for site in sites:
            insort(w.lists.setdefault(site, {}).setdefault(shape, []), entry)
        w.watch(rows)
        w.units.add(uid)
        self._of[uid] = (tid, rows, sites, shape, entry)
        self.tenants[tenant] += 1
        self._tenant[uid] = tenant

    def discard(self, uid: int) -> None:
        got = self._of.pop(uid, None)
        if got is None:
            return
        tid, rows, sites, shape, entry = got
        tenant = self._tenant.pop(uid)
        self.tenants[tenant] -= 1
        if not self.tenants[tenant]:
            del self.tenants[tenant]
        w = self._tables[tid]
        w.units.discard(uid)
        for site in sites:
            by_shape = w.lists[site]
            lst = by_shape[shape]
            del lst[bisect_right(lst, entry) - 1]
            if not lst:
                del by_shape[shape]
                if not by_shape:
                    del w.lists[site]
        w.unwatch(rows)
        if not w.units:
            del self._tables[tid]

    def due(self) -> tuple[dict[int, list[int]], list[int]]:
        """Read what changed since the last call: (table id -> the sites of its
        risen rows, units whose table gained rows, to be tried afresh)."""
        risen: dict[int, list[int]] = {}
        fresh: list[int] = []
        for tid, w in list(self._tables.items()):
            table = w.table
            if table.version != w.version:
                fresh += sorted(w.units)
                continue
            logged = table.since(w.pos)
            w.pos = table.logged
            sites = w.risen(np.flatnonzero(w.count > 0) if logged is None else logged)
            if sites:
                risen[tid] = sites
        return risen, fresh

    def settle(self, risen: dict[int, list[int]]) -> None:
        """After a pass: the watched rows of risen sites are remembered as they
        are now (every parked watcher was found not to fit them at its turn)."""
        for tid, sites in risen.items():
            w = self._tables.get(tid)
            if w is None:
                continue
            order, start = site_rows(w.table)
            w.remember(np.concatenate([order[start[s]:start[s + 1]] for s in sites]))

    def fitting(self, risen: dict[int, list[int]]) -> list[int]:
        """Every watcher of a risen site that the site could hold now, in no order."""
        out: dict[int, None] = {}
        for tid, sites in risen.items():
            w = self._tables[tid]
            for site in sites:
                for shape, lst in w.lists.get(site, {}).items():
                    if w.fits(site, shape):
                        out.update((uid, None) for _, uid in lst)
        COUNTS["together"] += len(out)
        return list(out)

    def walk(self, risen: dict[int, list[int]]) -> "Walk":
        return Walk(self, risen)


class Walk:
    """The watchers of risen sites in pass order (``peek``/``next``), each
    offered once and only while the site it was reached through could still
    hold it (``next`` checks that at the unit's turn)."""

    def __init__(self, room: RoomWait, risen: dict[int, list[int]]) -> None:
        self.room = room
        self.heap: list = []
        self.done: set[int] = set()
        for tid, sites in risen.items():
            w = room._tables[tid]
            for site in sites:
                for shape, lst in w.lists.get(site, {}).items():
                    self.heap.append((lst[0], tid, site, shape))
        heapq.heapify(self.heap)

    def peek(self) -> tuple | None:
        """The pass-order key of the next watcher, or None when none is left."""
        return self.heap[0][0][0] if self.heap else None

    def next(self, wanted) -> int | None:
        """The next watcher to try now, or None when the one at the head was not
        (already tried, no longer parked (``wanted`` says), or the site cannot
        hold it any more: then none after it there either)."""
        entry, tid, site, shape = heapq.heappop(self.heap)
        uid = entry[1]
        w = self.room._tables.get(tid)
        if w is None:
            return None
        lst = w.lists.get(site, {}).get(shape)
        if uid in self.done or uid not in self.room or not wanted(uid):
            self._push_after(lst, entry, tid, site, shape)
            return None
        if not w.fits(site, shape):
            COUNTS["stopped"] += 1
            return None  # room only shrinks in a pass: this site holds none of its later watchers of this shape
        self.done.add(uid)
        COUNTS["reached"] += 1
        self._push_after(lst, entry, tid, site, shape)
        return uid

    def _push_after(self, lst, entry, tid, site, shape) -> None:
        if not lst:
            return
        i = bisect_right(lst, entry)
        if i < len(lst):
            heapq.heappush(self.heap, (lst[i], tid, site, shape))
