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
change log it has not read was dropped, when the network changed (rtt and reachability feed scores), or
when so many rows changed that recomputing them all is cheaper.

Views live on their table, most recently used kept, within a memory budget.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from suanli.model.network import Network
from suanli.scheduling import kernels, scores
from suanli.scheduling.filters import dynamic_ok, need_arrays, static_mask
from suanli.scheduling.request import Request
from suanli.scheduling.table import CandidateTable

VIEW_BYTES = 256 << 20  # memory all views of one table may hold
MIN_VIEWS, MAX_VIEWS = 16, 4096
TIE = 1e-9  # scores this close to the best tie (select.pick's rule)
LONG = 64  # best rows merged through changes up to this many; more are found again by a scan
_NO_VALUES, _NO_ROWS = np.empty(0), np.empty(0, np.int32)  # a view not yet scored


class View:
    """``ok``: the request fits the row now; ``value``: its score where it fits, else -inf."""

    __slots__ = ("req", "network", "net_version", "key", "pos", "ok", "value", "best", "top", "n_top")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.network: Network | None = None
        self.net_version = -1  # the network's version the scores were read at (it changes in place)
        self.key = None
        self.pos = 0
        self.ok: np.ndarray | None = None
        self.value: np.ndarray | None = None
        # the best rows, kept while changes allow: ``best`` the highest value,
        # ``top[:n_top]`` the rows within TIE of it in row order (``n_top`` -1: to
        # be found again; ``top`` is as long as ``value``)
        self.best = -np.inf
        self.top: np.ndarray | None = None
        self.n_top = -1

    def sync(self, table: CandidateTable, network: Network | None) -> "View":
        """Bring the view up to date; with a network, the scores too."""
        key = (table.version, table.n)
        changed = table.since(self.pos)
        fresh = (self.key != key or changed is None or len(changed) * 4 > table.n
                 or (network is not None and self.value is not None
                     and (self.network is not network or self.net_version != network.version)))
        if fresh:
            self.ok = static_mask(table, self.req) & dynamic_ok(table, self.req, slice(0, table.n))
            self.value, self.n_top = None, -1
            self.key = key
        elif changed.size:
            self._catch_up(table, changed)
        self.pos = table.logged
        if network is not None and self.value is None:
            self.network, self.net_version = network, network.version
            self.value = np.full(table.n, -np.inf)
            fits = np.flatnonzero(self.ok)  # rows that do not fit need no score
            if fits.size:
                self.value[fits] = scores.total(table, self.req, fits, network)
            if self.top is None or self.top.size != table.n:
                self.top = np.empty(max(table.n, 1), np.int32)
        return self

    def _catch_up(self, table: CandidateTable, rows: np.ndarray) -> None:
        """Recompute ``rows`` (repeats are harmless) and keep the best rows, in
        one compiled loop."""
        req, value = self.req, self.value
        needs, usable = need_arrays(table, req)
        if value is None:
            bonus, value, top = _NO_VALUES, _NO_VALUES, _NO_ROWS
        else:
            bonus, top = scores.bonus(table, req, self.network), self.top
        self.best, self.n_top = kernels.catch_up(
            rows, self.ok, value, static_mask(table, req), table.enabled, table.free, table.cap,
            table.dev_free, table.dev_cap, table.inverse_capacity(), bonus, req.vec, scores.dims_of(req)[0],
            needs, usable, req.whole_node, scores.WEIGHTS["fit"], top, self.n_top, self.best, TIE, LONG)

    def best_rows(self) -> tuple[float, np.ndarray]:
        """The highest value and the rows within TIE of it, in row order (a view
        of the view's own array: to be read before the next change)."""
        if self.n_top < 0:
            self.best, self.n_top = kernels.best_of(self.value, self.top, TIE)
        return self.best, self.top[: self.n_top]


class Views:
    """The live views of one table, least recently used dropped first."""

    def __init__(self, table: CandidateTable) -> None:
        self.table = table
        self.by_req: OrderedDict[int, View] = OrderedDict()

    def get(self, req: Request) -> View:
        v = self.by_req.get(id(req))
        if v is None or v.req is not req:
            v = self.by_req[id(req)] = View(req)
            # per row a view holds ok (1 byte), value (8) and room for its best rows (4)
            limit = min(MAX_VIEWS, max(MIN_VIEWS, VIEW_BYTES // max(13 * self.table.n, 1)))
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
        if not top.size:
            return -1
        return int(top[rng.integers(top.size)]) if top.size > 1 else int(top[0])
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
