"""Selection: pick the best row, choose device slots, place groups as a unit.

``pick`` scores the feasible rows and breaks ties with the seeded generator.
``place_group`` places several members (a gang, an affinity group, a set of
hosts) all-or-nothing inside one domain: it ranks domains by the room they
have (computed for all rows at once), then reserves members one by one inside
a ``Transaction`` and rolls back if the domain cannot take them all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from suanli.model.network import Network
from suanli.scheduling import live, scores
from suanli.scheduling.filters import Check, explain, feasible, fits_row, usable_slots
from suanli.scheduling.request import Request
from suanli.scheduling.table import Allocation, CandidateTable, Transaction

MAX_DOMAIN_TRIES = 8  # domains are ranked by room; beyond a few, more tries rarely succeed


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
    if req.whole_node:
        slots = tuple(int(s) for s in np.flatnonzero(table.dev_cap[:, row] > 0))
        return Allocation(row, table.free[:, row].copy(), slots, tuple(int(table.dev_free[s, row]) for s in slots))
    slots: list[int] = []
    milli: list[int] = []
    if req.accels:
        dev_free = table.dev_free[:, row].tolist()
        for need, ok in zip(req.accels, usable_slots(table, req)):
            usable = ok[:, row].tolist()
            if need.whole:
                cap = table.dev_cap[:, row].tolist()
                free_whole = [i for i, (u, f, c) in enumerate(zip(usable, dev_free, cap)) if u and f == 1000 and c == 1000]
                chosen = free_whole[: need.count]
                slots += chosen
                milli += [1000] * len(chosen)
            else:
                # best fit: the fullest device that still fits (the lowest index among equals)
                _, best = min((f, i) for i, (u, f) in enumerate(zip(usable, dev_free)) if u and f >= need.milli)
                slots.append(best)
                milli.append(need.milli)
    return Allocation(row, req.vec.copy(), tuple(slots), tuple(milli))


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
    n = table.n
    out = np.full(n, np.iinfo(np.int64).max, np.int64)
    if req.whole_node:
        return mask.astype(np.int64)
    free = table.view("free")
    for col in np.flatnonzero(req.vec[:2] > 0):
        out = np.minimum(out, free[col] // req.vec[col])
    dev_free = table.view("dev_free")
    for need, ok in zip(req.accels, usable_slots(table, req)):
        if need.whole:
            n_free = (ok & (dev_free == 1000) & (table.view("dev_cap") == 1000)).sum(axis=0)
            out = np.minimum(out, n_free // max(need.count, 1))
        else:
            out = np.minimum(out, ((dev_free // need.milli) * ok).sum(axis=0))
    out[~mask] = 0
    return out


class Extras:
    """Constraints that change as members are placed (anti-affinity, quota...).

    The default has none; layers subclass it. ``checks`` is called before each
    member, ``note`` after its tentative placement, ``undo`` on rollback.
    """

    def checks(self, req: Request, table: CandidateTable) -> list[Check]:
        return []

    def note(self, req: Request, table: CandidateTable, a: Allocation) -> None:
        pass

    def undo(self) -> None:
        pass

    def commit(self) -> None:
        pass


@dataclass
class GroupResult:
    allocations: list[Allocation] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)

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
    domain_name: str = "domain",
    min_members: int | None = None,
    extras: Extras | None = None,
    restrict: np.ndarray | None = None,
    policy=None,
) -> GroupResult:
    """Place all members (or, with ``min_members``, as many as fit, at least that many)
    inside one domain (``domain[row]`` codes, -1 for none; None: anywhere)."""
    extras = extras or Extras()
    if domain is None and min_members is not None:
        domain = np.zeros(table.n, np.int64)  # one domain: everything
        domain_name = domain_name or "placement"
    if domain is None:
        # no domain to choose: fill member by member, explain the first that fails
        txn = Transaction(table)
        done = _fill(table, members, network, rng, extras, txn, None, restrict, policy)
        if isinstance(done, list):
            extras.commit()
            return GroupResult(allocations=done)
        # explain with the earlier members still held: that is what left no room
        extra = extras.checks(done, table)
        if restrict is not None:
            extra = [*extra, ("outside the allowed rows", restrict)]
        reasons = explain(table, done, extra)
        if len(members) > 1:
            reasons[f"room for {len(txn.done)} of {len(members)} members"] += 1
        txn.rollback()
        extras.undo()
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
                extra = [*extra, ("outside the allowed rows", restrict)]
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
                return GroupResult(reasons=Counter({f"not in any {domain_name}": int(table.n)}))
            if domain_name == "placement":
                return GroupResult(reasons=Counter({f"room for fewer than {least} members": 1}))
            return GroupResult(reasons=Counter({f"no {domain_name} with room for {least} members": n_dom}))
    last = Counter()
    for d, target in order[:MAX_DOMAIN_TRIES]:
        inside = None if d is None else (domain == d)
        txn = Transaction(table)
        done = _fill(table, list(members)[:target], network, rng, extras, txn, inside, restrict, policy)
        if isinstance(done, list):
            extras.commit()
            return GroupResult(allocations=done)
        txn.rollback()
        extras.undo()
        last = Counter({f"members do not all fit in one {domain_name}": 1})
    return GroupResult(reasons=last)


def _rank_domains(table, distinct, masks, domain, want, least) -> list[tuple[int, int]]:
    """Domains that have room for every distinct member: the largest achievable
    size first (elastic gangs), then the tightest sufficient domain, so that big
    domains stay free for big groups."""
    codes = domain[: table.n]
    valid = codes >= 0
    if not valid.any():
        return []
    uniq, inv = np.unique(codes[valid], return_inverse=True)
    rooms: list[tuple[np.ndarray, int]] = []
    for key, (r, count) in distinct.items():
        per_row = np.minimum(room(table, r, masks[key] & valid), count)[valid]
        rooms.append((np.bincount(inv, weights=per_row, minlength=uniq.size), count))
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


def _fill(table, members, network, rng, extras: Extras, txn: Transaction,
          inside: np.ndarray | None, restrict: np.ndarray | None, policy=None) -> list[Allocation] | Request:
    """Place members one by one; return their allocations, or the member that failed.
    ``policy`` (a placement policy plugin) chooses row and devices; None: the default scores."""
    done: list[Allocation] = []
    local: dict[int, tuple] = {}
    anywhere = inside is None and restrict is None
    repeatable = policy is None or policy.repeatable
    for r in members:
        extra = extras.checks(r, table)
        row = _repeat(table, r, extra, r.cache.get("last") if anywhere else local.get(id(r))) if repeatable else -1
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
                masks += [m for m in (inside, restrict) if m is not None]
                row = live.pick(table, r, network, rng, masks)
                if row < 0:
                    return r
        a = a or allocation(table, r, row)
        txn.take(a)
        extras.note(r, table, a)
        done.append(a)
        hint = ((id(table), table.version, table.tick), row)
        if anywhere:
            r.cache["last"] = hint
        else:
            local[id(r)] = hint
    return done


def _repeat(table: CandidateTable, req: Request, extra, hint) -> int:
    """The row the same request just took, when picking again would choose it anyway.

    Why this is exact: if nothing else changed on the table since (same tick),
    every other row scores as before, while the chosen row's packing score rose
    strictly (it is fuller now); so if it still fits it is the unique best row,
    and ``pick`` would return it without a tie-break draw.
    """
    if hint is None or req.whole_node or not req.plain[1]:
        return -1
    key, row = hint
    if key != (id(table), table.version, table.tick) or not fits_row(table, req, row, extra):
        return -1
    return row
