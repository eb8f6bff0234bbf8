"""The routes of agents that execute (``suanli agent --runtime``): a node's
assignments (waited for), and what its agent sends back: reports of its
tasks, their logs, their state (``executors/agents.py``).

Each takes the token that registered the node (or an admin's), and touches
only the tasks assigned to that node: an agent reads, writes and fetches
nothing of another node's work.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, Field

from suanli.executors.agents import state_file
from suanli.executors.logs import DEFAULT_MAX_LOG, RotatingLog
from suanli.executors.tasks import safe
from suanli.server.objects_api import Context, agent_owned
from suanli.server.store import Principal

WAIT_MAX_S = 60.0  # the longest an assignments read waits for a change
LOOK_EVERY_S = 0.2  # how often the store is looked at for the waiting reads (one look for them all)
STATE_MAX_BYTES = 1 << 30  # a task's state folder, packed, as an agent sends it
LOG_CHUNK_MAX = 1 << 20  # what one log write may carry (the body limit's)
OPEN_LOGS = 1000  # tasks' logs kept open for agents' writes


def larger_body(path: str) -> int | None:
    """The body limit of an agents' route that takes more than others (a task's state)."""
    return STATE_MAX_BYTES if path.startswith("/v1/agents/") and path.endswith("/state") else None


class Watcher:
    """One look at the store for every waiting read: every ``LOOK_EVERY_S``,
    the nodes whose assignments were written since the last look, and the
    reads waiting on those nodes woken (a waiting agent costs no query of
    its own while nothing changes for it)."""

    def __init__(self, store) -> None:
        self.store = store
        self.waiting: dict[str, set[asyncio.Event]] = {}
        self.mark: int | None = None
        self.task: asyncio.Task | None = None

    async def wait(self, node: str, seconds: float) -> None:
        """Until ``node``'s assignments may have changed, or ``seconds`` passed."""
        if self.task is None or self.task.done():
            self.mark = await asyncio.to_thread(self.store.assignments_changed)
            self.task = asyncio.get_running_loop().create_task(self._look())
        ev = asyncio.Event()
        self.waiting.setdefault(node, set()).add(ev)
        try:
            await asyncio.wait_for(ev.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        finally:
            mine = self.waiting.get(node)
            if mine is not None:
                mine.discard(ev)
                if not mine:
                    del self.waiting[node]

    async def _look(self) -> None:
        while True:  # (for the API's life: a mark read again later could miss a change made meanwhile)
            await asyncio.sleep(LOOK_EVERY_S)
            try:
                nodes, self.mark = await asyncio.to_thread(self.store.assigned_after, self.mark or 0)
            except Exception:  # the store away for now: the reads wait out their time, or the next look
                continue
            for node in nodes:
                for ev in self.waiting.get(node, ()):
                    ev.set()


class Report(BaseModel):
    task: str = Field(max_length=600)
    run_id: int = Field(ge=0)
    kind: Literal["exited", "stopped", "ended", "note"]
    body: dict = Field(default_factory=dict)


class Reports(BaseModel):
    reports: list[Report] = Field(max_length=1000)


def add_agent_work_routes(api: FastAPI, ctx: Context, work: Path | None, log_max_bytes: int = DEFAULT_MAX_LOG
                          ) -> None:
    """``work``: the server's work directory (its logs, and the states agents
    send); None: the server runs no agents' work."""
    from suanli.server.api import ERRORS, problems

    store, fail = ctx.store, ctx.problem
    logs: dict[str, RotatingLog] = {}  # task -> its open log
    watcher = Watcher(store)

    def node_of(name: str, who: Principal) -> str:
        agent_owned(store, fail, name, who)
        if work is None:
            raise fail(409, "Conflict", "this server runs no agents' work (serve --executor agents)")
        return name

    def assigned(node: str, task: str) -> Any:
        row = store.assignment(node, task)
        if row is None:
            raise fail(404, "Not Found", f"task {task!r} is not assigned to node {node!r}")
        return row

    def mark(rows) -> str:
        return f"{max((r.changed for r in rows), default=0)}.{len(rows)}"

    @api.get("/v1/agents/{name:path}/assignments", responses={**ERRORS, **problems(403, 409)})
    async def assignments(name: str, who: Principal = Depends(ctx.principal),
                          after: str | None = Query(None, max_length=40, description="the mark of the set read "
                                                    "before: wait until the set differs"),
                          wait: float = Query(0.0, ge=0, le=WAIT_MAX_S, description="seconds to wait for a change")):
        """The node's assignments, whole: each task to run (with how it starts),
        to stop keeping its state, or to end; ``mark`` names the set, and a
        read ``after`` it waits (up to ``wait`` seconds) until the set changes."""
        node = await asyncio.to_thread(node_of, name, who)
        deadline = time.monotonic() + wait
        while True:
            rows = await asyncio.to_thread(store.assignments, node)
            left = deadline - time.monotonic()
            if mark(rows) != after or left <= 0:
                break
            await watcher.wait(node, left)
        return {"node": node, "mark": mark(rows), "assignments": [
            {"task": r.task, "run_id": r.run_id, "attempt": r.attempt, "want": r.want, "held": r.held,
             "adopt": r.adopt, "state": r.state, "launch": r.launch} for r in rows]}

    @api.post("/v1/agents/{name:path}/reports", status_code=204, responses={**ERRORS, **problems(400, 403, 409)})
    def reports(name: str, body: Reports, who: Principal = Depends(ctx.principal)):
        """What the node's agent did: a task exited (``code``, ``reason``),
        stopped (its state sent), ended, or a note for the event log."""
        node = node_of(name, who)
        store.report(node, [r.model_dump() for r in body.reports])
        return Response(status_code=204)

    @api.post("/v1/agents/{name:path}/logs", status_code=204, responses={**ERRORS, **problems(403, 404, 409)})
    async def append_log(name: str, request: Request, who: Principal = Depends(ctx.principal),
                         task: str = Query(..., max_length=600)):
        """Output of a task of the node, appended to its log (``suanli logs``)."""
        node = await asyncio.to_thread(node_of, name, who)
        await asyncio.to_thread(assigned, node, task)
        data = await request.body()
        if len(data) > LOG_CHUNK_MAX:
            raise fail(413, "Content Too Large", f"a log write carries at most {LOG_CHUNK_MAX} bytes")

        def write() -> None:
            log = logs.pop(task, None)
            if log is None:
                (work / "logs").mkdir(mode=0o700, parents=True, exist_ok=True)
                if len(logs) >= OPEN_LOGS:  # the one written least lately is closed
                    logs.pop(next(iter(logs))).close()
                log = RotatingLog(work / "logs" / f"{safe(task)}.log", log_max_bytes, private=True)
            logs[task] = log
            log.shipped(data, node)

        await asyncio.to_thread(write)
        return Response(status_code=204)

    @api.put("/v1/agents/{name:path}/state", status_code=204, responses={**ERRORS, **problems(403, 404, 409, 413)})
    async def put_state(name: str, request: Request, who: Principal = Depends(ctx.principal),
                        task: str = Query(..., max_length=600)):
        """A task's state folder (a gzipped tar), as its agent saved it when it
        stopped or checkpointed; the node it starts on next is given it."""
        node = await asyncio.to_thread(node_of, name, who)
        await asyncio.to_thread(assigned, node, task)
        dest = state_file(work, task)
        tmp = dest.with_name(f"{dest.name}.{os.getpid()}.{time.monotonic_ns()}")
        size = 0
        try:
            with open(tmp, "wb") as f:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > STATE_MAX_BYTES:
                        raise fail(413, "Content Too Large", f"a task's state is at most {STATE_MAX_BYTES} bytes")
                    f.write(chunk)
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        return Response(status_code=204)

    @api.get("/v1/agents/{name:path}/state", response_class=FileResponse,
             responses={**ERRORS, **problems(403, 404, 409)})
    def get_state(name: str, who: Principal = Depends(ctx.principal), task: str = Query(..., max_length=600)):
        """The state a task assigned to the node starts from (404: none kept)."""
        node = node_of(name, who)
        assigned(node, task)
        path = state_file(work, task)
        if not path.exists():
            raise fail(404, "Not Found", f"no state is kept for task {task!r}")
        return FileResponse(path, media_type="application/gzip")

