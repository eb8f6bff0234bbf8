"""Every rescheduling mechanism plans in one shape (``sim.moves``), and the dry
run shows them all, held-back moves included, without changing the run."""

from __future__ import annotations

import json

import pytest
import yaml

from builders import app, component, node_group, site
from suanli.sim.plan import dry_run
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

from test_dynamics import scenario
from conftest import EXAMPLES as examples


def _drain_world(tmp_path, restart="5s"):
    """Four stateless replicas packed on the smaller node of two; that node is drained at 10m."""
    web = component("web", replicas=4, cpu=1)
    sites = [site("s", groups=[node_group("a", count=1, cpu=8), node_group("b", count=1, cpu=4)])]
    return scenario(tmp_path, sites, [app("w", components=[web], priority=1)],
                    events=[{"at": "10m", "kind": "nodeDrain", "node": "s/b-0"}],
                    policy={"disruptionBudget": "25%", "restartTime": restart}, until="30m")


def _run_to(path, t):
    sim = Simulation(load_world([str(path)]), until=t)
    return sim, sim.run()


def test_every_plan_has_one_shape(tmp_path):
    sim, end = _run_to(_drain_world(tmp_path), 602)
    plan = dry_run(sim, end)
    assert plan["moves"], "the drain is under way: there are plans"
    for m in plan["moves"]:
        assert m["kind"] in ("return", "preempt", "reclaim", "defragment", "drain", "claim", "bound")
        assert "evict" in m or "move" in m
        assert {"units", "tasks", "state_bytes"} <= set(m["cost"]) and "held" in m


def test_the_plan_shows_drain_waves_held_by_the_budget_until_the_move_ahead_serves_again(tmp_path):
    """At 10m2s one replica is moving (it serves again at 10m5s): the other
    three wait for the budget, and the plan says until when."""
    path = _drain_world(tmp_path)
    sim, end = _run_to(path, 602)
    on_b = sorted(t for t, p in sim.state.placements.items() if sim.world.fleet.node_name(p.host.node) == "s/b-0")
    assert len(on_b) == 3  # the first of four has moved
    drains = [m for m in dry_run(sim, end)["moves"] if m["kind"] == "drain"]
    assert [m["evict"] for m in drains] == [[t] for t in on_b]
    assert all(m["held"]["by"] == "disruption budget" and m["held"]["until_s"] == 605 for m in drains)
    assert all(m["cost"]["downtime_s"] == 5 for m in drains)  # a stateless restart, at least
    # and the simulation does what the plan said: the next wave at 10m5s
    sim, _ = _run_to(path, 1800)
    waves = [e["t"] for e in sim.events if e["kind"] == "preempted"]
    assert waves == [600, 605, 610, 615]


def _hysteresis_world(tmp_path, car_nodes=1):
    """A service pushed off its car at 10m; the car is free again at 10m30s,
    but the service may move again only at 12m (hysteresis 2m)."""
    svc = component("s", cpu=4, near={"site": "car"})
    hog = component("h", cpu=8 * car_nodes, near={"site": "car", "maxRttMs": 1})
    sites = [site("car", tier="device", groups=[node_group(count=car_nodes, cpu=8)]),
             site("edge", tier="edge", groups=[node_group(count=1, cpu=16)])]
    path = scenario(tmp_path, sites, [app("w", components=[svc], priority=1),
                                      app("hog", components=[hog] if car_nodes == 1 else
                                          [{**hog, "replicas": car_nodes, "resources": {"cpu": 8, "memory": "1Gi"}}],
                                          priority=9)],
                    arrivals=[{"at": 0, "app": "w"}, {"at": "10m", "app": "hog"}],
                    events=[{"at": "630s", "kind": "delete", "app": "hog"}], policy={"hysteresis": "2m"})
    data = list(yaml.safe_load_all(path.read_text()))
    data[0]["spec"]["links"] = [{"between": ["car", "edge"], "rttMs": 10, "bandwidth": "1Gbps"}]
    path.write_text(yaml.safe_dump_all(data, sort_keys=False))
    return path


def test_a_return_held_back_by_hysteresis_is_planned_with_the_time_it_may_go(tmp_path):
    path = _hysteresis_world(tmp_path)
    sim, end = _run_to(path, 650)
    (ret,) = [m for m in dry_run(sim, end)["moves"] if m["kind"] == "return"]
    assert ret["move"][0]["task"] == "w/s/0" and ret["move"][0]["to"].startswith("car/")
    assert ret["held"] == {"by": "hysteresis", "until_s": 720.0} and ret["gain"] > ret["cost"]["downtime_s"]
    sim, end = _run_to(path, 750)
    assert not [m for m in dry_run(sim, end)["moves"] if m["kind"] == "return"]  # it went home at 12m


@pytest.mark.parametrize("where", ["drain", "hysteresis", "autodrive"])
def test_a_dry_run_changes_nothing_the_run_does_after_it(tmp_path, where):
    """Stepped to T, planned, and run on: the same events as a run never
    planned (a plan draws ties from a copy of the run's generator, and sets
    no task aside and asks for no instant)."""
    if where == "drain":
        path, at, until = _drain_world(tmp_path), 602, 1800
    elif where == "hysteresis":  # two car nodes tie for the return: the plan draws one
        path, at, until = _hysteresis_world(tmp_path, car_nodes=2), 650, 1800
    else:
        path, at, until = examples / "autodrive.yaml", 1500, None

    def events(plan_at):
        sim = Simulation(load_world([str(path)]), until=until)
        sim.start()
        sim.step(at)
        if plan_at:
            assert dry_run(sim, at)["moves"] or where == "autodrive"
        sim.step(float("inf") if sim.until is None else sim.until)
        return [json.dumps(e, sort_keys=True) for e in sim.events]

    planned, plain = events(True), events(False)
    assert len(plain) > 10 and planned == plain


def test_plan_takes_a_population_size_and_refuses_a_moment_past_the_scenarios_end():
    """``plan --population cars=N`` sizes the city as ``simulate`` does; an
    ``--at`` past the scenario's ``until`` is an error, not a plan of nothing."""
    from pathlib import Path

    from test_populations import run_cli

    city = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"
    code, out, err = run_cli("plan", city, "--at", "1m", "--population", "cars=7", "-o", "json")
    assert code == 0, err
    running = json.loads(out)["running_by_site"]
    assert sorted(s for s in running if s.startswith("car-")) == [f"car-{i:07d}" for i in range(7)], running
    code, out, err = run_cli("plan", examples / "autodrive.yaml", "--at", "10h")
    assert code == 2 and "--at: 10h is past the scenario's end (until: 1h)" in err and "Traceback" not in err, err
    code, out, err = run_cli("plan", examples / "autodrive.yaml", "--at", "1h", "-o", "json")
    assert code == 0 and json.loads(out)["at_s"] == 3600, err
