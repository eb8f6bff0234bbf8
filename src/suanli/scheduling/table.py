"""Candidate tables: one row per candidate (a node, or a VC host), as NumPy arrays.

Both layers schedule over the same shape of table: the global layer over
physical nodes, the business layer over a virtual cluster's hosts. A table is
updated in place when an allocation commits (``take``/``give``); it is never
rebuilt per decision. Every change of what a row has free (or whether it is
in service) goes through ``touch``, which appends the row to a change log:
views kept per request (``live.py``) recompute only the rows changed since
they last looked. Tentative work (a gang, an affinity group, a probe) goes
through a ``Statement`` (``statement.py``), committed whole or undone whole.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from suanli.model.fleet import Fleet

_GROWABLE = (
    "node", "group", "site", "tier", "arch", "fabric", "cap", "free",
    "dev_kind", "dev_model", "dev_cap", "dev_free", "dev_shareable", "dev_index", "enabled", "retired", "stamp",
)

INVERSE_KEPT_ROWS = 1 << 16  # rows up to which a table keeps 1 / capacity as a column (``inverse_of``)
_COLUMN_MAJOR = frozenset(("cap", "free", "dev_kind", "dev_model", "dev_cap", "dev_free", "dev_shareable", "dev_index"))


def cols(arr: np.ndarray, at) -> np.ndarray:
    """``arr[:, at]`` of a column-major array (``arr[at]`` of a one-row one): a view
    for a slice of rows, a gather for row indices (``take``, about twice as fast
    as fancy indexing)."""
    if isinstance(at, slice):
        return arr[..., at]
    return arr.take(at, axis=-1)


_ONE: dict[int, tuple[int]] = {}


def one(v: int) -> tuple[int]:
    """``(v,)``, the same tuple for the same value (an allocation's one device
    slot or share: a million allocations share a few tuples)."""
    t = _ONE.get(v)
    if t is None:
        v = int(v)  # (a NumPy integer is kept as Python's)
        t = (v,)
        if len(_ONE) < 65_536:
            _ONE[v] = t
    return t


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one placement takes from one row: a resource vector and device shares."""

    row: int
    vec: np.ndarray  # int64[R], read-only (shared with the request it was made for)
    slots: tuple[int, ...] = ()  # device slots of the row
    milli: tuple[int, ...] = ()  # share taken on each slot


class CandidateTable:
    """Struct of arrays; rows are appended (hosts) but never removed."""

    def __init__(self, n_resources: int, n_slots: int, capacity: int = 16) -> None:
        self.n = 0
        self.version = 0  # bumps when rows are added: cached static masks must be recomputed
        self.tick = 0  # bumps on every change of what is free
        c, r, d = max(capacity, 1), n_resources, n_slots
        self.node = np.zeros(c, np.int32)  # the physical node under the row
        self.group = np.zeros(c, np.int32)  # its node group
        self.site = np.zeros(c, np.int32)
        self.tier = np.zeros(c, np.int8)
        self.arch = np.zeros(c, np.int16)
        self.fabric = np.full((c, 4), -1, np.int32)  # coherent, ib, roce, ethernet domain codes
        # Resource and device columns are column-major, [R or D, rows]: a filter
        # or score reads one resource (or slot) across all rows contiguously, and
        # reductions over a row's few entries run across rows, which NumPy does fast.
        # (int64, as the requests' vectors: a node's capacity would fit int32, but adding and
        # comparing an int64 vector to an int32 column casts, and decisions were 5-15% slower)
        self.cap = np.zeros((r, c), np.int64)
        self.free = np.zeros((r, c), np.int64)
        self.dev_kind = np.full((d, c), -1, np.int16)
        self.dev_model = np.full((d, c), -1, np.int16)
        self.dev_cap = np.zeros((d, c), np.int16)  # share of the device this row holds (milli)
        self.dev_free = np.zeros((d, c), np.int16)  # (at most 1000 a slot: int16)
        self.dev_shareable = np.zeros((d, c), bool)
        self.dev_index = np.full((d, c), -1, np.int16)  # device index on the physical node
        self.enabled = np.zeros(c, bool)
        self.retired = np.zeros(c, bool)  # rows of removed hosts: never candidates again
        self.n_retired = 0
        self.stamp = np.zeros(c, np.int64)  # per row: bumps when what is free there changes (caches per row)
        self.listeners: list = []  # called (table, allocation, +1 taken / -1 given) on every change
        self.settle = None  # called before an explanation reads every row (a split pass's rows brought up to date)
        self._log = np.zeros(8192, np.int32)  # the latest part of the change log: rows touched, in order (rows < 2^31)
        self._logged = 0  # entries of _log in use
        self.base = 0  # the log's position of _log[0] (older entries were dropped)
        self.views = None  # live.Views of this table, made on first use
        self._owner_caches: OrderedDict[int, tuple[object, dict]] = OrderedDict()
        self._fleet_cols: set[str] = set()  # columns that are the fleet's own arrays (read only here)

    # ------------------------------------------------------------ construction

    @classmethod
    def from_fleet(cls, fleet: Fleet) -> "CandidateTable":
        t = cls(len(fleet.resources), fleet.max_devices, fleet.n_nodes)
        n = fleet.n_nodes
        t.n = n
        t.node[:n] = np.arange(n)
        # what never changes of a node is read in place from the fleet's columns (a device's
        # 67 bytes not copied), until the table grows or writes them (``_own``)
        for name, col in (("group", fleet.node_group), ("site", fleet.node_site), ("tier", fleet.node_tier),
                          ("arch", fleet.node_arch), ("fabric", fleet.node_fabric),
                          ("dev_kind", fleet.dev_kind_cols), ("dev_model", fleet.dev_model_cols),
                          ("dev_shareable", fleet.dev_shareable_cols)):
            mine = getattr(t, name)
            if col.dtype == mine.dtype and col.shape == mine.shape:
                setattr(t, name, col)
                t._fleet_cols.add(name)
            elif name in _COLUMN_MAJOR:
                mine[:, :n] = col
            else:
                mine[:n] = col
        t.cap[:, :n] = fleet.node_capacity.T
        t.free[:, :n] = fleet.node_capacity.T
        present = fleet.node_dev_kind.T >= 0
        t.dev_cap[:, :n] = np.where(present, 1000, 0)
        t.dev_free[:, :n] = t.dev_cap[:, :n]
        t.dev_index[:, :n] = np.where(present, np.arange(fleet.max_devices, dtype=np.int16)[:, None], -1)
        t.enabled[:n] = True
        return t

    def append_nodes(self, fleet: Fleet, first: int) -> None:
        """The fleet's nodes ``first`` .. as new rows, all free (a grown fleet's)."""
        self._own()
        n = fleet.n_nodes
        while len(self.node) < n:
            self._grow()
        rows = slice(first, n)
        self.node[rows] = np.arange(first, n)
        self.group[rows] = fleet.node_group[rows]
        self.site[rows] = fleet.node_site[rows]
        self.tier[rows] = fleet.node_tier[rows]
        self.arch[rows] = fleet.node_arch[rows]
        self.fabric[rows] = fleet.node_fabric[rows]
        d = fleet.node_dev_kind.shape[1]
        self.cap[:, rows] = fleet.node_capacity[rows].T
        self.free[:, rows] = fleet.node_capacity[rows].T
        self.dev_kind[:d, rows] = fleet.node_dev_kind[rows].T
        self.dev_model[:d, rows] = fleet.node_dev_model[rows].T
        present = fleet.node_dev_kind[rows].T >= 0
        self.dev_cap[:d, rows] = np.where(present, 1000, 0)
        self.dev_free[:d, rows] = self.dev_cap[:d, rows]
        self.dev_shareable[:d, rows] = fleet.node_dev_shareable[rows].T
        self.dev_index[:d, rows] = np.where(present, np.arange(d, dtype=np.int16)[:, None], -1)
        self.enabled[rows] = True
        self.retired[rows] = False
        self.n = max(self.n, n)
        self.version += 1
        for row in range(first, n):
            self.touch(row)

    def _own(self) -> None:
        """Columns of this table's own in place of the fleet's (before they are written)."""
        for name in self._fleet_cols:
            setattr(self, name, getattr(self, name).copy())
        self._fleet_cols.clear()

    def widen(self, slots: int) -> None:
        """Room for ``slots`` devices per row (a node with more devices than any before)."""
        d = self.dev_kind.shape[0]
        if slots <= d:
            return
        self._own()
        for name in ("dev_kind", "dev_model", "dev_cap", "dev_free", "dev_shareable", "dev_index"):
            old = getattr(self, name)
            fill = -1 if name in ("dev_kind", "dev_model", "dev_index") else 0
            arr = np.full((slots, old.shape[1]), fill, old.dtype)
            arr[:d] = old
            setattr(self, name, arr)
        self.version += 1

    def forget_caches(self) -> None:
        """Drop what requests kept over the rows (their number or facts changed)."""
        self._owner_caches.clear()

    def append_row(self, source: "CandidateTable", src_row: int, vec: np.ndarray,
                   slots: tuple[int, ...], milli: tuple[int, ...]) -> int:
        """Add a row that is a slice of ``source``'s row (a host on a node)."""
        self._own()
        if self.n == len(self.node):
            self._grow()
        i = self.n
        self.n += 1
        self.version += 1
        for name in ("node", "group", "site", "tier", "arch", "fabric"):
            getattr(self, name)[i] = getattr(source, name)[src_row]
        self.cap[:, i] = vec
        self.free[:, i] = vec
        self.dev_kind[:, i] = -1
        self.dev_model[:, i] = -1
        self.dev_cap[:, i] = 0
        self.dev_free[:, i] = 0
        self.dev_shareable[:, i] = False
        self.dev_index[:, i] = -1
        for j, (slot, m) in enumerate(zip(slots, milli)):
            self.dev_kind[j, i] = source.dev_kind[slot, src_row]
            self.dev_model[j, i] = source.dev_model[slot, src_row]
            self.dev_shareable[j, i] = source.dev_shareable[slot, src_row]
            self.dev_index[j, i] = source.dev_index[slot, src_row]
            self.dev_cap[j, i] = m
            self.dev_free[j, i] = m
        self.enabled[i] = True
        self.retired[i] = False
        self.stamp[i] += 1
        return i

    def touch(self, row: int) -> None:
        """Record that what ``row`` has free (or its being in service) changed."""
        self.tick += 1
        self.stamp[row] += 1
        if self._logged == self._log.size:
            self._trim()
        self._log[self._logged] = row
        self._logged += 1

    def _trim(self) -> None:
        """The log is full: keep its latest part (as many entries as rows, at least
        4,096); readers further behind start afresh."""
        keep = max(self.n, 4096)
        if self._log.size < 2 * keep:  # the table grew: a longer log
            self._log = np.concatenate([self._log, np.zeros(2 * keep - self._log.size, np.int32)])
            return
        drop = self._logged - keep
        self._log[:keep] = self._log[drop:self._logged]
        self.base += drop
        self._logged = keep

    @property
    def logged(self) -> int:
        """The change log's length so far: a reader's position after reading all of it."""
        return self.base + self._logged

    def since(self, pos: int) -> np.ndarray | None:
        """Rows touched after log position ``pos`` (with repeats; a view to read before
        the next change), or None when that part of the log was dropped."""
        return self._log[pos - self.base:self._logged] if pos >= self.base else None

    def set_enabled(self, row: int, enabled: bool) -> None:
        """Put a row in or out of service (a node down, drained or back)."""
        self.enabled[row] = enabled
        self.touch(row)

    def retire(self, row: int) -> None:
        """Take a row out for good (a removed host); rows are never deleted."""
        self.touch(row)
        self.enabled[row] = False
        self.n_retired += not self.retired[row]
        self.retired[row] = True
        self.free[:, row] = 0
        self.dev_free[:, row] = 0

    def _grow(self) -> None:
        self._fleet_cols.clear()  # (every column is made anew)
        size = len(self.node)
        new = max(16, 2 * size)
        for name in _GROWABLE:
            old = getattr(self, name)
            fill = -1 if name in ("fabric", "dev_kind", "dev_model", "dev_index") else 0
            if name in _COLUMN_MAJOR:
                arr = np.full((old.shape[0], new), fill, old.dtype)
                arr[:, :size] = old
            else:
                arr = np.full((new,) + old.shape[1:], fill, old.dtype)
                arr[:size] = old
            setattr(self, name, arr)

    # ------------------------------------------------------------ per-request caches

    CACHE_BYTES = 256 << 20  # what per-request caches of one table may hold, about

    def cache_for(self, owner: object) -> dict:
        """A dict for what ``owner`` (a request) computes over this table's rows
        (static masks, usable slots, device scores), kept for the most recently
        used owners within ``CACHE_BYTES``; a dropped one is computed again."""
        caches = self._owner_caches
        hit = caches.get(id(owner))
        if hit is None or hit[0] is not owner:
            hit = caches[id(owner)] = (owner, {})
            per = max(len(self.node), 1) * (10 + 2 * self.dev_kind.shape[0])
            while len(caches) > min(4096, max(16, self.CACHE_BYTES // per)):
                caches.popitem(last=False)
        else:
            caches.move_to_end(id(owner))
        return hit[1]

    def shared(self) -> dict:
        """A dict for what any request may reuse over this table's rows (keyed by
        what it depends on), emptied when rows are added."""
        key = (self.version, self.n)
        if getattr(self, "_shared_key", None) != key:
            self._shared, self._shared_key = {}, key
        return self._shared

    # ------------------------------------------------------------ views

    def view(self, name: str) -> np.ndarray:
        """The live rows of a column (a view, not a copy); resource and device columns are [R or D, n]."""
        arr = getattr(self, name)
        return arr[:, : self.n] if name in _COLUMN_MAJOR else arr[: self.n]

    def inverse_of(self, at, sel: slice | None = None) -> np.ndarray:
        """float64[R, rows]: 1 / capacity of the rows ``at`` (a slice or row
        numbers; 0 where none), of the resources ``sel`` only when given:
        read from ``inverse_capacity`` while the table has at most
        ``INVERSE_KEPT_ROWS`` rows, computed for those rows alone on a larger
        one (a million devices keep no float per resource and row for it; the
        same values)."""
        if self.n <= INVERSE_KEPT_ROWS:
            inv = self.inverse_capacity()
            return cols(inv if sel is None else inv[sel], at)
        cap = cols(self.cap if sel is None else self.cap[sel], at).astype(np.float64)
        return np.divide(1.0, cap, out=np.zeros_like(cap), where=cap > 0)

    def inverse_capacity(self) -> np.ndarray:
        """float64[R, n]: 1 / capacity per resource (0 where none), cached until rows change."""
        key = (self.version, self.n)
        if getattr(self, "_inv_key", None) != key:
            cap = self.view("cap").astype(np.float64)
            self._inv = np.divide(1.0, cap, out=np.zeros_like(cap), where=cap > 0)
            self._inv_key = key
        return self._inv

    # ------------------------------------------------------------ commits

    def take(self, a: Allocation) -> None:
        self.touch(a.row)
        self.free[:, a.row] -= a.vec
        col = self.dev_free[:, a.row]
        for s, m in zip(a.slots, a.milli):
            col[s] -= m
        for listener in self.listeners:
            listener(self, a, 1)

    def take_rows(self, rows: np.ndarray, vecs: np.ndarray, slots: np.ndarray | None = None,
                  milli: np.ndarray | None = None) -> None:
        """``take`` of vector ``vecs[:, i]`` on ``rows[i]`` (and, where
        ``slots[i] >= 0``, ``milli[i]`` of that device slot), for each i in
        order, as one operation (rows may repeat)."""
        if self.listeners:
            raise ValueError("take_rows does not tell listeners: take one by one")
        k = rows.size
        if not k:
            return
        self.tick += k
        np.add.at(self.stamp, rows, 1)
        for c in range(self.free.shape[0]):
            if vecs[c].any():
                np.subtract.at(self.free[c], rows, vecs[c])
        if slots is not None and (slots >= 0).any():
            has = slots >= 0
            np.subtract.at(self.dev_free, (slots[has], rows[has]), milli[has])
        done = 0
        while done < k:  # the change log, in chunks as room is made
            if self._logged == self._log.size:
                self._trim()
            m = min(k - done, self._log.size - self._logged)
            self._log[self._logged:self._logged + m] = rows[done:done + m]
            self._logged += m
            done += m

    def take_all(self, allocs: list[Allocation]) -> None:
        """``take`` each allocation (several on one row are one change of it)."""
        self._apply(allocs, -1)

    def give_all(self, allocs: list[Allocation]) -> None:
        """``give`` back each allocation."""
        self._apply(allocs, 1)

    def _apply(self, allocs: list[Allocation], sign: int) -> None:
        if len(allocs) == 1:
            (self.give if sign > 0 else self.take)(allocs[0])
            return
        by_row: dict[int, list[Allocation]] = {}
        for a in allocs:
            group = by_row.get(a.row)
            if group is None:
                by_row[a.row] = [a]
            else:
                group.append(a)
        for row, group in by_row.items():
            self.touch(row)
            free, col = self.free[:, row], self.dev_free[:, row]
            for a in group:
                if sign > 0:
                    free += a.vec
                else:
                    free -= a.vec
                for s, m in zip(a.slots, a.milli):
                    col[s] += sign * m
        for listener in self.listeners:
            for a in allocs:
                listener(self, a, -sign)

    def give(self, a: Allocation) -> None:
        self.touch(a.row)
        self.free[:, a.row] += a.vec
        col = self.dev_free[:, a.row]
        for s, m in zip(a.slots, a.milli):
            col[s] += m
        for listener in self.listeners:
            listener(self, a, -1)
