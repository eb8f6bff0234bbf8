"""Devices that move and come and go: handover, deviceOffline/deviceOnline
events and the per-population mobility streams."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from test_populations import run_cli, write
from suanli.model.quantities import parse_rate_per_s
from suanli.sim.mobility import mobility_events
from suanli.spec import schema
from suanli.spec.build import load_world


def fleet(count: int = 4, edges: int = 2) -> dict:
    sites = [{"name": f"edge-{e}", "tier": "edge", "nodeGroups": [
        {"name": "n", "count": 2, "arch": "x86_64", "cpu": 16, "memory": "64Gi"}]} for e in range(edges)]
    sites.append({"name": "cloud", "tier": "cloud",
                  "nodeGroups": [{"name": "n", "count": 4, "arch": "x86_64", "cpu": 64, "memory": "256Gi"}]})
    links = [{"between": [f"edge-{e}", "cloud"], "rttMs": 30, "bandwidth": "10Gbps"} for e in range(edges)]
    pop = {"name": "cars", "count": count, "sites": "car-####",
           "nodeGroups": [{"name": "soc", "count": 1, "arch": "aarch64", "cpu": 4, "memory": "8Gi"}],
           "attach": {"to": {"tier": "edge"}, "weights": {"edge-0": 1} | {f"edge-{e}": 0 for e in range(1, edges)},
                      "rttMs": 2, "bandwidth": "100Mbps"}}
    return {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
            "spec": {"sites": sites, "links": links, "populations": [pop]}}


TENANT = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": {}}
INFO = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "info", "tenant": "t"},
        "spec": {"each": "cars", "components": [
            {"name": "local", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"},
             "near": {"site": "{site}", "maxRttMs": 0.2}},
            {"name": "game", "lifetime": "service", "resources": {"cpu": 8, "memory": "4Gi"},
             "state": {"kind": "stateful", "size": "512Mi"}, "near": {"site": "{site}", "maxRttMs": 10}}]}}


def scenario(events=(), mobility=(), until="1h") -> dict:
    return {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
            "spec": {"until": until, "events": list(events), "mobility": list(mobility),
                     "policy": {"rescheduling": {"enabled": True, "hysteresis": "60s"}}}}


def simulate(tmp: Path, docs: list[dict]) -> list[dict]:
    path = write(tmp, docs, "sc.yaml")
    code, _, err = run_cli("simulate", path, "--out", tmp / "out")
    assert code == 0, err
    return [json.loads(line) for line in (tmp / "out" / "events.jsonl").read_text().splitlines()]


def test_work_offloaded_for_a_device_follows_it_with_its_state(tmp_path):
    events = simulate(tmp_path, [fleet(), TENANT, INFO, scenario(
        [{"at": "10m", "kind": "handover", "site": "car-0001", "to": ["edge-1"]}])])
    game = [e for e in events if e.get("task") == "info.car-0001/game/0"]
    first = next(e for e in game if e["kind"] == "placed")
    assert first["site"] == "edge-0"
    moved = next(e for e in game if e["kind"] == "migrated")
    assert moved["t"] == 600 and moved["to"].startswith("edge-1/") and moved["bytes"] == 512 * 2**20
    assert moved["downtime_s"] > 0  # 512 MiB over the new path, priced
    broke = next(e for e in game if e["kind"] == "preempted")
    assert broke["reason"] == "beyond 10 ms of car-0001"
    # the other cars' games stay where they are: only work bound to the moved car was checked again
    others = [e for e in events if e.get("kind") in ("preempted", "migrated") and "car-0001" not in e.get("task", "")]
    assert not others


def test_an_offline_device_loses_its_tasks_and_takes_them_back(tmp_path):
    events = simulate(tmp_path, [fleet(), TENANT, INFO, scenario(
        [{"at": "20m", "kind": "deviceOffline", "site": "car-0002"},
         {"at": "30m", "kind": "deviceOnline", "site": "car-0002"}])])
    local = [e for e in events if e.get("task") == "info.car-0002/local/0"]
    kinds = [(e["kind"], e["t"]) for e in local]
    assert ("lost", 1200.0) in kinds
    back = [e for e in local if e["kind"] == "placed" and e["t"] >= 1800]
    assert back and back[0]["site"] == "car-0002"
    assert not [e for e in local if e["kind"] == "placed" and 1200 <= e["t"] < 1800]  # nowhere to go meanwhile
    game = [e for e in events if e.get("task") == "info.car-0002/game/0"]
    assert any(e["kind"] == "preempted" and e["t"] == 1200 for e in game)  # unreachable car: its bound broke
    assert any(e["kind"] == "started" and e["t"] >= 1800 for e in game)


def test_mobility_streams_are_poisson_per_device_and_follow_the_seed(tmp_path):
    docs = [fleet(count=2000, edges=5), TENANT]
    world = load_world([write(tmp_path, docs, "f.yaml")])
    spec = schema.MobilitySpec.model_validate(
        {"population": "cars", "handovers": "1/2h", "offline": "1/10h", "offlineFor": "lognormal(10m, 0.5)"})
    horizon = 3600.0
    evs = list(mobility_events(world.fleet, spec, 0, 7, horizon))
    kinds = Counter(type(e).__name__ for _, e in evs)
    # expected: 2000 devices x 1 h: 1000 handovers, 200 offline spells (Poisson: within 5 sd)
    assert abs(kinds["HandoverEvent"] - 1000) < 5 * 1000 ** 0.5, kinds
    assert abs(kinds["DeviceOfflineEvent"] - 200) < 5 * 200 ** 0.5, kinds
    assert 0 < kinds["DeviceOnlineEvent"] <= kinds["DeviceOfflineEvent"]
    times = [t for t, _ in evs]
    assert times == sorted(times) and times[-1] <= horizon
    again = list(mobility_events(world.fleet, spec, 0, 7, horizon))
    assert [(t, e.kind, e.site) for t, e in again] == [(t, e.kind, e.site) for t, e in evs]
    # a handover goes to a site the attachment rule allows, other than where the device is
    homes = {world.fleet.sites[int(a)].name: world.fleet.sites[int(b)].name
             for a, b in zip(world.fleet.link_arrays.a, world.fleet.link_arrays.b) if a >= 6}
    first = next(e for _, e in evs if e.kind == "handover" and e.site in homes)
    assert first.to[0].startswith("edge-")
    down = {}
    for t, e in evs:  # every offline spell ends after it began, and a device is offline once at a time
        if e.kind == "deviceOffline":
            assert e.site not in down
            down[e.site] = t
        elif e.kind == "deviceOnline":
            assert down.pop(e.site) < t
    assert parse_rate_per_s("1/2h") == 1 / 7200


def test_a_scenario_with_mobility_runs_and_moves_work(tmp_path):
    mob = {"population": "cars", "handovers": "1/20m", "offline": "1/2h", "offlineFor": "uniform(5m, 10m)"}
    events = simulate(tmp_path, [fleet(count=20, edges=3), TENANT, INFO, scenario(mobility=[mob])])
    kinds = Counter(e["kind"] for e in events)
    assert kinds["handover"] > 20 and kinds["deviceOffline"] > 0 and kinds["deviceOnline"] > 0, kinds
    assert kinds["migrated"] > 0  # games followed their cars
    for e in events:  # no game ever started beyond its bound: it is on an edge its car reaches in 10 ms or less
        assert not (e["kind"] == "started" and "/game/" in e["task"] and e["site"] == "cloud")


def test_mobility_and_device_events_are_checked(tmp_path):
    bad = [
        ({"events": [{"at": 0, "kind": "handover", "site": "car-9999", "to": ["edge-0"]}]},
         "spec.events[0].site", "no site named 'car-9999'"),
        ({"events": [{"at": 0, "kind": "handover", "site": "car-0000", "to": ["edge-9"]}]},
         "spec.events[0].to[0]", "no site named 'edge-9'"),
        ({"events": [{"at": 0, "kind": "handover", "site": "car-0000", "to": ["edge-0", "edge-0"]}]},
         "spec.events[0].to", "distinct"),
        ({"events": [{"at": 0, "kind": "deviceOffline", "site": "bus-1"}]}, "spec.events[0].site", "no site"),
        ({"mobility": [{"population": "vans", "handovers": "1/h"}]}, "spec.mobility[0].population",
         "no population named 'vans'"),
        ({"mobility": [{"population": "cars"}]}, "spec.mobility[0]", "give a rate"),
        ({"mobility": [{"population": "cars", "handovers": "often"}]}, "spec.mobility[0].handovers", ""),
        ({"mobility": [{"population": "cars", "handovers": "1/h", "to": {"names": ["edge-0"]}}]},
         "spec.mobility[0].to", "needs another site to go to"),
    ]
    for spec, where, words in bad:
        sc = scenario()
        sc["spec"].update(spec)
        path = write(tmp_path, [fleet(), TENANT, sc], "bad.yaml")
        code, _, err = run_cli("validate", path)
        assert code == 2 and where in err and words in err and "Traceback" not in err, (spec, err)


def test_a_share_of_per_site_copies_arrives_spread_and_leaves(tmp_path):
    autopilot = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "ap", "tenant": "t"},
                 "spec": {"each": "cars", "components": [
                     {"name": "drive", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"},
                      "near": {"site": "{site}", "maxRttMs": 0.2}}]}}
    sc = scenario(until="2h")
    sc["spec"]["arrivals"] = [{"at": "10m", "app": "ap", "share": 0.25, "over": "30m", "stay": "uniform(10m, 20m)"}]
    events = simulate(tmp_path, [fleet(count=200, edges=2), TENANT, autopilot, sc])
    came = {e["task"]: e["t"] for e in events if e["kind"] == "submitted"}
    left = {e["app"]: e["t"] for e in events if e["kind"] == "left"}
    assert len(came) == 50  # a quarter of 200 cars
    assert all(600 <= t <= 600 + 1800 for t in came.values())
    assert len(set(round(t) for t in came.values())) > 40  # spread, not at once
    for task, t in came.items():
        app = task.split("/")[0]
        assert 600 <= left[app] - t <= 1200
    (tmp_path / "again").mkdir()
    again = simulate(tmp_path / "again", [fleet(count=200, edges=2), TENANT, autopilot, sc])
    assert {e["task"]: e["t"] for e in again if e["kind"] == "submitted"} == came  # the seed decides
    sc["spec"]["arrivals"][0]["app"] = "info"
    one = {**INFO, "spec": {**INFO["spec"]}}
    del one["spec"]["each"]
    one["spec"]["components"] = [{"name": "x", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"}}]
    code, _, err = run_cli("validate", write(tmp_path, [fleet(), TENANT, one, sc], "bad.yaml"))
    assert code == 2 and "spec.arrivals[0].share" in err and "made per site" in err


def test_population_sizes_from_the_command_line(tmp_path):
    path = write(tmp_path, [fleet(count=4), TENANT, INFO], "f.yaml")
    code, out, err = run_cli("schedule", path, "--population", "cars=300", "-o", "summary")
    assert code == 0, err
    assert "/600 tasks placed" in out  # two tasks for each of 300 cars
    for bad, words in (("cars=0", "not a count"), ("cars=x", "not a count"), ("vans=3", "no population named 'vans'"),
                       ("cars=10001", "too few for 10001 sites"), ("cars", "expected NAME=COUNT"),
                       ("cars=20000000", "at most 10000000")):
        code, _, err = run_cli("schedule", path, "--population", bad)
        assert code == 2 and f"--population {bad}" in err and words in err and "Traceback" not in err, (bad, err)


def test_a_device_that_moves_while_offline_comes_back_where_it_went(tmp_path):
    events = simulate(tmp_path, [fleet(), TENANT, INFO, scenario(
        [{"at": "10m", "kind": "deviceOffline", "site": "car-0001"},
         {"at": "15m", "kind": "handover", "site": "car-0001", "to": ["edge-1"]},
         {"at": "20m", "kind": "deviceOnline", "site": "car-0001"}])])
    game = [e for e in events if e.get("task") == "info.car-0001/game/0"]
    assert next(e for e in game if e["kind"] == "placed")["site"] == "edge-0"
    back = [e for e in game if e["kind"] == "placed" and e["t"] >= 1200]
    assert back and back[0]["site"] == "edge-1"  # near its new edge, not its old one
