"""Many decisions at once: units that go to their own device.

Two kinds of unit go nowhere but their own device, when it fits:
- a service bound ``near`` a device within less than the rtt of the
  device's one link: its neighbourhood is the device alone;
- one bound near a device within a wider bound, when the device's row, if
  it fits, scores above anything any other row could score (the packing
  score is at most 100, and every other site is at least the device's link
  away, so its near score is at most that of the link's rtt; a site that
  could give the devices score is further still, by its distance over the
  core: ``Network.core_distance``). Its decision needs no other row.

A million cars' own services are a queue of such units, each touching its
car's node only. Taken one by one, each costs a compiled request, a
neighbourhood search and a few dozen small array operations; taken together,
they are one gather of rows, one pass of checks and scores, and ties drawn
in queue order.

Several tenants' units go in one batch, in the order the pass would take
them one by one: the pass keeps its waiting tenants in a heap keyed by
weighted dominant share, and after each unit placed its tenant's share
rises. The batch plays that heap forward with each tenant's share as it
would be after the units before (its usage plus their demand, the same
arithmetic as ``PlacementState.dominant_share``), so ten operators' cars,
whose fair shares take turns unit by unit, are still decided together.
Their default VCs share the node table; each unit is checked against its
own tenant's quota (a running sum per tenant) and its own VC's reach.

Why this decides as one by one does: a unit of the batch reads only the rows
of its site. Units on different sites read disjoint rows, so one's placement
cannot change another's checks or scores. A site that several units of the
batch name must have one row: each unit then only asks whether that row
still fits after the earlier units took their share (a running sum). The
tenant's quota is a running sum over the batch too. Ties on a site with
several rows are drawn from the generator in queue order, as ``nearby.pick``
draws them. The first unit that does not fit, or whose own row does not win
by the bound, ends the batch, and is decided alone (with its reasons);
everything after it waits for the next batch. A property test schedules
random worlds both ways and compares the outcome byte for byte
(``tests/test_batch.py``).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque

import numpy as np

from suanli.scheduling import nearby, scores
from suanli.scheduling.request import Private, Request, arch_reason, compile_request
from suanli.scheduling.table import Allocation, one

ENABLED = True  # False: every unit one by one (the reference)
MIN, MAX = 8, 4096  # units looked at per batch: doubled while batches fill, cut back after a short one
MARGIN = 1e-6  # an own row wins when it scores above the others' bound by this (float sums aside)


class Batches:
    """The batch path of one business layer: its templates (a unit's request
    without its near site) and the size of the next batch."""

    def __init__(self, layer) -> None:
        self.layer = layer
        self.size = MIN
        self._templates: dict[tuple, Request | None] = {}
        # (table, devices-score key) -> [its sites, core stamp, core_distance (by core id)]
        self._far: dict[tuple, list] = {}
        self.decided = 0  # units placed in batches (for tests and benchmarks)

    def template(self, comp, tenant: str) -> Request | None:
        """The request of ``comp`` for ``tenant`` without its near bound and
        without the private-site term (a unit of the batch is on its own
        site); None when the batch cannot hold it (whole devices, several
        kinds of device, a whole node; a share of one device it holds)."""
        arch_why = arch_reason(comp)
        key = (tenant, comp.resources, comp.arch, arch_why)
        got = self._templates.get(key, False)
        if got is False:
            fleet = self.layer.state.fleet
            req = compile_request(fleet, comp.resources, tenant=self.layer.state.world.tenants[tenant],
                                  arch=comp.arch, arch_why=arch_why)
            if len(req.accels) > 1 or any(a.whole for a in req.accels) or req.whole_node:
                got = None
            else:
                terms = tuple(t for t in req.site_terms if not isinstance(t[1], Private))
                got = dataclasses.replace(req, site_terms=terms, cache={})
            if len(self._templates) > 4096:
                self._templates.clear()
            self._templates[key] = got
        return got

    def forget(self) -> None:
        """The fleet's network changed: templates read its components."""
        self._templates.clear()  # (``_far`` is checked against the core at each use)

    # ------------------------------------------------------------ one batch

    def may_take(self, unit) -> bool:
        """Whether ``run`` may begin a batch at ``unit`` (when not, it returns
        None for it whatever the tables hold: a pass may take it alone)."""
        return ENABLED and self.layer.policy is None and _alone_kind(unit) is not None

    def run(self, tenant: str, queues: dict[str, deque], heap: list, order: dict[str, int],
            failed_shapes: dict, shape) -> tuple[int, bool, set[str], list[str]] | None:
        """Place units from the fronts of the pass's queues while they fit, in
        the order the pass takes them one by one: ``tenant``'s first (the
        tenant the pass just took off ``heap``), then, when other tenants
        wait, the tenant of least key as it would be after the units before
        (its weighted dominant share with those units' demand added, the seq
        of its next unit, its place in ``order``: ``business_layer._tenant_heap``).

        Returns None when no batch is begun (the next unit is for the one-by-one
        path). Else: how many units were placed (and taken off their queues),
        whether every unit looked at was placed (else the pass's next unit
        goes one by one: a unit of another kind, or one that does not fit),
        the tenants that placed some, and the tenants taken off ``heap`` on
        the way: the caller puts them back, with ``tenant``, keyed anew.
        ``failed_shapes``: shapes (``shape(unit)``) that already failed in
        this pass; such a unit ends the batch."""
        layer = self.layer
        queue = queues[tenant]
        if not queue or not self.may_take(queue[0]):
            return None  # the next unit is not one a batch takes: no batch is started for it
        state = layer.state
        first = queue[0]
        vcs = state.vcs[first.app.vc]
        table = vcs.table
        if table.listeners or table.n == 0 or (vcs.default and vcs.component < 0):
            return None  # the first placement of a default VC sets its reach: one by one
        fleet = state.fleet
        site_index = fleet.site_index
        comp = _alone_kind(first)  # (one component, bound alone: ``may_take``)
        if not _home(fleet.network, site_index[comp.near.site], comp.near.max_rtt_ms):
            return None  # its site is no leaf within its own bound: no batch is started for it
        if not self._fits_home(table, comp, first.app.tenant, site_index[comp.near.site]):
            return None  # it goes elsewhere (too big for its device, or the device is full): one by one
        units, tmpl_of, templates, tmpl_index = [], [], [], {}
        sites, limits, owner_of, owners, owner_index = [], [], [], [], {}
        looked, several = self.size, bool(heap)
        taken: dict[str, int] = {}  # per tenant: units of its queue in the batch
        used: dict[str, np.ndarray] = {}  # per tenant: its usage as it would be after them (several tenants)
        local: list = []  # the tenants in play, keyed as they would be (a heap)
        popped: list[str] = []  # those taken off the pass's heap
        cur, kind_ends = tenant, False
        last, index = None, -1
        while True:
            q = queues[cur]
            k = taken.get(cur, 0)
            unit = q[k]
            comp = _alone_kind(unit)
            uvcs = state.vcs[unit.app.vc] if comp is not None else None
            if (comp is None or (failed_shapes and shape(unit) in failed_shapes) or uvcs.table is not table
                    or (uvcs.default and uvcs.component < 0)):
                kind_ends = True
                break
            t = self.template(comp, unit.app.tenant)
            if t is None:
                kind_ends = True
                break
            j = tmpl_index.get(id(t))
            if j is None:
                j = tmpl_index[id(t)] = len(templates)
                templates.append(t)
            o = owner_index.get(unit.app.vc)
            if o is None:
                o = owner_index[unit.app.vc] = len(owners)
                owners.append(uvcs)
            units.append(unit)
            tmpl_of.append(j)
            owner_of.append(o)
            near = comp.near.site
            if near != last:  # (a device's services come one after another: its name is looked up once)
                last, index = near, site_index[near]
            sites.append(index)
            limits.append(comp.near.max_rtt_ms)
            taken[cur] = k + 1
            if len(units) >= looked:
                break
            if not several:
                if k + 1 >= len(q):
                    break
                continue
            # the next unit the pass would take: the tenant of least key, this one's keyed anew
            if k + 1 < len(q):
                u = used.get(cur)
                if u is None:
                    u = used[cur] = state.used[state.tenant_index[cur]].copy()
                u += t.vec
                heapq.heappush(local, (state.share_of(cur, u), q[k + 1].seq, order[cur], cur))
            if heap and (not local or heap[0] < local[0]):
                e = heapq.heappop(heap)
                popped.append(e[-1])
                heapq.heappush(local, e)
            if not local:
                break
            cur = heapq.heappop(local)[-1]
        n = len(units)
        if n == 0:
            self.size = MIN
            return None  # (nothing was taken off the heap: that follows a unit taken)
        placed = self._decide(units, table, owners, np.array(owner_of, np.int64), np.array(sites, np.int64),
                              np.array(limits, np.float64), np.array(tmpl_of, np.int64), templates)
        p = len(placed)
        done = units[:p]
        for unit in done:
            queues[unit.app.tenant].popleft()
        state.add_placements([u.tasks[0] for u in done], [u.app.tenant for u in done],
                             [owners[o] for o in owner_of[:p]], placed)
        self.decided += p
        full = p == n and not kind_ends
        self.size = min(MAX, 2 * self.size) if full else max(MIN, 2 * p)
        return p, full, {u.app.tenant for u in done}, popped

    def _fits_home(self, table, comp, tenant: str, site: int) -> bool:
        """Whether a row of ``site`` could take ``comp`` now (what it is and what
        it has free): a batch starting with a unit that cannot is not begun."""
        t = self.template(comp, tenant)
        return t is not None and fits(table, t, site_rows_of(table, site))

    def _decide(self, units, table, owners, owner_of, sites, limits, tmpl_of, templates) -> list[Allocation]:
        """The allocations of the batch's first units that fit, in the batch's
        order, already taken from ``table``. ``owners``: the units' virtual
        clusters (each unit's is ``owners[owner_of[i]]``; several only when
        they are tenants' default VCs, which share the node table)."""
        state = self.layer.state
        network = state.fleet.network
        n = len(units)
        intra = network.intra_rtt_ms[sites]
        alone = network.alone(sites, limits)
        home = _home(network, sites, limits)  # alone, or its own row may win by the bound
        order, start = nearby.site_rows(table)
        known = sites < start.size - 1
        alone &= known
        home &= known
        safe = np.where(known, sites, 0)
        count = np.where(known, start[safe + 1] - start[safe], 0)
        # a site named again in the batch must have one row (a running sum decides it)
        again = np.zeros(n, bool)
        by_site, head = _by_site(sites)
        again[by_site] = ~head
        shares = np.array([bool(t.accels) for t in templates])[np.asarray(tmpl_of, np.int64)]
        stop = ~home | ((again | ~alone | shares) & (count != 1)) | (count == 0)
        cut = int(np.argmax(stop)) if stop.any() else n
        if cut == 0:
            return []
        sites, count, tmpl_of, intra = sites[:cut], count[:cut], tmpl_of[:cut], intra[:cut]
        vecs = np.stack([t.vec for t in templates], axis=1)  # int64[R, templates]
        demand = vecs[:, tmpl_of]  # int64[R, cut]
        # each tenant's quota (a default VC): a running sum over its units of the batch
        owner_of = owner_of[:cut]
        over = np.zeros(cut, bool)
        pooled: dict[int, list[int]] = {}  # cohort -> the owners of its members (their units share its pool)
        for o, vcs in enumerate(owners):
            if vcs.default and state.world.tenants[vcs.tenant].quota:
                c = int(state.cohorts.of[state.tenant_index[vcs.tenant]])
                if c >= 0:
                    pooled.setdefault(c, []).append(o)
                    continue
                mine = np.flatnonzero(owner_of == o)
                left = state.quota_left(vcs.tenant)
                over[mine] = (np.cumsum(demand[:, mine], axis=1) > left[:, None]).any(axis=0)
        for group in pooled.values():  # one by one in the batch's order, each seeing the pool the others took
            over |= _over_pooled(state, [owners[o].tenant for o in group], np.asarray(group), owner_of, demand)
        if over.any():
            cut = int(np.argmax(over))
            if cut == 0:
                return []
            sites, count, tmpl_of, intra, demand, owner_of = (sites[:cut], count[:cut], tmpl_of[:cut], intra[:cut],
                                                              demand[:, :cut], owner_of[:cut])
        # the rows of each unit's site, in row order
        unit_of = np.repeat(np.arange(cut), count)
        rows = nearby.runs(order, start[sites], count)
        # what the batch's earlier units on the same (one-row) site take first
        before = np.zeros_like(demand)
        by_site, head = _by_site(sites)
        run = np.cumsum(demand[:, by_site], axis=1) - demand[:, by_site]
        base = np.maximum.accumulate(np.where(head, np.arange(cut), 0))  # each one's first on its site
        before[:, by_site] = run - run[:, base]
        ok = table.enabled[rows].copy()
        free = table.free[:2, rows] - before[:2, unit_of]
        need = demand[:2, unit_of]
        ok &= ((need <= 0) | (free >= need)).all(axis=0)
        for k, t in enumerate(templates):
            mine = tmpl_of[unit_of] == k
            if mine.any():
                ok[mine] &= nearby.static_ok(table, t, rows[mine])
        if owners[0].default:  # reachable from the VC's hosts (default VCs: each its own)
            reach = np.array([vcs.component for vcs in owners], np.int64)[owner_of]
            ok &= network.component[table.site[rows]] == reach[unit_of]
        slot = self._shares(table, templates, tmpl_of, sites[:cut], rows, count, ok)
        # per unit: its row (one), or the best of its rows with ties drawn in order
        fits = np.bincount(unit_of[ok], minlength=cut)
        if not fits.all():
            cut = int(np.argmin(fits > 0))
            keep = unit_of < cut
            rows, unit_of, ok = rows[keep], unit_of[keep], ok[keep]
            count, tmpl_of, intra, slot = count[:cut], tmpl_of[:cut], intra[:cut], slot[:cut]
        if cut == 0:
            return []
        wide = ~alone[:cut]
        if wide.any():  # their own (one) row must win by the bound
            u = np.flatnonzero(wide)
            lose = np.zeros(cut, bool)
            lose[u] = ~self._wins(table, templates, tmpl_of[u], sites[u], rows[np.cumsum(count)[u] - 1],
                                  before[:, u], intra[u])
            if lose.any():
                cut = int(np.argmax(lose))
                keep = unit_of < cut
                rows, unit_of, ok = rows[keep], unit_of[keep], ok[keep]
                count, tmpl_of, intra, slot = count[:cut], tmpl_of[:cut], intra[:cut], slot[:cut]
        if cut == 0:
            return []
        chosen = np.full(cut, -1, np.int64)
        single = count == 1
        chosen[single] = rows[np.repeat(single, count)]  # a unit's one row: it fits
        several = np.flatnonzero(~single)
        if several.size:
            self._choose(table, templates, tmpl_of, intra, rows, unit_of, ok, several, chosen)
        milli = np.array([t.accels[0].milli if t.accels else 0 for t in templates], np.int64)[tmpl_of]
        table.take_rows(chosen, demand[:, :cut], slot, milli)
        return [Allocation(r, templates[k].vec, one(d), one(m)) if d >= 0 else Allocation(r, templates[k].vec)
                for r, k, d, m in zip(chosen.tolist(), tmpl_of.tolist(), slot.tolist(), milli.tolist())]

    def _shares(self, table, templates, tmpl_of, sites, rows, count, ok) -> np.ndarray:
        """int64[units]: the device slot each unit with a share of a device
        takes on its (one) row, -1 for the others. Such a row must have one
        slot the share may use (``allocation``'s choice is then that slot) and
        room on it after the batch's earlier units on it took theirs;
        otherwise its entry in ``ok`` is cleared (the batch ends there)."""
        n = count.size
        slot = np.full(n, -1, np.int64)
        want = np.zeros(n, np.int64)
        at = np.cumsum(count) - 1  # a unit's row, for those with one
        for k, t in enumerate(templates):
            if not t.accels:
                continue
            mine = np.flatnonzero(tmpl_of[:n] == k)
            if not mine.size:
                continue
            usable = nearby._usable(table, t.accels[0], rows[at[mine]])
            one = usable.sum(axis=0) == 1
            slot[mine] = np.where(one, np.argmax(usable, axis=0), -1)
            want[mine] = t.accels[0].milli
            ok[at[mine[~one]]] = False
        has = np.flatnonzero(slot >= 0)
        if has.size:  # what earlier units of the batch take from the same slot of the same row
            key = sites[has] * table.dev_free.shape[0] + slot[has]
            by_key, head = _by_site(key)
            taken = np.cumsum(want[has][by_key]) - want[has][by_key]
            first = np.maximum.accumulate(np.where(head, np.arange(has.size), 0))
            before = np.zeros(has.size, np.int64)
            before[by_key] = taken - taken[first]
            r = rows[at[has]]
            room = table.dev_free[slot[has], r] - before >= want[has]
            ok[at[has[~room]]] = False
        return slot

    def _wins(self, table, templates, tmpl_of, sites, rows, before, intra) -> np.ndarray:
        """bool[k]: whether each unit's own ``rows`` (one per unit, already
        known to fit after ``before``, what earlier units of the batch take
        there) scores above any other row it could go to, by ``MARGIN``."""
        network = self.layer.state.fleet.network
        w = scores.WEIGHTS
        wins = np.zeros(rows.size, bool)
        link = network.leaf_rtt[sites]
        for k in np.unique(tmpl_of).tolist():
            mine = np.flatnonzero(tmpl_of == k)
            req = templates[k]
            dims, _, vec = scores.dims_of(req)
            if dims.size == 0:
                continue  # its packing score reads the row's use: not taken in a batch
            r = rows[mine]
            at = (dims[:, None], r)
            terms = (table.free[at] - before[dims[:, None], mine] - vec) * table.inverse_of(r)[dims]
            acc = -terms[0]
            for t in terms[1:]:
                acc -= t
            own = (w["fit"] * (100.0 + acc * (100.0 / dims.size)) + w["devices"] * scores.devices(table, req, r)
                   + w["near"] * _near(intra[mine]))
            far = self._far_from_devices(table, req, sites[mine])
            other = w["fit"] * 100.0 + np.maximum(w["near"] * _near(link[mine]),
                                                 w["devices"] * 100.0 + w["near"] * _near(link[mine] + far))
            wins[mine] = own > other + MARGIN
        return wins

    def _far_from_devices(self, table, req, sites: np.ndarray) -> np.ndarray:
        """float64[k]: for each of ``sites`` (leaves), a lower bound on the rtt
        from its parent to any site with a row the devices score gives 100
        for ``req`` (rows with no accelerator kind it leaves unused): the core
        distance (``Network.core_distance``) to those sites, a leaf among them
        counting as every core site with leaves. Kept until the core changes."""
        network = self.layer.state.fleet.network
        key = (id(table), table.n, scores._unused_kinds(req))
        got = self._far.get(key)
        if got is None:
            full = scores.devices(table, req, np.arange(table.n))
            got = self._far[key] = [np.unique(table.site[:table.n][full == 100.0]), None, None]
        devs = got[0]
        anchors = devs[~network.leaf[devs]]
        if network.leaf[devs].any():
            anchors = np.union1d(anchors, network.hubs())
        stamp = (network.core_version, anchors.tobytes())
        if got[1] != stamp:
            got[1], got[2] = stamp, network.core_distance(anchors)
            if len(self._far) > 64:
                self._far.clear()
                self._far[key] = got
        return got[2][network.core_id[np.where(network.leaf[sites], network.parent[sites], sites)]]

    def _choose(self, table, templates, tmpl_of, intra, rows, unit_of, ok, several, chosen) -> None:
        """``nearby.pick`` for the units whose site has several rows (each such
        site is named once in the batch): the best fitting row, ties drawn in
        row order, one draw per tied unit in queue order."""
        rng = self.layer.rng
        network = self.layer.state.fleet.network
        for u in several.tolist():  # few: sites with several rows are not a million cars
            at = (unit_of == u) & ok
            cand = rows[at]
            req = templates[tmpl_of[u]]
            rtt = np.full(cand.size, intra[u])
            value = scores.WEIGHTS["fit"] * scores.fit(table, req, cand) + nearby.bonus(
                table, req, cand, rtt, network, near=True)
            best = value.max()
            top = cand[value >= best - nearby.TIE]
            chosen[u] = int(top[rng.integers(top.size)]) if top.size > 1 else int(top[0])


def _by_site(sites: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The batch's units by site, in queue order within a site (a stable
    sort), and whether each of them (in that order) is its site's first."""
    by_site = np.argsort(sites, kind="stable")
    s_sorted = sites[by_site]
    head = np.ones(sites.size, bool)
    head[1:] = s_sorted[1:] != s_sorted[:-1]
    return by_site, head


def _near(rtt: np.ndarray) -> np.ndarray:
    """``scores.near`` of an rtt (a batch's units are bounded)."""
    return scores.near_of(rtt, True)


def _home(network, site, limit):
    """Whether a unit bound near ``site`` within ``limit`` may be one a batch
    takes: ``site`` is a leaf within its own bound (elementwise)."""
    out = network.leaf[site] & (network.intra_rtt_ms[site] <= limit)
    return bool(out) if np.ndim(out) == 0 else out


def site_rows_of(table, site: int) -> np.ndarray:
    """The rows of ``site`` in ``table`` (none when it has none)."""
    order, start = nearby.site_rows(table)
    return order[start[site]:start[site + 1]] if site < start.size - 1 else order[:0]


def fits(table, template: Request, rows: np.ndarray) -> bool:
    """Whether one of ``rows`` could take ``template`` now (what it is and what it has free)."""
    return bool(nearby.fits_now(table, template, rows).any())


def bound_alone(comp) -> bool:
    """Whether ``comp`` is bound near a site within a bound, with nothing that
    links it to other tasks or other sites (anti-affinity, a site selector, data)."""
    near = comp.near
    return (near is not None and near.max_rtt_ms is not None and comp.anti_affinity is None
            and comp.selector is None and comp.data_source is None and comp.data_sink is None)


def _alone_kind(unit):
    """The unit's one component when the unit is of the kind a batch takes:
    one task, bound near a site with a latency bound, nothing that links it to
    other tasks or other sites; else None."""
    if len(unit.tasks) != 1 or unit.couplings or unit.affinity_scope is not None:
        return None
    if unit.state_sites and unit.state_sites[0] >= 0:
        return None
    comp = unit.components[0]
    return comp if bound_alone(comp) else None


def _over_pooled(state, tenants: list[str], group: np.ndarray, owner_of: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """bool per unit of the batch: a unit of a cohort's members (``group``
    owners, of ``tenants``) past which the quota, with what the cohort lends,
    runs out, the units taken in the batch's order (each sees what the
    earlier ones drew from the pool)."""
    over = np.zeros(owner_of.size, bool)
    index = state.tenant_index
    used = state.used.copy()
    for k in np.flatnonzero(np.isin(owner_of, group)).tolist():
        tenant = tenants[int(np.flatnonzero(group == owner_of[k])[0])]
        if (demand[:, k] > state.cohorts.left(used, index[tenant])).any():
            over[k] = True  # (the batch stops at its first unit over)
            break
        used[index[tenant]] += demand[:, k]
    return over
