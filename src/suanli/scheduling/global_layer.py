"""The global layer: places virtual-cluster hosts as slices of physical nodes.

It owns the tenant-level rules: quota, allowed sites, a host group's
selectors, coupling domain and latency bound, and that a VC's hosts stay
mutually reachable. Fixed groups (and elastic groups' ``min``) are placed up
front; elastic groups grow on demand from the business layer (``grow``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from suanli.model.work import HostGroup, VirtualCluster
from suanli.scheduling.domains import combine_domains, coupling_domain, couplings_domain
from suanli.scheduling.filters import Check
from suanli.scheduling.reasons import Domain, Why
from suanli.scheduling.request import Request, compile_request
from suanli.scheduling.select import Extras, place_group
from suanli.scheduling.statement import Statement
from suanli.scheduling.state import Host, PlacementState, VCState
from suanli.scheduling.table import Allocation, CandidateTable


@dataclass
class UnplacedHosts:
    vc: str
    group: str
    missing: int
    reasons: Counter


class QuotaAndReach(Extras):
    """Tenant quota and VC reachability, tracked through tentative placements."""

    def __init__(self, state: PlacementState, vc: VCState) -> None:
        self.state, self.vc = state, vc
        self.component = vc.component
        self.limited = bool(state.world.tenants[vc.tenant].quota)  # without a quota there is nothing to check
        self.pending = np.zeros_like(state.total) if self.limited else None  # tentative usage, read with a quota
        self._stmt: Statement | None = None  # the statement its tentative figures belong to

    def checks(self, req: Request, table: CandidateTable) -> list[Check]:
        out: list[Check] = []
        if self.limited:
            left = self.state.quota_left(self.vc.tenant, self.pending)
            if req.whole_node:  # the need is the row's whole capacity: check per row
                out.append((Why("quota", tenant=self.vc.tenant), (table.view("cap") <= left[:, None]).all(axis=0)))
            elif not (req.vec <= left).all():
                out.append((self.most(req, 1)[1], np.zeros(table.n, bool)))
        if self.component >= 0:
            mask = self.state.component_mask(table, self.component)
            if mask is not None:
                out.append((Why("reach", "hosts"), mask))
        return out

    def copies(self, req: Request, table: CandidateTable, row: int, k: int) -> int:
        """Copies after the next one that the quota leaves room for (the row is
        in the VC's component, or becomes it with the next copy)."""
        if not self.limited:
            return k
        left = (self.state.quota_left(self.vc.tenant, self.pending)).tolist()
        vec = req.plain[0]
        fit = min((left[d] // v for d, v in enumerate(vec) if v > 0), default=k + 1)
        return max(0, min(k, fit - 1))

    def most(self, req: Request, count: int) -> tuple[int, Why | None]:
        """Copies of ``req`` the tenant's quota leaves room for, of ``count``;
        when fewer, the quota's gap for all ``count``: "tenant t quota for gpu: 24 more needed"."""
        if not self.limited or req.whole_node:
            return count, None
        left = self.state.quota_left(self.vc.tenant, self.pending)
        vec = req.vec
        cols = np.flatnonzero(vec > 0)
        if not cols.size:
            return count, None
        fits = left[cols] // vec[cols]
        most = int(max(0, min(count, fits.min())))
        if most == count:
            return count, None
        col = int(cols[np.argmin(fits)])
        name = self.state.fleet.resources[col]
        state = self.state
        c = int(state.cohorts.of[state.tenant_index[self.vc.tenant]])
        figures = {"requested": int(count * vec[col]), "allowed": int(left[col]), "gap": int(count * vec[col] - left[col])}
        if c >= 0:  # (what the cohort lends counts in what is left)
            i = state.tenant_index[self.vc.tenant]
            within = state.used[i, col] + self.pending[col] + count * vec[col] <= state.cohorts.nominal[i, col]
            detail = "lent" if within else "cohort"  # within its own quota, which the cohort borrows now
            return most, Why("quota", detail, name, tenant=self.vc.tenant, cohort=state.cohorts.names[c], **figures)
        return most, Why("quota", "gap", name, tenant=self.vc.tenant, **figures)

    def note(self, req: Request, table: CandidateTable, a: Allocation, stmt: Statement) -> None:
        if self._stmt is not stmt:  # the first member of this try: its tentative figures go with it
            self._stmt = stmt
            stmt.did(self._reset)
            stmt.at_commit(self._reset)
        if self.limited:
            self.pending += a.vec
        if self.component < 0:
            self.component = int(self.state.fleet.network.component[table.site[a.row]])

    def _reset(self) -> None:
        """Nothing tentative any more: committed (now in the tenant's usage and the VC's hosts) or undone."""
        if self.limited:
            self.pending[:] = 0
        self.component = self.vc.component
        self._stmt = None


@dataclass
class GlobalLayer:
    state: PlacementState
    rng: np.random.Generator
    unplaced: list[UnplacedHosts] = field(default_factory=list)
    _requests: dict = field(default_factory=dict)

    @property
    def network(self):
        return self.state.fleet.network

    def forget_requests(self) -> None:
        """The network changed: host requests compiled against it are stale."""
        self._requests.clear()

    def host_request(self, vc: VirtualCluster, group: HostGroup) -> Request:
        key = (vc.name, group.name)
        if key not in self._requests:
            self._requests[key] = compile_request(
                self.state.fleet,
                group.resources,
                tenant=self.state.world.tenants[vc.tenant],
                arch=group.arch,
                near=group.near,
                selector=group.selector,
            )
        return self._requests[key]

    # ------------------------------------------------------------ fixed groups

    def place_initial(self) -> None:
        """Place every explicit VC's fixed groups and elastic minimums."""
        for vc in self.state.world.vcs.values():
            if vc.default:
                continue
            # coupled groups first: they have the fewest places to go
            for group in sorted(vc.host_groups, key=lambda g: g.coupling is None):
                if group.initial > 0:
                    got = self.place_hosts(vc, group, group.initial)
                    if isinstance(got, Counter):
                        self.unplaced.append(UnplacedHosts(vc.name, group.name, group.initial, got))

    # ------------------------------------------------------------ placing hosts

    def place_hosts(self, vc: VirtualCluster, group: HostGroup, count: int,
                    req: Request | None = None, levels: tuple[str, ...] = ()) -> list[Host] | Counter:
        """Place ``count`` hosts of ``group`` all-or-nothing; ``req`` overrides the
        host request (growth for a task), ``levels`` add couplings for them."""
        vcs = self.state.vcs[vc.name]
        req = req or self.host_request(vc, group)
        table = self.state.nodes
        domain, levels = couplings_domain(table, self.network, (group.coupling, *levels))
        kind = Domain(levels)
        restrict = None
        held = vcs.group_domain.get(group.name)
        if held is not None:  # a coupled group grows inside the domain it already holds
            restrict = coupling_domain(table, self.network, group.coupling) == held
        if vcs.component < 0:
            comp = self.network.component[table.view("site")].astype(np.int64)
            domain = comp if domain is None else combine_domains(domain, comp)
            kind = Domain(levels, reachable=True)
        result = place_group(table, [req] * count, self.network, self.rng, domain=domain,
                             kind=kind, extras=QuotaAndReach(self.state, vcs), restrict=restrict)
        if not result.ok:
            return result.reasons
        hosts = [self.state.add_host(vcs, group.name, a) for a in result.allocations]
        if group.coupling is not None and group.name not in vcs.group_domain:
            vcs.group_domain[group.name] = int(coupling_domain(table, self.network, group.coupling)[result.allocations[0].row])
        return hosts

    # ------------------------------------------------------------ elastic growth

    def grow(self, vc: VirtualCluster, task: Request, members: int,
             levels: tuple[str, ...] = ()) -> tuple[list[Host], Counter]:
        """Grow one elastic group of ``vc`` by enough hosts for ``members`` copies of
        ``task``, inside one domain of each of ``levels``. Returns the new hosts, or
        the reasons no group could grow."""
        vcs = self.state.vcs[vc.name]
        reasons: Counter = Counter()
        for group in vc.host_groups:
            if not group.elastic:
                continue
            host_req = self.host_request(vc, group)
            per_host, why = copies_per_host(host_req, task, group.name)
            if per_host == 0:
                reasons[why] += 1
                continue
            need = math.ceil(members / per_host)
            room = group.limit - vcs.group_size(group.name)
            if need > room:
                reasons[Why("growth", "limit", group=group.name, need=need, room=room, max=group.limit)] += 1
                continue
            got = self.place_hosts(vc, group, need, _narrow(host_req, task), levels)
            if isinstance(got, list):
                return got, Counter()
            reasons.update({Why("growth", "placing", group=group.name, cause=k): v for k, v in got.items()})
        return [], reasons

    def shrink(self, vc: VirtualCluster, hosts: list[Host]) -> None:
        vcs = self.state.vcs[vc.name]
        for h in reversed(hosts):
            self.state.remove_host(vcs, h)
        for group in {h.group for h in hosts}:
            if group is not None and vcs.group_size(group) == 0:
                vcs.group_domain.pop(group, None)


def copies_per_host(host: Request, task: Request, group: str) -> tuple[int, Why | None]:
    """How many copies of ``task`` one host of ``group``'s shape holds (a
    whole-node host: at least one), and why none when none."""
    if host.whole_node:
        return 1, None
    for col, what in ((0, "cpu"), (1, "memory")):
        if host.vec[col] < task.vec[col]:
            return 0, Why("growth", "too-little", what, group=group)
    for need in task.accels:
        match = [h for h in host.accels if h.kind == need.kind]
        if not match:
            return 0, Why("growth", "no-kind", need.kind_name, group=group)
        if host.vec[2 + need.kind] < need.milli:
            return 0, Why("growth", "too-little", need.kind_name, group=group)
        if need.models is not None and match[0].models is not None:
            if not np.intersect1d(need.models, match[0].models).size:
                return 0, Why("growth", "models", need.kind_name, group=group)
    dims = task.vec > 0
    ratios = host.vec[dims] // task.vec[dims]
    return (int(ratios.min()) if ratios.size else 1), None


def _narrow(host: Request, task: Request) -> Request:
    """The host request, restricted to where the task could run on it."""
    accels = []
    for h in host.accels:
        t = next((n for n in task.accels if n.kind == h.kind), None)
        models = h.models
        if t is not None and t.models is not None:
            models = t.models if models is None else np.intersect1d(models, t.models).astype(np.int16)
        accels.append(replace(h, models=models))
    arch = task.arch if host.arch is None else (host.arch if task.arch is None else np.intersect1d(host.arch, task.arch))
    return Request(
        # a whole-node host is any node that can hold the task; others keep their shape
        vec=task.vec.copy() if host.whole_node else host.vec,
        accels=tuple(accels) if not host.whole_node else tuple(task.accels),
        whole_node=host.whole_node,
        site_terms=host.site_terms + task.site_terms,
        group_checks=host.group_checks,
        arch=arch,
        near_site=task.near_site if task.near_site >= 0 else host.near_site,
        near_max_ms=task.near_max_ms if task.near_site >= 0 else host.near_max_ms,
        data_sites=task.data_sites,
        network=task.network if task.network is not None else host.network,
    )
