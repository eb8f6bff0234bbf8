"""Agents that execute: a control plane (``serve --executor agents``) in one
network namespace and three agents (``suanli agent --runtime podman`` or
``process``), each in its own, joined by a bridge: machines of their own as
far as the network goes. The tasks run on the agents; what is checked comes
from the agents' own logs (each start, stop and fence with its wall time)
and the tasks' logs as the server has them.

- a job's container on an agent ends with its exit status, and its log is
  the server's;
- a stateful container moved between two agents (a drain) carries its
  counter: no gap, no repeat;
- a restarted server finds its agents' tasks running, and they run on
  (adopted: no task starts again);
- a killed agent's containers (processes) are removed by its fence keeper
  at once, and the work moves once its lease is out;
- an agent whose link is cut fences itself before its lease runs out, and no
  task runs in two places at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from live import ROOT, runs_of
from serving import ADMIN, wait

pytestmark = [pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="network namespaces need root and iproute2"),
              pytest.mark.long(70)]

LEASE = 10  # seconds: agents fence at 0.7 of it
RESTART_LEASE = 40  # a lease longer than a server's restart takes, even on a loaded machine
GAME = ROOT / "examples" / "live" / "game.py"
FLEET = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: edge}
spec:
  sites:
    - name: e1
      tier: edge
      agents: {nodes: 3, node: {cpu: 4, memory: 8Gi}}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: alpha}
"""


def app(runtime: str, game_py: Path) -> str:
    """A stateful game (``examples/live``'s; in a container, a counter of the
    same protocol) and two idle replicas, as processes or containers."""
    if runtime == "podman":
        from containers import COUNTER, image

        img = image()
        game = f'{{image: "{img}", command: [sh, -c, {json.dumps(COUNTER)}], stopGrace: 5s}}'
        idle = (f'{{image: "{img}", command: [sh, -c, "sleep 1; touch $HOME/up; exec sleep 3600"], '
                'readiness: {exec: [test, -e, /suanli/home/up], period: 0.5s}}')
    else:
        game = f'{{command: [python3, "{game_py}"], env: {{GAME_TICK_S: "0.05"}}, stopGrace: 5s}}'
        idle = "{command: [sleep, infinity]}"
    return f"""\
apiVersion: suanli/v1
kind: Application
metadata: {{name: play}}
spec:
  components:
    - name: game
      lifetime: service
      resources: {{cpu: 3, memory: 256Mi}}
      state: {{kind: stateful, size: 1Mi, checkpointEvery: 1s}}
      run: {game}
    - name: idle
      lifetime: service
      replicas: 2
      resources: {{cpu: 500m, memory: 64Mi}}
      run: {idle}
"""


class Net:
    """A bridge in this namespace and a namespace per machine, each with an address."""

    made_here = 0

    def __init__(self, names: list[str]) -> None:
        Net.made_here += 1  # (a namespace is gone only once its last process is: a next one has names of its own)
        self.tag = f"sl{os.getpid() % 1000}x{Net.made_here % 100}"
        self.bridge = f"{self.tag}br"
        net = f"10.{231 + Net.made_here % 20}.{os.getpid() % 250}"  # (tests of other workers run beside)
        self.addr: dict[str, str] = {}
        self.made: list[str] = []
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("addr", "add", f"{net}.254/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for i, name in enumerate(names, start=1):
            ns = f"{self.tag}{name}"
            self._ip("netns", "add", ns)
            self.made.append(ns)
            host, inside = f"{ns}h", f"{ns}n"
            self._ip("link", "add", host, "type", "veth", "peer", "name", inside)
            self._ip("link", "set", inside, "netns", ns)
            self._ip("link", "set", host, "master", self.bridge)
            self._ip("link", "set", host, "up")
            self._ip("-n", ns, "addr", "add", f"{net}.{i}/24", "dev", inside)
            self._ip("-n", ns, "link", "set", inside, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            self.addr[name] = f"{net}.{i}"

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def run(self, name: str, argv: list[str], log, env: dict | None = None) -> subprocess.Popen:
        # (its network namespace alone: the machine's control groups stay in sight, for podman and limits)
        return subprocess.Popen(["nsenter", f"--net=/run/netns/{self.tag}{name}", *argv], stdout=log, stderr=log,
                                env={**os.environ, **(env or {})})

    def cut(self, name: str, up: bool = False) -> None:
        self._ip("link", "set", f"{self.tag}{name}h", "up" if up else "down")

    def close(self) -> None:
        for ns in self.made:
            subprocess.run(["ip", "link", "del", f"{ns}h"], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from suanli.cli import main; main()", *args]


class World:
    """The server and three agents, each in its own namespace."""

    def __init__(self, tmp: Path, base: Path, runtime: str = "process", lease: int = LEASE) -> None:
        self.tmp, self.base = tmp, base  # (the agents' work folders in ``base``, which tenants' users reach)
        self.runtime, self.lease = runtime, lease
        self.game = base / "play.py"  # (where tenants' users may read it; not named game.py: tests beside
        # this one look for leftovers of their own game by that name)
        shutil.copyfile(GAME, self.game)
        self.game.chmod(0o644)
        (tmp / "fleet.yaml").write_text(FLEET)
        self.net = Net(["srv", "a1", "a2", "a3"])
        self.url = f"http://{self.net.addr['srv']}:18080"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.http = httpx.Client(base_url=self.url, timeout=30)
        self.admin = {"Authorization": f"Bearer {ADMIN}"}
        try:
            self._begin()
        except BaseException:
            self.close()
            raise

    def _begin(self) -> None:
        self.serve()
        self.agent_token = self.mint(role="agent", sites=["e1"], nodes=3)
        self.tenant = {"Authorization": f"Bearer {self.mint(tenant='alpha', role='tenant-admin')}"}
        for a in ("a1", "a2", "a3"):
            self.agent(a)
        wait(lambda: len(self.ready_agents()) == 3, 60, "three agents")

    def start(self, name: str, where: str, argv: list[str], env: dict | None = None) -> None:
        self.logs[name] = self.tmp / f"{name}.log"
        log = open(self.logs[name], "ab")
        self.procs[name] = self.net.run(where, argv, log, env)

    def serve(self) -> None:
        self.start("server", "srv", cli("serve", str(self.tmp / "fleet.yaml"), "--db",
                                        f"sqlite:///{self.tmp / 's.db'}", "--host", self.net.addr["srv"],
                                        "--port", "18080", "--executor", "agents", "--work-dir",
                                        str(self.tmp / "srv"), "--max-rate", "100000"),
                   {"SUANLI_ADMIN_TOKEN": ADMIN})
        wait(lambda: self._up(), 60, "the server")

    def _up(self) -> bool:
        try:
            return self.http.get("/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def agent(self, name: str) -> None:
        self.start(name, name, cli("agent", "--site", "e1", "--name", name, "--cpu", "4", "--memory", "8Gi",
                                   "--runtime", self.runtime, "--work-dir", str(self.base / name), "--lease", f"{self.lease}s",
                                   "--server", self.url),
                   {"SUANLI_TOKEN": self.agent_token, "SUANLI_PLAIN_HTTP": "1"})  # (a test network)

    def mint(self, **body) -> str:
        r = self.http.post("/v1/tokens", json=body, headers=self.admin)
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def ready_agents(self) -> list[str]:
        return [a["name"] for a in self.http.get("/v1/agents", headers=self.admin).json() if a["state"] == "ready"]

    def tasks(self) -> dict[str, dict]:
        return {t["task"]: t for t in self.http.get("/v1/tasks", headers=self.tenant).json()}

    def running(self) -> dict[str, str]:
        """The application ``play``'s running tasks -> their nodes."""
        return {name: t["node"] for name, t in self.tasks().items() if t["status"] == "running"
                and name.startswith("play/")}

    def log(self, task: str) -> str:
        r = self.http.get(f"/v1/logs/{task}", headers=self.tenant)
        return r.text if r.status_code == 200 else ""

    def said(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def close(self) -> None:
        for p in self.procs.values():  # agents killed: each one's fence keeper kills its tasks at once; the
            if p.poll() is None:       # server's controller process dies with it (a waiting read holds no stop)
                p.send_signal(signal.SIGKILL)
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.http.close()
        self.net.close()


def intervals(world: World) -> dict[str, list[tuple[str, float, float]]]:
    """Each task's runs as the agents' own logs have them: (agent, from, to;
    infinite while it runs)."""
    out: dict[str, list[tuple[str, float, float]]] = {}
    end = float("inf")
    for a in ("a1", "a2", "a3"):
        text = world.said(a)
        open_: dict[str, float] = {}
        for line in text.splitlines():
            if m := re.search(r": started (\S+) run \d+ attempt \d+ at ([\d.]+)", line):
                open_[m[1]] = float(m[2])
            elif m := re.search(r": stopped (\S+) by ([\d.]+)", line):
                if m[1] in open_:
                    out.setdefault(m[1], []).append((a, open_.pop(m[1]), float(m[2])))
            elif m := re.search(r": fenced: .* by ([\d.]+): (.*)$", line):
                for task in m[2].split():
                    if task in open_:
                        out.setdefault(task, []).append((a, open_.pop(task), float(m[1])))
            elif m := re.search(r"^suanli fence: .* killed \d+ by ([\d.]+)$", line):  # its keeper: all of it
                for task in list(open_):
                    out.setdefault(task, []).append((a, open_.pop(task), float(m[1])))
        for task, began in open_.items():
            out.setdefault(task, []).append((a, began, end))
    return {task: sorted(spans, key=lambda s: s[1]) for task, spans in out.items()}


def overlaps(runs: dict[str, list[tuple[str, float, float]]]) -> list[str]:
    bad = []
    for task, spans in runs.items():
        spans = sorted(spans, key=lambda s: s[1])
        for (a, _, end), (b, start, _) in zip(spans, spans[1:]):
            if start < end:
                bad.append(f"{task}: on {a} until {end:.3f} and on {b} from {start:.3f}")
    return bad


@pytest.fixture
def world(tmp_path, request):
    base = Path(tempfile.mkdtemp(prefix="suanli-agents-"))
    base.chmod(0o711)
    try:
        runtime, lease = getattr(request, "param", ("process", LEASE))
        w = World(tmp_path, base, runtime, lease)
        try:
            yield w
        finally:
            w.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def apply(world: World) -> dict[str, str]:
    import yaml

    doc = yaml.safe_load(app(world.runtime, world.game))
    r = world.http.put("/v1/applications/play", json=doc, headers=world.tenant)
    assert r.status_code in (200, 201), r.text
    return wait(lambda: (lambda run: run if len(run) == 3 else None)(world.running()), 60, "three tasks running")


def live_on(world: World) -> dict[str, str]:
    """Each task that runs now by the agents' logs -> the node of the agent it runs on."""
    return {task.split(":", 1)[1]: f"e1/{spans[-1][0]}" for task, spans in intervals(world).items()
            if spans and spans[-1][2] == float("inf") and task.startswith("alpha:play/")}


def settled(world: World, away_from: str | None = None) -> dict[str, str]:
    """The tasks once all three run where the server says, as the agents say too."""
    def now():
        run = world.running()
        ok = len(run) == 3 and away_from not in run.values() and live_on(world) == run
        return run if ok else None
    return wait(now, 90, "the tasks to run where they are placed")


def containers_of(agent_pid: int) -> list[str]:
    from suanli.executors.podman import LABEL, podman

    r = subprocess.run([*podman(), "ps", "-q", "--filter", f"label={LABEL}={agent_pid}"], capture_output=True,
                       text=True, timeout=60)
    return r.stdout.split()


def a_job_fails_with_its_status_and_log(world: World) -> None:
    """A job in a container on an agent: its exit status ends it, its log is the server's, it ran as its tenant."""
    from containers import image

    doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "box"},
           "spec": {"components": [{"name": "job", "lifetime": "job", "duration": "1s", "resources": {"cpu": "100m"},
                                    "run": {"image": image(), "command": [
                                        "sh", "-c", "echo in a container as $(id -u); exit 3"]}}]}}
    r = world.http.put("/v1/applications/box", json=doc, headers=world.tenant)
    assert r.status_code in (200, 201), r.text
    wait(lambda: world.tasks()["box/job/0"]["status"] == "failed", 90, "the job to fail")
    history = world.http.get("/v1/tasks/box/job/0", headers=world.tenant).json()["history"]
    assert [e.get("reason") for e in history if e["kind"] == "failed"] == ["exit status 3"], history
    said = wait(lambda: re.search(r"in a container as (\d+)", world.log("box/job/0")), 30, "the job's log")
    assert int(said[1]) >= 2_000_000  # its tenant's user, not the agent's


@pytest.mark.parametrize("world", [("podman", RESTART_LEASE)], indirect=True, ids=["podman"])
def test_a_container_moves_between_agents_with_its_state_and_a_restarted_server_adopts_what_runs(world):
    a_job_fails_with_its_status_and_log(world)
    placed = apply(world)
    ready = lambda: sorted(n for n, t in world.tasks().items() if t.get("ready"))  # noqa: E731
    wait(lambda: ready() == ["play/idle/0", "play/idle/1"], 60, "the idle replicas' readiness (probed in them)")
    game_at = placed["play/game/0"]
    wait(lambda: len(runs_of(world.log("play/game/0"))) == 1 and len(runs_of(world.log("play/game/0"))[0][1]) > 20,
         60, "the game to tick on its first agent")
    r = world.http.post(f"/v1/nodes/{game_at}/drain", headers=world.admin)
    assert r.status_code in (200, 202, 204), r.text
    moved = settled(world, away_from=game_at)
    wait(lambda: len(runs_of(world.log("play/game/0"))) == 2 and len(runs_of(world.log("play/game/0"))[1][1]) > 20,
         60, "the game to tick on its second agent")
    (r0, first), (r1, second) = runs_of(world.log("play/game/0"))[:2]
    assert r0 == 0 and first == list(range(1, len(first) + 1))
    assert r1 == first[-1] and second[0] == first[-1] + 1, (first[-3:], second[:3])  # no gap, no repeat
    assert overlaps(intervals(world)) == []

    # the server restarts: every task runs on where it was, adopted, not started again
    before = intervals(world)
    world.procs["server"].send_signal(signal.SIGKILL)
    world.procs["server"].wait()
    world.serve()
    wait(lambda: world.running() == moved and all(
        f"adopted alpha:{t} " in world.said(node.split("/")[1]) for t, node in moved.items()), 60, "the tasks adopted")
    time.sleep(2)
    after = intervals(world)
    assert {t: len(s) for t, s in after.items()} == {t: len(s) for t, s in before.items()}, (before, after)
    wait(lambda: ready() == ["play/idle/0", "play/idle/1"], 30, "the adopted replicas to be ready again")
    log = world.log("play/game/0")
    assert len(runs_of(log)) == 2 and runs_of(log)[1][1][-1] > second[-1]  # the same run ticks on
    if world.runtime != "podman":
        return
    # kill the agent of the containers: its keeper removes them, well within the lease
    name = moved["play/game/0"].split("/")[1]
    pid = world.procs[name].pid
    assert len(containers_of(pid)) == 3
    began = time.monotonic()
    world.procs[name].send_signal(signal.SIGKILL)
    wait(lambda: not containers_of(pid), world.lease, "the killed agent's containers to go")
    assert time.monotonic() - began < world.lease


def game_processes(folder: Path) -> int:
    """Processes of the game whose state folder is under ``folder`` (an agent's work folder)."""
    r = subprocess.run(["pgrep", "-f", "play.py"], capture_output=True, text=True)
    n = 0
    for pid in r.stdout.split():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        n += any(e.startswith(b"SUANLI_STATE_DIR=" + str(folder).encode()) for e in env)
    return n


def test_a_killed_agents_tasks_stop_and_move_and_a_cut_off_agent_fences_itself_before_its_lease(world):
    placed = apply(world)
    first = placed["play/game/0"]
    wait(lambda: sum(len(t) for _, t in runs_of(world.log("play/game/0"))) > 40, 60, "the game to tick and checkpoint")
    # kill the agent: its keeper kills what it ran at once, and the work moves once its lease is out
    killed = first.split("/")[1]
    assert game_processes(world.base / killed) > 0  # (its process and the wrappers that start it)
    began = time.time()
    world.procs[killed].send_signal(signal.SIGKILL)
    wait(lambda: "is gone: killed" in world.said(killed), 3 * LEASE, "the killed agent's keeper")
    assert game_processes(world.base / killed) == 0  # before its lease ran out
    gone_by = float(re.search(r"is gone: killed \d+ by ([\d.]+)", world.said(killed))[1])
    assert gone_by - began < LEASE
    second = settled(world, away_from=first)
    assert set(second.values()) <= {f"e1/{a}" for a in ("a1", "a2", "a3") if a != killed}
    wait(lambda: len(runs_of(world.log("play/game/0"))) == 2 and len(runs_of(world.log("play/game/0"))[1][1]) > 10,
         60, "the game to tick again")
    (_, ticks1), (resumed, ticks2) = runs_of(world.log("play/game/0"))[:2]
    assert 0 < resumed <= ticks1[-1] and ticks2[0] == resumed + 1  # from its last checkpoint (killed: no last word)

    # cut the game's agent off: it fences itself before its lease is out, and only then does the work move
    cut = second["play/game/0"].split("/")[1]
    world.net.cut(cut)
    wait(lambda: ": fenced: " in world.said(cut), LEASE, "the cut-off agent to fence itself")
    fenced_by = float(re.search(r": fenced: .* by ([\d.]+):", world.said(cut))[1])
    third = settled(world, away_from=second["play/game/0"])
    rest = ({"a1", "a2", "a3"} - {killed, cut}).pop()
    assert set(third.values()) == {f"e1/{rest}"}
    runs = intervals(world)
    assert overlaps(runs) == [], runs  # no task ever ran in two places
    moved_at = min(s[1] for spans in runs.values() for s in spans if s[0] == rest)
    assert fenced_by < moved_at, (fenced_by, moved_at)
    world.net.cut(cut, up=True)  # back: it finds itself lost, registers again, and runs nothing of before
    wait(lambda: "registered again" in world.said(cut), 3 * LEASE, "the cut-off agent to come back")
    time.sleep(1)
    assert overlaps(intervals(world)) == []


@pytest.mark.parametrize("args, field", [
    (["--runtime", "docker"], "--runtime"),
    (["--runtime", "process", "--max-pids", "0"], "--max-pids"),
])
def test_an_agents_bad_options_are_one_clear_problem_before_it_calls_the_server(args, field):
    r = subprocess.run(cli("agent", "--site", "e1", "--name", "n", "--cpu", "1", "--memory", "1Gi",
                           "--server", "http://127.0.0.1:9", *args), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_agents_work_folder_its_tenants_cannot_reach_is_refused(tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    r = subprocess.run(cli("agent", "--site", "e1", "--name", "n", "--cpu", "1", "--memory", "1Gi", "--runtime",
                           "process", "--work-dir", str(hidden / "w"), "--server", "http://127.0.0.1:9"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--work-dir" in r.stderr and "cannot reach" in r.stderr, r.stderr
