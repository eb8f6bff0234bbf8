"""The real ``suanli serve`` attacked as a hostile tenant, and a careless one, would.

Each test is one reproduction of a way one tenant could harm another (or the
server), run against the server as a user starts it, and asserts the safe
outcome. Most share one server on SQLite; those that need their own world,
restart the server or kill parts of it start their own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from serving import ADMIN, FLEET, Server, free_port, pages, wait
from test_server_api import postgres  # noqa: F401  (the session's PostgreSQL)

from suanli.server.api import RateLimiter
from suanli.server.remote import PROCESS_NAME
from suanli.server.store import Store, sqlite_url

pytestmark = pytest.mark.long(90)

A, B = "alpha", "beta"
TINY = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: tiny}
spec:
  sites:
    - name: dc
      tier: cloud
      region: r
      nodeGroups:
        - {name: n, count: 1, arch: x86_64, cpu: 4, memory: 16Gi}
"""


def tenants(**ceilings: int | None) -> str:
    docs = []
    for name in (A, B):
        spec = {} if ceilings.get(name) is None else {"maxPriority": ceilings[name]}
        docs.append(json.dumps({"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": name},
                                "spec": spec}))
    return "\n---\n".join(docs) + "\n"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def app(name: str, *, replicas: int = 1, lifetime: str = "service", priority: int | None = None,
        cpu=1, memory="1Gi", **comp) -> dict:
    component = {"name": "c", "lifetime": lifetime, "replicas": replicas,
                 "resources": {"cpu": cpu, "memory": memory}, **comp}
    spec = {"components": [component]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name}, "spec": spec}


class Attack:
    """A running server, an HTTP client, and tokens: admin, tenant ``a``, tenant ``b``."""

    def __init__(self, server: Server, a: str, b: str) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=30)
        self.admin, self.a, self.b = bearer(ADMIN), bearer(a), bearer(b)

    def submit(self, who: dict, doc: dict, **headers):
        return self.http.post("/v1/applications", json=doc, headers={**who, **headers})

    def tasks(self, who: dict, **params) -> list[dict]:
        r = self.http.get("/v1/tasks", headers=who, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    def task(self, who: dict, name: str) -> dict:
        r = self.http.get(f"/v1/tasks/{name}", headers=who)
        assert r.status_code == 200, r.text
        return r.json()

    def close(self) -> None:
        self.http.close()


def serve(files, db: str, log, *extra: str, tenant_a: str = "acme-ai", tenant_b: str = "city-services",
          start: bool = True) -> Attack:
    server = Server(db, free_port(), log, *extra, files=files)
    server.start()
    mint = lambda t: httpx.post(server.url + "/v1/tokens", json={"tenant": t}, headers=bearer(ADMIN)).json()["token"]
    return Attack(server, mint(tenant_a), mint(tenant_b))


@pytest.fixture(scope="module")
def city(tmp_path_factory):
    """One server on the city fleet, for the attacks that leave it as it was."""
    where = tmp_path_factory.mktemp("city")
    with open(where / "server.log", "ab") as log:
        attack = serve(FLEET, sqlite_url(where / "s.db"), log)
        yield attack
        attack.close()
        attack.server.stop()


@pytest.fixture
def tiny(tmp_path):
    """Files of a one-node world; ``tiny(ceilings)`` writes them."""
    def files(**ceilings) -> list[Path]:
        (tmp_path / "fleet.yaml").write_text(TINY)
        (tmp_path / "tenants.yaml").write_text(tenants(**ceilings))
        return [tmp_path / "fleet.yaml", tmp_path / "tenants.yaml"]
    return files


# ------------------------------------------------------------------ poison values (high)


@pytest.mark.parametrize("resources, path", [
    ({"cpu": 1e300, "memory": "1Gi"}, "spec.components[0].resources.cpu"),
    ({"cpu": 10**400, "memory": "1Gi"}, "spec.components[0].resources.cpu"),
    ({"cpu": 1, "memory": "100000000000000000000Ti"}, "spec.components[0].resources.memory"),
    ({"cpu": 1, "memory": "1Gi", "accelerators": [{"kind": "gpu", "count": 10**30}]},
     "spec.components[0].resources.accelerators[0].count"),
])
def test_a_poison_quantity_is_refused_and_scheduling_goes_on(city, resources, path):
    doc = app("poison", lifetime="job", duration="1m")
    doc["spec"]["components"][0]["resources"] = resources
    r = city.submit(city.a, doc)
    assert r.status_code == 422, r.text
    assert path in [e["path"] for e in r.json()["errors"]], r.json()
    assert "at most" in json.dumps(r.json())  # the bound is named
    name = f"after-poison-{abs(hash(path)) % 10**6}-{len(json.dumps(resources))}"
    assert city.submit(city.b, app(name)).status_code == 201
    wait(lambda: city.tasks(city.b, app=name)[0]["status"] == "running", what="the next tenant's task to run")
    assert city.http.get("/healthz").json()["status"] == "ok"


@pytest.mark.parametrize("field, value", [
    ("replicas", 10**12), ("duration", "99999999999999999999d"), ("duration", 1e308),
    ("work", "999999999999999999999999h"),
])
def test_absurd_counts_and_durations_are_refused(city, field, value):
    doc = app("absurd", lifetime="job", duration="1m")
    doc["spec"]["components"][0][field] = value
    if field == "work":
        del doc["spec"]["components"][0]["duration"]
    r = city.submit(city.a, doc)
    assert r.status_code == 422, r.text
    assert f"spec.components[0].{field}" in [e["path"] for e in r.json()["errors"]]


def test_a_stored_application_that_cannot_be_scheduled_is_failed_alone_at_restart(tmp_path):
    """One stored before a bound existed (or by another version): the server
    starts, that application's tasks fail with the reason, the others run."""
    db = sqlite_url(tmp_path / "s.db")
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve(FLEET, db, log)
        assert attack.submit(attack.a, app("fine")).status_code == 201
        wait(lambda: attack.tasks(attack.a)[0]["status"] == "running", what="the fine task to run")
        attack.server.stop()
        store = Store(db)
        poison = app("poison")
        poison["metadata"]["tenant"] = "city-services"
        poison["spec"]["components"][0]["resources"]["cpu"] = 1e300
        store.create_app("city-services", "poison", poison, ["poison/c/0"], None)
        store.close()
        attack.server.start()  # it starts (exit status 3 before)
        task = wait(lambda: (t := attack.task(attack.b, "poison/c/0"))["status"] == "failed" and t,
                    what="the poisoned task to be failed")
        reasons = [e.get("reason", "") for e in task["history"] if e["kind"] == "failed"]
        assert reasons and "spec.components[0].resources.cpu" in reasons[-1], task["history"]
        wait(lambda: attack.tasks(attack.a)[0]["status"] == "running", what="the fine task to run again")
        assert attack.submit(attack.b, app("next")).status_code == 201
        wait(lambda: attack.tasks(attack.b, app="next")[0]["status"] == "running", what="a new task to run")
        assert attack.http.get("/healthz").status_code == 200
        attack.close()
        attack.server.stop()


# ------------------------------------------------------------------ bodies (high, and small 500s)


def test_a_yaml_alias_bomb_is_refused_before_it_grows(city):
    anchor = "x" * 100_000
    body = f"apiVersion: suanli/v1\nkind: Application\nmetadata: {{name: bomb}}\nspec:\n  a: &big {anchor}\n  " \
           + "\n  ".join(f"k{i}: *big" for i in range(1000)) + "\n"
    assert 100_000 < len(body) < 1 << 20
    r = city.http.post("/v1/applications", content=body, headers={**city.a, "Content-Type": "application/yaml"})
    assert r.status_code == 422, r.text
    assert "alias" in r.json()["detail"] or "anchor" in r.json()["detail"]
    assert city.http.get("/v1/applications/bomb", headers=city.a).status_code == 404


@pytest.mark.parametrize("ctype, body", [
    ("application/json", '{"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "deep"}, "spec": '
     + "[" * 50_000 + "]" * 50_000 + "}"),
    ("application/yaml", "apiVersion: suanli/v1\nkind: Application\nmetadata: {name: deep}\nspec: "
     + "[" * 20_000 + "]" * 20_000 + "\n"),
])
def test_deep_nesting_answers_422_not_500(city, ctype, body):
    r = city.http.post("/v1/applications", content=body, headers={**city.a, "Content-Type": ctype})
    assert r.status_code == 422, r.text
    assert "nests more than" in r.json()["detail"]


@pytest.mark.parametrize("ctype, body", [
    ("application/json", '{"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "twice"}, '
     '"spec": {"components": []}, "spec": {"components": []}}'),
    ("application/yaml", "apiVersion: suanli/v1\nkind: Application\nmetadata: {name: twice, name: again}\n"
     "spec: {components: []}\n"),
])
def test_a_key_given_twice_is_refused(city, ctype, body):
    r = city.http.post("/v1/applications", content=body, headers={**city.a, "Content-Type": ctype})
    assert r.status_code == 422, r.text
    assert "appears twice" in r.json()["detail"]


def test_numbers_past_any_id_answer_422(city):
    huge = str(10**30)
    assert city.http.get("/v1/events", params={"after": huge}, headers=city.a).status_code == 422
    assert city.http.get("/v1/events/stream", params={"after": huge}, headers=city.a).status_code == 422
    assert city.http.get("/v1/logs/x/c/0", params={"after": huge}, headers=city.a).status_code == 422
    assert city.http.get("/v1/tasks", params={"cursor": "W1swXV0"}, headers=city.a).status_code == 422
    with city.http.stream("GET", "/v1/events/stream", headers={**city.a, "Last-Event-ID": "9" * 40}) as r:
        assert r.status_code == 200  # an id past any is no id: from now
        assert next(r.iter_lines()).startswith(":")


# ------------------------------------------------------------------ idempotency keys (medium)


def test_an_idempotency_key_reused_with_another_body_is_refused(city):
    first, second = app("idem-1"), app("idem-2")
    key = {"Idempotency-Key": "reused-key"}
    assert city.submit(city.a, first, **key).status_code == 201
    r = city.submit(city.a, second, **key)
    assert r.status_code == 422 and "Idempotency-Key" in r.json()["detail"], r.text
    assert city.http.get("/v1/applications/idem-2", headers=city.a).status_code == 404
    again = city.submit(city.a, first, **key)
    assert again.status_code == 200 and again.json()["name"] == "idem-1"
    r = city.submit(city.a, app("idem-3"), **{"Idempotency-Key": ""})
    assert r.status_code == 400, r.text


# ------------------------------------------------------------------ pages, metrics, docs (small, low)


def test_task_listings_come_in_pages_that_cover_everything_once(city):
    assert city.submit(city.b, app("paged", replicas=23, cpu=0.1, memory="64Mi")).status_code == 201
    got = pages(city.http, "/v1/tasks", city.b, app="paged", limit=5)
    seen = [t["task"] for page in got for t in page]
    assert len(got) == 5 and len(seen) == 23 and len(set(seen)) == 23
    assert sorted(seen) == seen
    assert city.http.get("/v1/tasks", params={"limit": 100_000}, headers=city.b).status_code == 422
    r = city.http.get("/v1/applications", params={"limit": 1}, headers=city.b)
    assert len(r.json()) == 1 and r.headers.get("x-next-cursor")


def test_metrics_need_an_admin_token_and_docs_load_nothing_from_elsewhere(city):
    assert city.http.get("/metrics").status_code == 401
    assert city.http.get("/metrics", headers=city.a).status_code == 403
    r = city.http.get("/metrics", headers=city.admin)
    assert r.status_code == 200 and "suanli_tasks" in r.text
    page = city.http.get("/docs")
    assert page.status_code == 200
    assert "http://" not in page.text and "https://" not in page.text, page.text
    assert city.http.get("/docs/assets/swagger-ui-bundle.js").status_code == 200


# ------------------------------------------------------------------ rate limits and streams (medium)


def test_made_up_tokens_are_limited_per_address_before_they_are_looked_up(tmp_path):
    """Buckets were keyed on the token as sent: each made-up token had a full one.
    At --max-rate 2: 2 requests/s per tenant (bursts of 4), 8 per address (16)."""
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve(FLEET, sqlite_url(tmp_path / "s.db"), log, "--max-rate", "2")
        try:
            answers = [attack.http.get("/v1/fleet", headers=bearer(f"sl_made-up-{i}")) for i in range(30)]
            codes = [r.status_code for r in answers]
            assert codes[0] == 401 and codes.count(429) >= 20, codes
            assert all(int(r.headers["retry-after"]) >= 1 for r in answers if r.status_code == 429)
            time.sleep(2.5)  # the address's bucket fills again
            codes = [attack.http.get("/v1/fleet", headers=attack.a).status_code for _ in range(8)]
            assert codes[0] == 200 and 429 in codes, codes  # per tenant
            assert attack.http.get("/v1/fleet", headers=attack.b).status_code == 200  # another tenant's own
        finally:
            attack.close()
            attack.server.stop()


def test_rate_buckets_stay_bounded_whatever_keys_come():
    limiter = RateLimiter(10, 10, keys=1000)
    for i in range(20_000):
        limiter.allow(f"key-{i}")
    assert len(limiter) == 1000
    assert limiter.allow("key-19999") == 0  # a recent one is still there (9 left)
    for _ in range(9):
        limiter.allow("key-19999")
    assert limiter.allow("key-19999") > 0


def test_event_streams_are_capped_per_token(city):
    with httpx.Client(base_url=city.server.url, timeout=10) as http:
        opened = []
        try:
            for _ in range(8):
                cm = http.stream("GET", "/v1/events/stream", headers=city.b)
                r = cm.__enter__()
                opened.append(cm)
                assert r.status_code == 200
            with http.stream("GET", "/v1/events/stream", headers=city.b) as r:
                assert r.status_code == 429, r.status_code
            with http.stream("GET", "/v1/events/stream", headers=city.a) as r:
                assert r.status_code == 200  # another token's streams are its own
        finally:
            for cm in opened:
                cm.__exit__(None, None, None)
    # the closed streams are released: a new one opens
    def opens() -> bool:
        with httpx.Client(base_url=city.server.url, timeout=10) as http:
            with http.stream("GET", "/v1/events/stream", headers=city.b) as r:
                return r.status_code == 200
    wait(opens, 10, "a closed stream to be released")


# ------------------------------------------------------------------ priority across tenants (medium)


def test_a_tenant_without_a_ceiling_cannot_preempt_another_with_priority(tiny, tmp_path):
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve(tiny(), sqlite_url(tmp_path / "s.db"), log, tenant_a=A, tenant_b=B)
        try:
            assert attack.submit(attack.a, app("low", cpu=4, memory="4Gi")).status_code == 201
            wait(lambda: attack.tasks(attack.a)[0]["status"] == "running", what="alpha's task to run")
            assert attack.submit(attack.b, app("grab", cpu=4, memory="4Gi", priority=1_000_000)).status_code == 201
            wait(lambda: attack.task(attack.b, "grab/c/0")["reasons"], what="beta's task to say why it waits")
            time.sleep(1.0)  # 20 scheduler seconds: turns enough for a preemption to have happened
            low = attack.task(attack.a, "low/c/0")
            assert low["status"] == "running" and low["placements"] == 1, low
            assert "preempted" not in [e["kind"] for e in low["history"]]
            # the same priority does preempt within the tenant: the rule binds across tenants only
            assert attack.submit(attack.a, app("own", cpu=4, memory="4Gi", priority=1_000_000)).status_code == 201
            wait(lambda: attack.task(attack.a, "own/c/0")["status"] == "running", what="alpha's own to preempt")
            assert attack.task(attack.a, "low/c/0")["status"] == "pending"
        finally:
            attack.close()
            attack.server.stop()


def test_preemption_across_tenants_follows_the_admins_ceilings_and_names_no_one(tiny, tmp_path):
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve(tiny(alpha=1000, beta=100), sqlite_url(tmp_path / "s.db"), log, tenant_a=A, tenant_b=B)
        try:
            r = attack.submit(attack.b, app("over", priority=900))
            assert r.status_code == 422 and "maxPriority" in json.dumps(r.json()), r.text
            assert attack.submit(attack.b, app("victim", cpu=4, memory="4Gi", priority=50)).status_code == 201
            wait(lambda: attack.tasks(attack.b)[0]["status"] == "running", what="beta's task to run")
            assert attack.submit(attack.a, app("secret-project-x", cpu=4, memory="4Gi", priority=500)).status_code == 201
            wait(lambda: attack.task(attack.a, "secret-project-x/c/0")["status"] == "running",
                 what="alpha's task to preempt beta's")
            seen = attack.http.get("/v1/events", headers=attack.b).json()
            preempted = [e["body"] for e in seen if e["kind"] == "preempted"]
            assert preempted, seen
            assert "secret-project-x" not in json.dumps(seen) and A not in json.dumps(seen)
            assert preempted[0]["by"] == "a higher-priority task of another tenant"
            history = attack.task(attack.b, "victim/c/0")["history"]
            assert "secret-project-x" not in json.dumps(history)
            admin = [e["body"] for e in attack.http.get("/v1/events", headers=attack.admin).json()
                     if e["kind"] == "preempted"]
            assert admin[0]["by"] == "secret-project-x/c/0" and admin[0]["byTenant"] == A
        finally:
            attack.close()
            attack.server.stop()


def test_another_tenants_virtual_cluster_is_as_missing_as_none(tiny, tmp_path):
    files = tiny()
    vc = {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": {"name": "alpha-secret-vc", "tenant": A},
          "spec": {"hostGroups": [{"name": "g", "count": 1, "resources": {"cpu": 1, "memory": "1Gi"}}]}}
    (tmp_path / "vc.yaml").write_text(json.dumps(vc))
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve([*files, tmp_path / "vc.yaml"], sqlite_url(tmp_path / "s.db"), log, tenant_a=A, tenant_b=B)
        try:
            doc = app("borrow")
            doc["spec"]["virtualCluster"] = "alpha-secret-vc"
            theirs = attack.submit(attack.b, doc)
            doc["spec"]["virtualCluster"] = "no-such-vc"
            none = attack.submit(attack.b, doc)
            assert theirs.status_code == none.status_code == 422
            assert theirs.json()["errors"][0]["message"] == none.json()["errors"][0]["message"].replace(
                "no-such-vc", "alpha-secret-vc")
            assert f"tenant '{A}'" not in json.dumps(theirs.json()) and "belongs" not in json.dumps(theirs.json())
            doc["spec"]["virtualCluster"] = "alpha-secret-vc"
            assert attack.submit(attack.a, doc).status_code == 201  # its own tenant may
        finally:
            attack.close()
            attack.server.stop()


# ------------------------------------------------------------------ tenants removed (medium)


def test_a_tenant_left_out_of_the_files_at_a_restart_stays_until_deleted(tiny, tmp_path):
    """The files given at start are applied over what the store has: a tenant they
    no longer name is not removed (a KeyError ended the server here once); only
    a deletion through the API removes it."""
    db = sqlite_url(tmp_path / "s.db")
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve(tiny(), db, log, tenant_a=A, tenant_b=B)
        assert attack.submit(attack.a, app("stays")).status_code == 201
        assert attack.submit(attack.b, app("orphan")).status_code == 201
        wait(lambda: attack.tasks(attack.b)[0]["status"] == "running", what="beta's task to run")
        attack.server.stop()
        files = tiny()
        files[1].write_text(tenants().split("\n---\n")[0] + "\n")  # alpha only
        attack.server.start()
        wait(lambda: attack.tasks(attack.b)[0]["status"] == "running", what="beta's task to run again")
        wait(lambda: attack.tasks(attack.a)[0]["status"] == "running", what="alpha's task to run again")
        r = attack.http.delete("/v1/tenants/beta", headers=attack.admin)
        assert r.status_code == 409 and "cascade" in r.json()["detail"], r.text
        assert attack.http.delete("/v1/tenants/beta?cascade=true", headers=attack.admin).status_code == 204
        r = attack.http.get("/v1/applications", headers=attack.b)
        assert r.status_code == 401, r.text  # its tokens were revoked with it
        assert Store(db).app("beta", "orphan") is None
        attack.close()
        attack.server.stop()


# ------------------------------------------------------------------ the controller supervised (high)


def _controller_pid(server_pid: int) -> int:
    children = [c for t in Path(f"/proc/{server_pid}/task").iterdir() for c in (t / "children").read_text().split()]
    for child in children:  # of any of its threads (the one that started it again, too)
        if Path(f"/proc/{child}/comm").read_text().strip() == PROCESS_NAME:
            return int(child)
    raise AssertionError("no controller process under the server")


def test_a_killed_controller_is_started_again_and_health_tells_the_truth(tmp_path):
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve(FLEET, sqlite_url(tmp_path / "s.db"), log)
        try:
            assert attack.http.get("/readyz").status_code == 200
            assert attack.submit(attack.a, app("before")).status_code == 201
            wait(lambda: attack.tasks(attack.a, app="before")[0]["status"] == "running", what="a task to run")
            first = _controller_pid(attack.server.proc.pid)
            os.kill(first, signal.SIGKILL)  # as the kernel's out-of-memory killer would
            # while it is away: submissions are kept, questions answer 503, metrics still answer
            r = attack.submit(attack.a, app("during"))
            assert r.status_code == 201, r.text
            assert attack.http.get("/metrics", headers=attack.admin).status_code == 200
            assert attack.http.get("/healthz").status_code == 200  # alive: being started again
            body = wait(lambda: (r := attack.http.get("/readyz")).status_code == 200 and r.json(), 60,
                        "the controller to be ready again")
            assert body["restarts"] == 1 and body["controller"] == "running"
            assert _controller_pid(attack.server.proc.pid) != first
            wait(lambda: attack.tasks(attack.a, app="during")[0]["status"] == "running", 30,
                 "the task submitted meanwhile to run")
            assert attack.tasks(attack.a, app="before")[0]["status"] == "running"
            assert attack.http.get("/v1/fleet", headers=attack.a).status_code == 200
            metrics = attack.http.get("/metrics", headers=attack.admin).text
            assert "suanli_controller_restarts_total 1" in metrics and "suanli_controller_up 1" in metrics
        finally:
            attack.close()
            attack.server.stop()


def test_health_fails_when_the_store_takes_no_writes(tmp_path, postgres):
    """The database turns read-only under the server (a failover to a replica, say)."""
    import psycopg

    db = postgres.fresh_database()
    name = db.rsplit("/", 1)[1]
    with open(tmp_path / "server.log", "ab") as log:
        attack = serve(FLEET, db, log)
        admin_url = postgres.url.replace("postgresql+psycopg", "postgresql")
        try:
            assert attack.http.get("/healthz").status_code == 200
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            body = wait(lambda: (r := attack.http.get("/healthz")).status_code == 503 and r.json(), 15,
                        "health to report the store")
            assert "read-only" in body["store"], body
            assert attack.http.get("/readyz").status_code == 503
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = off")
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            wait(lambda: attack.http.get("/healthz").status_code == 200, 30, "health to recover")
        finally:
            attack.close()
            attack.server.stop()


# ------------------------------------------------------------------ tasks of the local executor (critical)


def test_a_task_cannot_read_the_servers_secrets_nor_another_tenants_files(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="suanli-attack-"))
    os.chmod(base, 0o711)
    try:
        db, work = base / "s.db", base / "work"
        with open(tmp_path / "server.log", "ab") as log:
            attack = serve(FLEET, sqlite_url(db), log, "--executor", "local", "--work-dir", str(work))
            try:
                secret = app("secret", lifetime="job", duration="10s",
                             run={"command": ["sh", "-c", "echo alpha-secret-line; env"]})
                assert attack.submit(attack.a, secret).status_code == 201
                wait(lambda: attack.tasks(attack.a, app="secret")[0]["status"] == "finished", 30,
                     "the secret job to finish")
                text = attack.http.get("/v1/logs/secret/c/0", headers=attack.a).text
                assert "SUANLI_TASK=secret/c/0" in text  # what it may see, it sees
                assert "SUANLI_ADMIN_TOKEN" not in text and ADMIN not in text, text
                logs = [p for p in work.rglob("*.log") if "secret" in p.name]
                assert logs, sorted(str(p) for p in work.rglob("*"))
                targets = [str(logs[0]), str(db), str(db) + "-wal"]
                script = 'for f in "$@"; do echo "== $f"; cat "$f" 2>&1 | head -c 200; echo; done'
                thief = app("thief", lifetime="job", duration="10s",
                            run={"command": ["sh", "-c", script, "thief", *targets]})
                assert attack.submit(attack.b, thief).status_code == 201
                wait(lambda: attack.tasks(attack.b, app="thief")[0]["status"] in ("finished", "failed"), 30,
                     "the thief job to end")
                stolen = attack.http.get("/v1/logs/thief/c/0", headers=attack.b).text
                assert stolen.count("== ") == len(targets), stolen
                assert "alpha-secret-line" not in stolen and "SQLite format" not in stolen, stolen
                assert stolen.count("Permission denied") + stolen.count("No such file") >= len(targets), stolen
                assert stolen.count("Permission denied") >= 2, stolen
            finally:
                attack.close()
                attack.server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
