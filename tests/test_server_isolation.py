"""Tenant isolation on every route: tenant B cannot read, list, change or
delete tenant A's objects, and cannot learn that they exist.

Every route of the API is in ``CASES``; a route added without a case fails
``test_every_route_has_an_isolation_case``. Each case runs as B after A has
an application running, and checks what B gets; then A's objects are checked
to be as they were. The machine is kept busy meanwhile (``busy``).
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from test_server_api import A, B, app_doc, bearer, start, submit

from suanli.executors.tasks import safe
from suanli.server.store import sqlite_url

A_APP, A_TASK, A_VC = "web", "web/c/0", f"{A}/default"
pytestmark = pytest.mark.usefixtures("busy")  # a loaded machine


def _no_trace_of_a(body) -> None:
    """A's name appears nowhere (B has an application of the same name: its
    own tasks may appear, with B as their tenant)."""
    assert A not in json.dumps(body)


def _only_b_events(events: list[dict]) -> None:
    _no_trace_of_a(events)
    for e in events:
        assert e.get("tenant", B) == B and e.get("vc", B).startswith(B), e


def _not_found_like_a_missing_one(live, method: str, path: str, missing: str, **kw) -> None:
    """A's object answers exactly as an object that does not exist."""
    got = live.client.request(method, path, headers=live.b, **kw)
    none = live.client.request(method, missing, headers=live.b, **kw)
    assert got.status_code == none.status_code == 404
    g, n = got.json(), none.json()
    assert (g["title"], g["status"], g["type"]) == (n["title"], n["status"], n["type"])
    assert got.headers["content-type"] == "application/problem+json"


def apps_list(live):
    assert live.client.get("/v1/applications", headers=live.b).json() == []


def app_get(live):
    _not_found_like_a_missing_one(live, "GET", f"/v1/applications/{A_APP}", "/v1/applications/nothing")
    _not_found_like_a_missing_one(live, "GET", f"/v1/applications/{A_APP}?tenant={A}", "/v1/applications/nothing")


def app_delete(live):
    _not_found_like_a_missing_one(live, "DELETE", f"/v1/applications/{A_APP}", "/v1/applications/nothing")
    _not_found_like_a_missing_one(live, "DELETE", f"/v1/applications/{A_APP}?tenant={A}",
                                  "/v1/applications/nothing")


def app_create(live):
    doc = app_doc(A_APP, 1)
    doc["metadata"]["tenant"] = A
    r = submit(live, live.b, doc)
    assert r.status_code == 403
    _no_trace_of_a(r.json()["detail"])
    r = submit(live, live.b, app_doc(A_APP, 1), key="same-key-as-a")  # B's own, with A's name and key
    assert r.status_code == 201 and r.json()["tenant"] == B
    assert live.client.delete(f"/v1/applications/{A_APP}", headers=live.b).status_code == 204  # B's, gone


def app_put(live):
    doc = app_doc(A_APP, 1)
    doc["metadata"]["tenant"] = A
    r = live.client.put(f"/v1/applications/{A_APP}", json=doc, headers=live.b)
    assert r.status_code == 403
    _no_trace_of_a(r.json()["detail"])
    r = live.client.put(f"/v1/applications/{A_APP}", json=app_doc(A_APP, 2), headers=live.b)  # B's own, A's name
    assert r.status_code == 201 and r.json()["tenant"] == B and r.json()["change"] == "created"
    assert live.client.delete(f"/v1/applications/{A_APP}", headers=live.b).status_code == 204  # B's, gone


def app_rollout(live):
    _not_found_like_a_missing_one(live, "GET", f"/v1/applications/{A_APP}/rollout",
                                  "/v1/applications/nothing/rollout")
    _not_found_like_a_missing_one(live, "GET", f"/v1/applications/{A_APP}/rollout?tenant={A}",
                                  "/v1/applications/nothing/rollout")


def app_undo(live):
    _not_found_like_a_missing_one(live, "POST", f"/v1/applications/{A_APP}/rollout/undo",
                                  "/v1/applications/nothing/rollout/undo")
    _not_found_like_a_missing_one(live, "POST", f"/v1/applications/{A_APP}/rollout/undo?tenant={A}",
                                  "/v1/applications/nothing/rollout/undo")


def app_scale(live):
    for query in ("", f"?tenant={A}"):
        _not_found_like_a_missing_one(live, "POST", f"/v1/applications/{A_APP}/scale{query}",
                                      "/v1/applications/nothing/scale", json={"replicas": 5})


def tasks_list(live):
    assert live.tasks(live.b) == []
    assert live.tasks(live.b, app=A_APP) == []
    assert live.client.get("/v1/tasks", headers=live.b, params={"status": "running"}).json() == []


def task_get(live):
    _not_found_like_a_missing_one(live, "GET", f"/v1/tasks/{A_TASK}", "/v1/tasks/nothing/c/0")
    _not_found_like_a_missing_one(live, "GET", f"/v1/tasks/{A_TASK}?tenant={A}", "/v1/tasks/nothing/c/0")


def events_list(live):
    events = live.client.get("/v1/events", headers=live.b, params={"after": 0, "limit": 1000}).json()
    _only_b_events([e["body"] for e in events])


def events_stream(live):
    got = []
    with live.client.stream("GET", "/v1/events/stream", headers=live.b, params={"after": 0}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line[6:]))
            if "keep-alive" in line:  # everything recorded has been sent
                break
    _only_b_events(got)


def task_logs(live):
    assert live.client.get(f"/v1/logs/{A_TASK}", headers=live.a).text == f"the log of {A}\n"
    _not_found_like_a_missing_one(live, "GET", f"/v1/logs/{A_TASK}", "/v1/logs/nothing/c/0")
    _not_found_like_a_missing_one(live, "GET", f"/v1/logs/{A_TASK}?tenant={A}", "/v1/logs/nothing/c/0")


def vcs_list(live):
    vcs = live.client.get("/v1/vcs", headers=live.b).json()
    assert [v["name"] for v in vcs] == [f"{B}/default"]
    _no_trace_of_a(vcs)


def vc_get(live):
    _not_found_like_a_missing_one(live, "GET", f"/v1/vcs/{A_VC}", "/v1/vcs/nothing/default")


def tenants_list(live):
    assert [t["name"] for t in live.client.get("/v1/tenants", headers=live.b).json()] == [B]


def tenant_get(live):
    _not_found_like_a_missing_one(live, "GET", f"/v1/tenants/{A}", "/v1/tenants/nothing")


def fleet_views(live):
    """Fleet, sites and nodes are shared; they name no tenant's objects."""
    for path in ("/v1/fleet", "/v1/sites", "/v1/nodes"):
        r = live.client.get(path, headers=live.b)
        assert r.status_code == 200
        _no_trace_of_a(r.json())


def node_get(live):
    node = live.tasks(live.a)[0]["node"]
    r = live.client.get(f"/v1/nodes/{node}", headers=live.b)
    assert r.status_code == 200
    _no_trace_of_a(r.json())


def node_actions(live):
    node = live.tasks(live.a)[0]["node"]
    for action in ("cordon", "drain", "uncordon"):
        assert live.client.post(f"/v1/nodes/{node}/{action}", headers=live.b).status_code == 403
    assert live.store.node_states() == {}


def plan(live):
    r = live.client.get("/v1/plan", headers=live.b)
    assert r.status_code == 403
    _no_trace_of_a(r.json())


def audit(live):
    for params in ({}, {"tenant": A}, {"tenant": B}):
        r = live.client.get("/v1/audit", params=params, headers=live.b)
        assert r.status_code == 403
        _no_trace_of_a(r.json())


def tokens(live):
    for body in ({"tenant": A}, {"tenant": B}, {}, {"tenant": B, "ttl": "1h", "name": "mine"}):
        assert live.client.post("/v1/tokens", json=body, headers=live.b).status_code == 403


def _token_ids(live) -> dict[str | None, str]:
    """The id of an active token of each tenant (None: an admin's)."""
    return {r.tenant: r.public_id for r in live.store.tokens() if r.revoked_at is None}


def tokens_list(live):
    r = live.client.get("/v1/tokens", headers=live.b)
    assert r.status_code == 403
    _no_trace_of_a(r.json())
    for token_id in _token_ids(live).values():
        assert token_id not in r.text


def token_revoke(live):
    """B revokes no token: not A's, not an admin's, not its own; an unknown id answers
    the same 403, so B learns nothing of which ids exist."""
    ids = _token_ids(live)
    for token_id in (ids[A], ids[None], ids[B], "tok_nothing0"):
        r = live.client.delete(f"/v1/tokens/{token_id}", headers=live.b)
        assert r.status_code == 403
        _no_trace_of_a(r.json())
    assert _token_ids(live) == ids
    assert live.client.get("/v1/applications", headers=live.a).status_code == 200


def config_changes(live):
    """B's member token changes no configuration: not A's tenant or VCs (answered
    as a missing one where it names them), nor anything else."""
    tenant = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": A}, "spec": {"weight": 9}}
    r = live.client.put(f"/v1/tenants/{A}", headers=live.b, json=tenant)
    assert r.status_code == 403
    _no_trace_of_a(r.json()["detail"])
    vc = {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": {"name": "x", "tenant": A},
          "spec": {"hostGroups": []}}
    r = live.client.put("/v1/vcs/x", headers=live.b, json=vc)
    assert r.status_code == 403 and A not in r.json()["detail"]
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"}, "spec": {"sites": []}}
    assert live.client.put("/v1/fleets/f", headers=live.b, json=fleet).status_code == 403
    _not_found_like_a_missing_one(live, "DELETE", f"/v1/tenants/{A}", "/v1/tenants/nothing")
    _not_found_like_a_missing_one(live, "DELETE", f"/v1/vcs/{A_VC}", "/v1/vcs/nothing")
    assert live.client.delete("/v1/fleets/f", headers=live.b).status_code == 404


def config_lists(live):
    for path in ("tenants", "vcs", "fleets"):
        r = live.client.get(f"/v1/config/{path}", headers=live.b)
        assert r.status_code == 200
        _no_trace_of_a(r.json())


def agents(live):
    """Only an agent's (or an admin's) token registers nodes or sees agents."""
    body = {"site": "edge-1", "name": "n1", "node": {"cpu": "4", "memory": "8Gi", "arch": "x86_64"}}
    assert live.client.post("/v1/agents", headers=live.b, json=body).status_code == 403
    assert live.client.put("/v1/agents/edge-1/n1/lease", headers=live.b).status_code == 403
    assert live.client.delete("/v1/agents/edge-1/n1", headers=live.b).status_code == 403
    assert live.client.get("/v1/agents", headers=live.b).status_code == 403


def agents_work(live):
    """A tenant's token reads no node's assignments nor any task's state, and
    writes no report, log or state: the routes of agents that execute are an
    agent's (of the node it registered) or an admin's."""
    c, b, task = live.client, live.b, {"task": f"a:{A_APP}/c/0"}
    assert c.get("/v1/agents/edge-1/n1/assignments", headers=b).status_code == 403
    assert c.post("/v1/agents/edge-1/n1/reports", headers=b, json={"reports": [
        {"task": f"a:{A_APP}/c/0", "run_id": 1, "kind": "exited", "body": {"code": 1}}]}).status_code == 403
    assert c.post("/v1/agents/edge-1/n1/logs", headers=b, params=task, content=b"forged").status_code == 403
    assert c.put("/v1/agents/edge-1/n1/state", headers=b, params=task, content=b"forged").status_code == 403
    assert c.get("/v1/agents/edge-1/n1/state", headers=b, params=task).status_code == 403


CASES = {
    ("GET", "/v1/applications"): apps_list,
    ("POST", "/v1/applications"): app_create,
    ("GET", "/v1/applications/{name}"): app_get,
    ("DELETE", "/v1/applications/{name}"): app_delete,
    ("PUT", "/v1/applications/{name}"): app_put,
    ("GET", "/v1/applications/{name}/rollout"): app_rollout,
    ("POST", "/v1/applications/{name}/rollout/undo"): app_undo,
    ("POST", "/v1/applications/{name}/scale"): app_scale,
    ("GET", "/v1/tasks"): tasks_list,
    ("GET", "/v1/tasks/{task:path}"): task_get,
    ("GET", "/v1/logs/{task:path}"): task_logs,
    ("GET", "/v1/events"): events_list,
    ("GET", "/v1/events/stream"): events_stream,
    ("GET", "/v1/vcs"): vcs_list,
    ("GET", "/v1/vcs/{name:path}"): vc_get,
    ("GET", "/v1/tenants"): tenants_list,
    ("GET", "/v1/tenants/{name}"): tenant_get,
    ("GET", "/v1/fleet"): fleet_views,
    ("GET", "/v1/sites"): fleet_views,
    ("GET", "/v1/nodes"): fleet_views,
    ("GET", "/v1/nodes/{node:path}"): node_get,
    ("POST", "/v1/nodes/{node:path}/cordon"): node_actions,
    ("POST", "/v1/nodes/{node:path}/drain"): node_actions,
    ("POST", "/v1/nodes/{node:path}/uncordon"): node_actions,
    ("GET", "/v1/plan"): plan,
    ("GET", "/v1/audit"): audit,
    ("POST", "/v1/tokens"): tokens,
    ("GET", "/v1/tokens"): tokens_list,
    ("DELETE", "/v1/tokens/{token_id}"): token_revoke,
    **{(m, f"/v1/{p}"): config_changes for p in ("tenants/{name}", "vcs/{name:path}", "fleets/{name}")
       for m in ("PUT", "DELETE")},
    **{("GET", f"/v1/config/{p}"): config_lists for p in ("tenants", "vcs", "fleets")},
    ("POST", "/v1/agents"): agents,
    ("GET", "/v1/agents"): agents,
    ("PUT", "/v1/agents/{name:path}/lease"): agents,
    ("DELETE", "/v1/agents/{name:path}"): agents,
    ("GET", "/v1/agents/{name:path}/assignments"): agents_work,
    ("POST", "/v1/agents/{name:path}/reports"): agents_work,
    ("POST", "/v1/agents/{name:path}/logs"): agents_work,
    ("PUT", "/v1/agents/{name:path}/state"): agents_work,
    ("GET", "/v1/agents/{name:path}/state"): agents_work,
}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from test_server_api import Live

    from suanli.spec.build import load_world
    from conftest import EXAMPLES

    world = load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])
    where = tmp_path_factory.mktemp("iso")
    (where / "logs").mkdir()
    for tenant in (A, B):  # as a real executor keeps them: one file per task, named with its tenant
        (where / "logs" / f"{safe(f'{tenant}:{A_TASK}')}.log").write_text(f"the log of {tenant}\n")
    store, admin, controller, api = start(world, sqlite_url(where / "s.db"), logs_dir=where / "logs")
    with TestClient(api) as client:
        live = Live(client, store, controller, bearer(admin), bearer(store.mint(A)), bearer(store.mint(B)))
        assert submit(live, live.a, app_doc(A_APP, 2), key="same-key-as-a").status_code == 201
        live.wait(lambda: all(t["status"] == "running" for t in live.tasks(live.a)), what="A's tasks running")
        yield live
    store.close()


def test_every_route_has_an_isolation_case(live):
    routes = {(m, r.path) for r in live.client.app.routes for m in getattr(r, "methods", ())
              if r.path.startswith("/v1/") and m != "HEAD"}
    assert routes == set(CASES)


@pytest.mark.parametrize("route", list(CASES), ids=[f"{m} {p}" for m, p in CASES])
def test_tenant_b_cannot_reach_tenant_a(live, route):
    before = (live.client.get(f"/v1/applications/{A_APP}", headers=live.a).json(), live.tasks(live.a))
    CASES[route](live)
    after = (live.client.get(f"/v1/applications/{A_APP}", headers=live.a).json(), live.tasks(live.a))
    assert before[0] == after[0]
    assert [(t["task"], t["node"]) for t in before[1]] == [(t["task"], t["node"]) for t in after[1]]
