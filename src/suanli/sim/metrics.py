"""Metrics of a simulated run: what was used over time, how long work waited.

``Recorder`` samples allocation (by tier and resource) and tenants' dominant
shares after every instant that changed something. ``summarize`` turns the
samples, the task records and the event log into the ``metrics`` object of
``result.json`` (documented in docs/simulation.md).

Queueing delay counts every wait: from submission, or from each stop
(``preempted``, ``requeued``, ``lost``), to the next placement; a wait still
open when the run ends (or cut short when its task ends unplaced) is counted
up to then and said to be censored. The task records give each task's first
wait; the waits after stops, and the lanes of the tasks that moved (where
each ran over time), come from one read of the event log, keeping only the
events of the tasks that were stopped or moved (``Stories``).
"""

from __future__ import annotations

import gc
import heapq
import json
import math
import re
from array import array
from collections import Counter, defaultdict
from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np

from suanli.model.fleet import TIERS
from suanli.phrases import first_reasons_json, reasons_json
from suanli.scheduling import kernels
from suanli.scheduling.state import PlacementState
from suanli.scheduling.table import CandidateTable
from suanli.sim.ledger import KLASSES


class Recorder:
    """Samples, after each instant: what tasks use (by tier, per resource), the
    free share stranded on partly used shareable devices, tenants' dominant
    shares and ``near`` violations.

    A sample costs what changed since the last one, not the fleet's size: per
    node figures are kept and updated for the rows the tables touched
    (``CandidateTable.since``), and totals by tier and site by their
    differences. Means are exact time integrals; the series kept for charts
    is thinned to at most ``MAX_POINTS`` samples (when full, every other one is
    dropped and from then on one sample in two, four, ... is kept, the last of
    a run always), so memory does not grow with the length of the run."""

    MAX_POINTS = 4096

    def __init__(self, state: PlacementState, near_violations: Callable[[], int] | None = None) -> None:
        self.state = state
        fleet = state.fleet
        n_res, n_kinds = len(fleet.resources), len(fleet.kinds)
        self.capacity = np.zeros((len(TIERS), n_res), np.int64)
        np.add.at(self.capacity, fleet.node_tier, fleet.node_capacity)
        self._capacity_of = (fleet, False)  # whose nodes ``site_capacity`` sums, with retired ones at zero or not
        self.near_violations = near_violations or (lambda: 0)
        # the series (thinned) for charts: one sample in ``_stride`` is kept
        self.times: list[float] = []
        self.used: list[np.ndarray] = []  # [tier, resource] per sample
        self.reserved: list[np.ndarray] = []  # [tier, resource]: held by hosts and claims
        self.fragmented: list[np.ndarray] = []  # [kind]: stranded free share / capacity
        self.shares: list[np.ndarray] = []  # per sample: float[T] unweighted dominant shares, by tenant index
        self.violations: list[int] = []
        self._stride, self._skipped = 1, 0
        # per node, kept up to date: held, idle inside explicit VC hosts, stranded share per kind
        n = fleet.n_nodes
        # (whole numbers within a node's capacity, below 2^31 in every unit: int32)
        self._held = np.zeros((n_res, n), np.int32)
        # used is held less idle; while no explicit VC host holds idle room (a city's), the two
        # are one figure and neither column is kept (``_idle_kept``): a device's 64 bytes
        self._used: np.ndarray | None = None
        self._idle: np.ndarray | None = None
        self._stranded_total = np.zeros(n_kinds)
        self._kind_capacity = self.capacity.sum(axis=0)[2:]
        self._stranded = np.zeros((n_kinds, n), np.int32)  # (milli-devices, a whole number)
        self._cursor = _Cursor()
        self._vc_seen: dict[int, tuple[CandidateTable, _Cursor, np.ndarray]] = {}
        # totals now, as views into one vector so that one operation integrates them all
        shapes = {"used": self.capacity.shape, "reserved": self.capacity.shape, "fragmented": (n_kinds,),
                  "violations": (1,)}
        # per site (a million of them with a population): integrated as they change, not all at
        # every instant; a population's sites as one (``_SiteFigures``)
        self._sites = _SiteFigures(fleet.site_table, len(fleet.sites), n_res, int(self.site_capacity.max(initial=0)))
        size = sum(int(np.prod(v)) for v in shapes.values())
        self._vec = np.zeros(size)
        self._area_vec = np.zeros(size)  # time integrals since the first sample
        self._peak_vec = np.zeros(size)  # highest values sampled
        self._now: dict[str, np.ndarray] = {}
        self._area: dict[str, np.ndarray] = {}
        self._peak: dict[str, np.ndarray] = {}
        at = 0
        for name, shape in shapes.items():
            n_items = int(np.prod(shape))
            if name == "violations":
                self._violations_at = at  # (where a sample writes them: ``kernels.sample_changes``)
            for store, vec in ((self._now, self._vec), (self._area, self._area_vec), (self._peak, self._peak_vec)):
                store[name] = vec[at:at + n_items].reshape(shape)
            at += n_items
        self._first: float | None = None
        self._last: float | None = None

    # ------------------------------------------------------------ sampling

    def _changed_nodes(self) -> np.ndarray | None:
        """Nodes whose figures may have changed since the last sample, with
        repeats and in any order (a view of the node table's log, read before
        it next changes; None: all); on the way, the idle share of explicit
        VC hosts is brought up to date."""
        rows = self._cursor.logged(self.state.nodes)
        touched = [rows] if rows is not None else None
        for vc in self.state.vcs.values():
            if vc.default or vc.table.n == 0:
                continue
            t = vc.table
            seen = self._vc_seen.get(id(t))
            if seen is None or seen[0] is not t:
                seen = (t, _Cursor(), np.zeros((t.free.shape[0], 0)))
            _, cursor, snap = seen
            changed = cursor.rows(t)
            if snap.shape[1] < t.n:  # rows were added (the cursor then reads all)
                snap = np.hstack([snap, np.zeros((snap.shape[0], t.n - snap.shape[1]))])
            if changed is None:
                changed = np.arange(t.n)
            if changed.size:
                self._idle_kept()
                now = t.free[:, changed].astype(np.float64)
                where = t.node[changed].astype(np.int64)
                for r in range(now.shape[0]):
                    np.add.at(self._idle[r], where, now[r] - snap[r, changed])
                snap[:, changed] = now
                if touched is not None:
                    touched.append(where)
            self._vc_seen[id(t)] = (t, cursor, snap)
        if touched is None:
            return None
        return np.concatenate([np.asarray(x, np.int64) for x in touched]) if len(touched) > 1 else touched[0]

    @property
    def site_capacity(self) -> np.ndarray:
        """int64[site, resource]: each site's capacity (as at the last change of
        the fleet: its retired nodes at zero), summed when read (the figures
        by site, at the end), not kept per site (a device's 32 bytes)."""
        fleet, zero_retired = self._capacity_of
        cap = np.where(fleet.retired[:, None], 0, fleet.node_capacity) if zero_retired else fleet.node_capacity
        out = np.zeros((len(fleet.sites), cap.shape[1]), np.int64)
        np.add.at(out, fleet.node_site, cap)
        return out

    def _idle_kept(self) -> None:
        """Columns of idle room and of use apart from what is held, from now on
        (until now nothing was idle: used was what is held)."""
        if self._idle is None:
            self._idle = np.zeros(self._held.shape)
            self._used = self._held.astype(np.float64)

    def grow(self, fleet) -> None:
        """The fleet grew (or lost nodes) while running: per-node and per-site
        rows for the new ones, capacity as it is now."""
        cap = np.where(fleet.retired[:, None], 0, fleet.node_capacity)
        self.capacity[:] = 0
        np.add.at(self.capacity, fleet.node_tier, cap)
        self._kind_capacity = self.capacity.sum(axis=0)[2:]
        self._capacity_of = (fleet, True)
        extra = fleet.n_nodes - self._held.shape[1]
        if extra > 0:
            pad = lambda a: np.concatenate([a, np.zeros((a.shape[0], extra), a.dtype)], axis=1)  # noqa: E731
            self._held, self._stranded = pad(self._held), pad(self._stranded)
            if self._idle is not None:
                self._used, self._idle = pad(self._used), pad(self._idle)
        most = int(self.site_capacity.max(initial=0))
        if len(fleet.sites) > self._sites.now.shape[0] or (most >= 2**31 and self._sites.now.dtype == np.int32):
            self._sites = _SiteFigures(fleet.site_table, len(fleet.sites), self._sites.now.shape[1], most, self._sites)

    def sample(self, t: float, keep: bool = False) -> None:
        """The figures after the instant ``t``; ``keep``: this sample stays in the
        series (the last of a run)."""
        fleet = self.state.fleet
        nodes = self.state.nodes
        changed = self._changed_nodes()
        figures = self._sites
        if self._first is None:
            figures.start(t)
            self._first = t
        dt = t - self._last if self._last is not None and t > self._last else 0.0
        self._last = max(t, self._last) if self._last is not None else t
        logged = changed is not None
        if changed is None:
            changed = np.arange(fleet.n_nodes)
        # the totals integrated up to ``t``, the changed sites integrated, the nodes' figures, the sites'
        # peaks and blocks, the stranded share, then the totals' peaks: one compiled call
        kernels.sample_changes(self._vec, self._area_vec, self._peak_vec, float(dt), changed, logged, float(t),
                               fleet.node_site, figures.own, figures.area, figures.last, figures.now, figures.firsts,
                               figures.ends, figures._block_area, figures.block_now, figures.block_last, figures.peak,
                               nodes.cap, nodes.free, nodes.dev_free, nodes.dev_cap, nodes.dev_kind,
                               nodes.dev_shareable, self._idle is not None,
                               self._held if self._idle is None else self._idle, fleet.node_tier, self._held,
                               self._held if self._used is None else self._used, self._stranded,
                               self._now["used"], self._now["reserved"], self._stranded_total,
                               self._kind_capacity, self._now["fragmented"], float(self.near_violations()),
                               self._violations_at)
        self._record(t, keep)

    def _record(self, t: float, keep: bool) -> None:
        """Keep this sample in the series when it is the stride's, replaces one of
        the same instant, or is to be kept; when the series is full, every
        other sample is dropped and the stride doubles."""
        same = bool(self.times) and self.times[-1] == t
        self._skipped += 1
        if not (same or keep or self._skipped >= self._stride):
            return
        self._skipped = 0
        if same:
            for lst in (self.used, self.reserved, self.fragmented, self.shares, self.violations):
                lst.pop()
            self.times.pop()
        self.times.append(t)
        self.used.append(self._now["used"].copy())
        self.reserved.append(self._now["reserved"].copy())
        self.fragmented.append(self._now["fragmented"].copy())
        self.shares.append(self._shares())
        self.violations.append(int(self._now["violations"][0]))
        if len(self.times) > self.MAX_POINTS:  # thin: every other sample, the last kept
            for name in ("times", "used", "reserved", "fragmented", "shares", "violations"):
                lst = getattr(self, name)
                setattr(self, name, lst[:-1:2] + lst[-1:])
            self._stride *= 2

    def _shares(self) -> np.ndarray:
        """Tenants' dominant shares now, float[T] by tenant index (one array
        operation; rounded only when the timeline is read)."""
        return self.state.dominant_shares() * self.state.weights

    # ------------------------------------------------------------ figures

    def timeline(self) -> dict[str, Any]:
        """Ratios over time, per tier and resource, and the other series (for charts)."""
        keys = self.state.fleet.resource_keys
        out: dict[str, Any] = {"t": [round(t, 3) for t in self.times], "by_tier": {}, "reserved_by_tier": {}}
        for name, series in (("by_tier", self.used), ("reserved_by_tier", self.reserved)):
            arr = np.array(series) if series else np.zeros((0,) + self.capacity.shape)
            for ti, tier in enumerate(TIERS):
                if not self.capacity[ti].any():
                    continue
                out[name][tier] = {
                    key: [round(float(x), 4) for x in arr[:, ti, ri] / self.capacity[ti, ri]]
                    for ri, key in enumerate(keys) if self.capacity[ti, ri]
                }
        frag = np.array(self.fragmented) if self.fragmented else np.zeros((0, len(self.state.fleet.kinds)))
        out["fragmented_share"] = {kind: [round(float(x), 4) for x in frag[:, k]]
                                   for k, kind in enumerate(self.state.fleet.kinds.names)}
        out["near_violations"] = list(self.violations)
        out["dominant_share"] = self._share_series()
        return out

    def _share_series(self) -> dict[str, list[float]]:
        """Each tenant's dominant share per sample, rounded to 6 places."""
        names = list(self.state.tenant_index)
        arr = np.array(self.shares).reshape(len(self.shares), len(names))
        return {name: [round(x, 6) for x in arr[:, i].tolist()] for i, name in enumerate(names)}

    def _mean(self, name: str, end: float):
        """Time-weighted mean of a total from the first sample to ``end`` (the value
        now when no time has passed)."""
        stop = max(end, self._last)
        span = stop - self._first
        if span <= 0:
            return self._now[name]
        return (self._area[name] + self._now[name] * (stop - self._last)) / span

    def time_average(self, end: float, series: str = "used") -> dict[str, dict[str, float]]:
        """Time-weighted mean ratio per tier and resource up to ``end``."""
        if self._first is None:
            return {}
        mean = self._mean(series, end)
        keys = self.state.fleet.resource_keys
        out: dict[str, dict[str, float]] = {}
        for ti, tier in enumerate(TIERS):
            if not self.capacity[ti].any():
                continue
            out[tier] = {key: round(float(mean[ti, ri] / self.capacity[ti, ri]), 6)
                         for ri, key in enumerate(keys) if self.capacity[ti, ri]}
        return out

    def by_site(self, end: float) -> dict[str, dict[str, dict[str, float]]]:
        """Per site and resource: time-averaged and peak used / capacity."""
        if self._first is None:
            return {}
        stop = max(end, self._last)
        span = stop - self._first
        figures = self._sites
        now, peak = figures.now, figures.peak
        out = {}
        keys = self.state.fleet.resource_keys
        table = self.state.fleet.site_table
        site_capacity = self.site_capacity

        def entry(cap, area_, now_, peak_ratio):
            return {key: {"mean": round(float(area_[r] / span / cap[r]) if span > 0 else float(now_[r] / cap[r]), 6),
                          "peak": round(float(peak_ratio[r]), 6)}
                    for r, key in enumerate(keys) if cap[r]}

        for si in table.names.listed().tolist():
            cap = site_capacity[si]
            out[table.names.name(si)] = entry(cap, figures.area_of(si, stop), now[si], peak[si] / np.maximum(cap, 1))
        for first, count, pattern in table.names.blocks():  # a population: one entry, its pattern
            rows = slice(first, first + count)
            cap = site_capacity[rows]
            ratio = (peak[rows] / np.maximum(cap, 1)).max(axis=0)  # the busiest of its sites
            out[str(pattern)] = entry(cap.sum(axis=0), figures.block_area(first, stop), now[rows].sum(axis=0), ratio)
        return out

    def fragmentation(self, end: float) -> dict[str, dict[str, float]]:
        if self._first is None:
            return {}
        mean = self._mean("fragmented", end)
        now = self._now["fragmented"]
        return {kind: {"mean": round(float(mean[k]), 6), "peak": round(float(self._peak["fragmented"][k]), 6),
                       "at_end": round(float(now[k]), 6)}
                for k, kind in enumerate(self.state.fleet.kinds.names)}

    def near(self, end: float) -> dict[str, float]:
        if self._first is None:
            return {"max_concurrent": 0, "at_end": 0, "task_seconds": 0.0}
        stop = max(end, self._last)
        seconds = float(self._area["violations"][0] + self._now["violations"][0] * (stop - self._last))
        return {"max_concurrent": int(self._peak["violations"][0]), "at_end": int(self._now["violations"][0]),
                "task_seconds": round(float(seconds), 3)}


class _SiteFigures:
    """Per site and resource: what is used now (whole numbers, which the
    sample's kernel keeps: ``now``) and its peak, and the time integral of
    ``now``, brought up to date only when the site changes. The sites of a
    population (a block of the site table: a million devices) are integrated
    as one, their sum being all that the outputs read of them (one entry per
    population, ``Recorder.by_site``): a device keeps its figure now and its
    peak, not an integral and the time it runs up to. Sites written one by
    one, and any outside a block, are integrated each on its own (``own``)."""

    def __init__(self, table, n_sites: int, n_res: int, most: int, old: "_SiteFigures | None" = None) -> None:
        # (whole numbers up to a site's capacity, ``most`` at most: int32 where that fits, a device's 32 bytes)
        dtype = np.int32 if most < 2**31 and (old is None or old.now.dtype == np.int32) else np.float64
        self.now = np.zeros((n_sites, n_res), dtype)
        self.peak = np.zeros((n_sites, n_res), dtype)
        blocks = sorted(table.names.blocks(), key=lambda b: b[0])
        self.firsts = np.array([b[0] for b in blocks], np.int64)
        self.ends = self.firsts + np.array([b[1] for b in blocks], np.int64)
        in_block = np.zeros(n_sites, bool)
        for first, end in zip(self.firsts.tolist(), self.ends.tolist()):
            in_block[first:end] = True
        self.own = np.union1d(table.names.listed(), np.flatnonzero(~in_block)).astype(np.int64)
        self.area = np.zeros((self.own.size, n_res))
        self.last = np.zeros(self.own.size)
        self.block_now = np.zeros((len(blocks), n_res))
        self._block_area = np.zeros((len(blocks), n_res))
        self.block_last = np.zeros(len(blocks))
        if old is not None:  # the fleet grew: what was kept carries over; new sites start now
            since = max(old.last.max(initial=0.0), old.block_last.max(initial=0.0))
            k = old.now.shape[0]
            self.now[:k], self.peak[:k] = old.now, old.peak
            self.last[:] = self.block_last[:] = since
            if old.own.size:
                at = np.searchsorted(old.own, self.own).clip(max=old.own.size - 1)
                was = old.own[at] == self.own
                self.area[was], self.last[was] = old.area[at[was]], old.last[at[was]]
            for b, (first, end) in enumerate(zip(self.firsts.tolist(), self.ends.tolist())):
                j = np.flatnonzero(old.firsts == first)
                if j.size:
                    self._block_area[b], self.block_last[b] = old._block_area[j[0]], old.block_last[j[0]]
                self.block_now[b] = self.now[first:end].sum(axis=0)

    def start(self, t: float) -> None:
        self.last[:] = t
        self.block_last[:] = t

    def integrate(self, sites: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Integrals of ``sites`` (ascending, unique) up to ``t``, before their
        figures change; returns each one's block (-1: none) and its figures
        now (for ``changed``). One compiled pass (``kernels.site_integrals``;
        a sample makes it, the nodes' figures and ``changed`` in one call:
        ``kernels.sample_changes``)."""
        in_block = np.empty(sites.size, np.int64)
        before = np.empty((sites.size, self.now.shape[1]), self.now.dtype)
        kernels.site_integrals(sites, float(t), self.own, self.area, self.last, self.now, self.firsts, self.ends,
                               self._block_area, self.block_now, self.block_last, in_block, before)
        return in_block, before

    def changed(self, sites: np.ndarray, in_blocks: tuple[np.ndarray, np.ndarray]) -> None:
        """``sites``' figures now are new: their peaks, and their blocks' sums
        (whole numbers: exact)."""
        kernels.site_changes(sites, self.now, self.peak, self.block_now, *in_blocks)

    def area_of(self, site: int, stop: float) -> np.ndarray:
        """The integral of a site integrated on its own, up to ``stop``."""
        k = int(np.searchsorted(self.own, site))
        return self.area[k] + self.now[site] * (stop - self.last[k])

    def block_area(self, first: int, stop: float) -> np.ndarray:
        """The integral of the block starting at site ``first`` (its sites' sum), up to ``stop``."""
        b = int(np.searchsorted(self.firsts, first))
        return self._block_area[b] + self.block_now[b] * (stop - self.block_last[b])


class _Cursor:
    """A reader of a table's change log: the rows touched since it last read."""

    __slots__ = ("table", "pos", "version")

    def __init__(self) -> None:
        self.table = None
        self.pos = self.version = -1

    def logged(self, table: CandidateTable) -> np.ndarray | None:
        """Rows touched since the last call as the table's log has them (with
        repeats; a view, to read before the table next changes), or None when
        that is not known (read all)."""
        changed = table.since(self.pos) if self.table is table and self.version == table.version else None
        self.table, self.pos, self.version = table, table.logged, table.version
        return changed

    def rows(self, table: CandidateTable) -> np.ndarray | None:
        """Rows touched since the last call, ascending, once each, or None when
        that is not known (read all)."""
        changed = self.logged(table)
        return None if changed is None else np.unique(changed).astype(np.int64)


def percentiles(values: Iterable[float], censored: int | None = None) -> dict[str, float | int]:
    """``count``, ``p50``, ``p90``, ``p99`` and ``max`` of ``values``; with
    ``censored``, how many of them are lower bounds (waits still open)."""
    v = values.astype(float, copy=False) if isinstance(values, np.ndarray) else np.asarray(list(values), dtype=float)
    if v.size == 0:
        out: dict[str, float | int] = {"count": 0}
    else:
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        out = {"count": int(v.size), "p50": round(float(p50), 3), "p90": round(float(p90), 3),
               "p99": round(float(p99), 3), "max": round(float(v.max()), 3)}
    if censored is not None:
        out["censored"] = int(censored)
    return out


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0 or not x.any():
        return 1.0
    return round(float(x.sum() ** 2 / (x.size * (x ** 2).sum())), 6)


# ----------------------------------------------------------------- waits and moves, from the event log

STOP_KINDS = ("lost", "requeued", "preempted")  # a running task stopped: it waits again
END_KINDS = ("finished", "failed", "omitted", "withdrawn")
STORY_KINDS = ("placed", "migrated", *STOP_KINDS, *END_KINDS)  # what a task's story is made of
_CODE = {kind: i for i, kind in enumerate(STORY_KINDS)}
_PLACED, _MIGRATED = _CODE["placed"], _CODE["migrated"]
_STOPS = frozenset(_CODE[k] for k in STOP_KINDS)
LANES = 40  # lanes kept: the tasks with the most moves
LANE_ITEMS = 400  # spans and marks kept per lane at most (a task moved more often is cut, and says so)
SCAN_BLOCK = 1 << 23  # bytes of a streamed log read at once


class Stories:
    """The events of some tasks (those stopped or moved), gathered in one read
    of the log and kept as compact columns, in log order: no object per
    event. Then, per task: its waits after each stop, its moves, and for
    the few chosen, its lane (where it ran, its stops and moves).

    A move is a ``migrated`` event (a service placed again, or moved while
    it runs: cause ``return``, ``defragment``), or a task placed again on
    another node with no ``migrated`` event (a job, or a lost service).
    ``omitted`` events are counted by the code of what left the member out
    first (``quota``, ``capacity``, ...; ``elastic`` when nothing else bound)."""

    def __init__(self, tasks: Iterable[str]) -> None:
        self.names = list(dict.fromkeys(tasks))
        self.ids = {task: i for i, task in enumerate(self.names)}
        self.strings: dict[str, int] = {}  # nodes, sites and causes, each kept once
        self.omitted: Counter = Counter()
        self._t, self._task, self._kind = array("d"), array("q"), array("b")
        self._node, self._site, self._cause = array("q"), array("q"), array("q")  # migrated: to, from, cause
        self._bytes, self._downtime = array("d"), array("d")

    def _id(self, value: Any) -> int:
        if value is None:
            return -1
        text = str(value)
        i = self.strings.get(text)
        if i is None:
            i = self.strings[text] = len(self.strings)
        return i

    def add(self, e: dict[str, Any]) -> None:
        """One event (those of other tasks and kinds are passed over)."""
        kind = e.get("kind")
        if kind == "omitted":
            why = e.get("why") or ()
            first = why[0] if why and isinstance(why[0], dict) else {}
            self.omitted[first.get("code") or "elastic"] += 1
        i = self.ids.get(e.get("task"))
        code = _CODE.get(kind)
        t = finite(e.get("t"))
        if i is None or code is None or t is None:
            return
        self._t.append(t)
        self._task.append(i)
        self._kind.append(code)
        moved = code == _MIGRATED
        self._node.append(self._id(e.get("to") if moved else e.get("node")))
        self._site.append(self._id(e.get("from") if moved else e.get("site")))
        self._cause.append(self._id(e.get("cause")))
        self._bytes.append(finite(e.get("bytes")) or 0.0)
        self._downtime.append(finite(e.get("downtime_s")) or 0.0)

    def __len__(self) -> int:
        return len(self._t)

    def told(self, end: float) -> Iterator["Told"]:
        """Each task with events, in the order given: its waits, moves, stops."""
        task = np.frombuffer(self._task, np.int64) if len(self._task) else np.zeros(0, np.int64)
        order = np.argsort(task, kind="stable")  # by task, each in log order
        bounds = np.searchsorted(task[order], np.arange(len(self.names) + 1))
        cols = _Columns(self)
        for i, name in enumerate(self.names):
            rows = order[bounds[i]:bounds[i + 1]].tolist()
            if rows:
                yield Told(name, rows, cols, end)

    def lanes(self, end: float, *, limit: int = LANES, chosen: Iterable[str] | None = None,
              tier_of: Callable[[str], str | None] | None = None,
              record: Callable[[str], Any] | None = None, told: Iterable["Told"] | None = None) -> dict[str, Any]:
        """The lanes of the tasks that moved, then of those only stopped (placed
        again where they were, or still waiting): the ``limit`` first by most
        moves, then most stops, then the earliest first move or stop. Or
        those of the ``chosen`` tasks, in that order. With how many tasks
        moved, and how many more were stopped, in all. (``told``: what
        ``told(end)`` gave, when it was read already.)"""
        counts = {"moved": 0, "stopped": 0}

        def counted(items: Iterable[Told]) -> Iterator[Told]:
            for x in items:
                if x.moves:
                    counts["moved"] += 1
                elif x.stops:
                    counts["stopped"] += 1
                yield x

        told = counted(self.told(end) if told is None else told)
        # (read once, keeping the picked only: a city's hundreds of thousands of stories are not held)
        if chosen is None:  # as sorted(...)[:limit] would pick them (the task breaks every tie)
            picked = heapq.nsmallest(limit, (x for x in told if x.moves or x.stops),
                                     key=lambda x: (-x.moves, -x.stops, x.first, x.task))
        else:
            wanted = dict.fromkeys(chosen)
            found = {x.task: x for x in told if x.task in wanted}
            picked = [found[task] for task in wanted if task in found]
        tiers: dict[str, str | None] = {}

        def tier(site: str | None) -> str | None:
            if site is None or tier_of is None:
                return None
            if site not in tiers:
                tiers[site] = tier_of(site)
            return tiers[site]

        return {"moved": counts["moved"], "stopped": counts["stopped"], "tasks": [x.lane(tier, record) for x in picked]}


class _Columns:
    """A ``Stories``' columns (read per task, as they are: lists of them took
    about 200 bytes an event), and its strings by id."""

    __slots__ = ("t", "kind", "node", "site", "cause", "bytes", "downtime", "strings")

    def __init__(self, st: Stories) -> None:
        self.t, self.kind = st._t, st._kind
        self.node, self.site, self.cause = st._node, st._site, st._cause
        self.bytes, self.downtime = st._bytes, st._downtime
        self.strings = list(st.strings)

    def name(self, i: int) -> str | None:
        return self.strings[i] if i >= 0 else None


class Told:
    """What the events say of one task: each wait after a stop (and whether
    it is censored: still open at the end, or cut by the task's end), its
    moves and stops."""

    __slots__ = ("task", "rows", "cols", "end", "waits", "moves", "stops", "first")

    def __init__(self, task: str, rows: list[int], cols: _Columns, end: float) -> None:
        self.task, self.rows, self.cols, self.end = task, rows, cols, end
        t, kind, node = cols.t, cols.kind, cols.node
        self.waits: list[tuple[float, bool]] = []
        self.moves = self.stops = 0
        self.first = math.inf  # the first move or stop
        since = last = None
        for j, r in enumerate(rows):
            k = kind[r]
            if k == _PLACED:
                if since is not None:
                    self.waits.append((t[r] - since, False))
                    since = None
                if last is not None and node[r] != last and not self._migrates(j):
                    self._moved(t[r])
                last = node[r]
            elif k == _MIGRATED:
                self._moved(t[r])
            elif k in _STOPS:
                self.stops += 1
                self.first = min(self.first, t[r])
                since = t[r]
            elif since is not None:  # it ended while waiting
                self.waits.append((t[r] - since, True))
                since = None
        if since is not None:
            self.waits.append((max(end, since) - since, True))

    def _migrates(self, j: int) -> bool:
        """The placement ``rows[j]`` is a migration (its ``migrated`` event follows)."""
        rows = self.rows
        return j + 1 < len(rows) and self.cols.kind[rows[j + 1]] == _MIGRATED

    def _moved(self, t: float) -> None:
        self.moves += 1
        self.first = min(self.first, t)

    def lane(self, tier: Callable[[str | None], str | None], record: Callable[[str], Any] | None = None
             ) -> dict[str, Any]:
        """Where the task ran (``ran``: ``[start_s, end_s, node, site, tier,
        serves_s]``, ``serves_s`` when it served again after a migration's state
        arrived), and its stops and moves (``marks``: the events, as in
        events.jsonl, without ``task``; a task placed again on another node
        with no migration is a ``placed`` mark with ``from`` and ``to``)."""
        c = self.cols
        t, kind, node, site, name = c.t, c.kind, c.node, c.site, c.name
        ran: list[list[Any]] = []
        marks: list[dict[str, Any]] = []
        here: list[Any] | None = None  # [start, node, site, serves]
        since = last = None
        status = None

        def close(at: float) -> None:
            start, n, s, serves = here
            ran.append([start, round(at, 6), name(n), name(s), tier(name(s)), round(min(max(serves, start), at), 6)])

        for j, r in enumerate(self.rows):
            k, at = kind[r], t[r]
            if k == _PLACED:
                if here is not None:  # moved while it ran: the old place ends now
                    close(at)
                base = since if since is not None else at
                here = [at, node[r], site[r], at]
                if last is not None and node[r] != last and not self._migrates(j):
                    marks.append({"t": at, "kind": "placed", "from": name(last), "to": name(node[r])})
                last, since, status = node[r], None, "running"
            elif k == _MIGRATED:
                mark = {"t": at, "kind": "migrated", "from": name(site[r]), "to": name(node[r]),
                        "bytes": int(c.bytes[r]), "downtime_s": c.downtime[r]}
                if c.cause[r] >= 0:
                    mark["cause"] = name(c.cause[r])
                marks.append(mark)
                if here is not None:
                    here[3] = base + c.downtime[r]
            elif k in _STOPS:
                if here is not None:
                    close(at)
                    here = None
                mark = {"t": at, "kind": STORY_KINDS[k], "node": name(node[r]), "site": name(site[r])}
                if c.cause[r] >= 0:
                    mark["cause"] = name(c.cause[r])
                marks.append(mark)
                since, status = at, "pending"
            else:
                if here is not None:
                    close(at)
                    here = None
                since, status = None, STORY_KINDS[k]
        if here is not None:
            close(max(self.end, here[0]))
        rec = record(self.task) if record is not None else None
        out: dict[str, Any] = {"task": self.task, "tenant": getattr(rec, "tenant", None),
                               "status": getattr(rec, "status", None) or status,
                               "moves": self.moves, "stops": self.stops}
        for key, items in (("ran", ran), ("marks", marks)):
            out[key] = items[:LANE_ITEMS]
            if len(items) > LANE_ITEMS:
                out[f"{key}_left_out"] = len(items) - LANE_ITEMS
        return out


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (not a number, or not finite)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def touched(events: Iterable[dict[str, Any]]) -> list[str]:
    """Tasks stopped or migrated in ``events``, in order of first appearance."""
    return list(dict.fromkeys(e["task"] for e in events
                              if e.get("kind") in ("migrated", *STOP_KINDS) and e.get("task") is not None))


def events_of(log, wanted: Iterable[str], omitted: bool = False) -> Iterator[dict[str, Any]]:
    """The events of an ``EventLog`` about the tasks ``wanted`` (of the kinds a
    story is made of), and with ``omitted`` every ``omitted`` event, in log
    order. A streamed log's file is read once, in blocks, as bytes: a
    regular expression finds each event's kind and task, and only the lines
    wanted are decoded."""
    wanted = wanted if isinstance(wanted, (set, frozenset, dict)) else set(wanted)
    kinds = STORY_KINDS if wanted else ("omitted",) if omitted else ()
    if not kinds:
        return
    if log.path is None:
        for e in log:
            kind = e.get("kind")
            if kind in _CODE and (e.get("task") in wanted or (omitted and kind == "omitted")):
                yield e
        return
    reader = iter(log)  # reading a streamed log first writes out all it holds
    next(reader, None)
    getattr(reader, "close", lambda: None)()
    keys = {json.dumps(task)[1:-1].encode("ascii") for task in wanted}  # as events.jsonl writes them
    find = re.compile(rb'"kind":"(' + b"|".join(k.encode() for k in kinds)
                      + rb')","task":"([^"\\]*(?:\\.[^"\\]*)*)"').finditer
    with open(log.path, "rb") as f:
        rest = b""
        while True:
            block = f.read(SCAN_BLOCK)
            data = rest + block if rest else block
            cut = data.rfind(b"\n") + 1 if block else len(data)  # (whole lines only; the rest goes on)
            for m in find(data, 0, cut):
                if m.group(2) in keys or (omitted and m.group(1) == b"omitted"):
                    stop = data.find(b"\n", m.end(), cut)
                    yield json.loads(data[data.rfind(b"\n", 0, m.start()) + 1:stop if stop >= 0 else cut])
            if not block:
                return
            rest = data[cut:]


def task_lanes(events: Iterable[dict[str, Any]], end: float, tasks: Iterable[str] | None = None,
               limit: int = LANES) -> dict[str, Any]:
    """Lanes from events alone (no fleet: tiers unknown): of ``tasks``, or of
    the tasks that moved, the ``limit`` with the most moves."""
    events = events if isinstance(events, list) else list(events)
    stories = Stories(touched(events) if tasks is None else tasks)
    for e in events:
        stories.add(e)
    return stories.lanes(end, limit=limit, chosen=tasks)


WAITS_BLOCK = 1 << 18  # task records read at once for their first waits (``summarize``)


def _grouped(codes: np.ndarray, values: np.ndarray, names, into: dict[str, list]) -> None:
    """``values`` appended to ``into[names[code]]`` by their codes, as one
    array per code (one sort, not a pass per code; no float object per task)."""
    if not codes.size:
        return
    order = np.argsort(codes, kind="stable")
    codes, values = codes[order], values[order]
    cuts = np.flatnonzero(np.diff(codes)) + 1
    for start, part in zip(np.concatenate(([0], cuts)).tolist(), np.split(values, cuts)):
        into[names[int(codes[start])]].append(part)


def _flat(values: list) -> np.ndarray:
    """A group's values (``_grouped``'s arrays and single floats) as one array."""
    return np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in values]) if values else np.zeros(0)


def _first_waits(c, end: float, waits, tenant_waits, censored: Counter, tenant_censored: Counter, completion,
                 tenant_completion) -> None:
    """Each task's first wait from its submission (to its first placement;
    a lower bound for one still waiting, or ended without being placed) and
    a finished job's completion time, by class and by tenant, over the
    ledger's columns. Tasks that never became work have no class, and are left out."""
    live = (c.status >= 0) & (c.klass > 0)
    sub, first, ended = c.submitted_at, c.first_placed_at, c.ended_at
    never = np.isnan(first)
    placed = live & ~never
    waiting = live & never & (c.status == c.code("pending"))
    failed = live & never & ((c.status == c.code("failed")) | (c.status == c.code("withdrawn")))  # waited, then ended
    seconds = np.zeros(sub.size)
    seconds[placed] = first[placed] - sub[placed]
    seconds[waiting] = np.maximum(end, sub[waiting]) - sub[waiting]
    at = np.where(np.isnan(ended), end, ended)
    seconds[failed] = np.maximum(at[failed], sub[failed]) - sub[failed]
    counted = placed | waiting | failed
    cut = waiting | failed
    _grouped(c.klass[counted], seconds[counted], KLASSES, waits)
    _grouped(c.tenant[counted], seconds[counted], c.tenants, tenant_waits)
    for code, n in zip(*np.unique(c.klass[cut], return_counts=True)):
        censored[KLASSES[int(code)]] += int(n)
    for code, n in zip(*np.unique(c.tenant[cut], return_counts=True)):
        tenant_censored[c.tenants[int(code)]] += int(n)
    done = live & (c.status == c.code("finished")) & c.job & ~np.isnan(ended)
    took = ended[done] - sub[done]
    _grouped(c.klass[done], took, KLASSES, completion)
    _grouped(c.tenant[done], took, c.tenants, tenant_completion)


class Readout(Protocol):
    """All that metrics and outputs read of a run (``Simulation`` has it): the
    ledger's view, the event log, the recorder's samples, the placement
    state, the world, and the run's seed and end."""

    view: Any  # ledger.LedgerView
    events: Any  # events.EventLog
    recorder: "Recorder"
    state: Any  # scheduling.state.PlacementState
    world: Any  # model.work.World
    seed: int
    until: float | None


def summarize(sim: Readout, end: float) -> dict[str, Any]:
    status = sim.view.counts()
    # per class and per tenant: arrays of the first waits (``_grouped``), then single later waits
    waits: dict[str, list] = defaultdict(list)
    tenant_waits: dict[str, list] = defaultdict(list)
    censored: Counter = Counter()
    tenant_censored: Counter = Counter()
    completion: dict[str, list] = defaultdict(list)
    tenant_completion: dict[str, list] = defaultdict(list)

    def wait(rec, seconds: float, cut: bool) -> None:
        waits[rec.klass].append(seconds)
        tenant_waits[rec.tenant].append(seconds)
        if cut:
            censored[rec.klass] += 1
            tenant_censored[rec.tenant] += 1

    records = sim.view.tasks
    n = sim.view.id_count()
    for start in range(0, max(n, 1), WAITS_BLOCK):  # (a block at a time: a city's millions of tasks
        # read whole made ten copies of a column; the groups come out as one read would make them)
        _first_waits(sim.view.columns(start, min(start + WAITS_BLOCK, n)), end, waits, tenant_waits, censored,
                     tenant_censored, completion, tenant_completion)
    # the waits after stops, and the lanes: one read of the log, for the tasks stopped or moved
    log = sim.events
    stories = Stories(touched(log.notable))
    if len(stories.names) or status.get("omitted", 0):
        was = gc.isenabled()
        gc.disable()  # the run's millions of objects are not traced again by collections the read would make
        try:
            for e in events_of(log, stories.ids, omitted=bool(status.get("omitted", 0))):
                stories.add(e)
        finally:
            if was:
                gc.enable()
    fleet = sim.world.fleet

    def tier_of(site: str) -> str | None:
        try:
            return TIERS[int(fleet.site_tier[fleet.site_index[site]])]
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    def waited(told: Iterable[Told]) -> Iterator[Told]:  # each story's waits, as the lanes read it
        for x in told:
            rec = records.get(x.task)
            if rec is not None and rec.klass:
                for seconds, cut in x.waits:
                    wait(rec, seconds, cut)
            yield x

    lanes = stories.lanes(end, tier_of=tier_of, record=records.get, told=waited(stories.told(end)))
    omitted_by = dict(sorted(stories.omitted.items(), key=lambda kv: (-kv[1], kv[0])))
    del stories  # (its columns, before the groups are flattened)
    reasons: Counter = Counter()
    firsts: list[Counter] = []
    for rec in sim.view.pending():
        reasons.update(rec.reasons.keys())
        firsts.append(rec.reasons)
    state = sim.state
    weighted = state.share_by_tenant()
    kinds = log.kinds
    return {
        "end_s": round(end, 6),
        "tasks": {"submitted": len(sim.view), **status},
        "queueing_delay_s": {k: percentiles(_flat(v), censored[k]) for k, v in sorted(waits.items())},
        "completion_time_s": {k: percentiles(_flat(v)) for k, v in sorted(completion.items())},
        "queueing_delay_by_tenant_s": {k: percentiles(_flat(v), tenant_censored[k])
                                       for k, v in sorted(tenant_waits.items())},
        "pending_reasons": reasons_json(reasons),  # tasks per reason they mention
        "pending_by_first_reason": first_reasons_json(firsts, sim.world.fleet),  # per the one that holds each back
        "omitted_by": omitted_by,
        "allocation_time_average": sim.recorder.time_average(end),
        "reserved_time_average": sim.recorder.time_average(end, "reserved"),
        "allocation_by_site": sim.recorder.by_site(end),
        "fragmentation": sim.recorder.fragmentation(end),
        "near_violations": sim.recorder.near(end),
        "completion_time_by_tenant_s": {k: percentiles(_flat(v)) for k, v in sorted(tenant_completion.items())},
        "fairness": {
            "dominant_share": {n: round(s * state.world.tenants[n].weight, 6) for n, s in weighted.items()},
            "weighted_share": {n: round(s, 6) for n, s in weighted.items()},
            "jain_weighted": jain(weighted.values()),
        },
        "events": dict(sorted(kinds.items())),
        "moves": {"migrations": kinds.get("migrated", 0), "preemptions": kinds.get("preempted", 0),
                  "lost": kinds.get("lost", 0), "requeued": kinds.get("requeued", 0),
                  "bytes": log.migrated_bytes, "downtime_s": round(log.migrated_downtime_s, 6),
                  # why work was disturbed: each preemption, and each move of running work, once
                  "causes": dict(sorted(log.causes.items()))},
        "lanes": lanes,
        **_backfill_json(getattr(getattr(sim, "business", None), "backfill", None)),
    }


def _backfill_json(bf) -> dict[str, Any]:
    """With backfill on: its mode, the units it reserved for (each once) and
    the units that started in a pass after a reservation was made in it."""
    if bf is None:
        return {}
    return {"backfill": {"mode": bf.mode, "units_reserved": bf.made, "backfilled": bf.backfilled}}
