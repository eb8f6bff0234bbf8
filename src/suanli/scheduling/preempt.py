"""Preemption: the cheapest set of lower-priority work to evict so a unit fits.

Victims are whole units (a gang is evicted whole or not at all). The search
is a transaction on the unit's table: evict every candidate, check the unit
fits (if not, nothing is evicted); then give back, one by one, the victims
that are dearest to evict (highest priority, most state, most tasks) and keep
each one back if the unit still fits without it. What is left is a minimal
set that really makes room; nothing is changed until the caller evicts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from suanli.model.work import Component
from suanli.scheduling.business_layer import BusinessLayer, Unit
from suanli.scheduling.table import Allocation


@dataclass
class Victim:
    """A running unit that could be evicted."""

    key: int  # the caller's id for the unit
    tenant: str
    priority: int
    state_mib: int
    held: list[tuple[Component, Allocation]]  # what each of its tasks holds on the table
    rank: float = 0.0  # lower is cheaper at equal priority (reclaim: minus its tenant's weighted share)
    # how dear it is by priority, as the claimant sees it: (its standing, its
    # priority when it is the claimant's own tenant's work, else its standing)
    level: tuple[int, int] | None = None

    def cost(self) -> tuple:
        """Dearer to evict sorts later: priority (as ``level`` says), rank, then
        state to move, then tasks."""
        level = self.level if self.level is not None else (self.priority, self.priority)
        return (*level, self.rank, self.state_mib, len(self.held))


def plan_preemption(layer: BusinessLayer, unit: Unit, candidates: list[Victim]) -> list[Victim] | None:
    """The victims to evict for ``unit`` to fit, or None when evicting cannot help."""
    vcs = layer.state.vcs[unit.app.vc]
    table = vcs.table
    if not candidates:
        return None
    for v in candidates:
        _release(layer, v, table)
    if not fits_now(layer, unit):
        for v in candidates:
            _restore(layer, v, table)
        return None
    evicted = []
    for v in sorted(candidates, key=Victim.cost, reverse=True):
        _restore(layer, v, table)
        if not fits_now(layer, unit):
            _release(layer, v, table)
            evicted.append(v)
    for v in evicted:  # leave the table as it was: the caller evicts for real
        _restore(layer, v, table)
    return sorted(evicted, key=Victim.cost)


def _release(layer: BusinessLayer, v: Victim, table) -> None:
    for comp, a in v.held:
        table.give(a)
        layer.release(comp, int(table.node[a.row]))
        if table is layer.state.nodes:
            layer.state.tenant_used[v.tenant] -= a.vec


def _restore(layer: BusinessLayer, v: Victim, table) -> None:
    for comp, a in v.held:
        table.take(a)
        layer.acquire(comp, int(table.node[a.row]))
        if table is layer.state.nodes:
            layer.state.tenant_used[v.tenant] += a.vec


def fits_now(layer: BusinessLayer, unit: Unit) -> bool:
    """Would the unit fit now? Placed tentatively, then everything given back."""
    vcs = layer.state.vcs[unit.app.vc]
    reqs = layer.unit_requests(unit)
    result = layer.attempt(unit, vcs, reqs, allow_fewer=vcs.default)
    if not result.ok:
        return False
    for comp, a in zip(unit.components, result.allocations):
        vcs.table.give(a)
        layer.release(comp, int(vcs.table.node[a.row]))
    return True
