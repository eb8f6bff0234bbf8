"""Task logs under ``suanli serve --executor local``: kept under a cap per
task, read as streams (ranges, tails, the rotated part), and removed with
their application. One server (``--max-log 1Mi``) for the module."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from live import suanli
from serving import ADMIN, Server, free_port, wait

from suanli.executors.tasks import safe
from suanli.server.store import sqlite_url

A, B = "acme-ai", "city-services"
CAP = 1 << 20
LINES = 700_000  # "line 000000001\n" ...: 10.5 MB, ten times the cap
ROTATION = re.compile(rb"--- suanli: log over its cap[^\n]*\n")


def service(name: str, script: str) -> dict:
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name},
            "spec": {"components": [{"name": "c", "lifetime": "service",
                                     "resources": {"cpu": 1, "memory": "64Mi"},
                                     "run": {"command": ["sh", "-c", script]}}]}}


class Live:
    def __init__(self, server: Server, work: Path) -> None:
        self.server, self.work = server, work
        self.http = httpx.Client(base_url=server.url, timeout=60)
        mint = lambda t: self.http.post("/v1/tokens", json={"tenant": t},
                                        headers={"Authorization": f"Bearer {ADMIN}"}).json()["token"]
        self.a = {"Authorization": f"Bearer {mint(A)}"}
        self.b = {"Authorization": f"Bearer {mint(B)}"}
        self.token_a = self.a["Authorization"][7:]

    def path(self, task: str) -> Path:
        return self.work / "logs" / f"{safe(f'{A}:{task}')}.log"

    def rotated(self, task: str) -> Path:
        return self.work / "logs" / f"{safe(f'{A}:{task}')}.log.1"

    def run(self, name: str, script: str, until: str) -> bytes:
        """Submit a service of tenant A; its log once ``until`` is in it."""
        assert self.http.post("/v1/applications", json=service(name, script), headers=self.a).status_code == 201
        path = self.path(f"{name}/c/0")
        wait(lambda: path.is_file() and until.encode() in path.read_bytes(), 60, f"{name} to write {until!r}")
        return path.read_bytes()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    base = Path(tempfile.mkdtemp(prefix="suanli-logs-"))  # tenants' users must reach it: not under pytest's
    os.chmod(base, 0o711)
    work = base / "w"
    (work / "logs").mkdir(parents=True)
    orphan = work / "logs" / f"{safe(f'{A}:gone-before/c/0')}.log"  # of an application the store does not hold
    orphan.write_text("left from before\n")
    (work / "logs" / (orphan.name + ".1")).write_text("older\n")
    where = tmp_path_factory.mktemp("logs")
    with open(where / "server.log", "ab") as log:
        server = Server(sqlite_url(where / "s.db"), free_port(), log, "--executor", "local", "--work-dir", str(work),
                        "--max-log", "1Mi", "--keep-ended", "3s", "--prune-every", "1s")
        try:
            server.start()
            yield Live(server, work)
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def loud(live):
    """A service that writes ten times the cap, says its cap, then sleeps: its log's bytes."""
    return live.run("loud", f"seq -f 'line %09.0f' 1 {LINES}; echo \"cap=$SUANLI_LOG_MAX_BYTES\"; exec sleep 3600",
                    "cap=")


def test_a_log_over_its_cap_is_rotated_and_its_owner_is_told(live, loud):
    rotated = live.rotated("loud/c/0").read_bytes()
    assert len(loud) <= CAP and len(rotated) <= CAP  # at most twice the cap on disk
    assert loud.startswith(b"--- suanli: log over its cap of 1 MiB: the oldest output was dropped"), loud[:200]
    assert loud.endswith(b"cap=1048576\n")  # told its cap (SUANLI_LOG_MAX_BYTES)
    kept = ROTATION.sub(b"", rotated + loud)  # the newest output, whole, without the lines saying so
    expected = b"".join(b"line %09d\n" % i for i in range(1, LINES + 1)) + b"cap=1048576\n"
    assert expected.endswith(kept) and len(kept) > CAP, len(kept)
    history = live.http.get("/v1/tasks/loud/c/0", headers=live.a).json()["history"]
    events = [e for e in history if e["kind"] == "logRotated"]
    assert len(events) == 1 and events[0]["cap_bytes"] == CAP and events[0]["bytes"] >= CAP, events
    out = suanli("logs", "loud/c/0", "--tail", "12", env={"SUANLI_SERVER": live.server.url,
                                                           "SUANLI_TOKEN": live.token_a})
    assert out.returncode == 0 and out.stdout == "cap=1048576\n", out.stderr


def test_following_a_log_prints_all_of_it_across_a_rotation_until_the_task_ends(live):
    go = live.work.parent / "go"  # made once the follower has begun
    bursts = [(1, 40_000), (40_001, 80_000), (80_001, 120_000)]  # 1.8 MB in all: the log rotates once
    script = f"echo waiting; until [ -e {go} ]; do sleep 0.05; done; " + "; sleep 0.3; ".join(
        f"seq -f 'line %09.0f' {a} {b}" for a, b in bursts)
    job = service("followed", script)
    job["spec"]["components"][0].update(lifetime="job", duration="1s")
    assert live.http.post("/v1/applications", json=job, headers=live.a).status_code == 201
    follower = subprocess.Popen([sys.executable, "-c", "from suanli.cli import main; main()", "logs", "followed/c/0",
                                 "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, "SUANLI_SERVER": live.server.url, "SUANLI_TOKEN": live.token_a})
    try:
        out = follower.stdout.readline() + follower.stdout.readline()
        assert out.endswith(b"waiting\n"), out
        go.touch()
        rest, err = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    lines = ROTATION.sub(b"", out + rest).splitlines()
    assert lines[0].startswith(b"--- suanli: acme-ai:followed/c/0 run ") and lines[1] == b"waiting"
    assert lines[2:] == [b"line %09d" % i for i in range(1, 120_001)]
    assert len(ROTATION.findall(rest)) == 1


def test_ranges_tails_and_the_rotated_part_answer_their_bytes(live, loud):
    get = lambda **kw: live.http.get("/v1/logs/loud/c/0", headers={**live.a, **kw.pop("headers", {})}, params=kw)
    n = len(loud)
    r = get(headers={"Range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == loud[100:200] and r.headers["content-range"] == f"bytes 100-199/{n}"
    assert get(headers={"Range": "bytes=-50"}).content == loud[-50:]
    assert get(headers={"Range": f"bytes={n - 7}-{n + 100}"}).content == loud[-7:]  # the end, as far as it goes
    assert get(tail=12).content == b"cap=1048576\n" and get(after=n - 5).content == loud[-5:]
    whole = get()
    assert whole.status_code == 200 and whole.content == loud and whole.headers["accept-ranges"] == "bytes"
    rotated = live.rotated("loud/c/0").read_bytes()
    assert get(rotated="true").content == rotated
    assert get(rotated="true", headers={"Range": "bytes=0-9"}).content == rotated[:10]
    past = get(headers={"Range": f"bytes={n}-"})
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{n}"
    assert past.headers["content-type"] == "application/problem+json"
    bad = get(headers={"Range": "bytes=a-b"})
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "header.range", bad.text
    both = get(tail=5, headers={"Range": "bytes=0-1"})
    assert both.status_code == 422 and "tail" in both.text, both.text
    assert live.http.get("/v1/logs/loud/c/0", headers=live.b).status_code == 404  # another tenant's


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_reading_large_logs_at_once_keeps_the_server_small_and_answering(live):
    big = 128 << 20
    live.run("big", "echo it-is-big; exec sleep 3600", "it-is-big")
    os.truncate(live.path("big/c/0"), big)  # a sparse 128 MiB log: no disk to speak of
    pid = live.server.proc.pid
    ask = lambda: live.http.get("/v1/tasks", headers=live.b)
    before = []
    for _ in range(5):
        began = time.perf_counter()
        assert ask().status_code == 200
        before.append(time.perf_counter() - began)
    rss = rss_kib(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak (VmHWM) from now
    got: list[int] = []

    def read() -> None:
        with httpx.Client(base_url=live.server.url, timeout=120) as http:
            with http.stream("GET", "/v1/logs/big/c/0", headers=live.a) as r:
                got.append(sum(len(chunk) for chunk in r.iter_bytes()))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    during = []
    while any(t.is_alive() for t in readers):
        began = time.perf_counter()
        assert ask().status_code == 200
        during.append(time.perf_counter() - began)
    for t in readers:
        t.join()
    peak = rss_kib(pid, "VmHWM")
    assert got == [big] * 3
    assert peak - rss < 64 << 10, (rss, peak)  # the three reads held far less than one log (128 MiB)
    assert max(during) < max(2.0, 50 * statistics.median(before)), (before, during)


def test_a_deleted_applications_logs_are_removed(live):
    assert not any(p.name.startswith(safe(f"{A}:gone-before/")) for p in (live.work / "logs").iterdir())  # swept
    live.run("doomed", "seq 1 300000; echo done; exec sleep 3600", "done")
    assert live.rotated("doomed/c/0").is_file()
    assert live.http.delete("/v1/applications/doomed", headers=live.a).status_code == 204
    wait(lambda: not live.path("doomed/c/0").exists() and not live.rotated("doomed/c/0").exists(), 30,
         "the deleted application's logs to go")
    job = service("brief", "echo brief")
    job["spec"]["components"][0].update(lifetime="job", duration="1s")
    assert live.http.post("/v1/applications", json=job, headers=live.a).status_code == 201
    wait(lambda: live.http.get("/v1/applications/brief", headers=live.a).status_code == 404, 30,
         "retention to delete the ended application")
    wait(lambda: not live.path("brief/c/0").exists(), 10, "its log to go")


@pytest.mark.parametrize("command,why", [
    (["serve", "--executor", "local", "--work-dir", "{tmp}/w", "--max-log", "12 gigs"], "is not a size with a unit"),
    (["run", "{scenario}", "--work-dir", "{tmp}/w", "--max-log", "0"], "is below 1Mi")], ids=["serve", "run"])
def test_a_bad_max_log_is_refused_naming_the_option(tmp_path, command, why):
    from live import LIVE

    args = [a.format(tmp=tmp_path, scenario=LIVE) for a in command]
    r = suanli(*args, "--db", sqlite_url(tmp_path / "s.db")) if command[0] == "serve" else suanli(*args)
    assert r.returncode == 2 and f"--max-log: '{command[-1]}' {why}" in r.stderr, r.stderr
