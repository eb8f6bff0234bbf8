"""The console over a recorded run and over the live control plane, read as
its pages answer (the browser tests drive the same pages in Chromium)."""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from builders import app, component, gpu, node_group, scenario, site, tenant
from conftest import EXAMPLES
from serving import wait
from suanli.console.model import PAGE, TaskQuery
from suanli.console.recorded import RecordedRun, RunFilesError
from suanli.console.web import add_console
from suanli.server.api import create_api
from suanli.server.controller import Controller
from suanli.server.store import Store, sqlite_url
from suanli.sim.results import write_outputs
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

ORIGIN = {"origin": "http://testserver"}


def simulated(path, out, **kw) -> RecordedRun:
    sim = Simulation(load_world([str(path)]), **kw)
    write_outputs(sim, sim.run(), out)
    return RecordedRun(out)


def viewer(run: RecordedRun) -> TestClient:
    site_ = FastAPI()
    add_console(site_, lambda who: run)
    return TestClient(site_)


@pytest.fixture(scope="module")
def autodrive(tmp_path_factory):
    return simulated(EXAMPLES / "autodrive.yaml", tmp_path_factory.mktemp("autodrive"))


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    return simulated(EXAMPLES / "ai-hpc-mix.yaml", tmp_path_factory.mktemp("mix"))


def sites_on_lane(html: str) -> list[str]:
    return re.findall(r'<g class="segment" data-site="([^"]+)"', html)


# ------------------------------------------------------------------ a recorded run


def test_a_task_page_follows_the_game_from_car_to_edge_and_back(autodrive):
    page = viewer(autodrive).get("/tasks/infotainment/movie/0")
    assert page.status_code == 200
    assert sites_on_lane(page.text) == ["car-1", "edge-1", "car-1"]
    t = autodrive.task("infotainment/movie/0")
    assert [(s["site"], s["tier"], s["start"], s["end"]) for s in t["segments"]] == [
        ("car-1", "device", 0.0, 600.0), ("edge-1", "edge", 600.0, 2400.0), ("car-1", "device", 2400.0, 3600.0)]
    assert t["segments"][1]["running_from"] == 605.0  # it ran there once it had restarted
    assert [m["kind"] for m in t["moves"]] == ["preempted", "migrated", "migrated"]


def test_state_moved_reads_in_binary_units(autodrive):
    """A move's state reads as a size (64.0 MiB), its exact bytes in the title."""
    page = viewer(autodrive).get("/tasks/infotainment/short-video/0").text
    assert '<span title="67,108,864 bytes">64.0 MiB</span>' in page and "67,108,864 B<" not in page
    events = viewer(autodrive).get("/events", params={"kind": "migrated"}).text
    assert "<i>bytes</i> 64.0 MiB" in events and "<i>bytes</i> 67108864" not in events


def test_the_slider_shows_the_world_at_an_instant(autodrive):
    client = viewer(autodrive)
    at_700 = client.get("/tasks", params={"at": 700, "state": "running", "tier": "edge"}).text
    at_end = client.get("/tasks", params={"state": "running", "tier": "edge"}).text
    assert "infotainment/movie/0" in at_700 and "infotainment/movie/0" not in at_end
    early = autodrive.overview(300)["counts"]
    assert early["running"] == 4 and early["pending"] == 0 and autodrive.overview(None)["counts"]["finished"] == 5
    assert autodrive.clamp(-5) == 0 and autodrive.clamp(1e9) == autodrive.end


def test_the_events_timeline_counts_each_kind_over_the_run(autodrive):
    counts = autodrive.event_counts(("migrated", "preempted", "lost"))
    assert {k: sum(v) for k, v in counts["kinds"].items()} == {"migrated": 5, "preempted": 3}
    migrated = counts["kinds"]["migrated"]
    assert migrated[int(600 / 3600 * len(migrated))] == 2  # two moved at 10 minutes
    page = viewer(autodrive).get("/events").text
    assert page.count('class="ev" data-kind="migrated"') == sum(1 for c in migrated if c)


def test_tasks_are_paged_in_a_stable_order_and_filtered(mix):
    total = mix.tasks(TaskQuery())["total"]
    assert total == len(mix.task_names) > 2 * PAGE
    seen = []
    for offset in range(0, total, PAGE):
        seen += [r["task"] for r in mix.tasks(TaskQuery(offset=offset))["rows"]]
    assert seen == mix.task_names  # every task once, in submission order
    running = mix.tasks(TaskQuery(state="running", limit=10_000))["rows"]
    assert running and all(r["status"] == "running" for r in running)
    assert len(running) == mix.result["metrics"]["tasks"]["running"]
    cloud = mix.tasks(TaskQuery(tier="cloud", state="running", limit=10_000))["rows"]
    assert cloud and all(r["tier"] == "cloud" for r in cloud)
    page2 = viewer(mix).get("/tasks", params={"page": 2})
    assert page2.status_code == 200 and page2.text.count("data-task=") == PAGE


def test_a_waiting_task_names_its_binding_constraint_and_its_gap(tmp_path):
    comp = component("m", lifetime="job", cpu=8, memory="32Gi", accelerators=[{"kind": "gpu", "count": 4}])
    nodes = node_group("g", count=2, cpu=48, memory="384Gi", accelerators=[gpu(4, shareable=False)])
    path = scenario(tmp_path, sites=[site("dc", groups=[nodes])], until="10m",
                    apps=[app("big", components=[component("x", lifetime="job", cpu=4, memory="8Gi",
                                                           accelerators=[{"kind": "gpu", "count": 8}])]),
                          app("fits", components=[comp]), app("later", components=[{**comp, "replicas": 2}])])
    run = simulated(path, tmp_path / "out")
    waits = viewer(run).get("/tasks/later/m/1").text  # both nodes' 4 GPUs taken: it waits for room
    assert "insufficient gpu: 4 requested, 0 free at best (4 more needed) on 2 nodes" in waits
    assert 'data-gap="4000"' in waits and "data-capacity" not in waits
    page = viewer(run).get("/tasks/big/x/0").text
    assert 'class="binding"' in page and ("inadmissible: it asks 8 gpu on one node, and the most any node of the "
                                          "fleet has is 4") in page  # nodes of 4 GPUs: it waits parked
    assert 'data-capacity="4000"' in page and "never fits: 4 gpu at most" in page
    overview = run.overview()
    assert overview["pending_by_reason"] == {"insufficient gpu": 1, "inadmissible: it asks 8 gpu on one node, and "
                                             "the most any node of the fleet has is 4": 1}, overview["pending_by_reason"]
    assert [r["task"] for r in run.tasks(TaskQuery(reason="capacity"))["rows"]] == ["later/m/1"]
    assert [r["task"] for r in run.tasks(TaskQuery(reason="inadmissible"))["rows"]] == ["big/x/0"]


def test_members_an_elastic_gang_runs_without_are_omitted_with_the_quota_first(tmp_path):
    comp = component("m", lifetime="job", cpu=8, memory="32Gi", accelerators=[{"kind": "gpu", "count": 4}],
                     gang={"size": 6, "minSize": 2}, coupling="ib")
    nodes = node_group("g", count=7, cpu=48, memory="384Gi", accelerators=[gpu(4, shareable=False)], fabrics={"ib": "ib-a"})
    path = scenario(tmp_path, sites=[site("dc", groups=[nodes])], apps=[app("train", components=[comp])],
                    tenants=[tenant(quota={"gpu": 18})], until="10m")
    run = simulated(path, tmp_path / "out")
    assert run.overview()["counts"]["omitted"] == 2
    page = viewer(run).get("/tasks/train/m/5").text
    assert '<span class="state omitted">omitted</span>' in page and "failed" not in page
    assert "Why it was left out" in page and 'data-code="quota"' in page


def test_a_tenants_usage_is_read_against_its_quota_at_the_end(tmp_path):
    comp = component("m", lifetime="job", cpu=8, memory="32Gi", accelerators=[{"kind": "gpu", "count": 4}])
    nodes = node_group("g", count=4, cpu=48, memory="384Gi", accelerators=[gpu(4, shareable=False)])
    path = scenario(tmp_path, sites=[site("dc", groups=[nodes])], apps=[app("train", components=[comp])],
                    tenants=[tenant(quota={"gpu": 18})], until="10m")
    run = simulated(path, tmp_path / "out")
    (t,) = run.tenants()
    assert t["quota"]["gpu_milli"] == 18000 and t["used"]["gpu_milli"] == 4000 and t["used"]["cpu_milli"] == 8000
    assert run.tenants(60)[0]["used"] is None  # recorded at the end only
    page = viewer(run).get("/tenants").text
    assert "22.2%" in page  # 4 of 18 GPUs


def test_a_folder_that_is_no_run_is_said_so(tmp_path):
    with pytest.raises(RunFilesError, match="no result.json"):
        RecordedRun(tmp_path)


def test_an_unknown_task_is_not_found(autodrive):
    assert viewer(autodrive).get("/tasks/nothing/here/0").status_code == 404


def test_every_view_of_a_recorded_run_answers(mix):
    client = viewer(mix)
    for path in ("/", "/topology", "/tenants", "/tasks", "/events", "/events?kind=preempted", "/?at=3600",
                 f"/tasks/{mix.task_names[0]}", "/tasks?q=train", "/tasks?at=not-a-number"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text[:300])
        assert r.headers["content-security-policy"].startswith("default-src 'self'")


# ------------------------------------------------------------------ the live control plane


@pytest.fixture
def live(tmp_path):
    world = load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])
    store = Store(sqlite_url(tmp_path / "suanli.db"))
    admin = store.ensure_admin(None)
    api = create_api(world, store, Controller(world, store, speed=100.0))
    tokens = {"admin": admin, "a": store.mint("acme-ai"), "b": store.mint("city-services")}
    with TestClient(api) as client:
        yield client, tokens
    store.close()


def sign_in(client: TestClient, token: str) -> None:
    client.cookies.clear()
    r = client.post("/login", data={"token": token, "next": "/"}, headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 303, r.text


def submit(client: TestClient, token: str, doc: dict) -> None:
    assert client.post("/v1/applications", json=doc, headers={"Authorization": f"Bearer {token}"}).status_code == 201


def wait_for(pred):
    return wait(pred, 10.0)


WEB = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "web"},
       "spec": {"components": [{"name": "c", "lifetime": "service", "replicas": 3, "resources": {"cpu": 1, "memory": "1Gi"}},
                               {"name": "huge", "lifetime": "service",
                                "resources": {"cpu": 1, "memory": "1Gi", "accelerators": [{"kind": "gpu", "count": 64}]}}]}}


def test_the_live_allocation_is_sampled_while_nobody_looks(tmp_path, monkeypatch):
    """The overview's allocation chart is the controller's, sampled as it
    turns (here every 50 ms), whether or not anyone has the console open:
    when it is first opened, the chart already has the time before."""
    import time

    import suanli.server.controller as controller_module
    from suanli.console.live import LiveRun

    monkeypatch.setattr(controller_module, "HISTORY_S", 0.05)
    world = load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])
    store = Store(sqlite_url(tmp_path / "suanli.db"))
    admin = store.ensure_admin(None)
    controller = Controller(world, store, speed=100.0)
    api = create_api(world, store, controller)
    try:
        with TestClient(api) as client:
            submit(client, store.mint("acme-ai"), WEB)

            def used(series) -> bool:
                return any(v > 0 for tier in series["by_tier"].values() for v in tier["cpu_milli"])

            wait(lambda: len((s := controller.allocation.series())["t"]) >= 5 and used(s), 10.0)  # no console yet
            first_look = time.time()
            sign_in(client, admin)
            assert client.get("/").status_code == 200
            chart = controller.ask("console")["history"]
            assert len(chart["t"]) >= 5 and chart["t"][0] < first_look - 0.1 and used(chart), chart
    finally:
        store.close()


def test_signing_in_sets_a_cookie_only_this_site_reads(live):
    client, tokens = live
    r = client.get("/tasks", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Ftasks"
    signing = client.get("/login").text  # the live console's own page, before anyone has signed in
    assert "live control plane" in signing and "recorded run" not in signing
    assert client.post("/login", data={"token": "nope"}, headers=ORIGIN).status_code == 401
    cross = client.post("/login", data={"token": tokens["a"]}, headers={"origin": "http://elsewhere.example"})
    assert cross.status_code == 403
    r = client.post("/login", data={"token": tokens["a"], "next": "//elsewhere.example/x"}, headers=ORIGIN,
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"  # never to another host
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = client.get("/").text
    key = re.search(r'name="form_key" value="([0-9a-f]+)"', page).group(1)
    assert tokens["a"] not in page and key not in (tokens["a"], "")
    assert client.post("/logout", data={"form_key": "0" * 64}, headers=ORIGIN).status_code == 403
    assert client.post("/logout", data={"form_key": key}, headers={"origin": "http://elsewhere.example"}).status_code == 403
    out = client.post("/logout", data={"form_key": key}, headers=ORIGIN, follow_redirects=False)
    assert out.status_code == 303 and 'suanli_session=""' in out.headers["set-cookie"]


def test_a_cookie_reads_but_never_changes_through_the_api(live):
    client, tokens = live
    sign_in(client, tokens["a"])
    assert client.get("/v1/tasks").status_code == 200  # the console's reads (its event stream)
    r = client.post("/v1/applications", json=WEB)  # a change needs the bearer header, never the cookie
    assert r.status_code == 401


def test_a_tenant_sees_only_its_own_work(live):
    client, tokens = live
    submit(client, tokens["a"], WEB)
    sign_in(client, tokens["a"])
    rows = wait_for(lambda: client.get("/tasks").text.count("data-task=") == 4)
    assert rows
    why = wait_for(lambda: 'class="binding"' in (t := client.get("/tasks/web/huge/0").text) and t)
    assert "inadmissible: it asks 64 gpu on one node" in why
    sign_in(client, tokens["b"])
    assert client.get("/tasks").text.count("data-task=") == 0
    for path in ("/tasks/web/c/0", "/tasks/web/huge/0", "/tasks/web/c/0?tenant=acme-ai"):
        assert client.get(path).status_code == 404, path  # direct URLs too
    assert "acme-ai" not in client.get("/tenants").text
    sign_in(client, tokens["admin"])
    assert client.get("/tasks").text.count("data-task=") == 4
    assert client.get("/tasks/web/c/0", params={"tenant": "acme-ai"}).status_code == 200
    pending = client.get("/tasks", params={"state": "pending", "reason": "inadmissible"}).text
    assert pending.count("data-task=") == 1 and "web/huge/0" in pending


def test_every_live_view_answers(live):
    client, tokens = live
    submit(client, tokens["a"], WEB)
    sign_in(client, tokens["admin"])
    wait_for(lambda: "running" in client.get("/tasks", params={"state": "running"}).text)
    for path in ("/", "/topology", "/tenants", "/tasks", "/events", "/tasks?tier=cloud", "/tasks?site=cloud-north"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text[:300])
    tenants = client.get("/tenants").text
    assert 'id="tenant-acme-ai"' in tenants and "<td>gpu</td>" in tenants and "320" in tenants  # its GPU quota, as written


def test_a_task_run_for_real_links_its_log(tmp_path):
    world = load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])
    store = Store(sqlite_url(tmp_path / "suanli.db"))
    api = create_api(world, store, Controller(world, store, speed=100.0), logs_dir=tmp_path / "logs")
    token = store.mint("acme-ai")
    with TestClient(api) as client:
        submit(client, token, WEB)
        sign_in(client, token)
        page = wait_for(lambda: "Its log" in (t := client.get("/tasks/web/c/0").text) and t)
        assert 'href="/v1/logs/web/c/0"' in page
        assert "Its log" not in client.get("/tasks/web/huge/0").text  # never placed: no log
    store.close()


def test_a_resized_gangs_page_shows_its_width_over_time(tmp_path):
    """An elastic gang (8 of up to 16 GPUs) that grows into free room, shrinks
    when a second gang arrives and grows back: every member's page lists the
    widths it ran at, from when, and why."""
    import yaml

    from test_elastic_sim import _docs

    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all(_docs([(0, 2, 8, 16, 40, 0, 30), (0, 1, 8, 8, 4, 600, 0)], 1, 4, 1,
                                             "goodput"), sort_keys=False))
    run = simulated(path, tmp_path / "out")
    for task in ("j0/train/0", "j0/train/12"):
        page = viewer(run).get(f"/tasks/{task}").text
        assert "Gang width" in page, task
        rows = re.findall(r'<tr><td>[^<]*</td><td class="num">(\d+)</td><td>([^<]*)</td></tr>',
                          page.split('id="widths"')[1].split("</table>")[0])
        assert [int(w) for w, _ in rows] == [8, 16, 8, 16] and rows[0][1] == "started" and "goodput" in rows[1][1]
    assert "Gang width" not in viewer(run).get("/tasks/j1/train/0").text  # never resized
