"""Populations: a million devices written as a count, a name pattern, a node
template and an attachment rule.

The main property writes a random population, loads it, and checks that it
expands to exactly what it describes: its sites by name and facts, its nodes,
and links drawn by its rule. Then the same world written out as plain sites
and links (the drawn ones) must load into the same fleet: the same nodes,
names, capacities, paths and components.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import tracemalloc
from collections import Counter
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np
import yaml
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from typer.testing import CliRunner

from builders import link, node_group, site
from suanli.cli import app as cli
from suanli.spec.build import load_world

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_cli(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"the CLI raised {result.exception!r}") from result.exception
    return result.exit_code, result.stdout, result.stderr

FLEET = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"}}


def fleet_doc(sites, links, populations=()) -> dict:
    spec = {"sites": sites, "links": links}
    if populations:
        spec["populations"] = list(populations)
    return {**FLEET, "spec": spec}


def write(tmp: Path, docs: list[dict], name: str = "fleet.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


@st.composite
def worlds(draw):
    n_listed = draw(st.integers(2, 5))
    tiers = [draw(st.sampled_from(["cloud", "edge"])) for _ in range(n_listed)]
    listed = [site(f"s-{i}", tiers[i], [node_group(count=draw(st.integers(1, 3)))],
                   region=draw(st.sampled_from(["north", "south"]))) for i in range(n_listed)]
    links = [link(f"s-{i}", f"s-{i + 1}", rtt=draw(st.integers(1, 20))) for i in range(n_listed - 1)]
    to: dict = {}
    if draw(st.booleans()):
        to["tier"] = [draw(st.sampled_from(tiers))]
    picked = [s["name"] for s in listed if not to or s["tier"] in to["tier"]]
    homes = draw(st.integers(1, min(4, len(picked))))  # (a phone in reach of several cells)
    weights = {}
    if draw(st.booleans()):
        for name in draw(st.lists(st.sampled_from(picked), unique=True, max_size=len(picked) - homes)):
            weights[name] = draw(st.sampled_from([0, 0.5, 3]))
    groups = [node_group(f"g{k}", count=draw(st.integers(1, 2)), cpu=draw(st.sampled_from([4, 8])),
                         arch="aarch64") for k in range(draw(st.integers(1, 2)))]
    rtt = draw(st.sampled_from([2, "uniform(1, 5)", "normal(3, 1)", "lognormal(2, 0.5)"]))
    pop = {"name": "cars", "count": draw(st.integers(1, 300)), "sites": "car-#####", "nodeGroups": groups,
           "attach": {"to": to, "homes": homes, "weights": weights, "rttMs": rtt,
                      "bandwidth": draw(st.sampled_from(["100Mbps", "uniform(50Mbps, 200Mbps)"]))},
           "seed": draw(st.integers(0, 5))}
    if draw(st.booleans()):
        pop["region"] = "east"
    if draw(st.booleans()):
        pop["labels"] = {"kind": "car"}
    return listed, links, pop


CASE_TWO_HOMES = (
    [site("s-0", "edge", region="north"), site("s-1", "edge", region="south"), site("s-2", "cloud")],
    [link("s-0", "s-2"), link("s-1", "s-2")],
    {"name": "cars", "count": 200, "sites": "car-#####", "nodeGroups": [node_group("soc", count=2)],
     "attach": {"to": {"tier": ["edge"]}, "homes": 2, "rttMs": "uniform(1, 5)", "bandwidth": "100Mbps"}},
)


@SETTINGS
@example(CASE_TWO_HOMES)
@given(worlds())
def test_a_population_expands_to_exactly_what_it_describes(tmp_path_factory, case):
    listed, links, pop = case
    tmp = tmp_path_factory.mktemp("pop")
    fleet = load_world([write(tmp, [fleet_doc(listed, links, [pop])])]).fleet
    n, L = pop["count"], len(listed)
    assert len(fleet.sites) == L + n
    names = [fleet.sites[L + k].name for k in range(n)]
    assert names == [f"car-{k:05d}" for k in range(n)]
    assert all(fleet.site_index[nm] == L + k for k, nm in enumerate(names))
    assert (fleet.site_table.tier[L:] == 2).all()  # device

    # nodes: the template's groups on every site, named SITE/GROUP-INDEX
    per_site = sum(g["count"] for g in pop["nodeGroups"])
    listed_nodes = sum(g["count"] for s in listed for g in s["nodeGroups"])
    assert fleet.n_nodes == listed_nodes + n * per_site
    pop_nodes = np.arange(listed_nodes, fleet.n_nodes)
    assert np.bincount(fleet.node_site[pop_nodes] - L, minlength=n).tolist() == [per_site] * n
    for node in pop_nodes[:: max(1, len(pop_nodes) // 50)]:
        assert fleet.node_by_name(fleet.node_name(int(node))) == node
    for g in pop["nodeGroups"]:
        assert fleet.node_name(fleet.node_by_name(f"{names[-1]}/{g['name']}-{g['count'] - 1}")) == \
            f"{names[-1]}/{g['name']}-{g['count'] - 1}"

    # links: `homes` distinct ones per site, to sites the rule allows
    la = fleet.link_arrays
    mine = la.a >= L
    at = pop["attach"]
    assert mine.sum() == n * at["homes"]
    ends = la.b[mine].reshape(n, at["homes"])
    assert (la.a[mine].reshape(n, at["homes"]) == np.arange(L, L + n)[:, None]).all()
    if at["homes"] > 1:  # distinct homes
        ordered = np.sort(ends, axis=1)
        assert (ordered[:, 1:] != ordered[:, :-1]).all()
    allowed = {i for i, s in enumerate(listed) if not at["to"] or s["tier"] in at["to"]["tier"]}
    allowed -= {i for i, s in enumerate(listed) if at.get("weights", {}).get(s["name"]) == 0}
    assert set(ends.ravel().tolist()) <= allowed
    if n >= 100 and len(allowed) > at["homes"]:
        assert len(set(ends.ravel().tolist())) > at["homes"]  # the draw spreads over the sites
    rtt = la.rtt_ms[mine]
    if at["rttMs"] == 2:
        assert (rtt == 2).all()
    elif str(at["rttMs"]).startswith("uniform"):
        assert ((rtt >= 1) & (rtt <= 5)).all()
    assert (rtt >= 0).all() and (la.bandwidth_mbps[mine] > 0).all()
    regions = fleet.site_table.region_names()[L:]
    if "region" in pop:
        assert (regions == "east").all()
    else:  # the region of the first home
        assert regions.tolist() == [listed[int(h)].get("region", "") for h in ends[:, 0]]

    # the same world written out site by site and link by link is the same fleet
    plain_sites = listed + [site(nm, "device", pop["nodeGroups"], region=str(regions[k]),
                                 labels=pop.get("labels", {})) for k, nm in enumerate(names)]
    plain_links = links + [{"between": [fleet.sites[int(a)].name, fleet.sites[int(b)].name],
                            "rttMs": float(r), "bandwidth": f"{float(w)!r}Mbps"}
                           for a, b, r, w in zip(la.a[mine], la.b[mine], la.rtt_ms[mine], la.bandwidth_mbps[mine])]
    plain = load_world([write(tmp, [fleet_doc(plain_sites, plain_links)], "plain.yaml")]).fleet
    assert plain.n_nodes == fleet.n_nodes
    order = np.array([plain.node_by_name(fleet.node_name(i)) for i in range(fleet.n_nodes)])
    assert np.array_equal(plain.node_capacity[order], fleet.node_capacity)
    assert np.array_equal(plain.node_site[order], fleet.node_site)
    assert np.array_equal(plain.node_arch[order], fleet.node_arch)
    assert np.array_equal(plain.network.component, fleet.network.component)
    for s in {0, L - 1, L, L + n - 1, L + n // 2}:
        assert np.array_equal(plain.network.rtt_to(s), fleet.network.rtt_to(s))
        assert np.array_equal(plain.network.bandwidth_to(s), fleet.network.bandwidth_to(s))
    same_domain = lambda f, x, y: f.node_fabric[x, 3] == f.node_fabric[y, 3]  # noqa: E731
    a, b = listed_nodes, fleet.n_nodes - 1
    assert same_domain(fleet, a, b) == same_domain(plain, order[a], order[b])
    note(f"{n} sites, {at['homes']} homes, {fleet.n_nodes} nodes")


def test_the_draws_follow_the_seed(tmp_path):
    listed, links, pop = CASE_TWO_HOMES
    one = load_world([write(tmp_path, [fleet_doc(listed, links, [pop])], "a.yaml")]).fleet.link_arrays
    two = load_world([write(tmp_path, [fleet_doc(listed, links, [pop])], "b.yaml")]).fleet.link_arrays
    other = load_world([write(tmp_path, [fleet_doc(listed, links, [{**pop, "seed": 1}])], "c.yaml")]).fleet.link_arrays
    assert np.array_equal(one.b, two.b) and np.array_equal(one.rtt_ms, two.rtt_ms)
    assert not np.array_equal(one.rtt_ms, other.rtt_ms)


def test_a_population_is_scheduled_like_listed_sites(tmp_path):
    """A service bound near a car lands on that car or within the bound."""
    listed, links, pop = CASE_TWO_HOMES
    app = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "a", "tenant": "t"},
           "spec": {"components": [
               {"name": "local", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"},
                "near": {"site": "car-00042", "maxRttMs": 0.2}},
               {"name": "edge", "lifetime": "service", "resources": {"cpu": 20, "memory": "1Gi"},
                "near": {"site": "car-00042", "maxRttMs": 30}}]}}
    tenant = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": {}}
    big = [site(s["name"], s["tier"], [node_group(cpu=64)], region=s.get("region", "")) for s in listed]
    path = write(tmp_path, [fleet_doc(big, links, [pop]), tenant, app])
    code, stdout, stderr = run_cli("schedule", path, "-o", "json")
    assert code == 0, stderr
    placed = {p["task"]: p for p in json.loads(stdout)["placements"]}
    assert placed["a/local/0"]["site"] == "car-00042"
    assert placed["a/edge/0"]["site"].startswith("s-")  # no car has 20 cores


class Validated:
    def __init__(self, tmp: Path, docs: list[dict]) -> None:
        self.returncode, _, self.stderr = run_cli("validate", write(tmp, docs))


validate = Validated


BAD = [
    ({"sites": "car-"}, "spec.populations[0].sites", "one run of '#'"),
    ({"sites": "car-#-#"}, "spec.populations[0].sites", "one run of '#'"),
    ({"sites": "car-##", "count": 101}, "spec.populations[0].sites", "too few for 101 sites: give at least 3"),
    ({"sites": "car_##!"}, "spec.populations[0].sites", "does not make site names"),
    ({"count": 0}, "spec.populations[0].count", ""),
    ({"count": 10_000_001}, "spec.populations[0].count", "at most 10000000"),
    ({"sites": "s-#"}, "spec.populations[0].sites", "names site 's-0', which is already defined"),
    ({"attach": {"to": {"tier": "device"}, "rttMs": 1, "bandwidth": "1Gbps"}}, "spec.populations[0].attach.to",
     "picks 0 listed site(s)"),
    ({"attach": {"to": {"tier": "cloud"}, "homes": 2, "rttMs": 1, "bandwidth": "1Gbps"}},
     "spec.populations[0].attach.to", "homes: 2 needs at least 2"),
    ({"attach": {"to": {}, "weights": {"nope-*": 2}, "rttMs": 1, "bandwidth": "1Gbps"}},
     "spec.populations[0].attach.weights.nope-*", "names no site the selector picks"),
    ({"attach": {"to": {}, "weights": {"s-*": 0}, "rttMs": 1, "bandwidth": "1Gbps"}},
     "spec.populations[0].attach.weights", "leave fewer than 1"),
    ({"attach": {"to": {}, "rttMs": "uniform(5, 1)", "bandwidth": "1Gbps"}}, "spec.populations[0].attach.rttMs",
     "uniform needs LOW <= HIGH"),
    ({"attach": {"to": {}, "rttMs": "gauss(1)", "bandwidth": "1Gbps"}}, "spec.populations[0].attach.rttMs",
     "uniform(LOW, HIGH), normal(MEAN, SD) or lognormal(MEDIAN, SIGMA)"),
    ({"attach": {"to": {}, "rttMs": 1, "bandwidth": "fast"}}, "spec.populations[0].attach.bandwidth",
     "a bandwidth"),
    ({"attach": {"to": {}, "homes": 17, "rttMs": 1, "bandwidth": "1Gbps"}}, "spec.populations[0].attach.homes", ""),
    ({"colour": "red"}, "spec.populations[0].colour", ""),
    ({"nodeGroups": []}, "spec.populations[0].nodeGroups", ""),
]


def test_bad_populations_get_one_clear_message_each(tmp_path):
    listed = [site("s-0", "edge"), site("s-1", "cloud")]
    base = {"name": "cars", "count": 10, "sites": "car-##", "nodeGroups": [node_group("soc")],
            "attach": {"to": {"tier": "edge"}, "rttMs": 2, "bandwidth": "100Mbps"}}
    for change, where, words in BAD:
        out = validate(tmp_path, [fleet_doc(listed, [link("s-0", "s-1")], [{**base, **change}])])
        assert out.returncode == 2, (change, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr
        assert "fleet.yaml:" in out.stderr and where in out.stderr and words in out.stderr, (change, out.stderr)


def test_two_populations_may_not_make_the_same_name(tmp_path):
    listed = [site("s-0", "edge")]
    a = {"name": "a", "count": 10, "sites": "car-##", "nodeGroups": [node_group()]}
    b = {"name": "b", "count": 5, "sites": "car-0#", "nodeGroups": [node_group()]}
    c = {"name": "c", "count": 5, "sites": "van-##", "nodeGroups": [node_group()]}
    out = validate(tmp_path, [fleet_doc(listed, [], [a, b])])
    assert out.returncode == 2 and "spec.populations[1].sites" in out.stderr and "'car-00'" in out.stderr
    assert validate(tmp_path, [fleet_doc(listed, [], [a, c])]).returncode == 0


def test_references_reach_population_sites_and_nodes(tmp_path):
    listed = [site("s-0", "edge")]
    pop = {"name": "cars", "count": 100, "sites": "car-###", "nodeGroups": [node_group("soc")],
           "attach": {"to": {}, "rttMs": 2, "bandwidth": "100Mbps"}}
    scenario = {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
                "spec": {"events": [{"at": "1m", "kind": "linkDown", "between": ["car-007", "s-0"]},
                                    {"at": "2m", "kind": "nodeDown", "node": "car-099/soc-0"}]}}
    assert validate(tmp_path, [fleet_doc(listed, [], [pop]), scenario]).returncode == 0
    scenario["spec"]["events"][1]["node"] = "car-100/soc-0"
    out = validate(tmp_path, [fleet_doc(listed, [], [pop]), scenario])
    assert out.returncode == 2 and "spec.events[1].node" in out.stderr and "car-100/soc-0" in out.stderr
    tenant = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"},
              "spec": {"allowedSites": ["bus-*"]}}
    out = validate(tmp_path, [fleet_doc(listed, [], [pop]), tenant])
    assert out.returncode == 2 and "matches no site" in out.stderr and "car-000..car-099" in out.stderr
    tenant["spec"]["allowedSites"] = ["car-0?5"]
    assert validate(tmp_path, [fleet_doc(listed, [], [pop]), tenant]).returncode == 0
    assert fnmatchcase("car-015", "car-0?5")


def test_a_link_event_names_a_drawn_link(tmp_path):
    listed = [site("s-0", "edge"), site("s-1", "edge")]
    pop = {"name": "cars", "count": 3, "sites": "car-#", "nodeGroups": [node_group("soc")],
           "attach": {"to": {}, "rttMs": 2, "bandwidth": "100Mbps"}}
    fleet = load_world([write(tmp_path, [fleet_doc(listed, [], [pop])], "f.yaml")]).fleet
    home = fleet.sites[int(fleet.link_arrays.b[0])].name
    other = "s-1" if home == "s-0" else "s-0"
    for end, ok in ((home, True), (other, False)):
        scenario = {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
                    "spec": {"events": [{"at": "1m", "kind": "linkDown", "between": ["car-0", end]}]}}
        code, _, err = run_cli("simulate", write(tmp_path, [fleet_doc(listed, [], [pop]), scenario]),
                               "--out", tmp_path / "out", "--until", "2m")
        assert (code == 0) == ok, err
        if not ok:
            assert "spec.events[0].between" in err and f"car-0 is linked to {home}" in err


def per_car_app(each="cars", near="{site}", **spec) -> dict:
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "info", "tenant": "t"},
            "spec": {"each": each, "components": [
                {"name": "music", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"},
                 "near": {"site": near, "maxRttMs": 0.2}},
                {"name": "game", "lifetime": "service", "resources": {"cpu": 20, "memory": "1Gi"},
                 "near": {"site": near, "maxRttMs": 30}, "data": {"source": near}}], **spec}}


TENANT = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": {}}


def test_each_makes_one_application_per_site(tmp_path):
    listed, links, pop = CASE_TWO_HOMES
    pop = {**pop, "count": 30}
    big = [site(s["name"], s["tier"], [node_group(count=4, cpu=64)]) for s in listed]
    path = write(tmp_path, [fleet_doc(big, links, [pop]), TENANT, per_car_app()])
    world = load_world([path])
    assert [a.name for a in world.apps] == [f"info.car-{k:05d}" for k in range(30)]
    assert {a.template for a in world.apps} == {"info"} and {a.tenant for a in world.apps} == {"t"}
    for k, a in enumerate(world.apps):
        car = f"car-{k:05d}"
        assert [c.near.site for c in a.components] == [car, car] and a.components[1].data_source == car
    code, stdout, stderr = run_cli("schedule", path, "-o", "json")
    assert code == 0, stderr
    out = json.loads(stdout)
    placed = {p["task"]: p["site"] for p in out["placements"]}
    assert len(placed) == 60 and not out["unscheduled"]
    for k in range(30):  # each car's music on the car itself, its game (20 cores) off it
        assert placed[f"info.car-{k:05d}/music/0"] == f"car-{k:05d}"
        assert placed[f"info.car-{k:05d}/game/0"].startswith("s-")


def test_each_with_a_site_selector_is_made_per_site(tmp_path):
    """A component that names the sites it may use (a selector: tiers, globs,
    labels) in an application made per site: each copy is made, and placed
    within the selector."""
    listed, links, pop = CASE_TWO_HOMES
    pop = {**pop, "count": 20}
    big = [site(s["name"], s["tier"], [node_group(count=4, cpu=64)]) for s in listed]
    app = per_car_app()
    app["spec"]["components"][1]["sites"] = {"names": ["s-*"], "labels": {}}
    path = write(tmp_path, [fleet_doc(big, links, [pop]), TENANT, app])
    code, stdout, stderr = run_cli("schedule", path, "-o", "json")
    assert code == 0, stderr
    out = json.loads(stdout)
    placed = {p["task"]: p["site"] for p in out["placements"]}
    assert len(placed) == 40 and not out["unscheduled"]
    assert all(placed[f"info.car-{k:05d}/game/0"].startswith("s-") for k in range(20))


def test_an_application_made_per_site_reads_as_one_written_for_its_site_and_keeps_little(tmp_path):
    """A copy made per site keeps its site's number only: its name and
    components are made when read, equal to what a document written for that
    site gives, and it pickles, compares and hashes as that application."""
    listed, links, pop = CASE_TWO_HOMES
    n = 3000
    pop = {**pop, "count": n}
    big = [site(s["name"], s["tier"], [node_group(count=4, cpu=64)]) for s in listed]
    with_apps, without = tmp_path / "apps", tmp_path / "none"
    with_apps.mkdir(), without.mkdir()
    with_apps, without = (write(with_apps, [fleet_doc(big, links, [pop]), TENANT, per_car_app()]),
                          write(without, [fleet_doc(big, links, [pop]), TENANT]))
    load_world([with_apps])  # (what loading imports and caches, before counting)
    held = []
    tracemalloc.start()
    for path in (without, with_apps):
        before = tracemalloc.get_traced_memory()[0]
        held.append(load_world([path]))
        held[-1] = (held[-1], tracemalloc.get_traced_memory()[0] - before)
    tracemalloc.stop()
    world = held[1][0]
    apps_bytes = held[1][1] - held[0][1]
    assert len(world.apps) == n and not held[0][0].apps
    for k in (0, 17, n - 1):
        car = f"car-{k:05d}"
        written = per_car_app(each=None, near=car)
        written["metadata"]["name"] = f"info.{car}"
        del written["spec"]["each"]
        (tmp_path / car).mkdir()
        alone = load_world([write(tmp_path / car, [fleet_doc(big, links, [pop]), TENANT, written])]).apps[0]
        copy = world.apps[k]
        assert copy.name == alone.name and copy.components == alone.components and copy.template == "info"
        assert copy == dataclasses.replace(alone, template="info") and alone != copy  # (the copy has a template)
        assert hash(copy) == hash(dataclasses.replace(alone, template="info"))
        again = pickle.loads(pickle.dumps(copy))
        assert again == copy and again.name == copy.name and again is not copy
        assert type(dataclasses.replace(copy, priority=5)).__name__ == "Application"
        assert copy.components[1].near.site == car and copy.components[1].data_source == car
    # what the copies keep: about 80 bytes a copy (500 when each kept its name and its two components)
    assert 0 < apps_bytes / n < 150, apps_bytes / n


def test_each_arrives_and_is_deleted_as_one_document(tmp_path):
    listed, links, pop = CASE_TWO_HOMES
    pop = {**pop, "count": 5}
    big = [site(s["name"], s["tier"], [node_group(count=4, cpu=64)]) for s in listed]
    scenario = {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
                "spec": {"until": "30m", "arrivals": [{"at": "5m", "app": "info"}],
                         "events": [{"at": "20m", "kind": "delete", "app": "info"}]}}
    path = write(tmp_path, [fleet_doc(big, links, [pop]), TENANT, per_car_app(), scenario])
    code, _, err = run_cli("simulate", path, "--out", tmp_path / "out")
    assert code == 0, err
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    placed = [e for e in events if e.get("kind") == "placed"]
    deleted = [e for e in events if e.get("kind") == "deleted"]
    assert len(placed) == 10 and min(e["t"] for e in placed) >= 300
    assert sorted(e["app"] for e in deleted) == [f"info.car-{k:05d}" for k in range(5)]


def test_each_and_site_placeholders_are_checked(tmp_path):
    listed = [site("s-0", "edge")]
    pop = {"name": "cars", "count": 3, "sites": "car-#", "nodeGroups": [node_group("soc")]}
    fleet = fleet_doc(listed, [], [pop])
    out = validate(tmp_path, [fleet, TENANT, per_car_app(each="vans")])
    assert out.returncode == 2 and "spec.each" in out.stderr and "no population named 'vans'; known: cars" in out.stderr
    app = per_car_app()
    del app["spec"]["each"]
    out = validate(tmp_path, [fleet, TENANT, app])
    assert out.returncode == 2 and "spec.components[0].near.site" in out.stderr and "only with `each" in out.stderr
    assert "spec.components[1].data.source" in out.stderr
    out = validate(tmp_path, [fleet, TENANT, per_car_app(near="{car}")])
    assert out.returncode == 2 and "(or {site} in an application with `each`)" in out.stderr
    assert validate(tmp_path, [fleet, TENANT, per_car_app()]).returncode == 0


def test_ndjson_and_summary_carry_what_json_does(tmp_path):
    listed, links, pop = CASE_TWO_HOMES
    big = [site(s["name"], s["tier"], [node_group(count=4, cpu=64)]) for s in listed]
    impossible = {"name": "huge", "lifetime": "service", "resources": {"cpu": 1000, "memory": "1Gi"}}
    app = per_car_app()
    app["spec"]["components"].append(impossible)
    path = write(tmp_path, [fleet_doc(big, links, [{**pop, "count": 30}]), TENANT, app])
    _, whole, _ = run_cli("schedule", path, "-o", "json")
    _, lines, _ = run_cli("schedule", path, "-o", "ndjson")
    whole = json.loads(whole)
    lines = [json.loads(line) for line in lines.splitlines()]
    kinds = {"hosts": "host", "placements": "placement", "unscheduled": "unscheduled", "unplaced_hosts": "unplacedHosts"}
    rebuilt = {key: [{k: v for k, v in x.items() if k != "kind"} for x in lines if x["kind"] == kind]
               for key, kind in kinds.items()}
    rebuilt["metrics"] = next({k: v for k, v in x.items() if k != "kind"} for x in lines if x["kind"] == "metrics")
    assert rebuilt == whole
    assert len(whole["placements"]) == 60 and len(whole["unscheduled"]) == 30
    code, summary, _ = run_cli("schedule", path, "-o", "summary")
    assert code == 0 and "60/90 tasks placed" in summary and "insufficient cpu" in summary
    assert "info.car-" not in summary  # no line per task


def test_private_sites_take_only_work_bound_near_them(tmp_path):
    """Without `private`, packing puts strangers' work on cars; with it, a car
    holds only its own (and its own still lands there)."""
    listed = [site("s-0", "edge", [node_group(count=2, cpu=64)])]
    pop = {"name": "cars", "count": 20, "sites": "car-##", "nodeGroups": [node_group("soc", cpu=8)],
           "attach": {"to": {}, "rttMs": 2, "bandwidth": "100Mbps"}}
    loose = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "batch", "tenant": "t"},
             "spec": {"components": [{"name": "w", "lifetime": "service", "replicas": 40,
                                      "resources": {"cpu": 2, "memory": "1Gi"}}]}}
    own = per_car_app()
    own["spec"]["components"] = own["spec"]["components"][:1]  # music, on the car itself
    where = {}
    for private in (False, True):
        path = write(tmp_path, [fleet_doc(listed, [], [{**pop, "private": private}]), TENANT, loose, own])
        code, out, err = run_cli("schedule", path, "-o", "json")
        assert code == 0, err
        where[private] = {p["task"]: p["site"] for p in json.loads(out)["placements"]}
    assert sum(s.startswith("car-") for t, s in where[False].items() if t.startswith("batch/")) > 0
    assert not [t for t, s in where[True].items() if t.startswith("batch/") and s.startswith("car-")]
    assert all(where[True][f"info.car-{k:02d}/music/0"] == f"car-{k:02d}" for k in range(20))


def test_ndjson_text_is_the_encoding_of_its_objects(examples):
    """``schedule -o ndjson`` writes hosts and placements as text: the same
    bytes as encoding each object of ``outcome_lines``, on the shared
    examples (explicit VC hosts with groups, device shares) and the city."""
    from suanli.output import outcome_lines, outcome_text_lines
    from suanli.scheduling.static import schedule
    from suanli.spec.build import load_world

    encode = json.JSONEncoder(separators=(",", ":")).encode
    city = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"
    kinds = Counter()
    static = [examples / name for name in ("city-fleet.yaml", "tenants.yaml", "static-heterogeneous.yaml")]
    for paths, sizes in [(static, None), ([examples / "ai-hpc-mix.yaml"], None), ([city], {"cars": "50"})]:
        outcome = schedule(load_world([str(p) for p in paths], sizes), 0, None)
        want = [encode(line) + "\n" for line in outcome_lines(outcome)]
        assert list(outcome_text_lines(outcome)) == want, paths
        for line in outcome_lines(outcome):
            kinds[line["kind"]] += 1
            kinds["group"] += bool(line.get("group")) and line["kind"] == "host"
            kinds["devices"] += bool(line.get("devices"))
    assert kinds["host"] and kinds["placement"] and kinds["group"] and kinds["devices"], kinds
