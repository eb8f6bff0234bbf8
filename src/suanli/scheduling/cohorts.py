"""Cohorts: tenants that lend one another the quota they do not use.

A tenant's quota is its **nominal** quota. In a cohort, per resource its
quota names:

- it may **lend** up to ``lendingLimit`` of it (default: all of it); the rest
  is its own alone (``guard = nominal - lend``);
- it may **borrow** up to ``borrowingLimit`` above it (default: as much as the
  cohort lends);
- the cohort's **pool** is what its members lend together. A member's usage
  above its guard draws on the pool, its own lendable part included, so the
  pool holds while ``sum over members of max(0, used - guard) <= sum of lend``.

So a member may add ``min(nominal + borrowingLimit - used, max(0, guard -
used) + pool left)`` of a resource: with no cohort that is ``nominal - used``,
the plain quota. A resource its quota does not name is unlimited for it, and
it lends none of it. No member ever lends more than its lending limit: what
the borrowers take is at most what the others' lendable parts leave unused
(``lent`` attributes it, lender by lender, in proportion to what each leaves).

Everything is a few arrays over the tenants (``[T, R]``); a member's check
reads its cohort's rows only.
"""

from __future__ import annotations

import numpy as np

UNLIMITED = np.iinfo(np.int64).max // 4  # a quota's value for a resource it does not name
_POOL_CAP = 1 << 44  # above any quota; the sums of 10^4 members stay far from overflow


class Cohorts:
    """Each tenant's cohort (``of``: -1 for none), its guard, lendable part
    and ceiling (nominal plus borrowing limit), by tenant row."""

    def __init__(self, tenants, index: dict[str, int], nominal: np.ndarray, column) -> None:
        """``tenants``: the world's by name; ``index``: tenant -> row;
        ``nominal``: the quota table ``[T, R]``; ``column``: a quota key ->
        its resource column (or None when no node has that resource)."""
        t, r = nominal.shape
        self.of = np.full(t, -1, np.int64)
        self.names: list[str] = []  # cohort names by number
        self.lend = np.zeros((t, r), np.int64)
        self.guard = nominal.copy()
        self.ceiling = nominal.copy()  # with no cohort: the quota itself
        self.nominal = nominal
        self.members: dict[int, np.ndarray] = {}
        numbers: dict[str, int] = {}
        for name, tenant in tenants.items():
            if tenant.cohort is None or name not in index:
                continue
            i = index[name]
            c = numbers.setdefault(tenant.cohort, len(numbers))
            self.of[i] = c
            named = np.zeros(r, bool)
            for key in tenant.quota:
                col = column(key)
                if col is not None:
                    named[col] = True
            lend = np.where(named, np.minimum(nominal[i], _POOL_CAP), 0)
            for key, value in tenant.lending_limit.items():
                col = column(key)
                if col is not None:
                    lend[col] = min(lend[col], value)
            self.lend[i] = lend
            self.guard[i] = nominal[i] - lend
            ceiling = np.full(r, UNLIMITED, np.int64)  # default: what the pool gives
            for key, value in (tenant.borrowing_limit or {}).items():
                col = column(key)
                if col is not None and named[col]:
                    ceiling[col] = nominal[i, col] + value
            self.ceiling[i] = np.where(named, ceiling, UNLIMITED)
        self.names = list(numbers)
        self._of = self.of.tolist()  # (read per check: a list's item, not an array's)
        for c in range(len(self.names)):
            self.members[c] = np.flatnonzero(self.of == c)

    def __bool__(self) -> bool:
        return bool(self.names)

    def left(self, used: np.ndarray, i: int, extra: np.ndarray | None = None) -> np.ndarray:
        """What tenant row ``i`` may still add, per resource, with ``extra``
        added to its usage first (tentative placements)."""
        u = used[i] if extra is None else used[i] + extra
        own = self.ceiling[i] - u
        c = self._of[i]
        if c < 0:
            return own
        rows = self.members[c]
        drawn = np.maximum(0, used[rows] - self.guard[rows])
        drawn[rows == i] = np.maximum(0, u - self.guard[i])
        pool_left = self.lend[rows].sum(axis=0) - drawn.sum(axis=0)
        return np.minimum(own, np.maximum(0, self.guard[i] - u) + pool_left)

    def borrowed(self, used: np.ndarray) -> np.ndarray:
        """``[T, R]``: each member's usage above its nominal quota (0 outside cohorts)."""
        out = np.maximum(0, used - self.nominal)
        out[self.of < 0] = 0
        return out

    def lent(self, used: np.ndarray, cohort: int | None = None) -> np.ndarray:
        """``[T, R]``: what each member lends now, attributed: its cohort's
        borrowing, shared among the members not borrowing in proportion to
        the lendable part each leaves unused (never more than that part).
        ``cohort``: that cohort's members only (the others' rows 0)."""
        out = np.zeros_like(used)
        borrowed = self.borrowed(used)
        for rows in self.members.values() if cohort is None else (self.members[cohort],):
            spare = np.maximum(0, self.lend[rows] - np.maximum(0, used[rows] - self.guard[rows]))
            spare[(borrowed[rows] > 0)] = 0  # (per resource: a borrower of it lends none of it)
            total = spare.sum(axis=0)
            want = borrowed[rows].sum(axis=0)
            share = np.divide(spare, np.maximum(total, 1), dtype=np.float64)
            out[rows] = np.minimum(spare, np.ceil(share * np.minimum(want, total)).astype(np.int64))
        return out

    def lenders(self, used: np.ndarray, i: int) -> list[int]:
        """The rows tenant row ``i`` borrows from now, those lending most
        first (none when it is within its quota)."""
        c = int(self.of[i])
        if c < 0 or not (used[i] > self.nominal[i]).any():
            return []
        over = used[i] > self.nominal[i]
        lent = self.lent(used, c)  # (its cohort's only: called as each borrowing unit starts)
        rows = [int(r) for r in self.members[c] if r != i and (lent[r] * over).any()]
        return sorted(rows, key=lambda r: (-float((lent[r] * over).sum()), r))

    def holds(self, used: np.ndarray) -> list[str]:
        """What breaks the cohort rules now (for tests and checks): a member
        above its ceiling, or a cohort drawing more than its members lend."""
        out = []
        for i in np.flatnonzero((used > self.ceiling).any(axis=1) & (self.of >= 0)).tolist():
            out.append(f"row {i} above its quota plus borrowing limit")
        for c, rows in self.members.items():
            drawn = np.maximum(0, used[rows] - self.guard[rows]).sum(axis=0)
            if (drawn > self.lend[rows].sum(axis=0)).any():
                out.append(f"cohort {self.names[c]} draws more than its members lend")
        return out
