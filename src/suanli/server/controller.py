"""The one thread that owns the scheduler of a live control plane.

The scheduler is the simulator's (``Simulation``), on a wall clock. Nothing
else touches it: request handlers put commands on the controller's queue
(submit, delete, cordon, a question to answer), and the controller applies
them between instants. After each instant it writes what changed (task
status and placement, the instant's events) to the store in one
transaction. ``suanli serve`` runs it in a process of its own
(``remote.py``).

Applications of different tenants may share a name, so inside the scheduler
an application is ``TENANT:NAME`` (``:`` is not allowed in names); outside,
task names are ``APP/COMPONENT/INDEX`` with the tenant beside them.

On start the controller rebuilds the scheduler's world from the store:
cordoned and drained nodes, then every application, with the tasks that had
ended recorded as ended. A task the store holds as running is requeued (an event
says why) and placed again: no executor's work outlives the control plane
(the simulated executor's runs are in its memory; the local and ray
executors' processes are killed when the process that started them ends),
but the agents': a task placed again on the agent's node it runs on is
adopted there, running on (``executors/agents.py``).
"""

from __future__ import annotations

import json
import logging
import os
import queue
from collections import deque
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from suanli.engine.clock import WallClock
from suanli.executors.base import Executor
from suanli.model.quantities import APP_TASKS
from suanli.model.work import Application, World
from suanli.output import cohorts_json, resources_json
from suanli.server.store import ENDED_STATUSES, AgentRow, AppRow, LeaseLost, Store, TaskRow
from suanli.sim.simulation import Simulation
from suanli.spec import schema
from suanli.spec.build import build_application
from suanli.spec.loader import problem_at, validate_document
from suanli.spec.problems import Problem
from suanli.phrases import reasons_json, why_json
from suanli.server.metrics import Buckets
from suanli.spec.refs import check_application

log = logging.getLogger("suanli.server")

SEP = ":"
PRIVATE = "_admin"  # an event body's part that only admins are shown
ENDED = ENDED_STATUSES  # a task in one of these has ended (the store prunes by them too)
NO_REASONS = {"reasons": None, "why": None, "reason_code": None, "reason": None}


def why_fields(reasons: dict[str, int], why: list[dict[str, Any]]) -> dict[str, Any]:
    """A task's stored reasons: the map, the list and, apart, the first of the list."""
    first = why[0] if why else {}
    return {"reasons": reasons, "why": why, "reason_code": first.get("code"), "reason": (first.get("reason") or "")[:400] or None}
IDLE_WAIT_S = 0.5  # the longest the controller sleeps with nothing due
MAX_PASS = 1000  # units a scheduling pass tries at most: the rest at the next turn, at once
WRITE_ROWS = 5000  # task changes and events one transaction of a turn writes at most
# Turns come at most this often: commands that arrive meanwhile are taken together,
# in one instant and one write, instead of a turn (and a commit) each.
TURN_GAP_S = 0.02


def internal(tenant: str, app: str) -> str:
    return f"{tenant}{SEP}{app}"


def split(name: str) -> tuple[str, str]:
    """``TENANT:APP/...`` -> (tenant, ``APP/...``)."""
    tenant, _, rest = name.partition(SEP)
    return tenant, rest


def shown(vc: str) -> str:
    """A virtual cluster's name as its tenant knows it: ``TENANT:NAME`` -> ``NAME``
    (a tenant's default VC, ``TENANT/default``, is unique as it is)."""
    return vc.partition(SEP)[2] or vc


NODE_EVENTS = {"cordon": "nodeCordon", "drain": "nodeDrain", "uncordon": "nodeUp"}


def node_event(node: str, action: str):
    """The scenario event a node action is: cordon, drain or uncordon."""
    kind = NODE_EVENTS[action]
    return schema.NodeCordonEvent(at=0, kind=kind, node=node) if kind == "nodeCordon" else \
        schema.NodeDrainEvent(at=0, kind=kind, node=node) if kind == "nodeDrain" else \
        schema.NodeUpEvent(at=0, kind=kind, node=node)


def check_document(display: str, document: dict, world: World) -> tuple[Any, list[Problem]]:
    """An Application document checked as a file's is (schema, quantities) and
    then against the world the server runs (tenant, virtual cluster, sites,
    priorities): what was read, and its problems (none: it may be scheduled)."""
    found = validate_document(display, document)
    problems = [p for p in found if isinstance(p, Problem)]
    if not problems:  # warnings (a demand no node meets) do not refuse it: the fleet may change
        problems = [p for p in check_application(found[0], world) if not p.warning]
    if not problems and (n := sum(c.size for c in found[0].doc.spec.components)) > SERVED_APP_TASKS:
        problems = [problem_at(found[0].src, ("spec", "components"), f"the components have {n} tasks together; "
                               f"an application submitted to a server has at most {SERVED_APP_TASKS} (a file may "
                               f"have {APP_TASKS}): submit it as several applications")]
    if not problems and found[0].doc.spec.each is not None:  # a million applications is not one request
        problems = [problem_at(found[0].src, ("spec", "each"), "each is read from files (suanli schedule, "
                               "simulate); through the API, apply one application per site")]
    return (found[0] if found and not isinstance(found[0], Problem) else None), problems


def update_policy(document: dict) -> schema.UpdateSpec:
    """An application document's ``spec.update`` (the schema's defaults where it has none)."""
    return schema.UpdateSpec.model_validate((document.get("spec") or {}).get("update") or {})


def build_app(tenant: str, name: str, document: dict | schema.ApplicationDoc,
              vcs: Mapping[str, Any]) -> Application:
    """The scheduler's application for an accepted document (as stored, or validated
    already). Its ``virtualCluster`` is its tenant's: ``TENANT:NAME`` among ``vcs``
    (the world's), as the server keeps a tenant's virtual clusters."""
    if not isinstance(document, schema.ApplicationDoc):
        document = schema.ApplicationDoc.model_validate(document)
    spec, vc = document.spec, document.spec.virtual_cluster
    if vc is not None and internal(tenant, vc) in vcs:
        spec = spec.model_copy(update={"virtual_cluster": internal(tenant, vc)})
    return build_application(internal(tenant, name), tenant, spec)


SERVED_APP_TASKS = 100_000  # tasks of one application submitted through the API: the store writes them in one go
WATCH_S = 0.25  # how often the store's commands, configuration and agents are looked at
# A node whose agent was lost (or left) and registers again takes no new work for its
# lease times 2^(k-1), k its losses within the window, at most HOLD_MAX_S: a node that
# flaps does not drag work back and forth (what ran there moved off when it was lost).
HOLD_WINDOW_S = HOLD_MAX_S = 600.0
COMMAND_HOLE_S = 10.0  # a command id missing this long belonged to a transaction that rolled back


class Loaded(NamedTuple):
    """What the store says the server runs: the world, its documents, their version, the agents."""

    world: World
    docs: Any
    version: int
    agents: dict[str, AgentRow]

    def current(self, store: Store) -> bool:
        """Whether the store still says what this was built from (no configuration
        version or agent's change since)."""
        seen = max((a.changed for a in self.agents.values()), default=0)
        return store.config_version() == self.version and not store.agents(seen)


def agent_list(agents: dict[str, AgentRow], fleet) -> list[tuple[str, str, dict, bool]]:
    """The agents with a node of their own (not a population's device, not departed)."""
    return [(a.name, a.site, a.spec, a.state == "ready") for a in agents.values()
            if a.state != "left" and not _is_device(fleet, a.site)]


def _is_device(fleet, site: str) -> bool:
    at = fleet.site_table.names.get(site)
    return at >= 0 and fleet.site_table.population_of[at] >= 0


def set_aside_broken(store: Store, build: bool = False) -> list[tuple[str, str, str]]:
    """Stored documents that cannot be run (no longer valid under this version's
    checks, or, with ``build``, a world that cannot be built from them) are set
    aside with the reason, so that no stored document keeps the server from
    starting: (kind, name, why) of each. The others are run; one whose
    documents depended on a document set aside is set aside in turn."""
    from suanli.server.config import as_rows, display, documents, world_of

    rows = sorted(store.objects(), key=lambda r: r.updated_at)
    aside: list[tuple[str, str, str]] = []
    while rows:
        docs, problems = documents(as_rows(rows))
        culprits: dict[tuple[str, str], str] = {}
        for p in problems:
            for r in rows:
                if display(r.kind, r.name) == p.file:
                    culprits.setdefault((r.kind, r.name), f"{p.path}: {p.message}".lstrip(": "))
        if problems and not culprits:  # a problem of the whole: the newest change goes first
            p = problems[0]
            culprits[(rows[-1].kind, rows[-1].name)] = f"{p.file}: {p.path}: {p.message}"
        if not problems and build:
            try:
                world_of(docs)
            except Exception as exc:  # noqa: BLE001 - whatever it is, the newest change goes first
                culprits[(rows[-1].kind, rows[-1].name)] = f"the fleet cannot be built: {type(exc).__name__}: {exc}"
        if not culprits:
            break
        aside += [(k, n, why) for (k, n), why in culprits.items()]
        rows = [r for r in rows if (r.kind, r.name) not in culprits]
    for kind, name, why in aside:
        log.error("stored %s %s set aside, not run: %s", kind, name, why)
    store.set_aside(aside)
    return aside


def load_config(store: Store) -> Loaded:
    """The world of the stored documents and agents (documents that cannot be run
    are set aside first, ``set_aside_broken``)."""
    from suanli.server.config import as_rows, documents, with_agents, world_of

    for _ in range(2):
        version = store.config_version()
        docs, problems = documents(as_rows(store.objects()))
        if problems:
            set_aside_broken(store)
            continue
        try:
            world = world_of(docs)  # (which agents are devices is read from its sites; the world is built once)
        except Exception:  # noqa: BLE001 - a document the checks let through and the model cannot hold
            set_aside_broken(store, build=True)
            continue
        agents = {a.name: a for a in store.agents()}
        return Loaded(with_agents(world, docs, agent_list(agents, world.fleet)), docs, version, agents)
    raise ValueError("the stored configuration cannot be run, even with its broken documents set aside")


class LeaseKeeper:
    """Renews the store's lease a controller is active under, every third of its
    length, from a thread of its own: a long turn, a rebuild or a pause of the
    scheduler's thread does not let it lapse. Should another process have taken
    it (its epoch moved on), this one may no longer write: the process ends at
    once (its server starts another, which stands by). While the store cannot
    be reached the lease is tried again; the writes are fenced meanwhile."""

    def __init__(self, store: Store, name: str, holder: str, epoch: int, ttl_s: float) -> None:
        self.store, self.name, self.holder, self.epoch, self.ttl_s = store, name, holder, epoch, ttl_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="suanli-lease", daemon=True)

    def start(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                held = self.store.renew_lease(self.name, self.holder, self.epoch, self.ttl_s)
            except Exception as exc:  # the store away: our writes are fenced; try again
                log.warning("the lease %r could not be renewed: %s", self.name, exc)
                continue
            if not held and not self._stop.is_set():
                lost(f"the lease {self.name!r} of epoch {self.epoch} was taken by another controller")


def lost(why: str) -> None:
    """Another controller is active now: write nothing more, end the process."""
    log.critical("this controller is no longer the active one: %s", why)
    os._exit(4)


class Controller:
    def __init__(self, world: World | Loaded, store: Store, *, speed: float = 1.0, policy: str | None = None,
                 executor: Callable[[Simulation], Executor] | None = None,
                 lease: tuple[str, str, int, float] | None = None) -> None:
        """``lease``: (name, holder, epoch, seconds) of the store's lease this
        controller is active under (kept by a ``LeaseKeeper``, given up by
        ``release``); None: the only controller of its store."""
        self.lease = lease
        self.cmd_seen = 0  # the store's commands up to this id were taken (or had been, by the rebuild)
        self._revision: dict[int, int] = {}  # application id -> the revision its scheduler runs
        self._cmd_taken: set[int] = set()  # ids past cmd_seen taken
        self._cmd_holes: dict[int, float] = {}  # ids missing past cmd_seen -> when first missed
        self._poked = False
        loaded = world if isinstance(world, Loaded) else None
        world = loaded.world if loaded else world
        self.docs = loaded.docs if loaded else None  # None: a world made elsewhere, not changed at run time
        self.version = loaded.version if loaded else 0
        self.agents: dict[str, AgentRow] = dict(loaded.agents) if loaded else {}
        self.agents_seen = max((a.changed for a in self.agents.values()), default=0)
        self.watched = 0.0  # when the store was last looked at for changes
        self.world = world
        self.store = store
        self.clock = WallClock(speed)
        self.epoch = time.time()  # wall time at the scheduler's time 0
        self.inbox: queue.Queue[Callable[[float], None]] = queue.Queue()
        self.sim = Simulation(world, clock=self.clock, policy=policy, executor=executor)
        self.sim.keep_records = False  # the store keeps them: the scheduler forgets a deleted application whole
        self.sim.max_pass = MAX_PASS  # a turn stays short, whatever one application asks
        self.sim.loop.on_post = lambda: self.inbox.put(lambda now: None)  # an executor's news: a turn now
        self.published = 0  # events written so far
        self.instants = 0
        self.last_turn = time.monotonic()
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reasons: dict[str, int] = {}  # pending task -> id of the reasons last written
        self._vc_tenant = {name: vc.tenant for name, vc in world.vcs.items()}
        self.cordoned: set[str] = set()  # nodes cordoned (drained and down ones the scheduler knows)
        self._node_state: dict[str, str | None] = {}  # node -> cordoned | drained | None, as last acted on
        self.held: dict[str, float] = {}  # agents' nodes held down -> wall time the hold-down ends
        self._losses: dict[str, list[float]] = {}  # agent's node -> wall times it was lost or left (the window's)
        self._away: set[str] = set()  # agents' nodes lost or left, not registered again since
        self.app_ids: set[int] = set()  # the store's applications the scheduler has
        self._app_of: dict[str, int] = {}  # TENANT:NAME -> the store's id of the application its events are of
        self._next_app: dict[str, deque[int]] = {}  # ids of applications submitted by that name, not yet seen
        self._deleting: set[str] = set()  # names whose application was deleted: events are the old one's
        self.last_ok = time.monotonic()  # when a turn last went through
        self.turn_seconds, self.commit_seconds = Buckets(), Buckets()  # for /metrics
        self.decision_seconds = Buckets()
        self.allocation = AllocationHistory()  # by tier, every HISTORY_S (the console's chart)
        self._sampled = -HISTORY_S
        self.sim.on_pass = lambda seconds, units: self.decision_seconds.observe(seconds / units, units)
        self.placement_seconds: dict[str, Buckets] = {}  # tenant -> from submission to first placement
        store.on_commit = self.commit_seconds.observe
        if self.docs is not None and hasattr(self.sim.executor, "register_node"):  # Ray nodes that join register
            self.sim.executor.register_node = self._register_node
            self.sim.executor.renew_node = self.store.renew_agent
        self.restarts = 0  # in process, never started again (RemoteController's count)

    # ------------------------------------------------------------ life

    def start(self) -> None:
        """Rebuild from the store, then run the scheduler's thread."""
        self.sim.start()
        self.cmd_seen = self.store.last_command()  # read before the store's state: what comes later is taken
        self._restore()
        for a in self.agents.values():  # nodes whose agents were lost when the server stopped: down
            if a.state == "lost" or a.state == "left" and _is_device(self.world.fleet, a.site):
                self._agent_news(a, None)
        self._turn()
        settled = getattr(self.sim.executor, "settled", None)
        if settled is not None:  # what ran before and was not placed again stops (agents' tasks outlive it)
            settled()
        self._watch()
        self._thread = threading.Thread(target=self._run, name="suanli-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.inbox.put(lambda now: None)  # wake the thread now rather than at its next look
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sim.executor.close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wall(self, t: float) -> float:
        """Wall time (seconds since the epoch) of scheduler time ``t``."""
        return self.epoch + t / self.clock.speed

    def _restore(self) -> None:
        sim = self.sim
        for node, state in self.store.node_states().items():
            self._node(node, "cordon" if state == "cordoned" else "drain")
        tasks: dict[int, list] = {}
        for row in self.store.task_states():
            tasks.setdefault(row.app_id, []).append(row)
        refused = []
        restored = []  # every application in one instant: one scheduling pass, not one each
        checked: dict[str, Any] = {}  # documents alike but for their names: checked once
        for app in self.store.apps():
            rows = tasks.get(app.id, [])
            if all(r.status in ENDED for r in rows):  # nothing of it to schedule: only known, for a deletion
                self.app_ids.add(app.id)
                self._app_of[internal(app.tenant, app.name)] = app.id
                continue
            try:
                built = self._rebuild(app, checked)
            except Exception as exc:  # one stored application must not keep the server from starting
                refused.append((app, rows, str(exc)))
                continue
            ended = {internal(app.tenant, r.name): r.status for r in rows if r.status in ENDED}
            restored.append((built, ended))
            self._revision[app.id] = app.revision or 1
            self.app_ids.add(app.id)
            self._app_of[internal(app.tenant, app.name)] = app.id

        sim.restore(restored)
        # what the executor kept of tasks the store no longer holds (deleted while no controller ran)
        sim.executor.sweep([internal(r.tenant, r.name) for rows in tasks.values() for r in rows])
        now = time.time()
        # the executor's runs ended with the process that ran them
        self.store.requeue_running(now, "not running on the executor after the control plane restarted",
                                   [app.id for app, _, _ in refused])
        for app, rows, why in refused:
            log.warning("application %s of tenant %s marked failed: %s", app.name, app.tenant, why)
            self._mark([r for r in rows if r.status not in ENDED], "failed",
                       {"status": "failed", "ended_at": now, **NO_REASONS},
                       f"not scheduled after the control plane restarted: {why}", now)

    def _rebuild(self, app: AppRow, checked: dict[str, Any] | None = None) -> Application:
        """A stored application as the scheduler takes it, checked again against the
        world the server runs now (its tenant may be gone, a bound may have come).
        ``checked``: what documents that differ in their name alone were found to be."""
        if app.tenant not in self.world.tenants:
            raise ValueError(f"tenant {app.tenant!r} is no longer among the server's Tenant documents")
        meta = app.document.get("metadata")
        key = json.dumps({**app.document, "metadata": {k: v for k, v in meta.items() if k != "name"}},
                         sort_keys=True, default=str) if checked is not None and isinstance(meta, dict) else None
        if key is None or key not in checked:
            found, problems = check_document("stored application", app.document, self.world)
            if key is not None:
                checked[key] = (found, problems)
        else:
            found, problems = checked[key]
        if problems:
            p = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValueError(f"its document is no longer valid: {p.path}: {p.message}{more}")
        return build_app(app.tenant, app.name, found.doc, self.world.vcs)

    def _mark(self, rows: list[TaskRow], kind: str, fields: dict[str, Any], reason: str, now: float) -> None:
        """Stored tasks given ``fields`` (and no placement), each with a ``kind`` event
        saying why, in one transaction (nothing when there are none)."""
        if not rows:
            return
        fields = {**fields, "node": None, "site": None, "host": None, "updated_at": now}
        self.store.record(
            [(r.tenant, r.name, fields) for r in rows],
            [{"at": now, "kind": kind, "tenant": r.tenant, "task": r.name,
              "body": {"t": now, "kind": kind, "task": r.name, "tenant": r.tenant, "reason": reason}} for r in rows])

    # ------------------------------------------------------------ commands (any thread)

    def submit(self, app: Application, app_id: int | None = None) -> None:
        """``app`` (the store's application ``app_id``) is scheduled, unless the
        rebuild from the store had it already."""
        def command(now: float) -> None:
            if app_id is not None:
                if app_id in self.app_ids:
                    return
                self.app_ids.add(app_id)
                self._next_app.setdefault(app.name, deque()).append(app_id)
            self.sim.submit(app)
        self.inbox.put(command)

    def update(self, app: Application, app_id: int, revision: int, max_unavailable: int | str,
               max_surge: int | str = 0) -> None:
        """``revision`` of the running application ``app_id`` is rolled out
        (once: a revision it rolled out already, or a later one, changes nothing)."""
        def command(now: float) -> None:
            if app_id not in self.app_ids or self._revision.get(app_id, 1) >= revision:
                return
            self._revision[app_id] = revision
            self.sim.update(app, revision, max_unavailable, max_surge)
        self.inbox.put(command)

    def delete(self, tenant: str, name: str, app_id: int | None = None) -> None:
        """The application stops, unless the rebuild from the store never had it."""
        event = schema.DeleteEvent.model_construct(at=0, kind="delete", app=internal(tenant, name))  # TENANT:NAME

        def command(now: float) -> None:
            if app_id is not None:
                if app_id not in self.app_ids:
                    return
                self.app_ids.discard(app_id)
            self.sim.apply(event)
            self._deleting.add(event.app)  # its tasks' ends are still the old application's
        self.inbox.put(command)

    def node(self, node: str, action: str) -> None:
        """``cordon`` (no new work), ``drain`` (and its work moves off) or ``uncordon``."""
        self.inbox.put(lambda now: self._node(node, action))

    def ask(self, query: str, *args: Any) -> Any:
        """The answer to one of ``QUERIES`` about the scheduler's state now."""
        return self.call(lambda sim: QUERIES[query](self, *args))

    def ask_here(self, query: str, *args: Any) -> Any:
        """``ask``, from the controller's own thread (between instants)."""
        self._turn()  # what was asked before has happened
        return QUERIES[query](self, *args)

    def stats(self, timeout: float | None = None) -> dict[str, Any]:
        """Counts, how long ago a turn of the scheduler last went through, and histograms."""
        return {"instants": self.instants, "errors": self.errors, "published": self.published,
                "since_turn_s": round(time.monotonic() - self.last_ok, 3),
                "histograms": {"turn_seconds": self.turn_seconds.snapshot(),
                               "decision_seconds": self.decision_seconds.snapshot(),
                               "commit_seconds": self.commit_seconds.snapshot(),
                               "placement_seconds": {t: b.snapshot() for t, b in self.placement_seconds.items()}}}

    @property
    def ready(self) -> bool:
        return self.alive

    @property
    def state(self) -> str:
        return "running" if self.alive else "stopped"

    def call(self, fn: Callable[[Simulation], Any], timeout: float = 30.0) -> Any:
        """``fn(sim)`` run by the controller between instants; its result."""
        done: Future = Future()

        def ask(now: float) -> None:
            try:
                self._turn()  # what was asked before has happened
                done.set_result(fn(self.sim))
            except BaseException as exc:  # handed to the asking thread
                done.set_exception(exc)

        self.inbox.put(ask)
        return done.result(timeout)

    def _node(self, node: str, action: str) -> None:
        self._node_state[node] = {"cordon": "cordoned", "drain": "drained"}.get(action)
        (self.cordoned.add if action == "cordon" else self.cordoned.discard)(node)
        self.held.pop(node, None)  # the admin's word replaces a hold-down
        self.sim.apply(node_event(node, action))

    def poke(self) -> None:
        """Look at the store's commands, configuration and agents now (the API changed them)."""
        def command(now: float) -> None:
            self._poked = True
        self.inbox.put(command)

    # ------------------------------------------------------------ the lease, and other servers' commands

    def _register_node(self, name: str, site: str, spec: dict, lease_s: float) -> None:
        """A node the executor found (a Ray node that joined) registers as an agent's would
        (from the executor's thread: the controller's next look at the store adds it)."""
        before = self.store.agent(name)
        if before is None or before.state != "ready":
            self.store.register_agent(name, site, spec, lease_s, None)
        self.inbox.put(lambda now: self._watch())

    def release(self) -> None:
        """Give the lease up (a clean stop): a standby takes over at its next try."""
        if self.lease is not None:
            name, holder, epoch, _ = self.lease
            try:
                self.store.renew_lease(name, holder, epoch, -1.0)
            except Exception:  # the store away: the lease runs out by itself
                pass

    def _intake(self) -> None:
        """The store's commands past those taken: changes accepted by any server of
        this store. A command whose id is missing yet (a transaction that took
        its id and has not committed) is looked for again, for a while."""
        low = min(self._cmd_holes, default=self.cmd_seen + 1) - 1
        rows = self.store.commands(low)
        if not rows:
            return
        now = time.monotonic()
        for row in rows:
            if row.id in self._cmd_taken or row.id <= self.cmd_seen and row.id not in self._cmd_holes:
                continue
            self._cmd_taken.add(row.id)
            self._cmd_holes.pop(row.id, None)
            self._command(row)
        top = rows[-1].id
        for i in range(self.cmd_seen + 1, top):
            if i not in self._cmd_taken:
                self._cmd_holes.setdefault(i, now)
        for i, since in list(self._cmd_holes.items()):
            if now - since > COMMAND_HOLE_S:  # a transaction that rolled back: never to come
                del self._cmd_holes[i]
        seen = self.cmd_seen
        while seen + 1 in self._cmd_taken or (seen + 1 <= top and seen + 1 not in self._cmd_holes):
            seen += 1
            self._cmd_taken.discard(seen)
        self.cmd_seen = seen

    def _command(self, row) -> None:
        """One command of the store, as the pipe's would have been (those the pipe
        brought already change nothing again)."""
        if row.kind == "submit":
            if row.app_id in self.app_ids:
                return
            app = self.store.app_by_id(row.app_id)
            if app is None:  # deleted meanwhile
                return
            try:
                built = build_app(app.tenant, app.name, app.document, self.world.vcs)
            except Exception as exc:  # noqa: BLE001 - the API accepted it; one bad one must not stop the others
                log.warning("application %s of tenant %s not scheduled: %s", app.name, app.tenant, exc)
                return
            self.submit(built, app.id)
        elif row.kind == "update":
            app = self.store.app_by_id(row.app_id)
            if app is None or row.app_id not in self.app_ids or app.revision != int(row.action or 0):
                return  # deleted, or changed again since: that change's command follows
            try:
                built = build_app(app.tenant, app.name, app.document, self.world.vcs)
            except Exception as exc:  # noqa: BLE001 - the API accepted it; one bad one must not stop the others
                log.warning("application %s of tenant %s not updated: %s", app.name, app.tenant, exc)
                return
            policy = update_policy(app.document)
            self.update(built, app.id, app.revision, policy.max_unavailable, policy.max_surge)
        elif row.kind == "delete":
            if row.app_id in self.app_ids:
                self.delete(row.tenant, row.name, row.app_id)
        elif row.kind == "node":
            state = {"cordon": "cordoned", "drain": "drained"}.get(row.action)
            if self._node_state.get(row.name) != state:
                self.node(row.name, row.action)

    # ------------------------------------------------------------ what the server runs, changed

    def _watch(self) -> None:
        """Changes of the configuration and of agents, from the store (any server
        process of this database may have made them), and leases that ran out."""
        self.watched = time.monotonic()
        if self.docs is None:
            return
        version = self.store.config_version()
        if version != self.version:
            self._turn()  # what was asked before (a cascade's deletions) has happened
            self._configure(version)
        expired = self.store.expired_agents(time.time())
        if expired:
            self.store.end_agents(expired, "lost", only_if_expired=True)
        rows = self.store.agents(self.agents_seen)
        if rows:
            self._agents_changed(rows)
        if self.held:
            self._lift_holds()

    def _configure(self, version: int) -> None:
        from suanli.server.config import as_rows, documents, world_of

        docs, problems = documents(as_rows(self.store.objects()))
        if problems:  # the API checked it: another version of the server wrote something else
            log.error("configuration version %d not applied: %s: %s", version, problems[0].path, problems[0].message)
            self.version = version
            return
        now = self.clock.now()
        fresh = world_of(docs)
        undone = self.sim.set_tenancy(now, fresh.tenants, fresh.vcs)
        for why in undone:
            log.warning(why)
        self._vc_tenant = {name: vc.tenant for name, vc in self.world.vcs.items()}
        self.docs, self.version = docs, version
        self._grow()
        self.sim.log(now, "configured", version=version)

    def _grow(self) -> None:
        """The fleet as the documents and agents say (nodes added, retired)."""
        from suanli.server.config import grown_fleet

        fleet = self.world.fleet
        grown, retire, paths = grown_fleet(fleet, self.docs, agent_list(self.agents, fleet))
        now = self.clock.now()
        if grown is not None:
            self.sim.grow_fleet(now, grown, paths)
        for node in retire:
            self.sim.retire_node(now, node, "removed from the fleet")

    def _agents_changed(self, rows: list[AgentRow]) -> None:
        """Agents registered, lost or gone: nodes added, found, lost or retired."""
        grow = False
        for row in rows:
            self.agents_seen = max(self.agents_seen, row.changed)
            before = self.agents.get(row.name)
            self.agents[row.name] = row
            if _is_device(self.world.fleet, row.site):
                self._agent_news(row, before)
                continue
            if row.state == "left":
                self._went(row.name)
            if row.state == "left" or before is None or before.state == "left" or before.spec != row.spec \
                    or before.site != row.site:
                grow = True
            else:
                self._agent_news(row, before)
        if grow:
            self._grow()
            for row in rows:  # registered again after a loss, on the node it had
                if row.state != "left" and not _is_device(self.world.fleet, row.site):
                    self._agent_news(row, None)

    def _agent_news(self, row: AgentRow, before: AgentRow | None) -> None:
        """A ready agent's node is found, a lost one's lost (as a failed machine:
        its work waits again and is placed elsewhere); a device comes online or goes offline."""
        from suanli.executors.base import NodeFound, NodeLost

        sim, fleet = self.sim, self.world.fleet
        if _is_device(fleet, row.site):
            kind = "deviceOnline" if row.state == "ready" else "deviceOffline"
            cls = schema.DeviceOnlineEvent if row.state == "ready" else schema.DeviceOfflineEvent
            sim.apply(cls.model_construct(at=0, kind=kind, site=row.site))
            return
        if row.state == "ready":
            if not self._hold_down(row) and row.name in sim.lost_nodes:
                sim.loop.post(NodeFound(row.name, "its agent registered again"))
        elif row.state == "lost":
            self._went(row.name)
            self.held.pop(row.name, None)
            sim.loop.post(NodeLost(row.name, f"its agent's lease of {row.lease_s:g}s ran out"))

    def _went(self, name: str) -> None:
        """An agent's node was lost or left (counted once until it registers again)."""
        if name not in self._away:
            self._away.add(name)
            self._losses.setdefault(name, []).append(time.time())

    def _hold_down(self, row: AgentRow) -> bool:
        """An agent's node registered again after a loss: found, but out of service
        (as a cordoned node) for its lease times 2^(k-1), k its losses within
        ``HOLD_WINDOW_S``; ``_lift_holds`` puts it back. Whether it is held."""
        if row.name not in self._away:
            return False
        self._away.discard(row.name)
        now = time.time()
        losses = self._losses[row.name] = [t for t in self._losses.get(row.name, ()) if now - t <= HOLD_WINDOW_S]
        fleet = self.world.fleet
        try:
            node = fleet.node_by_name(row.name)
        except KeyError:
            return False
        if not losses or fleet.retired[node]:
            return False
        hold = min(row.lease_s * 2 ** (len(losses) - 1), HOLD_MAX_S)
        self.held[row.name] = now + hold
        sim, t = self.sim, self.clock.now()
        if row.name in sim.lost_nodes:  # found, and kept out of service rather than back up
            sim.lost_nodes.discard(row.name)
            sim.log(t, "nodeFound", node=row.name, reason="its agent registered again")
        else:  # made anew (it left, or came back with other facts): out before any pass can place there
            sim.state.set_node_enabled(node, False)
        sim.log(t, "nodeHeldDown", node=row.name, until=round(now + hold, 3), hold_s=hold, losses=len(losses),
                reason=f"its agent was lost or left {len(losses)} times within {HOLD_WINDOW_S / 60:g} minutes: "
                f"no new work for {hold:g}s")
        return True

    def _lift_holds(self) -> None:
        """Held-down nodes whose time is up back in service (unless lost again, or
        an admin's action came meanwhile)."""
        now = time.time()
        for name, until in list(self.held.items()):
            if until > now:
                continue
            del self.held[name]
            agent = self.agents.get(name)
            if agent is not None and agent.state == "ready" and name not in self.sim.lost_nodes \
                    and self._node_state.get(name) is None:
                self.sim.apply(node_event(name, "uncordon"))

    # ------------------------------------------------------------ the thread

    def _run(self) -> None:
        while not self._stop.is_set():
            nxt = self.sim.loop.peek_time()
            wait = IDLE_WAIT_S if nxt is None else (nxt - self.clock.now()) / self.clock.speed
            commands = []
            try:
                commands.append(self.inbox.get(timeout=min(IDLE_WAIT_S, wait)) if wait > 0
                                else self.inbox.get_nowait())
            except queue.Empty:
                pass
            rest = self.last_turn + TURN_GAP_S - time.monotonic()
            if commands and rest > 0:
                self._stop.wait(rest)
            while True:
                try:
                    commands.append(self.inbox.get_nowait())
                except queue.Empty:
                    break
            now = self.clock.now()
            for command in commands:
                try:
                    command(now)
                except Exception:  # one bad command must not stop the scheduler
                    self.errors += 1
                    log.exception("a command failed")
            try:
                if self._poked or time.monotonic() - self.watched >= WATCH_S:
                    self._poked = False
                    self._intake()
                    self._watch()
                self._turn()
            except LeaseLost as exc:
                lost(str(exc))
            except Exception:
                self.errors += 1
                log.exception("the scheduler's turn failed")
                time.sleep(0.1)  # the store may be away: retry soon, not in a tight loop

    def _turn(self) -> None:
        """Handle the instants due, then write what they changed."""
        started = time.perf_counter()
        self.sim.step(self.clock.now())
        self.last_turn = time.monotonic()
        if self.last_turn - self._sampled >= HISTORY_S:
            self._sampled = self.last_turn
            self.allocation.sample(time.time(), _allocation(self))
        self._write_turn()
        self.last_ok = time.monotonic()
        self.turn_seconds.observe(time.perf_counter() - started)

    def _write_turn(self) -> None:
        """What the instants changed: in one transaction, or in several of at most
        ``WRITE_ROWS`` rows each for a large turn (an application of many tasks
        submitted), so that no write holds the store for long."""
        events = self.sim.events.take()
        changes = self._changes(events) + self._reasons_changed()
        if not events and not changes:
            return
        for e in events:  # a rollout's extra replicas: listed as tasks while they run
            if e["kind"] == "rollout" and e.get("surge"):
                self._extra_tasks(e, add=e["surge_tasks"])
        rows = [self._row(e) for e in events]
        for i in range(0, max(len(changes), len(rows)), WRITE_ROWS):
            self.store.record(changes[i:i + WRITE_ROWS], rows[i:i + WRITE_ROWS])
            self.last_ok = time.monotonic()  # a long turn that makes progress is not a stalled one
        for e in events:
            if e["kind"] == "surgeEnded":
                self._extra_tasks(e, drop=e["surge_tasks"])
        self.instants += 1
        self.published += len(rows)

    def _extra_tasks(self, e: dict[str, Any], add: Sequence[str] = (), drop: Sequence[str] = ()) -> None:
        app_id = self._app_of.get(e["app"])
        if app_id is None:
            return
        tenant = split(e["app"])[0]
        self.store.extra_tasks(app_id, tenant, [split(t)[1] for t in add], [split(t)[1] for t in drop])

    # ------------------------------------------------------------ what an instant changed

    def _row(self, e: dict[str, Any]) -> dict[str, Any]:
        """An event as the store keeps it: names as the tenant knows them."""
        body = dict(e)
        app = (body.get("task") or body.get("app") or "").split("/", 1)[0]
        if e["kind"] == "submitted" and (app in self._deleting or app not in self._app_of):
            waiting = self._next_app.get(app)  # a new application by this name: its events from here on
            if waiting:
                self._app_of[app] = waiting.popleft()
                self._deleting.discard(app)
                if not waiting:
                    del self._next_app[app]
        app_id = self._app_of.get(app)
        at = self.wall(body.pop("t"))
        tenant = task = None
        if "task" in body:
            tenant, task = split(body["task"])
            body["task"], body["tenant"] = task, tenant
        elif "app" in body:
            tenant, body["app"] = split(body["app"])
        if "surge_tasks" in body:  # (as the tenant names them)
            body["surge_tasks"] = [split(t)[1] for t in body["surge_tasks"]]
            body["tenant"] = tenant
        elif "vc" in body:
            tenant = self._vc_tenant.get(body["vc"])
        if body.get("vc"):  # as its tenant names it
            body["vc"] = shown(body["vc"])
        if "by" in body:
            body.update(self._by(tenant, body.pop("by"), body.get("cause")))
        return {"at": at, "kind": e["kind"], "tenant": tenant, "task": task, "app_id": app_id,
                "body": {"t": round(at, 6), **body}}

    @staticmethod
    def _by(tenant: str | None, by: str, cause: str | None) -> dict[str, Any]:
        """Who took the room of a preempted task, as its tenant may know it: a task of
        its own by name; another tenant's only as that (the name is kept for admins
        under ``PRIVATE``, which the API shows to admins alone)."""
        other, name = split(by)
        if other == tenant:
            return {"by": name}
        if cause == "cohort reclaim":  # the owner of the quota it borrowed: its cohort knows its members
            return {"by": f"tenant {other}, reclaiming the quota it lent", PRIVATE: {"by": name, "byTenant": other}}
        what = "another tenant reclaiming its fair share" if cause == "fair share" else \
            "a higher-priority task of another tenant"
        return {"by": what, PRIVATE: {"by": name, "byTenant": other}}

    def _changes(self, events: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
        fields: dict[str, dict[str, Any]] = {}
        for e in events:
            task = e.get("task")
            if task is None or SEP not in task:
                continue
            kind, at = e["kind"], self.wall(e["t"])
            f = fields.setdefault(task, {})
            if kind == "placed":
                rec = self.sim.view.tasks.get(task)
                first = rec is not None and rec.first_placed_at is not None and abs(rec.first_placed_at - e["t"]) < 1e-5
                if first and not f.get("placements"):  # (event times are rounded to the microsecond)
                    tenant = split(task)[0]
                    waits = self.placement_seconds.get(tenant)
                    if waits is None:
                        waits = self.placement_seconds[tenant] = Buckets()
                    waits.observe(max(0.0, self.wall(e["t"]) - self.wall(rec.submitted_at)))
                f.update(node=e.get("node"), site=e.get("site"), host=e.get("host"),
                         vc=shown(e["vc"]) if e.get("vc") else None, **NO_REASONS)
                if e.get("borrowed_from"):  # running on quota its cohort lent: said while it runs
                    f.update(reason_code="borrowed", reason=e["reason"])
                f["placements"] = f.get("placements", 0) + 1
            elif kind == "started":
                f.update(status="running", started_at=at, node=e.get("node"), site=e.get("site"),
                         ready=False if self.sim.shard.probed(task) else None)
            elif kind in ("ready", "notReady"):
                f.update(ready=kind == "ready")
            elif kind == "migrated":
                f.update(node=e.get("to"))
            elif kind in ENDED:
                f.update(status=kind, ended_at=at, ready=None)
                if "why" in e:  # members an elastic gang was placed without: what left them out
                    f.update(why_fields({w["reason"]: w["count"] for w in e["why"]}, e["why"]))
            elif kind in ("requeued", "lost", "preempted", "updating"):
                f.update(status="pending", node=None, site=None, host=None, ready=None)
            else:
                continue
            f["updated_at"] = at
            self._reasons.pop(task, None)
        out = []
        for task, f in fields.items():
            if not f:
                continue
            tenant, name = split(task)
            out.append((tenant, name, f))
        return out

    def _reasons_changed(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Pending tasks whose reasons for waiting changed since last written."""
        sim, out = self.sim, []
        now = time.time()
        for uid in sim.pending:
            for task in sim.view.units[uid].unit.tasks:
                rec = sim.view.tasks[task]
                if rec.status != "pending" or not rec.reasons or self._reasons.get(task) == id(rec.reasons):
                    continue
                self._reasons[task] = id(rec.reasons)
                tenant, name = split(task)
                out.append((tenant, name, {**why_fields(reasons_json(rec.reasons), why_json(rec.reasons)),
                                            "updated_at": now}))
        return out


# ------------------------------------------------------------------ questions about the state now
# Asked by name (``Controller.ask``), so that they can be asked across a process boundary too.


def _node_states(c: Controller) -> list[str]:
    sim, fleet = c.sim, c.world.fleet
    drained, enabled = sim.hosts.draining, sim.state.nodes.enabled
    return ["ready" if enabled[n] else "removed" if fleet.retired[n] else "drained" if n in drained else
            "cordoned" if fleet.node_name(n) in c.cordoned or fleet.node_name(n) in c.held else "down"
            for n in range(fleet.n_nodes)]


def _node_out(c: Controller, n: int, state: str) -> dict[str, Any]:
    sim, fleet = c.sim, c.world.fleet
    nodes, site = sim.state.nodes, fleet.site_of(n)
    return {"node": fleet.node_name(n), "site": site.name, "tier": site.tier,
            "arch": fleet.groups[int(fleet.node_group[n])].arch, "state": state,
            "capacity": resources_json(sim.state, nodes.cap[:, n]),
            "free": resources_json(sim.state, nodes.free[:, n]),
            "tasks": sim.state.tasks_on_node.count(n)}


def _nodes(c: Controller, site: str | None) -> list[dict[str, Any]]:
    fleet, states = c.world.fleet, _node_states(c)
    if site is None:
        return [_node_out(c, n, states[n]) for n in np.flatnonzero(~fleet.retired).tolist()]
    at = fleet.site_index.get(site)
    return [_node_out(c, n, states[n]) for n in fleet.nodes_of(at).tolist() if not fleet.retired[n]] if at >= 0 else []


def _has_node(c: Controller, name: str) -> bool:
    """A node of that name is in the fleet (not removed)."""
    fleet = c.world.fleet
    try:
        return not fleet.retired[fleet.node_by_name(name)]
    except KeyError:
        return False


def _node(c: Controller, name: str) -> dict[str, Any]:
    n = c.world.fleet.node_by_name(name)
    return _node_out(c, n, _node_states(c)[n])


def _fleet(c: Controller) -> dict[str, Any]:
    sim, fleet = c.sim, c.world.fleet
    nodes, live = sim.state.nodes, ~fleet.retired
    return {"sites": len(fleet.sites), "nodes": int(live.sum()),
            "capacity": resources_json(sim.state, nodes.cap[:, :fleet.n_nodes][:, live].sum(axis=1)),
            "free": resources_json(sim.state, nodes.free[:, :fleet.n_nodes][:, live].sum(axis=1))}


def _vcs(c: Controller, names: list[str]) -> list[dict[str, Any]]:
    sim, fleet, out = c.sim, c.world.fleet, []
    for name in names:
        if name not in c.world.vcs:  # applied a moment ago: the scheduler takes it at its next look
            continue
        vc, vcs = c.world.vcs[name], sim.state.vcs[name]
        out.append({"name": shown(name), "tenant": vc.tenant, "default": vc.default,
                    "hosts": [{"host": h.name, "group": h.group, "node": fleet.node_name(h.node),
                               "resources": resources_json(sim.state, h.node_alloc.vec)} for h in vcs.hosts]})
    return out


HISTORY_S = 5.0  # the allocation by tier is sampled this often (the console's overview charts it)
HISTORY_POINTS = 2000  # samples kept (about three hours at one every 5 s)


class AllocationHistory:
    """The allocation by tier over time since the scheduler started, sampled
    by the controller as it turns (every ``HISTORY_S``), whether anyone looks
    or not: what the live console's overview charts."""

    def __init__(self) -> None:
        self.t: deque[float] = deque(maxlen=HISTORY_POINTS)
        self.by_tier: deque[dict[str, dict[str, float]]] = deque(maxlen=HISTORY_POINTS)
        self.lock = threading.Lock()

    def sample(self, now: float, allocation: dict[str, dict[str, float]]) -> None:
        with self.lock:
            if self.t and now - self.t[-1] < HISTORY_S:
                self.by_tier[-1] = allocation
                return
            self.t.append(now)
            self.by_tier.append(allocation)

    def series(self) -> dict[str, Any]:
        with self.lock:
            t, samples = list(self.t), list(self.by_tier)
        out: dict[str, dict[str, list[float]]] = {}
        for i, sample in enumerate(samples):
            for tier, values in sample.items():
                for key, v in values.items():
                    out.setdefault(tier, {}).setdefault(key, [0.0] * len(t))[i] = v
        return {"t": t, "by_tier": out}


def _allocation(c: Controller) -> dict[str, dict[str, float]]:
    """Each tier's share of capacity in use now, per resource."""
    from suanli.model.fleet import TIERS

    fleet = c.world.fleet
    nodes, n, keys = c.sim.state.nodes, fleet.n_nodes, fleet.resource_keys
    cap, free, tier = nodes.cap[:, :n], nodes.free[:, :n], fleet.node_tier[:n]
    allocation = {}
    for i, name in enumerate(TIERS):
        mine = tier == i
        if mine.any():
            total = cap[:, mine].sum(axis=1)
            used = total - free[:, mine].sum(axis=1)
            allocation[name] = {k: round(float(u) / float(t), 6) for k, u, t in zip(keys, used, total) if t}
    return allocation


def _console(c: Controller) -> dict[str, Any]:
    """What the console's overview and tenants pages read now: each tier's
    share of capacity in use per resource, its history (sampled as the
    controller turns), and each tenant's usage (canonical amounts per
    resource key) and dominant share."""
    keys, state = c.world.fleet.resource_keys, c.sim.state
    tenants = {name: {"used": {k: int(v) for k, v in zip(keys, state.tenant_used[name]) if v},
                      "dominant_share": round(state.dominant_share(name), 6)} for name in c.world.tenants}
    for name, member in cohorts_json(state, nonzero=True).items():  # what cohort members borrow and lend now
        if name in tenants:
            tenants[name].update(member)
    return {"allocation": _allocation(c), "history": c.allocation.series(), "tenants": tenants}


def _plan(c: Controller) -> dict[str, Any]:
    from suanli.sim.plan import dry_run

    return dry_run(c.sim, c.clock.now())


def _rollout(c: Controller, tenant: str, name: str) -> dict[str, Any] | None:
    """What the scheduler has done of an application's last update (None: it has not got it)."""
    return c.sim.rollouts.status(internal(tenant, name))


QUERIES: dict[str, Callable[..., Any]] = {
    "node_states": _node_states, "nodes": _nodes, "node": _node, "has_node": _has_node, "fleet": _fleet, "vcs": _vcs, "plan": _plan,
    "console": _console, "rollout": _rollout,
}
