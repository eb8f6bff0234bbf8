"""The controller in a process of its own, and its stand-in in the API's process.

The interpreter runs one thread at a time. In one process, the scheduler's
turns and the requests take turns on that lock, and a request waits behind
a turn: at 200 submissions per second that wait was the tail of the
latency. So ``suanli serve`` runs the controller (the scheduler, its clock,
its writes to the store) in a child process, and the API talks to it
through ``RemoteController``, which has the controller's surface: commands
(submit, delete, node) go down a pipe in order; questions (``ask``,
``stats``) go down the same pipe and their answers come back up it.

Durability does not depend on the pipe: a submission is in the store before
it is sent, and the child rebuilds from the store when it starts. The child
ends when the pipe closes, so it does not outlive the server (not even a
``kill -9`` of it).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import threading
from concurrent.futures import Future
from typing import Any, Sequence

from suanli.model.work import Application

log = logging.getLogger("suanli.server")

ASK_TIMEOUT_S = 30.0
START_TIMEOUT_S = 120.0


class RemoteController:
    """The API's side of a controller running in a child process."""

    def __init__(self, files: Sequence[str], db: str, *, speed: float = 1.0, policy: str | None = None,
                 executor: dict[str, Any] | None = None) -> None:
        self.args = ([str(f) for f in files], db, speed, policy, executor or {})
        self._ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or pools copied
        self._proc = None
        self._conn = None
        self._send_lock = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Start the child and wait until it has rebuilt the scheduler from the store."""
        ours, theirs = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_child, args=(theirs, *self.args), name="suanli-controller",
                                       daemon=True)
        self._proc.start()
        theirs.close()
        self._conn = ours
        try:
            if not ours.poll(START_TIMEOUT_S):
                raise RuntimeError("the controller did not start in time")
            kind, detail = ours.recv()
        except EOFError:
            self._proc.join(5)
            raise RuntimeError(f"the controller's process ended while starting "
                               f"(exit status {self._proc.exitcode})") from None
        if kind != "ready":
            raise RuntimeError(f"the controller failed to start: {detail}")
        self._reader = threading.Thread(target=self._read, name="suanli-controller-answers", daemon=True)
        self._reader.start()

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the child ends when its pipe closes
        if self._proc is not None:
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # ------------------------------------------------------------ commands and questions

    def submit(self, app: Application) -> None:
        self._send(("submit", app))

    def delete(self, tenant: str, name: str) -> None:
        self._send(("delete", tenant, name))

    def node(self, node: str, action: str) -> None:
        self._send(("node", node, action))

    def ask(self, query: str, *args: Any) -> Any:
        return self._question("ask", query, *args)

    def stats(self) -> dict[str, int]:
        return self._question("stats")

    def _question(self, *message: Any) -> Any:
        answer: Future = Future()
        key = next(self._ids)
        self._waiting[key] = answer
        try:
            self._send(("q", key, *message))
            return answer.result(ASK_TIMEOUT_S)
        finally:
            self._waiting.pop(key, None)

    def _send(self, message: tuple) -> None:
        with self._send_lock:
            try:
                self._conn.send(message)
            except (OSError, ValueError) as exc:  # the child is gone: the store still holds what was accepted
                raise RuntimeError("the controller is not running") from exc

    def _read(self) -> None:
        while True:
            try:
                key, ok, value = self._conn.recv()
            except (EOFError, OSError):
                for answer in list(self._waiting.values()):
                    answer.set_exception(RuntimeError("the controller stopped"))
                return
            answer = self._waiting.get(key)
            if answer is not None:
                (answer.set_result if ok else answer.set_exception)(value)


def _child(conn, files: list[str], db: str, speed: float, policy: str | None, executor: dict[str, Any]) -> None:
    """The controller's process: build the world, rebuild from the store, then
    take commands from the pipe until it closes. ``executor``: the keywords
    of ``executors.make`` (none: the simulated executor)."""
    import gc

    from suanli.executors import make
    from suanli.server.controller import Controller
    from suanli.server.store import Store
    from suanli.spec.build import build_world
    from suanli.spec.loader import load_documents

    try:
        world = build_world(load_documents(files))
        factory = make(**executor) if executor else None
        controller = Controller(world, Store(db, upgrade=False), speed=speed, policy=policy, executor=factory)
        controller.start()
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    gc.collect()
    gc.freeze()  # what start-up built lives as long as the process: not walked by every collection
    conn.send(("ready", None))
    send_lock = threading.Lock()

    def answer(key: int, fn) -> None:
        try:
            reply = (key, True, fn())
        except Exception as exc:
            reply = (key, False, RuntimeError(f"{type(exc).__name__}: {exc}"))
        with send_lock:
            conn.send(reply)

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        kind = message[0]
        if kind == "submit":
            controller.submit(message[1])
        elif kind == "delete":
            controller.delete(*message[1:])
        elif kind == "node":
            controller.node(*message[1:])
        elif message[2] == "stats":
            answer(message[1], controller.stats)
        else:  # ("q", key, "ask", query, *args): answered by the controller's thread, between instants
            key, query, args = message[1], message[3], message[4:]
            controller.inbox.put(lambda now, key=key, query=query, args=args:
                                 answer(key, lambda: controller.ask_here(query, *args)))
    controller.stop()
    os._exit(0)  # the pipe is closed: the server has gone, nothing is left to do
