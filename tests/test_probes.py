"""Health probes with real processes: readiness (http, tcp, exec) that comes
and goes, and liveness that kills and restarts. (A container's probes:
``test_executor_podman.py``; what the control plane shows of a task that
runs but is not ready: ``test_rollout.py``.)"""

from __future__ import annotations

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
