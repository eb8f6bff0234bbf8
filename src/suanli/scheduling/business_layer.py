"""The business layer: places a tenant's tasks on its virtual cluster's hosts.

Work is cut into *units* placed all-or-nothing: a single replica, a gang
(inside one domain of its coupling), or an affinity group (inside one domain
of its scope). Units go by *standing*, their priority as it counts against
other tenants (clipped to 0 .. the tenant's ``maxPriority``); among equal
standings the tenant furthest below its weighted dominant share goes first;
within one tenant, by its own priority. So a tenant's priorities order its own
work, and only the admin's ceilings order tenants. A unit that does not fit an
explicit VC asks the global layer to grow an elastic host group.
"""

from __future__ import annotations

import heapq
from itertools import groupby
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from suanli.model.work import Application, Component, layout
from suanli.scheduling.backfill import Backfill, Reserved
from suanli.scheduling.domains import combine_domains, couplings_domain, levels_of, scope_domain, tightest
from suanli.scheduling.filters import Check
from suanli.scheduling.batch import Batches
from suanli.scheduling.global_layer import GlobalLayer, QuotaAndReach
from suanli.scheduling.reasons import Domain, Reasons, Why, binding_of, bound
from suanli.scheduling.request import Request, arch_reason, compile_request
from suanli.scheduling.select import Extras, place_group, place_one
from suanli.scheduling.statement import Statement
from suanli.scheduling.state import PlacementState, VCState, chunked
from suanli.scheduling.table import Allocation, CandidateTable


REQUESTS = 16_384  # compiled requests kept (each names its constraints: one per car bound near it, most used once)
# A unit of one task is placed by ``select.place_one`` (False: by ``place_group``, as a group of one;
# the reference ``tests/test_nearby.py`` compares)
LONE = True
SHARED = True  # False: one request per tenant, however alike (the reference ``tests/test_shared_requests.py`` compares)


@dataclass(slots=True)
class Unit:
    """Tasks placed together, all or nothing."""

    app: Application
    tasks: tuple[str, ...]  # (a tuple: a run of all of them shares it)
    components: tuple[Component, ...]  # one per task
    seq: int
    min_members: int | None = None  # elastic gang
    couplings: tuple[str, ...] = ()  # every member's coupling level must hold
    affinity_scope: str | None = None
    state_sites: tuple[int, ...] = ()  # per member: the site holding its state while it moves (-1: none)
    _priority: int | None = field(default=None, repr=False, compare=False)
    _shape: tuple | None = field(default=None, repr=False, compare=False)  # (state_sites, unit_shape) once read

    def state_site(self, member: int) -> int:
        return self.state_sites[member] if self.state_sites else -1

    @property
    def priority(self) -> int:
        """The highest priority of its components (read at every pass: kept once known)."""
        if self._priority is None:
            self._priority = max(c.priority for c in self.components)
        return self._priority

    @property
    def tenant(self) -> str:
        return self.app.tenant

    def distinct_components(self) -> tuple[Component, ...] | list[Component]:
        """Its components once each, in order (replicas share one object: told
        apart by identity, not by hashing every field)."""
        comps = self.components
        return comps if len(comps) == 1 else list({id(c): c for c in comps}.values())


@dataclass
class Unscheduled:
    task: str
    tenant: str
    vc: str
    reasons: Counter


def build_units(apps: tuple[Application, ...]) -> list[Unit]:
    """The applications' units, numbered in the order written."""
    if len(apps) == 1 and len(apps[0].components) == 1 and apps[0].components[0].affinity is None:
        return list(spec_units(apps[0], apps[0].components[0], None, 0))  # (an arrival of one component)
    units: list[Unit] = []
    for app in apps:
        units += app_units(app, len(units))
    return units


def app_units(app: Application, start: int = 0) -> list[Unit]:
    """One application's units (an affinity group, a gang, or one task each),
    numbered from ``start``."""
    return list(iter_app_units(app, start))


def _unit_specs(app: Application, comps: tuple | None = None) -> Iterator[tuple[Component, list[Component] | None]]:
    """What an application's units are made of, in order, before they are
    made: an affinity group (its first component and its members, at its
    first component's place), or a component alone (a gang: one unit; else
    one unit per replica). ``comps``: ``app.components`` as read already."""
    comps = app.components if comps is None else comps  # (read once: an application made per site makes them)
    grouped: dict[str, list[Component]] = defaultdict(list)
    for comp in comps:
        if comp.affinity is not None:
            grouped[comp.affinity[0]].append(comp)
    for comp in comps:
        if comp.affinity is None:
            yield comp, None
            continue
        members = grouped.pop(comp.affinity[0], None)
        if members is not None:  # (None: already made with its group's first component)
            yield comp, members


def iter_app_units(app: Application, start: int = 0) -> Iterator[Unit]:
    """``app_units`` one at a time (an application of a million replicas is
    not made all at once)."""
    seq = start
    for comp, members in _unit_specs(app):
        for u in spec_units(app, comp, members, seq):
            yield u
            seq += 1


def spec_units(app: Application, comp: Component, members: list[Component] | None, seq: int) -> Iterator[Unit]:
    """The units one of ``_unit_specs`` makes, numbered from ``seq``: an
    affinity group's one unit, a gang's one unit, or a unit per replica."""
    if members is not None:
        tasks = tuple(c.task_name(i) for c in members for i in range(c.size))
        comps = tuple(c for c in members for _ in range(c.size))
        if tasks:
            yield Unit(app, tasks, comps, seq, couplings=levels_of(c.coupling for c in members),
                       affinity_scope=comp.affinity[1])
    elif comp.gang:
        yield Unit(app, tuple(comp.task_name(i) for i in range(comp.size)), (comp,) * comp.size,
                   seq, min_members=comp.min_size, couplings=levels_of([comp.coupling]))
    else:
        for i in range(comp.size):
            yield Unit(app, (comp.task_name(i),), (comp,), seq + i)


def spec_run(comp: Component, members: list[Component] | None) -> tuple[int, int]:
    """(priority, how many units) of one of ``_unit_specs``, without making them."""
    if members is not None:
        sized = [c.priority for c in members if c.size]
        return (max(sized), 1) if sized else (0, 0)
    return comp.priority, 1 if comp.gang else comp.size


def unit_runs(app: Application) -> list[tuple[int, int]]:
    """What ``app_units`` makes of the application, without making it: runs of
    (priority, how many units) in their order."""
    runs: list[tuple[int, int]] = []
    for comp, members in _unit_specs(app, layout(app)):  # (priorities and sizes: a copy's prototype's say them)
        priority, n = spec_run(comp, members)
        if runs and runs[-1][0] == priority:
            runs[-1] = (priority, runs[-1][1] + n)
        elif n:
            runs.append((priority, n))
    return runs


def app_specs(app: Application, start: int) -> Iterator[tuple[int, Component, list[Component] | None, int, int, int]]:
    """An application's specs (``_unit_specs``) with what they make: (the
    component's index in ``app.components`` (an affinity group: its first
    member's), component, members, first unit's number, priority, how many
    units); none of zero units."""
    comps = app.components
    index = {id(c): i for i, c in enumerate(comps)} if any(c.affinity for c in comps) else None
    seq = start
    for i, (comp, members) in enumerate(_unit_specs(app, comps)):
        priority, n = spec_run(comp, members)
        if n:
            yield (i if index is None else index[id(comp)]), comp, members, seq, priority, n
            seq += n


def queued_specs(entries: dict[int, list[tuple[Application, int]]]):
    """The specs of a tenant's queue of one standing, in its order: higher
    priority first, then in the order written (``entries`` maps a priority to
    the applications with units of it and their first unit's number); each as
    (application, index, component, members, first unit's number, units)."""
    for priority in sorted(entries, reverse=True):
        for app, start in entries[priority]:
            for i, comp, members, seq, p, n in app_specs(app, start):
                if p == priority:
                    yield app, i, comp, members, seq, n


class UnitQueue:
    """A tenant's queue of a pass over applications (``BusinessLayer.run_apps``):
    its units, made as they come near its front, not all at once (ten million
    units are two gigabytes). Reads as the pass's deque does: ``q[k]`` (made
    up to k), ``popleft``, ``len``."""

    __slots__ = ("_made", "_next", "_left")

    def __init__(self, units: Iterator[Unit], n: int) -> None:
        self._made: deque[Unit] = deque()
        self._next = units
        self._left = n

    def __getitem__(self, k: int) -> Unit:
        made = self._made
        while len(made) <= k:
            made.append(next(self._next))
        return made[k]

    def popleft(self) -> Unit:
        if not self._made:
            self._made.append(next(self._next))
        self._left -= 1
        return self._made.popleft()

    def __len__(self) -> int:
        return self._left

    def __bool__(self) -> bool:
        return self._left > 0


def _queued(entries: dict[int, list[tuple[Application, int]]]) -> Iterator[Unit]:
    """A tenant's units of one standing, in its queue's order (``queued_specs``)."""
    for app, _, comp, members, seq, _ in queued_specs(entries):
        yield from spec_units(app, comp, members, seq)


class TaskExtras(Extras):
    """Anti-affinity across placed and tentative tasks, plus quota and
    reachability when the VC is a default one (hosts fitted to tasks)."""

    def __init__(self, layer: "BusinessLayer", vc: VCState) -> None:
        self.layer, self.vc = layer, vc
        self.quota = QuotaAndReach(layer.state, vc) if vc.default else None
        # the reservations the unit must not delay (backfill.py), the rows reserved for it; None: none
        self.reserved = Reserved(layer.held) if layer.held and vc.default else None
        self.pinned = layer.pinned if vc.default else None

    def checks(self, req: Request, table: CandidateTable) -> list[Check]:
        out = self.quota.checks(req, table) if self.quota else []
        if self.reserved is not None:
            held = self.reserved.check(req, table)
            if held is not None:
                out.append(held)
        if self.pinned is not None:
            out.append(self.pinned.check(table))
        anti = self.layer.anti_of.get(id(req))
        if anti is not None:
            key, scope = anti
            taken = self.layer.occupied.get(key)
            if taken is not None:
                where = table.view("node") if scope == "node" else table.view("site")
                out.append((Why("anti-affinity", group=key[1], scope=scope), taken[where] == 0))
        return out

    def most(self, req: Request, count: int) -> tuple[int, Why | None]:
        return self.quota.most(req, count) if self.quota else (count, None)

    def copies(self, req: Request, table: CandidateTable, row: int, k: int) -> int:
        if self.layer.anti_of.get(id(req)) is not None:
            return 0  # the next copy makes its node (and site) taken for the group
        if self.reserved is not None:
            k = self.reserved.copies(req, row, k)
        if self.pinned is not None:
            k = self.pinned.copies(row, k)
        return self.quota.copies(req, table, row, k) if self.quota else k

    def note(self, req: Request, table: CandidateTable, a: Allocation, stmt: Statement) -> None:
        if self.quota:
            self.quota.note(req, table, a, stmt)
        if self.reserved is not None:
            self.reserved.note(a, stmt)
        if self.pinned is not None:
            self.pinned.note(a, stmt)
        anti = self.layer.anti_of.get(id(req))
        if anti is not None:
            key, scope = anti
            where = int(table.node[a.row] if scope == "node" else table.site[a.row])
            taken = self.layer.counts_of(key, scope)
            taken[where] += 1
            stmt.did(lambda: taken.__setitem__(where, taken[where] - 1))


@dataclass
class BusinessLayer:
    state: PlacementState
    global_layer: GlobalLayer
    rng: np.random.Generator
    unscheduled: list[Unscheduled] = field(default_factory=list)
    occupied: dict[tuple, np.ndarray] = field(default_factory=dict)  # anti-affinity group -> tasks per node/site
    occupied_scope: dict[tuple, str] = field(default_factory=dict)  # anti-affinity group -> node or site
    anti_of: dict[int, tuple] = field(default_factory=dict)  # id(request) -> ((app, group), scope)
    _requests: OrderedDict = field(default_factory=OrderedDict)  # key -> Request, the most recent REQUESTS
    _near_keys: dict = field(default_factory=dict)  # near site name -> keys of the requests bound near it
    _labelled: set = field(default_factory=set)  # keys of requests with a reach term (data or state sites)
    # the widest ``near`` bound of any request compiled so far (inf: one bound by no rtt): what a path
    # change at a device can reach of the requests, parked units and returns that others made
    widest_near: float = 0.0
    policy: object = None  # a placement policy plugin (policies.py); None: the default scores
    # units placed below their size, not recorded (a simulation's): unit seq -> why the rest was left out
    left_out: dict[int, Counter] = field(default_factory=dict)
    widths: dict[int, int] = field(default_factory=dict)  # unit seq -> the most members it is placed with (elastic)
    backfill: Backfill | None = None  # a simulation's passes with reservations (backfill.py); None: first fit
    held: list = field(default_factory=list)  # the reservations the unit being placed must not delay
    pinned: object = None  # the rows reserved for the unit being placed (backfill.Pinned), when it has some
    batches: Batches = field(init=False)

    def __post_init__(self) -> None:
        self.batches = Batches(self)

    @property
    def network(self):
        return self.state.fleet.network

    def counts_of(self, key: tuple, scope: str) -> np.ndarray:
        """An anti-affinity group's tasks per node (or per site), made at first use."""
        taken = self.occupied.get(key)
        if taken is None:
            n = self.state.fleet.n_nodes if scope == "node" else len(self.state.fleet.sites)
            taken = self.occupied[key] = np.zeros(n, np.int32)
            self.occupied_scope[key] = scope
        return taken

    def grow(self) -> None:
        """The fleet grew: the counts per node and per site have rows for the new ones,
        and what was compiled against the old fleet goes."""
        fleet = self.state.fleet
        for key, taken in self.occupied.items():
            n = fleet.n_nodes if self.occupied_scope.get(key) == "node" else len(fleet.sites)
            if len(taken) < n:
                self.occupied[key] = np.concatenate([taken, np.zeros(n - len(taken), np.int32)])
        self.forget_requests()

    def release(self, comp: Component, node: int) -> None:
        """A task of ``comp`` left ``node``: it no longer repels its anti-affinity group."""
        if comp.anti_affinity is None:
            return
        group, scope = comp.anti_affinity
        taken = self.occupied.get((comp.app, group))
        if taken is not None:
            taken[node if scope == "node" else int(self.state.fleet.node_site[node])] -= 1

    def acquire(self, comp: Component, node: int) -> None:
        """A task of ``comp`` is (again) on ``node``: it repels its anti-affinity group."""
        if comp.anti_affinity is None:
            return
        group, scope = comp.anti_affinity
        taken = self.counts_of((comp.app, group), scope)
        taken[node if scope == "node" else int(self.state.fleet.node_site[node])] += 1

    def forget_requests(self, sites: "set[str] | None" = None) -> None:
        """The network changed: requests compiled against it (near, data) are
        stale. ``sites``: only paths to these devices' own sites changed (a
        car handed over): only the requests bound near them go, and those
        that name a network component (data or state reachability), whose
        labels may have moved."""
        if sites is None:
            self._requests.clear()
            self.anti_of.clear()
            self._near_keys.clear()
            self._labelled.clear()
            self.batches.forget()
            return
        stale = set(self._labelled)
        for name in sites:
            stale |= self._near_keys.get(name, set())
        for key in stale:
            self._drop_request(key)

    def _drop_request(self, key: tuple) -> None:
        req = self._requests.pop(key, None)
        if req is None:
            return
        self.anti_of.pop(id(req), None)
        self._labelled.discard(key)
        near = key[3]
        if near is not None:
            keys = self._near_keys.get(near.site)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._near_keys[near.site]

    def request(self, comp: Component, tenant: str, state_site: int = -1) -> Request:
        """The component's compiled request; with ``state_site``, for a task whose
        state waits at that site (it may go only where the state can follow).

        Components that ask for the same thing under the same constraints share
        one request (and so its cached masks and live view): a trace of a
        million one-task applications has a few hundred distinct requests.
        Of its tenant a request holds only the sites it may use, so tenants
        allowed the same sites share requests too (ten thousand tenants' batch
        jobs are a few requests, each with one live view kept in step, not a
        view made afresh per tenant). Anti-affinity keeps the application and
        its tenant in the key: its groups are its own."""
        data = (comp.data_source, comp.data_sink)
        anti = (comp.app, comp.anti_affinity) if comp.anti_affinity is not None else None
        who = tenant if anti is not None or not SHARED else tuple(self.state.world.tenants[tenant].allowed_sites)
        moving = (state_site, comp.state_mib) if state_site >= 0 else None
        arch_why = arch_reason(comp)
        key = (who, comp.resources, comp.arch, arch_why, comp.near, data, moving, anti, _selector_key(comp.selector))
        req = self._requests.get(key)
        if req is not None:
            self._requests.move_to_end(key)
        else:
            fleet = self.state.fleet
            data = [s for s in (comp.data_source, comp.data_sink) if s is not None]
            req = compile_request(fleet, comp.resources, tenant=self.state.world.tenants[tenant],
                                  arch=comp.arch, arch_why=arch_why, near=comp.near, data_sites=dict.fromkeys(data),
                                  selector=comp.selector,
                                  state_site=fleet.site_table.names.name(state_site) if state_site >= 0 else None,
                                  state_bytes=comp.state_mib * 2**20)
            self._requests[key] = req
            if comp.near is not None:
                self._near_keys.setdefault(comp.near.site, set()).add(key)
                bound = comp.near.max_rtt_ms
                self.widest_near = max(self.widest_near, np.inf if bound is None else float(bound))
            if req.data_sites or req.moving is not None:  # (reach: a label or a column's sites, either may move)
                self._labelled.add(key)
            if len(self._requests) > REQUESTS:  # a million cars' own requests are not all kept
                self._drop_request(next(iter(self._requests)))
            if comp.anti_affinity is not None:
                self.anti_of[id(req)] = ((comp.app, comp.anti_affinity[0]), comp.anti_affinity[1])
        return req

    # ------------------------------------------------------------ ordering

    def standing(self, unit: Unit) -> int:
        """The unit's priority as it counts against other tenants' work
        (``Tenant.standing``; a tenant the world does not know stands at 0)."""
        return self.standing_of(unit.tenant, unit.priority)

    def standing_of(self, tenant: str, priority: int) -> int:
        known = self.state.world.tenants.get(tenant)
        return known.standing(priority) if known is not None else 0

    def run(self, units: list[Unit], record: bool = True,
            broken: list[tuple[Unit, Exception]] | None = None) -> list[tuple[Unit, Counter]]:
        """Place units: higher standing first (priority up to the tenant's
        ceiling); within a standing, the tenant with the lowest weighted
        dominant share first; within a tenant, higher priority first, then
        FIFO. Returns the units that did not fit, with reasons (``record``:
        also list their tasks in ``unscheduled``).

        ``broken``: a unit whose placement raises (a request no arithmetic of
        the tables can hold) is listed there with the error instead of
        stopping the pass; without it, the error propagates."""
        if len(units) == 1 and not self.batches.may_take(units[0]):  # (a parked unit woken alone)
            return self._alone(units[0], record, broken)
        by_standing: dict[int, dict[str, deque[Unit]]] = defaultdict(lambda: defaultdict(deque))
        for u in sorted(units, key=lambda u: (-u.priority, u.seq)):
            by_standing[self.standing(u)][u.tenant].append(u)
        tenants = list(dict.fromkeys(u.tenant for u in units))
        del units  # the queues hold them now: a caller that keeps no list lets each go once placed
        return self._pass(by_standing, tenants, record, broken)

    def run_ids(self, uids: list[int], key_of: Callable[[int], tuple[str, int]], unit_of: Callable[[int], Unit],
                record: bool = True, broken: list[tuple[Unit, Exception]] | None = None) -> list[tuple[Unit, Counter]]:
        """``run([unit_of(u) for u in uids])``, the same placements in the same
        order, with each unit made when its tenant's queue comes to it (and let
        go once placed): a city's first instant has millions waiting, kept as
        columns until then. ``key_of(uid)``: its tenant and priority, without
        making it; a unit's ``seq`` is its uid."""
        n = len(uids)
        if n == 1:  # (one unit: its own order; an arrival of short work alone in its instant)
            unit = unit_of(int(uids[0]))
            if not self.batches.may_take(unit):
                return self._alone(unit, record, broken)
            tenant, priority = key_of(uids[0])
            queue = UnitQueue(iter((unit,)), 1)
            return self._pass({self.standing_of(tenant, priority): {tenant: queue}}, [tenant], record, broken)
        groups: dict[tuple[int, str], int] = {}  # (standing, tenant) -> its code, in the order first seen
        levels: dict[tuple[str, int], int] = {}
        group, priority = np.empty(n, np.int64), np.empty(n, np.int64)
        for k, uid in enumerate(uids):
            key = key_of(uid)
            level = levels.get(key)
            if level is None:
                level = levels[key] = self.standing_of(*key)
            g = groups.setdefault((level, key[0]), len(groups))
            group[k], priority[k] = g, key[1]
        ids = np.asarray(uids, np.int64)
        order = np.lexsort((ids, -priority, group))  # by (standing, tenant), then as ``run`` sorts: (-priority, seq)
        ids, group = ids[order], group[order]
        bounds = np.searchsorted(group, np.arange(len(groups) + 1))
        by_standing: dict[int, dict[str, UnitQueue]] = defaultdict(dict)
        for (level, tenant), g in groups.items():
            a, b = int(bounds[g]), int(bounds[g + 1])
            by_standing[level][tenant] = UnitQueue(map(unit_of, chunked(ids[a:b])), b - a)
        tenants = list(dict.fromkeys(t for _, t in groups))
        return self._pass(by_standing, tenants, record, broken)

    def _alone(self, unit: Unit, record: bool, broken: list | None) -> list[tuple[Unit, Counter]]:
        """A pass of one unit that no batch may take (``Batches.may_take``): what
        ``_pass`` does with it, without its queues: the unit alone, one by one."""
        failed: list[tuple[Unit, Counter]] = []
        self._run_one(unit, record, failed, {}, broken)
        return failed

    def run_apps(self, apps: tuple[Application, ...], record: bool = True) -> list[tuple[Unit, Counter]]:
        """``run(build_units(apps))``, the same placements in the same order,
        with each unit made when its queue comes to it (and let go once placed)."""
        entries, counts, tenants = self.queues_of(apps)
        # (a queue's place among the others breaks ties only after its next unit's
        # number, which no two units share: the order the queues are in is not read)
        by_standing = {level: {t: UnitQueue(_queued(by_priority), counts[level, t])
                               for t, by_priority in tenants_of.items()}
                       for level, tenants_of in entries.items()}
        return self._pass(by_standing, tenants, record, None)

    def queues_of(self, apps: tuple[Application, ...]) -> tuple[dict, Counter, list[str]]:
        """What a pass over ``apps`` queues, without making a unit: per standing,
        per tenant (in the order first seen), per priority, the applications with
        units of it and their first unit's number; the units per (standing,
        tenant); the tenants in the order first seen."""
        entries: dict[int, dict[str, dict[int, list]]] = defaultdict(dict)  # standing -> tenant -> priority -> apps
        counts: Counter = Counter()  # (standing, tenant) -> units
        start = 0
        for app in apps:
            runs = unit_runs(app)
            for priority, n in runs:
                level = self.standing_of(app.tenant, priority)
                apps_of = entries[level].setdefault(app.tenant, {}).setdefault(priority, [])
                if not apps_of or apps_of[-1][0] is not app:
                    apps_of.append((app, start))
                counts[level, app.tenant] += n
            start += sum(n for _, n in runs)
        return entries, counts, list(dict.fromkeys(t for _, t in counts))

    def _pass(self, by_standing: dict, tenants: list[str], record: bool,
              broken: list | None) -> list[tuple[Unit, Counter]]:
        failed: list[tuple[Unit, Counter]] = []
        # within one pass capacity only shrinks: a unit shaped like one that
        # already failed fails too, for the same reasons
        failed_shapes: dict[tuple, Counter] = {}
        # shares order tenants only when several wait: with one, they are not read
        several = len(tenants) > 1
        share = self._waiting_shares(tenants) if several else {}
        for level in sorted(by_standing, reverse=True):
            queues = by_standing[level]
            heap, order = _tenant_heap(queues, share)
            batch = True  # whether the next unit may begin a batch (not the unit a batch stopped at)
            bf = self.backfill
            while heap:
                tenant = heapq.heappop(heap)[-1]
                alone = bf is not None and bf.active  # (a batch does not look at reservations)
                got = self.batches.run(tenant, queues, heap, order, failed_shapes, unit_shape) \
                    if batch and not alone else None
                if got is not None:  # units that can only go home, together, in the order of this loop
                    _, batch, placed, popped = got
                    back = (tenant, *popped)
                    if several:
                        for t in placed:
                            share[t] = self.state.dominant_share(t)
                else:
                    batch = True
                    if self._run_one(queues[tenant].popleft(), record, failed, failed_shapes, broken) and several:
                        share[tenant] = self.state.dominant_share(tenant)  # only its usage changed
                    back = (tenant,)
                for t in back:
                    if queues[t]:
                        heapq.heappush(heap, (share.get(t, 0.0), queues[t][0].seq, order[t], t))
                    else:
                        del queues[t]
        return failed

    def _waiting_shares(self, tenants: list[str]) -> dict[str, float]:
        """Weighted dominant shares of the tenants with units in this pass only
        (one array operation over them, not over every tenant of the world)."""
        index = self.state.tenant_index
        rows = np.fromiter((index[t] for t in tenants), np.intp, len(tenants))
        return dict(zip(tenants, self.state.dominant_shares(rows).tolist()))

    def _run_one(self, unit: Unit, record: bool, failed: list, failed_shapes: dict,
                 broken: list | None) -> bool:
        """Place one unit of the pass (or fail it like an earlier unit of its
        shape); True when its tenant's usage may have changed. With backfill,
        a unit waits behind the first that did not fit (``fcfs``), or may not
        delay the reservations made for those (``easy``, ``conservative``)."""
        bf = self.backfill
        if bf is not None and bf.blocked_by is not None:
            reasons = bf.queued
            failed.append((unit, reasons))
            if record:
                self._record(unit, unit.tasks, reasons)
            return False
        reasons = failed_shapes.get(unit_shape(unit)) if failed_shapes else None
        guarded = bf is not None and bool(bf.reservations)
        if reasons is None:
            try:
                pinned = False
                if bf is not None:
                    self.held = bf.guard(unit) if guarded else []
                    self.pinned = bf.pin(unit, self.state.vcs[unit.app.vc].table)
                    if self.pinned is not None:  # reserved for: on its reserved rows when they hold it (else anywhere)
                        pinned = self.place(unit, record=False) is None
                        self.pinned = None
                reasons = None if pinned else self.place(unit, record)
            except Exception as exc:  # noqa: BLE001 - one unit's error must not stop the others
                if broken is None:
                    raise
                broken.append((unit, exc))
                return False
            finally:
                if bf is not None:
                    self.held, self.pinned = [], None
            if reasons is not None and not guarded:  # (held back by a reservation: a shorter one may not be)
                failed_shapes[unit_shape(unit)] = reasons
        elif record:
            self._record(unit, unit.tasks, reasons)
        if bf is not None:
            if reasons is None:
                bf.started(unit, self._node_allocs(unit))
            else:
                reasons = _copied(reasons)  # (its own: a reservation is the unit's)
                bf.failed(self, unit, reasons)
        if reasons is not None:
            failed.append((unit, reasons))
        return reasons is None or not self.state.vcs[unit.app.vc].default

    def _node_allocs(self, unit: Unit) -> list[Allocation]:
        """What a placed unit holds on the node table (its default VC's tasks)."""
        state = self.state
        return [p.alloc for task in unit.tasks if (p := state.placements.get(task)) is not None
                and state.vcs[p.vc].default]

    def _record(self, unit: Unit, tasks: list[str], reasons: Counter) -> None:
        for task in tasks:
            self.unscheduled.append(Unscheduled(task, unit.tenant, unit.app.vc, reasons))

    # ------------------------------------------------------------ one unit

    def place(self, unit: Unit, record: bool = True, top_up: bool = False) -> Counter | None:
        """Place one unit whole (an elastic gang: as large as fits); None on
        success, else the reasons. ``top_up``: an explicit VC's elastic
        groups grow by hosts for the members its hosts cannot hold, not for
        all of them (a running gang placed again wider)."""
        vcs = self.state.vcs[unit.app.vc]
        if vcs.default and len(unit.tasks) == 1 and self._lone(unit):  # one member: without a group's steps
            comp = unit.components[0]
            req = self.request(comp, unit.tenant, unit.state_site(0))
            result = place_one(vcs.table, req, self.network, self.rng, TaskExtras(self, vcs))
        else:
            result = self._attempt_or_grow(unit, vcs, top_up)
        if not result.ok:
            if record:
                self._record(unit, unit.tasks, result.reasons)
            return result.reasons
        for task, a in zip(unit.tasks, result.allocations):
            self.state.add_placement(task, unit.tenant, vcs, a)
        placed = len(result.allocations)
        if placed < len(unit.tasks):  # an elastic gang below its full size: the rest is reported
            size = Counter({Why("elastic", "parts" if unit.components[0].parts else None, placed=placed,
                                members=len(unit.tasks)): 1})
            why = bound(result.short, size) if result.short else size  # the bound that stopped it
            if record:
                self._record(unit, unit.tasks[placed:], why)
            else:
                self.left_out[unit.seq] = why
        return None

    def _attempt_or_grow(self, unit: Unit, vcs: VCState, top_up: bool):
        """``place``'s try on the VC's hosts and, on an explicit VC, with hosts
        grown for the unit (``top_up``: as ``place`` says); what it placed, or why not."""
        vc_model = self.state.world.vcs[unit.app.vc]
        reqs = self.unit_requests(unit)
        cap = self.widths.get(unit.seq) if self.widths else None
        if cap is None:
            cap = unit.components[0].start_size  # a gang named up to its maxSize starts at its size
        if cap is not None:  # an elastic gang placed at most this wide (its start, or a resize)
            reqs = reqs[:cap]
        result = self.attempt(unit, vcs, reqs, allow_fewer=vcs.default)
        if not result.ok and not vcs.default:
            growth = Statement()  # hosts grown for the unit stand only if it is then placed on them
            try:
                if top_up:  # as many as its hosts and the hosts grown for it hold
                    grow_reasons = self._top_up(unit, vc_model, vcs, reqs, growth)
                    result = self.attempt(unit, vcs, reqs, allow_fewer=True)
                else:
                    grow_reasons = self._grow(unit, vc_model, reqs, growth)
                    if not grow_reasons:  # grown
                        result = self.attempt(unit, vcs, reqs, allow_fewer=False)
            finally:
                if result.ok:
                    growth.commit()
                else:
                    growth.discard()
            if not result.ok:
                result = self.attempt(unit, vcs, reqs, allow_fewer=True)
            if not result.ok:
                if not vcs.hosts:
                    result.reasons[Why("hosts", vc=vcs.name)] += 1
                result.reasons.update(grow_reasons)
        return result

    def _lone(self, unit: Unit) -> bool:
        """Whether a unit of one task on a default VC is placed as ``place_one``
        places one member (the short path): the default scores, no domain
        to choose (no coupling, no affinity scope), not an elastic gang."""
        return (LONE and self.policy is None and unit.min_members is None and not unit.couplings
                and unit.affinity_scope is None and unit.components[0].start_size is None
                and not (self.widths and unit.seq in self.widths))

    def unit_requests(self, unit: Unit) -> list[Request]:
        return [self.request(c, unit.tenant, unit.state_site(i)) for i, c in enumerate(unit.components)]

    def _domain(self, unit: Unit, table: CandidateTable) -> tuple[np.ndarray | None, Domain]:
        domain, levels = couplings_domain(table, self.network, unit.couplings)
        if unit.affinity_scope is not None:
            scoped = scope_domain(table, self.network, unit.affinity_scope, tightest(unit.couplings) or "ethernet")
            domain = scoped if domain is None else combine_domains(domain, scoped)
        return domain, Domain(levels, unit.affinity_scope)

    def attempt(self, unit: Unit, vcs: VCState, reqs: list[Request], allow_fewer: bool,
                stmt: Statement | None = None):
        """Place the unit on its VC's current hosts only (no growth); committed
        when it fits (into ``stmt``, the caller's tentative work, when given)."""
        table = vcs.table
        domain, kind = self._domain(unit, table)
        return place_group(table, reqs, self.network, self.rng, domain=domain, kind=kind,
                           min_members=unit.min_members if allow_fewer else None,
                           extras=TaskExtras(self, vcs), policy=self.policy, stmt=stmt)

    def fitting(self, unit: Unit, vcs: VCState, reqs: list[Request]) -> int:
        """How many of the unit's members its VC's hosts hold now: tried, then
        undone, the random draws of its ties too (a probe changes nothing)."""
        probe, drawn = Statement(), self.rng.bit_generator.state
        try:
            result = self.attempt(unit, vcs, reqs, allow_fewer=True, stmt=probe)
            return len(result.allocations) if result.ok else 0
        finally:
            probe.discard()
            self.rng.bit_generator.state = drawn

    def _top_up(self, unit: Unit, vc_model, vcs: VCState, reqs: list[Request], stmt: Statement) -> Counter:
        """Grow the VC's elastic groups for the members its hosts cannot hold
        until all fit: shaped hosts by their copies; whole-node hosts one
        first, then as many more as the members the first held say (a node
        holds as many as fit on it). The reasons the last growth did not come
        (none: all fit)."""
        whole = any(self.global_layer.host_request(vc_model, g).whole_node for g in vc_model.host_groups if g.elastic)
        fit = self.fitting(unit, vcs, reqs)
        ask = 1 if whole else len(reqs) - fit  # members asked for: a whole host each, else shaped hosts' copies
        while fit < len(reqs):
            why = self._grow(unit, vc_model, reqs[fit:fit + ask], stmt)
            if why:
                return why
            now = self.fitting(unit, vcs, reqs)
            if now <= fit:  # the hosts hold none of them where the others are
                return Counter({Why("growth"): 1})
            if whole:  # as many more whole hosts as the ones grown held members
                ask = max(1, -(-(len(reqs) - now) * ask // (now - fit)))
            fit = now
        return Counter()

    def _grow(self, unit: Unit, vc_model, reqs: list[Request], stmt: Statement) -> Counter:
        """Grow elastic groups for each distinct request of the unit, all or
        nothing: the hosts are recorded in ``stmt``, none when one request
        cannot grow; returns the reasons then (none: grown)."""
        counts: dict[int, tuple[Request, int]] = {}
        for r in reqs:
            counts[id(r)] = (r, counts.get(id(r), (r, 0))[1] + 1)
        levels = unit.couplings
        if unit.affinity_scope in ("site", "node", "fabric") and not levels:
            levels = ("ethernet",)  # new hosts of a co-located group stay on one LAN
        grown = Statement(stmt)
        for r, n in counts.values():
            hosts, why = self.global_layer.grow(vc_model, r, n, levels)
            if not hosts:
                grown.discard()
                return why or Counter({Why("growth"): 1})
            grown.did(lambda hosts=hosts: self.global_layer.shrink(vc_model, hosts))
        grown.commit()
        return Counter()


def _selector_key(sel) -> tuple | None:
    """A component's site selector as a key (its labels are a mapping)."""
    return None if sel is None else (sel.tiers, sel.names, sel.regions, tuple(sorted(sel.labels.items())))


def _tenant_heap(queues: dict[str, deque], share: dict[str, float]) -> tuple[list, dict[str, int]]:
    """A heap of the waiting tenants keyed (share, seq of its next unit, place
    in ``queues``): popping it gives the tenant ``min`` over ``queues`` would
    (ties to the earlier one), in O(log tenants) instead of O(tenants) per unit.
    Also returns each tenant's place, to push it back with."""
    order = {t: i for i, t in enumerate(queues)}
    heap = [(share.get(t, 0.0), q[0].seq, order[t], t) for t, q in queues.items()]
    heapq.heapify(heap)
    return heap, order


def unit_shape(unit: Unit) -> tuple:
    """What decides whether a unit fits, names aside: its VC, what each member
    asks and where it may go (members of one component object in a row:
    once, with their count), and the unit's constraints. Anti-affinity keeps
    the application in the key: its groups are the application's own. Kept
    on the unit while its state sites stay the same."""
    comps = unit.components
    if len(comps) == 1:  # (most units: nothing to keep)
        return (unit.app.vc, ((_member_key(comps[0]), 1),), unit.couplings, unit.affinity_scope, unit.min_members,
                unit.state_sites)
    got = unit._shape
    if got is not None and got[0] is unit.state_sites:
        return got[1]
    members = []
    for _, group in groupby(comps, key=id):
        run = list(group)
        members.append((_member_key(run[0]), len(run)))
    shape = (unit.app.vc, tuple(members), unit.couplings, unit.affinity_scope, unit.min_members, unit.state_sites)
    unit._shape = (unit.state_sites, shape)
    return shape


def _member_key(c: Component) -> tuple:
    """What one member asks and where it may go (``unit_shape``'s part of it)."""
    return (c.resources, c.arch, c.near, c.data_source, c.data_sink,
            (c.app, c.anti_affinity) if c.anti_affinity else None, _selector_key(c.selector))


def _copied(reasons: Counter) -> Counter:
    """A unit's own copy of reasons (shared by the units of one shape), its binding kept."""
    out = Reasons(reasons)
    out.binding = binding_of(reasons)
    return out
