"""An agent that executes: the tasks the control plane assigns to its node,
run here as processes (``--runtime process``) or containers (``podman``),
by the local or podman executor's own code (``local.py``, ``podman.py``).

The agent keeps its node's lease, and reads its node's assignments (a
waiting read: it answers when they change) and makes what runs here match
them, a task at a time (``agents.py`` says what each asks). It reports what
happens to them (exits, stops, readiness, checkpoints), sends their logs as
they grow, and sends a task's state when it stops or checkpoints; a task
that starts here fetches the state it left elsewhere.

**Fencing.** A task must never run in two places. The server takes a node
for lost when no renewal came for its lease, and then places its work
elsewhere; so the agent stops its tasks itself before that: when no renewal
went through for ``FENCE_AT`` of the lease (measured from when the last good
one was sent), every task here is killed and its folders dropped, as a lost
node's are. A separate process (``fence.py``) holds the same deadline and
kills the tasks if the agent cannot (hung, or killed itself): it is told the
deadline with each renewal, and acts when it passes or when the agent is gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable
from urllib.parse import unquote

from suanli.executors.agents import launch_of, same_work
from suanli.executors.base import Attachment, Note, TaskExited
from suanli.executors.tasks import folder_size, give, pack, unpack

FENCE_AT = 0.7  # of the lease: no renewal through for this long, and the node's tasks are killed
SHIP_EVERY_S = 0.3  # how often logs are sent
WAIT_S = 10.0  # a read of the assignments waits this long for a change
LOG_CHUNK = 256 << 10
RETRY_S = 0.5  # a renewal that did not go through is tried again this soon


class AgentLoop:
    """What the executor reports to (its ``loop``): events become the agent's reports."""

    def __init__(self, take: Callable[[Any], None]) -> None:
        self.take = take
        self.clock = SimpleNamespace(speed=1.0)

    def post(self, event: Any) -> None:
        self.take(event)

    def now(self) -> float:
        return 0.0


class Agent:
    def __init__(self, http, node: str, lease_s: float, runtime: str, work_dir: Path,
                 say: Callable[[str], None], register: Callable[[], None], max_pids: int = 1024) -> None:
        """``http``: an httpx client of the server (with the agent's token);
        ``register``: registers the node again (after it was lost)."""
        self.http, self.node, self.lease_s, self.say, self.register = http, node, lease_s, say, register
        self.work = Path(work_dir).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.base = f"/v1/agents/{node}"
        self.loop = AgentLoop(self._event)
        world = SimpleNamespace(base_dir=self.work)
        given = Attachment(None, self.loop, world)
        if runtime == "podman":
            from suanli.executors.podman import PodmanExecutor, podman_problem

            why = podman_problem()
            if why is not None:
                raise RuntimeError(f"--runtime podman: podman runs containers here, and {why}")
            self.executor = PodmanExecutor(given, self.work, isolate_tenants=True, max_pids=max_pids)
        else:
            from suanli.executors.local import LocalExecutor

            self.executor = LocalExecutor(given, self.work, isolate_tenants=True, max_pids=max_pids)
        self.runtime = runtime
        self.running: dict[str, dict[str, Any]] = {}  # task -> the assignment it runs under here
        self.busy: set[str] = set()  # tasks with an action under way
        self.acted: dict[str, tuple] = {}  # task -> (what its row asked, done well, when) of its last action
        self.rows: dict[str, dict[str, Any]] = {}  # the newest assignments read
        self.readiness: dict[str, dict[str, Any]] = {}  # task -> its last readiness note (of its run here)
        self.reports: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="suanli-agent-spawn")
        self._wake_read = threading.Event()  # the node is back after a fence: read its assignments now
        self.stop = threading.Event()
        self.fenced = False
        self._fencing = threading.Lock()  # a fence and a task's start, one at a time
        self._failed = 0  # renewals in a row that did not go through
        self.last_ok = time.monotonic()  # when the last renewal that went through was sent
        self.shipped: dict[str, tuple[int, int]] = {}  # task -> (inode, bytes of its log sent)
        self._shipping = threading.Lock()
        self.fence = subprocess.Popen([sys.executable, "-m", "suanli.executors.fence", str(os.getpid()), runtime],
                                      stdin=subprocess.PIPE, text=True, start_new_session=True)
        self._deadline(self.last_ok + FENCE_AT * lease_s)

    # ------------------------------------------------------------ life

    def run(self, renew_every: float) -> None:
        """Until ``stop`` is set: renew the lease every ``renew_every`` seconds,
        run the node's assignments, fence when renewals fail; then leave."""
        for f, n in ((self._read, "suanli-agent-read"), (self._ship, "suanli-agent-logs"),
                     (self._send, "suanli-agent-send"), (lambda: self._renewing(renew_every), "suanli-agent-lease")):
            threading.Thread(target=f, name=n, daemon=True).start()
        looked = time.monotonic()
        while not self.stop.wait(0.05):
            late = time.monotonic() - self.last_ok
            if not self.fenced and late > FENCE_AT * self.lease_s:
                self._fence(f"no renewal went through for {late:.1f}s of its {self.lease_s:g}s lease")
            if time.monotonic() - looked > 1.0:  # (what failed is tried again; nothing else changes here)
                looked = time.monotonic()
                self._reconcile()
        self._leave()

    def _renewing(self, every: float) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            ok = self._renew()
            self.stop.wait(max(0.0, (every if ok else RETRY_S) - (time.monotonic() - began)))

    def _renew(self) -> bool:
        """One renewal; False when it did not go through (tried again soon)."""
        sent = time.monotonic()
        try:  # (a slow answer still counts from when it was sent; the fence is the main loop's to keep)
            r = self.http.put(f"{self.base}/lease", timeout=self.lease_s / 2)
        except Exception as exc:  # the server is away, or the link is cut: the lease may still hold
            self._failed += 1
            if self._failed in (1, 10) or self._failed % 100 == 0:  # (said once in a while, not at every try)
                self.say(f"agent {self.node}: cannot renew ({self._failed} tries): {type(exc).__name__}: {exc}")
            return False
        if r.status_code in (404, 409):  # lost meanwhile: whatever ran here runs elsewhere now
            if not self.fenced:
                self._fence(f"the server took it for lost ({r.status_code})")
            try:
                self.register()
            except Exception as exc:
                self.say(f"agent {self.node}: cannot register again: {exc}")
                return False
            self.say(f"agent {self.node} registered again")
        elif r.status_code >= 400:
            self.say(f"agent {self.node}: renewal refused ({r.status_code}): {r.text[:300]}")
            return False
        self._failed = 0
        self.last_ok = max(self.last_ok, sent)
        self._deadline(self.last_ok + FENCE_AT * self.lease_s)
        if self.fenced:
            self.fenced = False
            self._wake_read.set()
        return True

    def _deadline(self, at: float) -> None:
        self._tell(f"deadline {at!r}")

    def _tell(self, line: str) -> None:
        try:
            self.fence.stdin.write(line + "\n")
            self.fence.stdin.flush()
        except (OSError, ValueError):
            pass

    def _fence(self, why: str) -> None:
        """Every task here killed, their folders dropped: the server will run them elsewhere."""
        with self._fencing:
            with self._lock:
                tasks = list(self.running)
                self.running.clear()
                self.acted.clear()  # (what was done before the fence is undone: it is done again when asked)
                self.fenced = True
            self._kill_all()
        self.say(f"agent {self.node}: fenced: {why}; killed {len(tasks)} tasks by {time.time():.3f}: "
                 f"{' '.join(sorted(tasks))}")
        self.rows = {}

    def _kill_all(self) -> None:
        """Each node's tasks here lost, as a lost node's are (a device's agent runs several
        nodes), and the checkpoints they left here with them."""
        ex = self.executor
        for node in {p.launch.node for p in ex.procs.values()} | set(ex.state_home.values()) | set(ex.home_at.values()):
            ex.lose_node(node)
        ex.state_home.clear()
        shutil.rmtree(self.work / "checkpoints", ignore_errors=True)
        ex._dir(self.work / "checkpoints", 0o700)

    def _leave(self) -> None:
        """Stopped: each task saves its state and sends it, then the node leaves."""
        with self._lock:
            tasks = list(self.running)
        for task in tasks:
            self._stop_task(task, keep=True, report=None)
        self._ship_once()
        try:
            self.http.delete(self.base, timeout=10)
        except Exception as exc:
            self.say(f"agent {self.node}: cannot say it leaves: {exc}")
        self.executor.close()
        self._tell("done")
        try:
            self.fence.stdin.close()
        except OSError:
            pass
        self.fence.wait(30)

    # ------------------------------------------------------------ assignments

    def _read(self) -> None:
        mark = None
        while not self.stop.is_set():
            if self.fenced:
                self._wake_read.wait(0.2)
                self._wake_read.clear()
                mark = None
                continue
            try:
                r = self.http.get(f"{self.base}/assignments", params={"after": mark, "wait": WAIT_S} if mark else {},
                                  timeout=WAIT_S + 10)
            except Exception:
                time.sleep(0.5)
                continue
            if r.status_code != 200:
                if r.status_code == 409 and "no agents' work" in r.text:
                    self.say(f"agent {self.node}: the server runs no agents' work: it holds the lease only")
                    return
                time.sleep(0.5)
                continue
            got = r.json()
            mark = got["mark"]
            self.rows = {a["task"]: a for a in got["assignments"]}
            self._reconcile()

    def _reconcile(self) -> None:
        """Start an action for each task whose assignment differs from what runs here."""
        if self.fenced:
            return
        rows, now = self.rows, time.monotonic()
        with self._lock:
            todo = []
            for task in set(self.acted) - set(rows) - set(self.running):
                del self.acted[task]
            for task in set(rows) | set(self.running):
                if task in self.busy:
                    continue
                a, have = rows.get(task), self.running.get(task)
                done = self.acted.get(task)
                if done is not None and done[0] == _key(a) and (done[1] or now - done[2] < RETRY_S * 4):
                    continue  # done already (a stop said, its row not yet gone), or failed just now
                if a is None or a["want"] == "end" or a["want"] == "stop" or a["held"]:
                    if have is not None or a is not None and a["want"] != "run":
                        todo.append((task, a))
                elif have is None or (have["run_id"], have["attempt"]) != (a["run_id"], a["attempt"]):
                    todo.append((task, a))
            self.busy.update(t for t, _ in todo)
        for task, a in todo:
            threading.Thread(target=self._act, args=(task, a), name="suanli-agent-task", daemon=True).start()

    def _act(self, task: str, a: dict[str, Any] | None) -> None:
        ok = False
        try:
            if a is None:  # no longer assigned here (its node was taken for lost meanwhile)
                self._stop_task(task, keep=False, report=None)
            elif a["want"] == "end":
                self._stop_task(task, keep=False, report=("ended", a))
            elif a["want"] == "stop":
                self._stop_task(task, keep=True, report=("stopped", a))
            elif a["held"]:
                self._stop_task(task, keep=True, report=None)
            else:
                self._start(task, a)
            ok = True
        except Exception as exc:  # one task's trouble must not stop the agent: tried again in a while
            self.say(f"agent {self.node}: {task}: {type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self.busy.discard(task)
                self.acted[task] = (_key(a), ok, time.monotonic())
            self._reconcile()

    def _start(self, task: str, a: dict[str, Any]) -> None:
        ex = self.executor
        have = self.running.get(task)
        if have is not None and task in ex.procs:
            if a["adopt"] and have["attempt"] == a["attempt"] and same_work(have["launch"], a["launch"]):
                with self._lock:
                    self.running[task] = a
                self.say(f"agent {self.node}: adopted {task} (run {have['run_id']} is run {a['run_id']} now)")
                self._queue(task, a["run_id"], "note", {"kind": "adopted", "task": task, "node": self.node,
                                                         "run": a["run_id"], "was_run": have["run_id"]})
                said = self.readiness.get(task)
                if said is not None:  # (its new run starts not ready at the server: said again)
                    self._queue(task, a["run_id"], "note", {**said, "run": a["run_id"]})
                return
            ex._end([task], keep_state=True)
        ln = launch_of(a["launch"])  # (its node is the fleet's: a device's agent runs each node of the device)
        if ex.state_home.get(task) != ln.node or not ex.state_dir(ln.node, task).exists():
            self._fetch_state(task, a, ln)
        with self._fencing:  # (not fenced between the look and the start)
            with self._lock:
                if self.fenced or self.rows.get(task, {}).get("run_id") != a["run_id"]:
                    return
                self.running[task] = a
            # from one thread that lives as long as the agent: a task's process dies with the thread that
            # started it (its parent-death signal)
            self._spawner.submit(ex._spawn, ln).result()
            p = ex.procs.get(task)
            if p is not None:
                self._tell(f"pid {p.popen.pid}")
        self.say(f"agent {self.node}: started {task} run {a['run_id']} attempt {a['attempt']} at {time.time():.3f}")

    def _fetch_state(self, task: str, a: dict[str, Any], ln) -> None:
        """Its state folder here: fetched from the server when it has one, else empty."""
        ex = self.executor
        dest = ex.state_dir(ln.node, task)
        shutil.rmtree(dest, ignore_errors=True)
        ex._node_dir(ln.node, "state")
        uid = ex.uid(ln)
        began = time.monotonic()
        # (the server answers 404 when it keeps none)
        r = self.http.get(f"{self.base}/state", params={"task": task}, timeout=300)
        if r.status_code == 200:
            tmp = dest.with_name(dest.name + ".new")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(mode=0o700)
            unpack(r.content, tmp)
            if uid is not None:
                give(tmp, uid)
            tmp.rename(dest)
            ex.state_home[task] = ln.node
            self._queue(task, a["run_id"], "note", {
                "kind": "stateFetched", "task": task, "node": self.node, "bytes": folder_size(dest),
                "took_s": round(time.monotonic() - began, 6)})
            return
        ex._dir(dest, 0o700, uid)
        ex.state_home[task] = ln.node

    def _stop_task(self, task: str, keep: bool, report: tuple[str, dict] | None) -> None:
        ex = self.executor
        with self._lock:
            self.running.pop(task, None)
        self.readiness.pop(task, None)
        p = ex.procs.get(task)
        if p is not None:
            ex._end([task], keep_state=True)
            self._tell(f"-pid {p.popen.pid}")
            self.say(f"agent {self.node}: stopped {task} by {time.time():.3f}")
        home = ex.state_home.get(task)  # (the node of this agent's where its state is)
        stateful = bool((report[1] if report else self.rows.get(task) or {}).get("launch", {}).get("stateful"))
        state = ex.state_dir(home, task) if home is not None else None
        if keep and stateful and state is not None and state.exists():
            self._send_state(task, state, report[1]["run_id"] if report else 0, "stateSaved")
        ex._end([task], keep_state=False)  # (its folders here go: the server keeps what it needs)
        if report is not None:
            self._ship_once()
            self._queue(task, report[1]["run_id"], report[0], {})

    def _send_state(self, task: str, folder: Path, run_id: int, kind: str) -> bool:
        began = time.monotonic()
        data = pack(folder)
        try:
            r = self.http.put(f"{self.base}/state", params={"task": task}, content=data, timeout=300)
        except Exception as exc:
            self.say(f"agent {self.node}: {task}: cannot send its state: {exc}")
            return False
        if r.status_code >= 400:
            self.say(f"agent {self.node}: {task}: its state was refused ({r.status_code}): {r.text[:200]}")
            return False
        self._queue(task, run_id, "note", {"kind": kind, "task": task, "node": self.node, "bytes": len(data),
                                           "took_s": round(time.monotonic() - began, 6)})
        return True

    # ------------------------------------------------------------ reports

    def _event(self, ev: Any) -> None:
        """What the executor posted: an exit, or a note of a task's."""
        if isinstance(ev, TaskExited):
            a = self.running.get(ev.task)
            if a is None:
                return
            self._queue(ev.task, a["run_id"], "exited", {"code": ev.code, "reason": ev.reason})
            return
        if not isinstance(ev, Note):
            return
        fields = dict(ev.fields)
        task = fields.get("task")
        if task is None:
            self.say(f"agent {self.node}: {ev.kind}: " + ", ".join(f"{k}={v}" for k, v in fields.items()))
            return
        a = self.running.get(task)
        run_id = a["run_id"] if a is not None else int(fields.get("run", 0) or 0)
        if "run" in fields:
            fields["run"] = run_id
        self._queue(task, run_id, "note", {"kind": ev.kind, **fields})
        if ev.kind in ("ready", "notReady"):
            self.readiness[task] = {"kind": ev.kind, **fields}
        if ev.kind == "checkpointed" and a is not None:  # the server keeps the newest, for a lost node's task
            keep = self.executor.checkpoint_dir(task)
            threading.Thread(target=self._send_state, args=(task, keep, run_id, "checkpointSent"),
                             daemon=True).start()

    def _queue(self, task: str, run_id: int, kind: str, body: dict) -> None:
        with self._lock:
            self.reports.append({"task": task, "run_id": run_id, "kind": kind, "body": _plain(body)})
        self._wake.set()

    def _send(self) -> None:
        while not self.stop.is_set() or self.reports:
            self._wake.wait(1.0)
            self._wake.clear()
            with self._lock:
                batch, self.reports = self.reports[:1000], self.reports[1000:]
            if not batch:
                if self.stop.is_set():
                    return
                continue
            try:
                r = self.http.post(f"{self.base}/reports", json={"reports": batch}, timeout=30)
                ok = r.status_code < 400 or r.status_code in (400, 422)  # (a malformed one is not sent again)
            except Exception:
                ok = False
            if not ok:
                with self._lock:
                    self.reports[:0] = batch
                time.sleep(0.5)

    # ------------------------------------------------------------ logs

    def _ship(self) -> None:
        while not self.stop.wait(SHIP_EVERY_S):
            self._ship_once()

    def _ship_once(self) -> None:
        with self._shipping:  # (from its own thread, and from a task's stop: each byte sent once)
            self._ship_logs()

    def _ship_logs(self) -> None:
        folder = self.work / "logs"
        for path in folder.glob("*.log"):
            task = unquote(path.name[:-4])
            try:
                st = path.stat()
            except OSError:
                continue
            inode, sent = self.shipped.get(task, (st.st_ino, 0))
            if inode != st.st_ino:  # rotated: the new file from its start
                sent = 0
            while sent < st.st_size:
                with open(path, "rb") as f:
                    f.seek(sent)
                    data = f.read(LOG_CHUNK)
                if not data:
                    break
                try:
                    r = self.http.post(f"{self.base}/logs", params={"task": task}, content=data, timeout=30)
                except Exception:
                    break
                if r.status_code == 404:  # not assigned here (any more): its log is another node's now
                    sent = st.st_size
                    break
                if r.status_code >= 400:
                    break
                sent += len(data)
            self.shipped[task] = (st.st_ino, sent)
            if task not in self.running and task not in self.rows and sent >= st.st_size:
                path.unlink(missing_ok=True)
                self.shipped.pop(task, None)


def _key(a: dict[str, Any] | None) -> tuple | None:
    """What an assignment asks of its task, for telling whether that was done."""
    return None if a is None else (a["want"], a["run_id"], a["attempt"], a["held"])


def _plain(body: dict) -> dict:
    """A report's body as JSON takes it."""
    out = {}
    for k, v in body.items():
        out[k] = v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
    return out

