"""Dry run: the state at a moment, and the moves the rescheduler would make next.

``dry_run(sim)`` is called on a simulation stopped at time T. It lists what
runs where and what waits, then the moves that would come next, each with its
cost and gain, without making any: return moves (services closer to their
``near`` site), defragmentation (fractional tasks moved so a waiting
whole-device task fits) and preemptions (which units a waiting unit outranks
and would evict). Nothing in the simulation is changed by it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from suanli.output import sorted_reasons
from suanli.scheduling.preempt import plan_preemption
from suanli.scheduling.reasons import why_json
from suanli.sim.defrag import needs_whole_devices, plan_defrag
from suanli.sim.rescheduler import plan_returns, victims


def dry_run(sim, at: float) -> dict[str, Any]:
    fleet = sim.world.fleet
    running = Counter(fleet.site_of(p.host.node).name for p in sim.state.placements.values())
    pending = list(sim.view.pending())
    moves: list[dict[str, Any]] = []
    # shown even when the scenario turns rescheduling off: this is what it would do
    policy = sim.policy
    for mv in plan_returns(sim, at, policy.hysteresis, policy.max_concurrent_migrations - len(sim.migrating)):
        p = sim.state.placements[mv.task]
        table = sim.state.vcs[p.vc].table
        moves.append({"kind": "return", "task": mv.task, "from": fleet.node_name(p.host.node),
                      "to": fleet.node_name(int(table.node[mv.to_row])),
                      "gain": round(mv.gain, 3), "cost_downtime_s": round(mv.downtime_s, 6)})
    waiting = sorted({sim.view.units[r.unit].unit.seq: sim.view.units[r.unit].unit for r in pending if r.unit >= 0}.items())
    standing = sim.business.standing
    for _, unit in sorted(waiting, key=lambda kv: (-standing(kv[1]), -kv[1].priority, kv[0])):
        gather = plan_defrag(sim, unit) if needs_whole_devices(unit) else None
        if gather:
            moves.append({"kind": "defragment", "for": unit.tasks,
                          "move": [{"task": task, "from": fleet.node_name(sim.state.placements[task].host.node),
                                    "to": fleet.node_name(int(sim.state.vcs[unit.app.vc].table.node[a.row])),
                                    "devices": list(a.slots)} for task, a in gather]})
        plan = plan_preemption(sim.business, unit, victims(sim, unit))
        if plan:
            moves.append({"kind": "preempt", "for": unit.tasks, "priority": unit.priority,
                          "evict": [t for v in plan for t in sim.view.units[v.key].run.tasks],
                          "cost": {"units": len(plan), "max_priority": max(v.priority for v in plan),
                                   "state_mib": sum(v.state_mib for v in plan)}})
    return {
        "at_s": at,
        "running_by_site": dict(sorted(running.items())),
        "pending": [{"task": r.task, "reasons": sorted_reasons(r.reasons), "why": why_json(r.reasons)}  # as simulate shows them
                    for r in pending],
        "moves": moves,
    }
