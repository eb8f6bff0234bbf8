"""Agents of a real ``suanli serve`` that cannot impersonate, squat or flood.

A node belongs to the agent token that registered it; an agent token is
scoped by the admin to sites, node names and a node count; what a node claims
is bounded by what its site's documents allow; a node that flaps is held
down before it takes new work again; agents, tenants and admins have rate
buckets of their own, and registrations and renewals limits of theirs.

One server for the module (the cases leave no agent or application behind),
and one of its own for the rate buckets, which need a low ``--max-rate``.
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest

from live import suanli
from serving import ADMIN, Server, free_port, wait

from suanli.server.store import Store, sqlite_url
from suanli.spec.loader import validate_document
from suanli.spec.problems import Problem

FLEET = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: edge}
spec:
  sites:
    - name: dc
      tier: cloud
      nodeGroups:
        - {name: cpu, count: 20, arch: x86_64, cpu: 8, memory: 32Gi}
        - {name: gpu, count: 1, arch: x86_64, cpu: 8, memory: 32Gi, accelerators: [{kind: gpu, model: T4, count: 2}]}
    - {name: edge-1, tier: edge}
    - name: edge-2
      tier: edge
      agents: {nodes: 2, node: {cpu: 8, memory: 16Gi, accelerators: [{kind: gpu, count: 1}]}}
    - {name: edge-3, tier: edge}
  links:
    - {between: [dc, edge-1], rttMs: 10, bandwidth: 1Gbps}
    - {between: [dc, edge-2], rttMs: 10, bandwidth: 1Gbps}
    - {between: [dc, edge-3], rttMs: 10, bandwidth: 1Gbps}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: alpha}
"""


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def node(cpu=8, memory="16Gi", **more) -> dict:
    return {"cpu": cpu, "memory": memory, "arch": "x86_64", **more}


def service(name: str, replicas: int, cpu, sites: list[str] | None = None) -> dict:
    component = {"name": "c", "lifetime": "service", "replicas": replicas,
                 "resources": {"cpu": cpu, "memory": "1Gi"}}
    if sites:
        component["sites"] = {"names": sites}
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name},
            "spec": {"components": [component]}}


class Edge:
    """A running server, an HTTP client, the admin's and tenant alpha's headers."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=30)
        self.admin = bearer(ADMIN)
        self.alpha = bearer(self.mint(tenant="alpha")["token"])

    def mint(self, **body) -> dict:
        r = self.http.post("/v1/tokens", json=body, headers=self.admin)
        assert r.status_code == 201, r.text
        return r.json()

    def agent_token(self, sites: list[str], nodes: int = 1, **more) -> dict:
        return bearer(self.mint(role="agent", sites=sites, nodes=nodes, **more)["token"])

    def register(self, token: dict, site: str, name: str | None, lease: str = "60s", **spec) -> httpx.Response:
        body = {"site": site, "lease": lease}
        if name is not None:
            body.update(name=name, node=node(**spec))
        return self.http.post("/v1/agents", json=body, headers=token)

    def node(self, name: str) -> dict | None:
        r = self.http.get(f"/v1/nodes/{name}", headers=self.admin)
        return r.json() if r.status_code == 200 else None

    def events(self, who: dict, after: int) -> list[dict]:
        out = []
        while True:
            page = self.http.get("/v1/events", headers=who, params={"after": after, "limit": 1000}).json()
            if not page:
                return out
            out += page
            after = page[-1]["id"]

    def last_event(self) -> int:
        events = self.events(self.admin, 0)
        return events[-1]["id"] if events else 0

    def leave_all(self) -> None:
        """Every agent's node gone (an admin may delete any)."""
        for a in self.http.get("/v1/agents", headers=self.admin).json():
            if a["state"] != "left":
                assert self.http.delete(f"/v1/agents/{a['name']}", headers=self.admin).status_code == 204


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    where = tmp_path_factory.mktemp("agents")
    (where / "fleet.yaml").write_text(FLEET)
    with open(where / "server.log", "ab") as log:
        server = Server(sqlite_url(where / "s.db"), free_port(), log, speed=1, files=(where / "fleet.yaml",))
        server.start()
        try:
            e = Edge(server)
            yield e
            e.http.close()
        finally:
            server.stop()


@pytest.fixture
def clean(edge):
    """The module's server with no agent's node left when the test is done."""
    yield edge
    edge.leave_all()


# ------------------------------------------------------------------ ownership


def test_a_node_belongs_to_the_agent_token_that_registered_it(clean):
    """Any agent token renewed, re-registered with other capacity, or deleted
    another agent's node."""
    e = clean
    one, other = e.agent_token(["edge-1"], 2), e.agent_token(["edge-1"], 2)
    assert e.register(one, "edge-1", "own", cpu=8).status_code == 201
    wait(lambda: (n := e.node("edge-1/own")) and n["state"] == "ready", what="edge-1/own registered")

    r = e.http.put("/v1/agents/edge-1/own/lease", headers=other)
    assert r.status_code == 403 and "registered by another agent token" in r.json()["detail"], r.text
    r = e.register(other, "edge-1", "own", cpu=1)
    assert r.status_code == 403 and "registered by another agent token" in r.json()["detail"], r.text
    r = e.http.delete("/v1/agents/edge-1/own", headers=other)
    assert r.status_code == 403 and "registered by another agent token" in r.json()["detail"], r.text
    got = e.node("edge-1/own")
    assert got["state"] == "ready" and got["capacity"]["cpu_milli"] == 8000, got

    assert e.http.put("/v1/agents/edge-1/own/lease", headers=one).status_code == 200
    assert e.http.delete("/v1/agents/edge-1/own", headers=e.admin).status_code == 204  # an admin deletes any
    assert e.register(one, "edge-1", "mine", cpu=8).status_code == 201
    assert e.http.delete("/v1/agents/edge-1/mine", headers=one).status_code == 204


# ------------------------------------------------------------------ scope


@pytest.mark.parametrize("body, path", [
    ({"role": "agent"}, "sites"),
    ({"role": "agent", "sites": []}, "sites"),
    ({"role": "agent", "sites": ["edge-*"], "nodes": 0}, "nodes"),
    ({"role": "agent", "sites": ["edge-*"], "nodes": 10**6}, "nodes"),
    ({"role": "agent", "sites": ["edge-*"], "names": ["a" * 300]}, "names[0]"),
    ({"tenant": "alpha", "sites": ["edge-*"]}, "sites"),
    ({"sites": ["edge-*"], "nodes": 3}, "sites"),
], ids=["no-sites", "empty-sites", "no-nodes", "too-many-nodes", "long-glob", "tenant", "admin"])
def test_an_agent_tokens_scope_is_required_and_bounded_and_for_agents_alone(edge, body, path):
    r = edge.http.post("/v1/tokens", json=body, headers=edge.admin)
    assert r.status_code == 422, r.text
    assert [x["path"] for x in r.json()["errors"]] == [path], r.text


def test_an_agent_token_registers_within_its_sites_names_and_node_count(clean):
    e = clean
    env = {"SUANLI_SERVER": e.server.url, "SUANLI_TOKEN": ADMIN}
    made = suanli("token", "create", "--role", "agent", "--sites", "edge-1", "--names", "a*", "--max-nodes", "2",
                  env=env)
    assert made.returncode == 0, made.stderr
    token, token_id = bearer(made.stdout.strip()), re.search(r"tok_[a-z0-9]{8}", made.stderr).group(0)
    listed = {t["id"]: t for t in e.http.get("/v1/tokens", headers=e.admin).json()}
    assert listed[token_id]["scope"] == {"sites": ["edge-1"], "names": ["a*"], "nodes": 2}, listed[token_id]
    table = suanli("token", "list", env=env).stdout
    assert re.search(rf"{token_id}.*edge-1.*a\*.*2", table), table

    r = e.register(token, "edge-3", "a1")
    assert r.status_code == 403 and "edge-1" in r.json()["detail"] and "'edge-3'" in r.json()["detail"], r.text
    r = e.register(token, "edge-1", "b1")
    assert r.status_code == 403 and "'a*'" in r.json()["detail"], r.text
    assert e.register(token, "edge-1", "a1").status_code == 201
    assert e.register(token, "edge-1", "a2").status_code == 201
    assert e.register(token, "edge-1", "a1").status_code == 201  # again: the same node, not one more
    r = e.register(token, "edge-1", "a3")
    assert r.status_code == 403 and "at most 2 nodes" in r.json()["detail"], r.text
    assert e.http.delete("/v1/agents/edge-1/a1", headers=token).status_code == 204
    assert e.register(token, "edge-1", "a3").status_code == 201  # one left: room for another


def test_an_agent_token_from_before_scopes_keeps_its_nodes_but_registers_no_new_one(clean):
    e = clean
    store = Store(e.server.db, upgrade=False)
    try:
        made, row = store.issue(None, role="agent", name="before scopes")
        store.register_agent("edge-1/old", "edge-1", node(cpu="4"), 60.0, row.public_id)
    finally:
        store.close()
    old = bearer(made)
    r = e.register(old, "edge-1", "new")
    assert r.status_code == 403 and "mint a scoped one" in r.json()["detail"], r.text
    assert e.http.put("/v1/agents/edge-1/old/lease", headers=old).status_code == 200
    assert e.http.delete("/v1/agents/edge-1/old", headers=old).status_code == 204


# ------------------------------------------------------------------ capacity claims


def test_capacity_claims_above_what_the_site_allows_are_refused(clean):
    """Any agent token registered a node of cpu 100000 and memory 100Ti anywhere."""
    e = clean
    t = e.agent_token(["edge-*"], 10)
    r = e.register(t, "edge-1", "big", cpu=100000, memory="100Ti")
    assert r.status_code == 422, r.text
    errors = {x["path"]: x["message"] for x in r.json()["errors"]}
    assert set(errors) == {"node.cpu", "node.memory"}, errors
    assert errors["node.cpu"].startswith("at most 8 at site edge-1"), errors  # the fleet's largest group
    r = e.register(t, "edge-1", "gpus", accelerators=[{"kind": "gpu", "model": "T4", "count": 4}])
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "node.accelerators[0].count", r.text
    # a site's own bounds: spec.sites[].agents
    r = e.register(t, "edge-2", "x", cpu=9)
    assert r.status_code == 422 and r.json()["errors"][0]["message"].startswith("at most 8 at site edge-2"), r.text
    assert "agents.node.cpu" in r.json()["errors"][0]["message"], r.text
    assert e.register(t, "edge-2", "x", cpu=8, memory="16Gi").status_code == 201
    assert e.register(t, "edge-2", "y", cpu=1, memory="1Gi",
                      accelerators=[{"kind": "gpu", "model": "T4", "count": 1}]).status_code == 201
    r = e.register(t, "edge-2", "z", cpu=1, memory="1Gi")
    assert r.status_code == 409 and "at most 2 agent nodes" in r.json()["detail"], r.text


@pytest.mark.parametrize("agents, path", [
    ({"nodes": -1}, "spec.sites[0].agents.nodes"),
    ({"node": {"cpu": "lots", "memory": "1Gi"}}, "spec.sites[0].agents.node.cpu"),
    ({"node": {"cpu": 1}}, "spec.sites[0].agents.node.memory"),
    ({"node": {"cpu": 1, "memory": "1Gi", "accelerators": [{"kind": "gpu", "count": 0}]}},
     "spec.sites[0].agents.node.accelerators[0].count"),
    ({"nodes": 1, "nod": {}}, "spec.sites[0].agents.nod"),
], ids=["negative-nodes", "cpu", "no-memory", "no-devices", "unknown-field"])
def test_a_sites_agents_bound_is_checked_with_its_field_path(agents, path):
    doc = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
           "spec": {"sites": [{"name": "e", "tier": "edge", "agents": agents}]}}
    problems = [p for p in validate_document("fleet.yaml", doc) if isinstance(p, Problem)]
    assert [p.path for p in problems] == [path], [str(p) for p in problems]


# ------------------------------------------------------------------ squatting


def test_squatting_stops_at_the_tokens_node_count_and_new_work_lands_on_real_nodes(clean):
    """One token registered 5,000 nodes in 68 s, and 16 of 20 new tasks of a
    tenant landed on them."""
    e = clean
    squatter = e.agent_token(["edge-*"], 3)
    codes = [e.register(squatter, "edge-1", f"fake-{i}", cpu=8, memory="32Gi").status_code for i in range(12)]
    assert codes[:3] == [201] * 3 and codes[3] == 403 and 201 not in codes[3:], codes
    assert e.http.post("/v1/applications", json=service("web", 20, 8), headers=e.alpha).status_code == 201
    try:
        tasks = wait(lambda: (ts := e.http.get("/v1/tasks", params={"app": "web"}, headers=e.alpha).json())
                     and all(t["status"] == "running" for t in ts) and ts, what="web's 20 tasks placed")
        fake = [t["node"] for t in tasks if t["node"].startswith("edge-1/fake-")]
        assert len(fake) <= 3 and sum(t["node"].startswith("dc/") for t in tasks) >= 17, tasks
    finally:
        assert e.http.delete("/v1/applications/web", headers=e.alpha).status_code == 204


# ------------------------------------------------------------------ flapping


class Heart:
    """An agent's renewals, every third of a lease, until stopped."""

    def __init__(self, e: Edge, token: dict, name: str, every: float) -> None:
        self.e, self.token, self.name, self.every = e, token, name, every
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        with httpx.Client(base_url=self.e.server.url, timeout=10) as http:
            while not self.stopping.wait(self.every):
                http.put(f"/v1/agents/{self.name}/lease", headers=self.token)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()


def test_a_flapping_node_takes_no_new_work_while_it_is_held_down(clean):
    """Flapping 8 nodes five times moved a tenant's work 80 times."""
    e = clean
    t = e.agent_token(["edge-3"], 1)
    after = e.last_event()
    assert e.register(t, "edge-3", "f", lease="1s", cpu=4).status_code == 201
    heart = Heart(e, t, "edge-3/f", 0.3)
    assert e.http.post("/v1/applications", json=service("svc", 1, 1, ["edge-3"]), headers=e.alpha).status_code == 201
    try:
        def svc() -> dict:
            return e.http.get("/v1/tasks/svc/c/0", headers=e.alpha).json()

        wait(lambda: svc()["status"] == "running", what="svc running on edge-3/f")
        heart.stop()
        losses = 0
        for _ in range(2):  # lost (no renewal within its lease of 1 s), and at once back
            wait(lambda: e.node("edge-3/f")["state"] == "down", timeout=10, what="edge-3/f lost")
            losses += 1
            assert e.register(t, "edge-3", "f", lease="1s", cpu=4).status_code == 201
        heart = Heart(e, t, "edge-3/f", 0.3)  # now it stays
        wait(lambda: svc()["status"] == "running", timeout=20, what="svc back on edge-3/f once held no more")
        heart.stop()

        events = e.events(e.admin, after)
        holds = [x["body"] for x in events if x["kind"] == "nodeHeldDown"]
        assert [h["hold_s"] for h in holds] == [1, 2] and all(h["node"] == "edge-3/f" for h in holds), holds
        assert [h["losses"] for h in holds] == [1, 2], holds
        placed = [x["t"] for x in events if x["kind"] == "placed" and x["body"].get("node") == "edge-3/f"]
        for h in holds:  # no new work during a hold-down
            assert not [p for p in placed if h["t"] <= p < h["until"]], (holds, placed)
        assert placed and placed[-1] >= holds[-1]["until"], (holds, placed)
        moved = [x for x in e.events(e.alpha, after) if x["kind"] in ("migrated", "requeued", "lost")
                 and x["body"].get("task", "").startswith("svc/")]  # (an earlier test's work may still be leaving)
        assert len(moved) <= losses, moved
    finally:
        heart.stop()
        assert e.http.delete("/v1/applications/svc", headers=e.alpha).status_code == 204


# ------------------------------------------------------------------ rate limits


def test_registrations_and_renewals_have_limits_of_their_own(clean):
    """Registrations per agent token, renewals per node, whatever --max-rate allows."""
    e = clean
    t = e.agent_token(["edge-1"], 30)
    started = time.monotonic()
    answers = [e.register(t, "edge-1", f"r{i}", cpu=1, memory="1Gi") for i in range(20)]
    took = time.monotonic() - started
    codes = [r.status_code for r in answers]
    assert codes[:10] == [201] * 10 and 429 in codes, codes
    assert codes.count(201) <= 10 + int(took) + 1, (codes, took)  # a burst of 10, then 1 a second
    assert all(int(r.headers["retry-after"]) >= 1 for r in answers if r.status_code == 429)
    renewals = [e.http.put("/v1/agents/edge-1/r0/lease", headers=t) for _ in range(20)]
    codes = [r.status_code for r in renewals]
    assert codes[0] == 200 and 429 in codes, codes  # a lease of 60 s: a few renewals, then 4 a lease
    r = next(r for r in renewals if r.status_code == 429)
    assert int(r.headers["retry-after"]) >= 10 and "renewals" in r.json()["detail"], r.text


def test_agents_tenants_and_admins_have_buckets_of_their_own(tmp_path):
    """With --max-rate 5, 30 agent lease renewals made an admin's GET /v1/nodes answer 429."""
    (tmp_path / "fleet.yaml").write_text(FLEET)
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(sqlite_url(tmp_path / "s.db"), free_port(), log, "--max-rate", "5", speed=1,
                        files=(tmp_path / "fleet.yaml",))
        server.start()
        try:
            e = Edge(server)
            t = e.agent_token(["edge-1"], 1)
            assert e.register(t, "edge-1", "n", lease="10s", cpu=1, memory="1Gi").status_code == 201
            renewals = [e.http.put("/v1/agents/edge-1/n/lease", headers=t) for _ in range(30)]
            codes = [r.status_code for r in renewals]
            assert codes[0] == 200 and 429 in codes, codes
            assert all(int(r.headers["retry-after"]) >= 1 for r in renewals if r.status_code == 429)
            assert e.http.get("/v1/nodes", headers=e.admin).status_code == 200
            assert e.http.get("/v1/fleet", headers=e.alpha).status_code == 200
            e.http.close()
        finally:
            server.stop()


def test_an_agent_declares_a_shareable_accelerator_and_two_halves_share_it(clean):
    """``suanli agent --accelerator gpu:T4:1:shareable``: tasks asking half
    a device each go to that one device together; a malformed accelerator is
    refused with what is expected."""
    import os
    import signal
    import subprocess
    import sys

    e = clean
    token = e.mint(role="agent", sites=["edge-1"], nodes=1)["token"]
    env = {**os.environ, "SUANLI_TOKEN": token, "SUANLI_SERVER": e.server.url}
    bad = suanli("agent", "--site", "edge-1", "--name", "soc", "--cpu", "8", "--memory", "16Gi",
                 "--accelerator", "npu:Orin:1:shared", env=env, timeout=60)
    assert bad.returncode == 2 and "expected KIND:MODEL:COUNT[:shareable]" in bad.stderr, bad.stderr
    agent = subprocess.Popen([sys.executable, "-c", "from suanli.cli import main; main()", "agent", "--site", "edge-1",
                              "--name", "soc", "--cpu", "8", "--memory", "16Gi", "--arch", "aarch64",
                              "--accelerator", "gpu:T4:1:shareable", "--lease", "30s"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    halves = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "halves"},
              "spec": {"components": [{"name": "c", "lifetime": "service", "replicas": 2, "sites": {"names": ["edge-1"]},
                                       "resources": {"cpu": 1, "memory": "1Gi",
                                                     "accelerators": [{"kind": "gpu", "count": 0.5}]}}]}}
    try:
        wait(lambda: agent.poll() is not None or (e.node("edge-1/soc") or {}).get("state") == "ready",
             what="edge-1/soc registered")
        assert agent.poll() is None, agent.stderr.read()
        assert e.http.post("/v1/applications", json=halves, headers=e.alpha).status_code == 201
        tasks = wait(lambda: (ts := e.http.get("/v1/tasks", params={"app": "halves"}, headers=e.alpha).json())
                     and all(t["status"] == "running" for t in ts) and ts, what="both halves on the one device")
        assert {t["node"] for t in tasks} == {"edge-1/soc"}, tasks
    finally:
        e.http.delete("/v1/applications/halves", headers=e.alpha)
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


def test_work_larger_than_every_node_is_inadmissible_until_the_fleet_grows(clean):
    """A task asking 4 GPUs on one node, where the largest node has 2: it is
    accepted and waits inadmissible (the bound in figures, first); when the
    admin adds a site whose node has 4, it is placed there."""
    import yaml

    e = clean
    big = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "wide"},
           "spec": {"components": [{"name": "c", "lifetime": "service",
                                    "resources": {"cpu": 1, "memory": "1Gi",
                                                  "accelerators": [{"kind": "gpu", "count": 4}]}}]}}
    fleet = next(d for d in yaml.safe_load_all(FLEET) if d["kind"] == "Fleet")
    grown = {**fleet, "spec": {**fleet["spec"], "sites": [*fleet["spec"]["sites"], {
        "name": "dc-2", "tier": "cloud", "nodeGroups": [{"name": "wide", "count": 1, "arch": "x86_64", "cpu": 8,
                                                         "memory": "32Gi",
                                                         "accelerators": [{"kind": "gpu", "model": "T4", "count": 4}]}]}],
        "links": [*fleet["spec"]["links"], {"between": ["dc", "dc-2"], "rttMs": 1, "bandwidth": "10Gbps"}]}}
    assert e.http.post("/v1/applications", json=big, headers=e.alpha).status_code == 201
    try:
        task = wait(lambda: (t := e.http.get("/v1/tasks/wide/c/0", headers=e.alpha).json()).get("why") and t,
                    what="the task explained")
        first = task["why"][0]
        assert task["status"] == "pending" and first["code"] == "inadmissible" and first["binding"], task
        assert first["reason"] == "inadmissible: it asks 4 gpu on one node, and the most any node of the fleet has is 2"
        assert task["admission"] == "inadmissible", task  # a state of its own, found by it
        found = e.http.get("/v1/tasks", params={"admission": "inadmissible"}, headers=e.alpha).json()
        assert [t["task"] for t in found] == ["wide/c/0"], found
        assert "wide/c/0" not in [t["task"] for t in e.http.get("/v1/tasks", params={"admission": "admitted"},
                                                                  headers=e.alpha).json()]
        assert e.http.get("/v1/tasks", params={"admission": "inadmissible", "status": "running"},
                          headers=e.alpha).status_code == 422
        assert e.http.put("/v1/fleets/edge", json=grown, headers=e.admin).status_code == 200
        placed = wait(lambda: (t := e.http.get("/v1/tasks/wide/c/0", headers=e.alpha).json())["status"] == "running"
                      and t, what="the task placed on the new node")
        assert placed["node"] == "dc-2/wide-0" and placed["admission"] is None, placed
    finally:
        e.http.delete("/v1/applications/wide", headers=e.alpha)
        e.http.put("/v1/fleets/edge", json=fleet, headers=e.admin)
