"""Elastic gangs resized while they run (``policy.elastic``).

Every ``policy.elastic.every`` seconds the widths of the running and
waiting elastic gangs (jobs of one gang component with ``minSize`` below
their most: ``maxSize``, else ``size``) are decided again by the policy
(``scheduling/elastic.py``), per virtual cluster and per the resource their
members ask most of (its share of the cluster: GPUs for GPU gangs):

- a running gang whose width changes is **resized**: a checkpoint keeps
  all its progress; a shrink stops its last members and its others go on
  where they are; a growth stops its members and places it again at the new
  width at once (after the turn's shrinks), through the business layer (its
  coupling domain, its tenant's quota, its virtual cluster and its
  ``minSize`` hold as for any placement); its next run makes no progress
  for its ``resizeCost``. Event ``resized`` (``from``, ``to``, ``why``);
- a waiting gang is placed at most the width it was given.

The policy never takes a running gang to nothing: stopping work is the
rescheduler's (preemption, with its rules), and a preemption shrinks an
elastic gang before it stops one whole (``moves.preempt_plan``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from suanli.executors.sim import work_after
from suanli.model import speedup
from suanli.scheduling.elastic import Jobs, decide
from suanli.scheduling.global_layer import copies_per_host
from suanli.scheduling.statement import Statement
from suanli.sim.ledger import PENDING, RUNNING, STATUSES
from suanli.sim.rescheduler import transfer_s

SHORT_FOR = 10  # turns a gang whose growth fell short is not asked to grow past what it got

WHY = {"greedy": "greedy: room for waiting gangs first, then growth into free room",
       "goodput": "goodput: the widths of most weighted goodput"}


@dataclass(frozen=True, slots=True)
class Resize:
    """The elastic policy's turn."""


def resizable(unit) -> bool:
    comps = unit.components
    lead = comps[0]
    if not lead.gang or lead.lifetime != "job" or any(c is not lead and c != lead for c in comps):
        return False
    return (lead.min_size or lead.size) < len(unit.tasks)


class Resizer:
    def __init__(self, shard, loop, log, spec: Any) -> None:
        self.shard, self.loop, self.log, self.spec = shard, loop, log, spec
        self.on = spec is not None and spec.policy != "none"
        self.units: dict[int, int] = {}  # resizable unit -> its first task's id
        self.due: float | None = None  # when the next turn is queued
        self.resizes = 0
        self.short: dict[int, tuple[int, float]] = {}  # unit -> the width a growth got short of its ask, and when
        self._speed_rows: dict[tuple, np.ndarray] = {}

    def submitted(self, t: float, uid: int, unit) -> None:
        if not self.on or not resizable(unit):
            return
        self.units[uid] = self.shard._tasks.ids[unit.tasks[0]]
        if self.due is None:
            self.due = t + self.spec.every
            self.loop.schedule(self.due, Resize())

    def ended(self, uid: int) -> None:
        """A unit's run finished: it is done (a job's gang ends whole); with no
        gang left, no turn is due."""
        if self.units.pop(uid, None) is None:
            return
        self.shard.business.widths.pop(uid, None)
        self.short.pop(uid, None)
        if not self.units and self.due is not None:
            self.loop.cancel(self.due, Resize())
            self.due = None

    def turn(self, t: float) -> None:
        """Decide the widths again and resize what changed."""
        self.due = None
        shard = self.shard
        live: list[int] = []
        for uid, first in list(self.units.items()):
            us = shard._units[uid]
            if us.run is None and STATUSES[shard._tasks.status[first]] not in (PENDING, RUNNING):
                del self.units[uid]  # ended
                shard.business.widths.pop(uid, None)
                continue
            live.append(uid)
        if not live:
            return
        groups: dict[tuple, list] = {}
        capacity: dict[str, np.ndarray] = {}  # per VC, once a turn: what its table holds of each resource
        for uid in live:
            unit = shard._units[uid].unit
            lead = unit.components[0]
            req = shard.business.request(lead, unit.tenant, -1)
            cap = capacity.get(unit.app.vc)
            if cap is None:
                table = shard.state.vcs[unit.app.vc].table
                cap = capacity[unit.app.vc] = table.cap[:, : table.n].sum(axis=1).astype(np.float64)
            share = np.where(cap > 0, req.vec / np.maximum(cap, 1), 0.0)
            r = int(np.argmax(share))
            groups.setdefault((unit.app.vc, r), []).append((uid, unit, lead, float(req.vec[r])))
        for (vc, r), members in groups.items():
            self._decide(t, vc, r, members)
        self.due = t + self.spec.every
        self.loop.schedule(self.due, Resize())

    def _decide(self, t: float, vc: str, r: int, members: list) -> None:
        shard = self.shard
        n = len(members)
        top = max(len(unit.tasks) for _, unit, _, _ in members)
        current = np.zeros(n, np.int64)
        least = np.zeros(n, np.int64)
        most = np.zeros(n, np.int64)
        units = np.zeros(n)
        speed = np.zeros((n, top + 1))
        left = np.zeros(n)
        waited = np.zeros(n)
        alone = np.zeros(n)
        restart = np.zeros(n)
        order = np.zeros(n)
        tenants: dict[str, int] = {}
        tenant = np.zeros(n, np.int64)
        held = 0.0
        per_node = self._per_node(vc, r)
        table = shard.state.vcs[vc].table
        domain_room: dict[tuple, float] = {}  # a coupling's shape -> the room of its largest domain
        grows = self._growable(vc, members)  # members new hosts could hold
        for k, (uid, unit, lead, u) in enumerate(members):
            us = shard._units[uid]
            run = us.run
            current[k] = run.parallelism if run is not None else 0
            least[k] = lead.min_size or len(unit.tasks)
            # no wider than its largest coupling domain holds
            shape = (unit.couplings, unit.affinity_scope)
            widest = domain_room.get(shape)
            if widest is None:
                codes = self._domains(unit, table)
                cap = table.cap[r, : table.n]
                widest = domain_room[shape] = float(cap.sum()) if codes is None else \
                    (float(np.bincount(codes[codes >= 0], weights=cap[codes >= 0]).max()) if (codes >= 0).any()
                     else 0.0)
            most[k] = max(min(len(unit.tasks), int(widest // max(u, 1e-9)) + grows[uid]), least[k])
            short = self.short.get(uid)
            if short is not None:  # a growth of it fell short lately: no wider than it got, for a while
                if t - short[1] < SHORT_FOR * self.spec.every:
                    most[k] = max(min(most[k], short[0]), least[k])
                else:
                    del self.short[uid]
            units[k] = max(u, 1e-9)
            left[k] = self._left(t, us)
            model = lead.scaling if lead.scaling is not None else speedup.Formula(lead.efficiency)
            speed[k, 1: most[k] + 1] = self._speeds(model, int(most[k]), per_node, lead.coupling,
                                                    total=lead.work_s or 0.0, left=left[k])
            first = shard._tasks[unit.tasks[0]]
            waited[k] = t - first.submitted_at
            total = lead.work_s or 0.0
            best = speed[k, 1: most[k] + 1].max() if most[k] else 0.0
            alone[k] = total / best if best > 0 else np.inf
            restart[k] = lead.resize_cost_s
            order[k] = uid
            tenant[k] = tenants.setdefault(unit.tenant, len(tenants))
            held += current[k] * u
        room = float(table.free[r, : table.n].sum()) + held + max(grows[uid] * u for uid, _, _, u in members)
        jobs = Jobs(current=current, least=least, most=most, units=units, speed=speed, left=left, waited=waited,
                    alone=alone, restart=restart, order=order, tenant=tenant,
                    preemptible=np.zeros(n, dtype=bool))
        world = shard.state.world
        weights = np.array([world.tenants[name].weight if name in world.tenants else 1.0 for name in tenants])
        # what each tenant may hold in this resource: what its quota leaves, and what its gangs here hold
        own = np.bincount(tenant, weights=current * units, minlength=len(tenants))
        quotas = np.array([float(shard.state.quota_left(name)[r]) for name in tenants]) + own
        width = decide(self.spec.policy, jobs, room, shares=weights, quotas=quotas,
                       max_slowdown=self.spec.max_slowdown, hysteresis=self.spec.hysteresis)
        # shrinks first (their room is then free), then growths, each placed again at once
        for k in sorted(range(n), key=lambda k: int(width[k]) - int(current[k])):
            uid, unit, lead, u = members[k]
            w = int(width[k])
            if current[k] > 0 and w > current[k]:  # a growth: no wider than its domain (and new hosts) hold
                w = min(w, self._fits_here(uid, unit, table, r, table.free[r, : table.n].astype(np.float64), u)
                        + grows[uid])
            if current[k] > 0 and w > 0 and w != current[k]:
                self._resize(t, uid, unit, lead, int(current[k]), w, grows[uid])
            elif current[k] == 0 and w > 0:
                shard.business.widths[uid] = w

    def _growable(self, vc: str, members: list) -> dict[int, int]:
        """Per gang: how many more members the VC's elastic host groups could
        add hosts for, up to their ``max`` (none for a tenant's default VC,
        whose hosts are fitted to its tasks anyway): a width the policy may
        give, and the business layer grows the hosts for (``place(top_up)``)."""
        model = self.shard.state.world.vcs[vc]
        groups = [g for g in model.host_groups if g.elastic]
        if model.default or not groups:
            return dict.fromkeys((uid for uid, *_ in members), 0)
        layer = self.shard.business
        vcs = self.shard.state.vcs[vc]
        sizes = Counter(h.group for h in vcs.hosts)
        hosts = [(layer.global_layer.host_request(model, g), g.name, max(g.limit - sizes[g.name], 0)) for g in groups]
        out: dict[int, int] = {}
        made: dict[tuple, int] = {}  # per shape (component, tenant): the members
        for uid, unit, _, _ in members:
            key = (unit.components[0], unit.tenant)
            n = made.get(key)
            if n is None:
                req = layer.request(unit.components[0], unit.tenant, -1)
                n = made[key] = sum(self._per_host(vcs, h, name, req) * room for h, name, room in hosts if room)
            out[uid] = n
        return out

    @staticmethod
    def _per_host(vcs, host, group: str, req) -> int:
        """Members of ``req`` one new host of ``group`` holds: its shape's
        copies; a whole-node host's, as many as its largest host now holds."""
        per_host, _ = copies_per_host(host, req, group)
        if not host.whole_node or not per_host:
            return per_host
        rows = [h.row for h in vcs.hosts if h.group == group]
        if not rows:
            return per_host
        cap = vcs.table.cap[:, rows].astype(np.float64)
        asks = req.vec > 0
        return max(per_host, int((cap[asks] // req.vec[asks, None]).min(axis=0).max()))

    def _domains(self, unit, table) -> np.ndarray | None:
        domain, _ = self.shard.business._domain(unit, table)
        return None if domain is None else domain[: table.n]

    def _fits_here(self, uid: int, unit, table, r: int, free: np.ndarray, u: float) -> int:
        """The most members the gang could run with in the domain it runs in:
        its own and what is free there."""
        shard = self.shard
        run = shard._units[uid].run
        p = shard.state.placements.get(run.tasks[0])  # (its members share one domain)
        codes = self._domains(unit, table)
        room = free.sum() if codes is None or p is None else free[codes == codes[p.host.row]].sum()
        return run.parallelism + int(room // max(u, 1e-9))

    def _speeds(self, model, most: int, per_node: int, fabric: str | None, total: float, left: float) -> np.ndarray:
        """Speeds at widths 1..most, members packed ``per_node`` a node (a
        model that does not change as the work goes: kept per shape)."""
        measured = isinstance(model, speedup.Measured)
        key = (model, most, per_node, fabric)
        hit = None if measured else self._speed_rows.get(key)
        if hit is not None:
            return hit
        done = total - left
        row = np.array([model.speed(w, -(-w // per_node) if per_node else 1, fabric, done=done)
                        for w in range(1, most + 1)])
        if not measured:
            if len(self._speed_rows) > 4096:
                self._speed_rows.clear()
            self._speed_rows[key] = row
        return row

    def _per_node(self, vc: str, r: int) -> int:
        """How many one-unit members a node of the VC holds at most (for the nodes a width spans)."""
        table = self.shard.state.vcs[vc].table
        col = table.cap[r, : table.n]
        return int(col.max()) if len(col) and col.max() > 0 else 0

    def _left(self, t: float, us) -> float:
        """The work a unit has left now (a running one's, integrated to ``t``)."""
        run = us.run
        if run is None:
            return max(us.remaining_work_s or 0.0, 0.0)
        if run.remaining_work_s is None:
            return 0.0
        return work_after(run, max(t - run.started_at - run.paused_s, 0.0))

    def shrink(self, t: float, uid: int, drop, why: str) -> None:
        """Shrink a running gang in place by the members ``drop`` (its others
        go on where they are, after its restart)."""
        shard = self.shard
        run = shard._units[uid].run
        unit = shard._units[uid].unit
        self.resizes += 1
        self.log(t, "resized", task=unit.tasks[0], **{"from": run.parallelism, "to": run.parallelism - len(drop)},
                 why=why)
        shard.shrink(t, uid, drop, unit.components[0].resize_cost_s)

    def shrinkable(self, uid: int) -> tuple[str, ...]:
        """The members a running gang could go on without (those above its least, the last first)."""
        if uid not in self.units:
            return ()
        us = self.shard._units[uid]
        run = us.run
        least = us.unit.components[0].min_size or len(us.unit.tasks)
        return tuple(run.tasks[least:]) if run is not None and run.parallelism > least else ()

    def _fits_wider(self, uid: int, unit, new: int) -> int:
        """How many members a running gang would run with if placed again at
        ``new`` on its VC's hosts now, its own room counted (a probe, undone)."""
        shard = self.shard
        state = shard.state
        vcs = state.vcs[unit.app.vc]
        allocs = [state.placements[task].alloc for task in shard._units[uid].run.tasks]
        with Statement() as probe:
            probe.give(vcs.table, allocs)
            if vcs.default:  # its members count against its tenant's quota: not twice
                for a in allocs:
                    state.charge(unit.tenant, -a.vec, probe)
            return shard.business.fitting(unit, vcs, shard.business.unit_requests(unit)[:new])

    def _resize(self, t: float, uid: int, unit, lead, old: int, new: int, grows: int = 0) -> None:
        shard = self.shard
        if new < old:  # in place: its first members go on where they are
            self.shrink(t, uid, shard._units[uid].run.tasks[new:], WHY[self.spec.policy])
            return
        if not grows and self._fits_wider(uid, unit, new) <= old:  # its growth would give it nothing
            self.short[uid] = (old, t)
            return
        self.resizes += 1
        shard.checkpoint(t, uid)
        lead_at = shard.state.placements[unit.tasks[0]].host.node  # where the gang's state is (rank 0's)
        shard.stop_unit(t, uid, None, kind="resizing")
        shard.business.widths[uid] = new
        shard.pause[uid] = lead.resize_cost_s
        got, moved = 0, 0.0
        if shard.business.place(unit, record=False, top_up=True) is None:  # at once: nothing takes its room first
            moved = self._state_path_s(lead, lead_at, unit)
            shard.pause[uid] += moved
            shard.pending.discard(uid)
            shard.started(t, uid)
            got = shard._units[uid].run.parallelism
        if got < new:
            self.short[uid] = (got, t)
        why = WHY[self.spec.policy] if got == new else f"{WHY[self.spec.policy]} (asked {new}, {got} fit)"
        said = {"state_s": round(moved, 6)} if moved else {}
        self.log(t, "resized", task=unit.tasks[0], **{"from": old, "to": got}, why=why, **said)  # (its width now)

    def _state_path_s(self, lead, lead_at: int, unit) -> float:
        """Seconds until the last member of a regrouped gang's new run has the
        gang's state (``state.size``, from where rank 0 was, over each path:
        ``rescheduler.transfer_s``); 0 for a gang without state."""
        if not lead.stateful or not lead.state_mib:
            return 0.0
        placements, fleet = self.shard.state.placements, self.shard.state.world.fleet
        nodes = {placements[task].host.node for task in unit.tasks if task in placements}
        return max((transfer_s(fleet, lead_at, node, lead.state_mib * 2**20) for node in nodes), default=0.0)
