"""A recorded run, read for the console from what ``simulate`` or ``run``
wrote: ``events.jsonl`` (read once into columns: time, kind, task, site,
node and the line's offset; a task's events are read again from the file
when its page is opened), ``result.json`` (the reasons of tasks still
waiting, the timelines) and ``world.json`` (the sites, links and tenants).

The world at any instant is made from the events up to it: each task's last
status and site are the last of its events that set them, found for all
tasks at once with NumPy, so a slider over the run costs one pass over an
array, not one Python object per task.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from suanli.console import model

# what each event kind makes of its task's status (kinds not listed leave it)
STATUS_OF = {"submitted": "pending", "placed": "running", "started": "running", "migrated": "running",
             "preempted": "pending", "requeued": "pending", "lost": "pending", "finished": "finished",
             "failed": "failed", "omitted": "omitted", "withdrawn": "withdrawn"}
PLACING = ("placed", "started", "migrated")  # kinds that say where a task is
LEAVING = ("preempted", "requeued", "lost", "finished", "failed", "omitted", "withdrawn")  # kinds after which it is nowhere


class RunFilesError(Exception):
    """The folder is not a run's output (a file is missing or not what it should be)."""


@dataclass
class _State:
    status: np.ndarray  # int8[T]: code in model.STATUSES, -1 not yet submitted
    site: np.ndarray  # int32[T]: where it is (running) or was last, -1 never placed


class RecordedRun(model.RunData):
    live = False

    def __init__(self, folder: Path | str) -> None:
        folder = Path(folder)
        self.folder = folder
        self.title = folder.name
        for name in ("result.json", "events.jsonl"):
            if not (folder / name).is_file():
                raise RunFilesError(f"{folder}: no {name} (a folder that `suanli simulate` or `suanli run` wrote)")
        try:
            self.result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
            world_file = folder / "world.json"
            self.world = json.loads(world_file.read_text(encoding="utf-8")) if world_file.is_file() else {}
        except (OSError, ValueError) as exc:
            raise RunFilesError(f"{folder}: cannot read the run: {exc}") from None
        self.world.setdefault("sites", [])
        self.world.setdefault("links", [])
        self.world.setdefault("populations", [])
        self.world.setdefault("tenants", [])
        self.world.setdefault("resources", [])
        self.end = float(self.result.get("end_s") or 0.0)
        self.scenario = self.result.get("scenario") or self.title
        self._read_events(folder / "events.jsonl")
        self._tiers = model.SiteTiers(self.world)
        self.site_tier = np.array([model.TIER_CODES.get(self._tiers.tier(s), -1) for s in self.site_names],
                                  np.int8) if self.site_names else np.zeros(0, np.int8)
        self._states: OrderedDict[float, _State] = OrderedDict()
        self._hosts_at: tuple[float, dict[str, list[dict[str, Any]]]] | None = None
        self._pending_why = {u["task"]: u.get("why") or [] for u in self.result.get("unscheduled") or []}
        self._first_code = np.full(len(self.task_names), "", object)  # a task waiting at the end: its first reason's code
        for task, why in self._pending_why.items():
            if why and task in self.task_index:
                self._first_code[self.task_index[task]] = why[0]["code"]

    # ---------------------------------------------------------------- reading

    def _read_events(self, path: Path) -> None:
        t: list[float] = []
        kind: list[int] = []
        task: list[int] = []
        site: list[int] = []
        offsets: list[int] = []
        kinds: dict[str, int] = {}
        tasks: dict[str, int] = {}
        sites: dict[str, int] = {}
        tenant_of: list[str] = []
        host_key: list[int] = []  # a VC host's (vc, host) code, -1 for other events
        vcs: dict[str, int] = {}
        hosts: dict[tuple[int, str], int] = {}
        self.kind_names: list[str] = []
        off = 0
        loads = json.loads
        with open(path, "rb") as f:
            for line in f:
                n = len(line)
                if n > 1:
                    e = loads(line)
                    k = e["kind"]
                    code = kinds.get(k)
                    if code is None:
                        code = kinds[k] = len(self.kind_names)
                        self.kind_names.append(k)
                    name = e.get("task")
                    if name is None:
                        tid = -1
                    else:
                        tid = tasks.get(name)
                        if tid is None:
                            tid = tasks[name] = len(tenant_of)
                            tenant_of.append(e.get("tenant") or "")
                    where = e.get("site")
                    if where is None:
                        node = e.get("to") if k == "migrated" else e.get("node")
                        where = node.split("/", 1)[0] if node else None
                    sid = -1 if where is None else sites.setdefault(where, len(sites))
                    if k == "hostAdded" or k == "hostRemoved":
                        vc = vcs.setdefault(e.get("vc") or "", len(vcs))
                        host_key.append(hosts.setdefault((vc, e.get("host") or ""), len(hosts)))
                    else:
                        host_key.append(-1)
                    t.append(e["t"])
                    kind.append(code)
                    task.append(tid)
                    site.append(sid)
                    offsets.append(off)
                off += n
        self.path = path
        self.ev_t = np.array(t, float)
        self.ev_kind = np.array(kind, np.int16)
        self.ev_task = np.array(task, np.int32)
        self.ev_site = np.array(site, np.int32)
        self.ev_offset = np.array(offsets, np.int64)
        self.ev_host = np.array(host_key, np.int32)
        self.host_vc = np.zeros(len(hosts), np.int32)
        for (vc, _), h in hosts.items():
            self.host_vc[h] = vc
        self.vc_names = list(vcs)
        self.task_names = list(tasks)
        self.task_index = tasks
        self.site_names = list(sites)
        self.site_index = sites
        tenants = sorted(set(tenant_of))
        self.tenant_names = tenants
        tcode = {n: i for i, n in enumerate(tenants)}
        self.task_tenant = np.array([tcode[n] for n in tenant_of], np.int32)
        apps: dict[str, int] = {}
        self.task_app = np.array([apps.setdefault(n.split("/", 1)[0], len(apps)) for n in self.task_names], np.int32)
        self.app_names = list(apps)
        n_kinds = len(self.kind_names)
        self.kind_status = np.full(n_kinds, -1, np.int8)  # status code an event kind sets
        self.kind_places = np.zeros(n_kinds, bool)
        for k, code in kinds.items():
            if k in STATUS_OF:
                self.kind_status[code] = model.STATUSES.index(STATUS_OF[k])
            self.kind_places[code] = k in PLACING
        # a task's events, in time order: one sort now, a slice per page
        by_task = np.flatnonzero(self.ev_task >= 0)
        order = by_task[np.argsort(self.ev_task[by_task], kind="stable")]
        self._by_task = order
        self._task_start = np.searchsorted(self.ev_task[order], np.arange(len(self.task_names) + 1))

    def lines(self, rows: Iterable[int]) -> list[dict[str, Any]]:
        """The events at these rows, as written."""
        out = []
        with open(self.path, "rb") as f:
            for r in rows:
                f.seek(int(self.ev_offset[r]))
                out.append(json.loads(f.readline()))
        return out

    # ---------------------------------------------------------------- the world at an instant

    def clamp(self, at: float | None) -> float:
        return self.end if at is None else float(min(max(at, 0.0), self.end))

    def state(self, at: float | None = None) -> _State:
        at = self.clamp(at)
        hit = self._states.get(at)
        if hit is not None:
            self._states.move_to_end(at)
            return hit
        k = int(np.searchsorted(self.ev_t, at, side="right"))
        n = len(self.task_names)
        status = np.full(n, -1, np.int8)
        site = np.full(n, -1, np.int32)
        task, kind = self.ev_task[:k], self.ev_kind[:k]
        sets = np.flatnonzero((task >= 0) & (self.kind_status[kind] >= 0))
        if sets.size:
            last = _last_per(task[sets], sets)
            status[task[last]] = self.kind_status[kind[last]]
        places = np.flatnonzero((task >= 0) & self.kind_places[kind] & (self.ev_site[:k] >= 0))
        if places.size:
            last = _last_per(task[places], places)
            site[task[last]] = self.ev_site[last]
        hit = self._states[at] = _State(status, site)
        if len(self._states) > 16:
            self._states.popitem(last=False)
        return hit

    # ---------------------------------------------------------------- RunData

    def span(self) -> tuple[float, float]:
        return 0.0, self.end

    def overview(self, at: float | None = None) -> dict[str, Any]:
        at = self.clamp(at)
        st = self.state(at)
        counts = np.bincount(st.status[st.status >= 0], minlength=len(model.STATUSES))
        running = st.status == model.RUNNING
        tiers = np.bincount(self.site_tier[st.site[running]][self.site_tier[st.site[running]] >= 0],
                            minlength=len(model.TIERS)) if running.any() else np.zeros(len(model.TIERS), int)
        timeline = self.result.get("timeline") or {}
        reasons = self._pending_reasons() if at >= self.end else None
        return {
            "at": at, "counts": {s: int(c) for s, c in zip(model.STATUSES, counts)},
            "running_by_tier": {t: int(c) for t, c in zip(model.TIERS, tiers)},
            "running_by_site": self._running_by_site(st, 12),
            "allocation": {"t": timeline.get("t") or [], "by_tier": timeline.get("by_tier") or {}},
            "pending_by_reason": reasons,
            "incidents": self.events(kinds=model.INCIDENT_KINDS, before=at, limit=10)["rows"],
        }

    def _running_by_site(self, st: _State, most: int) -> list[tuple[str, int]]:
        running = st.site[(st.status == model.RUNNING) & (st.site >= 0)]
        if not running.size:
            return []
        per = np.bincount(running, minlength=len(self.site_names))
        top = np.argsort(-per, kind="stable")[:most]
        return [(self.site_names[s], int(per[s])) for s in top if per[s]]

    def _pending_reasons(self) -> dict[str, int]:
        """Tasks waiting at the end by their first reason (the binding constraint when there is one)."""
        out: dict[str, int] = {}
        for why in self._pending_why.values():
            if why:
                out[why[0]["reason"]] = out.get(why[0]["reason"], 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def tasks(self, q: model.TaskQuery) -> dict[str, Any]:
        at = self.clamp(q.at)
        st = self.state(at)
        keep = st.status >= 0
        if q.tenant:
            code = self.tenant_names.index(q.tenant) if q.tenant in self.tenant_names else -2
            keep &= self.task_tenant == code
        if q.app:
            code = self.app_names.index(q.app) if q.app in self.app_names else -2
            keep &= self.task_app == code
        if q.state:
            keep &= st.status == (model.STATUSES.index(q.state) if q.state in model.STATUSES else -2)
        if q.site:
            keep &= st.site == self.site_index.get(q.site, -2)
        if q.tier:
            tier = model.TIER_CODES.get(q.tier, -2)
            keep &= (st.site >= 0) & (self.site_tier[np.maximum(st.site, 0)] == tier)
        if q.reason:  # the reasons of the tasks waiting at the end are all a run records
            keep &= (self._first_code == q.reason) & (at >= self.end)
        if q.text:
            keep &= np.fromiter((q.text in name for name in self.task_names), bool, keep.size)
        found = np.flatnonzero(keep)
        page = found[q.offset:q.offset + q.limit]
        rows = [self._row(int(i), st) for i in page]
        return {"at": at, "total": int(found.size), "offset": q.offset, "limit": q.limit, "rows": rows}

    def _row(self, i: int, st: _State) -> dict[str, Any]:
        name = self.task_names[i]
        s = int(st.site[i])
        status = model.STATUSES[st.status[i]] if st.status[i] >= 0 else None
        why = self._pending_why.get(name) if status == "pending" else None
        return {"task": name, "tenant": self.tenant_names[self.task_tenant[i]], "app": self.app_names[self.task_app[i]],
                "status": status, "site": self.site_names[s] if s >= 0 else None,
                "tier": model.TIERS[self.site_tier[s]] if s >= 0 and self.site_tier[s] >= 0 else None,
                "reason": why[0]["reason"] if why else None}

    def task(self, name: str, at: float | None = None, tenant: str | None = None) -> dict[str, Any] | None:
        i = self.task_index.get(name)
        if i is None:
            return None
        at = self.clamp(at)
        rows = self._by_task[self._task_start[i]:self._task_start[i + 1]]
        history = self.lines(rows)
        out = self._row(i, self.state(at))
        why = None
        for e in history:
            if e["kind"] == "omitted" and e.get("why"):
                why = e["why"]
        if out["status"] == "pending":
            why = self._pending_why.get(name) or why
        lead = model.gang_of(name)
        j = self.task_index.get(lead) if lead != name else i
        lead_history = history if j == i else \
            self.lines(self._by_task[self._task_start[j]:self._task_start[j + 1]]) if j is not None else []
        out.update(history=history, segments=model.segments(history, self.end, self._tiers), why=why,
                   moves=[e for e in history if e["kind"] in model.MOVE_KINDS], widths=model.widths(lead_history))
        return out

    def events(self, kinds: Iterable[str] = (), before: float | None = None, limit: int = 100) -> dict[str, Any]:
        wanted = np.isin(self.ev_kind, [self.kind_names.index(k) for k in kinds if k in self.kind_names]) \
            if kinds else np.ones(self.ev_kind.size, bool)
        if before is not None:
            wanted &= self.ev_t <= before
        rows = np.flatnonzero(wanted)
        total = int(rows.size)
        rows = rows[-limit:][::-1]  # the latest first
        return {"total": total, "rows": self.lines(rows)}

    def event_counts(self, kinds: Iterable[str], buckets: int = model.BUCKETS) -> dict[str, Any]:
        span = max(self.end, 1e-9)
        which = np.minimum((self.ev_t / span * buckets).astype(np.int64), buckets - 1)
        out = {}
        for k in kinds:
            if k in self.kind_names:
                mine = self.ev_kind == self.kind_names.index(k)
                if mine.any():
                    out[k] = np.bincount(which[mine], minlength=buckets).tolist()
        return {"start": 0.0, "end": self.end, "kinds": out}

    def topology(self, at: float | None = None) -> dict[str, Any]:
        at = self.clamp(at)
        st = self.state(at)
        running = st.site[(st.status == model.RUNNING) & (st.site >= 0)]
        per = np.bincount(running, minlength=len(self.site_names)) if running.size else np.zeros(len(self.site_names), int)
        load = {name: int(per[i]) for name, i in self.site_index.items() if per[i]}
        links = [self.kind_names.index(k) for k in ("linkDown", "linkUp") if k in self.kind_names]
        rows = np.flatnonzero(np.isin(self.ev_kind, links) & (self.ev_t <= at)) if links else []
        return model.topology(self.world, load, at, model.down_links(self.lines(rows)))

    def tenants(self, at: float | None = None) -> list[dict[str, Any]]:
        at = self.clamp(at)
        st = self.state(at)
        timeline = self.result.get("timeline") or {}
        times = timeline.get("t") or []
        k = int(np.searchsorted(np.asarray(times, float), at, side="right")) - 1 if times else -1
        shares = {name: (series[k] if 0 <= k < len(series) else None)
                  for name, series in (timeline.get("dominant_share") or {}).items()}
        out = []
        known = {t["name"]: t for t in self.world["tenants"]}
        codes = {name: code for code, name in enumerate(self.tenant_names)}
        for name in sorted(set(self.tenant_names) | set(known)):
            mine = (self.task_tenant == codes.get(name, -1)) & (st.status >= 0)
            counts = np.bincount(st.status[mine], minlength=len(model.STATUSES))
            t = known.get(name, {})
            usage = self.result.get("tenant_usage")  # what each tenant held when the run ended
            used = (usage or {}).get(name, {}) if usage is not None and at >= self.end else None
            out.append({"name": name, "weight": t.get("weight"), "quota": t.get("quota") or {},
                        "used": used, "dominant_share": shares.get(name),
                        "tasks": {s: int(c) for s, c in zip(model.STATUSES, counts)},
                        "hosts": self._hosts(name, at),
                        **model.cohort_of(t, (self.result.get("tenant_cohorts") or {}).get(name, {})
                                          if used is not None else None)})
        return out

    def _hosts(self, tenant: str, at: float) -> list[dict[str, Any]]:
        """A tenant's VC hosts at ``at`` by VC and site, from hostAdded/hostRemoved
        (read once per instant for every tenant)."""
        if self._hosts_at is None or self._hosts_at[0] != at:
            self._hosts_at = (at, self._all_hosts(at))
        return self._hosts_at[1].get(tenant, [])

    def _all_hosts(self, at: float) -> dict[str, list[dict[str, Any]]]:
        """Every VC host held at ``at`` (its last hostAdded or hostRemoved before it
        was an add), counted by VC and site, by the VC's tenant."""
        rows = np.flatnonzero((self.ev_host >= 0) & (self.ev_t <= at))
        if not rows.size:
            return {}
        last = _last_per(self.ev_host[rows], rows)
        added = self.kind_names.index("hostAdded") if "hostAdded" in self.kind_names else -1
        held = last[(self.ev_kind[last] == added) & (self.ev_site[last] >= 0)]
        vc, where = self.host_vc[self.ev_host[held]], self.ev_site[held]
        n_sites = max(len(self.site_names), 1)
        keys, counts = np.unique(vc.astype(np.int64) * n_sites + where, return_counts=True)
        out: dict[str, list[dict[str, Any]]] = {}
        owners = self.world.get("vcs") or {}
        for key, n in sorted(zip(keys.tolist(), counts.tolist()),
                             key=lambda kv: (self.vc_names[kv[0] // n_sites], kv[0] % n_sites)):
            name, site = self.vc_names[key // n_sites], key % n_sites
            owner = owners.get(name) or name.split("/", 1)[0]
            out.setdefault(owner, []).append({"vc": name, "site": self.site_names[site] if site >= 0 else "?",
                                              "hosts": int(n)})
        return out


def _last_per(keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For ascending ``rows`` with ``keys``: the last row of each distinct key."""
    rev = keys[::-1]
    _, first = np.unique(rev, return_index=True)
    return rows[::-1][first]
