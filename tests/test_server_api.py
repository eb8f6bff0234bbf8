"""The REST API of ``suanli serve``, against SQLite and against a real PostgreSQL.

Each test gets a new database, the city fleet and its tenants, and the API
in process (its controller thread running the scheduler on a wall clock
sped up 100 times). Tokens: an admin's, and two tenants' (acme-ai and
city-services).
"""

from __future__ import annotations

from collections import Counter

import json
import os
import time
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from conftest import EXAMPLES
from postgres import Postgres
from serving import wait

from suanli.server.api import Limits, create_api
from suanli.server.controller import Controller
from suanli.server.store import Store, sqlite_url
from suanli.spec.build import load_world

pytestmark = pytest.mark.long(40)

A, B = "acme-ai", "city-services"


@pytest.fixture(scope="session")
def postgres():
    try:
        pg = Postgres()
    except (FileNotFoundError, RuntimeError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is needed under CI: {exc}")
        pytest.skip(f"no PostgreSQL here: {exc}")
    yield pg
    pg.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "suanli.db")
    return request.getfixturevalue("postgres").fresh_database()


@pytest.fixture(scope="module")
def world():
    return load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])


@dataclass
class Live:
    client: TestClient
    store: Store
    controller: Controller
    admin: dict
    a: dict
    b: dict

    def wait(self, pred, timeout: float = 10.0, what: str = "the condition"):
        return wait(pred, timeout, what)

    def tasks(self, who: dict, **params) -> list[dict]:
        r = self.client.get("/v1/tasks", headers=who, params=params)
        assert r.status_code == 200, r.text
        return r.json()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def start(world, url: str, limits: Limits | None = None, logs_dir=None):
    store = Store(url)
    admin = store.ensure_admin(None)
    controller = Controller(world, store, speed=100.0)
    return store, admin, controller, create_api(world, store, controller, limits, logs_dir=logs_dir)


@pytest.fixture
def live(world, db_url):
    store, admin, controller, api = start(world, db_url)
    with TestClient(api) as client:
        yield Live(client, store, controller, bearer(admin), bearer(store.mint(A)), bearer(store.mint(B)))
    store.close()


def app_doc(name: str, replicas: int = 2, lifetime: str = "service", **comp) -> dict:
    component = {"name": "c", "lifetime": lifetime, "replicas": replicas,
                 "resources": {"cpu": 1, "memory": "1Gi"}, **comp}
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name},
            "spec": {"components": [component]}}


def submit(live: Live, who: dict, doc: dict, key: str | None = None):
    headers = {**who, **({"Idempotency-Key": key} if key else {})}
    return live.client.post("/v1/applications", json=doc, headers=headers)


# ------------------------------------------------------------------ the thin path


def test_a_submitted_application_is_placed_and_its_tasks_reported(live):
    r = submit(live, live.a, app_doc("web"))
    assert r.status_code == 201, r.text
    assert r.json()["tasks"] == {"pending": 2, "running": 0, "finished": 0, "failed": 0, "omitted": 0, "withdrawn": 0}
    tasks = live.wait(lambda: [t for t in live.tasks(live.a) if t["status"] == "running"] == live.tasks(live.a)
                      and live.tasks(live.a), what="both tasks running")
    assert sorted(t["task"] for t in tasks) == ["web/c/0", "web/c/1"]
    for t in tasks:
        assert t["tenant"] == A and t["node"] and t["site"] and t["placements"] == 1
    detail = live.client.get("/v1/tasks/web/c/0", headers=live.a).json()
    assert [e["kind"] for e in detail["history"]][:3] == ["submitted", "placed", "started"]
    assert all(e["task"] == "web/c/0" and e["tenant"] == A for e in detail["history"])


def test_a_job_finishes_on_the_wall_clock(live):
    submit(live, live.a, app_doc("batch", 3, "job", duration="20s"))  # 0.2 s at 100x
    live.wait(lambda: all(t["status"] == "finished" for t in live.tasks(live.a, app="batch")), what="finished")
    app = live.client.get("/v1/applications/batch", headers=live.a).json()
    assert app["tasks"]["finished"] == 3
    assert all(t["ended_at"] for t in live.tasks(live.a, app="batch"))


def test_a_task_that_cannot_fit_says_why_it_waits(live):
    doc = app_doc("huge", 1, resources={"cpu": 1, "memory": "1Gi", "accelerators": [{"kind": "gpu", "count": 64}]})
    assert submit(live, live.a, doc).status_code == 201
    task = live.wait(lambda: (t := live.client.get("/v1/tasks/huge/c/0", headers=live.a).json())["reasons"] and t,
                     what="reasons")
    assert task["status"] == "pending"
    assert sum(task["reasons"].values()) > 0
    first = task["why"][0]  # the binding constraint first, in figures: no node has 64 GPUs, it is inadmissible
    assert first["binding"] and first["code"] == "inadmissible" and first["resource"] == "gpu"
    assert first["requested"] == 64000 and 0 < first["capacity"] == first["free"] < 64000
    assert first["gap"] == 64000 - first["free"] and first["nodes"] == 0


def test_members_an_elastic_gang_runs_without_say_the_quota_left_them_out(live):
    """city-services may hold 8 GPUs: a gang of 4 members of 4 GPUs each runs
    with 2, and the other two name the quota first, with its gap."""
    comp = {"name": "c", "lifetime": "job", "duration": "1h", "gang": {"size": 4, "minSize": 1}, "coupling": "ib",
            "resources": {"cpu": 8, "memory": "32Gi", "accelerators": [{"kind": "gpu", "model": "H100", "count": 4}]}}
    doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "train"}, "spec": {"components": [comp]}}
    assert submit(live, live.b, doc).status_code == 201
    tasks = live.wait(lambda: (ts := live.tasks(live.b, app="train")) and all(t["status"] in ("running", "omitted")
                                                                              for t in ts) and ts, what="the gang decided")
    assert sorted(t["status"] for t in tasks) == ["omitted", "omitted", "running", "running"]
    for t in tasks:
        if t["status"] == "omitted":
            first = live.client.get(f"/v1/tasks/{t['task']}", headers=live.b).json()["why"][0]
            assert first["binding"] and first["code"] == "quota" and first["resource"] == "gpu", first
            assert (first["requested"], first["allowed"], first["gap"]) == (16000, 8000, 8000), first


def test_delete_stops_the_tasks_and_forgets_the_application(live):
    submit(live, live.a, app_doc("web"))
    live.wait(lambda: all(t["status"] == "running" for t in live.tasks(live.a)) and live.tasks(live.a))
    assert live.client.delete("/v1/applications/web", headers=live.a).status_code == 204
    assert live.client.get("/v1/applications/web", headers=live.a).status_code == 404
    assert live.tasks(live.a) == []
    live.wait(lambda: live.controller.call(lambda sim: not sim.state.placements), what="the tasks to stop")
    assert live.client.delete("/v1/applications/web", headers=live.a).status_code == 404
    assert submit(live, live.a, app_doc("web")).status_code == 201  # the name is free again


# ------------------------------------------------------------------ idempotency and conflicts


def test_the_same_idempotency_key_returns_the_first_application(live):
    first = submit(live, live.a, app_doc("web"), key="k-1")
    again = submit(live, live.a, app_doc("web"), key="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["name"] == again.json()["name"] == "web"
    assert len(live.client.get("/v1/applications", headers=live.a).json()) == 1
    other = submit(live, live.a, app_doc("web"), key="k-2")
    assert other.status_code == 409 and other.headers["content-type"] == "application/problem+json"
    assert len(live.tasks(live.a)) == 2


def test_two_tenants_may_use_one_name(live):
    assert submit(live, live.a, app_doc("web")).status_code == 201
    assert submit(live, live.b, app_doc("web", 1)).status_code == 201
    live.wait(lambda: len([t for t in live.tasks(live.admin) if t["status"] == "running"]) == 3)
    assert {t["task"] for t in live.tasks(live.b)} == {"web/c/0"}
    assert live.store.tasks(B)[0].tenant == B


# ------------------------------------------------------------------ validation as problems


@pytest.mark.parametrize("change, path, words", [
    (lambda d: d["spec"]["components"][0]["resources"].update(memory="4 gigs"),
     "spec.components[0].resources.memory", "4 gigs"),
    (lambda d: d["spec"].update(colour="blue"), "spec.colour", "unknown field"),
    (lambda d: d["spec"]["components"][0].update(near={"site": "mars-1"}),
     "spec.components[0].near.site", "mars-1"),
    (lambda d: d["spec"].update(virtualCluster="nope"), "spec.virtualCluster", "nope"),
    (lambda d: d.update(kind="Fleet"), "kind", "Application"),
])
def test_a_bad_document_answers_problem_details_with_the_field_path(live, change, path, words):
    doc = app_doc("web")
    change(doc)
    r = submit(live, live.a, doc)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == 422 and body["title"]
    assert [e["path"] for e in body["errors"]] == [path]
    assert words.lower() in body["errors"][0]["message"].lower()
    assert live.store.apps() == []


def test_malformed_json_and_yaml_bodies_are_refused(live):
    r = live.client.post("/v1/applications", content=b"{not json", headers={**live.a, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["title"] == "Bad Request"
    yaml_doc = "apiVersion: suanli/v1\nkind: Application\nmetadata: {name: y}\nspec:\n  components:\n" \
               "    - {name: c, lifetime: service, resources: {cpu: 1, memory: 1Gi}}\n"
    r = live.client.post("/v1/applications", content=yaml_doc.encode(), headers={**live.a, "content-type": "application/yaml"})
    assert r.status_code == 201, r.text


def test_a_tenant_cannot_submit_for_another_and_an_admin_must_name_one(live):
    doc = app_doc("web")
    doc["metadata"]["tenant"] = B
    r = submit(live, live.a, doc)
    assert r.status_code == 403 and r.json()["errors"][0]["path"] == "metadata.tenant"
    r = submit(live, live.admin, app_doc("web"))
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "metadata.tenant"
    r = submit(live, live.admin, doc)
    assert r.status_code == 201 and r.json()["tenant"] == B


# ------------------------------------------------------------------ authentication and limits


def test_no_token_or_a_bad_token_answers_401_on_every_route(live):
    routes = [(m, r.path) for r in live.client.app.routes for m in getattr(r, "methods", ())
              if r.path.startswith("/v1/") and m != "HEAD"]
    assert len(routes) >= 20
    for method, path in routes:
        url = path.replace("{node:path}", "cloud-north/a100-0").replace("{name:path}", "x").replace(
            "{task:path}", "a/b/0").replace("{name}", "x")
        for headers in ({}, bearer("sl_not-a-token"), {"Authorization": "Basic dXNlcjpwdw=="}):
            r = live.client.request(method, url, headers=headers, json={})
            assert r.status_code == 401, (method, url, headers, r.status_code)
            assert r.headers["content-type"] == "application/problem+json"
            assert r.headers["www-authenticate"] == "Bearer"


def test_bodies_and_request_rates_are_bounded(world, tmp_path):
    store, admin, controller, api = start(world, sqlite_url(tmp_path / "s.db"),
                                          Limits(max_body_bytes=2000, rate=5, burst=5))
    a = bearer(store.mint(A))
    with TestClient(api) as client:
        big = app_doc("big")
        big["metadata"]["labels"] = {f"k{i}": "v" * 50 for i in range(100)}
        r = client.post("/v1/applications", json=big, headers=a)
        assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"
        codes = [client.get("/v1/applications", headers=a).status_code for _ in range(10)]
        assert codes.count(429) >= 4 and codes[:4] == [200] * 4
        r = client.get("/v1/applications", headers=a)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert client.get("/v1/applications", headers=bearer(admin)).status_code == 200  # per token
    store.close()


# ------------------------------------------------------------------ nodes, vcs, tenants, events, plan, metrics


def test_nodes_cordon_drain_and_uncordon(live):
    node = "edge-1/cpu-0"
    assert live.client.post(f"/v1/nodes/{node}/cordon", headers=live.a).status_code == 403
    r = live.client.post(f"/v1/nodes/{node}/cordon", headers=live.admin)
    assert r.status_code == 200 and r.json()["state"] == "cordoned"
    assert live.client.get(f"/v1/nodes/{node}", headers=live.a).json()["state"] == "cordoned"
    assert live.store.node_states() == {node: "cordoned"}
    r = live.client.post(f"/v1/nodes/{node}/uncordon", headers=live.admin)
    assert r.json()["state"] == "ready" and live.store.node_states() == {}
    assert live.client.post("/v1/nodes/edge-1/none-9/drain", headers=live.admin).status_code == 404
    nodes = live.client.get("/v1/nodes", headers=live.a, params={"site": "edge-1"}).json()
    assert nodes and all(n["site"] == "edge-1" for n in nodes)


def test_a_drained_node_is_left_by_its_work(live):
    submit(live, live.a, app_doc("web", 1))
    task = live.wait(lambda: (t := live.tasks(live.a))[0]["status"] == "running" and t[0])
    node = task["node"]
    assert live.client.post(f"/v1/nodes/{node}/drain", headers=live.admin).json()["state"] == "drained"
    moved = live.wait(lambda: (t := live.tasks(live.a)[0])["status"] == "running" and t["node"] != node and t,
                      what="the task to move off")
    assert moved["placements"] == 2
    assert "preempted" in [e["kind"] for e in live.client.get("/v1/tasks/web/c/0", headers=live.a).json()["history"]]


def test_a_drain_moves_stateless_replicas_in_waves_within_the_budget(live):
    """Four stateless replicas of one node: under the default budget (25%,
    one replica) each moves only once the one before serves again, as in
    ``simulate`` (restartTime: 5 s of scheduler time)."""
    submit(live, live.a, app_doc("web", 4))
    tasks = live.wait(lambda: (t := live.tasks(live.a)) and all(x["status"] == "running" for x in t) and t)
    node = Counter(t["node"] for t in tasks).most_common(1)[0][0]
    on = [t["task"] for t in tasks if t["node"] == node]
    assert len(on) >= 2
    live.client.post(f"/v1/nodes/{node}/drain", headers=live.admin)
    live.wait(lambda: all(t["node"] != node and t["status"] == "running" for t in live.tasks(live.a)),
              what="the replicas to move off")
    history = {task: live.client.get(f"/v1/tasks/{task}", headers=live.a).json()["history"] for task in on}
    stops = sorted((e["t"], task) for task, h in history.items() for e in h if e["kind"] == "preempted")
    starts = {task: e["t"] for task, h in history.items() for e in h if e["kind"] == "started"}
    # (event times are the wall clock's, to the microsecond of an epoch time; the controller's runs 100 times faster)
    assert len(stops) == len(on) and stops[-1][0] - stops[0][0] >= 5 / 100 * (len(on) - 1) - 1e-4
    for (_, a), (t, _) in zip(stops, stops[1:]):
        assert t >= starts[a]  # the next wave only once the previous replica runs again


def test_tenants_and_virtual_clusters(live):
    assert [t["name"] for t in live.client.get("/v1/tenants", headers=live.a).json()] == [A]
    assert len(live.client.get("/v1/tenants", headers=live.admin).json()) == 4
    assert live.client.get(f"/v1/tenants/{A}", headers=live.a).json()["quota"]["cpu"] == 6_000_000
    submit(live, live.a, app_doc("web", 1))
    live.wait(lambda: live.tasks(live.a)[0]["status"] == "running")
    vcs = live.client.get("/v1/vcs", headers=live.a).json()
    assert [v["name"] for v in vcs] == [f"{A}/default"]
    assert vcs[0]["hosts"] and vcs[0]["hosts"][0]["node"] == live.tasks(live.a)[0]["node"]
    assert live.client.get(f"/v1/vcs/{A}/default", headers=live.a).json()["tenant"] == A


def test_events_are_listed_in_order_and_streamed(live):
    submit(live, live.a, app_doc("web", 1))
    live.wait(lambda: live.tasks(live.a)[0]["status"] == "running")
    events = live.client.get("/v1/events", headers=live.a).json()
    kinds = [e["body"]["kind"] for e in events]
    assert kinds[:1] == ["submitted"] and "started" in kinds
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    after = live.client.get("/v1/events", headers=live.a, params={"after": events[0]["id"]}).json()
    assert after == events[1:]


def test_the_plan_is_the_rescheduler_dry_run(live):
    assert live.client.get("/v1/plan", headers=live.a).status_code == 403
    plan = live.client.get("/v1/plan", headers=live.admin).json()
    assert {"running_by_site", "pending", "moves"} <= set(plan)


def test_metrics_and_health(live):
    submit(live, live.a, app_doc("web", 2))
    live.wait(lambda: all(t["status"] == "running" for t in live.tasks(live.a)))
    health = live.client.get("/healthz").json()
    assert {k: health[k] for k in ("status", "controller", "instants", "store")} == \
        {"status": "ok", "controller": "running", "instants": live.controller.instants, "store": "ok"}
    assert 0 <= health["since_turn_s"] < 10
    assert live.client.get("/readyz").status_code == 200
    assert live.client.get("/metrics").status_code == 401
    text = live.client.get("/metrics", headers=live.admin).text
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if not line.startswith("#")}
    assert samples['suanli_tasks{status="running"}'] == 2
    assert samples['suanli_nodes{state="ready"}'] == 232
    assert samples["suanli_applications"] == 1
    assert samples['suanli_http_requests_total{method="POST",route="/v1/applications",status="201"}'] == 1


def test_metrics_are_prometheus_exposition_with_latency_histograms(live):
    from prometheus_client.parser import text_string_to_metric_families

    for name in ("web", "api"):
        submit(live, live.a, app_doc(name, 3))
    live.wait(lambda: len([t for t in live.tasks(live.a) if t["status"] == "running"]) == 6, what="6 running")
    text = live.client.get("/metrics", headers=live.admin).text
    families = {f.name: f for f in text_string_to_metric_families(text)}  # a parser of the format reads it
    def samples(family, suffix, **labels):
        return [s.value for s in families[family].samples
                if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items())]
    assert families["suanli_http_request_seconds"].type == "histogram"
    assert samples("suanli_http_request_seconds", "_count", method="POST", route="/v1/applications") == [2]
    assert samples("suanli_http_requests", "_total", method="POST", route="/v1/applications", status="201") == [2]
    assert samples("suanli_store_commit_seconds", "_count")[0] > 0
    assert samples("suanli_controller_turn_seconds", "_count")[0] > 0
    assert samples("suanli_scheduling_decision_seconds", "_count")[0] >= 2  # a unit each at least
    waited = samples("suanli_submission_to_placement_seconds", "_count", tenant=A)
    assert waited == [6]  # each task once, at its first placement
    buckets = samples("suanli_submission_to_placement_seconds", "_bucket", tenant=A)
    assert buckets == sorted(buckets) and buckets[-1] == 6  # cumulative, +Inf holds them all


def test_admins_mint_tokens_for_known_tenants(live):
    r = live.client.post("/v1/tokens", json={"tenant": B}, headers=live.admin)
    assert r.status_code == 201 and r.json()["tenant"] == B
    token = r.json()["token"]
    assert [t["name"] for t in live.client.get("/v1/tenants", headers=bearer(token)).json()] == [B]
    assert live.client.post("/v1/tokens", json={"tenant": "nobody"}, headers=live.admin).status_code == 422
    assert live.client.post("/v1/tokens", json={"tenant": B}, headers=live.a).status_code == 403


def test_openapi_is_served(live):
    spec = live.client.get("/openapi.json").json()
    assert "/v1/applications" in spec["paths"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert live.client.get("/docs").status_code == 200


# ------------------------------------------------------------------ durability


def test_a_restart_brings_back_every_application_with_its_state(world, db_url):
    store, admin, controller, api = start(world, db_url)
    a = bearer(store.mint(A))
    with TestClient(api) as client:
        client.post("/v1/applications", json=app_doc("web", 2), headers=a)
        client.post("/v1/applications", json=app_doc("batch", 2, "job", duration="10s"), headers=a)
        client.post("/v1/nodes/edge-1/cpu-0/cordon", headers=bearer(admin))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status = {t.name: t.status for t in store.tasks(A)}
            if status.get("batch/c/0") == "finished" and status.get("web/c/0") == "running":
                break
            time.sleep(0.02)
    store.close()
    store, _, controller, api = start(world, db_url)
    with TestClient(api) as client:
        tasks = {t["task"]: t for t in client.get("/v1/tasks", headers=a).json()}
        assert {n: t["status"] for n, t in tasks.items() if n.startswith("batch")} == {
            "batch/c/0": "finished", "batch/c/1": "finished"}  # ended tasks stay ended, not run again
        end = time.monotonic() + 10
        while time.monotonic() < end and not all(
                t["status"] == "running" and t["placements"] == 2
                for t in client.get("/v1/tasks", headers=a, params={"app": "web"}).json()):
            time.sleep(0.02)
        web = client.get("/v1/tasks", headers=a, params={"app": "web"}).json()
        assert [(t["status"], t["placements"]) for t in web] == [("running", 2), ("running", 2)]
        history = [e["kind"] for e in client.get("/v1/tasks/web/c/0", headers=a).json()["history"]]
        assert history.count("requeued") == 1 and history[-1] == "started"
        assert client.get("/v1/nodes/edge-1/cpu-0", headers=a).json()["state"] == "cordoned"
        assert controller.call(lambda sim: sorted(sim.state.placements)) == [
            "acme-ai:web/c/0", "acme-ai:web/c/1"]
    store.close()


def test_migrations_build_the_schema_and_take_it_down(db_url):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, inspect

    from suanli.server.store import MIGRATIONS, migrate

    migrate(db_url)
    engine = create_engine(db_url)
    assert {"tokens", "applications", "tasks", "events", "node_states", "alembic_version"} <= set(
        inspect(engine).get_table_names())
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", db_url)
    command.downgrade(cfg, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    migrate(db_url)
    assert "tasks" in inspect(engine).get_table_names()
    engine.dispose()


def test_the_models_match_the_migrations(db_url):
    """The ORM's tables and the migrated schema agree (nothing left to migrate)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from suanli.server.store import Base, migrate

    migrate(db_url)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == [], json.dumps([str(d) for d in diff])


def _count_under_lock(db: str, path: str, times: int) -> None:
    from suanli.server.store import WriterLock

    lock = WriterLock(db)
    for _ in range(times):
        with lock:  # a read-modify-write that loses counts unless the lock excludes the other process
            with open(path) as f:
                n = int(f.read())
            os.sched_yield()
            with open(path, "w") as f:
                f.write(str(n + 1))
    lock.close()


def test_sqlite_writers_of_two_processes_take_turns(tmp_path):
    import multiprocessing

    counter = tmp_path / "n"
    counter.write_text("0")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_count_under_lock, args=(str(tmp_path / "s.db"), str(counter), 300))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert counter.read_text() == "600"
