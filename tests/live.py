"""Helpers for tests that run scenarios for real (``suanli run``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
LIVE = ROOT / "examples" / "live" / "autodrive.yaml"
GAME = "infotainment/game/0"


def suanli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def events(out: Path) -> list[dict]:
    with open(out / "events.jsonl") as f:
        return [json.loads(line) for line in f]


def placements(evs: list[dict]) -> list[tuple[str, str]]:
    """Every placement, in order: (task, node)."""
    return [(e["task"], e["node"]) for e in evs if e["kind"] == "placed"]


def simulated(scenario: Path, tmp: Path) -> list[dict]:
    r = suanli("simulate", scenario, "--out", tmp / "twin")
    assert r.returncode == 0, r.stderr
    return events(tmp / "twin")


def log_text(work: Path, task: str) -> str:
    r = suanli("logs", task, "--work-dir", work)
    assert r.returncode == 0, r.stderr
    return r.stdout


def ticks(log: str) -> list[int]:
    return [int(line.split()[1]) for line in log.splitlines() if line.startswith("tick ")]


def runs_of(log: str) -> list[tuple[int | None, list[int]]]:
    """Each run of the game (each after a header line): the count it resumed
    after (None: it printed nothing), and its ticks."""
    out: list[tuple[int | None, list[int]]] = []
    for line in log.splitlines():
        if line.startswith("--- suanli: "):
            out.append((None, []))
        elif ": resuming after " in line:
            out[-1] = (int(line.rsplit(" ", 1)[1]), out[-1][1])
        elif line.startswith("tick "):
            out[-1][1].append(int(line.split()[1]))
    return out


HELLO = """\
apiVersion: suanli/v1
kind: Application
metadata: {name: hello}
spec:
  components:
    - {name: say, lifetime: job, duration: 1s, resources: {cpu: 100m}, %s
       run: {%scommand: [sh, -c, "echo hello from $SUANLI_NODE as uid $(id -u), admin token ${SUANLI_ADMIN_TOKEN:-unseen}%s"]}}
"""


def hello_ran(folder: Path, env: dict, timeout: float, extra: str = "", image: str | None = None,
              then: str = "") -> subprocess.CompletedProcess:
    """Apply the application ``hello`` (one job that says where it runs; in a
    container of ``image``, given one; ``then``: more shell after it) to the
    server in ``env``, wait for it to finish, and return ``suanli logs`` of its task."""
    app = folder / "hello.yaml"
    app.write_text(HELLO % (extra, f'image: "{image}", ' if image else "", then))
    assert suanli("apply", "-f", app, env=env).returncode == 0
    deadline = time.monotonic() + timeout
    while '"finished"' not in suanli("get", "tasks", "-o", "json", env=env).stdout:
        assert time.monotonic() < deadline, "the task did not finish"
        time.sleep(0.2)
    return suanli("logs", "hello/say/0", env=env)


@contextmanager
def executor_server(tmp_path: Path, executor: str) -> Iterator[tuple[Any, dict, Path]]:
    """A control plane (SQLite in ``tmp_path``) whose tasks run on ``executor``,
    its work folder in a folder of its own that tenants' users can reach (not
    under pytest's); yields the server, the client's environment as the admin,
    and that folder (the work directory is its ``w``). Stopped and removed after."""
    from serving import ADMIN, Server, free_port

    from suanli.server.store import sqlite_url

    base = Path(tempfile.mkdtemp(prefix="suanli-serve-"))
    base.chmod(0o711)
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(sqlite_url(tmp_path / "s.db"), free_port(), log, "--executor", executor,
                        "--work-dir", str(base / "w"), speed=1)
        server.start()
        try:
            yield server, {"SUANLI_SERVER": server.url, "SUANLI_TOKEN": ADMIN}, base
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)


def as_tenant(admin: dict, tenant: str) -> dict:
    """The client's environment with a new token of ``tenant``'s."""
    return {**admin, "SUANLI_TOKEN": suanli("token", "create", "--tenant", tenant, env=admin).stdout.strip()}


def ran_as_a_tenant(log: str) -> bool:
    """The hello task's line says it saw no admin token and, where the control
    plane runs as root, ran as a tenant's own user (uids from 2000000)."""
    m = re.search(r"as uid (\d+), admin token (\S+)", log)
    return m is not None and m.group(2) == "unseen" and (os.geteuid() != 0 or int(m.group(1)) >= 2_000_000)


ONE_SITE = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
    - name: here
      tier: edge
      nodeGroups: [{name: cpu, count: %d, arch: %s, cpu: 8, memory: 16Gi}]
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
%s
---
apiVersion: suanli/v1
kind: Scenario
metadata: {name: s}
spec:
  until: %s
%s
"""


def one_site(folder: Path, components: str, until: str = "4s", extra: str = "", arch: str = "x86_64",
             nodes: int = 2) -> Path:
    """``folder/s.yaml``: a scenario of one edge site of ``nodes`` nodes, tenant ``t`` and application ``a``
    with ``components`` (YAML list items, any indent), ``until``, and ``extra`` lines under its spec."""
    import textwrap

    path = folder / "s.yaml"
    path.write_text(ONE_SITE % (nodes, arch, textwrap.indent(textwrap.dedent(components), "    "), until, extra))
    return path


ELASTIC = ROOT / "examples" / "live" / "elastic.yaml"
TRAINER = "train/worker"


def trainer_runs(log: str) -> list[tuple[int, int, int | None, bool]]:
    """Each run in a trainer member's log (examples/live/train.py): (the sample
    it resumed at, its world size, the sample it saved at leaving (None: it
    did not leave), whether it was done)."""
    out: list[list] = []
    for line in log.splitlines():
        m = re.match(r"rank \d+ on \S+: resuming at sample (\d+) with (\d+) members", line)
        if m:
            out.append([int(m[1]), int(m[2]), None, False])
        elif (m := re.match(r"rank \d+: saved (\d+), leaving", line)):
            out[-1][2] = int(m[1])
        elif re.match(r"rank \d+: done at sample", line):
            out[-1][3] = True
    return [tuple(r) for r in out]


def task_log(work: Path, task: str) -> str:
    """A task's log in an executor's work directory, as shipped there."""
    path = work / "logs" / (task.replace("/", "%2F") + ".log")
    return path.read_text() if path.exists() else ""


def check_elastic_run(evs: list[dict], read_log) -> None:
    """The live elastic example ran as its twin says (2 -> 4 -> 2 -> 4) and
    every member of every width went on from the gang's progress."""
    resized = [(e["from"], e["to"]) for e in evs if e["kind"] == "resized"]
    assert resized == [(2, 4), (4, 2), (2, 4)], resized
    assert {e["task"] for e in evs if e["kind"] == "finished" and e["task"].startswith(TRAINER)} == \
        {f"{TRAINER}/{i}" for i in range(4)}
    saved = [e for e in evs if e["kind"] == "gangStateSaved"]
    shared = [e for e in evs if e["kind"] == "gangStateShared"]
    assert [e["members"] for e in saved] == [2, 4, 2] and [e["members"] for e in shared] == [4, 2, 4]
    lead = trainer_runs(read_log(f"{TRAINER}/0"))
    assert [w for _, w, _, _ in lead] == [2, 4, 2, 4]
    assert lead[0][0] == 0 and lead[-1][3]
    for before, after in zip(lead, lead[1:]):  # each width goes on from where the last one stopped
        assert before[2] is not None and 0 < before[2] == after[0], lead
    assert lead[1][0] < lead[2][0] < lead[3][0]
    for rank in (1, 2, 3):  # every member starts with the gang's progress, new ones too
        runs = trainer_runs(read_log(f"{TRAINER}/{rank}"))
        starts = {s for s, _, _, _ in runs}
        assert starts <= {s for s, _, _, _ in lead} and runs[-1][0] == lead[-1][0], (rank, runs, lead)


# A gang member that counts on from the gang's state (``tasks.regrouped``): it
# adds its gang's width every tenth of a second, rank 0 saves at a checkpoint,
# every member at a stop; a shell script, for processes and containers alike.
GANG_COUNTER = ('n=$(cat "$SUANLI_STATE_DIR/count" 2>/dev/null || echo 0); '
                'echo "rank $SUANLI_RANK of $SUANLI_WORLD_SIZE in $SUANLI_GANG: resuming after $n"; '
                'save() { echo $n > "$SUANLI_STATE_DIR/count"; }; '
                'trap \'save; echo "saved $n, leaving"; exit 0\' TERM; '
                'trap \'[ "$SUANLI_RANK" = 0 ] && save; touch "$SUANLI_STATE_DIR/.checkpointed"\' USR1; '
                'while true; do n=$((n + SUANLI_WORLD_SIZE)); sleep 0.1; done')
# one_site's components: a stateful gang of 1 that may grow to 2 (``%s``: its run)
GANG_GROWS = """\
    - name: w
      lifetime: job
      gang: {size: 1, minSize: 1, maxSize: 2}
      resources: {cpu: 4}
      work: 1h
      state: {kind: stateful, size: 1Mi}
      run: %s
    """
GANG_POLICY = "  policy: {elastic: {policy: greedy, every: 2s}}"


def check_gang_grew(evs: list[dict], read_log) -> None:
    """GANG_GROWS ran: grown from 1 to 2 at a turn, and its new member started
    with the count its first run saved."""
    assert [(e["from"], e["to"]) for e in evs if e["kind"] == "resized"] == [(1, 2)]
    assert [e["members"] for e in evs if e["kind"] == "gangStateShared"] == [2]
    first, second = read_log("a/w/0"), read_log("a/w/1")
    assert "rank 0 of 1 in a/w: resuming after 0" in first
    saved = int(first.split("saved ", 1)[1].split(",")[0])
    assert saved > 0
    assert f"rank 0 of 2 in a/w: resuming after {saved}" in first
    assert f"rank 1 of 2 in a/w: resuming after {saved}" in second  # the new member
