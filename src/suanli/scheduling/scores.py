"""Scores: pure functions from (table, request, rows) to vectors in 0..100.

Higher is better. The framework sums them with ``WEIGHTS`` and picks the
best row with a seeded tie-break (``select.py``).
"""

from __future__ import annotations

import numpy as np

from suanli.model.network import Network
from suanli.scheduling.request import Request
from suanli.scheduling.table import CandidateTable, cols

# Why these weights: a task that names a site to be near is best served there
# (the car's own apps run on the car), even on a node with devices it does not
# use; keeping off unused devices matters more than packing; packing breaks the
# remaining ties.
WEIGHTS = {"fit": 1.0, "devices": 2.0, "near": 4.0, "data": 1.0}
_NEAR_RTT_MS = 2.0  # the rtt at which the near score halves: on the site scores ~90, one hop away ~20
# A near site without a bound is a preference only: nearer wins unless two
# places are about as near. Each doubling of (1 + rtt / 2 ms) costs 25 points,
# 100 once weighted, the whole range of the packing score; so packing decides
# only among places within a factor of about 1.3 of each other (8 ms against
# 10 ms), and 8 ms beats 23 ms however full the farther node is. Scores fall to
# 0 at 1 s.
_PREF_POINTS = 25.0
_PREF_FAR_MS = 1000.0
_DATA_RTT_MS = 10.0  # the rtt at which the data score halves
INTRA_SITE_MBPS = 10_000.0  # state moved within a site goes over the node fabric; taken as 10 Gbps


def _gather(table: CandidateTable, rows: np.ndarray) -> tuple[slice | np.ndarray, bool]:
    """Index for reading rows: when most rows are wanted, compute on the contiguous
    live arrays and pick the rows at the end (cheaper than a 2-D gather)."""
    if rows.size * 4 >= table.n:
        return slice(0, table.n), True
    return rows, False


def fit(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """Most-allocated after placement, averaged over the requested dimensions
    (cpu, memory, each accelerator kind's share): bin packing, which keeps
    whole nodes and whole devices free for large requests."""
    at, whole = _gather(table, rows)
    dims, sel, vec = dims_of(req)
    if req.whole_node or dims.size == 0:
        # how used the row already is, averaged over the resources it has
        inv = table.inverse_of(at)
        used = (cols(table.cap, at) - cols(table.free, at)) * inv
        has = (inv > 0).sum(axis=0)
        out = 100.0 * used.sum(axis=0) / np.maximum(has, 1)
    else:
        # used-after / cap = 1 - (free - vec) / cap, summed over the dimensions in order
        if sel is not None:  # the dimensions are adjacent rows of the arrays: read only them
            terms = (cols(table.free[sel], at) - vec) * table.inverse_of(at, sel)
        else:
            terms = (cols(table.free, at)[dims] - vec) * table.inverse_of(at)[dims]
        acc = -terms[0]
        for t in terms[1:]:
            acc -= t
        out = 100.0 + acc * (100.0 / dims.size)
    return out[rows] if whole else out


def dims_of(req: Request) -> tuple[np.ndarray, slice | None, np.ndarray]:
    """The resources ``req`` asks for, as indices and (when adjacent) a slice, and
    its amounts of them as a column; kept with the request."""
    got = req.cache.get("dims")
    if got is None:
        dims = np.flatnonzero(req.vec > 0)
        adjacent = dims.size > 0 and int(dims[-1] - dims[0]) + 1 == dims.size
        got = req.cache["dims"] = (dims, slice(int(dims[0]), int(dims[-1]) + 1) if adjacent else None,
                                   req.vec[dims, None])
    return got


def devices(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """100 on rows with no accelerator kinds the request leaves unused, else 0:
    CPU work should not strand GPUs. Depends only on capacity, so it is cached."""
    return np.where(stranding(table, req)[rows], 0.0, 100.0)


def stranding(table: CandidateTable, req: Request) -> np.ndarray:
    """bool[n]: the rows with accelerator kinds the request leaves unused
    (``devices`` scores them 0), kept per table rows for every request that
    leaves the same kinds unused."""
    key = _unused_kinds(req)
    shared = table.shared()
    unused = shared.get(key)
    if unused is None:  # (kept as a bool per row, not the float: a million rows' 7 MB)
        kinds = table.view("cap")[2:]
        unused = shared[key] = kinds[req.vec[2:] == 0].sum(axis=0) > 0
    return unused


def near(table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
    """Lower rtt to the near site is better (``near_of``)."""
    rtt = _rtt(network, req.near_site, table.site[rows])
    return near_of(rtt, req.near_max_ms is not None)


def near_of(rtt: np.ndarray, bounded: bool) -> np.ndarray:
    """The near score of an rtt. Within a bound, steeply: being on the site
    itself outweighs the devices score, being one hop away does not, and
    packing weighs against nearness inside the bound. Without a bound (a
    preference only), by the rtt's ratio: see ``_PREF_POINTS``."""
    if bounded:
        return 100.0 / (1.0 + rtt / _NEAR_RTT_MS)
    far = np.log2(1.0 + _PREF_FAR_MS / _NEAR_RTT_MS)
    return _PREF_POINTS * np.maximum(far - np.log2(1.0 + np.asarray(rtt, np.float64) / _NEAR_RTT_MS), 0.0)


def data(table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
    sites = table.site[rows]
    rtt = np.zeros(len(sites))
    for s in req.data_sites:  # a column per data site, not a row per candidate
        rtt += _rtt(network, s, sites)
    return 100.0 / (1.0 + rtt / _DATA_RTT_MS)


def _rtt(network: Network, site: int, sites: np.ndarray) -> np.ndarray:
    """``network.rtt_to(site)[sites]``: for a few sites of a large network read
    from one walk over the core (``Network.rtt_at``) instead of a column
    over every site (a car's state site, a million sites long)."""
    if sites.size * 64 < network.n:
        return network.rtt_at(site, sites)
    return network.rtt_to(site)[sites]


def transfer_s(network: Network, site: int, sites: np.ndarray, state_bytes: int) -> np.ndarray:
    """float64[k]: seconds to move ``state_bytes`` from ``site`` to each of
    ``sites``: the size over the path's bottleneck bandwidth (within a site,
    the node fabric's ``INTRA_SITE_MBPS``), plus the path's rtt; no path: inf.
    The one measure of a move's cost: the placement of a moving task and the
    return plan (``rescheduler.transfer_s``) both read it."""
    sites = np.asarray(sites, np.int64)
    if sites.size * 64 < network.n:
        rtt, bw = network._at(int(site), sites)
    else:
        rtt, bw = network.rtt_to(site)[sites], network.bandwidth_to(site)[sites]
    bw = np.where(np.isfinite(bw), bw, INTRA_SITE_MBPS)
    with np.errstate(divide="ignore"):
        return np.where(bw > 0, state_bytes * 8 / (np.maximum(bw, 1e-300) * 1e6) + rtt / 1000, np.inf)


def _unused_kinds(req: Request) -> tuple:
    """Which accelerator kinds the request leaves unused: what ``devices`` depends on."""
    key = req.cache.get("devices")
    if key is None:
        key = req.cache["devices"] = ("devices", tuple(v == 0 for v in req.plain[0][2:]))
    return key


def bonus(table: CandidateTable, req: Request, network: Network) -> np.ndarray:
    """float64[n]: the weighted sum of the scores that depend only on what a row
    is (devices, near, data), computed once per table rows and network for all
    requests that leave the same kinds unused and name the same near and data
    sites (one shared vector stays in cache where one per request would not);
    ``total`` adds the packing score, the only one that moves."""
    key = ("bonus", _unused_kinds(req), req.near_site, req.near_max_ms is not None, req.data_sites)
    shared = table.shared()
    hit = shared.get(key)
    if hit is None or hit[0] is not network or hit[2] != network.version:
        rows = np.arange(table.n)
        b = WEIGHTS["devices"] * devices(table, req, rows)
        if req.near_site >= 0:
            b += WEIGHTS["near"] * near(table, req, rows, network)
        if req.data_sites:
            b += WEIGHTS["data"] * data(table, req, rows, network)
        hit = shared[key] = (network, b, network.version)  # a network changes in place: its version says when
    return hit[1]


def total(table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
    out = WEIGHTS["fit"] * fit(table, req, rows) + bonus(table, req, network).take(rows)
    if req.moving is not None:  # a task whose state travels: each second of the move costs a point
        out = out - moving_cost(table, req, rows, network)
    return out


def moving_cost(table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
    """Points a moving task's placement costs on ``rows``: the seconds its state
    takes to get there (``transfer_s``), one point each, as the return plan
    counts a move's downtime; a row it cannot reach costs what no score makes up."""
    site, state_bytes = req.moving
    cost = transfer_s(network, site, table.site[rows], state_bytes)
    return np.minimum(cost, 1e9)
