"""The task ledger keeps its indexes together through every transition, and
what it hands out is read only."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from suanli.sim.ledger import RUNNING, STATUSES
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"


def check(sim: Simulation, seen: Counter) -> None:
    """Every index of the ledger agrees with the records, and the records with the placements."""
    ledger, view = sim.ledger, sim.view
    tasks, units = ledger.tasks, ledger.units
    counts = Counter(r.status for r in tasks.values())
    assert view.counts() == {s: counts.get(s, 0) for s in STATUSES}
    assert sum(view.counts().values()) == len(view) == len(tasks)
    with_run = {uid for uid, us in units.items() if us.run is not None}
    assert set(ledger.running) == with_run
    assert {run_id: uid for run_id, uid in enumerate(ledger.runs) if uid >= 0} == \
        {units[uid].run.run_id: uid for uid in with_run}
    assert all(ledger.unit_of_run(units[uid].run.run_id) == uid for uid in with_run)
    order = [ledger.running_seq[uid] for uid in ledger.running]
    assert order == sorted(order)  # the running dict is in start order
    assert list(view.running()) == view.in_start_order(reversed(list(ledger.running)))
    on = {task for task, rec in tasks.items() if rec.status == RUNNING}
    assert on == set(sim.state.placements)
    by_node = Counter(p.host.node for p in sim.state.placements.values())
    listed = {node: len(tasks) for node, tasks in sim.state.tasks_on_node.items() if len(tasks)}
    assert listed == dict(by_node)  # each placed task once on its node's list, and nothing else
    assert all(sim.state.placements[task].host.node == node
               for node in sim.state.tasks_on_node for task in sim.state.tasks_on(node))
    for app, uids in ledger.by_app.items():
        assert all(units[uid].unit.app.name == app for uid in uids)
        assert ledger.by_app.get(app) == uids  # (an application made per site: found from its name)
        seen["made per site"] += type(units[uids[0]].unit.app).__name__ == "Application" and \
            units[uids[0]].unit.app.template is not None
    assert {uid for uids in ledger.by_app.values() for uid in uids} == set(units)
    for uid, us in units.items():
        assert all(tasks[task].unit == uid for task in us.unit.tasks)
        if us.run is not None:
            for comp in us.unit.components:
                if comp.near is not None:
                    assert uid in view.bound_near(comp.near.site)
    seen["instants"] += 1
    seen["running"] += counts["running"] > 0
    seen["pending"] += counts["pending"] > 0
    seen["units"] = max(seen["units"], len(units))
    seen["forgotten"] += len(units) < seen["units"]


def moving_with_churn(tmp_path: Path) -> Path:
    """The moving-cars scenario with a second tenant, an edge node down and
    up, and the assist services deleted while some wait for room."""
    from test_metrics import MOVING
    from test_waiting import NODE_DOWN_UP, SECOND_TENANT

    up = "    - {at: 80m, kind: linkUp, between: [edge-1, cloud-0]}\n"
    text = MOVING.replace(up, up + NODE_DOWN_UP) % "true" + SECOND_TENANT
    marker = "  events:\n"
    path = tmp_path / "churn.yaml"
    path.write_text(text.replace(marker, marker + "    - {at: 150m, kind: delete, app: assist}\n"))
    return path


CITY = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"


@pytest.mark.parametrize("case", ["ai-hpc-mix", "churn", "city"])
def test_the_ledger_keeps_its_indexes_together(case, tmp_path):
    """At every instant of a run with jobs that finish, gangs, tasks lost, preemptions,
    migrations, a node down and up, and a deleted application, the ledger's
    counts equal a count over its records, its running units are those with
    a run, in start order, running tasks are those placed, and units bound
    near a site are found from it. The city: applications made per site
    that arrive, hand over and leave."""
    if case == "city":
        world, until = load_world([CITY], {"cars": "150"}), 3600.0
    else:
        path = EXAMPLES / "ai-hpc-mix.yaml" if case == "ai-hpc-mix" else moving_with_churn(tmp_path)
        world, until = load_world([path]), None if case == "ai-hpc-mix" else 3 * 3600.0
    seen: Counter = Counter()
    sim = Simulation(world, seed=5, until=until, on_instant=lambda t: check(sim, seen))
    sim.run()
    kinds = sim.events.kinds
    assert seen["instants"] > 10 and seen["running"], seen
    if case == "city":
        assert seen["made per site"] > 0 and kinds["handover"] > 0 and seen["forgotten"] > 0, (seen, kinds)
        return
    assert seen["pending"], seen
    if case == "ai-hpc-mix":
        assert kinds["finished"] > 0 and kinds["lost"] > 0, kinds
    else:
        assert kinds["migrated"] > 0 and kinds["preempted"] > 0 and kinds["deleted"] > 0 and kinds["lost"] > 0, kinds
        assert seen["forgotten"] > 0  # the deleted application's units were dropped


def test_what_the_ledger_hands_out_is_read_only():
    sim = Simulation(load_world([EXAMPLES / "ai-hpc-mix.yaml"]), seed=5, until=60.0)
    sim.run()
    view = sim.view
    assert len(view.tasks) > 0
    task = next(iter(view.tasks))
    with pytest.raises(TypeError):
        view.tasks[task] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        del view.units[next(iter(view.units))]  # type: ignore[attr-defined]
    assert not hasattr(view, "placed") and not hasattr(view, "start") and not hasattr(view, "ended")


@pytest.mark.parametrize("case", ["ai-hpc-mix", "churn"])
def test_waits_over_the_columns_are_those_record_by_record(case, tmp_path):
    """The summary's first waits and completion times, read over the ledger's
    columns, are those of a walk over its records (the walk that came before),
    value for value, by class and by tenant, censored counts too."""
    from collections import defaultdict

    from suanli.sim.metrics import _first_waits, _flat

    path = EXAMPLES / "ai-hpc-mix.yaml" if case == "ai-hpc-mix" else moving_with_churn(tmp_path)
    sim = Simulation(load_world([path]), seed=5, until=2 * 3600.0)
    sim.run()
    end = 2 * 3600.0
    ref = [defaultdict(list), defaultdict(list), Counter(), Counter(), defaultdict(list), defaultdict(list)]
    waits, tenant_waits, censored, tenant_censored, completion, tenant_completion = ref
    for rec in sim.view.tasks.values():
        if not rec.klass:
            continue
        got = None
        if rec.first_placed_at is not None:
            got = (rec.first_placed_at - rec.submitted_at, False)
        elif rec.status == "pending":
            got = (max(end, rec.submitted_at) - rec.submitted_at, True)
        elif rec.status == "failed":
            at = rec.ended_at if rec.ended_at is not None else end
            got = (max(at, rec.submitted_at) - rec.submitted_at, True)
        if got is not None:
            waits[rec.klass].append(got[0])
            tenant_waits[rec.tenant].append(got[0])
            censored[rec.klass] += got[1]
            tenant_censored[rec.tenant] += got[1]
        if rec.status == "finished" and rec.job and rec.ended_at is not None:
            completion[rec.klass].append(rec.ended_at - rec.submitted_at)
            tenant_completion[rec.tenant].append(rec.ended_at - rec.submitted_at)
    out = [defaultdict(list), defaultdict(list), Counter(), Counter(), defaultdict(list), defaultdict(list)]
    _first_waits(sim.view.columns(), end, *out)
    for mine, theirs in zip(out[:2] + out[4:], ref[:2] + ref[4:]):
        assert {k: sorted(_flat(v).tolist()) for k, v in mine.items()} == {k: sorted(v) for k, v in theirs.items()}
    assert +out[2] == +ref[2] and +out[3] == +ref[3]
    assert sum(map(len, ref[0].values())) > 10  # not vacuous
    if case == "churn":
        assert sum(ref[2].values()) > 0  # censored waits (pending at the end, or failed) were compared too
    else:
        assert sum(map(len, ref[4].values())) > 0  # and completion times


def test_the_fitted_hosts_summed_over_the_columns_are_those_host_by_host():
    """What an output of every host reads (``Placements.fitted_allocs``, one
    pass over the columns) is what each default VC's fitted host adds up from
    its node's tasks alone: vectors, device slots and shares; hosts with one
    task that has device shares and hosts with several are both there."""
    sim = Simulation(load_world([CITY], {"cars": "300"}), seed=3, until=3600.0)
    sim.run()
    state = sim.state
    fitted = state.placements.fitted_allocs()
    seen = Counter()
    for vc in state.vcs.values():
        if not vc.default:
            continue
        for host in vc.hosts:
            mine = state.placements.held_on(host.node, vc.name, host._none)
            theirs = fitted.get((vc.name, host.node))
            assert theirs is not None
            assert (theirs.row, theirs.vec.tolist(), theirs.slots, theirs.milli) == \
                (mine.row, mine.vec.tolist(), mine.slots, mine.milli)
            seen["hosts"] += 1
            seen["shared"] += bool(mine.slots)
            seen["several"] += bool(mine.slots) and int(fitted._one[np.searchsorted(
                fitted._hosts, state.placements._vc_at[vc.name] * fitted._span + host.node)]) < 0
    assert len(fitted) == seen["hosts"] > 100
    assert seen["shared"] > seen["several"] > 0  # both ways of keeping device shares are read
    assert fitted.get(("no-such-vc", 0)) is None
