"""The agents executor: each task runs on the node it is placed on, started
by that node's agent (``suanli agent --runtime process|podman``, ``agent.py``).

The control plane (``suanli serve --executor agents``) does not reach the
agents: it writes what each agent's node is to do into the store, and the
agents read it through the API. Both ways go through the store, so a server
that restarts, or another that takes over, finds them there:

- **Assignments** (``assignments``, one row per node and task): ``run``
  (with how it starts: its command or image, slice, env, probes), ``stop``
  (it moves or is requeued: save its state and exit) or ``end`` (it is
  over). An agent reads its node's whole set and makes what runs there
  match it (level-triggered: a lost message is made good by the next read).
  A task that moves is ``held`` on its new node until the node it left says
  it stopped: a task never runs in two places.
- **Reports** (``agent_reports``): an agent's exits, stops and notes, taken
  here in order and posted to the scheduler's loop as a local executor's
  would be (``TaskExited``, ``Note``).
- **State** goes through the server: a stopped task's state folder, and each
  checkpoint of a stateful task, is sent to the server
  (``WORK/agent-states/TASK.tgz``); the node a task starts on next is told
  to fetch it. A task whose node was lost starts again from its last
  checkpoint there. **Logs** are sent by the agents as they are written and
  appended to ``WORK/logs/TASK.log``, where ``suanli logs`` reads them.

A node with no agent (one of the Fleet document's own) runs nothing here:
it is lost at once, so the scheduler places work on agents' nodes only.

When the control plane restarts, its tasks are placed again; one placed on
the node it was running on is **adopted** there (``adopt``): the agent keeps
it running, under its new run.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection

from suanli.executors.base import Call, NodeLost, Note, Run, TaskExited
from suanli.executors.logs import LogFolder, app_of
from suanli.executors.sim import keep_progress
from suanli.executors.tasks import Launch, launch, safe, speed_of
from suanli.model.work import Probe

if TYPE_CHECKING:
    from suanli.executors.base import Attachment
    from suanli.server.store import Store

STATES = "agent-states"  # in the server's work directory: TASK.tgz, a task's newest state from its agents
REPORTS_EVERY_S = 0.1  # how often the store is read for agents' reports
# what an agent's note may say of a task (the event log's kinds that an executor writes; never a status)
AGENT_NOTES = frozenset(("ready", "notReady", "livenessFailed", "checkpointed", "checkpointMissed", "checkpointSent",
                         "stateSaved", "stateFetched", "adopted", "logRotated"))


def state_file(work: Path, task: str) -> Path:
    return work / STATES / f"{safe(task)}.tgz"


def launch_json(ln: Launch) -> dict[str, Any]:
    return dataclasses.asdict(ln)


def launch_of(d: dict[str, Any]) -> Launch:
    """``launch_json`` read back."""
    d = dict(d)
    d["command"] = tuple(d["command"])
    for probe in ("readiness", "liveness"):
        if d.get(probe) is not None:
            p = dict(d[probe])
            p["command"] = tuple(p.get("command") or ())
            d[probe] = Probe(**p)
    return Launch(**d)


def same_work(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two launches of one task that differ in their run alone."""
    def bare(d: dict[str, Any]) -> str:  # (as JSON has it: a tuple and a list are alike)
        return json.dumps({**d, "run_id": 0, "env": {k: v for k, v in d["env"].items() if k != "SUANLI_RUN"}},
                          sort_keys=True, default=str)
    return bare(a) == bare(b)


class AgentsExecutor:
    name = "agents"
    runs_probes = True  # by the agents, who report readiness as notes

    def __init__(self, given: "Attachment", work_dir: Path, store: "Store") -> None:
        self.view, self.loop, self.world = given.view, given.loop, given.world
        self.work = Path(work_dir).resolve()
        for sub in (STATES, "logs"):
            (self.work / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        self.logs = LogFolder(self.work / "logs")
        self.store = store
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}  # (node, task) -> its assignment, as written
        self.at: dict[str, set[str]] = {}  # node -> the tasks it has rows of (``rows`` by node)
        self.node_of: dict[str, str] = {}  # task -> the node it is to run on
        self.leaving: dict[str, str] = {}  # task -> the node it is stopping on (its state still there)
        # what a control plane before this one had assigned: kept where the task is placed again
        self.inherited: dict[str, dict[str, Any]] = {}
        for r in store.assignments():
            row = {c: getattr(r, c) for c in ("node", "task", "run_id", "attempt", "want", "held", "adopt", "launch",
                                              "state")}
            self._put(row)
            if r.want == "run":
                self.inherited[r.task] = row
            elif r.want == "stop":
                self.leaving[r.task] = r.node
        self.seen = store.last_report()  # reports before this control plane were of runs it does not have
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read_reports, name="suanli-agent-reports", daemon=True)
        self._reader.start()
        self._lost_unagented()
        self.post("executor", executor=self.name, work_dir=str(self.work),
                  adopted_from_before=len(self.inherited))

    def post(self, kind: str, **fields: object) -> None:
        self.loop.post(Note(kind, tuple(fields.items())))

    def _agent_of(self, node: int) -> str | None:
        """The agent that runs ``node``'s work: the node's own (it registered
        itself), a device's (its population's site; every node of the device is
        its agent's); None: a node of the Fleet document's, which no agent runs."""
        fleet = self.view.world.fleet
        g = fleet.groups[int(fleet.node_group[node])]
        if g.single:
            return fleet.node_name(node)
        if g.site_count > 1:
            return fleet.site_table.names.name(int(fleet.node_site[node]))
        return None

    def _lost_unagented(self) -> None:
        """The Fleet document's own nodes have no agent to run their work: lost from the start."""
        fleet = self.world.fleet
        listed = np.fromiter((not g.single and g.site_count == 1 for g in fleet.groups), bool, len(fleet.groups))
        for n in np.flatnonzero(listed[fleet.node_group[:fleet.n_nodes]]).tolist():
            self._unagented(fleet.node_name(n))

    def _unagented(self, node: str) -> None:
        self.loop.post(NodeLost(node, "no agent runs it: under the agents executor, work runs on the nodes agents "
                                "register"))

    # ------------------------------------------------------------ the executor interface

    def start(self, run: Run, now: float) -> None:
        run.started_at = now
        fleet = self.view.world.fleet
        rows, unagented = [], set()
        for task in run.tasks:
            node = self.view.node_of(task)
            agent = self._agent_of(node)
            if agent is not None:
                rows.append(self._run_row(run, task, agent))
            else:
                unagented.add(fleet.node_name(node))
        self._write(rows)
        for node in unagented:  # (a Fleet document's node, applied while the server runs)
            self._unagented(node)

    def restart(self, run: Run, task: str, now: float) -> None:
        node = self.node_of.get(task)
        row = self.rows.get((node, task)) if node is not None else None
        if row is not None and row["want"] == "run":
            self._write([{**row, "attempt": row["attempt"] + 1, "adopt": False}])

    def move(self, run: Run, task: str, now: float) -> None:
        agent = self._agent_of(self.view.node_of(task))
        if agent is None:
            self._write(self._stops([task], "stop"))
            self._unagented(self.view.world.fleet.node_name(self.view.node_of(task)))
            return
        self._write(self._stops([task], "stop") + [self._run_row(run, task, agent)])

    def stop(self, run: Run, now: float) -> None:
        keep_progress(run, now)
        self._write(self._stops(run.tasks, "stop"))

    def release(self, run: Run, now: float) -> None:
        self._write(self._stops(run.tasks, "end"))
        for task in run.tasks:
            state_file(self.work, task).unlink(missing_ok=True)

    def node_down(self, node: int, now: float) -> None:
        """Its agent is gone (or fenced itself): what was assigned there is dropped,
        and the tasks that were leaving it may start where they go next."""
        name = self._agent_of(node)
        gone = [(name, task) for task in self.at.get(name, ())]
        freed = []
        for _, task in gone:
            self._pop(name, task)
            if self.node_of.get(task) == name:
                del self.node_of[task]
            if (self.inherited.get(task) or {}).get("node") == name:
                del self.inherited[task]
            if self.leaving.get(task) == name:
                del self.leaving[task]
                freed += self._unhold(task)
        self.store.assign(freed, gone)

    def forget(self, app: str) -> None:
        self.logs.remove(self.logs.take(app))

    def sweep(self, tasks: Collection[str]) -> None:
        keep = set(tasks)
        self.logs.sweep(tasks)
        gone = [key for key in self.rows if key[1] not in keep]
        for key in gone:
            self._pop(*key)
            self.inherited.pop(key[1], None)
        self.store.assign([], gone)
        for f in (self.work / STATES).glob("*.tgz"):
            if not any(f.name == f"{safe(t)}.tgz" for t in keep):
                f.unlink(missing_ok=True)

    def settled(self) -> None:
        """A restarted control plane placed what it could: a task it had assigned
        and did not place again stops (keeping its state)."""
        rows = [self._stop_inherited(task, row) for task, row in self.inherited.items()]
        self.inherited.clear()
        self._write([r for r in rows if r is not None])

    def _stop_inherited(self, task: str, before: dict[str, Any]) -> dict[str, Any] | None:
        """The row that stops ``task`` where a control plane before this one ran it
        (its state kept); it is leaving there until its agent says it stopped."""
        row = self.rows.get((before["node"], task))
        if row is None or row["want"] != "run":
            return None
        self.leaving[task] = before["node"]
        return {**row, "want": "stop", "adopt": False}

    def close(self) -> None:
        """The agents' tasks outlive the control plane: they run on, and the next
        one adopts them."""
        self._closed.set()

    # ------------------------------------------------------------ assignments

    def _run_row(self, run: Run, task: str, node: str) -> dict[str, Any]:
        """``task``'s row for the agent ``node`` (its launch names the fleet's node)."""
        ln = launch(self.view, run, task, speed_of(self.loop))
        before = self.inherited.pop(task, None)
        adopt = before is not None and before["node"] == node and same_work(before["launch"], launch_json(ln))
        if before is not None and before["node"] != node:  # it runs there still: it stops there first
            self._write([r for r in (self._stop_inherited(task, before),) if r is not None])
        held = self.leaving.get(task) not in (None, node)
        self.node_of[task] = node
        if self.leaving.get(task) == node:  # stopping there, and placed there again: it runs on
            del self.leaving[task]
        return {"node": node, "task": task, "run_id": run.run_id, "attempt": 0, "want": "run", "held": held,
                "adopt": adopt, "launch": launch_json(ln), "state": self._state(task)}

    def _state(self, task: str) -> str:
        return "server" if state_file(self.work, task).exists() else "none"

    def _stops(self, tasks, want: str) -> list[dict[str, Any]]:
        rows = []
        for task in tasks:
            node = self.node_of.pop(task, None)
            row = self.rows.get((node, task)) if node is not None else None
            if row is None or row["want"] != "run":
                continue
            if row["held"]:  # it never started there: nothing to stop
                self._pop(node, task)
                self.store.assign([], [(node, task)])
                continue
            rows.append({**row, "want": want, "adopt": False})
            if want == "stop":
                self.leaving[task] = node
        return rows

    def _unhold(self, task: str) -> list[dict[str, Any]]:
        node = self.node_of.get(task)
        row = self.rows.get((node, task)) if node is not None else None
        if row is None or not row["held"]:
            return []
        return [{**row, "held": False, "state": self._state(task)}]

    def _write(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._put(row)
        self.store.assign(rows)

    def _put(self, row: dict[str, Any]) -> None:
        self.rows[(row["node"], row["task"])] = row
        self.at.setdefault(row["node"], set()).add(row["task"])

    def _pop(self, node: str, task: str) -> None:
        self.rows.pop((node, task), None)
        tasks = self.at.get(node)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self.at[node]

    # ------------------------------------------------------------ reports

    def _read_reports(self) -> None:
        while not self._closed.wait(REPORTS_EVERY_S):
            try:
                got = self.store.reports(self.seen)
            except Exception:  # the store away for now: next time
                continue
            if not got:
                continue
            self.loop.post(Call(lambda got=got: self.take(got)))
            self.seen = got[-1].id
            try:
                self.store.drop_reports(self.seen)
            except Exception:
                pass

    def take(self, reports: list) -> None:
        """Agents' reports, on the scheduler's thread."""
        writes: list[dict[str, Any]] = []
        gone: list[tuple[str, str]] = []
        for r in reports:
            key = (r.node, r.task)
            row = self.rows.get(key)
            if r.kind == "exited":
                if row is not None and row["want"] == "run" and row["run_id"] == r.run_id:
                    self.loop.post(TaskExited(r.run_id, r.task, int(r.body.get("code", 1)), r.body.get("reason")))
            elif r.kind in ("stopped", "ended"):
                if row is not None and row["want"] != "run" and row["run_id"] == r.run_id:
                    self._pop(*key)
                    gone.append(key)
                    if self.leaving.get(r.task) == r.node:
                        del self.leaving[r.task]
                        writes += self._unhold(r.task)
            elif r.kind == "note":
                body = dict(r.body)
                kind = str(body.pop("kind", "note"))
                if kind not in AGENT_NOTES or row is None or row["run_id"] != r.run_id:
                    continue  # (an agent says what happened to its node's tasks, nothing else)
                # its own task, node and run, whatever the body says
                body.update(task=r.task, run=r.run_id, node=r.node)
                self.loop.post(Note(kind, tuple(body.items())))
        if gone:
            self.store.assign([], gone)
        self._write(writes)
