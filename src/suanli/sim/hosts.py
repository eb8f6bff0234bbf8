"""The global layer over time: virtual-cluster hosts that move and shrink.

- A host on a node that failed or is being drained moves: a replacement of
  the same group is placed (inside the group's coupling domain) and the old
  host goes once nothing runs on it, so the VC keeps its shape. An elastic
  group above its ``min`` just loses the host; it grows again on demand. A
  host with no replacement yet stays (out of service) and is tried again at
  every instant until one is found or its node returns.
- An elastic host idle for ``scaleDownAfter`` is removed, down to the
  group's ``min``, the longest idle first.
- A draining node's running work is moved off gracefully (services carry
  their state, jobs resume from their checkpoints), within each component's
  disruption budget and the migration limit, in waves.
"""

from __future__ import annotations

from collections import Counter
import numpy as np

from suanli.scheduling.state import Host, VCState
from suanli.sim.moves import apply_plan, drain_plans


class HostKeeper:
    def __init__(self, sim) -> None:
        self.sim = sim
        self.state = sim.state
        self.stranded: list[tuple[str, Host]] = []  # (vc, host) on a node out of service
        self.idle_since: dict[int, float] = {}  # id(host) -> when it last held nothing
        self.draining: dict[int, None] = {}  # nodes being drained, in order
        self.replaced: set[int] = set()  # id(host) of stranded hosts whose replacement is placed

    # ------------------------------------------------------------ nodes out of service

    def node_out(self, node: int) -> None:
        """A node failed or is draining: its explicit VCs' hosts must move."""
        for vcs in self.state.vcs.values():
            if not vcs.default:
                self.stranded += [(vcs.name, h) for h in vcs.hosts if h.node == node]

    def node_back(self, node: int) -> None:
        self.draining.pop(node, None)

    def before(self, t: float) -> None:
        """Before the scheduling pass: drain waves, then host moves (the
        replacements are there for the evicted work to land on)."""
        if self.draining:
            self._drain(t)
        if self.stranded:
            self._replace(t)

    def _replace(self, t: float) -> None:
        sim, state = self.sim, self.state
        world, nodes = state.world, state.nodes
        still = []
        for vc_name, h in self.stranded:
            vcs = state.vcs[vc_name]
            if h not in vcs.hosts or (nodes.enabled[h.node] and id(h) not in self.replaced):
                continue  # already gone, or its node is back in service before it moved
            group = next(g for g in world.vcs[vc_name].host_groups if g.name == h.group)
            if id(h) not in self.replaced and (not group.elastic or vcs.group_size(group.name) - 1 < group.min):
                sim.flush_hosts(t)
                # the host it replaces still counts against the tenant's quota: not for its replacement
                state.tenant_used[vcs.tenant] -= h.node_alloc.vec
                try:
                    got = sim.global_layer.place_hosts(world.vcs[vc_name], group, 1)
                finally:
                    state.tenant_used[vcs.tenant] += h.node_alloc.vec
                if isinstance(got, Counter):
                    still.append((vc_name, h))
                    continue
                sim.flush_hosts(t, reason=f"replaces {h.name} on {state.fleet.node_name(h.node)}")
                self.replaced.add(id(h))
            if not _empty(vcs, h):
                still.append((vc_name, h))  # draining: it goes once its work has moved
                continue
            sim.flush_hosts(t)
            state.remove_host(vcs, h)
            self.replaced.discard(id(h))
            sim.flush_hosts(t, reason=f"node {state.fleet.node_name(h.node)} out of service")
        self.stranded = still

    def _drain(self, t: float) -> None:
        for plan in drain_plans(self.sim):
            if self.sim.allowed(plan):
                apply_plan(self.sim, t, plan)

    # ------------------------------------------------------------ scale-down

    def after(self, t: float) -> None:
        """After the scheduling pass: remove elastic hosts idle long enough."""
        sim, state = self.sim, self.state
        for vc in state.world.vcs.values():
            vcs = state.vcs[vc.name]
            if vc.default or not vcs.hosts or not any(g.elastic for g in vc.host_groups):
                continue
            idle_rows = _idle_rows(vcs)
            for group in vc.host_groups:
                if not group.elastic:
                    continue
                hosts = [h for h in vcs.hosts if h.group == group.name]
                due = []
                for h in hosts:
                    if not idle_rows[h.row]:
                        self.idle_since.pop(id(h), None)
                        continue
                    since = self.idle_since.setdefault(id(h), t)
                    if t - since >= vc.scale_down_after_s:
                        due.append((since, h))
                    elif since == t:
                        sim.wake_at(t + vc.scale_down_after_s)
                for _, h in sorted(due, key=lambda d: d[0])[: max(len(hosts) - group.min, 0)]:
                    sim.flush_hosts(t)
                    state.remove_host(vcs, h)
                    self.idle_since.pop(id(h), None)
                    sim.flush_hosts(t, reason=f"idle for {vc.scale_down_after_s:g}s")


def _idle_rows(vcs: VCState) -> np.ndarray:
    t = vcs.table
    return ((t.view("free") == t.view("cap")).all(axis=0) & (t.view("dev_free") == t.view("dev_cap")).all(axis=0)
            & ~t.view("retired"))


def _empty(vcs: VCState, h: Host) -> bool:
    t = vcs.table
    return bool((t.free[:, h.row] == t.cap[:, h.row]).all() and (t.dev_free[:, h.row] == t.dev_cap[:, h.row]).all())

