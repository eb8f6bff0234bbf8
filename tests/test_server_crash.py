"""Crash test: ``suanli serve`` killed with SIGKILL at random moments while 8
clients submit 160 applications, and started again each time (at least
four times; ``bench/bench_serve.py`` measures the server under steady load),
on a machine kept busy by other processes (``busy``).

Each client retries a submission (with its idempotency key) until it is
acknowledged. Afterwards every acknowledged application exists exactly once,
with all its tasks, and every task is placed (the scheduler rebuilt its
state from the store after each kill); nothing was acknowledged that is not
there. Runs against SQLite and against PostgreSQL.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import httpx
import pytest

from serving import ADMIN, Server, every, free_port
from test_server_api import postgres  # noqa: F401  (the session's PostgreSQL, for the second run)

from suanli.server.store import Store, sqlite_url

CLIENTS, APPS = 8, 160
pytestmark = [pytest.mark.usefixtures("busy"), pytest.mark.long(140)]  # a loaded machine


def doc(name: str, i: int) -> dict:
    lifetime = "service" if i % 4 == 0 else "job"
    comp = {"name": "c", "lifetime": lifetime, "replicas": 1 + i % 3, "resources": {"cpu": 0.5, "memory": "512Mi"}}
    if lifetime == "job":
        comp["duration"] = "30s"
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name},
            "spec": {"components": [comp]}}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_kill_9_loses_no_acknowledged_submission_and_no_task(backend, tmp_path, request):
    db = sqlite_url(tmp_path / "s.db") if backend == "sqlite" else request.getfixturevalue("postgres").fresh_database()
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(db, free_port(), log)
        server.start()
        token = httpx.post(server.url + "/v1/tokens", json={"tenant": "hpc-lab"},
                           headers={"Authorization": f"Bearer {ADMIN}"}).json()["token"]
        acked: dict[str, int] = {}  # application -> its task count, once acknowledged
        answers = Counter()
        lock = threading.Lock()
        up = threading.Event()
        up.set()

        def client(k: int) -> None:
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
                for i in range(k, APPS, CLIENTS):
                    name = f"app-{i:04d}"
                    body = doc(name, i)
                    while True:
                        up.wait()
                        try:
                            r = http.post("/v1/applications", json=body, headers={"Idempotency-Key": f"key-{name}"})
                        except httpx.TransportError:
                            time.sleep(0.05)
                            continue
                        with lock:
                            answers[r.status_code] += 1
                        if r.status_code in (200, 201):
                            assert r.json()["name"] == name
                            with lock:
                                acked[name] = body["spec"]["components"][0]["replicas"]
                            break
                        assert r.status_code >= 500, r.text  # only a dying server may refuse
                        time.sleep(0.05)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        rng = random.Random(7)
        while any(t.is_alive() for t in threads):
            # the next kill after some more acknowledgements (so that a fast run is killed as often
            # as a slow one), at a random moment in between
            due, deadline = len(acked) + rng.randint(25, 40), time.monotonic() + 5.0
            while len(acked) < due and time.monotonic() < deadline and any(t.is_alive() for t in threads):
                time.sleep(0.01)
            if not any(t.is_alive() for t in threads):
                break
            server.kill()
            up.clear()
            time.sleep(rng.uniform(0, 0.3))
            server.start()
            up.set()
        for t in threads:
            t.join()
        server.kill()  # and once more after the last acknowledgement
        server.start()
        try:
            assert len(acked) == APPS
            assert server.kills >= 4, server.kills
            http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            apps = every(http, "/v1/applications", limit=100)  # in pages, as a client reads them
            names = Counter(a["name"] for a in apps)
            assert set(names) == set(acked) and max(names.values()) == 1
            tasks = every(http, "/v1/tasks")
            by_app = Counter(t["app"] for t in tasks)
            assert by_app == Counter(acked)
            assert len({t["task"] for t in tasks}) == len(tasks) == sum(acked.values())
            end = time.monotonic() + 60
            while time.monotonic() < end:
                waiting = every(http, "/v1/tasks", status="pending")
                if not waiting:
                    break
                time.sleep(0.2)
            assert waiting == [], f"{len(waiting)} tasks still pending, e.g. {waiting[:2]}"
        finally:
            server.stop()
    store = Store(db)  # straight from the database: one row per application, each task once
    rows = store.apps()
    assert len(rows) == APPS and len({r.name for r in rows}) == APPS
    assert len(store.tasks()) == sum(acked.values())
    store.close()
