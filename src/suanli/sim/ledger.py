"""The task ledger: every task's record and every unit's state, and the one
place where they change.

A task is submitted (pending), placed and started (running), stopped
(pending again: preempted, requeued, lost) and ends (finished or failed;
omitted: a member an elastic gang runs without, which never runs; or
withdrawn: its application deleted, or it left, before it was placed). A
unit (a gang, an affinity group, or one task) gets a run when it starts and
loses it when it stops. The indexes that the scheduler reads change with
these transitions and nowhere else, so they stay together:

- runs by id;
- running units in the order they started (the units with a run, ordered
  by when each last became running: no index of its own);
- units by application (a range while they were submitted together);
- units that ran bound near a site or to its data;
- tasks counted by status.

Code outside the simulation (executors, metrics, the rescheduler, the plan,
the controller, results) reads the ledger through ``LedgerView``. That view
has no transitions, and its mappings are read-only.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Collection, Container, Iterable, Iterator, Sequence

import numpy as np

from suanli.executors.base import Run
from suanli.model.work import (EACH_SITE, Application, Component, SiteApplication, SiteComponent, World,
                               app_for_site, copies_named)
from suanli.scheduling.business_layer import Unit
from suanli.scheduling.state import (FEW, GrowingCatalogue, Placements, SparseList, TaskIds, add_few, wide_enough,
                                     widen)
from suanli.sim.times import Instants, TimeColumn

PENDING, RUNNING, FINISHED, FAILED, OMITTED = "pending", "running", "finished", "failed", "omitted"
WITHDRAWN = "withdrawn"  # its application deleted (or left) before it was placed: neither ran nor failed
STATUSES = (FINISHED, RUNNING, PENDING, FAILED, OMITTED, WITHDRAWN)  # the order counts are shown in
_CODE = {status: code for code, status in enumerate(STATUSES)}
_GONE = -1  # the status code of a record that was dropped (its id is not given again)
_PENDING_CODE, _RUNNING_CODE = _CODE[PENDING], _CODE[RUNNING]
KLASSES = ("", "short/small", "short/large", "resident/small", "resident/large")  # "": never became work
_KLASS_CODE = {klass: code for code, klass in enumerate(KLASSES)}
_CLASSES = {(short, large): ("short" if short else "resident") + ("/large" if large else "/small")
            for short in (False, True) for large in (False, True)}  # one string each, not one per unit
NO_REASONS: Counter = Counter()  # shared by every record with none; records get a new Counter, never change it
_NONE = float("nan")  # a time not yet (a float column's None)


def _component_at(app: Application, k: int) -> Component:
    """``app.components[k]`` (a copy made per site makes that one only)."""
    return app.component_at(k) if isinstance(app, SiteApplication) else app.components[k]


def _no(name: str) -> None:
    """(``TaskIds`` keeps every name: nothing to let go of.)"""


def _no_id(name: str, i: int) -> None:
    """(``TaskIds`` finds every name: nothing to remember.)"""


def _not_made(i: int) -> None:
    """(``TaskIds`` makes no names.)"""


MADE = object()  # a compact unit's entry when its application is a copy its task's id tells (``UnitTable._app``)


IN_UNIT = object()  # a record's component while its unit is kept as columns: read from the unit


class TaskTable(Mapping[str, "TaskRecord"]):
    """Every task's record as columns, indexed by task id: the order in which
    a name was first submitted. A record is read as a ``TaskRecord``, a view
    of one row made when asked for; no object is kept per task but its name
    (none either for the tasks of an application made per site, in a
    simulation: its ``GrowingCatalogue`` makes their names when read).

    Scalar columns are ``array.array``s (compact, and read or written one at
    a time without a NumPy scalar in between), the times ``TimeColumn``s
    (int32 codes into the run's distinct times, read and written as floats);
    ``column()`` copies one into a NumPy array for whole-table reads. A name
    submitted again (a recreated application's task) keeps its id and so its
    place in the order; a record dropped leaves its row marked gone."""

    __slots__ = ("ids", "names", "status", "tenant", "unit", "component", "submitted_at", "first_placed_at",
                 "ended_at", "klass", "job", "reasons", "moving", "last_move_at", "tenants", "_tenant_code", "_live",
                 "units", "_add", "_find", "settle", "hold", "flush", "seen", "instants", "made_of")

    def __init__(self, ids: TaskIds | None = None) -> None:
        ids = TaskIds() if ids is None else ids  # (shared with the placements, which index their columns alike)
        # name -> id, and id -> name (a ``GrowingCatalogue`` is both: names made when read)
        grows = isinstance(ids, GrowingCatalogue)
        self.ids: Mapping[str, int] = ids if grows else ids.ids
        self.names: Sequence[str] = ids.names
        self._add, self._find = ids.add, ids.find
        self.settle, self.hold, self.flush, self.seen = \
            (ids.settle, ids.hold, ids.flush, ids.seen) if grows else (_no, _no, lambda: None, _no_id)
        self.made_of = ids.made_of if grows else _not_made
        self.status = array("b")  # code in STATUSES; _GONE: dropped
        self.tenant = array("h")  # code in ``tenants`` (int32 past 32,767 tenants)
        self.unit = array("i")  # -1: it never became work
        # IN_UNIT: a compact unit's task (read ``component_of``); a plain list until a copy made per site
        # is kept as columns, then sparse (a block of IN_UNIT keeps no slots: ``UnitTable.keep_compact``)
        self.component: list | SparseList = []
        self.units: UnitTable | None = None  # the units of its records (set by the ``UnitTable``)
        # times as codes into the run's distinct times (``sim.times``: 4 bytes a row, not 8)
        self.instants = Instants()
        self.submitted_at = TimeColumn(self.instants)
        self.first_placed_at = TimeColumn(self.instants)  # NaN: not yet
        self.ended_at = TimeColumn(self.instants)
        self.klass = array("b")  # code in KLASSES
        self.job = array("b")  # a job (it finishes) rather than a service
        self.reasons: dict[int, Counter] = {}  # a pending task's reasons from its last try (none: NO_REASONS)
        # the few tasks that move, kept apart from the columns every task pays for:
        self.moving: dict[int, tuple[int, float]] = {}  # a service stopped to move: (the node it left, when)
        self.last_move_at: dict[int, float] = {}  # when a service last moved
        self.tenants: list[str] = []
        self._tenant_code: dict[str, int] = {}
        self._live = 0

    def put(self, task: str, tenant: str, component: Component | None, unit: int, status: str, submitted_at: float,
            ended_at: float | None, klass: str, job: bool, app: Application | None = None,
            hold: bool = True) -> tuple[int, str | None]:
        """A record, new or in place of the one of the same name: (its id, the
        replaced record's status). ``app``: its application, when known;
        ``hold``: its name is held until settled (``GrowingCatalogue``)."""
        code = self._tenant_code.get(tenant)
        if code is None:
            code = self._tenant_code[tenant] = len(self.tenants)
            self.tenants.append(tenant)
            self.tenant = wide_enough(self.tenant, code)
        ended = _NONE if ended_at is None else ended_at
        i = self._find(task, app)
        if i is None:  # (column by column: this runs once per task submitted)
            i = self._add(task, app, hold)
            self.component.append(component)
            self.status.append(_CODE[status])
            self.tenant.append(code)
            self.unit.append(unit)
            self.submitted_at.append(submitted_at)
            self.first_placed_at.append(_NONE)
            self.ended_at.append(ended)
            self.klass.append(_KLASS_CODE[klass])
            self.job.append(job)
            self._live += 1
            return i, None
        old = STATUSES[self.status[i]]
        self.component[i] = component
        self.status[i], self.tenant[i], self.unit[i] = _CODE[status], code, unit
        self.submitted_at[i], self.first_placed_at[i], self.ended_at[i] = submitted_at, _NONE, ended
        self.klass[i], self.job[i] = _KLASS_CODE[klass], job
        self._clear(i)
        return i, old

    def component_of(self, i: int) -> Component | None:
        """Record ``i``'s component; read from its unit while that is kept
        as columns (an application made per site makes its components when
        read: none is kept per task)."""
        c = self.component[i]
        return self.units.lead(self.unit[i]) if c is IN_UNIT else c

    def drop(self, task: str) -> str:
        """The record goes (its row stays, marked gone); its status."""
        i = self.ids.pop(task)
        old = STATUSES[self.status[i]]
        self.status[i] = _GONE
        self.component[i] = None
        self._clear(i)
        self._live -= 1
        return old

    def _clear(self, i: int) -> None:
        self.reasons.pop(i, None)
        self.moving.pop(i, None)
        self.last_move_at.pop(i, None)

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """A scalar column as a NumPy array (a copy: the table may grow under a
        view); ``start``, ``stop``: of the ids in that range only."""
        col = getattr(self, name)
        if type(col) is TimeColumn:
            return col.numpy(start, stop)
        return np.array(col if start == 0 and stop is None else col[start:stop])

    # ------------------------------------------------------------ read as a mapping

    def __getitem__(self, task: str) -> "TaskRecord":
        return TaskRecord(self, self.ids[task])

    def get(self, task: str, default=None):
        i = self.ids.get(task)
        return default if i is None else TaskRecord(self, i)

    def __contains__(self, task: object) -> bool:
        return task in self.ids

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)  # in id order: a name keeps its first place

    def __len__(self) -> int:
        return self._live

    def values(self) -> Iterator["TaskRecord"]:  # type: ignore[override]
        return (TaskRecord(self, i) for i in self.ids.values())

    def items(self) -> Iterator[tuple[str, "TaskRecord"]]:  # type: ignore[override]
        return ((task, TaskRecord(self, i)) for task, i in self.ids.items())


def _time(col: TimeColumn, i: int) -> float | None:
    v = col[i]
    return None if v != v else v


class TaskRecord:
    """One task's record: a view of its row of the ``TaskTable``, made when read."""

    __slots__ = ("_t", "id")

    def __init__(self, table: TaskTable, i: int) -> None:
        self._t, self.id = table, i

    task = property(lambda r: r._t.names[r.id])
    status = property(lambda r: STATUSES[r._t.status[r.id]])
    tenant = property(lambda r: r._t.tenants[r._t.tenant[r.id]])
    component = property(lambda r: r._t.component_of(r.id))  # None: a trace record that never became work
    unit = property(lambda r: r._t.unit[r.id])  # -1 with no component
    submitted_at = property(lambda r: r._t.submitted_at[r.id])
    first_placed_at = property(lambda r: _time(r._t.first_placed_at, r.id))
    ended_at = property(lambda r: _time(r._t.ended_at, r.id))
    stopped_at = property(lambda r: (r._t.moving.get(r.id) or (None, None))[1])
    last_move_at = property(lambda r: r._t.last_move_at.get(r.id))
    klass = property(lambda r: KLASSES[r._t.klass[r.id]])  # the unit's workload class
    job = property(lambda r: bool(r._t.job[r.id]))
    reasons = property(lambda r: r._t.reasons.get(r.id, NO_REASONS))

    @property
    def moved_from(self) -> int | None:
        """The node a preempted service left; its next start is a move, priced from there."""
        return (self._t.moving.get(self.id) or (None, None))[0]

    def __repr__(self) -> str:
        return f"TaskRecord({self.task!r}, {self.status}, unit={self.unit})"


class UnitTable(Mapping[int, "UnitState"]):
    """Every submitted unit by id (dense: the order units were submitted), as
    columns: the unit, its class code, and a compact run's id and start; and
    by id where there is one: its run kept as an object, and the work and
    time a job has left between runs (a service has none: a city's millions
    of services keep no slot for them). A unit's state is read as a
    ``UnitState``, a view of its row made when asked for; a unit forgotten
    (its application deleted, its work ended) leaves its row empty.

    Objects are kept only for the units being decided, moved or run to an
    end. A run whose executor keeps nothing of it, of all its unit's tasks
    and with no work to count (a simulated service's: a city has millions),
    is kept as its id and its start; its ``Run`` is made when read, with
    what its unit's lead component says. Such a run's unit, when it is one
    task (one replica of one component), is kept as its application, the
    component's place in it and its task's id; its ``Unit`` is made again
    when read, and is an object again when the run stops. A simulation
    keeps such a unit so from its submission (``Ledger.submit``): while it
    waits, its pass makes it when it comes to it (``BusinessLayer.run_ids``)."""

    __slots__ = ("unit", "run", "klass", "work", "left", "comp", "task", "run_id", "run_at", "_tasks", "_live",
                 "_made_last")

    def __init__(self, tasks: TaskTable | None = None) -> None:
        # a Unit; an Application: a compact unit's; MADE: a compact unit's copy made per site, which its
        # task's id tells; a plain list until the first MADE, then sparse (a city's: a block of MADE
        # keeps no slots; a world without copies made per site reads a list at C speed)
        self.unit: list | SparseList = []
        self.run: dict[int, Run] = {}  # runs kept as objects (none, with a run id: a compact run)
        self.klass = array("b")
        self.work: dict[int, float] = {}  # a job's (see ``UnitState.remaining_work_s``)
        self.left: dict[int, float] = {}
        self.comp = array("h")  # a compact unit's component: its place in the application's (int32 past 32,767)
        self.task = array("i")  # a compact unit's task id (ids below 2^31, as the placements' columns)
        self.run_id = array("i")  # 0: no run (run ids index ``Ledger.runs``, an int32 column: below 2^31)
        self._tasks = TaskTable() if tasks is None else tasks  # the ledger's records: task names and ids
        self.run_at = TimeColumn(self._tasks.instants)  # when the run started
        self._tasks.units = self
        self._live = 0
        self._made_last: tuple = (-1, None)  # the copy made last for a MADE unit: its task's id, the copy

    def add(self, unit: Unit, klass: str, work: float | None, left: float | None) -> int:
        uid = len(self.unit)
        self.unit.append(unit)
        self.klass.append(_KLASS_CODE[klass])
        if work is not None and work == work:
            self.work[uid] = work
        if left is not None and left == left:
            self.left[uid] = left
        self.comp.append(-1)
        self.task.append(-1)
        self.run_id.append(0)
        self.run_at.append(_NONE)
        self._live += 1
        return uid

    def _app(self, uid: int):
        """The unit's entry: a ``Unit``, a compact unit's application (a copy
        made per site made again from its task's id), or None (gone)."""
        u = self.unit[uid]
        if u is MADE:
            task = self.task[uid]
            last = self._made_last
            if last[0] == task:  # (a unit is read a few times in a row)
                return last[1]
            cls, site = self._tasks.made_of(task)
            app = app_for_site(cls, site)
            self._made_last = (task, app)
            return app
        return u

    def unit_of(self, uid: int) -> Unit:
        """The unit (made again for a compact one)."""
        u = self._app(uid)
        if type(u) is Unit or u is None:
            return u
        tasks = self._tasks
        i = self.task[uid]
        comp = _component_at(u, self.comp[uid])
        name = comp.task_name(0) if comp.size == 1 else tasks.names[i]  # (no look-up of the id's run of names)
        tasks.seen(name, i)  # (placed and logged by name next)
        return Unit(u, (name,), (comp,), uid)

    def lead(self, uid: int) -> Component:
        """The unit's lead component (a compact unit's one)."""
        u = self._app(uid)
        return u.components[0] if type(u) is Unit else _component_at(u, self.comp[uid])

    def _expand(self, uid: int, unit: Unit | None = None) -> Unit:
        """A compact unit an object again (``unit``: the one the caller made of
        it), its task's component on its record."""
        if unit is None:
            unit = self.unit_of(uid)
        self._tasks.component[self.task[uid]] = unit.components[0]
        self._tasks.hold(unit.tasks[0])
        self.unit[uid], self.comp[uid], self.task[uid] = unit, -1, -1
        return unit

    def run_of(self, uid: int) -> Run | None:
        """The unit's run (made again for a compact one)."""
        run = self.run.get(uid)
        if run is not None or not self.run_id[uid]:
            return run
        unit = self.unit_of(uid)
        lead = unit.components[0]
        return Run(self.run_id[uid], unit.tasks, len(unit.tasks), self.run_at[uid], None, None, lead.efficiency,
                   lead.checkpoint_every_s if lead.stateful else None)

    def set_run(self, uid: int, run: Run | None, compact: bool = False, unit: Unit | None = None) -> None:
        """The unit runs ``run`` (None: it stops); ``compact``: its executor
        keeps nothing of it, so a plain one is kept as columns, and so is its
        unit when plain too."""
        if run is None:
            self.run.pop(uid, None)
            self.run_id[uid], self.run_at[uid] = 0, _NONE
            u = self.unit[uid]
            if u is not None and type(u) is not Unit:  # not running (MADE too): an object again
                self._expand(uid)
            return
        self.run_id[uid], self.run_at[uid] = run.run_id, run.started_at
        if unit is None:
            unit = self.unit_of(uid)
        plain = compact and _plain_run(unit, run)
        if plain:
            self.run.pop(uid, None)
        else:
            self.run[uid] = run
        u = self.unit[uid]
        if plain and u is unit:  # (a job's unit stays an object: its run ends, it goes)
            self._compact(uid, unit)
        elif not plain and type(u) is not Unit:  # a run kept as an object: so is its unit
            self._expand(uid, unit)

    def _compact(self, uid: int, unit: Unit) -> None:
        """Keep a plain unit as columns."""
        at = compact_place(unit)
        task = self._tasks.ids.get(unit.tasks[0], -1) if at >= 0 else -1
        if task < 0:
            return
        self.keep_compact(uid, unit.app, at, task)
        self._tasks.settle(unit.tasks[0])

    def keep_compact(self, uid: int, app: Application, at: int, task: int) -> None:
        """Keep unit ``uid`` as columns: ``app``'s component ``at``, task ``task``."""
        self.comp = wide_enough(self.comp, at)
        if type(app) is not Application and self._tasks.made_of(task) == (type(app), getattr(app, "site", None)):
            app = MADE  # (its task's id tells it, as long as the unit is kept so: no slot kept)
            if type(self.unit) is list:
                self.unit = SparseList(MADE, self.unit)
                self._tasks.component = SparseList(IN_UNIT, self._tasks.component)
        self.unit[uid], self.comp[uid], self.task[uid] = app, at, task
        self._tasks.component[task] = IN_UNIT

    def key_of(self, uid: int) -> tuple[str, int]:
        """A unit's tenant and priority (what orders it in a pass), without making a compact one."""
        u = self.unit[uid]
        if type(u) is Unit:
            return u.app.tenant, u.priority
        k = self.comp[uid]
        if u is MADE:
            cls = self._tasks.made_of(self.task[uid])[0]
            return cls.tenant, cls._classes[k].priority
        return u.tenant, (type(u)._classes[k] if isinstance(u, SiteApplication) else u.components[k]).priority

    def pop(self, uid: int) -> "UnitState":
        """The unit's row emptied; returns what it held (a view no longer backed: read it at once)."""
        run = self.run_of(uid)
        u = self.unit[uid]
        us = _Gone(u if u is None or type(u) is Unit else self._expand(uid), KLASSES[self.klass[uid]], run)
        if us.unit is None:
            raise KeyError(uid)
        for task in us.unit.tasks:
            self._tasks.settle(task)
        self.unit[uid] = None
        self.klass[uid] = -1  # (gone: what the lookups below read, at C speed)
        for column in (self.run, self.work, self.left):
            column.pop(uid, None)
        self.run_id[uid] = 0
        self._live -= 1
        return us

    def __getitem__(self, uid: int) -> "UnitState":
        if not 0 <= uid < len(self.klass) or self.klass[uid] < 0:
            raise KeyError(uid)
        return UnitState(self, uid)

    def get(self, uid: int, default=None):
        return UnitState(self, uid) if 0 <= uid < len(self.klass) and self.klass[uid] >= 0 else default

    def __contains__(self, uid: object) -> bool:
        return type(uid) is int and 0 <= uid < len(self.klass) and self.klass[uid] >= 0

    def __iter__(self) -> Iterator[int]:
        return (uid for uid, u in enumerate(self.unit) if u is not None)

    def __len__(self) -> int:
        return self._live


def _time_column(name: str, doc: str) -> property:
    """A float column of the ``UnitTable``, by unit where it has one, read and
    written as ``float | None`` (NaN: None, not kept)."""

    def get(us: "UnitState") -> float | None:
        return getattr(us._t, name).get(us.uid)

    def put(us: "UnitState", value: float | None) -> None:
        column = getattr(us._t, name)
        if value is None or value != value:
            column.pop(us.uid, None)
        else:
            column[us.uid] = value

    return property(get, put, doc=doc)


class UnitState:
    """One unit's state: a view of its row of the ``UnitTable``, made when read."""

    __slots__ = ("_t", "uid")

    def __init__(self, table: UnitTable, uid: int) -> None:
        self._t = table
        self.uid = uid

    klass = property(lambda s: KLASSES[s._t.klass[s.uid]])  # short/small, short/large, resident/small, resident/large
    run_id = property(lambda s: s._t.run_id[s.uid])  # 0: not running

    @property
    def unit(self) -> Unit:
        u = self._t.unit[self.uid]
        return u if type(u) is Unit else self._t.unit_of(self.uid)  # (an object, unless kept as columns)

    @property
    def run(self) -> Run | None:
        t = self._t
        r = t.run.get(self.uid)
        return r if r is not None or not t.run_id[self.uid] else t.run_of(self.uid)

    remaining_work_s = _time_column("work", "a job's task-time still to do between runs (None: not a job's)")
    remaining_s = _time_column("left", "a job's fixed seconds still to run between runs (None: none)")


@dataclass(frozen=True, slots=True)
class _Gone:
    """What a forgotten unit's row held."""

    unit: Unit
    klass: str
    run: Run | None


def compact_place(unit: Unit) -> int:
    """Where a unit kept as columns finds its one task's component in its
    application (-1: the unit is not plain enough to keep so: several tasks,
    an elastic gang, couplings, affinity, or state on the move)."""
    if (len(unit.tasks) != 1 or unit.min_members is not None or unit.couplings or unit.affinity_scope is not None
            or unit.state_sites):
        return -1
    comp, app = unit.components[0], unit.app
    if isinstance(app, SiteApplication):
        return app.place_of.get(type(comp), -1)
    return next((i for i, c in enumerate(app.components) if c is comp), -1)


def _plain_run(unit: Unit, run: Run) -> bool:
    """The run is what its unit and its start say: all the unit's tasks, no
    work or time to count, nothing restarted or exited, its speed-up and
    checkpoints its lead component's."""
    lead = unit.components[0]
    return (run.remaining_work_s is None and run.remaining_s is None and run.finish_at is None and not run.restarts
            and not run.exited and run.parallelism == len(unit.tasks) and run.efficiency == lead.efficiency
            and run.checkpoint_every_s == (lead.checkpoint_every_s if lead.stateful else None)
            and (run.tasks is unit.tasks or run.tasks == unit.tasks))


def unit_class(unit: Unit) -> str:
    """A unit's workload class: short when all its components are jobs, large when it has several tasks."""
    comps = unit.components
    jobs = sum(1 for c in comps if c.lifetime == "job")
    return _CLASSES[bool(jobs and jobs == len(comps)), len(unit.tasks) > 1]


def _add_unit(groups: dict, key, uid: int, sets: bool = True) -> None:
    """``uid`` joins ``groups[key]``: a range while its members came one after
    the other (a device's units, an application's: no int object per unit),
    then a list (``add_few``'s list and set past a few, with ``sets``)."""
    group = groups.get(key)
    if group is None:
        groups[key] = range(uid, uid + 1)
    elif type(group) is range:
        if group.stop == uid:
            groups[key] = range(group.start, uid + 1)
        elif uid not in group:
            groups[key] = [*group, uid]
            if sets and len(group) >= FEW:
                groups[key] = {*group, uid}
    elif sets:
        add_few(groups, key, uid)
    else:
        group.append(uid)


class AppUnits:
    """Each application's units by its name, in submission order (read as a
    mapping of name -> uids): a range while they came one after the other,
    else a list. The units of an application made per site
    (``SiteApplication``), while they came together, are kept as two numbers
    in arrays of its prototype (its first unit, how many), found from its
    name when asked: a million cars' applications keep no name, range or
    entry each."""

    __slots__ = ("_named", "_made", "_templates")

    def __init__(self) -> None:
        self._named: dict[str, range | list[int]] = {}
        # the class of a prototype's copies -> (its population's site ids, first unit and count per site)
        self._made: dict[type, tuple[range, array, array]] = {}
        self._templates: dict[str, list[type]] = {}  # a prototype's document -> its copies' classes

    def add(self, app: Application, uid: int) -> None:
        cls = type(app)
        if isinstance(app, SiteApplication):
            made = self._made.get(cls)
            if made is None:
                made = self._column(cls, app.site)
            sites, first, count = made
            k = app.site - sites.start
            if 0 <= k < len(sites):
                f = first[k]
                if f == -1:
                    first[k], count[k] = uid, 1
                    return
                if f >= 0 and f + count[k] == uid:
                    count[k] += 1
                    return
                if f >= 0:  # not together: a list by its name from now on
                    self._named[app.name] = range(f, f + count[k])
                    first[k] = -2
        _add_unit(self._named, app.name, uid, sets=False)

    def discard(self, name: str, uid: int) -> None:
        """``uid`` is no longer one of the units of the application ``name``
        (one listed by its name: not one made per site)."""
        got = self._named.get(name)
        if got is not None and uid in got:
            rest = [u for u in got if u != uid]
            if rest:
                self._named[name] = rest
            else:
                del self._named[name]

    def _column(self, cls: type, site: int) -> tuple:
        sites = cls._names.block_of(site)
        if sites is None:  # (a listed site's copy: by its name)
            self._made[cls] = made = (range(0), array("i"), array("i"))
            return made
        self._made[cls] = made = (sites, array("i", [-1]) * len(sites), array("i", [0]) * len(sites))
        self._templates.setdefault(cls.template, []).append(cls)
        return made

    def _find(self, name: str) -> tuple[array, array, int] | None:
        for cls, site in copies_named(self._templates, name):
            sites, first, count = self._made[cls]
            k = site - sites.start
            if 0 <= k < len(sites) and first[k] >= 0:
                return first, count, k
        return None

    def get(self, name: str, default=None):
        got = self._named.get(name)
        if got is not None or not self._templates:
            return default if got is None else got
        found = self._find(name)
        if found is None:
            return default
        first, count, k = found
        return range(first[k], first[k] + count[k])

    def pop(self, name: str, default=None):
        got = self._named.pop(name, None)
        if got is not None:
            return got
        found = self._find(name) if self._templates else None
        if found is None:
            return default
        first, count, k = found
        out = range(first[k], first[k] + count[k])
        first[k], count[k] = -1, 0
        return out

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def items(self) -> Iterator[tuple[str, range | list[int]]]:
        yield from self._named.items()
        for cls, (sites, first, count) in self._made.items():
            for k in range(len(sites)):
                if first[k] >= 0:
                    yield f"{cls.template}.{cls._names.name(sites.start + k)}", range(first[k], first[k] + count[k])

    def values(self) -> Iterator[range | list[int]]:
        return (uids for _, uids in self.items())


_NOT_OWN = (False, False, False)


class BoundUnits:
    """Site name -> the units that ran bound near it or to its data (in the
    order they started there). A site of the fleet is kept by its number: its
    units as a range (its first and stop in two columns) while they came one
    after the other, then as ``_add_unit``'s list or set; a name that was no
    site's when first seen is kept by name. A million devices' services bound
    near them keep no name, dict entry or range here (8 bytes a site: unit
    numbers below 2^31, as the ledger's other columns)."""

    __slots__ = ("_sites", "_first", "_stop", "_other")

    _MOVED = -2  # a site's units are in ``_other`` (by its number)

    def __init__(self, sites=None) -> None:
        self._sites = sites  # name -> site number (``Fleet.site_index``), or None: every name by name
        self._first, self._stop = array("i"), array("i")
        self._other: dict = {}  # name or site number -> a range, list or set (``_add_unit``'s)

    def _site(self, name: str) -> int:
        if self._sites is None or name in self._other:
            return -1
        return self._sites.get(name, -1)

    def add(self, name: str, uid: int, site: int = -1) -> None:
        """``uid`` ran bound near ``name`` (``site``: its number, when known)."""
        s = site if site >= 0 and self._sites is not None and name not in self._other else self._site(name)
        if s < 0:
            _add_unit(self._other, name, uid)
            return
        first, stop = self._first, self._stop
        if s >= len(first):
            widen((first, stop), s, -1)
        f = first[s]
        if f == self._MOVED:
            _add_unit(self._other, s, uid)
        elif f < 0:
            first[s], stop[s] = uid, uid + 1
        elif stop[s] == uid:
            stop[s] = uid + 1
        elif not f <= uid < stop[s]:  # out of order: a list from now on
            self._other[s] = range(f, stop[s])
            _add_unit(self._other, s, uid)
            first[s] = self._MOVED

    def get(self, name: str, default=None):
        s = self._site(name)
        if s < 0 or s >= len(self._first) or self._first[s] == -1:
            return self._other.get(name, default)
        f = self._first[s]
        return self._other[s] if f == self._MOVED else range(f, self._stop[s])


class Ledger:
    """The records and their transitions (see the module's text)."""

    __slots__ = ("tasks", "units", "runs", "running_seq", "by_app", "bound_to", "counts", "_run_ids")

    def __init__(self, ids: TaskIds | None = None, sites=None) -> None:
        """``sites``: site names to numbers (``Fleet.site_index``), by which
        the units bound near a site are kept."""
        self.tasks = TaskTable(ids)
        self.units = UnitTable(self.tasks)
        self.runs = array("i", (-1,))  # run id -> its unit (-1: the run has stopped); ids count from 1
        self.running_seq = array("i")  # unit -> when it last became running (its order in ``running``)
        # application -> its units, in submission order (a range while they came together)
        self.by_app = AppUnits()
        self.bound_to = BoundUnits(sites)  # site -> units that ran bound near it or to its data
        self.counts: Counter = Counter()  # status -> tasks
        self._run_ids = 0

    # ------------------------------------------------------------ submit

    def _put(self, task: str, tenant: str, component: Component | None, unit: int, status: str, t: float,
             ended_at: float | None = None, klass: str = "", job: bool = False) -> None:
        _, old = self.tasks.put(task, tenant, component, unit, status, t, ended_at, klass, job)
        if old is not None:  # a recreated application's task: its record is replaced
            self.counts[old] -= 1
        self.counts[status] += 1

    def record_ended(self, task: str, tenant: str, status: str, t: float, job: bool = False) -> None:
        """A task that ended before it became work here: one a restored control
        plane had seen end, or a trace record that cannot become work."""
        self._put(task, tenant, None, -1, status, t, ended_at=t, job=job)

    def submit(self, unit: Unit, t: float, compact: bool = False) -> int:
        """A unit and its tasks, pending; returns the unit's id (also its
        ``seq``). ``compact``: a unit of one plain task is kept as columns from
        now (``UnitTable``; made again when read), and its task's name is not
        held: a pass makes each such unit as it comes to it."""
        comps = unit.components
        klass = unit_class(unit)
        lead = next((c for c in comps if c.lifetime == "job"), None)
        uid = unit.seq = self.units.add(unit, klass, lead.work_s if lead else None, lead.duration_s if lead else None)
        self.running_seq.append(-1)
        self.by_app.add(unit.app, uid)
        tenant, put, counts, app = unit.tenant, self.tasks.put, self.counts, unit.app
        at = compact_place(unit) if compact else -1
        for task, comp in zip(unit.tasks, comps):
            i, old = put(task, tenant, comp, uid, PENDING, t, None, klass, comp.lifetime == "job", app, at < 0)
            if old is not None:  # a recreated application's task: its record is replaced
                counts[old] -= 1
                self.tasks.settle(task)  # (its name may have been held before)
            if at >= 0:
                self.units.keep_compact(uid, app, at, i)
        counts[PENDING] += len(unit.tasks)
        return uid

    def replace(self, uid: int, unit: Unit, t: float) -> int:
        """A waiting unit (not running) made again as ``unit``, the same tasks
        of another version of its application: the old unit goes, the new one
        waits (its tasks' records in place of theirs); its id."""
        if self.units[uid].run is not None:
            raise ValueError(f"unit {uid} is running: stop it first")
        old = self.units.pop(uid)
        self.by_app.discard(old.unit.app.name, uid)
        return self.submit(unit, t)

    def withdraw(self, uid: int) -> Unit:
        """A waiting unit (not running) goes with its tasks' records (an
        application scaled down); the unit it was."""
        if self.units[uid].run is not None:
            raise ValueError(f"unit {uid} is running: stop it first")
        unit = self.units.pop(uid).unit
        self.by_app.discard(unit.app.name, uid)
        for task in unit.tasks:
            if task in self.tasks:
                self.counts[self.tasks.drop(task)] -= 1
        return unit

    # ------------------------------------------------------------ runs

    @property
    def running(self) -> list[int]:
        """The units with a run, in the order they last became running (a
        scan of two columns: for the few passes that look at all of them)."""
        uids = np.flatnonzero(np.frombuffer(self.units.run_id, np.int32) > 0)
        return uids[np.argsort(np.frombuffer(self.running_seq, np.int32)[uids], kind="stable")].tolist()

    def is_running(self, uid: int) -> bool:
        return 0 <= uid < len(self.units.run_id) and self.units.run_id[uid] > 0

    def next_run_id(self) -> int:
        self._run_ids += 1
        self.runs.append(-1)
        return self._run_ids

    def unit_of_run(self, run_id: int) -> int | None:
        """The unit whose run ``run_id`` is, while that run has not stopped."""
        uid = self.runs[run_id] if 0 < run_id < len(self.runs) else -1
        return None if uid < 0 else uid

    def start(self, uid: int, run: Run, compact: bool = False, unit: Unit | None = None) -> bool:
        """The unit runs ``run``; True when it was not running before (its
        standing is counted then). ``compact``: the executor keeps nothing of
        the run (``UnitTable``). ``unit``: the unit, when the caller has made it."""
        if unit is None:
            unit = self.units.unit_of(uid)
        if unit is None:
            raise KeyError(uid)
        new = not self.units.run_id[uid]
        self.units.set_run(uid, run, compact, unit)
        self.runs[run.run_id] = uid
        if new:
            self.running_seq[uid] = run.run_id  # its place in the start order
            own = unit.app.site if isinstance(unit.app, SiteApplication) else -1
            for comp in unit.distinct_components():
                near = comp.near
                names = (near.site if near is not None else None, comp.data_source, comp.data_sink)
                mine = _NOT_OWN
                if own >= 0 and isinstance(comp, SiteComponent):  # its own site's number is known: no name read
                    p = type(comp)._proto
                    mine = (p.near is not None and p.near.site == EACH_SITE, p.data_source == EACH_SITE,
                            p.data_sink == EACH_SITE)
                for name, is_own in zip(names, mine):
                    if name is not None:
                        self.bound_to.add(name, uid, own if is_own else -1)
        return new

    def close(self, uid: int, run: Run | None = None) -> Run:
        """The unit's run (``run``, when the caller has read it) is off the books; returns it."""
        if run is None:
            run = self.units.run_of(uid)
        self.runs[run.run_id] = -1
        self.units.set_run(uid, None)
        return run

    # ------------------------------------------------------------ tasks

    def placed(self, i: int, t: float) -> None:
        """A task of a starting run (by its id) is running."""
        tab, counts = self.tasks, self.counts
        counts[STATUSES[tab.status[i]]] -= 1
        counts[RUNNING] += 1
        tab.status[i] = _RUNNING_CODE
        first = tab.first_placed_at
        if first.is_none(i):  # never placed before
            first[i] = t
        if tab.reasons:
            tab.reasons.pop(i, None)

    def ended(self, rec: TaskRecord, status: str, t: float) -> None:
        """A task stopped (``status`` pending: to run again) or ended."""
        tab, i = self.tasks, rec.id
        self.counts[STATUSES[tab.status[i]]] -= 1
        self.counts[status] += 1
        tab.status[i], tab.ended_at[i] = _CODE[status], t

    def unit_waits(self, tasks, reasons: Counter) -> None:
        """``waits`` for each of a unit's tasks, by name (no record made)."""
        ids, table = self.tasks.ids, self.tasks.reasons
        if tasks and table.get(ids[tasks[0]]) is reasons:
            return  # (a unit's tasks are told together: the same reasons again)
        if reasons is NO_REASONS:
            for task in tasks:
                table.pop(ids[task], None)
        else:
            for task in tasks:
                table[ids[task]] = reasons

    def waits(self, rec: TaskRecord, reasons: Counter) -> None:
        """A pending task's reasons for waiting, from its last try."""
        if reasons is NO_REASONS:
            self.tasks.reasons.pop(rec.id, None)
        else:
            self.tasks.reasons[rec.id] = reasons

    def stopped_to_move(self, rec: TaskRecord, node: int, t: float) -> None:
        """A service left ``node`` at ``t``: its next start is a move, priced from there."""
        self.tasks.moving[rec.id] = (node, t)

    def moved(self, rec: TaskRecord, t: float) -> None:
        self.tasks.moving.pop(rec.id, None)
        self.tasks.last_move_at[rec.id] = t

    # ------------------------------------------------------------ deletes

    def forget(self, app: str, waiting: Container[int], records: bool = True) -> None:
        """Drop what a deleted application's units hold once all of them have
        ended (none has a run, none is in ``waiting``): its records stay, with
        their times, status and class (``records`` false: they go too), but
        not its work."""
        uids = self.by_app.get(app, ())
        if any(self.units[uid].run is not None or uid in waiting for uid in uids):
            return
        for uid in self.by_app.pop(app, ()):
            for task in self.units.pop(uid).unit.tasks:
                if records:
                    self.tasks.component[self.tasks.ids[task]] = None
                elif task in self.tasks:
                    self.counts[self.tasks.drop(task)] -= 1


class LedgerView:
    """The ledger, read only, with where each running task is placed: what
    code outside the simulation may look at."""

    __slots__ = ("tasks", "units", "world", "_ledger", "_placements")

    def __init__(self, ledger: Ledger, placements: Placements, world: World) -> None:
        self.tasks: Mapping[str, TaskRecord] = MappingProxyType(ledger.tasks)
        self.units: Mapping[int, UnitState] = MappingProxyType(ledger.units)
        self.world = world
        self._ledger = ledger
        self._placements = placements

    def node_of(self, task: str) -> int:
        """The node a placed task is on."""
        return self._placements.node_of(task)

    def devices_of(self, task: str) -> list[tuple[str, str, int]]:
        """The devices a placed task holds: (kind, model, index on its node)."""
        return self._placements.devices(task)

    def running(self) -> Iterator[int]:
        """The running units, in the order they started."""
        return iter(self._ledger.running)

    def in_start_order(self, uids: Iterable[int]) -> list[int]:
        """Those of ``uids`` that are running, in the order they started."""
        running, seq = self._ledger.is_running, self._ledger.running_seq
        return sorted((u for u in uids if running(u)), key=seq.__getitem__)

    def bound_near(self, site: str) -> Collection[int]:
        """Units that ran bound near ``site`` or to its data (running or not)."""
        return self._ledger.bound_to.get(site, frozenset())

    def counts(self) -> dict[str, int]:
        """Tasks by status, every status named (kept by the transitions, not counted)."""
        c = self._ledger.counts
        return {s: c.get(s, 0) for s in STATUSES}

    def pending(self) -> Iterator[TaskRecord]:
        """The pending tasks' records, in submission order (a scan of one column: for outputs)."""
        tab = self._ledger.tasks
        return (TaskRecord(tab, i) for i in np.flatnonzero(tab.column("status") == _PENDING_CODE).tolist())

    def columns(self, start: int = 0, stop: int | None = None) -> "TaskColumns":
        """Every record as NumPy columns (copies), for reads over all tasks at
        once; ``start``, ``stop``: the records of the ids in that range."""
        tab = self._ledger.tasks

        def col(name: str) -> np.ndarray:
            return tab.column(name, start, stop)

        return TaskColumns(col("status"), col("klass"), col("tenant"), col("job") != 0, col("submitted_at"),
                           col("first_placed_at"), col("ended_at"), tuple(tab.tenants))

    def id_count(self) -> int:
        """How many ids the records have had (``columns``' full length)."""
        return len(self._ledger.tasks.status)

    def __len__(self) -> int:
        return len(self._ledger.tasks)


@dataclass(frozen=True, slots=True)
class TaskColumns:
    """The ledger's records as arrays (``LedgerView.columns``): a status code
    (an index in ``STATUSES``; -1: a record dropped), a class code (in
    ``KLASSES``), a tenant code (in ``tenants``), and times (NaN: not yet)."""

    status: np.ndarray
    klass: np.ndarray
    tenant: np.ndarray
    job: np.ndarray
    submitted_at: np.ndarray
    first_placed_at: np.ndarray
    ended_at: np.ndarray
    tenants: tuple[str, ...]

    def code(self, status: str) -> int:
        return _CODE[status]
