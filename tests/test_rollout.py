"""Updates in place: a changed application rolled out replica by replica,
readiness-gated, with its state kept; undo and scale. In the twin (every
budget and shape of change) and under ``serve`` with real processes."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import httpx
import pytest

from live import as_tenant, executor_server, one_site, suanli

from suanli.sim.rollout import surge_allowed, unavailable_allowed
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

pytestmark = pytest.mark.long(40)

COMPONENTS = """\
- {name: web, lifetime: service, replicas: %d, resources: {cpu: 1, memory: 1Gi}}
- {name: gang, lifetime: service, gang: {size: 2}, resources: {cpu: 1, memory: 1Gi}}
"""


def running_twin(folder: Path, replicas: int):
    """The twin with ``replicas`` of a web service and a gang of two running; (simulation, application)."""
    world = load_world([one_site(folder, COMPONENTS % replicas, "100s", nodes=4)])
    sim = Simulation(world)
    sim.start()
    sim.step(1.0)
    return sim, world.apps[0]


@pytest.mark.parametrize("replicas, budget, grow", [(10, "25%", 0), (10, 1, 2), (4, "50%", -1), (7, "10%", 0),
                                                     (3, 5, 1)])
def test_the_twin_replaces_within_the_budget_and_keeps_the_names(tmp_path, replicas, budget, grow):
    sim, app = running_twin(tmp_path, replicas)
    web, gang = app.components
    bigger = dataclasses.replace(web, size=replicas + grow, resources=dataclasses.replace(web.resources,
                                                                                         cpu_milli=2000))
    sim.update(dataclasses.replace(app, components=(bigger, gang)), 2, budget)
    allowed = unavailable_allowed(budget, replicas + grow)
    lowest, t = replicas + grow, 1.0
    for k in range(1, 200):
        t = 1.0 + k * 0.001
        sim.step(t)
        lowest = min(lowest, sim.rollouts._ready(app.name, bigger))
        if not sim.rollouts.active:
            break
    events = sim.events.take()
    updating = [e for e in events if e["kind"] == "updating"]
    assert not sim.rollouts.active and any(e["kind"] == "rolledOut" for e in events)
    assert len(updating) == min(replicas, replicas + grow)  # the gang did not change: it stays
    assert lowest >= replicas + grow - allowed
    # no instant replaced more than the budget allowed
    per_instant: dict[float, int] = {}
    for e in updating:
        per_instant[e["t"]] = per_instant.get(e["t"], 0) + 1
    assert max(per_instant.values()) <= allowed
    running = {task: rec for task, rec in sim.view.tasks.items() if rec.status == "running"}
    webs = sorted(t for t in running if "/web/" in t)
    assert webs == sorted(f"{app.name}/web/{i}" for i in range(replicas + grow))
    assert all(running[t].component.resources.cpu_milli == 2000 for t in webs)
    assert sum("/gang/" in t for t in running) == 2
    withdrawn = [e for e in events if e["kind"] == "finished" and "not in revision 2" in e.get("reason", "")]
    assert len(withdrawn) == max(0, -grow)
    assert sim.rollouts.status(app.name) == {"revision": 2, "done": True, "components": {
        "web": {"replicas": replicas + grow, "updated": replicas + grow, "ready": replicas + grow},
        "gang": {"replicas": 2, "updated": 2, "ready": 2}}}


@pytest.mark.parametrize("replicas, budget, surge", [(8, 1, "25%"), (4, "25%", 1), (5, 1, 0), (3, 1, "100%")])
def test_a_stateless_service_surges_extra_replicas_of_the_new_version_then_withdraws_them(
        tmp_path, replicas, budget, surge):
    sim, app = running_twin(tmp_path, replicas)
    web, gang = app.components
    changed = dataclasses.replace(web, resources=dataclasses.replace(web.resources, cpu_milli=2000))
    sim.update(dataclasses.replace(app, components=(changed, gang)), 2, budget, surge)
    extra = surge_allowed(surge, replicas)
    names = {f"{app.name}/web/{i}" for i in range(replicas)}
    seen = {"most": replicas, "lowest": replicas}

    def sample(t: float) -> None:  # after every instant's pass
        webs = {task for task, rec in sim.view.tasks.items() if rec.status == "running" and "/web/" in task}
        seen["most"] = max(seen["most"], len(webs))
        seen["lowest"] = min(seen["lowest"], sim.rollouts._ready(app.name, changed) + len(webs - names))

    sim.on_instant = sample
    for k in range(1, 300):
        sim.step(1.0 + k * 0.001)
        if not sim.rollouts.active:
            break
    most, lowest = seen["most"], seen["lowest"]
    events = sim.events.take()
    assert not sim.rollouts.active
    started = [e for e in events if e["kind"] == "rollout"]
    assert started[0]["surge"] == min(extra, replicas)
    assert most == replicas + min(extra, replicas)  # the extra replicas ran beside the old ones (not vacuous)
    assert lowest >= replicas - unavailable_allowed(budget, replicas)
    ended = [e for e in events if e["kind"] == "surgeEnded"]
    assert [len(e["surge_tasks"]) for e in ended] == ([min(extra, replicas)] if extra else [])
    running = {task for task, rec in sim.view.tasks.items() if rec.status == "running" and "/web/" in task}
    assert running == names  # the extra ones withdrawn: the replicas are the document's
    if extra:  # the extra ones let more old replicas go at once than maxUnavailable alone
        per_instant: dict[float, int] = {}
        for e in events:
            if e["kind"] == "updating":
                per_instant[e["t"]] = per_instant.get(e["t"], 0) + 1
        assert max(per_instant.values()) > unavailable_allowed(budget, replicas)


SERVICE = """\
import os, pathlib, signal, sys, time
state = pathlib.Path(os.environ["SUANLI_STATE_DIR"])
count = state / "count"
ready = pathlib.Path(f"ready-{os.environ['SUANLI_RUN']}")  # this run's: not one an earlier run left here
n = int(count.read_text()) if count.exists() else 0
print(f"version {os.environ['VERSION']} resuming after {n}", flush=True)
def save():
    count.write_text(str(n))
def leave(*_):
    save()
    print(f"saved {n}, leaving", flush=True)
    sys.exit(0)
def checkpoint(*_):
    save()
    (state / ".checkpointed").touch()
signal.signal(signal.SIGTERM, leave)
signal.signal(signal.SIGUSR1, checkpoint)
time.sleep(0.3)
ready.touch()
while True:
    n += 1
    time.sleep(0.02)
"""


def app_doc(folder: Path, version: int, replicas: int = 10) -> Path:
    path = folder / f"web-{version}-{replicas}.yaml"
    path.write_text(f"""\
apiVersion: suanli/v1
kind: Application
metadata: {{name: web}}
spec:
  update: {{maxUnavailable: 20%}}
  components:
    - name: server
      lifetime: service
      replicas: {replicas}
      resources: {{cpu: 100m, memory: 64Mi}}
      state: {{kind: stateful, size: 1Mi}}
      run:
        command: [python3, {folder / "service.py"}]
        env: {{VERSION: "{version}"}}
        readiness: {{exec: [sh, -c, "test -e ready-$SUANLI_RUN"], period: 0.1s}}
""")
    return path


def ready_counts(events: list[dict], since: int) -> list[int]:
    """The number of ready replicas after each event past id ``since``, all replayed in order."""
    ready: set[str] = set()
    out = []
    for e in events:
        task, kind = e.get("task"), e["kind"]
        if kind == "ready":
            ready.add(task)
        elif kind in ("notReady", "updating", "finished", "failed", "requeued", "lost", "preempted"):
            ready.discard(task)
        else:
            continue
        if e["id"] > since:
            out.append(len(ready))
    return out


def test_serve_rolls_out_a_change_readiness_gated_keeps_state_and_undoes_and_scales(tmp_path):
    with executor_server(tmp_path, "local") as (server, admin, folder):
        (folder / "service.py").write_text(SERVICE)
        (folder / "service.py").chmod(0o644)
        mine = as_tenant(admin, "acme-ai")
        http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {mine['SUANLI_TOKEN']}"},
                            timeout=30)

        def tasks() -> list[dict]:  # (looked at often: through the API, not a client process each time)
            return http.get("/v1/tasks").json()

        def wait_ready(n: int) -> None:
            deadline = time.monotonic() + 90
            while sum(t["ready"] is True for t in tasks()) != n or len(tasks()) != n:
                assert time.monotonic() < deadline, tasks()
                time.sleep(0.2)

        r = suanli("apply", "-f", app_doc(folder, 1), env=mine)
        assert r.returncode == 0 and "application/web created" in r.stdout, r.stderr
        seen = set()
        deadline = time.monotonic() + 90
        while (now := tasks()) and not (len(now) == 10 and all(t["ready"] is True for t in now)):
            seen |= {(t["status"], t["ready"]) for t in now}
            assert time.monotonic() < deadline, now
            time.sleep(0.05)
        assert ("running", False) in seen, seen  # running before ready, and the page said so
        described = suanli("describe", "task", "web/server/0", env=mine).stdout
        assert "ready:        True" in described and " ready " in described  # its history has the event
        with httpx.Client(base_url=server.url, timeout=30) as browser:  # and the console's task page
            signed = browser.post("/login", data={"token": mine["SUANLI_TOKEN"], "next": "/"},
                                  headers={"origin": server.url}, follow_redirects=False)
            assert signed.status_code == 303, signed.text
            page = browser.get("/tasks/web/server/0").text
            assert '<span class="state ready" id="readiness">ready</span>' in page, page[:2000]
        r = suanli("apply", "-f", app_doc(folder, 1), env=mine)
        assert "application/web unchanged" in r.stdout
        r = suanli("apply", "-f", app_doc(folder, 2), env=mine)
        assert "application/web configured (revision 2: rolling out)" in r.stdout, r.stdout + r.stderr
        polled = []
        deadline = time.monotonic() + 120
        while True:  # a steady stream of looks while it rolls
            polled.append(sum(t["ready"] is True for t in tasks()))
            rollout = http.get("/v1/applications/web/rollout").json()
            if rollout["done"]:
                break
            assert time.monotonic() < deadline, rollout
            time.sleep(0.02)
        r = suanli("rollout", "status", "web", env=mine)
        assert "revision 2: rolled out (server: 10 of 10 updated, 10 ready)" in r.stdout, r.stdout
        assert min(polled) >= 8, polled
        events = every_event(server.url, mine["SUANLI_TOKEN"])
        counts = ready_counts(events, first_of(events, "rollout"))
        assert min(counts) >= 8 and counts[-1] == 10, counts  # never fewer than 10 - 20% ready
        assert sum(e["kind"] == "updating" for e in events) == 10
        for i in range(10):  # the new version took over where the old one left off
            log_text = http.get(f"/v1/logs/web/server/{i}").text
            saved = [int(line.split()[1].rstrip(",")) for line in log_text.splitlines()
                     if line.startswith("saved ")]
            resumed = [line for line in log_text.splitlines() if line.startswith("version ")]
            assert resumed[0] == "version 1 resuming after 0" and resumed[-1].startswith("version 2 "), log_text
            assert resumed[-1] == f"version 2 resuming after {saved[-1]}", log_text

        r = suanli("rollout", "undo", "web", env=mine)
        assert r.returncode == 0 and "revision 3" in r.stdout, r.stderr
        r = suanli("rollout", "status", "web", "--watch", "--timeout", "120", env=mine)
        assert r.returncode == 0 and "revision 3: rolled out" in r.stdout, r.stdout + r.stderr
        last = suanli("logs", "web/server/0", env=mine).stdout.strip().splitlines()  # (as a user reads it)
        assert [line for line in last if line.startswith("version ")][-1].startswith("version 1 ")

        r = suanli("scale", "web", "--replicas", "12", env=mine)
        assert r.returncode == 0 and "revision 4" in r.stdout, r.stderr
        wait_ready(12)
        assert suanli("scale", "web", "--replicas", "7", env=mine).returncode == 0
        wait_ready(7)
        assert sorted(t["task"] for t in tasks()) == sorted(f"web/server/{i}" for i in range(7))
        bad = suanli("scale", "web", "--replicas", "3", "--component", "nope", env=mine)
        assert bad.returncode == 2 and "no component 'nope'" in bad.stderr


def every_event(url: str, token: str) -> list[dict]:
    import httpx

    out, after = [], 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        while True:
            page = http.get("/v1/events", params={"after": after, "limit": 1000}).json()
            if not page:
                return out
            out += [{"id": e["id"], **e["body"], "kind": e["kind"]} for e in page]
            after = page[-1]["id"]


def first_of(events: list[dict], kind: str) -> int:
    return next(e["id"] for e in events if e["kind"] == kind)
