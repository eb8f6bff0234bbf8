"""Health probes with real processes: readiness (http, tcp, exec) that comes
and goes, liveness that kills and restarts, what the control plane shows
of a task that runs but is not ready, and probes in a container."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from live import events, one_site, suanli

pytestmark = pytest.mark.long(40)

# serves 200 until it has answered ``SICK_AFTER`` requests, then 503; its port is its first argument
FLAKY = """\
import http.server, sys
seen = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global seen
        seen += 1
        self.send_response(200 if seen <= int(sys.argv[2]) else 503)
        self.end_headers()
    def log_message(self, *a):
        pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    from serving import free_port as port

    return port()


def run(tmp_path: Path, components: str, until: str, *args: str) -> list[dict]:
    path = one_site(tmp_path, components, until)
    r = suanli("run", path, "--work-dir", tmp_path / "w", *args)
    assert r.returncode == 0, r.stderr
    return events(tmp_path / "w" / "out")


def of(evs: list[dict], task: str, *kinds: str) -> list[dict]:
    return [e for e in evs if e.get("task") == task and e["kind"] in kinds]


def test_readiness_comes_and_goes_and_liveness_kills_and_restarts(tmp_path):
    (tmp_path / "flaky.py").write_text(FLAKY)
    web, port = free_port(), free_port()
    evs = run(tmp_path, f"""\
        - name: web
          lifetime: service
          resources: {{cpu: 100m}}
          run:
            command: [python3, flaky.py, "{web}", "4"]
            readiness: {{http: {{port: {web}, path: /healthz}}, period: 0.25s, failureThreshold: 2}}
        - name: port
          lifetime: service
          resources: {{cpu: 100m}}
          run:
            command: [sh, -c, "sleep 1; exec python3 -m http.server {port} --bind 127.0.0.1"]
            readiness: {{tcp: {{port: {port}}}, period: 0.2s}}
        - name: never
          lifetime: service
          resources: {{cpu: 100m}}
          run:
            command: [sleep, "100"]
            readiness: {{exec: [test, -e, never-made], period: 0.2s}}
        - name: stuck
          lifetime: service
          resources: {{cpu: 100m}}
          run:
            command: [sh, -c, "echo started; touch alive; sleep 1; rm alive; sleep 100"]
            liveness: {{exec: [test, -e, alive], period: 0.25s, failureThreshold: 2}}
            maxRestarts: 1
        """, "7s")
    # ready after its first answers, not ready once it answers 503 twice in a row
    kinds = [(e["kind"], e.get("reason")) for e in of(evs, "a/web/0", "ready", "notReady")]
    assert kinds == [("ready", None), ("notReady", "readiness probe failed 2 times in a row (HTTP 503)")]
    started = of(evs, "a/port/0", "started")[0]["t"]
    ready = of(evs, "a/port/0", "ready")
    assert len(ready) == 1 and ready[0]["t"] - started >= 1.0  # not before its port accepts
    assert of(evs, "a/never/0", "ready", "notReady") == []  # running, never ready
    assert of(evs, "a/never/0", "failed", "exited") == []
    failed = of(evs, "a/stuck/0", "livenessFailed")
    assert len(failed) == 2  # the first run and its one restart
    assert failed[0]["reason"] == "liveness probe failed 2 times in a row (exit status 1)"
    assert [e["kind"] for e in of(evs, "a/stuck/0", "restarting", "failed")] == ["restarting", "failed"]
    assert of(evs, "a/stuck/0", "failed")[0]["reason"].startswith("liveness probe failed 2 times in a row")


def test_a_probe_field_is_checked(tmp_path):
    path = one_site(tmp_path, """\
        - name: c
          lifetime: service
          resources: {cpu: 100m}
          run: {command: ["true"], readiness: {tcp: {port: 80}, http: {port: 80}}}
        """, "1s")
    r = suanli("schedule", path)
    assert r.returncode == 2 and "spec.components[0].run.readiness" in r.stderr
    assert "a probe is one of exec, http and tcp" in r.stderr and "Traceback" not in r.stderr


def test_the_control_plane_shows_a_running_task_that_is_not_ready(tmp_path):
    from serving import ADMIN, Server, free_port as port_for

    work = Path(tempfile.mkdtemp(prefix="suanli-serve-"))  # tenants' users must reach it
    work.chmod(0o711)
    web = port_for()
    app = tmp_path / "web.yaml"
    app.write_text(f"""\
apiVersion: suanli/v1
kind: Application
metadata: {{name: web}}
spec:
  components:
    - name: server
      lifetime: service
      resources: {{cpu: 100m}}
      run:
        command: [sh, -c, "sleep 3; exec python3 -m http.server {web} --bind 127.0.0.1"]
        readiness: {{http: {{port: {web}}}, period: 0.2s}}
""")
    from suanli.server.store import sqlite_url

    with open(tmp_path / "server.log", "ab") as log:
        server = Server(sqlite_url(tmp_path / "s.db"), port_for(), log, "--executor", "local",
                        "--work-dir", str(work / "w"), speed=1)
        server.start()
        try:
            env = {"SUANLI_SERVER": server.url, "SUANLI_TOKEN": ADMIN}
            mine = {**env, "SUANLI_TOKEN": suanli("token", "create", "--tenant", "acme-ai", env=env).stdout.strip()}
            assert suanli("apply", "-f", app, env=mine).returncode == 0
            seen = []
            deadline = time.monotonic() + 60
            while not seen or seen[-1] != ("running", True):
                assert time.monotonic() < deadline, seen
                t = json.loads(suanli("get", "tasks", "-o", "json", env=mine).stdout)[0]
                if not seen or seen[-1] != (t["status"], t["ready"]):
                    seen.append((t["status"], t["ready"]))
                time.sleep(0.1)
            assert ("running", False) in seen  # it ran before it was ready, and the page said so
            described = suanli("describe", "task", "web/server/0", env=mine).stdout
            assert "ready:        True" in described and " ready " in described  # its history has the event
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)


def test_probes_in_a_container(tmp_path):
    from containers import image

    img = image()
    evs = run(tmp_path, f"""\
        - name: box
          lifetime: service
          resources: {{cpu: 100m}}
          run:
            image: "{img}"
            command: [sh, -c, "sleep 1; touch /tmp/up; sleep 3; rm /tmp/up; sleep 100"]
            readiness: {{exec: [test, -e, /tmp/up], period: 0.5s, timeout: 10s, failureThreshold: 2}}
            liveness: {{exec: [test, -e, /tmp/up], initialDelay: 3s, period: 0.5s, timeout: 10s, failureThreshold: 2}}
            maxRestarts: 0
        """, "12s", "--executor", "podman")
    kinds = [e["kind"] for e in of(evs, "a/box/0", "ready", "notReady", "livenessFailed", "failed")]
    # ready once the file is made; once it is gone, not ready and (each probe in its own time) killed
    assert kinds[0] == "ready" and kinds[-1] == "failed" and {"notReady", "livenessFailed"} <= set(kinds), kinds
    assert of(evs, "a/box/0", "failed")[0]["reason"].startswith("liveness probe failed 2 times in a row")
