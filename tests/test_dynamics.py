"""The world changing under running work: hosts that move and shrink, drains,
disruption budgets and the migration limit."""

from __future__ import annotations

from collections import Counter

import yaml

from builders import app, component, node_group, site, tenant, vc
from suanli.scheduling.reasons import Why
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world


def simulate(path, **kw):
    sim = Simulation(load_world([str(path)]), **kw)
    return sim, sim.run()


def scenario(tmp_path, sites, apps, vcs=(), until="2h", arrivals=(), events=(), policy=None, tenants=None):
    docs = [
        {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"}, "spec": {"sites": list(sites)}},
        *(tenants or [tenant()]), *vcs, *apps,
        {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
         "spec": {"until": until, "arrivals": list(arrivals), "events": list(events),
                  **({"policy": {"rescheduling": policy}} if policy else {})}},
    ]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def host_events(sim, kind=None):
    return [e for e in sim.events if e["kind"] in ((kind,) if kind else ("hostAdded", "hostRemoved"))]


def test_an_elastic_group_grows_for_pending_work_and_shrinks_after_scale_down_after(tmp_path):
    pool = {"name": "pool", "min": 1, "max": 4, "resources": {"cpu": 8, "memory": "16Gi"}}
    jobs = component("j", lifetime="job", replicas=3, cpu=8, memory="8Gi", duration="10m")
    path = scenario(tmp_path, [site("s", groups=[node_group(count=4, cpu=8)])],
                    [app("w", components=[jobs], virtualCluster="v")],
                    vcs=[vc("v", groups=[pool], autoscale={"scaleDownAfter": "5m"})])
    sim, _ = simulate(path)
    added, removed = host_events(sim, "hostAdded"), host_events(sim, "hostRemoved")
    assert [e["t"] for e in added] == [0, 0, 0]  # min 1 up front, two more for the pending jobs
    assert len({e["node"] for e in added}) == 3 and all(e["vc"] == "v" for e in added)
    # the jobs end at 10m; idle hosts go at 15m, down to the group's min
    assert [e["t"] for e in removed] == [900, 900]
    assert all(e["reason"] == "idle for 300s" for e in removed)
    assert len(sim.state.vcs["v"].hosts) == 1
    # every host event names vc, host and node, and host names are never reused
    names = [e["host"] for e in added]
    assert len(set(names)) == len(names)


def test_an_idle_host_that_gets_work_again_is_kept(tmp_path):
    pool = {"name": "pool", "min": 0, "max": 2, "resources": {"cpu": 8, "memory": "16Gi"}}
    first = component("j", lifetime="job", cpu=8, memory="8Gi", duration="10m")
    path = scenario(tmp_path, [site("s", groups=[node_group(count=2, cpu=8)])],
                    [app("a", components=[first], virtualCluster="v"),
                     app("b", components=[first], virtualCluster="v")],
                    vcs=[vc("v", groups=[pool], autoscale={"scaleDownAfter": "5m"})],
                    arrivals=[{"at": 0, "app": "a"}, {"at": "13m", "app": "b"}])
    sim, _ = simulate(path)
    removed = host_events(sim, "hostRemoved")
    # idle from 10m, busy again from 13m to 23m, removed 5 minutes after that
    assert [e["t"] for e in removed] == [28 * 60]
    assert len(host_events(sim, "hostAdded")) == 1


def test_a_fixed_coupled_group_moves_off_a_failed_node_inside_its_domain(tmp_path):
    ib = lambda d: {"ethernet": "lan", "ib": d}  # noqa: E731
    groups = [node_group("a", count=3, cpu=8, fabrics=ib("ib-a")), node_group("b", count=4, cpu=8, fabrics=ib("ib-b"))]
    trainers = {"name": "trainers", "count": 2, "resources": {"cpu": 8, "memory": "16Gi"}, "coupling": "ib"}
    gang = component("g", lifetime="job", cpu=8, memory="8Gi", gang={"size": 2}, coupling="ib", duration="1h")
    path = scenario(tmp_path, [site("s", groups=groups)], [app("w", components=[gang], virtualCluster="v")],
                    vcs=[vc("v", groups=[trainers])])
    sim, _ = simulate(path, until=60)
    domain = {e["node"].split("/")[1].split("-")[0] for e in host_events(sim, "hostAdded")}
    assert len(domain) == 1
    victim = host_events(sim, "hostAdded")[0]["node"]
    path = scenario(tmp_path, [site("s", groups=groups)], [app("w", components=[gang], virtualCluster="v")],
                    vcs=[vc("v", groups=[trainers])], events=[{"at": "10m", "kind": "nodeDown", "node": victim}])
    sim, _ = simulate(path)
    at_10 = [e for e in host_events(sim) if e["t"] == 600]
    assert [e["kind"] for e in at_10] == ["hostAdded", "hostRemoved"]
    new, old = at_10
    assert old["node"] == victim and new["node"] != victim
    assert new["node"].split("/")[1].split("-")[0] == victim.split("/")[1].split("-")[0]  # same ib domain
    assert new["reason"].startswith("replaces ") and "out of service" in old["reason"]
    hosts = sim.state.vcs["v"].hosts
    assert len(hosts) == 2 and victim not in {sim.world.fleet.node_name(h.node) for h in hosts}
    # the gang lost a member at 10m, was requeued whole and runs again on the moved hosts
    placed = [e for e in sim.events if e["kind"] == "placed" and e["t"] == 600]
    assert len(placed) == 2 and victim not in {e["node"] for e in placed}


def test_a_host_with_nowhere_to_go_waits_for_room(tmp_path):
    fixed = {"name": "f", "count": 2, "resources": {"cpu": 8, "memory": "16Gi"}}
    path = scenario(tmp_path, [site("s", groups=[node_group(count=2, cpu=8)])],
                    [app("w", components=[component("c", cpu=1)], virtualCluster="v")],
                    vcs=[vc("v", groups=[fixed])],
                    events=[{"at": "10m", "kind": "nodeDown", "node": "s/n-0"},
                            {"at": "20m", "kind": "nodeUp", "node": "s/n-0"}])
    sim, _ = simulate(path)
    # no spare node: the host stays (out of service) and is back in service at 20m
    assert len(host_events(sim, "hostAdded")) == 2 and not host_events(sim, "hostRemoved")
    assert len(sim.state.vcs["v"].hosts) == 2
    assert sim.view.tasks["w/c/0"].status == "running"


def test_a_drain_moves_work_off_in_waves_within_the_disruption_budget(tmp_path):
    web = component("web", replicas=4, cpu=1, state={"kind": "stateful", "size": "1Gi"})
    path = scenario(tmp_path, [site("s", groups=[node_group(count=2, cpu=8)])],
                    [app("w", components=[web], priority=1)],
                    events=[{"at": "10m", "kind": "nodeDrain", "node": "s/n-0"}],
                    policy={"disruptionBudget": 1})
    sim, _ = simulate(path, until=9 * 60)
    on_n0 = {t for t, p in sim.state.placements.items() if sim.world.fleet.node_name(p.host.node) == "s/n-0"}
    sim, _ = simulate(path)
    drained = [e for e in sim.events if e["kind"] == "preempted"]
    assert {e["task"] for e in drained} == on_n0 and all(e["cause"] == "drain" for e in drained)
    # one replica at a time: each waits for the previous one's state to arrive (1 GiB over the node fabric)
    times = [e["t"] for e in drained]
    assert times == sorted(times) and len(set(times)) == len(times)
    started = {e["task"]: e["t"] for e in sim.events if e["kind"] == "started" and e["t"] >= 600}
    for a, b in zip(drained, drained[1:]):
        assert b["t"] >= started[a["task"]]
    assert all(sim.world.fleet.node_name(p.host.node) == "s/n-1" for p in sim.state.placements.values())


def test_a_drain_moves_stateless_replicas_one_wave_at_a_time(tmp_path):
    """Stateless replicas carry no state, but each is moving until it serves
    again (the policy's restartTime): under a budget of 25% of 4 replicas the
    drain moves one, waits until it runs again, then the next."""
    web = component("web", replicas=4, cpu=1)
    path = scenario(tmp_path, [site("s", groups=[node_group(count=2, cpu=8)])],
                    [app("w", components=[web], priority=1)],
                    events=[{"at": "10m", "kind": "nodeDrain", "node": "s/n-0"}],
                    policy={"disruptionBudget": "25%", "restartTime": "30s"})
    sim, _ = simulate(path, until=9 * 60)
    on = Counter(sim.world.fleet.node_name(p.host.node) for p in sim.state.placements.values())
    busiest = on.most_common(1)[0][0]
    path.write_text(path.read_text().replace("node: s/n-0", f"node: {busiest}"))
    sim, _ = simulate(path)
    drained = [e for e in sim.events if e["kind"] == "preempted"]
    moved = [e for e in sim.events if e["kind"] == "migrated"]
    assert len(drained) == on[busiest] >= 2 and all(e["cause"] == "drain" for e in drained)
    assert [e["t"] for e in drained] == [600 + 30 * i for i in range(len(drained))]  # one at a time
    assert all(e["bytes"] == 0 and e["downtime_s"] == 30 for e in moved)
    started = {e["task"]: e["t"] for e in sim.events if e["kind"] == "started" and e["t"] >= 600}
    for a, b in zip(drained, drained[1:]):
        assert b["t"] == started[a["task"]]


def test_the_disruption_budget_limits_return_moves(tmp_path):
    """Four replicas pushed off their near site come back at most two at a time."""
    svc = component("s", replicas=4, cpu=2, state={"kind": "stateful", "size": "8Gi"}, near={"site": "car"})
    hog = component("h", cpu=8, near={"site": "car", "maxRttMs": 1})
    sites = [site("car", tier="device", groups=[node_group(count=1, cpu=8)]),
             site("edge", tier="edge", groups=[node_group(count=1, cpu=16)])]
    docs_links = [{"between": ["car", "edge"], "rttMs": 10, "bandwidth": "1Gbps"}]
    path = scenario(tmp_path, sites, [app("w", components=[svc], priority=1), app("hog", components=[hog], priority=9)],
                    arrivals=[{"at": 0, "app": "w"}, {"at": "10m", "app": "hog"}],
                    events=[{"at": "20m", "kind": "delete", "app": "hog"}],
                    policy={"disruptionBudget": "50%", "hysteresis": "1m"})
    data = list(yaml.safe_load_all(path.read_text()))
    data[0]["spec"]["links"] = docs_links
    path.write_text(yaml.safe_dump_all(data, sort_keys=False))
    sim, _ = simulate(path)
    returns = [e for e in sim.events if e["kind"] == "migrated" and e.get("cause") == "return"]
    assert len(returns) == 4
    by_time = Counter(e["t"] for e in returns)
    assert max(by_time.values()) <= 2  # 50% of 4
    # the next pair goes only once the first pair's state (8 GiB at 1 Gbps, ~69 s) has arrived
    first, later = min(by_time), max(by_time)
    assert later - first >= 8 * 2**30 * 8 / 1e9


def test_a_bad_disruption_budget_is_reported(tmp_path):
    import subprocess
    import sys

    path = scenario(tmp_path, [site("s")], [app("w")], policy={"disruptionBudget": "150%"})
    run = subprocess.run([sys.executable, "-m", "suanli.cli", "simulate", str(path), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "spec.policy.rescheduling.disruptionBudget" in run.stderr and "at most 100%" in run.stderr


def _sharing_world(tmp_path, nodes=1, gpus=2, preemptible=True, late="15m", policy=None):
    """Half-GPU jobs and services arrive in turn, so each GPU gets one of each;
    the jobs end, leaving half of every GPU free; then a whole-GPU job arrives."""
    half = [{"kind": "gpu", "count": 0.5}]
    apps, arrivals = [], []
    for i in range(nodes * gpus):
        apps.append(app(f"job{i}", components=[component("j", lifetime="job", cpu=1, accelerators=half,
                                                         duration="10m")]))
        apps.append(app(f"svc{i}", components=[component("s", cpu=1, accelerators=half,
                                                         state={"kind": "stateful", "size": "1Gi"})],
                        preemptible=preemptible))
        arrivals += [{"at": f"{2 * i}s", "app": f"job{i}"}, {"at": f"{2 * i + 1}s", "app": f"svc{i}"}]
    apps.append(app("whole", components=[component("w", lifetime="job", cpu=1,
                                                   accelerators=[{"kind": "gpu", "count": 1}], duration="10m")]))
    arrivals.append({"at": late, "app": "whole"})
    groups = [node_group(count=nodes, cpu=16, accelerators=[{"kind": "gpu", "model": "T4", "count": gpus,
                                                             "shareable": True}])]
    return scenario(tmp_path, [site("s", groups=groups)], apps, arrivals=arrivals, until="1h", policy=policy)


def test_scattered_device_share_is_gathered_for_a_whole_device_task(tmp_path):
    sim, _ = simulate(_sharing_world(tmp_path))
    before = [e for e in sim.events if e["kind"] == "placed" and e["t"] < 900]
    assert len(before) == 4  # two jobs and two services, half a GPU each
    moves = [e for e in sim.events if e["kind"] == "migrated" and e.get("cause") == "defragment"]
    assert len(moves) == 1 and moves[0]["t"] == 900 and moves[0]["from"] == moves[0]["to"] == "s/n-0"
    assert moves[0]["bytes"] == 2**30
    placed = next(e for e in sim.events if e["kind"] == "placed" and e["task"] == "whole/w/0")
    assert placed["t"] == 900
    # after the move the two services share one GPU and the whole-GPU job has the other
    sim, _ = simulate(_sharing_world(tmp_path), until=20 * 60)
    p = sim.state.placements
    svc_slots = {p[t].alloc.slots for t in ("svc0/s/0", "svc1/s/0")}
    assert len(svc_slots) == 1 and p["whole/w/0"].alloc.slots not in svc_slots


def test_defragmentation_moves_a_share_to_another_node_when_it_must(tmp_path):
    sim, _ = simulate(_sharing_world(tmp_path, nodes=2, gpus=1))
    moves = [e for e in sim.events if e["kind"] == "migrated" and e.get("cause") == "defragment"]
    assert len(moves) == 1 and moves[0]["from"] != moves[0]["to"]
    placed = next(e for e in sim.events if e["kind"] == "placed" and e["task"] == "whole/w/0")
    assert placed["t"] == 900 and placed["node"] == moves[0]["from"]


def test_no_defragmentation_of_work_that_may_not_be_disturbed(tmp_path):
    sim, _ = simulate(_sharing_world(tmp_path, preemptible=False))
    assert not [e for e in sim.events if e["kind"] == "migrated"]
    assert sim.view.tasks["whole/w/0"].status == "pending"
    assert Why("capacity", resource="gpu") in sim.view.tasks["whole/w/0"].reasons


def test_plan_shows_the_defragmentation_it_would_make(tmp_path):
    import json
    import subprocess
    import sys

    path = _sharing_world(tmp_path, policy={"enabled": False})
    out = subprocess.run([sys.executable, "-m", "suanli.cli", "plan", str(path), "--at", "16m", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    plan = json.loads(out)
    gather = [m for m in plan["moves"] if m["kind"] == "defragment"]
    assert len(gather) == 1 and gather[0]["for"] == ["whole/w/0"]
    (move,) = gather[0]["move"]
    assert move["from"] == move["to"] == "s/n-0" and len(move["devices"]) == 1
    assert [p["task"] for p in plan["pending"]] == ["whole/w/0"]  # nothing was moved


def test_a_return_held_back_by_hysteresis_happens_when_it_expires(tmp_path):
    svc = component("s", cpu=4, near={"site": "car"})
    hog = component("h", cpu=8, near={"site": "car", "maxRttMs": 1})
    sites = [site("car", tier="device", groups=[node_group(count=1, cpu=8)]),
             site("edge", tier="edge", groups=[node_group(count=1, cpu=16)])]
    path = scenario(tmp_path, sites, [app("w", components=[svc], priority=1), app("hog", components=[hog], priority=9)],
                    arrivals=[{"at": 0, "app": "w"}, {"at": "10m", "app": "hog"}],
                    events=[{"at": "630s", "kind": "delete", "app": "hog"}], policy={"hysteresis": "2m"})
    data = list(yaml.safe_load_all(path.read_text()))
    data[0]["spec"]["links"] = [{"between": ["car", "edge"], "rttMs": 10, "bandwidth": "1Gbps"}]
    path.write_text(yaml.safe_dump_all(data, sort_keys=False))
    sim, _ = simulate(path)
    placed = [(e["t"], e["site"]) for e in sim.events if e.get("task") == "w/s/0" and e["kind"] == "placed"]
    # moved to the edge at 10m; the car is free at 10m30s, but it may move again only at 12m
    assert placed == [(0, "car"), (600, "edge"), (720, "car")]


def test_a_drained_nodes_vc_host_moves_and_its_work_follows(tmp_path):
    fixed = {"name": "f", "count": 1, "resources": {"cpu": 8, "memory": "16Gi"}}
    svc = component("s", replicas=2, cpu=2, state={"kind": "stateful", "size": "1Gi"})
    path = scenario(tmp_path, [site("s", groups=[node_group(count=2, cpu=8)])],
                    [app("w", components=[svc], virtualCluster="v")], vcs=[vc("v", groups=[fixed])],
                    events=[{"at": "10m", "kind": "nodeDrain", "node": "s/n-0"}],
                    policy={"disruptionBudget": "100%"})
    sim, _ = simulate(path, until=60)
    first = sim.world.fleet.node_name(sim.state.vcs["v"].hosts[0].node)
    if first != "s/n-0":  # drain the node the host is on
        path.write_text(path.read_text().replace("node: s/n-0", f"node: {first}"))
    sim, _ = simulate(path)
    hosts = host_events(sim)
    assert [(e["kind"], e["t"]) for e in hosts] == [("hostAdded", 0), ("hostAdded", 600), ("hostRemoved", 600)]
    assert hosts[2]["node"] == first and hosts[1]["node"] != first
    moved = [e for e in sim.events if e["kind"] == "migrated"]
    assert len(moved) == 2 and all(e["from"] == first and e["to"] == hosts[1]["node"] and e["bytes"] == 2**30
                                    for e in moved)
    assert [sim.world.fleet.node_name(h.node) for h in sim.state.vcs["v"].hosts] == [hosts[1]["node"]]


def test_a_host_moves_off_a_failed_node_even_with_the_quota_used_up(tmp_path):
    fixed = {"name": "f", "count": 2, "resources": {"cpu": 8, "memory": "16Gi"}}
    path = scenario(tmp_path, [site("s", groups=[node_group(count=3, cpu=8)])],
                    [app("w", components=[component("c", cpu=1)], virtualCluster="v")],
                    vcs=[vc("v", groups=[fixed])], tenants=[tenant(quota={"cpu": 16})],
                    events=[{"at": "10m", "kind": "nodeDown", "node": "s/n-0"}])
    sim, _ = simulate(path, until=60)
    on = {sim.world.fleet.node_name(h.node) for h in sim.state.vcs["v"].hosts}
    down = sorted(on)[0]
    path.write_text(path.read_text().replace("node: s/n-0", f"node: {down}"))
    sim, _ = simulate(path)
    hosts = {sim.world.fleet.node_name(h.node) for h in sim.state.vcs["v"].hosts}
    assert len(hosts) == 2 and down not in hosts  # the replacement took the spare node
    assert (sim.state.tenant_used["t"][0]) == 16000  # and the tenant is back at its quota, not over


def test_preemption_evicts_the_victim_that_starts_elsewhere_at_once_before_one_that_would_wait(tmp_path):
    """Two equal services on a car, one of which needs the car's NPU (no other
    place has one): a higher-priority service needs one of them gone. The
    one that can start on the edge at once is evicted and moves; the one that
    would wait stays (started first, it was the one kept before)."""
    car = site("car", tier="device", groups=[node_group(count=1, cpu=4, memory="8Gi", arch="aarch64", accelerators=[
        {"kind": "npu", "model": "Orin", "count": 1, "shareable": True}])])
    edge = site("edge", tier="edge", groups=[node_group(count=1, cpu=8, memory="16Gi")])
    mobile = component("mobile", cpu=2, near={"site": "car", "maxRttMs": 20})
    bound = component("bound", cpu=2, accelerators=[{"kind": "npu", "count": 0.25}], near={"site": "car", "maxRttMs": 20})
    urgent = component("urgent", cpu=2, priority=100, near={"site": "car", "maxRttMs": 1})
    path = scenario(tmp_path, [car, edge], [app("x", components=[mobile]), app("y", components=[bound]),
                                            app("z", components=[urgent], priority=100)],
                    arrivals=[{"at": 0, "app": "x"}, {"at": 1, "app": "y"}, {"at": "10m", "app": "z"}], until="20m")
    data = list(yaml.safe_load_all(path.read_text()))
    data[0]["spec"]["links"] = [{"between": ["car", "edge"], "rttMs": 5, "bandwidth": "1Gbps"}]
    path.write_text(yaml.safe_dump_all(data, sort_keys=False))
    sim, _ = simulate(path)
    first = {e["task"]: e["site"] for e in sim.events if e["kind"] == "placed" and e["t"] < 600}
    assert first == {"x/mobile/0": "car", "y/bound/0": "car"}, first  # both on the car, the car full
    moved = [(e["task"], e["kind"]) for e in sim.events if e["kind"] in ("preempted", "migrated")]
    assert moved == [("x/mobile/0", "preempted"), ("x/mobile/0", "migrated")], moved
    assert sim.view.tasks["y/bound/0"].status == "running" and sim.view.tasks["z/urgent/0"].status == "running"
    assert sim.state.placements["x/mobile/0"].host.node == sim.world.fleet.node_by_name("edge/n-0")


def test_the_victims_example_moves_the_one_that_starts_elsewhere(tmp_path):
    """``examples/victims.yaml``: the urgent service evicts the map service,
    which starts on the edge at once, not the one bound to the car's NPU."""
    from pathlib import Path

    sim, _ = simulate(Path(__file__).parent.parent / "examples" / "victims.yaml")
    moved = [(e["task"], e["kind"], e.get("to")) for e in sim.events if e["kind"] in ("preempted", "migrated")]
    assert moved == [("maps/mobile/0", "preempted", None), ("maps/mobile/0", "migrated", "edge/n-0")], moved
    assert sim.view.tasks["vision/bound/0"].status == "running" and sim.view.tasks["brake/urgent/0"].status == "running"
