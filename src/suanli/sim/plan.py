"""Dry run: the state at a moment, and the moves the rescheduler would make next.

``dry_run(sim)`` is called on a simulation stopped at time T. It lists what
runs where and what waits (with why, the binding constraint first), then
every mechanism's plans in one shape (``moves.plan_json``): drains of the
nodes being drained, then for each waiting unit, in the order the scheduler
tries them, preemption, fair-share reclaim and defragmentation, then return
moves. Each plan has its cost and, where the mechanism weighs one, its gain;
voluntary plans that hysteresis, a disruption budget or the migration limit
hold back are listed with ``held`` (what, and the time they may go when it is
known). Plans are each against the state at T (one plan's moves are not
assumed made for the next, but counted against budgets and the limit; the
return moves that would be made, against the room they take too).
Nothing in the simulation is changed: not its tables, its watches, its
instants to come, nor its random draws.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from suanli.phrases import reasons_json, why_json
from suanli.sim.defrag import needs_whole_devices
from suanli.sim.moves import defrag_plan, drain_plans, lent_plan, plan_json, preempt_plan, reclaim_plan, return_plans
from suanli.sim.rescheduler import FAIR_MARGIN


def dry_run(sim, at: float) -> dict[str, Any]:
    fleet = sim.world.fleet
    running = Counter(fleet.site_of(p.host.node).name for p in sim.state.placements.values())
    pending = list(sim.view.pending())
    draws = sim.rng.bit_generator.state
    sim.dry = True  # no instants asked for
    try:
        plans = _plans(sim, at, pending)
        moves = [plan_json(sim, p) for p in plans]  # (shown even when the scenario turns rescheduling off)
    finally:
        sim.dry = False
        sim.rng.bit_generator.state = draws
    return {
        "at_s": at,
        "running_by_site": dict(sorted(running.items())),
        "pending": [{"task": r.task, "reasons": reasons_json(r.reasons), "why": why_json(r.reasons)}  # as simulate shows them
                    for r in pending],
        "moves": moves,
    }


def _plans(sim, at: float, pending) -> list:
    plans = list(drain_plans(sim, dry=True))
    waiting = sorted({sim.view.units[r.unit].unit.seq: sim.view.units[r.unit].unit
                      for r in pending if r.unit >= 0}.items())
    standing = sim.business.standing
    share = sim.state.share_by_tenant()
    top = max(share.values(), default=0.0)
    for _, unit in sorted(waiting, key=lambda kv: (-standing(kv[1]), -kv[1].priority, kv[0])):
        plans.append(lent_plan(sim, unit))
        plans.append(preempt_plan(sim, unit))
        if share.get(unit.tenant, 0.0) * (1 + FAIR_MARGIN) < top:
            plans.append(reclaim_plan(sim, unit))
        if needs_whole_devices(unit):
            plans.append(defrag_plan(sim, unit))
    plans.extend(return_plans(sim, at, dry=True))
    return [p for p in plans if p is not None]
