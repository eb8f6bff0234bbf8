"""A static pass split between business shards and one global part, with the
single process's outcome, byte for byte.

**What a shard decides alone.** A unit is *order-free* when nothing another
tenant does, and nothing its own tenant does elsewhere, can change where it
goes: one task of a tenant without a quota, in its default VC, asking for
no accelerator, bound near a device within less than the device's links
(each of them, where it hangs from two edges), so that its neighbourhood is
the device alone, on a device of one node (no tie to draw), where every
unit bound near that device is of that same tenant and no other unit may
go (what each unit's request reaches: its site checks and the sites'
largest nodes). Its decision reads the device's row only, and the device's
units come in their tenant's order whatever the other tenants do. Shards
own devices by the edge they hang from (one on two edges by its own
number) and decide their order-free units; none of them draws from the
run's generator (a draw would be an error, caught, and the run would be
redone in one process). What another unit's explanation reads of those
rows is kept as one process has it (``_Passed``).

**What the global part decides.** Everything else, in the single process's
order. The pass takes, within a standing, the tenant of least key (weighted
dominant share, the number of its next unit, its place), a tenant's share
changing with its own usage only. The pass is so a merge of each tenant's
sequence of keys, and a heap merge takes an element when the largest key of
its sequence up to it (the running maximum) is the least among the tenants':
so the global part keeps, per tenant, the running maximum of its keys, and
passes over an order-free run of ``n`` units in one step, adding ``n`` times
its vector to the tenant's usage (the largest key of the run is its last
unit's). The units it decides come out in the order one process takes them,
and see the same usage when they are keyed. It presumes that every
order-free unit is placed, taking what its request asks; the shards' answers
are checked against that, and where one was not placed (or a shard drew) the
global part schedules the world in one process instead.

**What is put together.** The shards' placements are columns added to the
global part's (tasks, nodes, vectors, device shares), their tasks per node,
and their fitted hosts: a default VC's fitted hosts are named in the order
they were made, which is its tenant's order of units, so each host is keyed
by the unit that made it ((standing, priority, number), higher first) and
the VC's hosts are put in that order and named again.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from suanli.model.work import (Application, Component, SiteApplication, World, app_for_site, layout, site_application,
                                task_count)
from suanli.scheduling.batch import _alone_kind as batch_alone_kind, bound_alone, fits, site_rows_of
from suanli.scheduling.business_layer import (BusinessLayer, UnitQueue, app_specs, queued_specs, spec_units,
                                              unit_shape)
from suanli.scheduling.global_layer import GlobalLayer
from suanli.scheduling.policies import policy_for
from suanli.scheduling.request import NearBound, Private, compile_request
from suanli.scheduling.state import Catalogue, PlacementState
from suanli.scheduling.static import Outcome, schedule
from suanli.scheduling.table import Allocation
from suanli.spec.schema import EACH_SITE


class Drew(RuntimeError):
    """A shard's decision asked the run's generator for a draw: its units are not order-free."""


class NoDraws:
    """The generator of a shard: any draw raises ``Drew``."""

    def __getattr__(self, name: str):
        raise Drew(f"a shard's decision drew from the run's generator ({name})")


# ------------------------------------------------------------ the split


def _alone_kind(comp: Component) -> bool:
    """One task per unit, bound near a site within a bound, nothing that ties
    it to other tasks or sites (``batch.bound_alone``), not a whole node, no
    accelerator (which device's share it takes is the shard's to choose, and
    the global part takes what it passes over off the device's row)."""
    return (not comp.gang and comp.affinity is None and not comp.resources.whole and not comp.resources.accelerators
            and bound_alone(comp))


@dataclass
class Split:
    """Which components' units are order-free, and whose: per application, per
    component, the shard (-1: the global part's); per device node holding
    order-free units, the key of its first unit; per application whose units
    are all order-free and of one priority, their sum (``Whole``)."""

    shards: int
    shard_of: "PerApp"  # per application: int16[components]
    first_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ascending
    first_keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))  # (-standing, -priority, seq)
    whole: dict[int, "Whole"] = field(default_factory=dict)  # application index -> its units in one run
    # per order-free spec (application order): its application's first (``app_lo``), its component, its
    # device's row, how many units and what each takes (``vecs``): what the global part takes off the
    # devices' rows as it passes over them
    app_lo: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per application, or -1
    comp: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    n: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    vid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    vecs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))

    def first_key(self, node: int) -> tuple[int, int, int]:
        return tuple(self.first_keys[int(np.searchsorted(self.first_nodes, node))].tolist())


class PerApp:
    """One int16 per component of every application, in one array (what a
    shard is sent): ``per_app[a]`` is application ``a``'s, a view."""

    __slots__ = ("flat", "offsets")

    def __init__(self, flat: np.ndarray, offsets: np.ndarray) -> None:
        self.flat, self.offsets = flat, offsets

    @classmethod
    def empty(cls, world: World) -> "PerApp":
        sizes = np.fromiter((len(layout(app)) for app in world.apps), np.int64, len(world.apps))
        offsets = np.zeros(sizes.size + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(np.full(int(offsets[-1]), -1, np.int16), offsets)

    def __getitem__(self, a: int) -> np.ndarray:
        return self.flat[self.offsets[a]:self.offsets[a + 1]]


@dataclass(frozen=True)
class Whole:
    """An application's order-free units as one run: how many, their priority,
    what they take in all, and what the last one takes."""

    n: int
    priority: int
    total: np.ndarray
    last: np.ndarray


def split_work(world: World, layer: BusinessLayer, shards: int) -> Split:
    """The split of ``world``'s units between ``shards`` shards and the global
    part (all the global part's with a placement policy, whose scores may
    read other rows, or where the network is in pieces: a default VC's reach
    then ties its tenant's units together)."""
    shard_of = PerApp.empty(world)
    fleet = world.fleet
    network = fleet.network
    if shards < 1 or layer.policy is not None or np.unique(network.component).size > 1:
        return Split(shards, shard_of)
    n_sites = len(fleet.site_table)
    site_index = fleet.site_index
    tenant_index = layer.state.tenant_index
    reached = np.zeros(n_sites, bool)  # sites some unit other than an order-free one may go to, or a host
    for vc in world.vcs.values():
        for group in vc.host_groups:
            _reach(reached, fleet, layer.global_layer.host_request(vc, group))
    # the candidates: one task a unit, bound near a site within a bound, of a plain tenant's default VC
    sites, rtts, tenants, apps, comps, seqs, prios, levels, ns, vids = [], [], [], [], [], [], [], [], [], []
    n_specs = np.zeros(len(world.apps), np.int64)
    vector = _Vectors(fleet)
    made = _Made(world, layer, vector)  # applications made per site whose specs are all candidates, in bulk
    last_name, last_site = None, -1
    start = 0
    for a, app in enumerate(world.apps):
        if made.take(a, app, start):
            start += made.units
            n_specs[a] = made.specs
            continue
        tenant = world.tenants.get(app.tenant)
        plain = tenant is not None and not tenant.quota and world.vcs[app.vc].default
        t = tenant_index.get(app.tenant, -1)
        standing: dict[int, int] = {}
        for i, comp, members, seq, priority, n in app_specs(app, start):
            start = seq + n
            n_specs[a] += 1
            if members is None and plain and _alone_kind(comp):
                name = comp.near.site
                if name != last_name:  # (a device's services come one after another: looked up once)
                    last_name, last_site = name, site_index[name]
                level = standing.get(priority)
                if level is None:
                    level = standing[priority] = layer.standing_of(app.tenant, priority)
                sites.append(last_site)
                rtts.append(comp.near.max_rtt_ms)
                tenants.append(t)
                apps.append(a)
                comps.append(i)
                seqs.append(seq)
                prios.append(priority)
                levels.append(level)
                ns.append(n)
                vids.append(vector.index(comp))
                continue
            for c in members if members is not None else (comp,):
                if c.size:
                    _reach(reached, fleet, layer.request(c, app.tenant))
    columns = [np.array(x, dtype) for x, dtype in ((sites, np.int64), (rtts, np.float64), (tenants, np.int64),
                                                    (apps, np.int64), (comps, np.int64), (seqs, np.int64),
                                                    (prios, np.int64), (levels, np.int64), (ns, np.int64),
                                                    (vids, np.int64))]
    bulk = made.columns()
    if bulk is not None:  # (each source in application order, an application's specs in order: merged stably)
        columns = [np.concatenate([c, b]) for c, b in zip(columns, bulk)]
        order = np.argsort(columns[3], kind="stable")
        columns = [c[order] for c in columns]
    d, rtts, tenants, apps, comps, seqs, prios, levels, ns, vids = columns
    if not d.size:
        return Split(shards, shard_of)
    # order-free: its neighbourhood is its device alone, of one node (no tie to draw)
    ok = network.alone_anywhere(d, rtts) & (np.bincount(fleet.node_site, minlength=n_sites) == 1)[d]
    for k in np.flatnonzero(~ok).tolist():  # a candidate that is not: where it may go is reached
        app = world.apps[int(apps[k])]
        _reach(reached, fleet, layer.request(app.components[int(comps[k])], app.tenant))
    t = tenants
    # ... and the device is its tenant's alone: no other unit may go there, no other tenant's is bound near it
    order = np.argsort(d, kind="stable")
    ds = d[order]
    starts = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
    one = np.minimum.reduceat(t[order], starts) == np.maximum.reduceat(t[order], starts)
    good_site = np.zeros(n_sites, bool)
    good_site[ds[starts]] = one
    good_site &= ~reached
    free = np.flatnonzero(good_site[d] & ok)  # (a candidate that is not, bound near the device, goes elsewhere)
    if not free.size:
        return Split(shards, shard_of)
    shard = (np.where(network.leaf[d], network.parent[d], d) % shards).astype(np.int16)  # (on two edges: its own)
    a_free, c_free, s_free = apps[free], comps[free], shard[free]
    cuts = np.flatnonzero(np.r_[True, a_free[1:] != a_free[:-1], True])  # (candidates come in application order)
    free_apps = a_free[cuts[:-1]].tolist()
    for a, lo, hi in zip(free_apps, cuts[:-1].tolist(), cuts[1:].tolist()):
        shard_of[a][c_free[lo:hi]] = s_free[lo:hi]
    # the key of each device's first unit: it makes the device's fitted host
    node_of_site = np.full(n_sites, -1, np.int64)
    node_of_site[fleet.node_site] = np.arange(fleet.n_nodes)
    nodes = node_of_site[d[free]]
    split_rows = nodes.astype(np.int32)
    keys = np.stack([-levels[free], -prios[free],
                     seqs[free]], axis=1)
    by = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0], nodes))
    nodes, keys = nodes[by], keys[by]
    head = np.r_[True, nodes[1:] != nodes[:-1]]
    split = Split(shards, shard_of, nodes[head], keys[head])
    on, n = apps[free], ns[free]
    vid = vids[free]
    split.app_lo = np.full(len(world.apps), -1, np.int64)
    split.app_lo[free_apps] = cuts[:-1]
    split.comp, split.row, split.n = c_free.astype(np.int32), split_rows, n.astype(np.int32)
    split.vid, split.vecs = vid.astype(np.int32), np.array(vector.vecs, np.int64)
    # applications all of whose units are order-free, of one priority: one run each
    free_specs = np.bincount(on, minlength=len(world.apps))
    p = prios[free]
    low = np.full(len(world.apps), np.iinfo(np.int64).max)
    high = np.full(len(world.apps), np.iinfo(np.int64).min)
    np.minimum.at(low, on, p)
    np.maximum.at(high, on, p)
    whole = np.flatnonzero((free_specs == n_specs) & (free_specs > 0) & (low == high))
    if whole.size:
        vecs = split.vecs
        totals = np.zeros((len(world.apps), vecs.shape[1]), np.int64)
        np.add.at(totals, on, n[:, None] * vecs[vid])
        units = np.bincount(on, weights=n, minlength=len(world.apps)).astype(np.int64)
        last = np.zeros(len(world.apps), np.int64)
        last[on[cuts[1:] - 1]] = vid[cuts[1:] - 1]  # (candidates in application order: an application's last)
        for a in whole.tolist():
            split.whole[a] = Whole(int(units[a]), int(low[a]), totals[a], vecs[last[a]])
    return split


class _Made:
    """The candidates of applications made per site (``each``) whose specs
    are all candidates, found per prototype and tenant once and laid out per
    application in arrays (what ``split_work``'s loop finds one spec at a
    time): a million cars' applications, ten services each."""

    def __init__(self, world: World, layer: BusinessLayer, vector: "_Vectors") -> None:
        self.world, self.layer, self.vector = world, layer, vector
        self.site_index = world.fleet.site_index
        self._kinds: dict[tuple, int] = {}  # (component classes, tenant, VC) -> kind, or -1: not all candidates
        self.specs_of: list[np.ndarray] = []  # per kind, per spec: component, number, priority, standing,
        # units, vector, tenant, fixed site (-1: the application's own)
        self.rtts_of: list[np.ndarray] = []  # per kind, per spec: its bound
        self.units_of: list[int] = []
        self._a: list[int] = []
        self._kind: list[int] = []
        self._site: list[int] = []
        self._start: list[int] = []
        self.units = self.specs = 0

    def take(self, a: int, app: Application, start: int) -> bool:
        """Whether ``app`` is of a kind taken in bulk (then noted, with
        ``units`` and ``specs`` its counts)."""
        if not isinstance(app, SiteApplication) or not app._proto.components:
            return False
        key = type(app)
        k = self._kinds.get(key)
        if k is None:
            k = self._kinds[key] = self._kind_of(app)
        if k < 0:
            return False
        self._a.append(a)
        self._kind.append(k)
        self._site.append(app.site)
        self._start.append(start)
        self.units, self.specs = self.units_of[k], len(self.specs_of[k])
        return True

    def _kind_of(self, app: Application) -> int:
        world, layer = self.world, self.layer
        tenant = world.tenants.get(app.tenant)
        if tenant is None or tenant.quota or not world.vcs[app.vc].default:
            return -1
        t = layer.state.tenant_index.get(app.tenant, -1)
        rows, rtts = [], []
        for i, comp, members, seq, priority, n in app_specs(app, 0):
            if members is not None or not _alone_kind(comp):
                return -1
            proto_near = type(comp)._proto.near
            fixed = -1 if proto_near.site == EACH_SITE else self.site_index[comp.near.site]
            rows.append((i, seq, priority, layer.standing_of(app.tenant, priority), n, self.vector.index(comp),
                         t, fixed))
            rtts.append(comp.near.max_rtt_ms)
        if not rows:
            return -1
        self.specs_of.append(np.array(rows, np.int64))
        self.rtts_of.append(np.array(rtts, np.float64))
        self.units_of.append(int(sum(r[4] for r in rows)))
        return len(self.specs_of) - 1

    def columns(self) -> list[np.ndarray] | None:
        """The candidates as ``split_work``'s columns (sites, rtts, tenants,
        applications, components, numbers, priorities, standings, units,
        vectors), in application order; None when there are none."""
        if not self._a:
            return None
        a, kind = np.array(self._a, np.int64), np.array(self._kind, np.int64)
        site, start = np.array(self._site, np.int64), np.array(self._start, np.int64)
        out: list[list[np.ndarray]] = [[] for _ in range(10)]
        for k, spec in enumerate(self.specs_of):
            mine = np.flatnonzero(kind == k)
            if not mine.size:
                continue
            m, s = mine.size, spec.shape[0]
            ints = lambda j: np.tile(spec[:, j], m)  # noqa: E731  (spec by spec, application by application)
            fixed = ints(7)
            out[0].append(np.where(fixed >= 0, fixed, np.repeat(site[mine], s)))
            out[1].append(np.tile(self.rtts_of[k], m))
            out[2].append(ints(6))
            out[3].append(np.repeat(a[mine], s))
            out[4].append(ints(0))
            out[5].append(np.repeat(start[mine], s) + ints(1))
            out[6].append(ints(2))
            out[7].append(ints(3))
            out[8].append(ints(4))
            out[9].append(ints(5))
        return [np.concatenate(c) for c in out]


def _reach(reached: np.ndarray, fleet, req) -> None:
    """Mark the sites ``req`` could ever be placed at (a superset: its site
    checks and the sites' largest nodes; not its node checks)."""
    able = fleet.sites_able_ignoring_private(req.vec)
    masks = [term for _, term in req.site_terms if isinstance(term, np.ndarray)]
    near = next((term for _, term in req.site_terms if isinstance(term, NearBound)), None)
    private = next((term for _, term in req.site_terms if isinstance(term, Private)), None)
    if near is not None:
        sites = near.sites
        keep = able[sites]
        for m in masks:
            keep &= m[sites]
        if private is not None:
            keep &= private.at(sites)
        reached[sites[keep]] = True
        return
    mask = able.copy()
    for m in masks:
        mask &= m
    if private is not None:
        mask &= private.mask()
    reached |= mask


def _walk(by_priority: dict[int, list], split: Split, index: dict[int, int]):
    """A tenant's specs of one standing in its queue's order (``business_layer.queued_specs``),
    each with its shard (-1: the global part's)."""
    last, mine = None, None
    for app, i, comp, members, seq, n in queued_specs(by_priority):
        if app is not last:
            last, mine = app, split.shard_of[index[id(app)]]
        yield app, comp, members, seq, n, int(mine[i]) if members is None else -1


def _runs(by_priority: dict[int, list], split: Split, index: dict[int, int], vector: "_Vectors"):
    """``_walk`` for the global part: its own specs (``("units", app, comp,
    members, seq)``) between runs of order-free units, each run (of one
    priority) as ``("free", n, what they take in all, what the last takes,
    the last one's number, its spans)``, a span being consecutive specs of
    the split's (first, end, the first unit's number); an application of
    order-free units only is passed over whole, as one span."""
    for priority in sorted(by_priority, reverse=True):
        n, total, last, last_seq, spans = 0, 0, None, -1, []
        for app, start in by_priority[priority]:
            a = index[id(app)]
            whole = split.whole.get(a)
            mine = split.shard_of[a]
            if whole is not None and whole.priority == priority:
                n, total, last, last_seq = n + whole.n, total + whole.total, whole.last, start + whole.n - 1
                lo = int(split.app_lo[a])
                spans.append((lo, lo + int(np.count_nonzero(mine >= 0)), start))
                continue
            for i, comp, members, seq, p, k in app_specs(app, start):
                if p != priority:
                    continue
                if members is None and mine[i] >= 0:
                    last = vector(comp)
                    n, total, last_seq = n + k, total + k * last, seq + k - 1
                    lo = int(split.app_lo[a])
                    j = lo + int(np.flatnonzero(split.comp[lo:lo + int(np.count_nonzero(mine >= 0))] == i)[0])
                    spans.append((j, j + 1, seq))
                    continue
                if n:
                    yield "free", n, total, last, last_seq, spans
                    n, total, spans = 0, 0, []
                yield "units", app, comp, members, seq
        if n:
            yield "free", n, total, last, last_seq, spans


class _Vectors:
    """What a unit of a component takes (its request's vector), per distinct
    resources; each distinct vector numbered (``index``, ``vecs``)."""

    def __init__(self, fleet) -> None:
        self.fleet = fleet
        self._of: dict = {}
        self._ids: dict[bytes, int] = {}
        self.vecs: list[np.ndarray] = []

    def index(self, comp: Component) -> int:
        res, arch = comp.resources, comp.arch
        got = self._of.get((id(res), id(arch)))  # (replicas and a template's per-site copies share both)
        if got is None or got[0] is not res or got[1] is not arch:
            vec = compile_request(self.fleet, res, arch=arch).vec.astype(np.int64)
            k = self._ids.setdefault(vec.tobytes(), len(self.vecs))
            if k == len(self.vecs):
                self.vecs.append(vec)
            got = self._of[(id(res), id(arch))] = (res, arch, k)
        return got[2]

    def __call__(self, comp: Component) -> np.ndarray:
        return self.vecs[self.index(comp)]


# ------------------------------------------------------------ a shard


@dataclass
class ShardPart:
    """What a shard decided, as columns: its placed tasks' ids, rows (nodes),
    tenants, VCs, vectors and device shares; the tasks on each of its nodes;
    its fitted hosts per VC (node, tasks held) in the order made. ``ok``:
    every unit placed and nothing drawn."""

    shard: int
    ok: bool
    units: int
    ids: np.ndarray
    rows: np.ndarray
    tenants: np.ndarray
    vcs: np.ndarray
    vc_names: list[str]
    vec_ids: np.ndarray
    vecs: np.ndarray
    dev: dict[int, tuple]
    on_node: tuple[np.ndarray, np.ndarray]  # (task ids, their nodes): ``NodeTasks.columns``
    hosts: dict[str, tuple[np.ndarray, np.ndarray]]
    why: str = ""
    peak_bytes: int = 0  # the shard's process's peak resident memory, when it ran as an actor
    pid: int = 0  # ... and its process's id


@dataclass
class Slice:
    """What a shard is sent of the world besides the fleet (sent once for
    all shards): the tenancy, and the applications with its order-free
    units, in the world's order, each with where its task ids start in the
    world (``starts``; last, the world's count) and the shard of each of its
    components (``shard_of``). An
    application made per site (``each``) is sent as its prototype's number
    and its site (``made``, ``sites``: a car's ten services in a few bytes,
    made again there as the load made them); any other whole (``apps``)."""

    tenants: dict
    vcs: dict
    seed: int
    protos: list[Application]  # the prototypes of the applications made per site
    made: np.ndarray  # int32 per application: its prototype, or -1 (the next of ``apps``)
    sites: list[int]  # per application made per site: its site's number
    apps: list[Application]
    starts: np.ndarray  # int64: per application, its first task id in the world; last, the world's tasks
    shard_of: PerApp

    def world(self, fleet) -> World:
        """The world of these applications only, on ``fleet`` (the world's)."""
        classes = [site_application(proto, fleet.site_table.names) for proto in self.protos]
        others, sites = iter(self.apps), iter(self.sites)
        apps = tuple(next(others) if p < 0 else app_for_site(classes[p], next(sites)) for p in self.made.tolist())
        return World(fleet, self.tenants, self.vcs, apps, self.seed)


def slice_for(world: World, split: Split, k: int, starts: np.ndarray | None = None) -> Slice:
    """Shard ``k``'s slice of ``world`` (``split``: as the global part found
    it; ``starts``: where each application's task ids start, and last their
    count, as ``Catalogue.starts``; default: counted here)."""
    so = split.shard_of
    if starts is None:
        starts = Catalogue(world.apps).starts
    comps = np.diff(so.offsets)
    mine = np.unique(np.repeat(np.arange(comps.size), comps)[so.flat == k])
    protos: list[Application] = []
    proto_of: dict[type, int] = {}
    made = np.full(mine.size, -1, np.int32)
    sites: list[int] = []
    apps: list[Application] = []
    for j, a in enumerate(mine.tolist()):
        app = world.apps[a]
        if not isinstance(app, SiteApplication):
            apps.append(app)
            continue
        p = proto_of.get(type(app))
        if p is None:
            p = proto_of[type(app)] = len(protos)
            protos.append(app._proto)
        made[j] = p
        sites.append(app.site)
    flat = np.concatenate([so[a] for a in mine.tolist()]) if mine.size else np.zeros(0, np.int16)
    offsets = np.zeros(mine.size + 1, np.int64)
    np.cumsum(comps[mine], out=offsets[1:])
    return Slice(dict(world.tenants), dict(world.vcs), world.seed, protos, made, sites, apps,
                 np.append(starts[mine], starts[-1]), PerApp(flat, offsets))


def decide_slice(piece: Slice, fleet, k: int, shards: int, policy: str | None = None) -> ShardPart:
    """Shard ``k`` of ``shards``: place the order-free units of its slice
    (on the world's ``fleet``) alone, with the world's task ids."""
    world = piece.world(fleet)
    return decide_shard(world, k, shards, policy, piece.shard_of, Catalogue(world.apps, piece.starts))


def decide_shard(world: World, k: int, shards: int, policy: str | None, shard_of: PerApp,
                 ids: Catalogue | None = None) -> ShardPart:
    """Shard ``k`` of ``shards``: place its order-free units alone.
    ``shard_of``: the split's shard of each component of ``world``'s
    applications (``Split.shard_of``, as the global part found it).
    ``ids``: the task ids (default: ``world``'s own)."""
    state = PlacementState(world, ids)
    layer = BusinessLayer(state, GlobalLayer(state, NoDraws()), NoDraws(), policy=policy_for(world, policy))
    split = Split(shards, shard_of)
    entries, _, _ = layer.queues_of(world.apps)
    index = {id(app): a for a, app in enumerate(world.apps)}
    counts: dict[tuple[int, str], int] = defaultdict(int)
    for level, tenants_of in entries.items():
        for tenant, by_priority in tenants_of.items():
            for *_, n, shard in _walk(by_priority, split, index):
                if shard == k:
                    counts[level, tenant] += n

    def queued(by_priority):
        for app, comp, members, seq, n, shard in _walk(by_priority, split, index):
            if shard == k:
                yield from spec_units(app, comp, None, seq)

    by_standing = {level: {t: UnitQueue(queued(by_priority), counts[level, t])
                           for t, by_priority in tenants_of.items() if counts[level, t]}
                   for level, tenants_of in entries.items()}
    units = sum(counts.values())
    why = ""
    try:
        layer._pass(by_standing, list(dict.fromkeys(t for _, t in counts)), True, None)
    except Drew as exc:
        why = str(exc)
    p = state.placements
    if not why and layer.unscheduled:
        u = layer.unscheduled[0]
        why = f"{len(layer.unscheduled)} order-free task(s) not placed (first: {u.task})"
    if not why and len(p) != units:
        why = f"{len(p)} of {units} order-free tasks placed"
    ids = np.flatnonzero(p._row >= 0)
    hosts = {}
    for name, vc in state.vcs.items():
        if vc.hosts:  # (a default VC's fitted hosts: a shard's units are all in one)
            hosts[name] = vc.hosts.columns()
    return ShardPart(k, not why, units, ids, p._row[ids].copy(), p._tenant[ids].copy(), p._vc[ids].copy(),
                     list(p._vc_names), p._vec[ids].copy(),
                     np.array(p._vecs, np.int64).reshape(len(p._vecs), state.used.shape[1]), dict(p._dev.items()),
                     state.tasks_on_node.columns(), hosts, why)


# ------------------------------------------------------------ the global part


@dataclass
class GlobalPass:
    """The global part's pass over the units the shards do not decide, with
    what it presumed of theirs."""

    outcome: Outcome
    split: Split
    presumed: int  # order-free units passed over, each presumed placed
    made: dict[str, list[tuple[tuple, int]]]  # default VC -> (unit key, fitted hosts it made), in order
    homed: int = 0  # of its own units, placed on their own device without a request compiled


@dataclass
class Prepared:
    """The global part before its pass: the layers (the VCs' fixed hosts
    placed) and the split."""

    layer: BusinessLayer
    split: Split


def prepare_global(world: World, shards: int, seed: int | None = None, policy: str | None = None) -> Prepared:
    rng = np.random.default_rng(world.seed if seed is None else seed)
    state = PlacementState(world)
    global_layer = GlobalLayer(state, rng)
    global_layer.place_initial()
    layer = BusinessLayer(state, global_layer, rng, policy=policy_for(world, policy))
    return Prepared(layer, split_work(world, layer, shards))


def global_pass(world: World, shards: int, seed: int | None = None, policy: str | None = None,
                prepared: Prepared | None = None) -> GlobalPass:
    """The global part's pass (``prepared``: from ``prepare_global``, else made here)."""
    prepared = prepared or prepare_global(world, shards, seed, policy)
    layer, split = prepared.layer, prepared.split
    n_tasks = sum(task_count(app) for app in world.apps)
    presumed, made, homed = _merge(layer, split)
    outcome = Outcome(layer.state, layer.unscheduled, layer.global_layer.unplaced, n_tasks)
    return GlobalPass(outcome, split, presumed, made, homed)


def _merge(layer: BusinessLayer, split: Split) -> tuple[int, dict, int]:
    """The pass of ``BusinessLayer.run_apps``, deciding only the global part's
    units, in the order one process takes them (see the module's text)."""
    state = layer.state
    world = state.world
    entries, _, tenants = layer.queues_of(world.apps)
    index = {id(app): a for a, app in enumerate(world.apps)}
    vector = _Vectors(state.fleet)
    several = len(tenants) > 1
    share = layer._waiting_shares(tenants) if several else {}
    failed: list = []
    failed_shapes: dict = {}
    made: dict[str, list] = defaultdict(list)
    presumed = 0
    home = _Home(layer)
    passed = _Passed(state, split)
    state.nodes.settle = passed.settle
    for level in sorted(entries, reverse=True):
        tenants_of = entries[level]
        order = {t: i for i, t in enumerate(tenants_of)}
        walks = {t: _runs(by_priority, split, index, vector) for t, by_priority in tenants_of.items()}
        pending: dict[str, Iterator] = {}
        top: dict[str, tuple] = {}  # per tenant: the largest key of its units so far (several tenants)
        heap: list = []

        def advance(t: str) -> None:
            nonlocal presumed
            while True:
                units = pending.get(t)
                if units is not None:
                    u = next(units, None)
                    if u is not None:
                        key = (share.get(t, 0.0), u.seq, order[t])
                        m = top.get(t)
                        heapq.heappush(heap, (key if m is None or key > m else m, u))
                        return
                    del pending[t]
                item = next(walks[t], None)
                if item is None:
                    return
                if item[0] == "units":
                    pending[t] = spec_units(*item[1:])
                    continue
                _, n, total, last, last_seq, spans = item  # order-free units: its usage grows by what they take
                row = state.tenant_index[t]
                passed.add(level, t, order[t], top.get(t), spans)
                if several:
                    key = (state.share_of(t, state.used[row] + total - last), last_seq, order[t])
                    m = top.get(t)
                    top[t] = key if m is None or key > m else m
                state.used[row] += total
                if several:
                    share[t] = state.dominant_share(t)
                presumed += n

        for t in tenants_of:
            advance(t)
        while heap:
            key, u = heapq.heappop(heap)
            t = u.tenant
            vcs = state.vcs[u.app.vc]
            before = len(vcs.hosts)
            passed.now = (level, t, key if several else None)
            if (home.place(u, vcs, failed_shapes) or layer._run_one(u, True, failed, failed_shapes, None)) \
                    and several:
                share[t] = state.dominant_share(t)
            if vcs.default and len(vcs.hosts) > before:
                made[vcs.name].append(((-level, -u.priority, u.seq), len(vcs.hosts) - before))
            top[t] = key
            advance(t)
    state.nodes.settle = None
    return presumed, made, home.placed


@dataclass
class _Run:
    """A run of one tenant's order-free units the global part passed over:
    its standing, its tenant and the tenant's place, the tenant's running
    maximum key and usage before it, its spans (``_runs``); then, once an
    explanation needs them, its units one by one (``units``) and how many of
    them have been taken off their rows (``done``)."""

    level: int
    tenant: str
    order: int
    top: tuple | None
    used: np.ndarray
    spans: list
    rows: np.ndarray | None = None
    vid: np.ndarray | None = None
    seq: np.ndarray | None = None
    share: np.ndarray | None = None
    done: int = 0

    def units(self, split: Split, state: PlacementState) -> None:
        """Its units, one by one: rows, vectors, numbers, and the key each
        had (its tenant's share before it)."""
        if self.rows is not None:
            return
        at = np.concatenate([np.arange(lo, hi) for lo, hi, _ in self.spans])
        n = split.n[at].astype(np.int64)
        self.rows = np.repeat(split.row[at].astype(np.int64), n)
        self.vid = np.repeat(split.vid[at], n)
        firsts = np.array([first for _, _, first in self.spans], np.int64)
        per_span = np.array([int(split.n[lo:hi].sum()) for lo, hi, _ in self.spans], np.int64)
        ends = np.cumsum(per_span)
        self.seq = np.repeat(firsts - (ends - per_span), per_span) + np.arange(int(ends[-1]))
        vecs = split.vecs[self.vid]
        self.share = state.shares_of(self.tenant, self.used + np.cumsum(vecs, axis=0) - vecs)  # (before each)


class _Passed:
    """The order-free units the global part has passed over, taken off their
    devices' rows only when an explanation is to read the rows (``settle``:
    how many rows a unit would fit on but for one check counts them, and
    what the best of them has free), and then only those one process has
    placed by then: another tenant's run before a unit of the same standing
    whose key is larger than theirs (the running maximum), all of the unit's
    own tenant's (walked before it), all of an earlier standing's, all of
    them with one tenant. No other unit may go to those devices, so nothing
    else reads them."""

    def __init__(self, state: PlacementState, split: Split) -> None:
        self.state, self.split = state, split
        self.runs: list[_Run] = []
        self.now: tuple[int, str, tuple | None] = (0, "", None)  # the unit being decided: standing, tenant, key

    def add(self, level: int, tenant: str, order: int, top: tuple | None, spans: list) -> None:
        used = self.state.used[self.state.tenant_index[tenant]].copy()
        self.runs.append(_Run(level, tenant, order, top, used, spans))

    def settle(self) -> None:
        level, tenant, key = self.now
        keep = []
        for run in self.runs:
            run.units(self.split, self.state)
            done = run.done
            if run.level != level or key is None or run.tenant == tenant:
                end = run.rows.size
            elif run.top is not None and run.top > key:
                end = done
            else:
                share, seq = run.share[done:], run.seq[done:]
                before = (share < key[0]) | ((share == key[0]) & ((seq < key[1]) | ((seq == key[1])
                                                                                       & (run.order < key[2]))))
                end = done + int(np.count_nonzero(before))  # (keys rise along a run: a prefix)
            if end > done:
                self.state.nodes.take_rows(run.rows[done:end], self.split.vecs[run.vid[done:end]].T)
                run.done = end
            if end < run.rows.size:
                keep.append(run)
        self.runs = keep


class _Home:
    """The global part's units that can only go to their own device (bound
    within less than its link, a device of one row, no share of a device, a
    tenant without a quota, a default VC): placed there when it fits, as a
    batch of one would place them (``batch.Batches``), without compiling the
    request bound near the device; one that does not fit goes the usual way
    (for its reasons)."""

    def __init__(self, layer: BusinessLayer) -> None:
        self.layer = layer
        state = layer.state
        self.network = state.fleet.network
        self.site_index = state.fleet.site_index
        self.on = layer.policy is None and np.unique(self.network.component).size == 1
        self.placed = 0

    def place(self, unit, vcs, failed_shapes: dict) -> bool:
        """True when ``unit`` was placed here."""
        if not self.on or not vcs.default or vcs.table.listeners:
            return False
        comp = batch_alone_kind(unit)
        if comp is None:
            return False
        layer = self.layer
        state = layer.state
        tenant = unit.app.tenant
        if state.world.tenants[tenant].quota or (failed_shapes and unit_shape(unit) in failed_shapes):
            return False
        site = self.site_index[comp.near.site]
        if not self.network.alone(site, comp.near.max_rtt_ms):
            return False
        t = layer.batches.template(comp, tenant)
        if t is None or t.accels:
            return False
        table = vcs.table
        rows = site_rows_of(table, site)
        if rows.size != 1 or not fits(table, t, rows):
            return False
        a = Allocation(int(rows[0]), t.vec)
        table.take(a)
        state.add_placement(unit.tasks[0], tenant, vcs, a)
        self.placed += 1
        return True


def absorb(done: GlobalPass, parts: list[ShardPart]) -> Outcome:
    """The global part's outcome with the shards' placements and fitted hosts
    put in (see the module's text); the parts must be ``ok``."""
    state = done.outcome.state
    p = state.placements
    split = done.split
    theirs: dict[str, list] = defaultdict(list)  # VC -> the shards' fitted hosts: (nodes, counts, keys)
    for part in parts:
        if not part.ids.size:
            continue
        top = int(part.ids.max()) + 1
        if top > p._row.size:
            p._widen(top)
        vc_map = np.array([_intern(p._vc_at, p._vc_names, name) for name in part.vc_names], np.int32)
        vec_map = np.array([_intern_vec(p, v) for v in part.vecs], np.int32)
        ids = part.ids
        p.codes_fit(max(int(part.tenants.max(initial=0)), int(vc_map.max(initial=0)), int(vec_map.max(initial=0))))
        p._tenant[ids] = part.tenants
        p._vc[ids] = vc_map[part.vcs]
        p._row[ids] = part.rows
        p._vec[ids] = vec_map[part.vec_ids]
        p._n += int(ids.size)
        for i, pair in part.dev.items():
            p._dev[i] = pair
        state.tasks_on_node.add_all(*part.on_node)
        for name, (nodes, counts) in part.hosts.items():
            theirs[name].append((nodes, counts, [split.first_key(node) for node in nodes.tolist()]))
    for name, pieces in theirs.items():
        vc = state.vcs[name]
        ours_nodes, ours_counts = vc.hosts.columns()
        keys = [key for key, n in done.made.get(name, ()) for _ in range(n)]
        entries = [*zip(keys, ours_nodes.tolist(), ours_counts.tolist())]
        for nodes, counts, their_keys in pieces:
            entries += zip(their_keys, nodes.tolist(), counts.tolist())
        entries.sort(key=lambda e: e[0])  # (stable: one unit's hosts in order)
        vc.hosts.renumber(np.array([e[1] for e in entries], np.int64), np.array([e[2] for e in entries], np.int64))
        vc.next_index[None] = len(entries)
        if vc.component < 0:
            vc.component = int(state.fleet.network.component[state.fleet.node_site[entries[0][1]]])
            vc.together = True
    return done.outcome


def _intern(at: dict, names: list, name: str) -> int:
    i = at.get(name)
    if i is None:
        i = at[name] = len(names)
        names.append(name)
    return i


def _intern_vec(p, vec: np.ndarray) -> int:
    vec = np.ascontiguousarray(vec, dtype=p._vecs[0].dtype if p._vecs else np.int64)
    key = vec.tobytes()
    k = p._vec_at.get(key)
    if k is None:
        k = p._vec_at[key] = len(p._vecs)
        vec.setflags(write=False)
        p._vecs.append(vec)
    return k


def finish(world: World, done: GlobalPass, parts: list[ShardPart], seed: int | None = None,
           policy: str | None = None) -> tuple[Outcome, str]:
    """The outcome: the shards' answers checked against what the global part
    presumed and put in; where they differ, the world scheduled in one
    process. Also says which it was ("" when the shards' answers stood)."""
    placed = sum(part.units for part in parts)
    bad = [part.why for part in parts if not part.ok]
    if not bad and placed != done.presumed:
        bad.append(f"the shards placed {placed} order-free units, the global part presumed {done.presumed}")
    if bad:
        return schedule(world, seed, policy), "; ".join(bad)
    return absorb(done, parts), ""
