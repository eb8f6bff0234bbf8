"""The real ``suanli serve`` against tasks that try to outlive themselves, and
against itself: no process of a task survives the task, its deletion or its
server; nothing a task leaves can stand in for the server; the controller
dies with its server; one large request, a paused controller or a broken
stored document never takes the control plane down (docs/serve.md,
"Security" and "How it runs")."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from serving import ADMIN, FLEET, Server, free_port, wait

from suanli.executors.tasks import FIRST_UID, user_switch
from suanli.server.remote import LEASE_S, PROCESS_NAME
from suanli.server.store import Store, sqlite_url

pytestmark = pytest.mark.long(75)

needs_root = pytest.mark.skipif(user_switch() is not None, reason="tasks keep the executor's user here")
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


def app(name: str, command: str | None = None, *, tenant: str = "acme-ai", lifetime: str = "service",
        replicas: int = 1, cpu: str = "100m", memory: str = "64Mi", **comp) -> dict:
    component = {"name": "c", "lifetime": lifetime, "replicas": replicas,
                 "resources": {"cpu": cpu, "memory": memory}, **comp}
    if command is not None:
        component["run"] = {"command": ["sh", "-c", command]}
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name, "tenant": tenant},
            "spec": {"components": [component]}}


def sleeping(prefix: str) -> list[int]:
    """Live processes that are ``sleep N`` with N starting with ``prefix``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
            if argv[0].endswith(b"sleep") and len(argv) > 1 and argv[1].startswith(prefix.encode()) and \
                    " Z " not in (cmdline.parent / "stat").read_text().split(")", 1)[1][:4]:
                found.append(int(cmdline.parent.name))
        except (OSError, IndexError):
            continue
    return found


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def fleet_nodes(server: Server) -> int:
    """The fleet's node count as the server's scheduler has it (0 while it is being
    started: the API answers 503 until its controller has rebuilt the world)."""
    r = httpx.get(server.url + "/v1/fleet", headers=ADMIN_H, timeout=60)
    return r.json()["nodes"] if r.status_code == 200 else 0


def controller_of(server: Server) -> int:
    return next(c for c in children(server.proc.pid) if Path(f"/proc/{c}/comm").read_text().strip() == PROCESS_NAME)


def _uid(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


def alive(pid: int) -> bool:
    try:
        return " Z " not in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:4]
    except OSError:
        return False


ORPHAN = ("import ctypes, sys, time\nctypes.CDLL(None).prctl(15, %r, 0, 0, 0)\nheld = open(sys.argv[1], 'rb')\n"
          "time.sleep(600)\n" % PROCESS_NAME.encode())


def local_server(base: Path, *extra: str, name: str = "s") -> Server:
    log = open(base / f"{name}.log", "ab")
    server = Server(sqlite_url(base / f"{name}.db"), free_port(), log, "--executor", "local",
                    "--work-dir", str(base / f"{name}-work"), *extra, speed=4)
    server.start()
    return server


# five daemons that leave the task's session, one double-forked, then the service itself
ESCAPE = "for i in 1 2 3 4 5; do setsid -f sleep {m}$i; done; (sleep {m}9 &) ; sleep {m}0"
DAEMONS = "for i in 1 2 3; do setsid -f sleep {m}$i; done; (sleep {m}9 &); sleep 0.5; exit 0"  # a job's


BOMB = ("import os, time\nfor i in range(400):\n  try:\n    if os.fork() == 0:\n      time.sleep(60); os._exit(0)\n"
        "  except OSError:\n    pass\nprint('made', flush=True)\ntime.sleep(60)")


@needs_root
def test_every_process_a_task_starts_ends_with_it_and_tenants_keep_apart(base, monkeypatch):
    """Two servers with the local executor on one machine (``--max-pids 50``):

    - what a service leaves behind (daemons out of its session, a double fork)
      ends when it is deleted; what a job leaves ends when it finishes;
    - a fork bomb is held to its task's pids limit (and a tenant's uid to an
      ``RLIMIT_NPROC``), and another tenant's job forks as usual meanwhile;
    - the two servers never give two tenants one uid; a work directory whose
      uids the machine gave another is refused at start;
    - a service and its daemons end when their server is killed (-9), and the
      port is free again."""
    monkeypatch.setenv("SUANLI_UID_REGISTRY", str(base / "uids.json"))
    marker = f"97{os.getpid() % 1000:03d}"  # sleep 97NNN1.. : numbers no other test sleeps
    server = local_server(base, "--max-pids", "50")
    other = local_server(base, name="other")
    http = httpx.Client(base_url=server.url, headers=ADMIN_H, timeout=30)
    tasks = lambda name, tenant="acme-ai": http.get(f"/v1/tasks/{name}/c/0", params={"tenant": tenant}).json()  # noqa: E731
    try:
        assert http.post("/v1/applications", json=app("esc", ESCAPE.format(m=marker + "1"))).status_code == 201
        assert wait(lambda: len(sleeping(marker + "1")) == 7, 30, "the service and what it left")
        assert http.delete("/v1/applications/esc", params={"tenant": "acme-ai"}).status_code == 204
        wait(lambda: not sleeping(marker + "1"), 15, "every process of the deleted service to end")
        job = app("job", DAEMONS.format(m=marker + "2"), lifetime="job", duration="1h")
        assert http.post("/v1/applications", json=job).status_code == 201
        wait(lambda: tasks("job")["status"] == "finished", 30, "the job to finish")
        wait(lambda: not sleeping(marker + "2"), 15, "the finished job's daemons to end")

        fork_bomb = app("bomb")
        fork_bomb["spec"]["components"][0]["run"] = {"command": ["python3", "-c", BOMB]}
        assert http.post("/v1/applications", json=fork_bomb).status_code == 201
        wait(lambda: "made" in http.get("/v1/logs/bomb/c/0", params={"tenant": "acme-ai"}).text, 30, "the bomb")
        uid = json.loads((base / "s-work" / "users.json").read_text())["tenants"]["acme-ai"]
        of_bomb = [int(p.name) for p in Path("/proc").glob("[0-9]*") if _uid(p) == uid]
        assert 10 < len(of_bomb) <= 50, len(of_bomb)  # bound by its pids limit, not by the machine
        limits = Path(f"/proc/{of_bomb[0]}/limits").read_text()
        nproc = next(line.split()[2] for line in limits.splitlines() if line.startswith("Max processes"))
        assert nproc != "unlimited" and int(nproc) <= int(Path("/proc/sys/kernel/pid_max").read_text()), limits
        ok = app("ok", "echo other-ran; sh -c 'echo forked-fine'; id -u", tenant="hpc-lab", lifetime="job",
                 duration="1h")
        assert http.post("/v1/applications", json=ok).status_code == 201
        wait(lambda: tasks("ok", "hpc-lab")["status"] == "finished", 30, "the other tenant's job")
        text = http.get("/v1/logs/ok/c/0", params={"tenant": "hpc-lab"}).text
        assert "other-ran" in text and "forked-fine" in text and "Cannot fork" not in text

        # the other server's first tenant is given a uid of its own, not the first one's again
        assert httpx.post(other.url + "/v1/applications", json=app("who", "id -u", tenant="city-services",
                          lifetime="job", duration="1h"), headers=ADMIN_H).status_code == 201
        wait(lambda: httpx.get(other.url + "/v1/tasks/who/c/0", params={"tenant": "city-services"},
                               headers=ADMIN_H).json()["status"] == "finished", 30, "the other server's job")
        uids = [json.loads((base / f"{n}-work" / "users.json").read_text())["tenants"] for n in ("s", "other")]
        assert not set(uids[0].values()) & set(uids[1].values()), uids

        assert http.post("/v1/applications", json=app("esc3", ESCAPE.format(m=marker + "3"))).status_code == 201
        assert wait(lambda: len(sleeping(marker + "3")) == 7, 30, "the third service")
        controller = controller_of(server)
    finally:
        http.close()
        server.kill()  # kill -9: the controller, the service and all it left go with it
        other.kill()
    wait(lambda: not sleeping(marker + "3") and not alive(controller), 15, "nothing left of the server")
    with socket.socket() as s:  # and its port is free for the next server
        s.bind(("127.0.0.1", server.port))
    (base / "third-work").mkdir(mode=0o711)  # a work directory claiming a uid the machine gave another
    (base / "third-work" / "users.json").write_text(json.dumps({"tenants": {"city-services": uids[0]["acme-ai"]}}))
    r = subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", "serve", *map(str, FLEET),
                        "--db", sqlite_url(base / "third.db"), "--port", str(free_port()), "--executor", "local",
                        "--work-dir", str(base / "third-work")],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN})
    assert r.returncode == 2 and "--work-dir" in r.stderr and f"uid {uids[0]['acme-ai']}" in r.stderr, r.stderr


LISTEN = """\
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); print("listening", flush=True)
while True:
    c, _ = s.accept(); data = c.recv(65536); print("GOT", data[:200], flush=True); c.close()
"""


@needs_root
def test_a_port_held_by_a_tasks_leftover_is_never_served_nor_sent_a_token(base, tmp_path):
    """A process of a tenant's user listens on the server's port (as a task's
    daemon would once its server was gone): serve refuses to start, naming it,
    and the client sends it no token."""
    port = free_port()
    thief = subprocess.Popen(["setpriv", f"--reuid={FIRST_UID + 4242}", f"--regid={FIRST_UID + 4242}",
                              "--clear-groups", "--", sys.executable, "-c", LISTEN, str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert thief.stdout.readline().strip() == "listening"
        r = subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", "serve", *map(str, FLEET),
                            "--db", sqlite_url(tmp_path / "s.db"), "--port", str(port)],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN})
        assert r.returncode == 2, r.stderr
        assert f"port {port} is held by process {thief.pid}" in r.stderr and "a task left behind" in r.stderr
        assert "Traceback" not in r.stderr
        got = subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", "get", "apps",
                              "--server", f"http://127.0.0.1:{port}", "--token", ADMIN],
                             capture_output=True, text=True, timeout=60)
        assert got.returncode == 1 and f"runs as uid {FIRST_UID + 4242}" in got.stderr, got.stderr
        far = subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", "get", "apps",
                              "--server", "http://192.0.2.1:8080", "--token", ADMIN],
                             capture_output=True, text=True, timeout=60)
        assert far.returncode == 1 and "plain http" in far.stderr, far.stderr
    finally:
        thief.kill()
        out, _ = thief.communicate()
    assert "GOT" not in out  # nothing ever reached it, let alone a token


def test_the_controller_outlives_no_server_and_no_lone_server_fences_itself(tmp_path):
    """One store, three servers in turn, on the simulated executor:

    - the first's controller is stopped for twice its lease (a swapped-out
      machine, a long collection): alone on its store, it goes on where it
      was, neither fenced nor started again;
    - one application of 30,000 replicas (one turn for all of them held the
      store past the lease) is placed over many turns while the server answers
      and stays alive, under the same controller and the first lease;
      (100,000, the most an application may have through the API:
      ``bench/bench_large_app.py``);
    - killed (-9) in the middle of that, the server takes its controller with it,
      whatever that is doing;
    - the second server rebuilds the 30,000 tasks and serves;
    - the third finds a controller of an earlier server that outlived it
      (holding the store's files and its lease), says so, ends it and takes
      over at once."""
    db = sqlite_url(tmp_path / "s.db")
    log = open(tmp_path / "server.log", "ab")
    store = Store(db)
    first = Server(db, free_port(), log, speed=1)
    first.start()
    try:
        controller = controller_of(first)
        os.kill(controller, signal.SIGSTOP)
        time.sleep(2 * LEASE_S + 0.5)  # twice the lease: what is measured here
        os.kill(controller, signal.SIGCONT)
        big = app("big", replicas=30_000, cpu="10m", memory="8Mi")
        assert httpx.post(first.url + "/v1/applications", json=big, headers=ADMIN_H, timeout=120).status_code == 201
        too_big = app("bigger", replicas=60_000, cpu="10m", memory="8Mi")
        too_big["spec"]["components"].append({**too_big["spec"]["components"][0], "name": "d"})
        r = httpx.post(first.url + "/v1/applications", json=too_big, headers=ADMIN_H, timeout=60)
        assert r.status_code == 422 and r.json()["errors"][0]["path"] == "spec.components", r.text
        seen = []
        for _ in range(600):  # (at most five minutes of looking, at a loaded machine's pace)
            health = httpx.get(first.url + "/healthz", timeout=30)
            assert health.status_code == 200, health.text  # alive throughout, never stalled
            page = httpx.get(first.url + "/v1/tasks", params={"status": "running", "limit": 1},
                             headers=ADMIN_H, timeout=30)
            assert page.status_code == 200
            seen.append((health.json()["instants"], store.task_counts().get("running", 0)))
            if seen[-1][1] >= 5_000 and len(seen) >= 4:
                break
            time.sleep(0.5)
        assert 5_000 <= seen[-1][1] < 30_000, seen[-5:]  # well under way, not done
        assert len({i for i, _ in seen}) >= 3  # placed over several turns, not one
        assert controller_of(first) == controller and health.json()["restarts"] == 0
        assert store.lease("controller").epoch == 1  # never fenced, never taken again
        assert "no longer the active one" not in (tmp_path / "server.log").read_text()
    finally:
        first.kill()
    wait(lambda: not alive(controller), 5, "the first controller to end with its server")  # (it looks every 0.2 s)

    second = Server(db, free_port(), log, speed=1)
    second.start()  # the rebuild of a store with 30,000 tasks comes up
    second.stop()
    # a controller of an earlier server that outlived it (one of a version without a
    # parent-death signal, say): named as controllers are, holding the store's files and lease
    orphan = int(subprocess.run(["sh", "-c", f'{sys.executable} -c "$0" "$1" >/dev/null 2>&1 & echo $!', ORPHAN,
                                 str(tmp_path / "s.db")], capture_output=True, text=True, check=True).stdout)
    try:
        wait(lambda: alive(orphan) and Path(f"/proc/{orphan}/comm").read_text().strip() == PROCESS_NAME, 30,
             "the orphan to be there")
        assert store.take_lease("controller", "an-earlier-server", 3600.0, pid=orphan, host=socket.gethostname())
        third = Server(db, free_port(), log, speed=1)
        third.start()
        try:
            text = (tmp_path / "server.log").read_text()
            assert f"process {orphan}" in text and "ending it" in text, text[-2000:]
            assert not alive(orphan)
            assert httpx.get(third.url + "/readyz").json()["controller"] == "running"  # its lease at once
            r = httpx.post(third.url + "/v1/applications", json=app("after"), headers=ADMIN_H)
            assert r.status_code == 201
            wait(lambda: store.task("acme-ai", "after/c/0").status == "running", 60, "scheduling by the third")
        finally:
            third.stop()
    finally:
        if alive(orphan):
            os.kill(orphan, signal.SIGKILL)
        store.close()
        log.close()


def test_a_stored_document_that_cannot_be_run_is_set_aside_and_the_server_starts(tmp_path):
    db = sqlite_url(tmp_path / "s.db")
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(db, free_port(), log)
        server.start()
        huge = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "huge"},
                "spec": {"sites": [{"name": "dc-huge", "tier": "cloud", "region": "r", "nodeGroups": [
                    {"name": "n", "count": 1_000_000, "arch": "x86_64", "cpu": 4, "memory": "16Gi"}]}]}}
        try:
            r = httpx.put(server.url + "/v1/fleets/huge", json=huge, headers=ADMIN_H, timeout=120)
            assert r.status_code == 201, r.text
            wait(lambda: fleet_nodes(server) > 1_000_000, 60, "the million nodes")
            assert httpx.get(server.url + "/healthz").status_code == 200
        finally:
            server.kill()
    # a document that this version refuses (stored by an earlier one, say): a tenant
    # allowed on sites none of which exists
    store = Store(db, upgrade=False)
    bad = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "ghost"},
           "spec": {"allowedSites": ["nowhere-*"]}}
    store.put_objects([("Tenant", "ghost", "ghost", bad)])
    store.close()
    with open(tmp_path / "server.log", "ab") as log:
        again = Server(db, free_port(), log)
        again.start()  # it starts: the tenant is set aside, the million nodes run
        try:
            assert httpx.get(again.url + "/healthz").status_code == 200
            tenants = {t["name"] for t in httpx.get(again.url + "/v1/tenants", headers=ADMIN_H).json()}
            assert "ghost" not in tenants and "acme-ai" in tenants
            wait(lambda: fleet_nodes(again) > 1_000_000, 60, "the million nodes again")  # (503 while rebuilding)
        finally:
            again.stop()
    text = (tmp_path / "server.log").read_text()
    assert "Tenant ghost is set aside" in text and "nowhere-*" in text, text[-3000:]
    failed = {r.name: r.failed for r in Store(db, upgrade=False).objects(set_aside=True) if r.failed}
    assert list(failed) == ["ghost"] and "nowhere-*" in failed["ghost"]
