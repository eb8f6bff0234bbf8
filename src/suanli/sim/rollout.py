"""Updates in place: a changed application rolled out to its running replicas.

A new version of an application (a ``revision``) is compared with what runs,
unit by unit (a replica, or a gang), by its tasks' names:

- a unit whose components are unchanged stays as it is;
- a unit of the new version with no unit of the old (more replicas) is
  added at once, and a unit of the old with none of the new (fewer
  replicas, or a gang resized) is stopped and withdrawn at once;
- a changed unit is **replaced in place**: stopped (its state kept, as for a
  move), then made again as the new version's unit under the same names,
  so the new version starts where the scheduler places it, with the state
  the old one saved. It is replaced only while fewer than ``maxUnavailable``
  of its component's replicas are not ready, so that at least
  ``replicas - maxUnavailable`` stay ready throughout (a replica is ready
  when it runs and, where its executor runs probes, its readiness probe
  passes).

A replica keeps its name and its state across the update, so the new
version of a replica starts only once the old one has stopped (as a
StatefulSet rolls). A service without state may **surge**: up to
``maxSurge`` extra replicas of the new version (named after the last
replica: ``web/10``, ``web/11`` for 10) start at once, count as ready
replicas once they are, and so let more old ones be replaced at a time; they
are withdrawn when the rollout is done. A stateful replica never surges
(its name is its state), nor does a gang or an affinity group.

Events: ``rollout`` (the update begins: revision, and how many units are
replaced, added and withdrawn), ``updating`` (a task stopped to be replaced),
``rolledOut`` (every replica runs the new version and is ready).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from suanli.scheduling.business_layer import Unit, build_units
from suanli.sim.ledger import RUNNING

if TYPE_CHECKING:
    from suanli.model.work import Application, Component
    from suanli.sim.shard import Shard


def unavailable_allowed(spec: int | str, replicas: int) -> int:
    """``maxUnavailable`` as a count for ``replicas``: a percentage rounds down; at least one."""
    if isinstance(spec, str):
        count = replicas * int(spec.rstrip("%")) // 100
    else:
        count = spec
    return max(1, min(count, replicas))


def surge_allowed(spec: int | str, replicas: int) -> int:
    """``maxSurge`` as a count for ``replicas``: a percentage rounds up (as Kubernetes'); 0: none."""
    if isinstance(spec, str):
        return -(-replicas * int(spec.rstrip("%")) // 100)
    return max(0, spec)


def surges(comp: "Component") -> bool:
    """Whether a component may run extra replicas while it is rolled out: a service
    of one task a replica, without state to carry."""
    return comp.lifetime == "service" and not comp.stateful and not comp.gang and comp.affinity is None


@dataclass
class Rollout:
    app: "Application"
    revision: int
    max_unavailable: int | str
    queue: dict[str, list[tuple[int, Unit]]] = field(default_factory=dict)  # component -> (old unit, new unit)
    surge: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # component -> its extra (unit, task)


class Rollouts:
    """The rollouts under way, stepped at each instant before its pass."""

    def __init__(self, shard: "Shard", log: Callable[..., None], wake_at: Callable[[float], None]) -> None:
        self.shard, self.log, self.wake_at = shard, log, wake_at
        self.active: dict[str, Rollout] = {}
        self.revisions: dict[str, int] = {}  # application -> the revision last asked for
        self.apps: dict[str, "Application"] = {}  # application -> that revision

    def update(self, t: float, app: "Application", revision: int, max_unavailable: int | str,
               max_surge: int | str = 0) -> None:
        """Roll ``app`` (its ``revision``) out over the units of the application of its name."""
        shard = self.shard
        units = shard._units
        old: dict[tuple[str, ...], int] = {}
        for uid in list(shard.ledger.by_app.get(app.name, ())):
            us = units.get(uid)
            if us is not None:
                old[tuple(us.unit.tasks)] = uid
        ro = Rollout(app, revision, max_unavailable)
        added = withdrawn = replaced = 0
        new_units = build_units((app,))
        for unit in new_units:
            uid = old.pop(tuple(unit.tasks), None)
            if uid is None:
                shard.add_unit(t, unit)
                added += 1
            elif tuple(units[uid].unit.components) != tuple(unit.components):
                ro.queue.setdefault(unit.components[0].name, []).append((uid, unit))
                replaced += 1
        for uid in old.values():
            shard.withdraw_unit(t, uid, f"not in revision {revision} of {app.name}")
            withdrawn += 1
        before = self.active.get(app.name)
        if before is not None:  # a rollout overtaken: its extra replicas go (this one makes its own)
            self._end_surge(t, before, f"revision {revision} of {app.name} replaces revision {before.revision}")
        surged = 0
        for comp in app.components:
            queued = len(ro.queue.get(comp.name, ()))
            extra = min(surge_allowed(max_surge, comp.size), queued) if queued and surges(comp) else 0
            if extra:
                ro.surge[comp.name] = self._surge(t, app, comp, extra)
                surged += extra
        self.revisions[app.name] = revision
        self.apps[app.name] = app
        self.active[app.name] = ro
        self.log(t, "rollout", app=app.name, revision=revision, replace=replaced, add=added, withdraw=withdrawn,
                 surge=surged, max_unavailable=max_unavailable, max_surge=max_surge,
                 **({"surge_tasks": [task for extra in ro.surge.values() for _, task in extra]} if surged else {}))

    def _surge(self, t: float, app: "Application", comp: "Component", extra: int) -> list[tuple[int, str]]:
        """``extra`` replicas of ``comp`` beyond its last, of the new version; (unit, task) each."""
        bigger = replace(comp, size=comp.size + extra)
        grown = replace(app, components=tuple(bigger if c.name == comp.name else c for c in app.components))
        out = []
        for unit in build_units((grown,)):
            if unit.components[0].name == comp.name and unit.tasks[0] not in \
                    {comp.task_name(i) for i in range(comp.size)}:
                out.append((self.shard.add_unit(t, unit), unit.tasks[0]))
        return out

    def _end_surge(self, t: float, ro: Rollout, why: str) -> None:
        tasks = []
        for extra in ro.surge.values():
            for uid, task in extra:
                self.shard.withdraw_unit(t, uid, why)
                tasks.append(task)
        ro.surge.clear()
        if tasks:
            self.log(t, "surgeEnded", app=ro.app.name, revision=ro.revision, surge=len(tasks), surge_tasks=tasks)

    def forget(self, app: str) -> None:
        """A deleted application's rollout goes with it (its extra replicas with the application)."""
        self.active.pop(app, None)
        self.revisions.pop(app, None)
        self.apps.pop(app, None)

    def step(self, t: float) -> None:
        """Replace what the budgets allow; say when a rollout is done."""
        for name, ro in list(self.active.items()):
            replaced = False
            for comp in ro.app.components:
                queue = ro.queue.get(comp.name)
                if not queue:
                    continue
                allowed = unavailable_allowed(ro.max_unavailable, comp.size)
                ready = self._ready(name, comp) + sum(self._is_ready(task) for _, task in ro.surge.get(comp.name, ()))
                unavailable = comp.size - ready
                while queue and unavailable < allowed:
                    uid, unit = queue.pop(0)
                    was_ready = all(self._is_ready(task) for task in unit.tasks)
                    self.shard.replace_unit(t, uid, unit, ro.revision)
                    replaced = True
                    if was_ready:
                        unavailable += 1
            if not any(ro.queue.values()) and all(self._ready(name, c) == c.size for c in ro.app.components
                                                   if c.lifetime == "service"):
                self._end_surge(t, ro, f"an extra replica of revision {ro.revision} of {name}: it is rolled out")
                del self.active[name]
                self.log(t, "rolledOut", app=name, revision=ro.revision)
            else:
                # placed in this instant's pass, a replica without probes is ready at the next instant
                self.wake_at(t + (0.001 if replaced else 1.0))

    def status(self, name: str) -> dict[str, Any] | None:
        """What a rollout has done: per component, its replicas, those that
        run the new version and those ready; None: no such application."""
        ro = self.active.get(name)
        revision = self.revisions.get(name)
        if revision is None and not self.shard.ledger.by_app.get(name):
            return None
        comps: dict[str, dict[str, int]] = {}
        app = self.apps.get(name)
        if app is None:
            uids = self.shard.ledger.by_app.get(name, ())
            first = next((self.shard._units.get(u) for u in uids), None)
            app = first.unit.app if first is not None else None
        for comp in app.components if app is not None else ():
            waiting = len(ro.queue.get(comp.name, ())) if ro is not None else 0
            comps[comp.name] = {"replicas": comp.size, "updated": comp.size - waiting,
                                "ready": self._ready(name, comp)}
        return {"revision": revision or 1, "done": ro is None, "components": comps}

    def _ready(self, app: str, comp: "Component") -> int:
        return sum(self._is_ready(comp.task_name(i)) for i in range(comp.size))

    def _is_ready(self, task: str) -> bool:
        rec = self.shard._tasks.get(task)
        if rec is None or rec.status != RUNNING:
            return False
        return task in self.shard.ready or not self.shard.probed(task)
