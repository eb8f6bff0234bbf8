"""Selection: pick the best row, choose device slots, place groups as a unit.

``pick`` scores the feasible rows and breaks ties with the seeded generator.
``place_group`` places several members (a gang, an affinity group, a set of
hosts) all-or-nothing inside one domain: it ranks domains by the room they
have (computed for all rows at once), then reserves members one by one inside
a ``Statement`` and discards it if the domain cannot take them all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from suanli.model.network import Network
from suanli.scheduling import live, nearby, scores
from suanli.scheduling.filters import Check, explain, feasible, fits_row, row_slots, usable_slots
from suanli.scheduling.reasons import Domain, Why, bound
from suanli.scheduling.request import Request
from suanli.scheduling.statement import Statement
from suanli.scheduling.table import Allocation, CandidateTable, cols

RUNS = True  # place runs of identical members a row at a time (False: one by one, the reference)
MAX_DOMAIN_TRIES = 8  # domains are ranked by room; beyond a few, more tries rarely succeed
UNBOUNDED = int(np.iinfo(np.int64).max)  # room for a request that asks for nothing


def pick(table: CandidateTable, req: Request, mask: np.ndarray, network: Network,
         rng: np.random.Generator) -> int:
    """The best feasible row, or -1. Ties go to a seeded random choice."""
    rows = np.flatnonzero(mask)
    if rows.size <= 1:
        return int(rows[0]) if rows.size else -1
    s = scores.total(table, req, rows, network)
    top = rows[s >= s.max() - 1e-9]
    return int(top[rng.integers(top.size)]) if top.size > 1 else int(top[0])


def allocation(table: CandidateTable, req: Request, row: int) -> Allocation:
    """What placing ``req`` on ``row`` takes: the vector and the device slots."""
    if not req.accels and not req.whole_node:  # (the vector alone: no list made for one)
        return Allocation(row, req.vec)
    if req.whole_node:
        slots = tuple(int(s) for s in np.flatnonzero(table.dev_cap[:, row] > 0))
        return Allocation(row, table.free[:, row].copy(), slots, tuple(int(table.dev_free[s, row]) for s in slots))
    return allocations(table, req, row, 1)[0]


def allocations(table: CandidateTable, req: Request, row: int, k: int) -> list[Allocation]:
    """``k`` copies of ``req`` on ``row``, as ``allocation`` would choose them one
    after another with each taken before the next: whole devices the lowest-index
    free ones, a share the fullest device that still fits (lowest index among
    equals). The caller knows the row has room for ``k``."""
    if not req.accels:
        return [Allocation(row, req.vec) for _ in range(k)]
    usable = row_slots(table, req, row)
    dev_free = table.dev_free[:, row].tolist()
    if len(req.accels) == 1 and req.accels[0].whole:  # whole devices: the lowest-index free ones, in turn
        count = req.accels[0].count
        free = [i for i in usable[0] if dev_free[i] == 1000]
        milli = (1000,) * count
        return [Allocation(row, req.vec, tuple(free[j * count:(j + 1) * count]), milli) for j in range(k)]
    out = []
    for _ in range(k):
        slots: list[int] = []
        milli: list[int] = []
        for need, ok in zip(req.accels, usable):
            if need.whole:
                chosen = [i for i in ok if dev_free[i] == 1000][: need.count]
                for i in chosen:
                    dev_free[i] = 0
                slots += chosen
                milli += [1000] * len(chosen)
            else:  # the fullest usable device that fits (lowest index among equals)
                _, best = min((dev_free[i], i) for i in ok if dev_free[i] >= need.milli)
                dev_free[best] -= need.milli
                slots.append(best)
                milli.append(need.milli)
        out.append(Allocation(row, req.vec, tuple(slots), tuple(milli)))
    return out


def room_row(table: CandidateTable, req: Request, row: int) -> int:
    """``room`` for one row, in scalar arithmetic: copies of ``req`` it could take now
    (the request is known to fit its static checks)."""
    if req.whole_node:
        return 1
    vec = req.plain[0]
    free = table.free[:, row].tolist()
    n = min((free[c] // vec[c] for c in (0, 1) if vec[c] > 0), default=UNBOUNDED)
    if req.accels:
        dev_free = table.dev_free[:, row].tolist()
        for need, usable in zip(req.accels, row_slots(table, req, row)):
            if need.whole:
                whole = sum(1 for s in usable if dev_free[s] == 1000)
                n = min(n, whole // max(need.count, 1))
            else:
                n = min(n, sum(dev_free[s] // need.milli for s in usable))
    return n


def partial_allocation(table: CandidateTable, req: Request, row: int) -> Allocation:
    """As much of ``req`` as ``row`` has free now: cpu and memory up to what is
    free, free whole devices up to the count, or the share on the device with
    the most free share."""
    vec = np.minimum(req.vec, table.free[:, row]).astype(np.int64)
    vec[2:] = 0
    slots: list[int] = []
    milli: list[int] = []
    dev_free = table.dev_free[:, row]
    for need, ok in zip(req.accels, usable_slots(table, req)):
        usable = np.flatnonzero(ok[:, row] & (dev_free > 0))
        if need.whole:
            whole = [int(s) for s in usable if dev_free[s] == 1000][: need.count]
            slots += whole
            milli += [1000] * len(whole)
            vec[2 + need.kind] += 1000 * len(whole)
        elif usable.size:
            best = int(usable[np.argmax(dev_free[usable])])
            take = int(min(need.milli, dev_free[best]))
            slots.append(best)
            milli.append(take)
            vec[2 + need.kind] += take
    return Allocation(row, vec, tuple(slots), tuple(milli))


def room(table: CandidateTable, req: Request, mask: np.ndarray) -> np.ndarray:
    """int[N]: how many copies of ``req`` each row could take now (0 where masked)."""
    if req.whole_node:
        return mask.astype(np.int64)
    out = room_at(table, req, slice(0, table.n))
    out[~mask] = 0
    return out


def room_at(table: CandidateTable, req: Request, at) -> np.ndarray:
    """``room`` over rows ``at`` (a slice or row indices), masks aside."""
    free = cols(table.free, at)
    out = np.full(free.shape[1], UNBOUNDED, np.int64)
    if req.whole_node:
        return np.ones_like(out)
    for col in np.flatnonzero(req.vec[:2] > 0):
        out = np.minimum(out, free[col] // req.vec[col])
    dev_free = cols(table.dev_free, at)
    for need, ok in zip(req.accels, usable_slots(table, req)):
        ok = cols(ok, at)
        if need.whole:
            n_free = (ok & (dev_free == 1000) & (cols(table.dev_cap, at) == 1000)).sum(axis=0)
            out = np.minimum(out, n_free // max(need.count, 1))
        else:
            out = np.minimum(out, ((dev_free // need.milli) * ok).sum(axis=0))
    return out


class Extras:
    """Constraints that change as members are placed (anti-affinity, quota...).

    The default has none; layers subclass it. ``checks`` is called before each
    member, ``note`` after its tentative placement: it records in the
    statement how to undo what it counted.
    """

    def checks(self, req: Request, table: CandidateTable) -> list[Check]:
        return []

    def copies(self, req: Request, table: CandidateTable, row: int, k: int) -> int:
        """How many of ``k`` more copies of ``req``, placed on ``row`` one after
        another right after one that was, these constraints would let through."""
        return k

    def most(self, req: Request, count: int) -> tuple[int, Why | None]:
        """How many of ``count`` copies of ``req`` these constraints let
        through in all, and when fewer, the bound that stops the rest (its
        reason, quantified)."""
        return count, None

    def note(self, req: Request, table: CandidateTable, a: Allocation, stmt: Statement) -> None:
        pass


@dataclass
class GroupResult:
    allocations: list[Allocation] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    short: Why | None = None  # placed below its size: the bound that stopped the rest, when not capacity

    @property
    def ok(self) -> bool:
        return bool(self.allocations)


def place_group(
    table: CandidateTable,
    members: Sequence[Request],
    network: Network,
    rng: np.random.Generator,
    *,
    domain: np.ndarray | None = None,
    kind: Domain = Domain(),
    min_members: int | None = None,
    extras: Extras | None = None,
    restrict: np.ndarray | None = None,
    policy=None,
    stmt: Statement | None = None,
) -> GroupResult:
    """Place all members (or, with ``min_members``, as many as fit, at least that many)
    inside one domain (``domain[row]`` codes, -1 for none; None: anywhere),
    of the ``kind`` that reasons name.
    What it takes is committed into ``stmt`` when given (the caller's
    tentative work), else it stands; a failed try leaves nothing behind."""
    extras = extras or Extras()
    short = None
    if len(members) > 1 and all(m is members[0] for m in members):
        # the group's size as its other bounds (the tenant's quota) allow, before any row is tried
        least = len(members) if min_members is None else min_members
        most, why = extras.most(members[0], len(members))
        if most < least:
            return GroupResult(reasons=bound(extras.most(members[0], least)[1]))
        if most < len(members):
            members, short = list(members)[:most], why
    if domain is None and min_members is not None:
        domain = np.zeros(table.n, np.int64)  # one domain: everything
    if domain is None:
        # no domain to choose: fill member by member, explain the first that fails
        st = Statement(stmt)
        done = _fill_or_undo(table, members, network, rng, extras, st, None, restrict, policy)
        if isinstance(done, list):
            st.commit()
            return GroupResult(allocations=done, short=short)
        # explain with the earlier members still held: that is what left no room
        extra = extras.checks(done, table)
        if restrict is not None:
            extra = [*extra, (Why("domain", "held", domain=kind), restrict)]
        reasons = explain(table, done, extra)
        if len(members) > 1:
            reasons[Why("domain", "partial", taken=st.taken, members=len(members))] += 1
        st.discard()
        return GroupResult(reasons=reasons)
    distinct: dict[int, tuple[Request, int]] = {}
    for r in members:
        prev = distinct.get(id(r))
        distinct[id(r)] = (r, (prev[1] if prev else 0) + 1)
    masks = {}
    for key, (r, _) in distinct.items():
        m = feasible(table, r, extras.checks(r, table))
        if restrict is not None:
            m &= restrict
        masks[key] = m
    for key, (r, _) in distinct.items():
        if not masks[key].any():
            extra = extras.checks(r, table)
            if restrict is not None:
                extra = [*extra, (Why("domain", "held", domain=kind), restrict)]
            return GroupResult(reasons=explain(table, r, extra))

    want = len(members)
    least = want if min_members is None else min_members
    if domain is None:
        order: list[tuple[int | None, int]] = [(None, want)]
    else:
        order = _rank_domains(table, distinct, masks, domain, want, least)
        if not order:
            n_dom = len(np.unique(domain[domain >= 0]))
            if n_dom == 0:  # no candidate is in any domain of this kind at all
                return GroupResult(reasons=Counter({Why("domain", "none", domain=kind): int(table.n)}))
            if kind.anywhere:
                return GroupResult(reasons=Counter({Why("domain", "fewer", least=least): 1}))
            return GroupResult(reasons=Counter({Why("domain", "no-room", domain=kind, least=least): n_dom}))
    last = Counter()
    for d, target in order[:MAX_DOMAIN_TRIES]:
        inside = None if d is None else (domain == d)
        st = Statement(stmt)
        done = _fill_or_undo(table, list(members)[:target], network, rng, extras, st, inside, restrict, policy)
        if isinstance(done, list):
            st.commit()
            return GroupResult(allocations=done, short=short if len(done) == want else None)
        st.discard()
        last = Counter({Why("domain", "split", domain=kind): 1})
    return GroupResult(reasons=last)


def _rank_domains(table, distinct, masks, domain, want, least) -> list[tuple[int, int]]:
    """Domains that have room for every distinct member: the largest achievable
    size first (elastic gangs), then the tightest sufficient domain, so that big
    domains stay free for big groups."""
    uniq, index = _partition(domain, table.n)
    if not uniq.size:
        return []
    rooms: list[tuple[np.ndarray, int]] = []
    for key, (r, count) in distinct.items():
        rows = np.flatnonzero(masks[key] & (index >= 0))  # room only where it may count
        per_row = np.minimum(room_at(table, r, rows), count)
        rooms.append((np.bincount(index[rows], weights=per_row, minlength=uniq.size), count))
    if len(rooms) == 1:
        total, count = rooms[0]
        target = np.minimum(total, count).astype(np.int64)
        ok = target >= least
    else:
        ok = np.all([t >= c for t, c in rooms], axis=0)
        target = np.where(ok, want, 0)
        total = np.sum([t for t, _ in rooms], axis=0)
    cand = np.flatnonzero(ok)
    ranked = cand[np.lexsort((uniq[cand], total[cand], -target[cand]))]
    return [(int(uniq[i]), int(target[i])) for i in ranked]


_partitions: dict[int, tuple] = {}


def _partition(domain: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct domain codes, and per row the index of its code (-1: none);
    remembered for the last few domain arrays (the same array, the same rows)."""
    hit = _partitions.get(id(domain))
    if hit is not None and hit[0] is domain and hit[1] == n:
        return hit[2], hit[3]
    codes = domain[:n]
    valid = codes >= 0
    uniq, inv = np.unique(codes[valid], return_inverse=True)
    index = np.full(n, -1, np.int64)
    index[valid] = inv
    if len(_partitions) >= 16:
        _partitions.pop(next(iter(_partitions)))
    _partitions[id(domain)] = (domain, n, uniq, index)
    return uniq, index


def _fill_or_undo(table, members, network, rng, extras: Extras, st: Statement, inside, restrict, policy):
    """``_fill``; if it raises, what it reserved is given back first, so an
    error leaves the table as it found it."""
    try:
        return _fill(table, members, network, rng, extras, st, inside, restrict, policy)
    except Exception:
        st.discard()
        raise


def _fill(table, members, network, rng, extras: Extras, st: Statement,
          inside: np.ndarray | None, restrict: np.ndarray | None, policy=None) -> list[Allocation] | Request:
    """Place members one by one; return their allocations, or the member that failed.
    ``policy`` (a placement policy plugin) chooses row and devices; None: the default scores.

    A run of identical members is placed as one by one, but in fewer steps:
    the row the first of them takes gets as many as fit there (and the extras
    allow), since each would have taken that row again (see ``_repeat``); and
    once that row is full, the next rows come from a ranking of the rows kept
    for the run (``_Ranked``) instead of a fresh pick each time."""
    done: list[Allocation] = []
    local: dict[int, tuple] = {}
    anywhere = inside is None and restrict is None
    repeatable = policy is None or policy.repeatable
    inside_rows = np.flatnonzero(inside[: table.n]) if inside is not None else None
    members = list(members)
    run_end = list(range(1, len(members) + 1))  # per member: where its run of identical members ends
    for j in range(len(members) - 2, -1, -1):
        if members[j + 1] is members[j]:
            run_end[j] = run_end[j + 1]
    ranked: _Ranked | None = None
    filled = None
    owner = id(getattr(extras, "vc", None))  # whose checks: a request may be shared by tenants allowed alike
    i = 0
    while i < len(members):
        r = members[i]
        run = run_end[i] - i
        extra = extras.checks(r, table)
        row = _repeat(table, r, extra, r.cache.get("last") if anywhere else local.get(id(r)), owner) if repeatable else -1
        a = None
        if row < 0:
            if policy is not None:
                m = feasible(table, r, extra)
                if inside is not None:
                    m &= inside
                if restrict is not None:
                    m &= restrict
                a = policy.place(table, r, m, network, rng)
                if a is None:
                    return r
                row = a.row
            else:
                masks = [m for _, m in extra]
                if restrict is not None:
                    masks.append(restrict)
                near_rows = nearby.candidate_rows(table, r) if r.near is not None else None
                if ranked is not None and not ranked.valid(table, r, masks):
                    ranked = None
                if ranked is None and run > 1 and filled is r and near_rows is None:
                    ranked = _Ranked(table, r, network, masks, inside_rows)
                if ranked is not None:
                    row = ranked.pick(rng)
                else:
                    row = _pick(table, r, near_rows, network, rng, masks, inside_rows)
                if row < 0:
                    return r
        k = 1
        filled = None  # the request, when its row is left full
        if RUNS and run > 1 and repeatable and a is None and not r.whole_node and r.plain[1]:
            room_left = room_row(table, r, row)
            k = 1 + max(0, min(run - 1, room_left - 1, extras.copies(r, table, row, run - 1)))
            if k >= room_left:
                filled = r
        if filled is None:
            ranked = None  # the row keeps room, and a new value: a ranking would no longer hold
        if a is not None:
            allocs = [a]
        else:
            allocs = [allocation(table, r, row)] if k == 1 else allocations(table, r, row, k)
        st.take(table, allocs)
        for a in allocs:
            extras.note(r, table, a, st)
        done += allocs
        i += len(allocs)
        if ranked is not None:
            ranked.tick = table.tick
        hint = (_state_key(table, owner), row)
        if anywhere:
            r.cache["last"] = hint
        else:
            local[id(r)] = hint
    return done


def _pick(table, req: Request, near_rows: np.ndarray | None, network, rng: np.random.Generator,
          masks: list[np.ndarray], inside_rows: np.ndarray | None) -> int:
    """The default scores' row for one member: over the few rows within its
    bound (``near_rows``, from ``nearby.candidate_rows``) when it has them, not
    every row; -1 when none holds it."""
    if near_rows is not None:
        return nearby.pick(table, req, near_rows, network, rng, masks, inside_rows)
    return live.pick(table, req, network, rng, masks, inside_rows)


def place_one(table: CandidateTable, req: Request, network: Network, rng: np.random.Generator,
              extras: Extras) -> GroupResult:
    """``place_group`` of one member, anywhere, with the default scores and no
    enclosing statement: the row, draws, extras' notes and kept hint that
    ``_fill`` gives it, or the reasons it gives when no row holds it
    (nothing taken, nothing drawn), without a group's steps (a short task
    alone in its instant)."""
    extra = extras.checks(req, table)
    owner = id(getattr(extras, "vc", None))
    row = _repeat(table, req, extra, req.cache.get("last"), owner)
    if row < 0:
        near_rows = nearby.candidate_rows(table, req) if req.near is not None else None
        row = _pick(table, req, near_rows, network, rng, [m for _, m in extra], None)
        if row < 0:
            return GroupResult(reasons=explain(table, req, extra))
    a = allocation(table, req, row)
    st = Statement()
    try:
        st.take(table, (a,))
        extras.note(req, table, a, st)
    except Exception:
        st.discard()
        raise
    st.commit()
    req.cache["last"] = (_state_key(table, owner), row)
    PLACED_ONE[0] += 1
    return GroupResult(allocations=[a])


PLACED_ONE = [0]  # placements ``place_one`` made (tests count them)


class _Ranked:
    """For a run of identical members: the rows the request may take next, best
    first, as ``live.pick`` would see them, kept while nothing but the run's own
    placements changed the table and each row it took was left full.

    Why this is exact: a pick sees every fitting row (inside the domain and the
    masks) with its score. Rows the run filled no longer fit; every other row
    is unchanged (same tick otherwise, same masks); so the best rows of the next
    pick are the best remaining rows of the ranking, and the tie among them is
    drawn the same way (rows in order, one draw from the generator)."""

    __slots__ = ("req", "tick", "masks", "cand", "vals", "rows")

    def __init__(self, table: CandidateTable, req: Request, network, masks: list[np.ndarray],
                 inside_rows: np.ndarray | None) -> None:
        value = live.view(table, req, network).value
        cand = inside_rows if inside_rows is not None else np.arange(table.n)
        vals = value[cand]
        keep = vals > -np.inf
        for m in masks:
            keep &= m[cand]
        cand, vals = cand[keep], vals[keep]
        order = np.lexsort((cand, -vals))
        self.req, self.tick, self.masks = req, table.tick, masks
        self.cand = inside_rows
        self.vals, self.rows = vals[order].tolist(), cand[order].tolist()

    def valid(self, table: CandidateTable, req: Request, masks: list[np.ndarray]) -> bool:
        if req is not self.req or table.tick != self.tick or len(masks) != len(self.masks):
            return False
        for m, old in zip(masks, self.masks):
            if m is not old:
                at = self.cand if self.cand is not None else slice(0, table.n)
                if not np.array_equal(m[at], old[at]):
                    return False
        return True

    def pick(self, rng: np.random.Generator) -> int:
        """The next row (removed from the ranking), or -1."""
        vals, rows = self.vals, self.rows
        if not rows:
            return -1
        best = vals[0]
        n = 1
        while n < len(vals) and vals[n] >= best - live.TIE:
            n += 1
        if n == 1:
            j = 0
        else:  # ties in row order, as live.pick lists them
            tied = sorted(range(n), key=rows.__getitem__)
            j = tied[int(rng.integers(n))]
        del vals[j]
        return rows.pop(j)


def _state_key(table: CandidateTable, owner: int) -> tuple:
    """What a repeat hint (``_repeat``) is good for: this table, its rows and
    what they hold free unchanged, the same VC's checks (``owner``)."""
    return id(table), table.version, table.tick, owner


def _repeat(table: CandidateTable, req: Request, extra, hint, owner: int) -> int:
    """The row the same request just took, when picking again would choose it anyway.

    Why this is exact: if nothing else changed on the table since (same tick),
    every other row scores as before, while the chosen row's packing score rose
    strictly (it is fuller now); so if it still fits it is the unique best row,
    and ``pick`` would return it without a tie-break draw. The extra checks
    must be the same VC's (``owner``): another tenant sharing the request may
    be allowed rows the first was not.
    """
    if hint is None or req.whole_node or not req.plain[1]:
        return -1
    key, row = hint
    if key != _state_key(table, owner) or not fits_row(table, req, row, extra):
        return -1
    return row
