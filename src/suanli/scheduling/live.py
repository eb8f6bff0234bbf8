"""Live views: per request, which rows it fits now and how each scores, kept
in step with the table instead of recomputed per decision.

Every filter and score of a row depends only on that row (what it is, what it
has free, its site's place in the network) and on the request. So once a
view has computed them for all rows, a decision needs only the rows the table
has touched since (``CandidateTable.since``, usually one or two) recomputed,
and then one pass over the vector of scores for the best.

A view is exact: the masks and scores it holds are the ones ``feasible`` and
``scores.total`` would give now, element for element. It starts afresh when
rows are added (the static masks change), when the part of the table's
change log it has not read was dropped, when the network was rebuilt (rtt and reachability feed scores), or
when so many rows changed that recomputing them all is cheaper.

Views live on their table, most recently used kept, within a memory budget.
"""

from __future__ import annotations

from bisect import insort
from collections import OrderedDict
from typing import Sequence

import numpy as np

from suanli.model.network import Network
from suanli.scheduling import scores
from suanli.scheduling.filters import dynamic_ok, fits_row, static_mask
from suanli.scheduling.request import Request
from suanli.scheduling.table import CandidateTable

VIEW_BYTES = 256 << 20  # memory all views of one table may hold
MIN_VIEWS, MAX_VIEWS = 16, 4096
TIE = 1e-9  # scores this close to the best tie (select.pick's rule)
FEW = 8  # changed rows recomputed one by one; more at once, as arrays
LONG = 64  # best rows kept through changes up to this many; more are found again, as arrays


class View:
    """``ok``: the request fits the row now; ``value``: its score where it fits, else -inf."""

    __slots__ = ("req", "network", "key", "pos", "ok", "value", "best", "top")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.network: Network | None = None
        self.key = None
        self.pos = 0
        self.ok: np.ndarray | None = None
        self.value: np.ndarray | None = None
        # the best rows, kept while changes allow: ``best`` the highest value, ``top``
        # the rows within TIE of it in row order (None: to be found again)
        self.best = -np.inf
        self.top: list[int] | None = None

    def sync(self, table: CandidateTable, network: Network | None) -> "View":
        """Bring the view up to date; with a network, the scores too."""
        key = (table.version, table.n)
        changed = table.since(self.pos)
        fresh = (self.key != key or changed is None or len(changed) * 4 > table.n
                 or (network is not None and self.network is not network and self.value is not None))
        if fresh:
            self.ok = static_mask(table, self.req) & dynamic_ok(table, self.req, slice(0, table.n))
            self.value, self.top = None, None
            self.key = key
        elif len(changed) <= FEW:  # row by row, in scalar arithmetic
            ok, value, req, net = self.ok, self.value, self.req, self.network
            for r in set(changed.tolist()):
                ok[r] = fit = fits_row(table, req, r)
                if value is not None:
                    was = value[r]
                    value[r] = v = scores.total_row(table, req, r, net) if fit else -np.inf
                    if self.top is not None:
                        self._retop(r, was, v)
        elif changed.size:
            rows = changed.copy()  # repeats are harmless: a row gets the same values twice
            self.ok[rows] = ok = static_mask(table, self.req).take(rows) & dynamic_ok(table, self.req, rows)
            if self.value is not None:
                v = np.where(ok, scores.total(table, self.req, rows, self.network), -np.inf)
                was = self.value.take(rows) if self.top is not None else None
                self.value[rows] = v
                if was is not None:
                    self._retop_rows(rows, was, v)
            else:
                self.top = None
        self.pos = table.logged
        if network is not None and self.value is None:
            self.network = network
            self.value = np.full(table.n, -np.inf)
            fits = np.flatnonzero(self.ok)  # rows that do not fit need no score
            if fits.size:
                self.value[fits] = scores.total(table, self.req, fits, network)
        return self

    def _retop(self, r: int, was: float, v: float) -> None:
        """Keep ``best`` and ``top`` exact after row ``r``'s value went from ``was``
        to ``v`` (``value`` already holds ``v``); drop ``top`` to be found again
        when the best fell (a row outside it may now lead) or when updating a
        long ``top`` row by row would cost more than finding it again."""
        best, top = self.best, self.top
        if best > -np.inf and was >= best - TIE:  # r was one of the best rows
            top.remove(r)
            new = v if v >= best or not top else max(v, self._max_of(top))
        else:
            new = max(best, v)  # the best rows are untouched: one of them holds ``best``
        if new < best or (new > best and len(top) > LONG):
            self.top = None
            return
        if new > best:
            top = self.top = [x for x in top if self.value[x] >= new - TIE]
        if v >= new - TIE and v > -np.inf:
            insort(top, r)
        self.best = new

    def _retop_rows(self, rows: np.ndarray, was: np.ndarray, v: np.ndarray) -> None:
        """``_retop`` for many rows at once (``value`` already holds ``v``).

        Why this is exact: rows outside ``top`` that did not change are below
        ``best - TIE``. So when the highest of the changed rows and the
        unchanged best rows is at least the old best, it is the new best, and
        the new best rows are among those two sets."""
        best, top = self.best, self.top
        if len(top) > LONG:
            self.top = None
            return
        m = float(v.max())
        if best > -np.inf and float(was.max()) >= best - TIE:  # some best rows changed
            gone = set(rows[was >= best - TIE].tolist())
            top = [x for x in top if x not in gone]
            kept = self._max_of(top) if top else -np.inf
        else:
            kept = best
        new = max(kept, m)
        if new < best:
            self.top = None
            return
        if new == -np.inf:
            self.top = []
            return
        if new > best and top:
            top = [x for x in top if self.value[x] >= new - TIE]
        if m >= new - TIE:  # changed rows join the best
            add = rows[v >= new - TIE].tolist()
            if len(top) + len(add) > LONG:
                self.top = None
                return
            top = sorted(set(top).union(add))
        self.best, self.top = new, top

    def _max_of(self, rows: list[int]) -> float:
        """The highest value among ``rows`` (a non-empty list)."""
        if len(rows) <= 16:
            value = self.value
            return max(float(value[x]) for x in rows)
        return float(self.value.take(rows).max())

    def best_rows(self) -> tuple[float, list[int]]:
        """The highest value and the rows within TIE of it, in row order."""
        if self.top is None:
            value = self.value
            self.best = float(value.max(initial=-np.inf))
            self.top = np.flatnonzero(value >= self.best - TIE).tolist() if self.best > -np.inf else []
        return self.best, self.top


class Views:
    """The live views of one table, least recently used dropped first."""

    def __init__(self, table: CandidateTable) -> None:
        self.table = table
        self.by_req: OrderedDict[int, View] = OrderedDict()

    def get(self, req: Request) -> View:
        v = self.by_req.get(id(req))
        if v is None or v.req is not req:
            v = self.by_req[id(req)] = View(req)
            limit = min(MAX_VIEWS, max(MIN_VIEWS, VIEW_BYTES // max(9 * self.table.n, 1)))
            while len(self.by_req) > limit:
                self.by_req.popitem(last=False)
        else:
            self.by_req.move_to_end(id(req))
        return v


def view(table: CandidateTable, req: Request, network: Network | None = None) -> View:
    """The request's live view of the table, up to date (scores only with a network)."""
    views = table.views
    if views is None:
        views = table.views = Views(table)
    return views.get(req).sync(table, network)


def pick(table: CandidateTable, req: Request, network: Network, rng: np.random.Generator,
         masks: Sequence[np.ndarray] = (), rows: np.ndarray | None = None) -> int:
    """The best row that fits now and passes every mask of ``masks`` (and is one of
    ``rows``, ascending, when given), or -1. Ties go to a seeded draw, exactly as
    ``select.pick`` breaks them."""
    v = view(table, req, network)
    if not masks and rows is None:
        _, top = v.best_rows()
        if not top:
            return -1
        return top[int(rng.integers(len(top)))] if len(top) > 1 else top[0]
    if rows is None:
        value = v.value
        for m in masks:
            value = np.where(m[: table.n], value, -np.inf)
    else:
        value = v.value[rows]
        for m in masks:
            value = np.where(m[rows], value, -np.inf)
    best = value.max(initial=-np.inf)
    if best == -np.inf:
        return -1
    top = np.flatnonzero(value >= best - TIE)
    if rows is not None:
        top = rows[top]
    return int(top[rng.integers(top.size)]) if top.size > 1 else int(top[0])
