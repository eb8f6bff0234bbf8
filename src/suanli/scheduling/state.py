"""Placement state: the node table, each VC's host table, hosts and placements.

This is the one place allocations are written. The global layer adds hosts
(slices of nodes) and the business layer adds task placements (slices of
hosts); both go through the methods here so the tables, the tenants' usage
and the records stay consistent.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from suanli.model.work import SiteApplication, World, copies_named, layout, task_count
from suanli.scheduling.cohorts import UNLIMITED, Cohorts
from suanli.scheduling.table import Allocation, CandidateTable


class Host:
    """A slice of a node that a VC holds: a host of one of its groups, or in a
    default VC the fitted host of a node, exactly what the VC's tasks there
    take, which comes and goes with them: it counts them, and adds up what
    they hold (from the placements' columns) when asked."""

    __slots__ = ("vc", "name", "group", "node", "row", "count", "_src", "_alloc", "_none")

    def __init__(self, vc: str, name: str, group: str | None, node: int, node_alloc: Allocation,
                 row: int, src: "Placements | None" = None) -> None:
        self.vc = vc
        self.name = name
        self.group = group  # None for a default VC's fitted host
        self.node = node
        self.row = row  # row in the VC's host table (-1 for a default VC)
        self.count = 0  # a fitted host: the tasks it holds
        self._src = src  # a fitted host: the placements its tasks' allocations are read from
        self._alloc = None if src is not None else node_alloc  # None: to be added up
        self._none = node_alloc  # a fitted host's allocation with no task

    @property
    def node_alloc(self) -> Allocation:
        """What the host holds on the node table (a fitted host: its tasks' sum,
        added up when asked for, not at every task that comes or goes)."""
        if self._alloc is None:
            self._alloc = self.peek_alloc()
        return self._alloc

    def peek_alloc(self) -> Allocation:
        """``node_alloc`` without keeping the sum (a one-time read of a million hosts)."""
        if self._alloc is not None:
            return self._alloc
        return self._src.held_on(self.node, self.vc, self._none)

    def hold(self) -> None:
        """A fitted host: one more of its tasks holds a slice of its node."""
        self.count += 1
        self._alloc = None

    def release(self) -> None:
        """A fitted host: one of its tasks gave its slice back."""
        self.count -= 1
        self._alloc = None

    def __repr__(self) -> str:
        return f"Host({self.vc!r}, {self.name!r}, group={self.group!r}, node={self.node})"


class TenantRows(Mapping):
    """A tenant's row of a ``[T, R]`` table by tenant name: ``rows[name]`` is a
    view of the row (so ``rows[name] += vec`` updates the table in place);
    assigning a name writes its row. Tenants are fixed: none is added or removed."""

    __slots__ = ("_index", "_table")

    def __init__(self, index: dict[str, int], table: np.ndarray) -> None:
        self._index = index
        self._table = table

    def __getitem__(self, tenant: str) -> np.ndarray:
        return self._table[self._index[tenant]]

    def __setitem__(self, tenant: str, row: np.ndarray) -> None:
        self._table[self._index[tenant]] = row

    def __iter__(self):
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


FEW = 16  # members kept in a list while so few (a lookup or removal scans it); past that, a set


def add_few(groups: dict, key, item) -> None:
    """``item`` joins ``groups[key]``, a set of it: a list while at most ``FEW``
    (a million devices each have a few: a set of three costs 216 bytes, a
    list 88), a set past that."""
    group = groups.get(key)
    if group is None:
        groups[key] = [item]
    elif type(group) is set:
        group.add(item)
    elif item not in group:
        if len(group) < FEW:
            group.append(item)
        else:
            groups[key] = {*group, item}


CHUNK = 1 << 16


def chunked(a: np.ndarray) -> Iterator[int]:
    """The items of ``a`` as Python numbers, converted a block at a time (not
    a list of millions at once)."""
    for k in range(0, a.size, CHUNK):
        yield from a[k:k + CHUNK].tolist()


def widen(columns: tuple, i: int, fill: int) -> None:
    """Grow ``columns`` (arrays of one length) to hold index ``i``, by an
    eighth at least (1,024 entries at least), the new entries ``fill``
    (an eighth: what a million tasks' columns keep unused is 6% on average)."""
    n = len(columns[0])
    if i >= n:
        more = max(i + 1 - n, n // 8, 1024)
        for col in columns:
            col.extend(array(col.typecode, [fill]) * more)


def wide_enough(col: array, top: int) -> array:
    """``col`` (int16 codes) or, once code ``top`` passes 32,767, its int32
    copy: code columns stay narrow while a world's codes are few."""
    return array("i", col) if top > 32767 and col.typecode == "h" else col


class SparseList:
    """A list that holds ``default`` at most of its slots: blocks of 1,024
    slots, a block that holds only ``default`` not kept. Read and written by
    index, appended to. A million tasks whose slot is the default (a task
    whose name is made when read, whose component is its unit's) keep no
    8-byte slot each; a list of mostly other values costs what a list does."""

    __slots__ = ("_blocks", "_counts", "_n", "default")

    def __init__(self, default: object = None, items: Sequence = ()) -> None:
        self._blocks: list[list | None] = []
        self._counts = array("i")  # per block: how many of its slots are not the default
        self._n = 0
        self.default = default
        for value in items:
            self.append(value)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int):
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        block = self._blocks[i >> 10]
        return self.default if block is None else block[i & 1023]

    def __setitem__(self, i: int, value) -> None:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        b, k = i >> 10, i & 1023
        block = self._blocks[b]
        default = self.default
        if block is None:
            if value is default:
                return
            block = self._blocks[b] = [default] * 1024
        change = (value is not default) - (block[k] is not default)
        block[k] = value
        if change:
            left = self._counts[b] = self._counts[b] + change
            if not left:
                self._blocks[b] = None

    def append(self, value) -> None:
        i = self._n
        if not i & 1023:
            self._blocks.append(None)
            self._counts.append(0)
        self._n = i + 1
        if value is not self.default:
            self[i] = value

    def __iter__(self):
        default = self.default
        for b, block in enumerate(self._blocks):
            n = min(1024, self._n - (b << 10))
            if block is None:
                yield from (default,) * n
            else:
                yield from block[:n]


class NodeTasks:
    """The ids of the tasks on each node, as columns: per task id its node
    and its neighbours in that node's list (a list linked in arrays), per
    node its first and last and how many. A node's ids read in the order
    they came; a task is on one node at a time. A million devices with a few
    tasks each cost 12 bytes a task here (int32: ids and nodes under 2^31),
    not a list and an int object per task and a dict entry per node."""

    __slots__ = ("_on", "_next", "_prev", "_head", "_tail", "_count")

    def __init__(self) -> None:
        self._on, self._next, self._prev = array("i"), array("i"), array("i")  # per task id; -1: none
        self._head, self._tail, self._count = array("i"), array("i"), array("i")  # per node

    def add(self, node: int, i: int) -> None:
        """Task ``i`` is on ``node`` (at the end of its list; it leaves any other node's)."""
        if i >= len(self._on):
            widen((self._on, self._next, self._prev), i, -1)
        at = self._on[i]
        if at == node:
            return
        if at >= 0:
            self.discard(at, i)
        if node >= len(self._count):
            widen((self._head, self._tail), node, -1)
            widen((self._count,), node, 0)
        last = self._tail[node]
        self._on[i], self._prev[i], self._next[i] = node, last, -1
        if last >= 0:
            self._next[last] = i
        else:
            self._head[node] = i
        self._tail[node] = i
        self._count[node] += 1

    def discard(self, node: int, i: int) -> None:
        """Task ``i`` leaves ``node``, if there."""
        if i >= len(self._on) or self._on[i] != node:
            return
        prv, nxt = self._prev[i], self._next[i]
        if prv >= 0:
            self._next[prv] = nxt
        else:
            self._head[node] = nxt
        if nxt >= 0:
            self._prev[nxt] = prv
        else:
            self._tail[node] = prv
        self._on[i] = self._next[i] = self._prev[i] = -1
        self._count[node] -= 1

    def count(self, node: int) -> int:
        return self._count[node] if 0 <= node < len(self._count) else 0

    def get(self, node: int, default: Sequence[int] = ()) -> Sequence[int]:
        """The ids on ``node`` in the order they came (``default`` when none)."""
        if not self.count(node):
            return default
        out, i, nxt = [], self._head[node], self._next
        while i >= 0:
            out.append(i)
            i = nxt[i]
        return out

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, their nodes), int64, each node's ids in the order they came
        (what ``add_all`` takes back: a shard's part)."""
        on = np.frombuffer(self._on, np.int32).astype(np.int64) if len(self._on) else np.zeros(0, np.int64)
        ids = [np.asarray(self.get(int(node)), np.int64) for node in np.unique(on[on >= 0])]
        ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        return ids, on[ids]

    def add_all(self, ids: np.ndarray, nodes: np.ndarray) -> None:
        for i, node in zip(ids.tolist(), nodes.tolist()):
            self.add(node, i)


@dataclass(slots=True)
class Placement:
    task: str
    tenant: str
    vc: str
    host: Host
    alloc: Allocation  # on the VC's host table, or on the node table for a default VC


class TaskIds:
    """Task names and their ids (the order a name was first seen): whoever
    keeps columns per task (the simulator's ledger, the placements) indexes
    them by the one id, and the name is kept once. A name dropped (the
    ledger's record gone) gets a new id if it comes again."""

    __slots__ = ("ids", "names")

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []

    def find(self, name: str, app=None) -> int | None:
        return self.ids.get(name)

    def add(self, name: str, app=None, hold: bool = True) -> int:
        i = self.ids[name] = len(self.names)
        self.names.append(name)
        return i

    def get(self, name: str) -> int | None:
        return self.ids.get(name)

    def name(self, i: int) -> str:
        return self.names[i]


RECENT = 1 << 14  # names of made ids remembered since last read (two generations of this many)
FITTED_BLOCK = 1 << 18  # task ids read at once for the fitted hosts' sums (``Placements.fitted_allocs``)
FLAG_CODES = 4  # (VC, node) codes per task up to which those sums find their hosts by a flag per code, not a sort


class GrowingCatalogue:
    """Task ids in the order names are first seen, as ``TaskIds``, for a
    simulation (or a live scheduler) whose applications arrive over time. The
    tasks of an application made per site (``SiteApplication``), added in its
    order (component, then replica), keep no name: such an application's
    first id is kept per site in arrays of its prototype, and where each run
    of its ids starts (``_starts``, with the prototype's number and the
    site), so a name is made from its id when read and an id found by
    reading its name (its document, site, component and replica) when
    asked. Such a name is held from when it is added until its task is
    ``settle``d (its unit kept as columns, or gone) and the instant ends
    (``flush``): the units being decided find theirs at once; the names read
    lately are remembered too. Any other name is kept, as ``TaskIds`` keeps
    it. A name dropped gets a new id if it comes again. It reads as a mapping
    of name -> id (live names, in id order), and ``names`` as a sequence of
    every id's name."""

    __slots__ = ("_names", "_dict", "_held", "_settled", "_young", "_old", "_made", "_templates", "_classes",
                 "_starts", "_proto", "_site", "_gone", "_live", "names", "_run_read")

    def __init__(self) -> None:
        # None: a made name; a plain list (read at C speed) until the first made name, then a
        # ``SparseList`` (most of a city's names are made: no slot kept for them)
        self._names: list | SparseList = []
        self._dict: dict[str, int] = {}  # the names kept
        self._held: dict[str, int] = {}  # made names until settled
        self._settled: list[str] = []  # to let go of at the instant's end
        self._young: dict[str, int] = {}  # made names read lately (then ``_old``)
        self._old: dict[str, int] = {}
        # a prototype's copies' class -> (its population's sites, first id per site (-1: none), its tasks'
        # (start, count, component) in order, their count, its number)
        self._made: dict[type, tuple[range, array, tuple, int, int]] = {}
        self._templates: dict[str, list[type]] = {}  # a document's name -> the classes of its copies
        self._classes: list[type] = []
        self._starts = array("i")  # where each run of made ids starts; its prototype and site (ids, sites < 2^31):
        self._proto = array("i")
        self._site = array("i")
        self._gone: set[int] = set()  # made ids dropped
        self._live = 0
        self.names = _Names(self)
        self._run_read: tuple = (0, 0, None)  # ``made_of``'s last run: its ids [lo, hi) and its copy

    # ------------------------------------------------------------ add

    def add(self, name: str, app=None, hold: bool = True) -> int:
        """A new id for ``name``; ``app``: its application, when the caller has
        it. A made name is held until settled (``hold``; else it is made when
        read from the start: its task is kept as columns at once)."""
        i = len(self._names)
        if app is not None and isinstance(app, SiteApplication) and self._add_made(name, app, i, hold):
            return i
        self._dict[name] = i
        self._names.append(name)
        self._live += 1
        return i

    def _add_made(self, name: str, app, i: int, hold: bool) -> bool:
        cls = type(app)
        made = self._made.get(cls)
        if made is None:
            made = self._column(cls, app.site)
        sites, first, order, total, code = made
        k = app.site - sites.start
        if not 0 <= k < len(sites):
            return False
        f = first[k]
        if f >= 0 and (self._starts[-1] != f or i - f >= total):
            return False  # (not in its order, or another's ids came between)
        off = 0 if f < 0 else i - f
        for start, count, comp in order:
            if off < start + count:
                if name != f"{app.name}/{comp}/{off - start}":
                    return False
                break
        if f < 0:
            first[k] = i
            self._starts.append(i)
            self._proto.append(code)
            self._site.append(app.site)
            self._run_read = (0, 0, None)  # (the run before may end here now)
        if type(self._names) is list:
            self._names = SparseList(None, self._names)
        self._names.append(None)
        self._live += 1
        if hold:
            self._held[name] = i
        return True

    def _column(self, cls: type, site: int) -> tuple:
        sites = cls._names.block_of(site)
        order, start = [], 0
        for c in cls._proto.components:
            order.append((start, c.size, c.name))
            start += c.size
        code = len(self._classes)
        self._classes.append(cls)
        if sites is None:  # (a listed site's copy: its names kept)
            sites = range(0)
        made = self._made[cls] = (sites, array("i", [-1]) * len(sites), tuple(order), start, code)
        self._templates.setdefault(cls.template, []).append(cls)
        return made

    def settle(self, name: str) -> None:
        """``name``'s task is kept as columns now, or gone: its name may be
        let go of when the instant ends."""
        self._settled.append(name)

    def hold(self, name: str) -> None:
        """``name``'s task is decided again (its unit an object again): held till settled."""
        i = self.get(name)
        if i is not None and self._names[i] is None:
            self._held[name] = i

    def flush(self) -> None:
        """The instant has ended: the settled names are let go of, and so are
        the names read lately (read again in a later instant, a name is
        parsed once more; kept, the last 32,768 would stay for the run)."""
        held, settled = self._held, self._settled
        for name in settled:
            held.pop(name, None)
        if len(settled) > len(held):  # (a dict keeps its table when emptied: a right-sized copy)
            self._held = dict(held)
        settled.clear()
        if self._young or self._old:
            self._young, self._old = {}, {}

    def seen(self, name: str, i: int) -> None:
        """``name``, id ``i``, was just made from the id: while it is read again
        soon (a pass places it, then logs it) it is found without parsing."""
        if self._names[i] is None:
            self._remember(name, i)

    def _remember(self, name: str, i: int) -> None:
        young = self._young
        young[name] = i
        if len(young) >= RECENT:
            self._old, self._young = young, {}

    # ------------------------------------------------------------ read

    def get(self, name: str, default=None):
        i = self._dict.get(name)
        if i is not None or not self._made:
            return default if i is None else i
        i = self._held.get(name)
        if i is not None:
            return i
        i = self._young.get(name)
        if i is None:
            i = self._old.get(name)
            if i is None:
                i = self._parse(name)
                if i is None:
                    return default
            self._remember(name, i)
        return i

    def find(self, name: str, app=None) -> int | None:
        """``get``, told ``name``'s application: a name of an application made
        per site none of whose tasks has an id yet is not read through."""
        i = self._dict.get(name)
        if i is not None or not self._made:
            return i
        if app is not None and isinstance(app, SiteApplication):
            made = self._made.get(type(app))
            if made is None:
                return None
            sites, first, order, _, code = made
            k = app.site - sites.start
            if 0 <= k < len(sites):
                f = first[k]
                if f == -1:
                    return None
                i = self._held.get(name)
                if i is not None:
                    return i
                parts = name.rsplit("/", 2)
                if f >= 0 and len(parts) == 3 and parts[2].isdigit():
                    for start, count, c in order:
                        if c == parts[1]:  # (past what has ids: new)
                            if f + start + int(parts[2]) >= len(self._names):
                                return None
                            break
        return self.get(name)

    def _parse(self, name: object) -> int | None:
        parts = name.rsplit("/", 2) if type(name) is str else ()
        if len(parts) != 3:
            return None
        app, comp, digits = parts
        if not (digits.isascii() and digits.isdigit() and (digits == "0" or digits[0] != "0")):
            return None
        r = int(digits)
        for cls, site in copies_named(self._templates, app):
            sites, first, order, _, code = self._made[cls]
            k = site - sites.start
            if not 0 <= k < len(sites) or first[k] < 0:
                continue
            for start, count, c in order:
                if c == comp:
                    i = first[k] + start + r
                    if (r < count and i < len(self._names) and self._names[i] is None
                            and i not in self._gone and self._run_of(i) == (code, site)):
                        return i
                    break
        return None

    def _run_of(self, i: int) -> tuple[int, int]:
        b = bisect.bisect_right(self._starts, i) - 1
        return self._proto[b], self._site[b]

    def made_of(self, i: int) -> tuple[type, int] | None:
        """The class of copies and the site number of the copy whose run of
        made ids covers id ``i`` (``app_for_site`` makes the copy), or None.
        (A name not made that came within a run is covered too: a caller
        compares the answer with the application it has.)"""
        lo, hi, made = self._run_read
        if lo <= i < hi:  # (ids are read in runs: the run read last, again)
            return made
        starts = self._starts
        if not starts or i < starts[0]:
            return None
        b = bisect.bisect_right(starts, i) - 1
        cls = self._classes[self._proto[b]]
        end = starts[b] + self._made[cls][3]  # (a run is its copy's tasks at most, up to the next run)
        if b + 1 < len(starts):
            end = min(end, starts[b + 1])
        if i >= end:
            return None
        made = cls, self._site[b]
        self._run_read = (starts[b], end, made)
        return made

    def name(self, i: int) -> str:
        n = self._names[i]
        if n is not None:
            return n
        b = bisect.bisect_right(self._starts, i) - 1
        cls = self._classes[self._proto[b]]
        off = i - self._starts[b]
        for start, count, comp in self._made[cls][2]:
            if off < start + count:
                return f"{cls.template}.{cls._names.name(self._site[b])}/{comp}/{off - start}"
        raise IndexError(i)

    def _live_id(self, i: int) -> bool:
        n = self._names[i]
        return i not in self._gone if n is None else self._dict.get(n) == i

    # ------------------------------------------------------------ as a mapping

    def pop(self, name: str, *default):
        i = self._dict.pop(name, None)
        if i is None:
            i = self.get(name)
            if i is None:
                if default:
                    return default[0]
                raise KeyError(name)
            self._gone.add(i)
            self._held.pop(name, None)
            self._young.pop(name, None)
            self._old.pop(name, None)
        self._live -= 1
        return i

    def __getitem__(self, name: str) -> int:
        i = self.get(name)
        if i is None:
            raise KeyError(name)
        return i

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None

    def __len__(self) -> int:
        return self._live

    def values(self) -> Iterator[int]:
        return (i for i in range(len(self._names)) if self._live_id(i))

    def __iter__(self) -> Iterator[str]:
        return (self.name(i) for i in self.values())

    def items(self) -> Iterator[tuple[str, int]]:
        return ((self.name(i), i) for i in self.values())


class _Names(Sequence):
    """Every id's name, made when read (``GrowingCatalogue.names``)."""

    __slots__ = ("_c",)

    def __init__(self, catalogue: GrowingCatalogue) -> None:
        self._c = catalogue

    def __getitem__(self, i: int) -> str:
        return self._c.name(i)

    def __len__(self) -> int:
        return len(self._c._names)


class Catalogue:
    """Task ids in the order the world writes its tasks (application, then
    component, then replica: a static pass's output order), with a name made
    from them when read, not kept per task: what is kept is an index of the
    applications by name and where each one's ids start. A name not of the
    world's applications gets an id after theirs (kept as a name).

    ``starts``: where each application's ids start and, last, where other
    names' start, when ``apps`` are some of a larger world's (a shard's: its
    ids are the world's); by default the applications' ids follow on."""

    __slots__ = ("_apps", "_starts", "_index", "_total", "_other")

    def __init__(self, apps: Sequence, starts: np.ndarray | None = None) -> None:
        self._apps = tuple(apps)
        if starts is None:
            sizes = [task_count(app) for app in self._apps]
            starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._starts = starts
        self._total = int(self._starts[-1])
        self._index: dict[str, int] = {app.name: k for k, app in enumerate(self._apps)}
        self._other = TaskIds()

    @property
    def starts(self) -> np.ndarray:
        """Where each application's ids start; last, where other names' start."""
        return self._starts

    def get(self, name: str) -> int | None:
        parts = name.rsplit("/", 2) if type(name) is str else ()
        if len(parts) == 3:
            k = self._index.get(parts[0])
            digits = parts[2]
            if k is not None and digits.isascii() and digits.isdigit() and (digits == "0" or digits[0] != "0"):
                i, offset = int(digits), int(self._starts[k])
                for c in layout(self._apps[k]):
                    if c.name == parts[1]:
                        return offset + i if i < c.size else None
                    offset += c.size
        i = self._other.get(name)
        return None if i is None else self._total + i

    def add(self, name: str) -> int:
        i = self.get(name)
        return i if i is not None else self._total + self._other.add(name)

    def name(self, i: int) -> str:
        if i >= self._total:
            return self._other.name(i - self._total)
        k = int(np.searchsorted(self._starts, i, "right")) - 1
        offset = i - int(self._starts[k])
        app = self._apps[k]
        for c in layout(app):
            if offset < c.size:
                return f"{app.name}/{c.name}/{offset}"
            offset -= c.size
        raise IndexError(i)


class DevShares:
    """Each placed task's device shares, (slots, milli), by task id: a code
    per id (-1: none) into the few distinct pairs a world's tasks take. A
    million tasks that share a device cost 4 bytes each here, not a dict
    entry and an int object each (2 while fewer than 32,768 pairs are
    taken: int16 codes, int32 past them). Iteration is in id order."""

    __slots__ = ("_code", "_pairs", "_at", "_n")

    def __init__(self) -> None:
        self._code = array("h")
        self._pairs: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        self._at: dict[tuple, int] = {}
        self._n = 0

    def __setitem__(self, i: int, pair: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
        k = self._at.get(pair)
        if k is None:
            k = self._at[pair] = len(self._pairs)
            self._pairs.append(pair)
            self._code = wide_enough(self._code, k)
        if i >= len(self._code):
            widen((self._code,), i, -1)
        if self._code[i] < 0:
            self._n += 1
        self._code[i] = k

    def get(self, i: int, default=None):
        k = self._code[i] if i < len(self._code) else -1
        return self._pairs[k] if k >= 0 else default

    def __getitem__(self, i: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        got = self.get(i)
        if got is None:
            raise KeyError(i)
        return got

    def pop(self, i: int, default=None):
        got = self.get(i)
        if got is None:
            return default
        self._code[i] = -1
        self._n -= 1
        return got

    def ids(self) -> np.ndarray:
        """int64: the ids with shares, ascending."""
        if not self._n:
            return np.zeros(0, np.int64)
        return np.flatnonzero(np.frombuffer(self._code, np.int16 if self._code.typecode == "h" else np.int32) >= 0)

    def __iter__(self) -> Iterator[int]:
        return chunked(self.ids())

    def items(self) -> Iterator[tuple[int, tuple]]:
        pairs, code = self._pairs, self._code
        return ((i, pairs[code[i]]) for i in self)

    def __len__(self) -> int:
        return self._n


class Placements(Mapping):
    """The placed tasks, by name, as columns indexed by task id: per task its
    tenant, VC, row (-1: not placed) and resource vector (interned: a world's
    tasks ask for few distinct vectors), device shares only where it has some.
    A ``Placement`` is made when one is read, not kept per task; its host is
    the VC's host at that row (a default VC's fitted host of the node).
    Iteration is in task id order."""

    __slots__ = ("_state", "_ids", "_n", "_tenant", "_vc", "_row", "_vec", "_dev",
                 "_vc_names", "_vc_at", "_vecs", "_vec_at")

    def __init__(self, state: "PlacementState", ids: "TaskIds | Catalogue") -> None:
        self._state = state
        self._ids = ids
        self._n = 0  # tasks placed
        # codes of tenants, VCs and vectors: int16 while each is below 32,768 (``codes_fit``), else int32
        self._tenant = np.zeros(16, np.int16)
        self._vc = np.zeros(16, np.int16)
        self._row = np.full(16, -1, np.int32)
        self._vec = np.zeros(16, np.int16)
        self._dev = DevShares()  # id -> (slots, milli)
        self._vc_names: list[str] = []
        self._vc_at: dict[str, int] = {}
        self._vecs: list[np.ndarray] = []
        self._vec_at: dict[bytes, int] = {}

    def add(self, task: str, tenant: int, vc: str, a: Allocation) -> int:
        """Record ``task`` placed with ``a`` by tenant index ``tenant`` in VC ``vc``; its id."""
        i = self._ids.get(task)
        if i is None:
            i = self._ids.add(task)
        if i >= self._row.size:
            self._widen(i + 1)
        if self._row[i] < 0:
            self._n += 1
        v = self._vc_at.get(vc)
        if v is None:
            v = self._vc_at[vc] = len(self._vc_names)
            self._vc_names.append(vc)
        key = a.vec.tobytes()
        k = self._vec_at.get(key)
        if k is None:
            k = self._vec_at[key] = len(self._vecs)
            vec = a.vec.copy()
            vec.setflags(write=False)
            self._vecs.append(vec)
        if (tenant | v | k) > 32767:
            self.codes_fit(max(tenant, v, k))
        self._tenant[i] = tenant
        self._vc[i] = v
        self._row[i] = a.row
        self._vec[i] = k
        if a.slots:
            self._dev[i] = (a.slots, a.milli)
        else:
            self._dev.pop(i, None)
        return i

    def codes_fit(self, top: int) -> None:
        """The code columns (tenant, VC, vector) wide enough for code ``top``:
        int16 until a code passes 32,767, int32 from then on."""
        if top > 32767 and self._vc.dtype != np.int32:
            for name in ("_tenant", "_vc", "_vec"):
                setattr(self, name, getattr(self, name).astype(np.int32))

    def _widen(self, top: int) -> None:
        """Columns long enough for ids below ``top``: an eighth more at least (``widen``)."""
        size = self._row.size
        n = max(top, size + size // 8, 1024)
        for name in ("_tenant", "_vc", "_row", "_vec"):
            old = getattr(self, name)
            new = np.full(n, -1, old.dtype) if name == "_row" else np.zeros(n, old.dtype)
            new[:old.size] = old
            setattr(self, name, new)

    def _id(self, task: object) -> int:
        """The task's id when it is placed, else -1."""
        i = self._ids.get(task)
        return i if i is not None and i < self._row.size and self._row[i] >= 0 else -1

    def _host(self, i: int) -> tuple["VCState", int, "Host"]:
        """Task ``i``'s VC, row and host."""
        vc = self._state.vcs[self._vc_names[self._vc[i]]]
        row = int(self._row[i])
        return vc, row, (vc.by_node[row] if vc.default else vc.by_row[row])

    def _make(self, task: str, i: int) -> Placement:
        vc, row, host = self._host(i)
        dev = self._dev.get(i)
        vec = self._vecs[self._vec[i]]
        a = Allocation(row, vec, dev[0], dev[1]) if dev is not None else Allocation(row, vec)
        return Placement(task, self._state.tenant_names[self._tenant[i]], vc.name, host, a)

    def host_of(self, task: str) -> tuple[str, "Host"]:
        """A placed task's VC (by name) and host, without its placement made."""
        i = self._id(task)
        if i < 0:
            raise KeyError(task)
        vc, _, host = self._host(i)
        return vc.name, host

    def devices(self, task: str) -> list[tuple[str, str, int]]:
        """The devices a placed task holds: (kind, model, index on its node), by index."""
        p = self[task]
        fleet, table, a = self._state.fleet, self._state.vcs[p.vc].table, p.alloc
        return sorted((fleet.kinds.names[int(table.dev_kind[slot, a.row])],
                       fleet.models.names[int(table.dev_model[slot, a.row])], int(table.dev_index[slot, a.row]))
                      for slot in a.slots)

    def __getitem__(self, task: str) -> Placement:
        i = self._id(task)
        if i < 0:
            raise KeyError(task)
        return self._make(task, i)

    def get(self, task: str, default=None):
        i = self._id(task)
        return default if i < 0 else self._make(task, i)

    def __contains__(self, task: object) -> bool:
        return self._id(task) >= 0

    def _placed(self) -> Iterator[int]:
        return chunked(np.flatnonzero(self._row >= 0))

    def __iter__(self):
        name = self._ids.name
        return (name(i) for i in self._placed())

    def __len__(self) -> int:
        return self._n

    def values(self):
        make, name = self._make, self._ids.name
        return (make(name(i), i) for i in self._placed())

    def items(self):
        make, name = self._make, self._ids.name
        return ((task, make(task, i)) for task, i in ((name(i), i) for i in self._placed()))

    def node_of(self, task: str) -> int:
        """The node ``task`` runs on (no ``Placement`` made)."""
        i = self._id(task)
        if i < 0:
            raise KeyError(task)
        vc = self._state.vcs[self._vc_names[self._vc[i]]]
        row = int(self._row[i])
        return row if vc.default else vc.by_row[row].node

    def nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, nodes): every placed task's id, in id order, and the node it is on."""
        ids = np.flatnonzero(self._row >= 0)
        rows, vcs = self._row[ids], self._vc[ids]
        nodes = rows.copy()
        for v in np.unique(vcs).tolist():
            vc = self._state.vcs[self._vc_names[v]]
            if not vc.default:  # a host table's row: the node under it
                on = vcs == v
                nodes[on] = vc.table.node[rows[on]]
        return ids, nodes

    def used_by(self, groups: np.ndarray, n: int, default_only: bool = False) -> np.ndarray:
        """int64[n, R]: what the placed tasks take, summed by ``groups[node]``
        of the node each is on (one array pass, no ``Placement`` made);
        ``default_only``: of default VCs' tasks only (what their fitted hosts hold)."""
        ids, nodes = self.nodes()
        if default_only:
            keep = self._of_default(ids)
            ids, nodes = ids[keep], nodes[keep]
        out = np.zeros((n, self._state.used.shape[1]), np.int64)
        if not ids.size:
            return out
        k = len(self._vecs)
        counts = np.bincount(groups[nodes].astype(np.int64) * k + self._vec[ids], minlength=n * k).reshape(n, k)
        vecs = np.array(self._vecs, np.int64)
        for g, j in zip(*np.nonzero(counts)):
            out[g] += counts[g, j] * vecs[j]
        return out

    def _of_default(self, ids: np.ndarray) -> np.ndarray:
        """bool[len(ids)]: which of the placed tasks ``ids`` are a default VC's."""
        default = self._default_vcs()
        return default[self._vc[ids]] if default.size else np.zeros(ids.size, bool)

    def _default_vcs(self) -> np.ndarray:
        """bool[VC code]: which of the VCs placed into are default VCs."""
        return np.array([self._state.vcs[name].default for name in self._vc_names], bool)

    def _default_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The placed tasks of default VCs, a block of ids at a time (``FITTED_BLOCK``):
        their ids and rows."""
        default = self._default_vcs()
        if not default.any():
            return
        row, vc = self._row, self._vc
        for start in range(0, row.size, FITTED_BLOCK):
            rows = row[start:start + FITTED_BLOCK]
            at = np.flatnonzero(rows >= 0)
            at = at[default[vc[start:start + FITTED_BLOCK][at]]]
            if at.size:
                yield at + start, rows[at]

    def fitted_allocs(self) -> "FittedAllocs":
        """What every default VC's fitted host holds, by (VC, node): its tasks'
        slices added up, for all of them in passes over the columns (an output
        of every host), not host by host. The columns are read a block of ids
        at a time: a city's millions of tasks make no temporary as long as
        they are, and the sums come out the same."""
        count, span = 0, 0
        for ids, rows in self._default_blocks():
            count, span = count + ids.size, max(span, int(rows.max()) + 1)
        if not count:
            return FittedAllocs(np.zeros(0, np.int64), np.zeros((0, 0), np.int64), np.zeros(0, np.int64), {}, {},
                                {}, 1)

        def codes_of(ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
            codes = self._vc[ids].astype(np.int64)
            codes *= span
            codes += rows
            return codes

        size = len(self._vc_names) * span
        if size <= FLAG_CODES * count:  # (a city's: a flag per (VC, node) code, no sort)
            present = np.zeros(size, bool)
            for ids, rows in self._default_blocks():
                present[codes_of(ids, rows)] = True
            hosts = np.flatnonzero(present)
            del present
        else:
            hosts = np.unique(np.concatenate([np.unique(codes_of(ids, rows))
                                              for ids, rows in self._default_blocks()]))
        vecs = np.array(self._vecs, np.int64)
        used = np.flatnonzero(vecs.any(axis=0)).tolist()
        sums = np.zeros((hosts.size, vecs.shape[1]), np.int64)
        top = float(np.abs(vecs).max(initial=0))
        for ids, rows in self._default_blocks():
            host_of = np.searchsorted(hosts, codes_of(ids, rows))
            vec_of = self._vec[ids]
            exact = top * ids.size < 2.0 ** 53  # float sums of integers, exact below
            for r in used:  # a resource at a time: no [tasks, R] array
                col = vecs[:, r][vec_of]
                if exact:
                    sums[:, r] += np.bincount(host_of, weights=col.astype(np.float64),
                                              minlength=hosts.size).astype(np.int64)
                else:
                    np.add.at(sums[:, r], host_of, col)
        # device shares: a host's one task that has some (most hosts: a device's), or their sums by slot
        one = np.full(hosts.size, -1, np.int64)
        shares: dict[int, dict[int, int]] = {}
        if self._dev:
            dev = self._dev.ids()
            rows = self._row[dev]
            mine = rows >= 0
            mine[mine] = self._of_default(dev[mine])  # (a task of another VC's host has its shares there)
            dev, of = dev[mine], np.searchsorted(hosts, codes_of(dev[mine], rows[mine]))
            alone = np.bincount(of, minlength=hosts.size)[of] == 1
            one[of[alone]] = dev[alone]
            for i, h in zip(dev[~alone].tolist(), of[~alone].tolist()):
                _add_shares(shares.setdefault(h, {}), self._dev[i])
        return FittedAllocs(hosts, sums, one, shares, self._dev, self._vc_at, span)

    def held_on(self, node: int, vc: str, none: Allocation) -> Allocation:
        """``none`` plus the allocations of ``vc``'s tasks on ``node`` (a default
        VC's fitted host there): vectors added, shares added per device slot,
        slots in order, the ones left with no share dropped."""
        vec = none.vec.copy()
        shares: dict[int, int] = {}
        v = self._vc_at.get(vc)
        vcs, vecs, devs = self._vc, self._vecs, self._dev
        for i in self._state.tasks_on_node.get(node, ()):
            if vcs[i] != v:
                continue
            vec += vecs[self._vec[i]]
            dev = devs.get(i)
            if dev is not None:
                _add_shares(shares, dev)
        return _summed(none.row, vec, shares)

    def pop(self, task: str) -> Placement:
        i = self._id(task)
        if i < 0:
            raise KeyError(task)
        p = self._make(task, i)
        self._row[i] = -1
        self._dev.pop(i, None)
        self._n -= 1
        return p


class Hosts:
    """A VC's hosts in the order they were added; adding and removing one is O(1)
    (a fleet-wide default VC holds a host per node in use)."""

    __slots__ = ("_by_id",)

    def __init__(self, hosts=()) -> None:
        self._by_id: dict[int, Host] = {id(h): h for h in hosts}

    def append(self, host: Host) -> None:
        self._by_id[id(host)] = host

    def remove(self, host: Host) -> None:
        del self._by_id[id(host)]

    def __contains__(self, host: object) -> bool:
        return self._by_id.get(id(host)) is host

    def __iter__(self):
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)

    def __getitem__(self, i: int) -> Host:
        return list(self._by_id.values())[i]

    def some(self, k: int) -> list[Host]:
        """Up to ``k`` hosts, the earliest added first (without listing them all)."""
        out = []
        for h in self._by_id.values():
            if len(out) == k:
                break
            out.append(h)
        return out

    def __bool__(self) -> bool:
        return bool(self._by_id)


class FittedHost(Host):
    """A default VC's fitted host as read from its VC's columns
    (``FittedHosts``): its name and count are read through them, and holding
    or releasing a task writes there; what it holds is added up each time it
    is asked for. Two reads of one host are equal. (Made at every read of a
    placement: it sets three slots, the rest read through.)"""

    __slots__ = ("_of", "_number")

    group, row = None, -1  # (class attributes over Host's slots: a fitted host's are these)

    def __init__(self, of: "FittedHosts", node: int, number: int) -> None:  # (not Host's: nothing kept here)
        self.node, self._of, self._number = node, of, number

    vc = property(lambda h: h._of.vc)
    name = property(lambda h: f"auto-{h._number}")
    count = property(lambda h: h._of.count_on(h.node))
    node_alloc = property(lambda h: h.peek_alloc())

    def peek_alloc(self) -> Allocation:
        of = self._of
        return of.src.held_on(self.node, of.vc, Allocation(self.node, _zeros(of.r)))

    def hold(self) -> None:
        self._of.hold(self.node)

    def release(self) -> None:
        self._of.release(self.node)

    def __eq__(self, other: object) -> bool:
        return type(other) is FittedHost and other._of is self._of and other._number == self._number

    def __hash__(self) -> int:
        return hash((self._of.vc, self._number))


class FittedHosts:
    """A default VC's fitted hosts, one on each node its tasks are on: per
    node the number in the host's name (``auto-N``) and how many of the VC's
    tasks it holds, in a dict while the VC's hosts are few for the nodes they
    span, then as two int32 columns over the nodes (a city's one tenant with a
    host on each of a million devices: 8 bytes a node, not a host, an empty
    allocation, a name and two dict entries, about 320 bytes; ten thousand
    tenants on a few nodes each: no column a fleet long each). A
    ``FittedHost`` is made when one is read. They read in the order they were
    made (their numbers ascending: a log of (node, number) in that order, its
    dead entries skipped), as ``Hosts`` does; adding and removing one is O(1)."""

    __slots__ = ("vc", "r", "src", "_few", "_top", "_number", "_count", "_log_node", "_log_number", "_front", "_n",
                 "_last", "by_node")

    DENSE = 12  # columns once the hosts are more than 1 in DENSE of the nodes up to the highest ...
    DENSE_FROM = 64  # ... and more than this many

    def __init__(self, vc: str, r: int, src: "Placements | None" = None) -> None:
        self.vc, self.r, self.src = vc, r, src
        self._few: dict[int, list[int]] | None = {}  # node -> [number, count] (None: the columns hold them)
        self._top = -1  # the highest node a host was made on while in the dict
        self._number, self._count = array("i"), array("i")  # per node, once dense; -1: no host
        self._log_node, self._log_number = array("i"), array("i")  # the hosts made, in order
        self._front = 0  # the log's entries before it are all dead
        self._n = 0
        self._last: FittedHost | None = None  # the host read last (a placement is read a few times in a row)
        self.by_node = _FittedByNode(self)

    def _live(self, k: int) -> bool:
        return self.number_of(self._log_node[k]) == self._log_number[k]

    def number_of(self, node: int) -> int:
        few = self._few
        if few is not None:
            got = few.get(node)
            return -1 if got is None else got[0]
        return self._number[node] if 0 <= node < len(self._number) else -1

    def count_on(self, node: int) -> int:
        few = self._few
        if few is not None:
            got = few.get(node)
            return 0 if got is None else got[1]
        return self._count[node] if self.number_of(node) >= 0 else 0

    def at(self, node: int) -> FittedHost | None:
        number = self.number_of(node)
        if number < 0:
            return None
        last = self._last
        if last is not None and last.node == node and last._number == number:
            return last
        last = self._last = FittedHost(self, node, number)
        return last

    def add(self, node: int, number: int) -> FittedHost:
        """A new host on ``node`` named ``auto-{number}`` (the greatest yet), holding nothing."""
        few = self._few
        if few is not None:
            few[node] = [number, 0]
            if node > self._top:
                self._top = node
            if len(few) > self.DENSE_FROM and len(few) * self.DENSE > self._top:
                self._dense()
        else:
            if node >= len(self._number):
                widen((self._number,), node, -1)
                widen((self._count,), node, 0)
            self._number[node], self._count[node] = number, 0
        self._log_node.append(node)
        self._log_number.append(number)
        self._n += 1
        return FittedHost(self, node, number)

    def _dense(self) -> None:
        few, self._few = self._few, None
        top = max(few) + 1
        self._number = array("i", [-1]) * (top + max(top // 4, 1024))
        self._count = array("i", [0]) * len(self._number)
        for node, (number, count) in few.items():
            self._number[node], self._count[node] = number, count

    def hold(self, node: int) -> None:
        if self._few is not None:
            self._few[node][1] += 1
        else:
            self._count[node] += 1

    def release(self, node: int) -> None:
        if self._few is not None:
            self._few[node][1] -= 1
        else:
            self._count[node] -= 1

    def remove(self, host: Host) -> None:
        node = host.node
        if self.number_of(node) < 0:
            raise KeyError(host)
        if self._few is not None:
            del self._few[node]
        else:
            self._number[node], self._count[node] = -1, 0
        self._n -= 1
        if len(self._log_node) > 2 * self._n + 1024:  # dead entries outnumber the live: the log written again
            keep = [k for k in range(self._front, len(self._log_node)) if self._live(k)]
            self._log_node = array("i", [self._log_node[k] for k in keep])
            self._log_number = array("i", [self._log_number[k] for k in keep])
            self._front = 0

    def _made(self) -> tuple[np.ndarray, np.ndarray]:
        """(nodes int64, numbers int32) of the hosts in the order they were made."""
        nodes = np.frombuffer(self._log_node, np.int32)[self._front:].astype(np.int64) \
            if len(self._log_node) else np.zeros(0, np.int64)
        if not nodes.size:
            return nodes, np.zeros(0, np.int32)
        numbers = np.frombuffer(self._log_number, np.int32)[self._front:]
        if self._few is not None:
            few = self._few
            current = np.array([few.get(n, (-1,))[0] for n in nodes.tolist()], np.int64)
        else:
            current = np.frombuffer(self._number, np.int32)[nodes]
        live = current == numbers
        return nodes[live], numbers[live]

    def nodes(self) -> np.ndarray:
        """int64: the hosts' nodes, in the order they were made."""
        return self._made()[0]

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(nodes, counts) int64 of the hosts in the order they were made."""
        nodes = self.nodes()
        if self._few is not None:
            return nodes, np.array([self._few[n][1] for n in nodes.tolist()], np.int64)
        return nodes, np.frombuffer(self._count, np.int32)[nodes].astype(np.int64)

    def renumber(self, nodes: np.ndarray, counts: np.ndarray) -> None:
        """Exactly these hosts, named ``auto-0`` ... in this order, holding ``counts`` tasks."""
        self._few, self._top, self._number, self._count = {}, -1, array("i"), array("i")
        self._log_node, self._log_number, self._front, self._n = array("i"), array("i"), 0, 0
        for i, (node, count) in enumerate(zip(nodes.tolist(), counts.tolist())):
            self.add(node, i)
            if self._few is not None:
                self._few[node][1] = count
            else:
                self._count[node] = count

    def __iter__(self):
        """The hosts there are now, in the order they were made, each made as
        it is read (a million cars' hosts are not held at once)."""
        nodes, numbers = self._made()
        return (FittedHost(self, node, number) for node, number in zip(chunked(nodes), chunked(numbers)))

    def some(self, k: int) -> list[Host]:
        """Up to ``k`` hosts, the earliest made first (without listing them all)."""
        while self._front < len(self._log_node) and not self._live(self._front):
            self._front += 1  # (an entry once dead stays so: numbers are not used again)
        out, i = [], self._front
        while len(out) < k and i < len(self._log_node):
            if self._live(i):
                node = self._log_node[i]
                out.append(FittedHost(self, node, self._log_number[i]))
            i += 1
        return out

    def __getitem__(self, i: int) -> Host:
        return list(self)[i]

    def __contains__(self, host: object) -> bool:
        return type(host) is FittedHost and host.vc == self.vc and self.number_of(host.node) == host._number

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0


class _FittedByNode:
    """A default VC's fitted hosts by node (``VCState.by_node``), read from its columns."""

    __slots__ = ("_of",)

    def __init__(self, of: FittedHosts) -> None:
        self._of = of

    def get(self, node: int, default=None):
        host = self._of.at(node)
        return default if host is None else host

    def __getitem__(self, node: int) -> FittedHost:
        host = self._of.at(node)
        if host is None:
            raise KeyError(node)
        return host

    def __contains__(self, node: object) -> bool:
        return isinstance(node, (int, np.integer)) and self._of.number_of(int(node)) >= 0

    def __iter__(self):
        return chunked(self._of.nodes())

    def __len__(self) -> int:
        return len(self._of)


@dataclass
class VCState:
    name: str
    tenant: str
    default: bool
    table: CandidateTable
    hosts: "Hosts | FittedHosts" = field(default_factory=Hosts)  # a default VC's: ``FittedHosts``
    component: int = -1  # the network component its hosts are in; -1 before the first
    together: bool = False  # all its hosts were found in ``component`` (not only its latest host)
    group_domain: dict[str, int] = field(default_factory=dict)  # coupled group -> its domain code
    by_node: "_FittedByNode | None" = None  # default VC: the fitted host per node (read from ``hosts``)
    by_row: dict[int, Host] = field(default_factory=dict)  # host-table row -> host
    next_index: dict[str | None, int] = field(default_factory=dict)  # per group: names are never reused

    def __post_init__(self) -> None:
        if self.default and not isinstance(self.hosts, FittedHosts):
            self.hosts = FittedHosts(self.name, self.table.cap.shape[0])
        if self.default:
            self.by_node = self.hosts.by_node

    def new_name(self, group: str | None) -> str:
        index = self.new_number(group)
        return f"{group}-{index}" if group is not None else f"auto-{index}"

    def new_number(self, group: str | None) -> int:
        index = self.next_index.get(group, 0)
        self.next_index[group] = index + 1
        return index

    def group_size(self, group: str) -> int:
        return sum(1 for h in self.hosts if h.group == group)


class PlacementState:
    def __init__(self, world: World, task_ids: TaskIds | None = None) -> None:
        """``task_ids``: the ids the placements' columns are indexed by (the
        simulator's ledger's, shared); default: the world's applications'
        tasks in the order written (``Catalogue``)."""
        self.world = world
        self.fleet = world.fleet
        self.nodes = CandidateTable.from_fleet(world.fleet)
        r = len(self.fleet.resources)
        self.total = self.fleet.total_capacity().astype(np.int64)
        # per tenant, by its index: what it holds and its quota, int64 [T, R]
        self.tenant_index: dict[str, int] = {t: i for i, t in enumerate(world.tenants)}
        self.tenant_names: list[str] = list(self.tenant_index)
        self.used = np.zeros((len(self.tenant_index), r), np.int64)
        self.quota_table = np.array([self._quota_vector(t) for t in world.tenants], np.int64).reshape(-1, r)
        self.weights = np.array([float(t.weight) for t in world.tenants.values()], np.float64)
        self.tenant_used = TenantRows(self.tenant_index, self.used)
        self.quota = TenantRows(self.tenant_index, self.quota_table)
        self._cohorts()
        self.vcs: dict[str, VCState] = {}
        for vc in world.vcs.values():
            table = self.nodes if vc.default else CandidateTable(r, self.fleet.max_devices)
            self.vcs[vc.name] = VCState(vc.name, vc.tenant, vc.default, table)
        self.task_ids = Catalogue(world.apps) if task_ids is None else task_ids
        self.placements = Placements(self, self.task_ids)  # by task name
        for vcs in self.vcs.values():
            if vcs.default:
                vcs.hosts.src = self.placements  # (what a fitted host's tasks hold is read there)
        self.tasks_on_node = NodeTasks()  # the ids of the tasks on each node
        self._component_masks: dict[tuple, tuple] = {}
        # host changes not yet reported, when someone reports them (the simulator):
        # (kind, VC, host name) -> host; a host added and removed before a report cancels out
        self.journal: dict[tuple[str, str, str], Host] | None = None

    def _note(self, kind: str, host: Host) -> None:
        if self.journal is None:
            return
        if kind == "hostRemoved" and self.journal.pop(("hostAdded", host.vc, host.name), None) is not None:
            return  # never reported: a rolled-back growth
        self.journal[(kind, host.vc, host.name)] = host

    def _column(self, key: str) -> int | None:
        """A quota key's resource column; None when no node has that kind."""
        col = {"cpu": 0, "memory": 1}.get(key)
        if col is None:
            k = self.fleet.kinds.get(key)
            return None if k < 0 else 2 + k
        return col

    def _quota_vector(self, tenant: str) -> np.ndarray:
        vec = np.full(len(self.fleet.resources), UNLIMITED, np.int64)
        for key, value in self.world.tenants[tenant].quota.items():
            col = self._column(key)
            if col is not None:
                vec[col] = value
        return vec

    def _cohorts(self) -> None:
        """The cohorts' arrays, read again from the tenants (at start, and
        when a tenant is added, changed or removed)."""
        self.cohorts = Cohorts(self.world.tenants, self.tenant_index, self.quota_table, self._column)

    def charge(self, tenant: str, vec: np.ndarray, stmt) -> None:
        """Add ``vec`` (negative: give back) to the tenant's usage tentatively,
        recorded in statement ``stmt``."""
        row = self.used[self.tenant_index[tenant]]
        row += vec
        stmt.did(lambda: row.__isub__(vec))

    def quota_left(self, tenant: str, extra: np.ndarray | None = None) -> np.ndarray:
        """What ``tenant`` may still add under its quota, per resource, with
        ``extra`` added first (tentative placements): in a cohort, with what
        the cohort lends and within its borrowing limit (``cohorts``)."""
        return self.cohorts.left(self.used, self.tenant_index[tenant], extra)

    def component_mask(self, table: CandidateTable, component: int) -> np.ndarray | None:
        """bool[N]: rows whose site is in network component ``component``; None when
        that is every row (cached)."""
        network = self.fleet.network
        key = (id(table), component)  # (one mask each: a stale one, a million rows, is replaced, not kept)
        now = (table.version, table.n, id(network), network.labelled)
        hit = self._component_masks.get(key)
        if hit is None or hit[0] != now:
            if hit is None and len(self._component_masks) > 64:
                self._component_masks.clear()
            mask = network.component[table.view("site")] == component
            hit = self._component_masks[key] = (now, None if mask.all() else mask, network)
        return hit[1]

    def forget_network(self, sites: "set[int] | None" = None) -> None:
        """The network changed: cached reachability masks are stale, and each
        VC's component is read again from its hosts. A VC whose hosts a
        partition split has none until it heals (or until its next host).
        ``sites``: only these sites' paths changed (devices with one link,
        which join or split no one else): a default VC whose hosts were
        together is read at one host and at its hosts on those sites only.
        (Reachability masks are keyed on the labels' changes: those of a
        device handed over within its part stay.)"""
        component = self.fleet.network.component
        node_site = self.fleet.node_site
        for vc in self.vcs.values():
            if not vc.hosts:
                vc.component = -1
                continue
            if sites is not None and vc.default and vc.together and vc.component >= 0 and self._together(vc, sites):
                continue
            if vc.default:  # a fitted host per node
                nodes = vc.hosts.nodes()
            else:
                nodes = np.fromiter((h.node for h in vc.hosts), np.int64, len(vc.hosts))
            comps = component[node_site[nodes]]
            first = comps[0]
            vc.together = bool((comps == first).all())
            vc.component = int(first) if vc.together else -1

    def _together(self, vc: VCState, sites: "set[int]") -> bool:
        """For a default VC whose hosts were in one component, after paths
        changed at ``sites`` only: sets its component from a host elsewhere
        (their labels may be renumbered, not split) and says whether its hosts
        on ``sites`` are in it too; False when every host is on ``sites`` (read them all)."""
        component, node_site = self.fleet.network.component, self.fleet.node_site
        on = [vc.by_node[int(n)] for s in sites for n in self.fleet.nodes_of(s) if int(n) in vc.by_node]
        if len(on) == len(vc.hosts):
            return False
        mine = {id(h) for h in on}
        other = next(h for h in vc.hosts.some(len(on) + 1) if id(h) not in mine)
        c = int(component[node_site[other.node]])
        if any(int(component[node_site[h.node]]) != c for h in on):
            return False
        vc.component = c
        return True

    def dominant_share(self, tenant: str) -> float:
        """One tenant's weighted dominant share: its largest fraction of any
        resource of the fleet, divided by its weight."""
        return self.share_of(tenant, self.used[self.tenant_index[tenant]])

    def dominant_shares(self, rows: np.ndarray | None = None) -> np.ndarray:
        """float[T] (or float[len(rows)] for the tenant indices ``rows``): the
        weighted dominant shares of many tenants in one array operation, the
        same values as ``dominant_share`` of each."""
        used = self.used if rows is None else self.used[rows]
        weights = self.weights if rows is None else self.weights[rows]
        share = used / np.maximum(self.total, 1)
        return np.maximum.reduce(share, axis=1, initial=0.0) / weights  # (``max`` without its wrapper)

    def share_by_tenant(self) -> dict[str, float]:
        """Every tenant's weighted dominant share by name (one array operation)."""
        return dict(zip(self.tenant_index, self.dominant_shares().tolist()))

    # ------------------------------------------------------------ hosts

    def add_host(self, vc: VCState, group: str | None, a: Allocation) -> Host:
        """Record a host holding allocation ``a`` of the node table (already taken)."""
        node = int(self.nodes.node[a.row])
        name = vc.new_name(group)
        row = -1
        if not vc.default:
            row = vc.table.append_row(self.nodes, a.row, a.vec, a.slots, a.milli)
        host = Host(vc.name, name, group, node, a, row)
        vc.hosts.append(host)
        if row >= 0:
            vc.by_row[row] = host
        self.tenant_used[vc.tenant] += a.vec
        if vc.component < 0:
            vc.component = int(self.fleet.network.component[self.nodes.site[a.row]])
            vc.together = len(vc.hosts) == 1
        self._note("hostAdded", host)
        return host

    def remove_host(self, vc: VCState, host: Host) -> None:
        """Remove a host nothing runs on (a rolled-back growth, an idle host, a
        host on a failed node that moved)."""
        vc.hosts.remove(host)
        vc.by_row.pop(host.row, None)
        last = vc.next_index.get(host.group, 0) - 1
        unseen = self.journal is None or ("hostAdded", host.vc, host.name) in self.journal
        if unseen and host.name == (f"{host.group}-{last}" if host.group is not None else f"auto-{last}"):
            vc.next_index[host.group] = last  # a rolled-back host leaves no gap in the names
        self.nodes.give(host.node_alloc)
        self.tenant_used[vc.tenant] -= host.node_alloc.vec
        if host.row >= 0:
            vc.table.retire(host.row)
        if not vc.hosts:
            vc.component = -1
        self._note("hostRemoved", host)

    # ------------------------------------------------------------ tasks

    def add_placement(self, task: str, tenant: str, vc: VCState, a: Allocation) -> None:
        """Record a task placed with allocation ``a`` on the VC's table (already taken)."""
        if vc.default:
            self.used[self.tenant_index[tenant]] += a.vec
            return self._place_fitted(task, tenant, vc, a)
        return self._record(task, tenant, vc, vc.by_row[a.row], a)

    def add_placements(self, tasks: Sequence[str], tenants: Sequence[str], vcs: Sequence[VCState],
                       allocs: Sequence[Allocation]) -> None:
        """``add_placement`` of each task in turn (``tenants[i]``'s, on
        ``vcs[i]``), with each tenant's usage on default VCs added once per
        vector (a batch of a million devices' services)."""
        vecs: dict[tuple, list] = {}  # the batch's vectors are few, shared by many allocations: added by count
        for task, tenant, vc, a in zip(tasks, tenants, vcs, allocs):
            if not vc.default:
                self.add_placement(task, tenant, vc, a)
                continue
            self._place_fitted(task, tenant, vc, a)
            hit = vecs.get((tenant, id(a.vec)))
            if hit is None:
                vecs[(tenant, id(a.vec))] = [tenant, a.vec, 1]
            else:
                hit[2] += 1
        for tenant, vec, count in vecs.values():
            self.used[self.tenant_index[tenant]] += vec * count

    def share_of(self, tenant: str, used: np.ndarray) -> float:
        """``dominant_share`` of ``tenant`` were its usage ``used`` (the same arithmetic)."""
        share = used / np.maximum(self.total, 1)
        return float(share.max(initial=0.0)) / self.world.tenants[tenant].weight

    def shares_of(self, tenant: str, used: np.ndarray) -> np.ndarray:
        """``share_of`` for each row of ``used`` (float[k, R]), in one array operation (the same floats)."""
        share = used / np.maximum(self.total, 1)
        return share.max(axis=1, initial=0.0) / self.world.tenants[tenant].weight

    def _place_fitted(self, task: str, tenant: str, vc: VCState, a: Allocation) -> None:
        """A default VC's task on its node's fitted host (made when it is the
        node's first), its usage not counted here."""
        hosts = vc.hosts
        if hosts.number_of(a.row) < 0:
            self._fitted_host(vc, a)
        hosts.hold(a.row)
        self.tasks_on_node.add(a.row, self.placements.add(task, self.tenant_index[tenant], vc.name, a))

    def _record(self, task: str, tenant: str, vc: VCState, host: Host, a: Allocation) -> None:
        self.tasks_on_node.add(host.node, self.placements.add(task, self.tenant_index[tenant], vc.name, a))

    def _fitted_host(self, vc: VCState, a: Allocation) -> Host:
        """A default VC's new fitted host on the node of ``a`` (holding nothing yet)."""
        host = vc.hosts.add(a.row, vc.new_number(None))
        if vc.component < 0:
            vc.component = int(self.fleet.network.component[self.nodes.site[a.row]])
            vc.together = len(vc.hosts) == 1
        self._note("hostAdded", host)
        return host

    def remove_placement(self, task: str) -> Placement:
        """A task stops (finished, deleted, lost, evicted): give back what it held."""
        i = self.task_ids.get(task)
        p = self.placements.pop(task)
        vc = self.vcs[p.vc]
        vc.table.give(p.alloc)
        self.tasks_on_node.discard(p.host.node, i)
        if vc.default:  # the fitted host shrinks with its tasks, and goes when empty
            host = p.host
            host.release()
            self.tenant_used[p.tenant] -= p.alloc.vec
            if not host.count:
                vc.hosts.remove(host)
                if not vc.hosts:
                    vc.component = -1
                self._note("hostRemoved", host)
        return p

    # ------------------------------------------------------------ nodes

    def adopt(self, fleet) -> None:
        """The fleet grew while running (``Fleet(base=...)``): its new nodes
        become rows of the node table, free; every table's rows read their
        site's tier again (a site may have changed), and what was kept per
        request over the old rows is dropped."""
        n0 = self.fleet.n_nodes
        self.fleet = fleet
        object.__setattr__(self.world, "fleet", fleet)
        tables = [self.nodes] + [vc.table for vc in self.vcs.values() if not vc.default]
        for t in tables:
            t.widen(fleet.max_devices)
        self.nodes.append_nodes(fleet, n0)
        for t in tables:
            t.tier[:t.n] = fleet.node_tier[t.node[:t.n]]
            t.version += 1
            t.forget_caches()
        self.total = fleet.total_capacity().astype(np.int64)
        self._component_masks.clear()

    def set_tenant(self, tenant) -> None:
        """A tenant added or changed while running: its row of usage and quota
        (a new one gets a row; rows are never reused by another name)."""
        self.world.tenants[tenant.name] = tenant
        i = self.tenant_index.get(tenant.name)
        if i is None:
            i = self.tenant_index[tenant.name] = len(self.tenant_index)
            self.tenant_names.append(tenant.name)
            r = self.used.shape[1]
            self.used = np.vstack([self.used, np.zeros((1, r), np.int64)])
            self.quota_table = np.vstack([self.quota_table, np.zeros((1, r), np.int64)])
            self.weights = np.append(self.weights, 0.0)
            self.tenant_used = TenantRows(self.tenant_index, self.used)
            self.quota = TenantRows(self.tenant_index, self.quota_table)
        self.quota_table[i] = self._quota_vector(tenant.name)
        self.weights[i] = float(tenant.weight)
        self._cohorts()

    def add_vc(self, vc) -> VCState:
        """A virtual cluster added while running (no hosts yet)."""
        self.world.vcs[vc.name] = vc
        table = self.nodes if vc.default else CandidateTable(len(self.fleet.resources), self.fleet.max_devices)
        got = self.vcs[vc.name] = VCState(vc.name, vc.tenant, vc.default, table)
        if got.default:
            got.hosts.src = self.placements
        return got

    def retire_node(self, node: int) -> None:
        """A node leaves the fleet for good (after its work and hosts were moved
        off): never a candidate again, and no longer counted in what there is."""
        self.nodes.set_enabled(node, False)
        if not self.nodes.retired[node]:
            self.nodes.retired[node] = True
            self.nodes.n_retired += 1
        self.fleet.retired[node] = True
        self.total = self.fleet.total_capacity().astype(np.int64)

    def set_node_enabled(self, node: int, enabled: bool) -> list[str]:
        """Take a node out of service (or back); returns the tasks running on it.
        A node removed from the fleet does not come back."""
        if enabled and self.nodes.retired[node]:
            return []
        self.nodes.set_enabled(node, enabled)
        for vc in self.vcs.values():
            if vc.default:
                continue
            for h in vc.hosts:
                if h.node == node and h.row >= 0:
                    vc.table.set_enabled(h.row, enabled)
        return sorted(self.tasks_on(node))

    def tasks_on(self, node: int) -> list[str]:
        """The names of the tasks on ``node``."""
        name = self.task_ids.name
        return [name(i) for i in self.tasks_on_node.get(node, ())]


_ZEROS: dict[int, np.ndarray] = {}


def _zeros(r: int) -> np.ndarray:
    """A read-only int64[r] of zeros, one per length: what a fitted host holds with no task."""
    z = _ZEROS.get(r)
    if z is None:
        z = _ZEROS[r] = np.zeros(r, np.int64)
        z.setflags(write=False)
    return z


class FittedAllocs:
    """``Placements.fitted_allocs``: the fitted hosts' sums as arrays (hosts
    coded by VC and node, in order), an ``Allocation`` made when one is read
    (a million hosts are not a million objects at once)."""

    __slots__ = ("_hosts", "_sums", "_one", "_shares", "_dev", "_vc_at", "_span")

    def __init__(self, hosts: np.ndarray, sums: np.ndarray, one: np.ndarray, shares: dict[int, dict[int, int]],
                 dev: dict, vc_at: dict[str, int], span: int) -> None:
        self._hosts, self._sums, self._vc_at, self._span = hosts, sums, vc_at, span
        self._one, self._shares, self._dev = one, shares, dev  # (see ``Placements.fitted_allocs``)

    def get(self, key: tuple[str, int], default: Allocation | None = None) -> Allocation | None:
        vc, node = key
        v = self._vc_at.get(vc)
        if v is None or not 0 <= node < self._span:
            return default
        code = v * self._span + node
        h = int(np.searchsorted(self._hosts, code))
        if h == self._hosts.size or self._hosts[h] != code:
            return default
        i = int(self._one[h])
        shares = _add_shares({}, self._dev[i]) if i >= 0 else self._shares.get(h, {})
        return _summed(node, self._sums[h], shares)

    def __len__(self) -> int:
        return int(self._hosts.size)


def _add_shares(shares: dict[int, int], dev: tuple[tuple[int, ...], tuple[int, ...]]) -> dict[int, int]:
    """One task's device shares (slots, milli) added to ``shares`` per slot; returns ``shares``."""
    for slot, m in zip(*dev):
        shares[slot] = shares.get(slot, 0) + m
    return shares


def _summed(row: int, vec: np.ndarray, shares: dict[int, int]) -> Allocation:
    """Allocations added up on ``row``: their vectors' sum ``vec`` and shares
    per device slot, slots in order, the ones left with no share dropped."""
    slots = sorted(s for s, m in shares.items() if m)
    return Allocation(row, vec, tuple(slots), tuple(shares[s] for s in slots))
