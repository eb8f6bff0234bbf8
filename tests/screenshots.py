"""Screenshots of every view of the console, 1400 px wide, for docs/console.md:

    make screenshots          # .venv/bin/python tests/screenshots.py docs/console

A recorded run (the city scenario with 60 cars, its hour) opened as ``suanli
view`` would, and a real ``suanli serve`` given a little work (a game that
moves to the edge when autopilot starts and comes home, a task too large
for any node), each view signed in as an admin. Needs Chromium and
Playwright, as the browser tests do (tests/browser.py).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import httpx  # noqa: E402
from fastapi import FastAPI  # noqa: E402

from browser import Browser, png_size, served  # noqa: E402
from serving import ADMIN, Server, free_port, wait  # noqa: E402
from suanli.console.recorded import RecordedRun  # noqa: E402
from suanli.console.web import add_console  # noqa: E402

CITY = HERE.parent / "examples" / "city-autodrive.yaml"


def recorded(browser: Browser, out: Path, tmp: Path) -> list[Path]:
    run_dir = tmp / "city"
    subprocess.run([sys.executable, "-m", "suanli.cli", "simulate", str(CITY), "--population", "cars=60",
                    "--out", str(run_dir)], check=True, capture_output=True)
    run = RecordedRun(run_dir)
    game = next(n for n in run.task_names if "/game/" in n and len(run.task(n)["segments"]) >= 3)
    app = FastAPI()
    add_console(app, lambda who: run, title="suanli · city")
    shots = []
    with served(app) as url:
        page = browser.new_page()
        for name, path in (("overview", "/?at=1500"), ("topology", "/topology?at=1500"), ("tenants", "/tenants?at=1500"),
                           ("tasks", "/tasks?at=1500&state=running&tier=edge"), ("task", f"/tasks/{game}"),
                           ("events", "/events?kind=migrated")):
            page.goto(url + path)
            shots.append(page.shot(out / f"recorded-{name}.png"))
        page.assert_no_errors()
        page.close()
    return shots


def live(browser: Browser, out: Path, tmp: Path) -> list[Path]:
    log = open(tmp / "serve.log", "w")
    server = Server(f"sqlite:///{tmp / 'suanli.db'}", free_port(), log, speed=100)
    server.start()
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        car = httpx.post(server.url + "/v1/tokens", json={"tenant": "car-1-owner"}, headers=admin).json()["token"]
        who = {"Authorization": f"Bearer {car}"}
        sys.path.insert(0, str(HERE))
        from test_console_browser import AUTOPILOT, GAME

        huge = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "huge"},
                "spec": {"components": [{"name": "c", "lifetime": "service", "resources": {
                    "cpu": 1, "memory": "1Gi", "accelerators": [{"kind": "gpu", "count": 64}]}}]}}
        web = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "web"},
               "spec": {"components": [{"name": "c", "lifetime": "service", "replicas": 6,
                                        "resources": {"cpu": 2, "memory": "4Gi"}, "near": {"site": "car-1", "maxRttMs": 30}}]}}
        for doc in (GAME, web, huge):
            httpx.post(server.url + "/v1/applications", json=doc, headers=who)
        wait(lambda: httpx.get(server.url + "/v1/tasks/infotainment/game/0", headers=who).json()["status"] == "running")
        httpx.post(server.url + "/v1/applications", json=AUTOPILOT, headers=who)
        wait(lambda: httpx.get(server.url + "/v1/tasks/infotainment/game/0", headers=who).json()["site"] == "edge-1")
        httpx.delete(server.url + "/v1/applications/autopilot", headers=who)
        wait(lambda: httpx.get(server.url + "/v1/tasks/infotainment/game/0", headers=who).json()["site"] == "car-1")
        httpx.post(server.url + "/v1/nodes/edge-2/cpu-0/drain", headers=admin)
        time.sleep(6)  # two samples of the allocation apart
        page = browser.new_page()
        page.goto(server.url + "/")
        out_login = page.shot(out / "live-login.png")
        page.fill("#token", ADMIN)
        page.click("form[action='/login'] button[type=submit]")
        page.wait_for_url(server.url + "/")
        shots = [out_login]
        for name, path in (("overview", "/"), ("tasks", "/tasks"),
                           ("task", "/tasks/infotainment/game/0?tenant=car-1-owner"),
                           ("pending", "/tasks/huge/c/0?tenant=car-1-owner"), ("events", "/events"),
                           ("tenants", "/tenants"), ("topology", "/topology")):
            page.goto(server.url + path)
            shots.append(page.shot(out / f"live-{name}.png"))
        page.assert_no_errors()
        page.close()
        return shots
    finally:
        server.proc.terminate()
        server.proc.wait(timeout=30)
        log.close()


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console")
    out.mkdir(parents=True, exist_ok=True)
    browser = Browser()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            shots = recorded(browser, out, Path(tmp)) + live(browser, out, Path(tmp))
    finally:
        browser.close()
    for p in shots:
        w, h = png_size(p)
        assert w == 1400, (p, w)
        print(f"{p}  {w}x{h}")


if __name__ == "__main__":
    main()
