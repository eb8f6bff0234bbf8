"""What a task can see: a clean environment, a folder of its own, its
tenant's user, and none of the other tenants' or the control plane's files
(docs/executors.md, "What a task can see")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from live import events, suanli

from suanli.executors.confine import Confinement
from suanli.executors.tasks import (USERS_FILE, copy_tree, merge_trees, pack, safe, task_command, unpack,
                                    user_switch)

needs_root = pytest.mark.skipif(user_switch() is not None, reason="tasks keep the executor's user here")
SECRET = "sl_fake-admin-Zq8Wm3Kd7Rt5Yp2Lx9Nb"  # the server's admin token in this test
HIDDEN = "hidden-value-of-the-server"  # SECRET_X in the server's environment
# the variables a task's environment may hold (the shell adds PWD)
ALLOWED = {"PATH", "HOME", "LANG", "PYTHONUNBUFFERED", "OMP_NUM_THREADS", "PWD", "SUANLI_TASK", "SUANLI_TENANT",
           "SUANLI_NODE", "SUANLI_SITE", "SUANLI_RUN", "SUANLI_CPU_MILLI", "SUANLI_MEMORY_MIB", "SUANLI_STATE_DIR",
           "SUANLI_LOG_MAX_BYTES"}


def app(name: str, component: dict) -> dict:
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name},
            "spec": {"components": [component]}}


KEEPER = """\
echo secret-state-of-a > "$SUANLI_STATE_DIR/s"; echo log-line-of-a
trap 'touch "$SUANLI_STATE_DIR/.checkpointed"' USR1
trap 'exit 0' TERM
while :; do sleep 0.05; done
"""

PROBE = """\
env | sed 's/^/env: /'
echo "uid: $(id -u) groups: $(id -G)"; echo "cwd: $(pwd)"
for p in "$@"; do echo "== $p"; cat "$p" 2>&1; done
echo "== list"; ls "$WORK/nodes" 2>&1
echo own-state > "$SUANLI_STATE_DIR/mine" && echo "== own: $(cat "$SUANLI_STATE_DIR/mine")"
"""


def wait_for(what, timeout: float = 30, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, f"waited {timeout:g}s for {what.__doc__ or what}"
        time.sleep(every)
    return found


@needs_root
def test_a_tenants_task_sees_no_secret_and_no_other_tenants_files(base, monkeypatch):
    from serving import ADMIN, Server, free_port

    from suanli.server.store import sqlite_url

    monkeypatch.setenv("SECRET_X", HIDDEN)
    work, db = base / "w", base / "s.db"
    with open(base / "server.log", "ab") as log:
        server = Server(sqlite_url(db), free_port(), log, "--executor", "local", "--work-dir", str(work), speed=4)
        server.start()
        try:
            admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
            token = {t: admin.post("/v1/tokens", json={"tenant": t}).json()["token"] for t in ("acme-ai", "hpc-lab")}
            a, b = (httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token[t]}"}, timeout=10)
                    for t in ("acme-ai", "hpc-lab"))
            keeper = {"name": "hold", "lifetime": "service", "resources": {"cpu": "100m"},
                      "state": {"kind": "stateful", "size": "1Mi", "checkpointEvery": "1s"},
                      "run": {"command": ["sh", "-c", KEEPER]}}
            assert a.post("/v1/applications", json=app("keep", keeper), headers={"Idempotency-Key": "k"}).is_success
            a_task = safe("acme-ai:keep/hold/0")
            checkpoint = work / "checkpoints" / a_task / "s"
            wait_for(checkpoint.exists)
            state = wait_for(lambda: next(iter((work / "nodes").glob(f"*/state/{a_task}/s")), None))
            a_log = work / "logs" / f"{a_task}.log"
            theirs = [a_log, state, checkpoint, db, work / USERS_FILE, Path(f"/proc/{server.proc.pid}/environ")]
            for path in theirs[:3]:  # there, and readable by the server
                assert "of-a" in path.read_text()
            probe = {"name": "look", "lifetime": "job", "duration": "1s", "resources": {"cpu": "100m"},
                     "run": {"command": ["sh", "-c", PROBE, "probe", *map(str, theirs)],
                             "env": {"MINE": "declared", "WORK": str(work)}}}
            assert b.post("/v1/applications", json=app("probe", probe), headers={"Idempotency-Key": "p"}).is_success
            wait_for(lambda: b.get("/v1/tasks/probe/look/0").json()["status"] in ("finished", "failed"))
            out = b.get("/v1/logs/probe/look/0").text
            assert a.get("/v1/logs/keep/hold/0").text.count("log-line-of-a") == 1  # a's own log, through the API
            uids = json.loads((work / USERS_FILE).read_text())["tenants"]
            modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (a_log, work / USERS_FILE, state.parent, work / "logs")}
        finally:
            server.kill()  # kill -9: the controller and every task go with it
    env = dict(line[5:].split("=", 1) for line in out.splitlines() if line.startswith("env: "))
    assert set(env) <= ALLOWED | {"MINE", "WORK"}, set(env) - ALLOWED  # nothing but its own and suanli's
    assert env["MINE"] == "declared" and env["SUANLI_TENANT"] == "hpc-lab" and env["SUANLI_TASK"] == "probe/look/0"
    assert SECRET not in out and ADMIN not in out and HIDDEN not in out and "SECRET_X" not in out
    for path in theirs:
        assert f"== {path}\ncat: {path}: Permission denied\n" in out
    assert "of-a" not in out
    assert "ls: cannot open directory" in out and "Permission denied" in out.split("== list", 1)[1]
    assert "== own: own-state" in out  # its own state it can write and read
    assert f"uid: {uids['hpc-lab']} groups: {uids['hpc-lab']}\n" in out and uids["hpc-lab"] != uids["acme-ai"]
    cwd = Path(out.split("cwd: ", 1)[1].split("\n", 1)[0])  # its own folder, removed when it ended
    assert cwd.parent.parent.parent == work / "nodes" and cwd.parent.name == "home"
    assert cwd.name == safe("hpc-lab:probe/look/0") and env["HOME"] == str(cwd)
    assert modes == {a_log: 0o600, work / USERS_FILE: 0o600, state.parent: 0o700, work / "logs": 0o700}
    assert state.parent.stat().st_uid == uids["acme-ai"]
    wait_for(lambda: not _processes_of(set(uids.values())), timeout=5)  # a's service died with the server


@needs_root
def test_serve_refuses_a_work_dir_its_tenants_cannot_reach(tmp_path):
    from serving import FLEET

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    r = suanli("serve", *FLEET, "--executor", "local", "--work-dir", closed / "w", "--port", "1")
    assert r.returncode == 2 and "--work-dir" in r.stderr and "may not be crossed by other users" in r.stderr


def _processes_of(uids: set[int]) -> list[int]:
    """The live processes (not zombies) whose real user is one of ``uids``."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) in uids and not fields["State"].strip().startswith(("Z", "X")):
            found.append(int(status.parent.name))
    return found


PARENT = """\
import sys, time, subprocess
from pathlib import Path
from suanli.executors.confine import Confinement
from suanli.executors.tasks import task_command
c = Confinement()
procs = c.group("probe", 100, 64)
p = subprocess.Popen(task_command(("sleep", "30"), procs, int(sys.argv[1])), start_new_session=True)
print(p.pid, c.kind, flush=True)
time.sleep(60)
"""


@needs_root
def test_a_task_that_changed_user_still_dies_with_its_executor():
    uid = 2_999_999
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(uid)], stdout=subprocess.PIPE, text=True)
    try:
        pid, kind = parent.stdout.readline().split()
        status = Path(f"/proc/{pid}/status")
        wait_for(lambda: Path(f"/proc/{pid}/comm").read_text().strip() == "sleep", timeout=10)
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        assert fields["Uid"].split() == [str(uid)] * 4 and fields["Gid"].split() == [str(uid)] * 4
        assert fields["Groups"].strip() == "" and fields["NoNewPrivs"].strip() == "1"
        if kind != "none":  # it joined its group as root, before it changed user
            assert "/probe" in Path(f"/proc/{pid}/cgroup").read_text()
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    wait_for(lambda: not _processes_of({uid}), timeout=5)
    Confinement().close()  # sweeps the groups of the killed parent


def test_state_copies_keep_links_as_links_and_leave_out_others_files(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root's own")
    src = tmp_path / "state"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("data")
    (src / "x").symlink_to(secret)
    (src / ".checkpointed").touch()
    owner = os.getuid()
    if owner == 0:  # a file of another user's in the folder: a hard link a task made to it, say
        (src / "theirs").write_text("not the task's")
        os.chown(src / "theirs", 2_999_998, 2_999_998)
    copy_tree(src, tmp_path / "copy", owner)
    copy = tmp_path / "copy"
    assert (copy / "sub" / "f").read_text() == "data" and not (copy / "theirs").exists()
    assert (copy / "x").is_symlink() and os.readlink(copy / "x") == str(secret)
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700
    unpack(pack(src, owner), tmp_path / "back")
    back = tmp_path / "back"
    assert (back / "sub" / "f").read_text() == "data" and (back / "x").is_symlink()
    assert not (back / ".checkpointed").exists() and not (back / "theirs").exists()


def test_a_gangs_states_merge_in_rank_order_and_leave_out_others_files(tmp_path):
    """``merge_trees``: a path several members hold is rank 0's (the first
    source's), what one alone holds is kept, nothing goes under a path the
    first made a file or a link, and the checkpoint mark stays out."""
    ranks = []
    for rank, files in enumerate([{"progress.json": "0", "shard-0": "a", "d": "file of 0", "link": None},
                                  {"progress.json": "1", "shard-1": "b", "d/under": "x", "link/under": "y",
                                   "both/deep": "1"},
                                  {"progress.json": "2", "both/deep": "2", "both/only-2": "z"}]):
        src = tmp_path / f"r{rank}"
        src.mkdir()
        (src / ".checkpointed").touch()
        for name, text in files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            if text is None:
                (src / name).symlink_to(tmp_path / "secret")
            else:
                (src / name).write_text(text)
        ranks.append((src, os.getuid()))
    if os.getuid() == 0:
        (ranks[1][0] / "theirs").write_text("not the task's")
        os.chown(ranks[1][0] / "theirs", 2_999_998, 2_999_998)
    merge_trees([*ranks, (tmp_path / "gone", None)], tmp_path / "gang")
    gang = tmp_path / "gang"
    found = {str(p.relative_to(gang)): (p.read_text() if p.is_file() and not p.is_symlink() else None)
             for p in gang.rglob("*")}
    assert found == {"progress.json": "0", "shard-0": "a", "shard-1": "b", "d": "file of 0", "link": None,
                     "both": None, "both/deep": "1", "both/only-2": "z"}
    assert (gang / "link").is_symlink() and stat.S_IMODE(gang.stat().st_mode) == 0o700


RUN = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: one}
spec:
  sites: [{name: here, tier: edge, nodeGroups: [{name: cpu, count: 1, arch: x86_64, cpu: 4, memory: 4Gi}]}]
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t}
spec: {}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: a, tenant: t}
spec:
  components:
    - {name: env, lifetime: job, duration: 1s, resources: {cpu: 1},
       run: {command: [sh, -c, 'env | sed "s/^/env: /"; echo "cwd: $(pwd) uid: $(id -u)"'], env: {MINE: "1"}}}
---
apiVersion: suanli/v1
kind: Scenario
metadata: {name: s}
spec: {until: 3s}
"""


def test_run_keeps_the_scenario_folder_and_the_users_own_user_with_a_clean_environment(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(RUN))
    r = suanli("run", path, "--work-dir", tmp_path / "w", env={"SECRET_X": HIDDEN, "SUANLI_ADMIN_TOKEN": SECRET})
    assert r.returncode == 0, r.stderr
    out = (tmp_path / "w" / "logs" / "a%2Fenv%2F0.log").read_text()
    env = dict(line[5:].split("=", 1) for line in out.splitlines() if line.startswith("env: "))
    assert set(env) <= ALLOWED | {"MINE"} and env["MINE"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert HIDDEN not in out and SECRET not in out
    assert f"cwd: {tmp_path} uid: {os.getuid()}\n" in out  # one user: its scenario's folder, its own user
    assert env["HOME"] == str(tmp_path / "w" / "nodes" / "here%2Fcpu-0" / "home" / "a%2Fenv%2F0")
    assert env["PATH"].split(":")[0] == os.path.dirname(sys.executable)
    executor = next(e for e in events(tmp_path / "w" / "out") if e["kind"] == "executor")
    assert executor["cwd"] == str(tmp_path) and executor["users"].startswith("the executor's")


@needs_root
def test_a_ray_actor_runs_its_task_as_its_tenants_user_in_its_own_folders(tmp_path):
    from suanli.executors.ray import TaskActor

    class Here(TaskActor):
        """A task's actor doing its work in this process, with no Ray node to name."""

        def node_id(self) -> str:
            return "here"

        def label(self) -> str:
            return "here"

    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "old").write_text("from the last checkpoint")
    a, b = Here("acme-ai:t/c/0", 1), Here("hpc-lab:t/c/0", 1)
    try:
        a.start(("sh", "-c", 'echo secret-of-a > "$SUANLI_STATE_DIR/s"; echo "$(id -u) $(pwd) $HOME"'), {}, None,
                pack(tmp_path / "saved"), 100, 0, 2_999_990)
        code, log = a.wait()
        assert code == 0 and f"2999990 {a.own} {a.own}\n" in log.decode()
        assert (a.state / "old").read_text() == "from the last checkpoint" and (a.state / "s").exists()
        assert {p.stat().st_uid for p in (a.state, a.state / "old", a.state / "s", a.own)} == {2_999_990}
        b.start(("sh", "-c", 'cat "$1" "$2" 2>&1; cat "$SUANLI_STATE_DIR/../task.log" 2>&1; id -u', "b",
                 str(a.state / "s"), str(a.log_path)), {}, None, None, 100, 0, 2_999_991)
        code, log = b.wait()
        text = log.decode()
        assert text.count("Permission denied") == 3 and "secret-of-a" not in text and "2999991\n" in text
        saved, _ = a.stop(1.0, save=True)
        unpack(saved, tmp_path / "back")
        assert (tmp_path / "back" / "s").read_text() == "secret-of-a\n"
    finally:
        for actor in (a, b):
            actor.stop(0.0, save=False)
            shutil.rmtree(actor.home, ignore_errors=True)
