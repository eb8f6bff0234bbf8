"""A running scheduler's fleet changed in place (``config.grown_fleet`` and
``Simulation.grow_fleet``/``retire_node``): after any sequence of changes the
live nodes are those a fresh build of the same documents has, under the same
names and with the same facts; nodes that stay keep their numbers and their
work; work on a node that goes is placed again elsewhere."""

from __future__ import annotations

import copy

from hypothesis import given, settings, strategies as st

from suanli.server.config import documents, grown_fleet
from suanli.sim.simulation import Simulation
from suanli.spec import schema
from suanli.spec.build import build_application, build_world

TENANT = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": {}}


def fleet_doc(counts: dict[str, int], cpu: dict[str, str], edge: bool) -> dict:
    sites = [{"name": "dc", "tier": "cloud", "nodeGroups": [
        {"name": g, "count": n, "arch": "x86_64", "cpu": cpu[g], "memory": "8Gi"} for g, n in counts.items()]}]
    links = []
    if edge:
        sites.append({"name": "edge", "tier": "edge", "nodeGroups": [
            {"name": "gw", "count": 1, "arch": "arm64", "cpu": "8", "memory": "8Gi"}]})
        links.append({"between": ["dc", "edge"], "rttMs": 5, "bandwidth": "1Gbps"})
    return {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"}, "spec": {"sites": sites,
                                                                                          "links": links}}


def docs_of(fleet: dict):
    docs, problems = documents([("Fleet", "f", fleet), ("Tenant", "t", TENANT)])
    assert not problems, problems
    return docs


def live_nodes(fleet) -> dict[str, tuple]:
    return {fleet.node_name(n): (int(fleet.node_capacity[n, 0]), fleet.groups[int(fleet.node_group[n])].arch)
            for n in range(fleet.n_nodes) if not fleet.retired[n]}


STEP = st.fixed_dictionaries({"a": st.integers(0, 4), "b": st.integers(0, 3), "cpu": st.sampled_from(["4", "8"]),
                              "edge": st.booleans()})
seen = {"grown": 0, "retired": 0, "moved": 0}


@settings(max_examples=40, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=4))
def test_a_fleet_changed_in_place_is_the_fleet_its_documents_build(steps):
    first = fleet_doc({"a": 2, "b": 1}, {"a": "4", "b": "4"}, False)
    sim = Simulation(build_world(docs_of(first)))
    sim.start()
    app = schema.ApplicationDoc.model_validate({
        "apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "w", "tenant": "t"},
        "spec": {"components": [{"name": "c", "lifetime": "service", "replicas": 3,
                                 "resources": {"cpu": "2", "memory": "1Gi"}}]}})
    sim.submit(build_application("t:w", "t", app.spec))
    t = 1.0
    sim.step(t)
    for step in steps:
        doc = fleet_doc({"a": step["a"], "b": step["b"]}, {"a": step["cpu"], "b": "4"}, step["edge"])
        docs = docs_of(copy.deepcopy(doc))
        before = sim.world.fleet
        where = {task: before.node_name(p.host.node) for task, p in sim.state.placements.items()}
        grown, retire, paths = grown_fleet(before, docs)
        if grown is not None:
            sim.grow_fleet(t, grown, paths)
            seen["grown"] += 1
        for node in retire:
            sim.retire_node(t, node, "removed")
        seen["retired"] += len(retire)
        t += 1.0
        sim.step(t)
        fleet = sim.world.fleet
        assert live_nodes(fleet) == live_nodes(build_world(docs_of(doc)).fleet)
        if grown is not None:  # nodes kept their numbers
            assert [fleet.node_name(n) for n in range(before.n_nodes)] == \
                   [before.node_name(n) for n in range(before.n_nodes)]
        gone = {before.node_name(n) for n in retire}
        for task, p in sim.state.placements.items():  # work is on live nodes only; it stayed unless its node went
            node = fleet.node_name(p.host.node)
            assert not fleet.retired[p.host.node], (task, node)
            if task in where and where[task] not in gone:
                assert node == where[task]
            elif task in where:
                seen["moved"] += 1
        assert sim.state.total.tolist() == fleet.total_capacity().tolist()


def test_the_growth_cases_are_not_vacuous():
    print(seen)
    assert seen["grown"] > 5 and seen["retired"] > 5 and seen["moved"] > 0, seen
