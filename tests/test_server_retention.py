"""Retention: the store does not keep everything forever. Events are kept by
age and count, a deleted application's events go, an application whose
every task ended goes after a while (and the scheduler forgets it), and an
application made again under an old name has a history of its own."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from conftest import EXAMPLES
from serving import wait
from suanli.server.api import Limits, create_api
from suanli.server.controller import Controller
from suanli.server.store import Store, sqlite_url
from suanli.spec.build import load_world

A = "acme-ai"


def app_doc(name: str, lifetime: str = "service", **extra) -> dict:
    comp = {"name": "c", "lifetime": lifetime, "replicas": 2, "resources": {"cpu": 1, "memory": "1Gi"}, **extra}
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name}, "spec": {"components": [comp]}}


def serve(tmp_path, **limits):
    world = load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])
    store = Store(sqlite_url(tmp_path / "suanli.db"))
    controller = Controller(world, store, speed=100.0)
    api = create_api(world, store, controller, Limits(**{"prune_every_s": 0.2, **limits}))
    return store, controller, api, {"Authorization": f"Bearer {store.mint(A)}"}


def statuses(client, who, app) -> list[str]:
    return [t["status"] for t in client.get("/v1/tasks", params={"app": app}, headers=who).json()]


def test_an_application_made_again_has_a_history_of_its_own(tmp_path):
    store, _, api, who = serve(tmp_path, keep_events_s=None, keep_ended_s=None)
    with TestClient(api) as client:
        assert client.post("/v1/applications", json=app_doc("web"), headers=who).status_code == 201
        wait(lambda: statuses(client, who, "web") == ["running", "running"], 10)
        assert client.delete("/v1/applications/web", headers=who).status_code == 204
        again = time.time()
        assert client.post("/v1/applications", json=app_doc("web"), headers=who).status_code == 201
        wait(lambda: statuses(client, who, "web") == ["running", "running"], 10)
        history = client.get("/v1/tasks/web/c/0", headers=who).json()["history"]
        assert [e["kind"] for e in history] == ["submitted", "placed", "started"], history
        assert all(e["t"] >= again - 0.001 for e in history)  # nothing of the first application's life
    store.close()


def test_a_deleted_applications_events_are_pruned(tmp_path):
    store, _, api, who = serve(tmp_path, keep_events_s=None, keep_ended_s=None)
    with TestClient(api) as client:
        client.post("/v1/applications", json=app_doc("web"), headers=who)
        client.post("/v1/applications", json=app_doc("api"), headers=who)
        wait(lambda: statuses(client, who, "web") == ["running", "running"] == statuses(client, who, "api"), 10)
        before = store.counts()["events"]
        assert before >= 12
        client.delete("/v1/applications/web", headers=who)
        wait(lambda: store.counts()["events"] <= before - 6, 10)  # web's own (and its deletion's) are gone
        kept = store.events(A, 0, 1000)
        assert kept and all(e.task.startswith("api/") for e in kept if e.task)
    store.close()


def test_events_are_kept_by_count_and_by_age(tmp_path):
    store, _, api, who = serve(tmp_path, keep_events=5, keep_ended_s=None)
    with TestClient(api) as client:
        for name in ("a1", "a2", "a3"):
            client.post("/v1/applications", json=app_doc(name), headers=who)
        wait(lambda: all(statuses(client, who, n) == ["running", "running"] for n in ("a1", "a2", "a3")), 10)
        wait(lambda: store.counts()["events"] <= 5, 10)
        newest = store.events(None, 0, 1000)
        assert [e.id for e in newest] == sorted(e.id for e in newest) and len(newest) == 5
    store.close()
    (tmp_path / "age").mkdir()
    store, _, api, who = serve(tmp_path / "age", keep_events_s=0.5, keep_ended_s=None)
    with TestClient(api) as client:
        client.post("/v1/applications", json=app_doc("web"), headers=who)
        wait(lambda: statuses(client, who, "web") == ["running", "running"], 10)
        assert store.counts()["events"] > 0
        wait(lambda: store.counts()["events"] == 0, 10)  # all older than half a second
    store.close()


def test_an_application_whose_tasks_all_ended_goes_after_a_while_and_the_scheduler_forgets_it(tmp_path):
    store, controller, api, who = serve(tmp_path, keep_ended_s=1.0)
    with TestClient(api) as client:
        client.post("/v1/applications", json=app_doc("jobs", "job", duration="10s"), headers=who)  # 0.1 s at 100x
        client.post("/v1/applications", json=app_doc("web"), headers=who)
        wait(lambda: statuses(client, who, "jobs") == ["finished", "finished"], 10)
        assert client.get("/v1/applications/jobs", headers=who).status_code == 200
        wait(lambda: client.get("/v1/applications/jobs", headers=who).status_code == 404, 10)
        assert statuses(client, who, "web") == ["running", "running"]  # a service never ends: kept
        counts = store.counts()
        assert counts["applications"] == 1 and counts["tasks"] == 2
        assert all(not e.task or e.task.startswith("web/") for e in store.events(A, 0, 1000))
        # the scheduler forgot it: no unit, no record (a long-running server keeps no task it no longer has)
        wait(lambda: controller.call(lambda sim: f"{A}:jobs" not in sim.ledger.by_app
                                     and not any(t.startswith(f"{A}:jobs/") for t in sim.ledger.tasks)), 10)
        assert controller.call(lambda sim: sum(sim.ledger.counts.values())) == 2  # web's two
    store.close()


def test_serve_refuses_bad_retention_options_each_by_its_name(tmp_path):
    import subprocess
    import sys

    bad = {"--keep-events": "soon", "--keep-ended": "-1h", "--keep-events-count": "-3", "--prune-every": "often"}
    r = subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", "serve",
                        str(EXAMPLES / "city-fleet.yaml"), str(EXAMPLES / "tenants.yaml"),
                        "--db", f"sqlite:///{tmp_path / 'x.db'}", *(x for kv in bad.items() for x in kv)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert all(flag in r.stderr for flag in bad) and "4 problems found" in r.stderr, r.stderr
