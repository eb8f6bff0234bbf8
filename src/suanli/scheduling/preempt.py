"""Preemption: the cheapest set of lower-priority work to evict so a unit fits.

Victims are whole units (a gang is evicted whole or not at all). The search
is a transaction on the unit's table: evict every candidate, check the unit
fits (if not, nothing is evicted); then give back, one by one, the victims
that are dearest to evict (highest priority; then one that would wait, having
no room elsewhere now, before one that would start elsewhere at once; most
state; most tasks) and keep each one back if the unit still fits without it.
What is left is a minimal set that really makes room; nothing is changed
until the caller evicts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from suanli.model.work import Component
from suanli.scheduling.business_layer import BusinessLayer, Unit
from suanli.scheduling.statement import Statement
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
    waits: bool = False  # evicted, it would wait: no other place has room for it now

    def cost(self) -> tuple:
        """Dearer to evict sorts later: priority (as ``level`` says), rank, then
        whether it would wait (one that starts elsewhere at once costs less),
        then state to move, then tasks."""
        level = self.level if self.level is not None else (self.priority, self.priority)
        return (*level, self.rank, self.waits, self.state_mib, len(self.held))


def plan_preemption(layer: BusinessLayer, unit: Unit, candidates: list[Victim]) -> list[Victim] | None:
    """The victims to evict for ``unit`` to fit, or None when evicting cannot help.
    A probe: every candidate leaves, then each, dearest first, comes back if
    the unit still fits without it; the table is left as it was."""
    vcs = layer.state.vcs[unit.app.vc]
    table = vcs.table
    if not candidates:
        return None
    with Statement() as probe:
        for v in candidates:
            _release(layer, v, table, probe)
        if not fits_now(layer, unit):
            return None
        evicted = []
        for v in sorted(candidates, key=Victim.cost, reverse=True):
            with Statement(probe) as back:
                _restore(layer, v, table, back)
                if fits_now(layer, unit):
                    back.commit()  # it stays: the unit fits with it
                    continue
            evicted.append(v)
    return sorted(evicted, key=Victim.cost)


def _release(layer: BusinessLayer, v: Victim, table, stmt: Statement) -> None:
    """As if victim ``v`` had left ``table`` (recorded in ``stmt``)."""
    for comp, a in v.held:
        stmt.give(table, (a,))
        node = int(table.node[a.row])
        layer.release(comp, node)
        stmt.did(lambda comp=comp, node=node: layer.acquire(comp, node))
        if table is layer.state.nodes:
            layer.state.charge(v.tenant, -a.vec, stmt)


def _restore(layer: BusinessLayer, v: Victim, table, stmt: Statement) -> None:
    """Victim ``v`` back where it was (recorded in ``stmt``)."""
    for comp, a in v.held:
        stmt.take(table, (a,))
        node = int(table.node[a.row])
        layer.acquire(comp, node)
        stmt.did(lambda comp=comp, node=node: layer.release(comp, node))
        if table is layer.state.nodes:
            layer.state.charge(v.tenant, a.vec, stmt)


def fits_now(layer: BusinessLayer, unit: Unit) -> bool:
    """Would the unit fit now? Placed tentatively, then everything undone."""
    vcs = layer.state.vcs[unit.app.vc]
    reqs = layer.unit_requests(unit)
    with Statement() as probe:
        return layer.attempt(unit, vcs, reqs, allow_fewer=vcs.default, stmt=probe).ok
