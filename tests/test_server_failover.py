"""Failover: two ``suanli serve`` processes on one PostgreSQL database. Both
answer the API; one controller is active under the store's lease. Eight
clients submit 160 applications to either server (the other one when a
request fails) while the active server is killed with SIGKILL, again and
again, and started again (it then stands by). A standby server answers what needs the
scheduler by asking the active one. Each time, the other server's
controller takes over within 5 s (measured from the kill to its
``/healthz`` saying ``running``). Afterwards every acknowledged application
is there exactly once with all its tasks, every task is placed, and no task
was ever placed while it was placed already (each ``placed`` event of a task
follows its submission or a stop). The machine is kept busy meanwhile by other
processes (``busy``): a takeover is measured under load."""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx
import pytest

from serving import ADMIN, Server, every, free_port
from test_server_api import postgres  # noqa: F401  (the session's PostgreSQL)
from test_server_crash import doc

from suanli.server.store import Store

CLIENTS, APPS, KILLS, TAKEOVER_S = 8, 160, 4, 5.0
pytestmark = [pytest.mark.usefixtures("busy"), pytest.mark.long(65)]  # a loaded machine
STOPS = {"requeued", "lost", "preempted", "finished", "failed", "omitted", "withdrawn", "migrated", "evicted"}


def state(server: Server) -> str | None:
    try:
        return httpx.get(server.url + "/healthz", timeout=1).json()["controller"]
    except (httpx.TransportError, ValueError):
        return None


def test_the_standby_takes_over_within_5_s_and_nothing_acknowledged_is_lost(postgres, tmp_path):  # noqa: F811
    db = postgres.fresh_database()
    log = open(tmp_path / "servers.log", "ab")
    a = Server(db, free_port(), log, "--name", "a")
    b = Server(db, free_port(), log, "--name", "b")
    a.start()
    b.start()
    servers = [a, b]
    assert sorted(state(s) for s in servers) == ["running", "standby"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    standby = next(s for s in servers if state(s) == "standby")
    active = next(s for s in servers if s is not standby)
    nodes = httpx.get(standby.url + "/v1/nodes", headers=admin, timeout=10)  # asked of the active scheduler
    assert nodes.status_code == 200 and nodes.json() == httpx.get(active.url + "/v1/nodes", headers=admin).json()
    token = httpx.post(a.url + "/v1/tokens", json={"tenant": "hpc-lab"},
                       headers={"Authorization": f"Bearer {ADMIN}"}).json()["token"]
    acked: dict[str, int] = {}
    answers: Counter = Counter()
    lock = threading.Lock()

    def client(k: int) -> None:
        for i in range(k, APPS, CLIENTS):
            name, body, turn = f"app-{i:04d}", doc(f"app-{i:04d}", i), i
            while not given_up.is_set():
                server = servers[turn % 2]
                turn += 1
                try:
                    r = httpx.post(server.url + "/v1/applications", json=body, timeout=10,
                                   headers={"Authorization": f"Bearer {token}", "Idempotency-Key": f"key-{name}"})
                except httpx.TransportError:
                    time.sleep(0.02)
                    continue
                with lock:
                    answers[r.status_code] += 1
                if r.status_code in (200, 201):
                    with lock:
                        acked[name] = body["spec"]["components"][0]["replicas"]
                    break
                assert r.status_code >= 500, r.text
                time.sleep(0.02)

    given_up = threading.Event()  # the test failed: the clients stop too
    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    takeovers = []
    try:
        for _ in range(KILLS):
            due = len(acked) + 45
            while len(acked) < due and any(t.is_alive() for t in threads):
                time.sleep(0.01)
            active = next(s for s in servers if state(s) == "running")
            other = next(s for s in servers if s is not active)
            active.kill()
            killed = time.monotonic()
            while state(other) != "running":
                assert time.monotonic() - killed < 30, "no takeover within 30 s"
                time.sleep(0.02)
            takeovers.append(time.monotonic() - killed)
            active.start()  # it stands by now
            assert state(active) == "standby"
        for t in threads:
            t.join()
        print(f"takeovers after a kill: {', '.join(f'{s:.2f}' for s in takeovers)} s; answers {dict(answers)}")
        assert max(takeovers) <= TAKEOVER_S, takeovers
        assert len(acked) == APPS
        live = next(s for s in servers if state(s) == "running")
        http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        apps = every(http, "/v1/applications", limit=500)
        names = Counter(x["name"] for x in apps)
        assert set(names) == set(acked) and max(names.values()) == 1
        tasks = every(http, "/v1/tasks")
        assert Counter(t["app"] for t in tasks) == Counter(acked)
        end = time.monotonic() + 60
        while (waiting := every(http, "/v1/tasks", status="pending")) and time.monotonic() < end:
            time.sleep(0.2)
        assert waiting == [], f"{len(waiting)} tasks still pending, e.g. {waiting[:2]}"
    finally:
        given_up.set()
        for s in servers:
            s.stop()
        log.close()
    store = Store(db)
    placed: dict[str, bool] = {}
    twice = []
    for e in store.events(None, limit=10_000_000):
        if e.task is None:
            continue
        if e.kind == "placed":
            if placed.get(e.task):
                twice.append(e.task)
            placed[e.task] = True
        elif e.kind in STOPS or e.kind == "submitted":
            placed[e.task] = False
    assert placed and not twice, twice[:5]
    store.close()
