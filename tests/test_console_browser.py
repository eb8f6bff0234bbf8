"""The console in a real browser (headless Chromium, tests/browser.py):
against a recorded run served by ``suanli view``'s app on loopback, and
against a real ``suanli serve`` process. Every page must leave no
JavaScript error (the ``page`` fixture fails the test otherwise)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from browser import served
from builders import app, component, gpu, node_group, scenario, site
from conftest import EXAMPLES
from serving import ADMIN, Server, free_port, wait
from suanli.console.recorded import RecordedRun
from suanli.console.web import add_console

CITY = Path(__file__).resolve().parent.parent / "examples" / "city-autodrive.yaml"


def lane_sites(page) -> list[str]:
    return page.locator("svg.lane g.segment").evaluate_all("gs => gs.map(g => g.dataset.site)")


def simulate(scenario_path, out, *extra) -> RecordedRun:
    subprocess.run([sys.executable, "-m", "suanli.cli", "simulate", str(scenario_path), "--out", str(out), *extra],
                   check=True, capture_output=True)
    return RecordedRun(out)


@pytest.fixture(scope="module")
def city(tmp_path_factory):
    """The city scenario with 60 cars: games move to an edge when autopilot starts, and come home."""
    run = simulate(CITY, tmp_path_factory.mktemp("city") / "out", "--population", "cars=60")
    site_ = FastAPI()
    add_console(site_, lambda who: run)
    with served(site_) as url:
        yield run, url


def moved_game(run: RecordedRun) -> str:
    for name in run.task_names:
        if "/game/" in name:
            tiers = [s["tier"] for s in run.task(name)["segments"]]
            if len(tiers) >= 3 and tiers[0] == "device" and tiers[-1] == "device" and "edge" in tiers:
                return name
    raise AssertionError("no game moved car -> edge -> car")


def test_a_recorded_game_is_followed_from_car_to_edge_and_home(city, page):
    run, url = city
    game = moved_game(run)
    page.goto(url + "/tasks")
    page.fill("input[name=q]", game)
    page.click("form#filters button[type=submit]")
    page.click(f'tr[data-task="{game}"] a')
    page.wait_for_url(re.compile(re.escape("/tasks/" + game)))
    sites = lane_sites(page)
    car = game.split("/")[0].split(".")[1]
    assert sites[0] == car and sites[-1] == car and any(s.startswith("edge-") for s in sites), sites
    tiers = page.locator("#segments tbody tr td:nth-child(2)").all_inner_texts()
    assert [t.strip() for t in tiers][:1] == ["device"] and "edge" in [t.strip() for t in tiers]
    migrated = page.locator("table.moves tbody tr", has_text="migrated")
    assert migrated.count() >= 2
    assert all(float(b.split()[0]) > 0 and b.split()[1] in ("B", "KiB", "MiB", "GiB")  # the game's state went
               for b in migrated.locator("td:nth-child(5)").all_inner_texts())


def test_tasks_filter_by_state_and_page(city, page):
    run, url = city
    page.goto(url + "/tasks")
    page.select_option("select[name=state]", "running")
    page.click("form#filters button[type=submit]")
    page.wait_for_load_state()  # (a click waits for the navigation to begin, not for its page)
    states = page.locator("#tasks tbody .state").all_inner_texts()
    assert states and set(states) == {"running"}
    total = int(page.locator("h1 small").inner_text().split()[0].replace(",", ""))
    assert total == run.overview()["counts"]["running"]
    if total > 50:
        page.click("a[rel=next]")
        page.wait_for_load_state()
        assert "page=2" in page.url and page.locator("#tasks tbody tr").count() > 0


def test_the_time_slider_shows_an_earlier_world(city, page):
    run, url = city
    page.goto(url + "/")
    page.evaluate("""() => { const s = document.getElementById('at'); s.value = '60';
                             s.dispatchEvent(new Event('input')); s.dispatchEvent(new Event('change')); }""")
    page.wait_for_url(re.compile(r"at=60"))
    running = int(page.locator(".stat.running b").inner_text().replace(",", ""))
    assert running == run.overview(60)["counts"]["running"] != run.overview()["counts"]["running"]
    assert page.locator("#at-label").inner_text() == "t = 1:00"


def test_a_pending_task_reads_its_first_reason_and_gap(tmp_path, page):
    nodes = node_group("g", count=2, cpu=48, memory="384Gi", accelerators=[gpu(4, shareable=False)])
    path = scenario(tmp_path, sites=[site("dc", groups=[nodes])], until="10m",
                    apps=[app("big", components=[component("x", cpu=4, memory="8Gi",
                                                           accelerators=[{"kind": "gpu", "count": 8}])])])
    run = simulate(path, tmp_path / "out")
    site_ = FastAPI()
    add_console(site_, lambda who: run)
    with served(site_) as url:
        page.goto(url + "/tasks?state=pending")
        page.click('tr[data-task="big/x/0"] a')
        first = page.locator("#why li").first
        assert "binding" in (first.get_attribute("class") or "")
        assert first.locator("b").inner_text() == \
            "inadmissible: it asks 8 gpu on one node, and the most any node of the fleet has is 4"
        assert first.locator(".gap").get_attribute("data-capacity") == "4000"  # it never fits any node


# ------------------------------------------------------------------ a real suanli serve


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """One real server for the live tests (each uses tenants and nodes of its own)."""
    tmp_path = tmp_path_factory.mktemp("serve")
    log = open(tmp_path / "serve.log", "w")
    server = Server(f"sqlite:///{tmp_path / 'suanli.db'}", free_port(), log, speed=100)
    server.start()
    try:
        yield server
    finally:
        server.proc.terminate()
        server.proc.wait(timeout=30)
        log.close()


def mint(server, tenant: str) -> str:
    r = httpx.post(server.url + "/v1/tokens", json={"tenant": tenant}, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def expect_not_found(page, url: str) -> None:
    """The page at ``url`` answers 404 with the console's own page; the browser's
    note that the document itself came with a 404 is no error of the page's."""
    response = page.goto(url)
    assert response.status == 404 and "Not found" in page.locator("h1").inner_text()
    page.errors[:] = [e for e in page.errors if not (e.startswith("console.error: Failed to load resource: the "
                                                                  "server responded with a status of 404")
                                                     and f"({url}:" in e)]


def sign_in(page, url: str, token: str) -> None:
    page.goto(url + "/")
    assert "/login" in page.url
    page.fill("#token", token)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(url + "/")


GAME = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "infotainment"},
        "spec": {"priority": 100, "components": [
            {"name": "game", "lifetime": "service", "resources": {"cpu": 4, "memory": "6Gi"},
             "state": {"kind": "stateful", "size": "512Mi"}, "near": {"site": "car-1", "maxRttMs": 40}}]}}
AUTOPILOT = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "autopilot"},
             "spec": {"priority": 1000, "preemptible": False, "components": [
                 {"name": "perception", "lifetime": "service", "priority": 1000,
                  "resources": {"cpu": 10, "memory": "12Gi"}, "near": {"site": "car-1", "maxRttMs": 1}}]}}


def test_live_a_game_moves_to_the_edge_and_home_and_another_tenant_cannot_see_it(serve, browser):
    car = mint(serve, "car-1-owner")
    who = {"Authorization": f"Bearer {car}"}
    assert httpx.post(serve.url + "/v1/applications", json=GAME, headers=who).status_code == 201
    wait(lambda: httpx.get(serve.url + "/v1/tasks/infotainment/game/0", headers=who).json()["status"] == "running")
    assert httpx.post(serve.url + "/v1/applications", json=AUTOPILOT, headers=who).status_code == 201
    wait(lambda: httpx.get(serve.url + "/v1/tasks/infotainment/game/0", headers=who).json()["site"] == "edge-1",
         what="the game on the edge")
    assert httpx.delete(serve.url + "/v1/applications/autopilot", headers=who).status_code == 204
    wait(lambda: (t := httpx.get(serve.url + "/v1/tasks/infotainment/game/0", headers=who).json())["site"] == "car-1"
         and t["status"] == "running", what="the game home again")
    page = browser.new_page()
    try:
        sign_in(page, serve.url, car)
        page.click("header nav a:has-text('Tasks')")
        page.click('tr[data-task="infotainment/game/0"] a')
        page.wait_for_url(re.compile(re.escape("/tasks/infotainment/game/0")))
        page.wait_for_load_state()  # a click waits for the navigation to begin, not for its page
        assert lane_sites(page) == ["car-1", "edge-1", "car-1"]
        assert page.locator("table.moves tbody tr", has_text="migrated").count() == 2
        page.assert_no_errors()
    finally:
        page.close()
    other = browser.new_page()  # another tenant, by the table and by a direct URL
    try:
        sign_in(other, serve.url, mint(serve, "city-services"))
        other.goto(serve.url + "/tasks")
        assert other.locator("#tasks tbody tr[data-task]").count() == 0
        for path in ("/tasks/infotainment/game/0", "/tasks/infotainment/game/0?tenant=car-1-owner"):
            expect_not_found(other, serve.url + path)
        other.assert_no_errors()
    finally:
        other.close()


def test_live_a_node_drained_appears_without_reloading(serve, page):
    sign_in(page, serve.url, ADMIN)
    page.goto(serve.url + "/events")
    page.wait_for_function("document.getElementById('live-state').textContent === 'live'")
    rows = page.locator("#events tbody tr[data-kind=nodeDrain]")
    assert rows.count() == 0
    r = httpx.post(serve.url + "/v1/nodes/edge-2/cpu-0/drain", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code in (200, 202, 204), r.text
    rows.first.wait_for(timeout=10_000)
    assert "edge-2/cpu-0" in rows.first.inner_text()
    assert page.url.endswith("/events")  # the same page, not reloaded


def test_live_a_pending_task_names_its_first_reason_and_gap(serve, page):
    token = mint(serve, "acme-ai")
    doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "huge"},
           "spec": {"components": [{"name": "c", "lifetime": "service",
                                    "resources": {"cpu": 1, "memory": "1Gi", "accelerators": [{"kind": "gpu", "count": 64}]}}]}}
    assert httpx.post(serve.url + "/v1/applications", json=doc,
                      headers={"Authorization": f"Bearer {token}"}).status_code == 201
    small = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "small"},
             "spec": {"components": [{"name": "c", "lifetime": "service", "replicas": 2,
                                      "resources": {"cpu": 4, "memory": "8Gi", "accelerators": [{"kind": "gpu", "count": 1}]}}]}}
    assert httpx.post(serve.url + "/v1/applications", json=small,
                      headers={"Authorization": f"Bearer {token}"}).status_code == 201
    sign_in(page, serve.url, token)
    wait(lambda: page.goto(serve.url + "/tenants") and page.locator("#tenant-acme-ai svg.bar rect.used").count() > 0,
         what="the tenant's quota in use drawn")  # (no inline style: the page's security policy allows none)
    wait(lambda: page.goto(serve.url + "/tasks?state=pending&reason=inadmissible") and
         page.locator('tr[data-task="huge/c/0"]').count() == 1, what="the task listed by its first reason")
    page.click('tr[data-task="huge/c/0"] a')
    first = page.locator("#why li.binding")
    assert first.locator("b").inner_text().startswith("inadmissible: it asks 64 gpu on one node")  # no node has 64
    assert 0 < int(first.locator(".gap").get_attribute("data-capacity")) < 64000
