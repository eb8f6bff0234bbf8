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

Several servers may share one database (PostgreSQL): each runs a child, and
one of them is active under a lease in the store (``LEASE``); the others
are standing by, trying to take it, and take over when it runs out (its
holder died or stopped renewing). An active child writes only while it holds
the lease (the store checks it in the transaction of every write), and ends
at once when it lost it. Every change the API takes is also a command in the
store, so the active child takes those accepted by any server; the pipe only
makes those of its own server quicker. A standby server sends the questions
its scheduler cannot answer to the active one (the lease names its address).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from suanli.model.work import Application

log = logging.getLogger("suanli.server")

ASK_TIMEOUT_S = 30.0
START_TIMEOUT_S = 120.0
LEASE = "controller"  # the store's lease that the active controller holds
LEASE_S = 2.0  # held this long past each renewal; a standby takes over within this and LEASE_TRY_S
LEASE_TRY_S = 0.25  # how often a standby tries to take the lease
MAX_RESTARTS = 5  # deaths of the controller's process within the window, then the server gives up
RESTART_WINDOW_S = 300.0


class ControllerUnavailable(RuntimeError):
    """The controller cannot answer now (it is being started again)."""


class RemoteController:
    """The API's side of a controller running in a child process, which it
    supervises: a child that dies (the kernel's out-of-memory killer, say) is
    started again, rebuilding from the store as at start, with a backoff;
    after ``MAX_RESTARTS`` deaths within ``RESTART_WINDOW_S`` the server exits
    (status 3) so that whatever supervises it decides.

    While the child is away, commands are kept and sent once the new child is
    ready. They carry their application's id in the store, so one that the new
    child's rebuild already saw is not applied twice. Questions answer
    ``ControllerUnavailable`` (the API's 503)."""

    def __init__(self, db: str, *, speed: float = 1.0, policy: str | None = None,
                 executor: dict[str, Any] | None = None, on_give_up: Callable[[str], None] | None = None,
                 holder: str | None = None, address: str | None = None) -> None:
        """``holder``: who this server is to the others on its database (its
        name in the lease); the same name again (a restart) takes its own lease at once."""
        import socket
        import uuid

        self.holder = holder or f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"
        self.args = (db, speed, policy, executor or {}, self.holder, address)
        self._ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or pools copied
        self._proc = None
        self._conn = None
        self._send_lock = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._held: list[tuple] = []  # commands sent while no child is ready
        self._ready = False
        self._stopping = False
        self.restarts = 0
        self._deaths: list[float] = []  # monotonic times the child died
        self.state = "stopped"  # starting | running | standby | restarting | stopped
        self.took_over_at: float | None = None  # when this server's controller became the active one
        self.last_exit: str | None = None
        self._on_give_up = on_give_up or _exit_server
        self._supervisor: threading.Thread | None = None
        self._launched: tuple | None = None  # the child ``launch`` started, for ``start`` to wait for

    def launch(self) -> None:
        """Start the child now, without waiting for it: it takes the lease and
        rebuilds while the server readies its API (``start`` then waits for it).
        While this process has one thread (a server starting) and has not loaded
        Ray (whose client does not survive a fork), the child is a fork of it,
        with every module it imported already there; later ones (started again by
        the supervisor, among the API's threads) are fresh interpreters."""
        self._launched = self._new_child(fork=threading.active_count() == 1 and "ray" not in sys.modules)

    def start(self) -> None:
        """Start the child (unless ``launch`` did) and wait until it has rebuilt the
        scheduler from the store; from then on it is supervised."""
        self.state = "starting"
        launched, self._launched = self._launched, None
        self._spawn(launched)
        self._supervisor = threading.Thread(target=self._supervise, name="suanli-controller-supervisor", daemon=True)
        self._supervisor.start()

    def _new_child(self, fork: bool = False) -> tuple:
        ctx = multiprocessing.get_context("fork") if fork else self._ctx
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(theirs, *self.args), name="suanli-controller", daemon=True)
        proc.start()
        theirs.close()
        return proc, ours

    def _spawn(self, launched: tuple | None = None) -> None:
        proc, ours = launched or self._new_child()
        try:
            if not ours.poll(START_TIMEOUT_S):
                proc.kill()
                raise RuntimeError("the controller did not start in time")
            kind, detail = ours.recv()
        except EOFError:
            proc.join(5)
            raise RuntimeError(f"the controller's process ended while starting "
                               f"(exit status {proc.exitcode})") from None
        if kind == "standby":  # another server's controller is active: this one waits for its lease
            with self._send_lock:
                self._proc, self._conn = proc, ours
                self._held = []  # the store has them, for the active one
                self.state = "standby"
            threading.Thread(target=self._await_lease, args=(proc, ours), name="suanli-controller-standby",
                             daemon=True).start()
            return
        if kind != "ready":
            proc.join(5)
            raise RuntimeError(f"the controller failed to start: {detail}")
        self._activate(proc, ours)

    def _activate(self, proc, ours) -> None:
        with self._send_lock:
            self._proc, self._conn = proc, ours
            held, self._held = self._held, []
            for message in held:  # in the order they came
                ours.send(message)
            self._ready = True
            self.state = "running"
            self.took_over_at = time.time()
        threading.Thread(target=self._read, args=(ours,), name="suanli-controller-answers", daemon=True).start()

    def _await_lease(self, proc, ours) -> None:
        """A standby child says when it took the lease and is ready."""
        try:
            kind, detail = ours.recv()
        except (EOFError, OSError, TypeError):  # (TypeError: the pipe closed under the read by a stop)
            return  # it died: the supervisor starts another
        if kind == "ready":
            log.warning("this server's controller took over (%s)", detail or "the lease was free")
            self._activate(proc, ours)

    def _supervise(self) -> None:
        """Wait for the child to end; start another unless the server is stopping."""
        while not self._stopping:
            proc = self._proc
            proc.join()
            if self._stopping:
                return
            with self._send_lock:
                self._ready = False
                self.state = "restarting"
            self.last_exit = f"exit status {proc.exitcode}" if proc.exitcode is None or proc.exitcode >= 0 \
                else f"killed by signal {-proc.exitcode}"
            log.error("the controller's process ended (%s); starting it again", self.last_exit)
            self._fail_waiting("the controller stopped")
            delay = 0.25
            while not self._stopping:
                now = time.monotonic()
                self._deaths = [d for d in self._deaths if now - d < RESTART_WINDOW_S] + [now]
                if len(self._deaths) > MAX_RESTARTS:
                    self.state = "stopped"
                    self._on_give_up(f"the controller's process ended {len(self._deaths)} times within "
                                     f"{RESTART_WINDOW_S:g} s (last: {self.last_exit}); giving up")
                    return
                time.sleep(delay)
                try:
                    self._spawn()
                    self.restarts += 1
                    break
                except Exception as exc:  # the store away, say: try again, later
                    self.last_exit = str(exc)
                    log.error("the controller did not start again: %s", exc)
                    delay = min(delay * 2, 10.0)

    def stop(self) -> None:
        self._stopping = True
        if self._conn is not None:
            with self._send_lock:
                try:
                    self._conn.send(("stop",))  # a reader blocked on the pipe keeps it open: say it
                except (OSError, ValueError):
                    pass
            self._conn.close()  # the child also ends when its pipe closes
        if self._proc is not None:
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
        self.state = "stopped"

    @property
    def alive(self) -> bool:
        """Running, standing by, or being started again (not given up)."""
        return self.state in ("running", "restarting", "standby")

    @property
    def ready(self) -> bool:
        return self._ready and self._proc is not None and self._proc.is_alive()

    # ------------------------------------------------------------ commands and questions

    def submit(self, app: Application, app_id: int | None = None) -> None:
        self._send(("submit", app, app_id))

    def update(self, app: Application, app_id: int, revision: int, max_unavailable: int | str,
               max_surge: int | str = 0) -> None:
        self._send(("update", app, app_id, revision, max_unavailable, max_surge))

    def delete(self, tenant: str, name: str, app_id: int | None = None) -> None:
        self._send(("delete", tenant, name, app_id))

    def node(self, node: str, action: str) -> None:
        self._send(("node", node, action))

    def poke(self) -> None:
        """The store's configuration or agents changed: the controller looks now."""
        self._send(("poke",))

    def ask(self, query: str, *args: Any) -> Any:
        return self._question(ASK_TIMEOUT_S, "ask", query, *args)

    def stats(self, timeout: float = ASK_TIMEOUT_S) -> dict[str, Any]:
        return self._question(timeout, "stats")

    def _question(self, timeout: float, *message: Any) -> Any:
        if not self.ready:
            raise ControllerUnavailable("this server's scheduler is standing by (another server's is active)"
                                        if self.state == "standby" else f"the scheduler is {self.state}")
        answer: Future = Future()
        key = next(self._ids)
        self._waiting[key] = answer
        try:
            with self._send_lock:
                try:
                    self._conn.send(("q", key, *message))
                except (OSError, ValueError):
                    raise ControllerUnavailable("the scheduler stopped") from None
            return answer.result(timeout)
        finally:
            self._waiting.pop(key, None)

    def _send(self, message: tuple) -> None:
        """A command: to the child, or kept for the next one. Its effect is in the
        store already, so a command lost with a dying child is seen by the next."""
        with self._send_lock:
            if self.state == "standby":
                return  # the active controller (another server's) takes it from the store
            if not self._ready:
                self._held.append(message)
                return
            try:
                self._conn.send(message)
            except (OSError, ValueError):  # dying: the next child reads the store, and gets this too
                self._held.append(message)

    def _fail_waiting(self, why: str) -> None:
        for answer in list(self._waiting.values()):
            if not answer.done():
                answer.set_exception(ControllerUnavailable(why))

    def _read(self, conn) -> None:
        while True:
            try:
                key, ok, value = conn.recv()
            except (EOFError, OSError):
                self._fail_waiting("the controller stopped")
                return
            answer = self._waiting.get(key)
            if answer is not None and not answer.done():
                (answer.set_result if ok else answer.set_exception)(value)


def _exit_server(why: str) -> None:
    """Give up: say why and end the server's process, for its supervisor to see."""
    log.critical(why)
    sys.stderr.write(f"suanli serve: {why}\n")
    sys.stderr.flush()
    os._exit(3)


PARENT_CHECK_S = 0.2  # how often the controller's process looks whether its server is still there
PROCESS_NAME = "suanli-control"  # the controller's process as ps and /proc/PID/comm name it (15 bytes at most)


def follow_parent() -> None:
    """End this process (and with it every task it started) as soon as its parent,
    the server, is gone, whatever this process is doing: rebuilding, standing by,
    in a long turn: the kernel sends it SIGKILL when the thread that started it
    ends (a parent-death signal: the server's main thread, or its supervisor's,
    which live as long as it), and a thread of its own looks every
    ``PARENT_CHECK_S`` besides."""
    parent = os.getppid()
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None)
        libc.prctl(15, PROCESS_NAME.encode(), 0, 0, 0)  # PR_SET_NAME: found by its name
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os._exit(5)

    if os.getppid() != parent:
        os._exit(5)
    threading.Thread(target=watch, name="suanli-parent", daemon=True).start()


def _child(conn, db: str, speed: float, policy: str | None, executor: dict[str, Any], holder: str,
           address: str | None) -> None:
    """The controller's process: take the lease (standing by while another
    server's controller holds it), build the world and rebuild from the
    store, then take commands from the pipe until it closes. ``executor``:
    the keywords of ``executors.make`` (none: the simulated executor)."""
    import gc
    import socket

    from suanli.executors import make
    from suanli.server.controller import Controller, LeaseKeeper, load_config
    from suanli.server.store import Store

    follow_parent()
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    try:
        store = Store(db, upgrade=False)
        epoch = store.take_lease(LEASE, holder, LEASE_S, address, **me)
        ready = None  # the world, built while standing by: a takeover does not wait for it
        if epoch is None:
            conn.send(("standby", None))
            ready = load_config(store)
            while epoch is None:
                if conn.poll(LEASE_TRY_S):
                    message = conn.recv()
                    if message[0] == "stop":
                        os._exit(0)
                    continue  # commands are the active controller's (from the store); no questions come
                epoch = store.take_lease(LEASE, holder, LEASE_S, address, **me)
        began = time.monotonic()
        keeper = LeaseKeeper(store, LEASE, holder, epoch, LEASE_S).start()  # renewed from now on, the rebuild too
        store.fence = (LEASE, holder, epoch)
        factory = make(**executor) if executor else None
        if ready is None or not ready.current(store):
            ready = load_config(store)
        controller = Controller(ready, store, speed=speed, policy=policy, executor=factory,
                                lease=(LEASE, holder, epoch, LEASE_S))
        controller.start()
    except EOFError:
        os._exit(0)
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    gc.collect()
    gc.freeze()  # what start-up built lives as long as the process: not walked by every collection
    conn.send(("ready", f"epoch {epoch}, the scheduler rebuilt in {time.monotonic() - began:.2f} s"))
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
        if kind == "stop":
            break
        if kind == "submit":
            controller.submit(message[1], message[2])
        elif kind == "update":
            controller.update(*message[1:])
        elif kind == "delete":
            controller.delete(*message[1:])
        elif kind == "node":
            controller.node(*message[1:])
        elif kind == "poke":
            controller.poke()
        elif message[2] == "stats":
            answer(message[1], controller.stats)
        else:  # ("q", key, "ask", query, *args): answered by the controller's thread, between instants
            key, query, args = message[1], message[3], message[4:]
            controller.inbox.put(lambda now, key=key, query=query, args=args:
                                 answer(key, lambda: controller.ask_here(query, *args)))
    keeper.stop()  # (not renewed after it is given up)
    controller.stop()
    controller.release()
    os._exit(0)  # the pipe is closed: the server has gone, nothing is left to do
