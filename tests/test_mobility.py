"""Devices that move and come and go: handover, deviceOffline/deviceOnline
events and the per-population mobility streams."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import strategies as st
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


# ------------------------------------------------------------ returns of one instant share a node's room

def edge_world(edge_cpus: list[int], phones: list[tuple[int, int]], handovers: list[tuple[int, int, int]],
               rescheduling: bool = True, far: int = 0) -> list[dict]:
    """Edges of one node each (``edge_cpus``) on a cloud; phones (their edge,
    the cores of the service bound near it, within 40 ms, on edges only);
    handovers (second, phone, edge). ``far`` edges 50 ms from the cloud, out
    of every bound: with enough of them, a bound's few rows are decided over
    alone (``nearby.candidate_rows``)."""
    sites = [{"name": "cloud", "tier": "cloud",
              "nodeGroups": [{"name": "n", "count": 1, "arch": "x86_64", "cpu": 64, "memory": "256Gi"}]}]
    sites += [{"name": f"e{e}", "tier": "edge",
               "nodeGroups": [{"name": "cpu", "count": 1, "arch": "x86_64", "cpu": c, "memory": "16Gi"}]}
              for e, c in enumerate(edge_cpus)]
    sites += [{"name": f"p{i}", "tier": "device",
               "nodeGroups": [{"name": "soc", "count": 1, "arch": "aarch64", "cpu": 1, "memory": "1Gi"}]}
              for i in range(len(phones))]
    sites += [{"name": f"far{i}", "tier": "edge",
               "nodeGroups": [{"name": "cpu", "count": 1, "arch": "x86_64", "cpu": 8, "memory": "16Gi"}]}
              for i in range(far)]
    links = [{"between": [f"e{e}", "cloud"], "rttMs": 10, "bandwidth": "10Gbps"} for e in range(len(edge_cpus))]
    links += [{"between": [f"far{i}", "cloud"], "rttMs": 50, "bandwidth": "10Gbps"} for i in range(far)]
    links += [{"between": [f"p{i}", f"e{e}"], "rttMs": 5, "bandwidth": "100Mbps"} for i, (e, _) in enumerate(phones)]
    docs = [{"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": sites, "links": links}}, TENANT]
    docs += [{"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": f"a{i}", "tenant": "t"},
              "spec": {"components": [{"name": "s", "lifetime": "service", "resources": {"cpu": cpu, "memory": "1Gi"},
                                       "sites": {"tier": ["edge"]}, "near": {"site": f"p{i}", "maxRttMs": 40}}]}}
             for i, (_, cpu) in enumerate(phones)]
    sc = scenario([{"at": f"{t}s", "kind": "handover", "site": f"p{i}", "to": [f"e{e}"]} for t, i, e in handovers],
                  until="20m")
    sc["spec"]["policy"]["rescheduling"]["enabled"] = rescheduling
    return docs + [sc]


def held_within_capacity(sim) -> Counter:
    """Each node's placed vectors summed from the placements (not the tables'
    free room) are within its capacity; returns how many nodes are full."""
    import numpy as np

    cap = sim.world.fleet.node_capacity
    used = np.zeros_like(cap)
    for p in sim.state.placements.values():
        used[p.host.node] += p.alloc.vec
    over = np.flatnonzero((used > cap).any(axis=1))
    assert not over.size, [(sim.world.fleet.node_name(int(n)), used[n].tolist(), cap[n].tolist()) for n in over]
    return Counter(full=int((used[:, 0] == cap[:, 0]).sum()))


def run_checked(tmp: Path, docs: list[dict], seen: Counter):
    from suanli.sim.simulation import Simulation

    sim = Simulation(load_world([write(tmp, docs, "edges.yaml")]), seed=1, until=1200.0,
                     on_instant=lambda t: seen.update(held_within_capacity(sim) + Counter(instants=1)))
    sim.run()
    return sim


@pytest.mark.parametrize("far", [0, 60])
def test_returns_of_one_instant_each_see_the_room_the_others_took(tmp_path, monkeypatch, far):
    """Three 1-core services near three phones on edges e1 and e2 all hand
    over to e0, whose node has 2 cores: two come back to it, the third stays
    where it is (and a dry run lists two returns, not three). With 60 edges
    out of reach, the returns are decided over the bound's rows alone."""
    from suanli.scheduling import nearby

    seen: Counter = Counter()
    rows_of = nearby.candidate_rows

    def counted(table, req):
        rows = rows_of(table, req)
        seen["decided over the bound's rows"] += rows is not None
        return rows

    monkeypatch.setattr(nearby, "candidate_rows", counted)
    docs = edge_world([2, 4, 4], [(2, 1), (1, 1), (1, 1)], [(100, i, 0) for i in range(3)], far=far)
    sim = run_checked(tmp_path, docs, seen)
    returns = [e for e in sim.events if e.get("kind") == "migrated" and e.get("cause") == "return"]
    assert len(returns) == 2 and all(e["to"] == "e0/cpu-0" for e in returns), returns
    assert seen["full"] > 0 and seen["instants"] > 2
    assert (seen["decided over the bound's rows"] > 0) == (far > 0), seen
    off = write(tmp_path, edge_world([2, 4, 4], [(2, 1), (1, 1), (1, 1)], [(100, i, 0) for i in range(3)],
                                     rescheduling=False, far=far), "off.yaml")
    code, out, err = run_cli("plan", off, "--at", "100s", "-o", "json")
    assert code == 0, err
    moves = [m for m in json.loads(out)["moves"] if m["kind"] == "return"]
    assert [m["move"][0]["to"] for m in moves] == ["e0/cpu-0"] * 2, moves


@st.composite
def edge_worlds(draw) -> list[dict]:
    edges = draw(st.integers(2, 4))
    cpus = [draw(st.integers(1, 4)) for _ in range(edges)]
    phones = [(draw(st.integers(0, edges - 1)), draw(st.integers(1, 2))) for _ in range(draw(st.integers(2, 7)))]
    handovers = draw(st.lists(st.tuples(st.sampled_from([100, 100, 100, 250, 400]), st.integers(0, len(phones) - 1),
                                        st.integers(0, edges - 1)), min_size=1, max_size=10))
    return edge_world(cpus, phones, handovers, far=draw(st.sampled_from([0, 60])))


def test_no_node_holds_more_than_it_has_after_any_instant_of_handovers_and_returns(tmp_path):
    """Random edges, phones and handovers (several in one instant): after
    every instant, what the placements hold on each node is within its
    capacity. Not vacuous: returns are made, and nodes are full."""
    from hypothesis import HealthCheck, given, settings

    seen: Counter = Counter()

    @settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(edge_worlds())
    def each(docs):
        sim = run_checked(tmp_path, docs, seen)
        seen["returns"] += sum(1 for e in sim.events if e.get("kind") == "migrated" and e.get("cause") == "return")
        seen["worlds"] += 1

    each()
    # (the same hundred worlds each run: drawn at random, 24 returns once fell below the bound; these give 97)
    assert seen["worlds"] >= 50 and seen["returns"] >= 25 and seen["full"] > 0, seen


def test_a_phone_in_reach_of_many_cells_keeps_them_all(tmp_path):
    """Phones with four homes among six edges: each has four links; a
    generated handover keeps three of them and takes a new one; a handover
    event may name six sites, and the phone is then linked to all six (the
    game near it placed within its bound all along)."""
    import numpy as np

    from suanli.spec.build import load_world

    world_doc = fleet(count=30, edges=6)
    world_doc["spec"]["populations"][0]["attach"] = {"to": {"tier": "edge"}, "homes": 4, "rttMs": 2,
                                                     "bandwidth": "100Mbps"}
    path = write(tmp_path, [world_doc, TENANT], "w.yaml")
    world = load_world([path])
    la = world.fleet.link_arrays
    assert sorted(np.bincount(la.a[la.a >= 7] - 7).tolist()) == [4] * 30
    spec = schema.MobilitySpec.model_validate({"population": "cars", "handovers": "1/10m"})
    moves = [e for _, e in mobility_events(world.fleet, spec, 0, 3, 3600.0) if e.kind == "handover"]
    assert moves and all(len(e.to) == 4 and len(set(e.to)) == 4 for e in moves), moves[:3]
    before = {world.fleet.sites[int(b)].name for a, b in zip(la.a, la.b) if a == world.fleet.site_index[moves[0].site]}
    assert len(before & set(moves[0].to)) == 3  # three homes kept, one new
    everywhere = [f"edge-{e}" for e in range(6)]
    events = simulate(tmp_path, [world_doc, TENANT, INFO, scenario(
        [{"at": "10m", "kind": "handover", "site": "car-0003", "to": everywhere}], until="20m")])
    over = next(e for e in events if e["kind"] == "handover" and e["site"] == "car-0003")
    assert sorted(over["to"]) == everywhere, over
    game = [e for e in events if e.get("task") == "info.car-0003/game/0" and e["kind"] == "started"]
    assert game and all(e["site"] != "cloud" for e in game)


@pytest.mark.parametrize("transit, edge_to_edge", [(None, 60.0), (False, 60.0), (True, 4.0)])
def test_phones_on_two_edges_are_no_road_between_them_unless_they_relay(tmp_path, transit, edge_to_edge):
    """Phones with two homes each, the edges 30 ms from the cloud: edge to
    edge is 60 ms through the cloud, not 4 through a phone, unless the
    population says ``transit: true``; a listed device site alike."""
    from suanli.spec.build import load_world

    doc = fleet(count=5, edges=2)
    pop = doc["spec"]["populations"][0]
    pop["attach"] = {"to": {"tier": "edge"}, "homes": 2, "rttMs": 2, "bandwidth": "100Mbps"}
    if transit is not None:
        pop["transit"] = transit
    doc["spec"]["sites"].append({"name": "relay", "tier": "device", "transit": True, "nodeGroups": []})
    world = load_world([write(tmp_path, [doc, TENANT], "w.yaml")])
    net, index = world.fleet.network, world.fleet.site_index
    assert net.rtt(index["edge-0"], index["edge-1"]) == edge_to_edge
    assert net.rtt(index["car-0000"], index["edge-0"]) == 2.0 and net.rtt(index["car-0000"], index["cloud"]) == 32.0
    assert world.fleet.site_table.transit[index["relay"]] and world.fleet.site_table.transit[index["cloud"]]


def test_a_multi_homed_devices_handover_rechecks_only_its_own_work_and_decides_as_a_full_recheck(tmp_path,
                                                                                                 monkeypatch):
    """Phones with two or three homes among edges hand over and go offline
    (eight random worlds):
    a phone relays nothing, so a change of its links changes no other path,
    and only the work on it or bound near it is looked at again. The events
    are those of a simulation that looks at everything again after each
    change (the rule before: only single-link devices were narrowed). Not
    vacuous: narrowed changes of multi-homed phones happen, and games move
    for them; with ``transit: true`` the phones relay and nothing narrows."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from suanli.sim import global_state
    from suanli.sim.simulation import Simulation

    own_paths = global_state.GlobalState._own_paths
    seen: Counter = Counter()

    def counted(self, site, *links):
        got = own_paths(self, site, *links)
        seen["narrowed, multi-homed"] += got is not None and max(links) > 1
        return got

    def everything(self, site, *links):  # the rule before
        return {site} if max(links) <= 1 else None

    def events(docs, rule) -> list[dict]:
        monkeypatch.setattr(global_state.GlobalState, "_own_paths", rule)
        sim = Simulation(load_world([write(tmp_path, docs, "w.yaml")]), seed=3)
        sim.run()
        return sim.events.take()

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.integers(2, 3), st.integers(1, 3), st.integers(6, 20), st.booleans(), st.booleans())
    def each(homes, more, cars, offline, transit):
        doc = fleet(count=cars, edges=homes + more)
        pop = doc["spec"]["populations"][0]
        pop["attach"] = {"to": {"tier": "edge"}, "homes": homes, "rttMs": 2, "bandwidth": "100Mbps"}
        if transit:
            pop["transit"] = True
        mobility = {"population": "cars", "handovers": "1/5m"} | ({"offline": "1/20m"} if offline else {})
        docs = [doc, TENANT, INFO, scenario(mobility=[mobility], until="30m")]
        narrow, full = events(docs, counted), events(docs, everything)
        assert narrow == full
        seen["games moved"] += sum(1 for e in narrow if e["kind"] in ("migrated", "requeued")
                                   and e.get("task", "").endswith("/game/0"))
        seen["worlds"] += 1

    each()
    assert seen["worlds"] == 8 and seen["narrowed, multi-homed"] > 20 and seen["games moved"] > 5, seen


def test_a_shared_phones_handover_looks_again_at_the_work_around_it_and_decides_as_a_full_recheck(tmp_path,
                                                                                                 monkeypatch):
    """Phones that others' work may use (not private), with two or three
    homes, hand over and go offline, while services bound near each edge
    overflow onto the phones around it (eight random worlds). A phone relays
    nothing: of the work of others, only that bound near a site within the
    widest bound of the phone (before or after) may go there now, or no
    longer; only that is looked at again. The events are those of a run that
    looks at everything again after each change. Not vacuous: such changes
    are narrowed, services run on phones, and some move or wait for it."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from suanli.sim import global_state
    from suanli.sim.shard import Shard
    from suanli.sim.simulation import Simulation

    reach = global_state.GlobalState._reach
    seen: Counter = Counter()

    def counted(self, site, own, before=None, *, after=False):
        got = reach(self, site, own, before, after=after)
        seen["narrowed with others' work around"] += got is not None and after and len(got) > 1
        return got

    could = Shard._could_run_at

    def could_counted(self, task, sites):
        got = could(self, task, sites)
        seen["work around that could not run on the phone"] += not got
        return got

    def events(docs, narrow: bool) -> list[dict]:
        monkeypatch.setattr(global_state.GlobalState, "_reach", counted)
        monkeypatch.setattr(Shard, "_could_run_at", could_counted)
        monkeypatch.setattr(global_state.GlobalState, "_reach_off", not narrow)
        sim = Simulation(load_world([write(tmp_path, docs, "w.yaml")]), seed=3)
        sim.run()
        return sim.events.take()

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.integers(2, 3), st.integers(1, 2), st.integers(8, 20), st.booleans(), st.integers(9, 14))
    def each(homes, more, cars, offline, replicas):
        doc = fleet(count=cars, edges=homes + more)
        pop = doc["spec"]["populations"][0]
        pop["attach"] = {"to": {"tier": "edge"}, "homes": homes, "rttMs": 2, "bandwidth": "100Mbps"}
        pop["nodeGroups"][0]["cpu"] = 8
        doc["spec"]["links"] += [{"between": [f"edge-{e}", f"edge-{e + 1}"], "rttMs": 1, "bandwidth": "10Gbps"}
                                 for e in range(homes + more - 1)]  # a phone a cell away is closer than none
        apps = [{"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": f"near-{e}", "tenant": "t"},
                 "spec": {"components": [{"name": "svc", "lifetime": "service", "replicas": replicas,
                                          "resources": {"cpu": 4, "memory": "2Gi"},
                                          "near": {"site": f"edge-{e}", "maxRttMs": 5}}]}}
                for e in range(homes + more)]
        for e in range(1, homes + more, 2):  # some may use edges only: a phone passing by changes nothing for them
            apps[e]["spec"]["components"][0]["sites"] = {"tier": "edge"}
        arrivals = [{"at": f"{e}m", "app": f"near-{e}"} for e in range(homes + more)] + [{"at": 0, "app": "info"}]
        mobility = {"population": "cars", "handovers": "1/5m"} | ({"offline": "1/20m"} if offline else {})
        sc = scenario(mobility=[mobility], until="30m")
        sc["spec"]["arrivals"] = arrivals
        docs = [doc, TENANT, INFO, *apps, sc]
        narrow, full = events(docs, True), events(docs, False)
        assert narrow == full
        on_phones = [e for e in narrow if e["kind"] == "started" and e.get("task", "").startswith("near-")
                     and e.get("site", "").startswith("car-")]
        seen["services on phones"] += len(on_phones)
        seen["services moved or stopped"] += sum(1 for e in narrow if e["kind"] in ("migrated", "preempted", "lost")
                                                 and e.get("task", "").startswith("near-"))
        seen["worlds"] += 1

    each()
    assert seen["worlds"] == 8 and seen["narrowed with others' work around"] > 20, seen
    assert seen["work around that could not run on the phone"] > 20, seen
    assert seen["services on phones"] > 10 and seen["services moved or stopped"] > 5, seen


def test_a_shared_phone_arriving_near_a_service_draws_its_replica_from_a_farther_phone(tmp_path, monkeypatch):
    """A service bound near edge-0 overflows onto a phone a cell away (3 ms);
    at 10m another phone, with room, hands over to edge-0 itself (2 ms). The
    replica on the farther phone has been set aside (no closer row had room)
    and nothing it watched changed: only the handover's look at the work
    bound near the sites around the phone finds it, and it moves there, as
    in a run that looks at everything again. (Eighty phones far away keep
    the neighbourhood a small share of the rows, so that the set-aside path
    is the one taken.)"""
    from suanli.sim import global_state
    from suanli.sim.simulation import Simulation

    def pop(name: str, at: str, count: int = 1) -> dict:
        return {"name": name, "count": count, "sites": name + "-##",
                "nodeGroups": [{"name": "soc", "count": 1, "arch": "aarch64", "cpu": 8, "memory": "8Gi"}],
                "attach": {"to": {"names": [at]}, "homes": 1, "rttMs": 2, "bandwidth": "100Mbps"}}

    sites = [{"name": f"edge-{e}", "tier": "edge", "nodeGroups": [
        {"name": "n", "count": 1, "arch": "x86_64", "cpu": 16 if e == 0 else 2, "memory": "64Gi"}]} for e in range(3)]
    links = [{"between": ["edge-0", "edge-1"], "rttMs": 1, "bandwidth": "10Gbps"},
             {"between": ["edge-1", "edge-2"], "rttMs": 10, "bandwidth": "10Gbps"}]
    doc = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"}, "spec": {
        "sites": sites, "links": links,
        "populations": [pop("host", "edge-1"), pop("mover", "edge-2"), pop("far", "edge-2", 80)]}}
    app = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "near", "tenant": "t"},
           "spec": {"components": [{"name": "svc", "lifetime": "service", "replicas": 5,
                                    "resources": {"cpu": 4, "memory": "2Gi"},
                                    "near": {"site": "edge-0", "maxRttMs": 5}}]}}
    sc = scenario([{"at": "10m", "kind": "handover", "site": "mover-00", "to": ["edge-0"]}], until="30m")
    path = write(tmp_path, [doc, TENANT, app, sc], "w.yaml")
    runs = []
    for off in (False, True):
        monkeypatch.setattr(global_state.GlobalState, "_reach_off", off)
        sim = Simulation(load_world([path]), seed=3)
        sim.run()
        runs.append(sim.events.take())
    assert runs[0] == runs[1]
    moves = [(e["t"], e["task"], e["to"]) for e in runs[0] if e["kind"] == "migrated"]
    placed = {e["task"]: e["site"] for e in runs[0] if e["kind"] == "placed" and e["t"] == 0}
    assert placed["near/svc/4"] == "host-00" and moves == [(600.0, "near/svc/4", "mover-00/soc-0")], moves


def test_a_private_devices_handover_walks_no_neighbourhood(tmp_path, monkeypatch):
    """A private device's move touches its own work only: its handovers and
    offline spells ask for no sites around it (a walk over every device
    within the widest bound: at 100,000 cars, most of an hour's time)."""
    from suanli.sim import global_state
    from suanli.sim.simulation import Simulation

    seen: Counter = Counter()
    reach = global_state.GlobalState._reach

    def counted_reach(self, *args, **kwargs):
        got = reach(self, *args, **kwargs)
        seen["asked"] += 1
        seen["walked"] += got is not None
        return got

    doc = fleet(count=12, edges=3)
    pop = doc["spec"]["populations"][0]
    pop["private"] = True
    pop["attach"] = {"to": {"tier": "edge"}, "homes": 2, "rttMs": 2, "bandwidth": "100Mbps"}
    docs = [doc, TENANT, INFO, scenario(mobility=[{"population": "cars", "handovers": "1/5m", "offline": "1/20m"}],
                                        until="30m")]
    sim = Simulation(load_world([write(tmp_path, docs, "w.yaml")]), seed=3)
    monkeypatch.setattr(global_state.GlobalState, "_reach", counted_reach)
    sim.run()
    moves = sum(1 for e in sim.events.take() if e["kind"] in ("handover", "deviceOffline", "deviceOnline"))
    assert moves > 20 and seen["asked"] >= 2 * moves and seen["walked"] == 0, (moves, seen)
