"""The global layer's state in a simulation: the fleet, its network and its tenancy.

``GlobalState`` owns what is shared by every tenant: the placement tables of
the nodes (``state``), the global layer that grants and revokes hosts, the
keeper of hosts (replacements, drains, idle scale-down), the devices
offline and the links taken down, the capacity devices claim for their own
work, and the nodes an executor reported lost. It handles what happens to
the fleet (nodes down, up, drained, cordoned, removed; links down and up;
handovers; devices offline, online or busy; the fleet grown; tenants and
virtual clusters changed) and tells the shard what that means for its work,
through its narrow interface: ``stop_tasks``, ``paths_changed``,
``wake_all``, ``pending.wake``. Work that a claim or a broken bound must
move goes through the rescheduler.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from suanli.engine.loop import EventLoop
from suanli.executors.base import Executor, NodeFound, NodeLost
from suanli.model.work import World
from suanli.output import resources_json
from suanli.scheduling.filters import feasible, fits_row
from suanli.scheduling.global_layer import GlobalLayer
from suanli.scheduling.request import compile_request
from suanli.scheduling.select import allocation, partial_allocation
from suanli.scheduling.state import PlacementState
from suanli.scheduling.table import Allocation
from suanli.spec.build import resources_of
from suanli.spec.schema import NodeDownEvent, NodeUpEvent
from suanli.sim.logbook import Logbook
from suanli.sim.loop_events import ClaimEnded

DEFAULT_RTT_MS, DEFAULT_BANDWIDTH = 2.0, 100.0  # a handover of a device that had no link, unless given


class GlobalState:
    def __init__(self, world: World, state: PlacementState, global_layer: GlobalLayer, loop: EventLoop,
                 book: Logbook, wake_at: Callable[[float], None]) -> None:
        self.world, self.state, self.global_layer, self.loop = world, state, global_layer, loop
        self.log, self.where, self.flush_hosts = book.log, book.where, book.flush_hosts
        self.wake_at = wake_at
        self.offline: dict[int, tuple] = {}  # device site -> its links while it is offline
        self.down_links: set[tuple[int, int]] = set()  # site pairs whose links a linkDown took down
        self.claims: dict[int, Allocation] = {}  # deviceBusy: capacity taken outside the scheduler
        self.lost_nodes: set[str] = set()  # nodes an executor reported gone (cordoned or drained ones too)
        # set when the simulation is put together:
        self.shard: Any = None
        self.resched: Any = None
        self.hosts: Any = None  # the keeper of hosts (``hosts.HostKeeper``)
        self.recorder: Any = None
        self.executor: Executor | None = None

    def node_lost(self, t: float, ev: NodeLost) -> None:
        """The executor says a node's machine is gone: as ``nodeDown``, with its reason."""
        if ev.node in self.lost_nodes:
            return
        self.lost_nodes.add(ev.node)
        self.log(t, "nodeLost", node=ev.node, reason=ev.reason)
        self.event(t, NodeDownEvent.model_construct(at=t, kind="nodeDown", node=ev.node))

    def node_found(self, t: float, ev: NodeFound) -> None:
        """A lost node's machine is back: as ``nodeUp``, with its reason."""
        if ev.node not in self.lost_nodes:
            return
        self.lost_nodes.discard(ev.node)
        self.log(t, "nodeFound", node=ev.node, reason=ev.reason)
        self.event(t, NodeUpEvent.model_construct(at=t, kind="nodeUp", node=ev.node))

    def event(self, t: float, ev: Any) -> None:
        """A scenario event about the fleet: nodes, links, handovers, devices."""
        fleet = self.world.fleet
        if ev.kind in ("nodeDown", "nodeUp", "nodeDrain", "nodeCordon"):
            node = fleet.node_by_name(ev.node)
            self.log(t, ev.kind, node=ev.node)
            tasks = self.state.set_node_enabled(node, ev.kind == "nodeUp")
            if ev.kind == "nodeUp":
                self.hosts.node_back(node)
                self.shard.pending.wake(int(fleet.node_site[node]))
                return
            if ev.kind == "nodeCordon":
                return  # what runs there stays, hosts included
            if ev.kind == "nodeDown":
                self.executor.node_down(node, t)
                self.shard.stop_tasks(t, tasks, node)
            else:
                self.hosts.draining[node] = None  # its work moves off in waves (hosts.before)
            self.hosts.node_out(node)
        elif ev.kind in ("linkDown", "linkUp"):
            a, b = (fleet.site_index[s] for s in ev.between)
            (fleet.network.link_down if ev.kind == "linkDown" else fleet.network.link_up)(a, b)  # in place
            (self.down_links.add if ev.kind == "linkDown" else self.down_links.discard)((min(a, b), max(a, b)))
            self.log(t, ev.kind, between=list(ev.between))
            self.network_changed(t)
        elif ev.kind == "handover":
            site = fleet.site_index[ev.site]
            # its links now, or those it had when it went offline
            _, rtt, bw = self.offline[site] if site in self.offline else fleet.network.links_of(site)[:3]
            r = ev.rtt_ms if ev.rtt_ms is not None else (float(rtt[0]) if rtt.size else DEFAULT_RTT_MS)
            w = ev.bandwidth if ev.bandwidth is not None else (float(bw[0]) if bw.size else DEFAULT_BANDWIDTH)
            to = [fleet.site_index[x] for x in ev.to]
            own = self._own_paths(site, rtt.size, len(to))
            reach = self._reach(site, own)
            if site in self.offline:  # it comes back where it moved to
                self.offline[site] = (np.array(to), np.full(len(to), r), np.full(len(to), w))
            else:
                fleet.network.attach(site, to, [r] * len(to), [w] * len(to))
            self.log(t, "handover", site=ev.site, to=list(ev.to))
            self.network_changed(t, own, self._reach(site, own, reach, after=True))
        elif ev.kind in ("deviceOffline", "deviceOnline"):
            self.device_presence(t, ev)
        elif ev.kind == "deviceBusy":
            self.device_busy(t, ev)

    def network_changed(self, t: float, sites: set[int] | None = None, reach: set[int] | None = None) -> None:
        """Paths changed (at ``sites`` only, when given): requests compiled
        against the old ones go, and running work whose bound broke moves, or
        waits. ``reach``: with ``sites``, the sites within the widest bound of
        them, before or after (``_reach``): work of others bound near one of
        those may now go there, or no longer."""
        own = sites is not None and self._private(sites)
        self.global_layer.forget_requests()
        self.state.forget_network(sites)
        self.shard.paths_changed(sites, own, None if own else reach)
        self.resched.bounds_broken(t, sites)

    REACH_MOST = 4096  # sites: beyond, a change looks at everything again (as many requests as that)

    def _reach(self, site: int, own: set[int] | None, before: set[int] | None = None, *,
               after: bool = False) -> set[int] | None:
        """The sites within the widest ``near`` bound compiled so far of
        ``site`` (a site that carries no path between others, ``own``), with
        ``before`` (the same, read before its links changed): the near sites
        of whatever could go there. None where that is not known to be few:
        a path change anywhere, a bound of no rtt, or too many sites, now or
        (``after``) before."""
        if own is None or self._reach_off or (after and before is None):
            return None
        if self._private(own):
            return None  # a private device's move touches its own work only (``network_changed``)
        bound = self.shard.business.widest_near
        if bound == np.inf:
            return None
        got, _ = self.world.fleet.network.within(site, bound)
        if got.size + (len(before) if before else 0) > self.REACH_MOST:
            return None
        return set(got.tolist()) | (before or set())

    def _private(self, sites: set[int]) -> bool:
        """Whether ``sites`` are all private devices' own (they run only the work bound near them)."""
        private = self.world.fleet.site_table.private
        return private is not None and all(private[s] for s in sites)

    _reach_off = False  # (a test's switch: every change by a site of others looks at everything again)

    def device_presence(self, t: float, ev: Any) -> None:
        """A device goes offline (its nodes go down, its tasks there are lost
        and wait again by their restart policy, and it is unreachable) or
        comes back (its links and nodes return)."""
        fleet = self.world.fleet
        site = fleet.site_index[ev.site]
        going = ev.kind == "deviceOffline"
        if going == (site in self.offline):
            return  # already so
        nodes = fleet.nodes_of(site).tolist()
        self.log(t, ev.kind, site=ev.site)
        network = fleet.network
        links = network.links_of(site)[:3]
        own = self._own_paths(site, len(links[0]) if going else len(self.offline[site][0]))
        reach = self._reach(site, own)
        if going:
            self.offline[site] = links
            _cut_off(network, site, links)
            for node in nodes:
                tasks = self.state.set_node_enabled(node, False)
                self.executor.node_down(node, t)
                self.shard.stop_tasks(t, tasks, node)
                self.hosts.node_out(node)
        else:
            links = self.offline.pop(site)
            back = network.leaf[site] and len(links[0]) == 1 and int(network.parent[site]) == int(links[0][0]) \
                and network.links_of(site)[1][0] == links[1][0] and network.links_of(site)[2][0] == links[2][0]
            if back:  # the link it had, up again
                network.link_up(site, int(links[0][0]))
            else:  # it moved while away, or had several links
                network.attach(site, *links)
            for node in nodes:
                self.state.set_node_enabled(node, True)
                self.hosts.node_back(node)
            self.shard.pending.wake(site)
        self.network_changed(t, own, self._reach(site, own, reach, after=True))

    def _own_paths(self, site: int, *links: int) -> set[int] | None:
        """``{site}`` when a change of its links (``links``: how many it had,
        has) changes no path but its own, so that only work there or bound to
        it is looked at again: it carries no path between other sites (one
        link, or a site that relays nothing, as a device); else None (any
        path may have changed)."""
        if max(links) <= 1 or not self.world.fleet.network.transit[site]:
            return {site}
        return None

    def grow_fleet(self, t: float, fleet: Any, paths: bool) -> None:
        """Run on ``fleet`` from now: the fleet this one grew (``Fleet(base=the
        current one)``, its nodes numbered as before), with nodes, sites or
        links added, or facts of sites changed. ``paths``: sites or links
        changed, so the network is made again (links taken down and devices
        offline stay so); otherwise the current network goes on as it is."""
        old = self.world.fleet
        if paths:
            network = fleet.network
            for a, b in self.down_links:
                network.link_down(a, b)
            for site, links in self.offline.items():
                _cut_off(network, site, links)
        else:
            fleet.network = old.network
        self.state.adopt(fleet)
        self.recorder.grow(fleet)
        self.shard.business.grow()
        added = getattr(self.executor, "nodes_added", None)  # a real executor finds what stands for them
        if added is not None and fleet.n_nodes > old.n_nodes:
            added(range(old.n_nodes, fleet.n_nodes))
        self.global_layer.forget_requests()
        if paths:
            self.network_changed(t)
        else:
            self.state.forget_network(None)
        self.shard.wake_all()  # what waited may fit on a new node
        self.wake_at(t)

    def set_tenancy(self, t: float, tenants: Mapping[str, Any], vcs: Mapping[str, Any]) -> list[str]:
        """Tenants and virtual clusters as given, from now (a live server's,
        changed through its API). A tenant's weight, quota and allowed sites
        hold for placements from now on: work above a lowered quota keeps
        running, and is reclaimed only as the rescheduling policy reclaims.
        A removed tenant or VC must have no work left (its applications were
        deleted first). A VC's groups take their new bounds: hosts are placed
        up to a fixed count or a minimum, idle ones removed down to it or to
        a maximum; a group removed or given another shape loses its idle
        hosts. Returns what could not be done (hosts that could not be placed)."""
        state, world, out = self.state, self.world, []
        for name in [n for n in world.vcs if n not in vcs]:
            self._drop_vc(t, name)
        for name in [n for n in world.tenants if n not in tenants]:
            del world.tenants[name]
            i = state.tenant_index[name]
            state.quota_table[i] = 0  # a row stays (its number is in use); it takes nothing more
            state._cohorts()  # (and it lends nothing more)
        for tenant in tenants.values():
            if world.tenants.get(tenant.name) != tenant:
                state.set_tenant(tenant)
        for vc in vcs.values():
            old = world.vcs.get(vc.name)
            if old == vc:
                continue
            vcs_state = state.vcs.get(vc.name) or state.add_vc(vc)
            world.vcs[vc.name] = vc
            if vc.default:
                continue
            for h in list(vcs_state.hosts):  # a group gone or reshaped: its hosts are no longer the VC's kind
                if _shape(vc, h.group) is None or _shape(old, h.group) != _shape(vc, h.group):
                    self._remove_idle(t, vcs_state, h)
            for g in vc.host_groups:
                mine = [h for h in vcs_state.hosts if h.group == g.name]
                excess = len(mine) - g.limit  # idle hosts go, the newest first; busy ones stay
                for h in reversed(mine):
                    if excess > 0 and self._remove_idle(t, vcs_state, h):
                        excess -= 1
                short = g.initial - len([h for h in vcs_state.hosts if h.group == g.name])
                if short > 0:
                    self.global_layer.forget_requests()
                    got = self.global_layer.place_hosts(vc, g, short)
                    if not isinstance(got, list):
                        out.append(f"virtual cluster {vc.name}: {short} hosts of group {g.name} could not be placed")
        self.global_layer.forget_requests()
        self.shard.business.forget_requests()
        self.flush_hosts(t)
        self.shard.wake_all()
        self.wake_at(t)
        return out

    def _remove_idle(self, t: float, vcs_state: Any, host: Any) -> bool:
        """Remove the host if nothing runs on it; whether it was."""
        if host in vcs_state.hosts and _host_idle(vcs_state, host):
            self.flush_hosts(t)
            self.state.remove_host(vcs_state, host)
            self.flush_hosts(t, reason="its virtual cluster changed")
            return True
        return False

    def _drop_vc(self, t: float, name: str) -> None:
        vcs_state = self.state.vcs.get(name)
        if vcs_state is not None and not vcs_state.default:
            for h in list(vcs_state.hosts):
                self._remove_idle(t, vcs_state, h)
            if not vcs_state.hosts:
                del self.state.vcs[name]
        elif vcs_state is not None:
            del self.state.vcs[name]
        self.world.vcs.pop(name, None)

    def retire_node(self, t: float, node: int, why: str) -> None:
        """A node leaves the fleet for good: its work stops as on a failed node
        (and waits again by its restart policy), its explicit VCs' hosts move,
        and it is never a candidate again."""
        fleet = self.world.fleet
        if fleet.retired[node]:
            return
        name = fleet.node_name(node)
        self.log(t, "nodeRemoved", node=name, reason=why)
        tasks = self.state.set_node_enabled(node, False)
        self.executor.node_down(node, t)
        self.shard.stop_tasks(t, tasks, node)
        self.hosts.node_out(node)
        self.hosts.draining.pop(node, None)
        self.lost_nodes.discard(name)
        self.state.retire_node(node)
        self.recorder.grow(fleet)
        self.wake_at(t)

    def device_busy(self, t: float, ev: Any) -> None:
        """Local work outside the scheduler claims capacity on a node (the site's
        node with the most room when a site is named). The claim comes first:
        when what is free is short, the work on that node that stands in the
        way moves off, cheapest first (lowest standing and priority, least state, fewest
        tasks), until the claim fits. What cannot be freed (capacity held by
        an explicit VC's host) is reported as ``short``."""
        fleet, nodes = self.world.fleet, self.state.nodes
        req = compile_request(fleet, resources_of(ev.resources), local=True)  # (a private device's too)
        if ev.node is not None:
            rows = np.array([fleet.node_by_name(ev.node)])
        else:
            rows = np.flatnonzero(nodes.view("site") == fleet.site_index[ev.site])
        fits = rows[feasible(nodes, req)[rows]]
        row = int(fits[0]) if fits.size else int(rows[np.argmax(nodes.free[0, rows])])
        if not fits.size:
            self.resched.claim_room(t, req, row)
        full = fits_row(nodes, req, row)
        a = allocation(nodes, req, row) if full else partial_allocation(nodes, req, row)
        nodes.take(a)
        claim = len(self.claims)
        self.claims[claim] = a
        short = {k: int(v) for k, v in zip(fleet.resource_keys, req.vec - a.vec) if v > 0}
        self.log(t, "deviceBusy", **self.where(row), claimed=resources_json(self.state, a.vec),
                  **({"short": short} if short else {}))
        if ev.duration is not None:
            self.loop.schedule(t + ev.duration, ClaimEnded(claim))

    def claim_ended(self, t: float, claim: int) -> None:
        a = self.claims.pop(claim)
        self.state.nodes.give(a)
        self.log(t, "deviceFree", **self.where(a.row), freed=resources_json(self.state, a.vec))


def _shape(vc: Any, group: str | None) -> tuple | None:
    """What a VC's host group's hosts are like (bounds apart)."""
    g = next((g for g in vc.host_groups if g.name == group), None) if vc is not None else None
    return None if g is None else (g.resources, g.coupling, g.selector, g.near, g.arch)


def _host_idle(vcs_state: Any, host: Any) -> bool:
    t = vcs_state.table
    r = host.row
    return bool((t.free[:, r] == t.cap[:, r]).all() and (t.dev_free[:, r] == t.dev_cap[:, r]).all())


def _cut_off(network: Any, site: int, links: tuple) -> None:
    """A device's site leaves the network (offline): its one link goes down,
    the core staying as it is; with several, it is detached."""
    if network.leaf[site]:
        network.link_down(site, int(links[0][0]))
    else:
        network.attach(site, [], [], [])
