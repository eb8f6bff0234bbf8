"""Decisions over a neighbourhood: sites first, then the rows on them.

A request bound ``near`` a site can only go to the few sites within its
bound (``NearBound``, found by the network without a column over every
site). Its decision then reads only the rows on those sites: their static
checks, what they have free, their scores, in the same arithmetic as the
flat search over every row (``filters``, ``scores``, ``live.pick``), so it
chooses the same row with the same tie-break draw. A service bound near one
of a million cars touches the car's node and its edge's, not a million rows.

Used when the neighbourhood holds a small share of the table's rows
(``SHARE``); a larger one is searched flat, with the live views.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from suanli.scheduling import kernels, scores
from suanli.scheduling.request import AccelNeed, Private, Request
from suanli.scheduling.table import CandidateTable

SHARE = 1 / 8  # at most this share of the table's rows: decide over them alone
KEEP_ROWS = 4096  # a request keeps its rows up to this many; the last larger set is kept for its decision
_LAST: list = [None, None]  # (request, its entry): the last neighbourhood too large to keep with its request
TIE = 1e-9  # as live.TIE
DRAWS = [0]  # ties drawn by ``pick`` so far (a caller can tell whether its pick drew)
COMPILED = True  # plain requests are picked by one compiled loop (False: by array calls, as the tests compare)
COMPILED_PICKS = [0]  # picks made by the compiled loop so far


def site_rows(table: CandidateTable) -> tuple[np.ndarray, np.ndarray]:
    """The table's rows by site: (rows sorted by site, where each site's rows
    start in it: int32[S + 1], rows being below 2^31), kept until rows are added."""
    shared = table.shared()
    hit = shared.get("site rows")
    if hit is None:
        site = table.view("site")
        order = np.argsort(site, kind="stable").astype(np.int64)
        n_sites = int(site.max()) + 1 if site.size else 0
        start = np.zeros(n_sites + 2, np.int32)  # (a million devices' sites: 4 bytes each, not 8)
        start[1:] = np.cumsum(np.bincount(site, minlength=n_sites + 1))
        hit = shared["site rows"] = (order, start)
    return hit


_OPEN: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(private mask) -> (it, its complement, read-only)


def open_sites(private: np.ndarray) -> np.ndarray:
    """bool[S], read-only: the sites that are not a device's own (``~private``),
    one array per private mask (so the network keeps what it learns of it)."""
    got = _OPEN.get(id(private))
    if got is None or got[0] is not private:
        if len(_OPEN) > 8:
            _OPEN.clear()
        out = ~private
        out.flags.writeable = False
        got = _OPEN[id(private)] = (private, out)
    return got[1]


def private_rows(table: CandidateTable, private: np.ndarray) -> int:
    """How many of the table's rows are on private sites, kept until rows are added."""
    shared = table.shared()
    hit = shared.get(("private rows", id(private)))
    if hit is None:
        hit = shared[("private rows", id(private))] = int(np.count_nonzero(private[table.view("site")]))
    return hit


def site_counts(table: CandidateTable) -> np.ndarray:
    """int32[S + 1]: how many of the table's rows each site has (``site_rows``'
    runs' lengths), kept until rows are added."""
    shared = table.shared()
    hit = shared.get("site counts")
    if hit is None:
        hit = shared["site counts"] = np.diff(site_rows(table)[1])
    return hit


def runs(order: np.ndarray, first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The runs ``order[first[i]:first[i] + count[i]]`` one after another, in one gather."""
    total = int(count.sum())
    return order[np.repeat(first - np.cumsum(count) + count, count) + np.arange(total)]


def rows_of(table: CandidateTable, sites: np.ndarray) -> np.ndarray:
    """The rows of ``sites`` (each a site the table has rows on: ``site_counts``
    is long enough), site after site, in one gather."""
    order, start = site_rows(table)
    return runs(order, start[sites], site_counts(table)[sites])


def candidate_rows(table: CandidateTable, req: Request) -> np.ndarray | None:
    """int64: the rows on the sites within the request's near bound, ascending;
    None when it has no bound or the bound holds too many rows to be worth it.
    Their rtts to the near site are kept beside them (``row_rtt``)."""
    bound = req.near
    if bound is None or table.n == 0:
        return None
    key = (id(table), table.version, table.n)
    got = req.cache.get("near rows")
    if got is None and _LAST[0] is req:
        got = _LAST[1]
    if got is not None and got[0] == key:
        return got[1]
    rows = rtt = None
    if bound.sites.size <= SHARE * bound.n_sites:
        order, start = site_rows(table)
        sites = bound.sites[bound.sites < start.size - 1]
        count = start[sites + 1] - start[sites]
        if int(count.sum()) <= SHARE * table.n:
            rows = runs(order, start[sites], count)
            rtt = np.repeat(bound.rtt[bound.sites < start.size - 1], count)
            if rows.size > 1:
                by_row = np.argsort(rows, kind="stable")
                rows, rtt = rows[by_row], rtt[by_row]
    entry = (key, rows, rtt)
    if rows is None or rows.size <= KEEP_ROWS:
        req.cache["near rows"] = entry
    else:  # a large neighbourhood is kept for its request's decision only, not for the request's life
        req.cache.pop("near rows", None)
        _LAST[0], _LAST[1] = req, entry
    return rows


def ever_rows(table: CandidateTable, req: Request) -> tuple[np.ndarray, list[int]] | None:
    """The rows within the request's bound that could ever hold it (passing
    every check on what a row is: ``static_ok``), ascending, and their sites,
    ascending; kept with the request until rows are added (a device's task
    parked for room at each arrival while the edge near it is full). None
    when it is not decided over a neighbourhood (``candidate_rows``)."""
    rows = candidate_rows(table, req)
    if rows is None:
        return None
    key = (id(table), table.version, table.n)
    got = req.cache.get("ever rows")
    if got is not None and got[0] == key:
        return got[1]
    rows = rows[static_ok(table, req, rows, within=True)]
    rows.flags.writeable = False  # (kept: shared by the request's parked units)
    entry = (rows, np.unique(table.site[rows]).tolist())
    if rows.size <= KEEP_ROWS:
        req.cache["ever rows"] = (key, entry)
    return entry


def row_rtt(req: Request) -> np.ndarray:
    """float64: the rtt to the near site of each of ``candidate_rows``."""
    got = req.cache.get("near rows")
    return (got if got is not None else _LAST[1])[2]


def _slots(table: CandidateTable, need: AccelNeed, rows) -> np.ndarray:
    """bool[D, k]: the device slots of ``rows`` of the needed kind and an allowed model."""
    kind = table.dev_kind[:, rows]
    ok = kind == need.kind
    if need.kind < 0:
        ok[:] = False
    if need.models is not None:
        ok &= np.isin(table.dev_model[:, rows], need.models)
    return ok


def _usable(table: CandidateTable, need: AccelNeed, rows) -> np.ndarray:
    """bool[D, k]: the slots a need may use (``filters._static``'s rule): for a
    share, shareable ones; for whole devices, those that hold a whole device.
    What a row's slots are does not change: kept per row for every request
    with the same need, until rows are added."""
    key = ("usable", need.kind, None if need.models is None else tuple(need.models.tolist()), need.whole)
    shared = table.shared()
    hit = shared.get(key)
    if hit is None:
        hit = shared[key] = (np.zeros(table.n, bool), np.zeros((table.dev_kind.shape[0], table.n), bool))
    known, value = hit
    rows = np.asarray(rows)
    new = rows[~known[rows]]
    if new.size:
        ok = _slots(table, need, new)
        value[:, new] = ok & (table.dev_cap[:, new] == 1000) if need.whole else ok & table.dev_shareable[:, new]
        known[new] = True
    return value[:, rows]


def static_ok(table: CandidateTable, req: Request, rows: np.ndarray, within: bool = False) -> np.ndarray:
    """bool[k]: ``filters.static_mask`` at ``rows`` (``within``: rows known to
    be inside the near bound, whose check is then skipped). The checks on
    what the rows are (groups, arch, capacity, devices) are kept per row for
    every request that asks the same of them (a million cars' services ask
    the same of the edges around them); the site terms are read each time."""
    return req.sites_ok(table.site[rows], skip=req.near if within else None) & what_rows_are(table, req, rows)


def _row_checks(table: CandidateTable, req: Request) -> tuple[np.ndarray, np.ndarray]:
    """(bool[n] rows checked, bool[n] their answer) of ``_what_rows_are`` for
    the requests that ask what ``req`` asks, kept until rows are added."""
    key = req.cache.get("rows key")
    if key is None:
        needs = tuple((n.kind, None if n.models is None else tuple(n.models.tolist()), n.whole, n.count, n.milli)
                      for n in req.accels)
        key = req.cache["rows key"] = ("what rows are", tuple(req.vec[:2].tolist()), needs,
                                       None if req.arch is None else tuple(req.arch.tolist()),
                                       tuple((reason, m.tobytes()) for reason, m in req.group_checks))
    shared = table.shared()
    hit = shared.get(key)
    if hit is None:
        hit = shared[key] = (np.zeros(table.n, bool), np.zeros(table.n, bool))
    return hit


def _what_rows_are(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """bool[k]: the checks of ``static_ok`` on what ``rows`` are (not on their sites)."""
    ok = np.ones(rows.size, bool)
    group = table.group[rows]
    for _, m in req.group_checks:
        ok &= m[group]
    if req.arch is not None:
        ok &= np.isin(table.arch[rows], req.arch)
    cap = table.cap[:, rows]
    for col in (0, 1):
        if req.vec[col] > 0:
            ok &= cap[col] >= req.vec[col]
    for need in req.accels:
        slots = _slots(table, need, rows)
        ok &= slots.any(axis=0)  # the kind is there (and, with models, one of them)
        if need.whole:
            ok &= (slots & (table.dev_cap[:, rows] == 1000)).sum(axis=0) >= need.count
        else:
            ok &= (slots & table.dev_shareable[:, rows] & (table.dev_cap[:, rows] >= need.milli)).any(axis=0)
    return ok


def dynamic_ok(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """bool[k]: ``filters.dynamic_ok`` at ``rows``."""
    vec = req.plain[0]
    mask = table.enabled[rows]
    free = table.free[:, rows]
    for col in (0, 1):
        if vec[col] > 0:
            mask = mask & (free[col] >= vec[col])
    if req.accels or req.whole_node:
        dev_free = table.dev_free[:, rows]
        for need in req.accels:
            usable = _usable(table, need, rows)
            if need.whole:
                mask = mask & ((usable & (dev_free == 1000)).sum(axis=0) >= need.count)
            else:
                mask = mask & (usable & (dev_free >= need.milli)).any(axis=0)
        if req.whole_node:
            mask = mask & (free == table.cap[:, rows]).all(axis=0) & (dev_free == table.dev_cap[:, rows]).all(axis=0)
    return mask


def what_rows_are(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """bool[k]: ``static_ok`` at ``rows`` but for their sites (what each row
    is: kept per row for the requests that ask the same)."""
    known, value = _row_checks(table, req)
    new = rows[~known[rows]]
    if new.size:
        value[new] = _what_rows_are(table, req, new)
        known[new] = True
    return value[rows]


def fits_now(table: CandidateTable, req: Request, rows: np.ndarray, within: bool = False) -> np.ndarray:
    """bool[k]: which of ``rows`` could take ``req`` now (what each is, and
    what it has free); ``within``: ``static_ok``'s, for rows inside the bound."""
    return static_ok(table, req, rows, within=within) & dynamic_ok(table, req, rows)


def row_slots(table: CandidateTable, req: Request, row: int) -> list[list[int]]:
    """``filters.row_slots`` for one row, from the row alone."""
    return [np.flatnonzero(_usable(table, need, np.array([row]))[:, 0]).tolist() for need in req.accels]


def bonus(table: CandidateTable, req: Request, rows: np.ndarray, rtt: np.ndarray, network,
          near: bool | None = None) -> np.ndarray:
    """``scores.bonus`` at ``rows`` (``rtt``: theirs to the near site), term by
    term in the same order (the same floats). ``near``: whether the near term
    counts (default: when the request names a near site)."""
    b = scores.WEIGHTS["devices"] * scores.devices(table, req, rows)
    if req.near_site >= 0 if near is None else near:
        b += scores.WEIGHTS["near"] * scores.near_of(rtt, req.near_max_ms is not None)
    if req.data_sites:
        b += scores.WEIGHTS["data"] * scores.data(table, req, rows, network)
    return b


def _compiled(req: Request) -> bool:
    """Whether ``pick`` decides ``req`` in one compiled loop (``kernels.near_pick``):
    a request of cpu and memory alone (no devices, not a whole node, no data
    sites), bound near a site by an rtt."""
    got = req.cache.get("compiled pick")
    if got is None:
        vec = req.plain[0]
        got = req.cache["compiled pick"] = (
            not req.accels and not req.whole_node and not req.data_sites and req.near_max_ms is not None
            and any(v > 0 for v in vec[:2]) and not any(v > 0 for v in vec[2:]))
    return got and COMPILED


def _static_near(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """``static_ok(within=True)`` at the request's candidate rows, kept with
    them while its site terms are fixed masks (not a network's component or
    an unfinished bound, which the network's changes move)."""
    got = req.cache.get("near rows")
    if got is None or got[1] is not rows:
        return static_ok(table, req, rows, within=True)
    fixed = req.cache.get("fixed terms")
    if fixed is None:
        fixed = req.cache["fixed terms"] = all(
            term is req.near or isinstance(term, (np.ndarray, Private)) for _, term in req.site_terms)
    if not fixed:
        return static_ok(table, req, rows, within=True)
    kept = req.cache.get("near static")
    if kept is None or kept[0] is not rows:
        kept = req.cache["near static"] = (rows, static_ok(table, req, rows, within=True))
    return kept[1]


def _pick_compiled(table: CandidateTable, req: Request, rows: np.ndarray, rtt: np.ndarray,
                   rng: np.random.Generator, masks: Sequence[np.ndarray]) -> int:
    COMPILED_PICKS[0] += 1
    static = _static_near(table, req, rows)
    if masks:
        masked = masks[0][rows]
        for m in masks[1:]:
            masked &= m[rows]
    else:
        masked = _NONE
    dims, _, _ = scores.dims_of(req)
    top = np.empty(rows.size, np.int64)
    n = kernels.near_pick(rows, rtt, static, masked, table.enabled, table.free, table.cap, req.vec, dims,
                          scores.stranding(table, req), scores.WEIGHTS["fit"], scores.WEIGHTS["devices"],
                          scores.WEIGHTS["near"], req.near_site >= 0, scores._NEAR_RTT_MS, TIE,
                          np.empty(rows.size), top)
    if n == 0:
        return -1
    if n > 1:
        DRAWS[0] += 1
        return int(top[rng.integers(n)])
    return int(top[0])


_NONE = np.zeros(0, bool)


def pick(table: CandidateTable, req: Request, rows: np.ndarray, network, rng: np.random.Generator,
         masks: Sequence[np.ndarray] = (), inside: np.ndarray | None = None) -> int:
    """``live.pick`` over the candidate ``rows`` only: the best row that fits
    now and passes ``masks`` (and is one of ``inside``, ascending, when given),
    ties drawn in row order; -1 when none."""
    rtt = row_rtt(req)
    if inside is not None:
        keep = np.isin(rows, inside, assume_unique=True)
        rows, rtt = rows[keep], rtt[keep]
    if _compiled(req):
        return _pick_compiled(table, req, rows, rtt, rng, masks)
    ok = fits_now(table, req, rows, within=True)
    for m in masks:
        ok &= m[rows]
    cand = rows[ok]
    if not cand.size:
        return -1
    value = scores.WEIGHTS["fit"] * scores.fit(table, req, cand) + bonus(table, req, cand, rtt[ok], network)
    best = value.max()
    top = cand[value >= best - TIE]
    if top.size > 1:
        DRAWS[0] += 1
        return int(top[rng.integers(top.size)])
    return int(top[0])
