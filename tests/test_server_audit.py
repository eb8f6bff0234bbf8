"""Who did what: each request's id in its answer and the access log, and
every change in the audit log with its token, tenant, action, object and
result, readable by admins only (the API and ``suanli audit``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from conftest import EXAMPLES
from serving import ADMIN, Server, free_port, wait
from suanli.server.api import create_api
from suanli.server.controller import Controller
from suanli.server.store import Store, sqlite_url
from suanli.spec.build import load_world

APP = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "web"},
       "spec": {"components": [{"name": "c", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"}}]}}


@pytest.fixture
def api(tmp_path):
    world = load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])
    store = Store(sqlite_url(tmp_path / "suanli.db"))
    admin = store.ensure_admin(None)
    tenant = store.mint("acme-ai")
    with TestClient(create_api(world, store, Controller(world, store, speed=100.0))) as client:
        yield client, store, {"admin": admin, "a": tenant}
    store.close()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def audit_rows(client, token, **params) -> list[dict]:
    return wait(lambda: (r := client.get("/v1/audit", headers=bearer(token), params=params)).status_code == 200
                and r.json() and r.json(), 10)


def test_every_change_is_recorded_with_who_what_and_the_result(api):
    client, store, tokens = api
    token_id = next(t.public_id for t in store.tokens() if t.tenant == "acme-ai")
    created = client.post("/v1/applications", json=APP, headers=bearer(tokens["a"]))
    assert created.status_code == 201
    rid = created.headers["x-request-id"]
    refused = client.post("/v1/tokens", json={"tenant": "acme-ai"}, headers=bearer(tokens["a"]))  # admins only
    assert refused.status_code == 403
    anonymous = client.delete("/v1/applications/web")
    assert anonymous.status_code == 401
    client.get("/v1/tasks", headers=bearer(tokens["a"]))  # a read: not audited
    rows = wait(lambda: len(r := audit_rows(client, tokens["admin"])) >= 3 and r, 10)
    by_id = {r["request_id"]: r for r in rows}
    first = by_id[rid]
    assert (first["token_id"], first["tenant"], first["admin"], first["action"], first["object"], first["status"]) == \
        (token_id, "acme-ai", False, "POST /v1/applications", "/v1/applications", 201)
    second = by_id[refused.headers["x-request-id"]]
    assert second["action"] == "POST /v1/tokens" and second["status"] == 403 and second["tenant"] == "acme-ai"
    third = by_id[anonymous.headers["x-request-id"]]
    assert third["token_id"] is None and third["tenant"] is None and not third["admin"] and third["status"] == 401
    assert third["action"] == "DELETE /v1/applications/{name}" and third["object"] == "/v1/applications/web"
    assert all(r["action"].split()[0] != "GET" for r in rows)
    assert [r["request_id"] for r in audit_rows(client, tokens["admin"], tenant="acme-ai")] == \
        [rid, refused.headers["x-request-id"]]


def test_the_audit_log_is_for_admins_only(api):
    client, _, tokens = api
    assert client.get("/v1/audit", headers=bearer(tokens["a"])).status_code == 403
    assert client.get("/v1/audit").status_code == 401


def test_a_clients_own_request_id_is_kept_when_it_looks_like_one(api):
    client, _, tokens = api
    r = client.post("/v1/applications", json=APP, headers={**bearer(tokens["a"]), "X-Request-ID": "deploy-42.a"})
    assert r.headers["x-request-id"] == "deploy-42.a"
    odd = client.get("/v1/tasks", headers={**bearer(tokens["a"]), "X-Request-ID": "no spaces\tallowed"})
    assert odd.headers["x-request-id"] != "no spaces\tallowed" and len(odd.headers["x-request-id"]) == 16


def test_a_console_sign_in_is_recorded(api):
    client, store, tokens = api
    r = client.post("/login", data={"token": tokens["a"]}, headers={"origin": "http://testserver"},
                    follow_redirects=False)
    assert r.status_code == 303
    rows = audit_rows(client, tokens["admin"])
    login = next(x for x in rows if x["request_id"] == r.headers["x-request-id"])
    assert login["action"] == "POST /login" and login["tenant"] == "acme-ai" and login["status"] == 303


def test_serve_writes_the_request_id_to_its_access_log_and_suanli_audit_reads_the_log(tmp_path):
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        server = Server(f"sqlite:///{tmp_path / 'suanli.db'}", free_port(), log)
        server.start()
        try:
            r = httpx.post(server.url + "/v1/applications", json={**APP, "metadata": {"name": "web"}},
                           headers={**bearer(ADMIN)}, params={"tenant": "acme-ai"})
            rid = r.headers["x-request-id"]
            env = {**os.environ, "SUANLI_SERVER": server.url, "SUANLI_TOKEN": ADMIN}
            out = wait(lambda: rid in (p := subprocess.run(
                [sys.executable, "-c", "from suanli.cli import main; main()", "audit", "-o", "json"],
                capture_output=True, text=True, env=env)).stdout and p, 10)
            row = next(json.loads(line) for line in out.stdout.splitlines() if rid in line)
            assert row["status"] == r.status_code and row["admin"] and row["token_id"].startswith("tok_")
            time.sleep(0.2)
        finally:
            server.proc.terminate()
            server.proc.wait(timeout=30)
    lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
    mine = [x for x in lines if x.get("request_id") == rid]
    assert mine and mine[0]["method"] == "POST" and mine[0]["status"] == r.status_code
    assert mine[0]["token_id"] == row["token_id"]
