"""The client commands against a real ``suanli serve`` process, as a user runs
them: apply, get, describe, delete, events (and --follow), token create; and
what a user gets for bad input (exit status 2, one line per problem) or an
unreachable server (exit status 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from incli import cli
from serving import ADMIN, FLEET, Server, free_port

from suanli.server.store import sqlite_url

pytestmark = pytest.mark.long(35)

APPS = """\
apiVersion: suanli/v1
kind: Application
metadata: {name: web}
spec:
  components:
    - {name: srv, lifetime: service, replicas: 2, resources: {cpu: 2, memory: 4Gi}}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: batch}
spec:
  components:
    - {name: job, lifetime: job, replicas: 1, duration: 10s, resources: {cpu: 1, memory: 1Gi}}
"""


def suanli(*args: str, token: str | None = None, server: str | None = None, timeout: float = 60):
    env = {**os.environ, "SUANLI_TOKEN": token or "", "SUANLI_SERVER": server or ""}
    env = {k: v for k, v in env.items() if v}
    return subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    where = tmp_path_factory.mktemp("cli")
    with open(where / "server.log", "ab") as log:
        s = Server(sqlite_url(where / "s.db"), free_port(), log)
        s.start()
        yield s
        s.stop()


@pytest.fixture(scope="module")
def token(server):
    r = suanli("token", "create", "--tenant", "acme-ai", token=ADMIN, server=server.url)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_apply_get_describe_delete(server, token, tmp_path):
    f = tmp_path / "apps.yaml"
    f.write_text(APPS)
    r = suanli("apply", "-f", str(f), token=token, server=server.url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["application/web created", "application/batch created"]
    again = suanli("apply", "-f", str(f), token=token, server=server.url)
    assert again.stdout.split("\n")[:2] == ["application/web unchanged", "application/batch unchanged"]
    end = time.monotonic() + 30
    while time.monotonic() < end:
        tasks = json.loads(suanli("get", "tasks", "-o", "json", token=token, server=server.url).stdout)
        if {t["task"]: t["status"] for t in tasks} == {"web/srv/0": "running", "web/srv/1": "running",
                                                        "batch/job/0": "finished"}:
            break
        time.sleep(0.2)
    assert {t["task"]: t["status"] for t in tasks} == {"web/srv/0": "running", "web/srv/1": "running",
                                                        "batch/job/0": "finished"}
    assert all(t["tenant"] == "acme-ai" and t["node"] for t in tasks)
    table = suanli("get", "tasks", token=token, server=server.url).stdout
    assert table.split()[:8] == ["TASK", "TENANT", "STATUS", "ADMISSION", "READY", "NODE", "SITE", "PLACEMENTS"] \
        and "web/srv/1" in table
    apps = json.loads(suanli("get", "apps", "-o", "json", token=token, server=server.url).stdout)
    assert {a["name"]: a["tasks"]["finished"] for a in apps} == {"web": 0, "batch": 1}
    d = suanli("describe", "task", "web/srv/0", token=token, server=server.url)
    assert d.returncode == 0 and "status:       running" in d.stdout
    assert [ln.split()[1] for ln in d.stdout.split("history:\n")[1].splitlines()][:3] == [
        "submitted", "placed", "started"]
    r = suanli("delete", "app", "web", token=token, server=server.url)
    assert r.returncode == 0 and r.stdout.strip() == "application/web deleted"
    tasks = json.loads(suanli("get", "tasks", "-o", "json", token=token, server=server.url).stdout)
    assert [t["task"] for t in tasks] == ["batch/job/0"]
    for kind in ("vcs", "nodes", "tenants"):
        out = json.loads(suanli("get", kind, "-o", "json", token=token, server=server.url).stdout)
        assert isinstance(out, list) and out


def test_apply_applies_each_document_and_reports_the_refused_one(server, token, tmp_path):
    """A file with another tenant's application between two of the token's
    own: both of its own are created, the other is refused with its document
    and reason, and the command exits 2 saying how many were refused."""
    one = "apiVersion: suanli/v1\nkind: Application\nmetadata: {{name: {name}{tenant}}}\nspec:\n  components:\n" \
          "    - {{name: c, lifetime: job, duration: 1h, resources: {{cpu: 0.1, memory: 64Mi}}}}\n"
    f = tmp_path / "mixed.yaml"
    f.write_text("---\n".join([one.format(name="mine-a", tenant=""), one.format(name="theirs", tenant=", tenant: other"),
                               one.format(name="mine-b", tenant="")]))
    try:
        r = suanli("apply", "-f", str(f), token=token, server=server.url)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stdout.split("\n")[:2] == ["application/mine-a created", "application/mine-b created"], r.stdout
        assert f"{f}: document 1: " in r.stderr and "1 of 3 documents refused (above); the other 2 applied" in r.stderr
        apps = {a["name"] for a in json.loads(suanli("get", "apps", "-o", "json", token=token, server=server.url).stdout)}
        assert {"mine-a", "mine-b"} <= apps and "theirs" not in apps, apps
    finally:
        for name in ("mine-a", "mine-b"):
            suanli("delete", "app", name, token=token, server=server.url)


def test_get_lists_tasks_in_the_order_of_their_numbers(server, token, tmp_path):
    """``get tasks`` puts solve/2 before solve/10 (numbers as numbers)."""
    f = tmp_path / "solve.yaml"
    f.write_text("apiVersion: suanli/v1\nkind: Application\nmetadata: {name: solve}\nspec:\n  components:\n"
                 "    - {name: part, lifetime: job, replicas: 12, duration: 1h, resources: {cpu: 0.1, memory: 64Mi}}\n")
    assert suanli("apply", "-f", str(f), token=token, server=server.url).returncode == 0
    try:
        table = suanli("get", "tasks", "--app", "solve", token=token, server=server.url).stdout
        listed = [line.split()[0] for line in table.splitlines()[1:] if line.strip()]
        assert listed == [f"solve/part/{i}" for i in range(12)], listed
    finally:
        suanli("delete", "app", "solve", token=token, server=server.url)


def test_events_follow_prints_events_as_they_come(server, token, tmp_path):
    env = {**os.environ, "SUANLI_TOKEN": token, "SUANLI_SERVER": server.url}
    follow = subprocess.Popen([sys.executable, "-c", "from suanli.cli import main; main()", "events", "--follow",
                               "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        time.sleep(1.5)  # it has printed what was recorded, and waits
        f = tmp_path / "one.yaml"
        f.write_text(APPS.split("---\n")[1].replace("name: batch", "name: later"))
        assert suanli("apply", "-f", str(f), token=token, server=server.url).returncode == 0
        seen = []
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(e.get("task") == "later/job/0" and e["kind"] == "finished"
                                                 for e in seen):
            seen.append(json.loads(follow.stdout.readline()))
        kinds = [e["kind"] for e in seen if e.get("task") == "later/job/0"]
        assert kinds == ["submitted", "placed", "started", "finished"]
        assert all(e.get("tenant", "acme-ai") == "acme-ai" for e in seen)
    finally:
        follow.terminate()
        follow.wait(10)


def test_a_bad_document_exits_2_with_its_field_path(server, token, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(APPS.replace("memory: 4Gi", "memory: 4 gigs"))
    r = suanli("apply", "-f", str(f), token=token, server=server.url)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{f}: document 0: spec.components[0].resources.memory: '4 gigs' is not a size" in r.stderr.replace("\n", " ")
    f.write_text("kind: [unclosed")
    r = suanli("apply", "-f", str(f), token=token, server=server.url)
    assert r.returncode == 2 and "malformed YAML" in r.stderr


def test_auth_and_missing_objects_exit_2_and_an_unreachable_server_exits_1(server, token):
    r = suanli("get", "apps", token="sl_wrong", server=server.url)
    assert r.returncode == 2 and "Unauthorized (401)" in r.stderr
    r = suanli("describe", "task", "nope/x/0", token=token, server=server.url)
    assert r.returncode == 2 and "no task 'nope/x/0'" in r.stderr
    r = suanli("token", "create", "--tenant", "acme-ai", token=token, server=server.url)
    assert r.returncode == 2 and "Forbidden (403)" in r.stderr
    r = suanli("get", "apps", token=token, server=f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 1 and "cannot reach the server" in r.stderr and "Traceback" not in r.stderr


def test_serve_refuses_bad_input_with_exit_2(tmp_path):
    """(In this process: each refusal comes before anything is started.)"""
    app = tmp_path / "app.yaml"
    app.write_text(APPS.replace("{name: web}", "{name: web, tenant: acme-ai}").replace(
        "{name: batch}", "{name: batch, tenant: acme-ai}"))
    r = cli("serve", *map(str, FLEET), str(app), "--db", sqlite_url(tmp_path / "s.db"))
    assert r.returncode == 2 and "serve takes Fleet, Tenant and VirtualCluster documents" in r.stderr
    r = cli("serve", str(FLEET[1]), "--db", sqlite_url(tmp_path / "s.db"))
    assert r.returncode == 2 and "no Fleet document" in r.stderr
    r = cli("serve", *map(str, FLEET), "--executor", "ray", "--ray-address", "127.0.0.1:1")
    assert r.returncode == 2 and "--ray-address: no Ray cluster at 127.0.0.1:1" in r.stderr
    r = cli("serve", *map(str, FLEET), "--executor", "local", "--work-dir", "/dev/null/w")
    assert r.returncode == 2 and "--work-dir: cannot make /dev/null/w" in r.stderr
    r = cli("serve", *map(str, FLEET), "--db", "nosuchdb://x")
    assert r.returncode == 2 and "--db: cannot open the database" in r.stderr and "Traceback" not in r.stderr
