"""Filters: pure functions from (table, request) to boolean masks over rows.

Static checks depend only on what a row *is* (site, arch, devices, capacity)
and are computed once per request and table version; dynamic checks depend on
what is free now. ``feasible`` ANDs them; ``explain`` (only on failure)
counts, for each row, the first check that removed it.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from suanli.scheduling import kernels, nearby
from suanli.scheduling.reasons import Binding, Reasons, Why
from suanli.scheduling.request import AccelNeed, Request
from suanli.scheduling.table import CandidateTable, cols

Check = tuple[Why, np.ndarray]  # (reason, bool[N])
# explanations of requests whose site masks come before their near bound read the rows that pass those
# terms or fail one alone (``_masks_first``); off: every row (the same counts and binding check, slower)
SPLIT = True


def _needs_reasons(need: AccelNeed) -> tuple[Why, Why, Why, Why]:
    """The reasons of one accelerator need's checks, each implied by the one
    before it failing: no such kind; no such model; too few (whole devices) or
    none shareable with room (a share); too few free now."""
    k = need.kind_name
    return Why("kind", resource=k), Why("model", resource=k), Why("capacity", resource=k), Why("shareable", resource=k)


def slot_ok(table: CandidateTable, need: AccelNeed) -> np.ndarray:
    """bool[D, N]: device slots of the needed kind and an allowed model (a fresh array)."""
    models = tuple(need.models.tolist()) if need.models is not None else None
    return _shared(table, ("slots", need.kind, models), lambda: _slot_ok(table, need)).copy()


def _slot_ok(table: CandidateTable, need: AccelNeed) -> np.ndarray:
    ok = table.view("dev_kind") == need.kind
    if need.kind < 0:  # a kind the fleet does not have
        ok[:] = False
    if need.models is not None:
        ok &= np.isin(table.view("dev_model"), need.models)
    return ok


def _shared(table: CandidateTable, key: tuple, make) -> np.ndarray:
    """A mask over rows that depends only on ``key`` and the table's rows, made once
    for every request that needs it (``CandidateTable.shared``). Not to be changed."""
    shared = table.shared()
    hit = shared.get(key)
    if hit is None:
        hit = shared[key] = make()
    return hit


def static_checks(table: CandidateTable, req: Request, at: np.ndarray | None = None, known: int = 0) -> list[Check]:
    """Checks on what rows are; the order is the order of explanations. With
    ``at`` (row indices), the same checks as masks over those rows, made from
    them alone, but the first ``known`` site terms (known to hold there)."""
    full = at is None

    def col(name: str) -> np.ndarray:
        a = table.view(name)
        return a if full else a[..., at]

    def shared(key: tuple, make) -> np.ndarray:
        return _shared(table, key, make) if full else make()

    site, group = col("site"), col("group")
    if full:
        # a mask many requests share (allowed sites, selectors) is made once per table; one of a
        # request's own (its latency bound, its reachability) is not kept beside them
        checks: list[Check] = [
            (reason, _shared(table, ("site", mask.tobytes()), lambda m=mask: m[site]) if isinstance(term, np.ndarray)
             else mask[site])
            for (reason, mask), (_, term) in zip(req.site_checks, req.site_terms)]
    else:
        checks = [(reason, req.term_ok(term, site)) for reason, term in req.site_terms[known:]]
    checks += [(reason, shared(("group", mask.tobytes()), lambda m=mask: m[group]))
               for reason, mask in req.group_checks]
    if req.arch is not None:
        arch = req.arch
        checks.append((req.arch_why, shared(("arch", tuple(arch.tolist())), lambda: np.isin(col("arch"), arch))))
    cap = col("cap")
    for c, what in ((0, "cpu"), (1, "memory")):
        if req.vec[c] > 0:
            checks.append((Why("capacity", resource=what), cap[c] >= req.vec[c]))
    for need in req.accels:
        no_kind, no_model, too_few, not_shareable = _needs_reasons(need)
        kind = (col("dev_kind") == need.kind).any(axis=0) & (need.kind >= 0)
        checks.append((no_kind, kind))
        ok = slot_ok(table, need) if full else nearby._slots(table, need, at)
        if need.models is not None:
            checks.append((no_model, ok.any(axis=0)))
        if need.whole:
            whole = ok & (col("dev_cap") == 1000)
            checks.append((too_few, whole.sum(axis=0) >= need.count))
        else:
            share = ok & col("dev_shareable") & (col("dev_cap") >= need.milli)
            checks.append((not_shareable, share.any(axis=0)))
    return checks


def _static(table: CandidateTable, req: Request) -> tuple[np.ndarray, list[np.ndarray], dict, list]:
    """Cached per table until its rows change: the AND of static checks, per-need
    usable slots, (filled as rows are asked for) each row's usable slots as
    indices (``row_slots``; shared by the requests with the same needs), and
    per whole-device need the usable slots that hold a whole device (None for
    shares)."""
    cache = table.cache_for(req)
    hit = cache.get("static")
    if hit is None or hit[0] != table.version:
        mask = np.ones(table.n, bool)
        for _, m in static_checks(table, req):
            mask &= m
        slots, whole = [], []
        for need in req.accels:
            ok = slot_ok(table, need)
            if not need.whole:
                ok &= table.view("dev_shareable")
            slots.append(ok)
            whole.append(ok & (table.view("dev_cap") == 1000) if need.whole else None)
        needs = tuple((n.kind, None if n.models is None else tuple(n.models.tolist()), n.whole) for n in req.accels)
        by_row = table.shared().setdefault(("row slots", needs), {})
        hit = cache["static"] = (table.version, mask, slots, by_row, whole)
    return hit[1], hit[2], hit[3], hit[4]


def need_arrays(table: CandidateTable, req: Request) -> tuple[np.ndarray, np.ndarray]:
    """The request's accelerator needs as arrays, for compiled loops: int64[K, 3]
    (whole, count, milli) and bool[K, D, N], the slots each need may use (for
    whole devices only those that hold a whole device); cached with ``_static``."""
    cache = table.cache_for(req)
    hit = cache.get("needs")
    if hit is None or hit[0] != table.version:
        _, slots, _, whole = _static(table, req)
        needs = np.array([(n.whole, n.count, n.milli) for n in req.accels], np.int64).reshape(-1, 3)
        masks = [np.ascontiguousarray(s if w is None else w) for s, w in zip(slots, whole)]
        if len(masks) == 1:  # the usual case: the one mask itself, not a copy
            usable = masks[0][None]
        else:
            usable = np.stack(masks) if masks else np.zeros((0, table.dev_free.shape[0], table.n), bool)
        hit = cache["needs"] = (table.version, needs, usable)
    return hit[1], hit[2]


def _static_checks(table: CandidateTable, req: Request) -> list[Check]:
    """``static_checks``, cached per table until its rows change (explanations of refusals)."""
    cache = table.cache_for(req)
    hit = cache.get("checks")
    if hit is None or hit[0] != table.version:
        hit = cache["checks"] = (table.version, static_checks(table, req))
    return hit[1]


def static_mask(table: CandidateTable, req: Request) -> np.ndarray:
    """bool[N]: rows the request could ever use (what they are, not what is free)."""
    return _static(table, req)[0]


def static_fits(table: CandidateTable, req: Request, row: int) -> bool:
    """``static_mask(table, req)[row]``, without a mask over every row for a
    request decided over its neighbourhood."""
    if req.near is not None and nearby.candidate_rows(table, req) is not None:
        return bool(nearby.static_ok(table, req, np.array([row]))[0])
    return bool(static_mask(table, req)[row])


def usable_slots(table: CandidateTable, req: Request) -> list[np.ndarray]:
    return _static(table, req)[1]


def row_slots(table: CandidateTable, req: Request, row: int) -> list[list[int]]:
    """Per need of ``req``: the device slots of ``row`` it may use (``usable_slots``'
    column, as indices; for a need of whole devices only the slots that hold a
    whole device), for the scalar paths; kept per row with the request's static
    masks (or, for a request decided over its neighbourhood, read from the row)."""
    if req.near is not None and nearby.candidate_rows(table, req) is not None:
        return nearby.row_slots(table, req, row)
    return _slots_at(_static(table, req), row)


def _slots_at(static: tuple[np.ndarray, list[np.ndarray], dict, list], row: int) -> list[list[int]]:
    """``row_slots`` from ``_static``'s entry."""
    _, slots, by_row, whole = static
    got = by_row.get(row)
    if got is None:
        got = by_row[row] = [[s for s, usable in enumerate((ok if w is None else w)[:, row].tolist()) if usable]
                             for ok, w in zip(slots, whole)]
    return got


# the reasons of the dynamic checks on a row's service and its free cpu and memory (``_dynamic``'s, and
# in that order ``_explain_few``'s compiled loop's)
_UNAVAILABLE, _SHORT = Why("unavailable"), (Why("capacity", resource="cpu"), Why("capacity", resource="memory"))


def _dynamic(table: CandidateTable, req: Request, at) -> list[Check]:
    """The dynamic checks on rows ``at`` (a slice or row indices), masks over those rows."""
    free = cols(table.free, at)
    checks: list[Check] = [(_UNAVAILABLE, table.enabled[at])]
    for col in (0, 1):
        if req.vec[col] > 0:
            checks.append((_SHORT[col], free[col] >= req.vec[col]))
    dev_free = cols(table.dev_free, at)
    for need, ok in zip(req.accels, _usable_at(table, req, at)):
        too_few = _needs_reasons(need)[2]
        if need.whole:
            checks.append((too_few, (ok & (dev_free == 1000)).sum(axis=0) >= need.count))
        else:
            checks.append((too_few, (ok & (dev_free >= need.milli)).any(axis=0)))
    if req.whole_node:
        untouched = (free == cols(table.cap, at)).all(axis=0) & (dev_free == cols(table.dev_cap, at)).all(axis=0)
        checks.append((Why("in-use"), untouched))
    return checks


def _any_model_fits(table: CandidateTable, need: AccelNeed, at) -> np.ndarray:
    """bool over rows ``at``: the need would fit there now if any model of its kind would do."""
    kind = cols(table.dev_kind, at) == need.kind
    dev_cap, dev_free = cols(table.dev_cap, at), cols(table.dev_free, at)
    if need.whole:
        whole = kind & (dev_cap == 1000)
        return ((whole.sum(axis=0) >= need.count) & ((whole & (dev_free == 1000)).sum(axis=0) >= need.count))
    share = kind & cols(table.dev_shareable, at) & (dev_cap >= need.milli)
    return (share & (dev_free >= need.milli)).any(axis=0)


def _usable_at(table: CandidateTable, req: Request, at) -> list[np.ndarray]:
    """Per need of ``req``: bool[D, k], the device slots of rows ``at`` it may use
    (for whole devices only those that hold a whole device)."""
    if req.accels and isinstance(at, slice):
        _, usable, _, whole = _static(table, req)
        return [cols(ok if w is None else w, at) for ok, w in zip(usable, whole)]
    return [nearby._usable(table, need, at) for need in req.accels]  # a few rows: from those rows alone


def dynamic_checks(table: CandidateTable, req: Request) -> list[Check]:
    return _dynamic(table, req, slice(0, table.n))


def dynamic_ok(table: CandidateTable, req: Request, at) -> np.ndarray:
    """bool over rows ``at``: every dynamic check passes (``_dynamic``'s checks ANDed,
    with no reasons kept: this is the hot path of live views)."""
    vec = req.plain[0]
    mask = cols(table.enabled, at)
    if vec[0] > 0 or vec[1] > 0:
        free = cols(table.free[:2], at)  # cpu and memory only
        for col in (0, 1):
            if vec[col] > 0:
                mask = mask & (free[col] >= vec[col])
    if req.accels or req.whole_node:
        dev_free = cols(table.dev_free, at)
        _, usable, _, whole = _static(table, req)
        for need, ok, whole_ok in zip(req.accels, usable, whole):
            if need.whole:
                free_whole = cols(whole_ok, at) & (dev_free == 1000)
                mask = mask & (free_whole.sum(axis=0) >= need.count)  # sum: half the time of count_nonzero here
            else:
                mask = mask & (cols(ok, at) & (dev_free >= need.milli)).any(axis=0)
        if req.whole_node:
            mask = mask & (cols(table.free, at) == cols(table.cap, at)).all(axis=0) & (
                dev_free == cols(table.dev_cap, at)).all(axis=0)
    return mask


def feasible(table: CandidateTable, req: Request, extra: Sequence[Check] = ()) -> np.ndarray:
    """bool[N]: rows where the request fits now (from the request's live view)."""
    from suanli.scheduling.live import view

    mask = view(table, req).ok.copy()
    for _, m in extra:
        mask &= m
    return mask


def fits_row(table: CandidateTable, req: Request, row: int, extra: Sequence[Check] = ()) -> bool:
    """Does the request fit this one row now? (``feasible`` for a single row, in scalar arithmetic.)"""
    if req.near is not None and nearby.candidate_rows(table, req) is not None:  # decided over its neighbourhood
        at = np.array([row])
        return bool(nearby.static_ok(table, req, at)[0] and nearby.dynamic_ok(table, req, at)[0]) \
            and all(m[row] for _, m in extra)
    cached = _static(table, req)
    if not (cached[0][row] and table.enabled[row]):
        return False
    free = table.free[:, row]
    vec = req.plain[0]
    if free[0] < vec[0] or free[1] < vec[1]:
        return False
    if req.accels:
        dev_free = table.dev_free[:, row].tolist()
        for need, usable in zip(req.accels, _slots_at(cached, row)):
            if need.whole:
                if sum(1 for s in usable if dev_free[s] == 1000) < need.count:
                    return False
            elif not any(dev_free[s] >= need.milli for s in usable):
                return False
    if req.whole_node and not ((free == table.cap[:, row]).all()
                               and (table.dev_free[:, row] == table.dev_cap[:, row]).all()):
        return False
    return all(m[row] for _, m in extra)


def explain(table: CandidateTable, req: Request, extra: Sequence[Check] = ()) -> Counter:
    """Counts per reason: each row is charged to the first check it fails.
    A request whose first checks are other devices' sites and its near bound
    is explained over the rows of the open sites within the bound (from the
    network's neighbourhood, not a column): every other row fails one of
    those two first and is only counted (a car's service does not read a
    million rows to say that they are other cars' or too far); its binding
    check reads the rows that may fail one of the two alone as well
    (``_near_relaxed``): the open rows beyond the bound, and other devices'
    rows within it when those are a relaxation. One whose
    near bound comes after site masks (a selector naming an edge and a
    cloud) reads the rows that pass the terms up to the bound and those that
    fail one term alone, the rest counted per site (``_masks_first``): the
    same counts and binding check as over every row."""
    if table.settle is not None:
        table.settle()
    counts = Reasons()
    near = _near_first(table, req)
    at: slice | np.ndarray = slice(0, table.n)
    if near is None and SPLIT and (split := _split_kept(table, req)) is not None:
        return _explain_split(table, req, extra, counts, split)
    if near is None:
        remaining = ~table.view("retired")
        checks = [*_static_checks(table, req), *dynamic_checks(table, req), *extra]
    else:
        at, private_rows, private_reason, near_sites = near
        if private_rows:
            counts[private_reason] += private_rows
        near_reason = req.site_terms[0 if private_reason is None else 1][0]
        beyond = table.n - private_rows - at.size
        if beyond:
            counts[near_reason] += beyond
        remaining = np.ones(at.size, bool)
        known = 1 if private_reason is None else 2  # other devices' sites and the bound: they hold at ``at``
        checks = _checks_at(table, req, at, known, extra)
    rows = remaining.copy()
    for reason, mask in checks:
        failed = int(np.count_nonzero(remaining & ~mask))
        if failed:
            counts[reason] += failed
        remaining &= mask
    more = None
    if near is not None:  # the first terms pass at ``at``; rows elsewhere failing one of them alone are counted
        checks = [(reason, rows) for reason, _ in req.site_terms[:known]] + checks
        more = _near_relaxed(table, req, extra, at, near_sites, known, beyond)
    counts.binding = _binding(table, req, checks, rows, at, more)
    return counts


def _checks_at(table: CandidateTable, req: Request, at: np.ndarray, known: int, extra: Sequence[Check]) -> list[Check]:
    """Every check but the first ``known`` site terms, at rows ``at``, in order."""
    return [*_static_checks_at(table, req, at, known), *_dynamic(table, req, at), *((r, m[at]) for r, m in extra)]


def _near_relaxed(table: CandidateTable, req: Request, extra: Sequence[Check], at: np.ndarray,
                  near_sites: np.ndarray, known: int, beyond: int) -> dict[Why, int]:
    """For ``explain`` over a neighbourhood (``_near_first``): how many rows
    outside it fail one of its first two terms alone, by that term's reason,
    for the binding check: the open rows beyond the bound that pass every
    other check (as many as the edges' and clouds' rows are read, not the
    devices'), and, where another device's own site is a relaxation
    (``_binding``), the rows on other devices' sites within the bound that
    do (as many as the neighbourhood's devices)."""
    first = req.site_terms[0][1] if known == 2 else None
    private = first.private if first is not None else None
    out: dict[Why, int] = {}
    if beyond:
        far = _far_rows(table, private, near_sites, first.near if first is not None else -1)
        out[req.site_terms[known - 1][0]] = _passing(table, req, extra, far, known)
    if first is not None and not _own_device(req):
        bound = req.near
        sites, _ = bound.network.within(bound.site, bound.max_rtt_ms)
        sites = sites[sites < nearby.site_counts(table).size]
        sites = sites[private[sites] & (sites != first.near)]
        if sites.size:
            out[req.site_terms[0][0]] = _passing(table, req, extra, nearby.rows_of(table, sites), known)
    return out


def _far_rows(table: CandidateTable, private: np.ndarray | None, near_sites: np.ndarray, near: int) -> np.ndarray:
    """The open rows beyond a bound whose open sites within are
    ``near_sites`` (``near``: the device it is bound near): kept per table
    and neighbourhood (the cars around an edge share one) until rows are
    added."""
    per_site = nearby.site_counts(table)
    if private is not None:
        # its device's own site, beyond a bound tighter than its rtt within, has rows open to it
        beyond_own = near if 0 <= near < per_site.size and per_site[near] and private[near] \
            and near not in near_sites else -1
        near_sites = near_sites[~private[near_sites]]  # (its own site within: not another's to take out)
    else:
        beyond_own = -1
    kept = table.shared().setdefault("far rows", {})
    key = (id(private), near_sites.tobytes(), beyond_own)
    rows = kept.get(key)
    if rows is not None:
        return rows
    if len(kept) >= 4096:  # bounded: entries per neighbourhood
        kept.clear()
    far = _open_sites(table, private)
    pos = np.searchsorted(far, near_sites)  # the open sites within the bound (both ascending) taken out
    inside = pos < far.size
    pos = pos[inside]
    drop = pos[far[pos] == near_sites[inside]]
    if drop.size:
        far = np.delete(far, drop)
    if beyond_own >= 0:
        far = np.append(far, beyond_own)
    rows = kept[key] = nearby.rows_of(table, far)
    return rows


def _passing(table: CandidateTable, req: Request, extra: Sequence[Check], rows: np.ndarray, known: int) -> int:
    """How many of ``rows`` pass every check but the first ``known`` site
    terms (what rows are, kept per row; then, of those that pass, the site
    terms after those, ``extra`` and what they have free): no reasons made,
    only the count."""
    rows = rows[nearby.what_rows_are(table, req, rows)]
    if len(req.site_terms) > known:
        site = table.site[rows]
        ok = np.ones(rows.size, bool)
        for _, term in req.site_terms[known:]:
            ok &= req.term_ok(term, site)
        rows = rows[ok]
    for _, mask in extra:
        rows = rows[mask[rows]]
    return int(np.count_nonzero(nearby.dynamic_ok(table, req, rows))) if rows.size else 0


def _own_device(req: Request) -> bool:
    """Whether the request is bound near a device's own site: another
    device's site is then no relaxation (no bound near it opens another)."""
    from suanli.scheduling.request import Private

    first = req.site_terms[0][1] if req.site_terms else None
    return isinstance(first, Private) and 0 <= first.near < len(first.private) and bool(first.private[first.near])


def _open_sites(table: CandidateTable, private: np.ndarray | None) -> np.ndarray:
    """int64, ascending: the sites with rows that are not a device's own
    (all without private sites), kept per table until rows are added (edges
    and clouds: a few hundred among a million cars')."""
    shared = table.shared()
    key = ("open sites", id(private))
    sites = shared.get(key)
    if sites is None:
        has_rows = np.flatnonzero(nearby.site_counts(table))
        sites = shared[key] = has_rows if private is None else has_rows[~private[has_rows]]
    return sites


def _binding(table: CandidateTable, req: Request, checks: Sequence[Check], rows: np.ndarray, at,
             more: dict[Why, int] | None = None) -> Binding | None:
    """The check that some of ``rows`` fail and nothing else (the most such
    rows; the earlier check among equals), with the best of those rows'
    figures when it is a resource's; None when every row fails two or more.
    ``more``: rows not among ``rows`` that fail one check alone, counted by
    its reason (a site term's: no figures are read of them).
    Rows without an accelerator kind the request needs are left out: the
    relaxation they offer is not to need it; so are rows on another
    device's own site when the request is bound near a device's own (a
    device's work is not bound near another; work bound elsewhere, or
    nowhere, would fit there bound near that device)."""
    passes: dict[Why, np.ndarray] = {}  # a reason's checks together (capacity and free of one resource are one)
    for reason, mask in checks:
        prev = passes.get(reason)
        passes[reason] = mask if prev is None else prev & mask
    private = next((reason for reason in passes if reason.code == "private"), None)
    if private is not None and _own_device(req):  # bound near its device: another device's is no candidate
        rows = rows & passes.pop(private)
    for need in req.accels:
        no_kind, no_model, too_few, not_shareable = _needs_reasons(need)
        if no_model in passes:  # with any model of the kind: are there enough (free) devices?
            either = ~passes[no_model] & _any_model_fits(table, need, at)
            for later in (too_few, not_shareable):
                if later in passes:
                    passes[later] = passes[later] | either
        if no_kind in passes:  # a node without the kind is no candidate: dropping the need is no relaxation
            rows = rows & passes.pop(no_kind)
    fails = np.zeros(rows.size, np.int16)
    for ok in passes.values():
        fails += ~ok
    single = rows & (fails == 1)
    more = {reason: n for reason, n in more.items() if n and reason in passes} if more else None
    if not single.any() and not more:
        return None
    best, most = None, 0
    for reason, ok in passes.items():
        n = int(np.count_nonzero(single & ~ok)) + (more.get(reason, 0) if more else 0)
        if n > most:
            best, most = reason, n
    if best.code != "capacity":
        return Binding(best, most, layer=best.layer)
    only = single & ~passes[best]
    for col, what in ((0, "cpu"), (1, "memory")):
        if best.resource == what:
            return Binding(best, most, what, int(req.vec[col]), int(cols(table.free, at)[col][only].max()),
                           capacity=int(cols(table.cap, at)[col][only].max()))
    for need, ok in zip(req.accels, _usable_at(table, req, at)):
        if best.resource == need.kind_name:
            dev_free, dev_cap = cols(table.dev_free, at)[:, only], cols(table.dev_cap, at)[:, only]
            if need.whole:
                have = int((ok[:, only] & (dev_free == 1000)).sum(axis=0).max()) * 1000
                whole = int((ok[:, only] & (dev_cap == 1000)).sum(axis=0).max()) * 1000
                return Binding(best, most, need.kind_name, need.count * 1000, have, capacity=whole)
            have = int(np.where(ok[:, only], dev_free, 0).max())
            return Binding(best, most, need.kind_name, need.milli, have,
                           capacity=int(np.where(ok[:, only], dev_cap, 0).max()))
    return Binding(best, most)


class _Split:
    """What ``explain`` reads of ``_masks_first``'s split that does not change
    while the table's rows and the network's paths stay (``_split_kept``):
    the rows charged to the site terms up to the bound; the rows read,
    ascending, and which of them pass those terms (``at``); the checks on
    what those rows are, in order (the site terms, then the static checks),
    each over the rows read; how many site terms come before the bound and
    it (``known``); and a mask of every row read."""

    __slots__ = ("charged", "rows", "at", "static", "known", "every_row", "compiled")

    def __init__(self, table: CandidateTable, req: Request, charged: list[tuple[Why, int]], rows: np.ndarray,
                 n_at: int, n_near: int) -> None:
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        at = order < n_at
        known = len(charged)  # the site terms up to the bound
        terms = req.site_terms
        site = table.view("site")[rows] if n_at < rows.size or len(terms) > known else None
        if n_at == rows.size:
            static = [(reason, at) for reason, _ in terms[:known]]
        else:
            static = [(reason, req.term_ok(term, site)) for reason, term in terms[:known - 1]]
            static.append((terms[known - 1][0], order < n_at + n_near))  # the bound: known per row
        static += [(reason, req.term_ok(term, site)) for reason, term in terms[known:]]
        static += static_checks(table, req, rows, len(terms))
        self.charged, self.rows, self.at, self.static, self.known = charged, rows, at, static, known
        self.every_row = np.ones(rows.size, bool)
        self.compiled: dict[tuple[bool, bool], tuple] = {}  # ``_explain_few``'s, by what the request asks
        for a in (rows, at, self.every_row):
            a.flags.writeable = False  # (shared by every explanation of the request until rows change)


def _split_kept(table: CandidateTable, req: Request) -> _Split | None:
    """``_masks_first``'s split with its static checks (``_Split``), kept with
    the request until rows are added or retired or paths change (a device's
    task explained at each arrival while the edge it is bound near is full:
    its own row, the edge's and the cloud's, read again and again); a split of
    more rows than a request keeps (``nearby.KEEP_ROWS``) is made each time.
    A device's handover changes its paths alone: the requests bound near the
    sites whose paths changed are compiled again (``Shard.paths_changed``),
    so the others keep their splits; a change of the core's links makes
    every split again."""
    network = getattr(req.near, "network", None)
    key = (id(table), table.version, table.n, table.n_retired, id(network), getattr(network, "core_version", None))
    got = req.cache.get("split")
    if got is not None and got[0] == key:
        return got[1]
    split = _masks_first(table, req)
    kept = _Split(table, req, *split) if split is not None else None
    if kept is None or kept.rows.size <= nearby.KEEP_ROWS:
        req.cache["split"] = (key, kept)
    else:
        req.cache.pop("split", None)
    return kept


def _explain_split(table: CandidateTable, req: Request, extra: Sequence[Check], counts: Reasons,
                   split: _Split) -> Reasons:
    """``explain`` for ``_masks_first``'s split: the rows that fail a site term
    up to the bound charged as counted there; the rows read pass those terms
    (``split.at``) and go through the checks that follow, in order, and the
    binding check reads them all (those that fail one term before the bound
    alone, or the bound alone, too)."""
    for reason, n in split.charged:
        if n:
            counts[reason] += n
    if not extra and not req.accels and not req.whole_node:
        return _explain_few(table, req, counts, split)
    rows = split.rows
    every = [*split.static, *_dynamic(table, req, rows), *((r, m[rows]) for r, m in extra)]
    remaining = split.at.copy()
    for reason, mask in every[split.known:]:
        failed = int(np.count_nonzero(remaining & ~mask))
        if failed:
            counts[reason] += failed
        remaining &= mask
    counts.binding = _binding(table, req, every, split.every_row, rows)
    return counts


EXPLAINED_FEW = [0]  # explanations ``_explain_few`` made (tests count them)


def _explain_few(table: CandidateTable, req: Request, counts: Reasons, split: _Split) -> Reasons:
    """``_explain_split`` for a request without accelerators, a whole node or
    extra checks, its counting and binding check one compiled loop
    (``kernels.explain_rows``): the same counts, added in the same order,
    and the same binding check (a device's task explained at each arrival
    while the rows near it are full). What the loop is told of the
    split's checks is kept with the split."""
    asks = (bool(req.vec[0] > 0), bool(req.vec[1] > 0))
    told = split.compiled.get(asks)
    if told is None:
        reasons = [reason for reason, _ in split.static] + [_UNAVAILABLE] + [w for w, a in zip(_SHORT, asks) if a]
        numbers: dict[Why, int] = {}  # a reason's checks are one for the binding check (``_binding``'s ``passes``)
        group = np.array([numbers.setdefault(reason, len(numbers)) for reason in reasons], np.int64)
        private = next((i for i, reason in enumerate(numbers) if reason.code == "private"), -1)
        static = np.empty((len(split.static), split.rows.size), bool)
        for i, (_, mask) in enumerate(split.static):
            static[i] = mask
        told = split.compiled[asks] = (reasons, group, list(numbers), private if private >= 0 and _own_device(req)
                                       else -1, static)
    reasons, group, by_number, dropped, static = told
    EXPLAINED_FEW[0] += 1
    failed, best, most, figures = kernels.explain_rows(static, split.at, split.known, split.rows, table.enabled,
                                                       table.free, table.cap, req.vec, group, len(by_number), dropped)
    for reason, n in zip(reasons[split.known:], failed[split.known:].tolist()):
        if n:
            counts[reason] += n
    if best >= 0:
        reason, most = by_number[best], int(most)
        if reason.code != "capacity":
            counts.binding = Binding(reason, most, layer=reason.layer)
        elif reason.resource in ("cpu", "memory"):
            col = 0 if reason.resource == "cpu" else 1
            counts.binding = Binding(reason, most, reason.resource, int(req.vec[col]), int(figures[col]),
                                     capacity=int(figures[2 + col]))
        else:
            counts.binding = Binding(reason, most)
    return counts


# the most rows ``_masks_first`` reads per explanation, as a share of the table's (else every row is read)
SPLIT_SHARE = 0.25


def _masks_first(table: CandidateTable, req: Request) -> tuple[list[tuple[Why, int]], np.ndarray, int, int] | None:
    """For ``explain``: when the request's site terms before its near bound are
    masks over sites (selectors, allowed sites) and other devices' sites, no
    row is retired, and few rows pass all of those terms or fail one alone:
    (rows charged to each of those terms and to the bound, in order; the rows
    to read: first the ``n_at`` that pass them all and the bound, then the
    ``n_near`` within the bound that fail one term before it alone, then
    those that pass the terms before it, beyond it; ``n_at``; ``n_near``).
    Each row is charged to the first of those terms it fails, as over every
    row: the rows per site and term are counted once per table and masks,
    the near site's own rows moved to where its request charges them. None
    otherwise (``explain`` reads every row)."""
    from suanli.scheduling.request import NearBound, Private

    bound, terms = req.near, req.site_terms
    if not isinstance(bound, NearBound) or table.n_retired or table.n == 0:
        return None
    k = next((i for i, (_, term) in enumerate(terms) if term is bound), -1)
    before = terms[:max(k, 0)]
    if k < 1 or not all(isinstance(term, (np.ndarray, Private)) for _, term in before) or \
            sum(isinstance(term, Private) for _, term in before) > 1:
        return None
    split = _site_split(table, before)
    if split is None:
        return None
    first, failing, private, per_site, passing, alone, nfail = split
    n_masks = failing.shape[0] - 1
    # rows per term: a site's rows go to the first term it fails (``first``: which mask; private sites fail
    # the devices' term after the masks before it)
    p = next((i for i, (_, term) in enumerate(before) if isinstance(term, Private)), -1)
    near = before[p][1].near if p >= 0 else -1  # the device whose own site the request may use
    at_private = p if p >= 0 else n_masks  # masks before the devices' term
    charged = [0] * (k + 1)
    for j in range(n_masks):
        term = j if j < at_private else j + 1
        charged[term] += int(failing[j, 0]) + (int(failing[j, 1]) if j < at_private else 0)
    if p >= 0:
        charged[p] = int(failing[at_private:, 1].sum())
    pass_sites, alone_sites = passing, alone
    if 0 <= near < per_site.size and per_site[near] and private[near]:
        mine, f = int(per_site[near]), int(first[near])
        if f >= at_private:  # its request opens it: not charged to the devices' term
            charged[p] -= mine
            if f < n_masks:
                charged[f + 1] += mine
            else:
                pass_sites = np.append(passing, near)  # (an open site's: ``passing`` holds no private one)
        alone_sites = alone[alone != near]  # (counted with the devices' term failed, which it passes)
        if nfail[near] == 2:  # one mask's reason besides that term
            alone_sites = np.append(alone_sites, near)
    sites = np.concatenate([pass_sites, alone_sites])
    inside = _within(bound, sites)
    n_pass = pass_sites.size
    charged[k] = int(per_site[pass_sites[~inside[:n_pass]]].sum())
    # the rows read: those of the sites that pass every term up to the bound, then of those that fail one
    # alone (within the bound, then beyond it); one gather
    inside_alone = inside[n_pass:]
    sites = np.concatenate([pass_sites[inside[:n_pass]], alone_sites[inside_alone], pass_sites[~inside[:n_pass]]])
    n_rows = per_site[sites]
    n_in = int(inside[:n_pass].sum())
    n_at, n_near = int(n_rows[:n_in].sum()), int(n_rows[n_in:n_in + int(inside_alone.sum())].sum())
    order, start = nearby.site_rows(table)
    rows = nearby.runs(order, start[sites], n_rows)
    return [(before[i][0] if i < k else terms[k][0], charged[i]) for i in range(k + 1)], rows, n_at, n_near


def _within(bound, sites: np.ndarray) -> np.ndarray:
    """bool[k]: which of ``sites`` are within ``bound``. Its own sites are
    (those within it that could hold the request); its near site is when
    its own rtt is; the path to any other is read (one walk over the core
    for all of them)."""
    inside = bound.listed(sites)
    if bound.complete:
        return inside
    own = sites == bound.site
    inside[own] = bound.network.intra_rtt_ms[bound.site] <= bound.max_rtt_ms
    ask = ~inside & ~own
    if ask.any():
        inside[ask] = bound.network.rtt_at(bound.site, sites[ask]) <= bound.max_rtt_ms
    return inside


def _site_split(table: CandidateTable, before) -> tuple | None:
    """Per table and masks (kept with the table's shared values): each site's
    first failing mask (int8, the masks' count: none), rows per first failing
    mask on open and on private sites (int64[masks + 1, 2]), the private mask,
    rows per site, the open sites that pass every mask and the sites that
    fail exactly one distinct reason (the masks', or the devices' term), each
    ascending and holding rows, and how many distinct reasons each site
    fails (int8). None when those sites hold too many rows to be worth
    reading alone."""
    from suanli.scheduling.request import Private

    masks = [term for _, term in before if isinstance(term, np.ndarray)]
    priv = next((term.private for _, term in before if isinstance(term, Private)), None)
    key = ("masks first", *(id(m) for m in masks), id(priv))
    shared = table.shared()
    hit = shared.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], (*masks, priv))):
        return hit[1]
    n_known = min(nearby.site_counts(table).size, masks[0].size)
    per_site = nearby.site_counts(table)[:n_known]  # (sites past the last one with rows: none)
    first = np.full(n_known, len(masks), np.int8)
    distinct: dict[Why, np.ndarray] = {}
    for j in range(len(masks) - 1, -1, -1):
        ok = masks[j][:n_known]
        first[~ok] = j
    for reason, term in before:
        if isinstance(term, np.ndarray):
            bad = ~term[:n_known]
            distinct[reason] = distinct[reason] | bad if reason in distinct else bad
    private = priv[:n_known] if priv is not None else np.zeros(n_known, bool)
    nfail = np.zeros(n_known, np.int8)
    for bad in distinct.values():
        nfail += bad
    nfail += private
    has = per_site > 0
    failing = np.zeros((len(masks) + 1, 2), np.int64)
    np.add.at(failing, (first[has], private[has].astype(np.int64)), per_site[has])
    passing = np.flatnonzero(has & (nfail == 0))
    alone = np.flatnonzero(has & (nfail == 1))
    split = None
    if int(per_site[passing].sum() + per_site[alone].sum()) <= SPLIT_SHARE * table.n:
        split = (first, failing, private, per_site, passing, alone, nfail)
    kept = [k for k in shared if isinstance(k, tuple) and k[:1] == ("masks first",)]
    if len(kept) >= 16:  # bounded: an entry per distinct set of masks (selectors), not per request
        for old in kept:
            del shared[old]
    shared[key] = ((*masks, priv), split)
    return split


def _static_checks_at(table: CandidateTable, req: Request, at: np.ndarray, known: int) -> list[Check]:
    """``static_checks`` at rows ``at``, kept for the requests that ask the same
    of the same rows (the services of cars around the same edges) when the
    site terms past ``known`` are reachability labels only."""
    rest = req.site_terms[known:]
    if not all(isinstance(term, (int, np.integer)) for _, term in rest):
        return static_checks(table, req, at, known)
    nearby._row_checks(table, req)  # sets the request's key for what it asks of rows
    key = ("checks at", req.cache["rows key"], tuple((r, int(term)) for r, term in rest), at.tobytes())
    shared = table.shared()
    hit = shared.get(key)
    if hit is None:
        if len(shared) > 4096:  # bounded: entries per distinct neighbourhood, not per car
            for k in [k for k in shared if isinstance(k, tuple) and k[:1] == ("checks at",)]:
                del shared[k]
        hit = shared[key] = static_checks(table, req, at, known)
    return hit


def _near_first(table: CandidateTable, req: Request) -> tuple[np.ndarray, int, Why | None, np.ndarray] | None:
    """For ``explain``: when the request's first site terms are other devices'
    sites (if the fleet has private ones) and then its near bound, and no row
    is retired: the rows on open sites within the bound (int64, ascending),
    how many rows are on other devices' sites, that reason (None without
    private sites), and the open sites within the bound (ascending). None
    otherwise."""
    from suanli.scheduling.request import NearBound, Private

    terms = req.site_terms
    bound = req.near
    if bound is None or table.n_retired:
        return None
    private = terms[0][1] if terms and isinstance(terms[0][1], Private) else None
    k = 0 if private is None else 1
    if len(terms) <= k or terms[k][1] is not bound or not isinstance(bound, NearBound):
        return None
    order, start = nearby.site_rows(table)
    per_site = nearby.site_counts(table)
    n_known = per_site.size
    if private is None:
        open_sites = None
        private_rows = 0
    else:
        open_sites = nearby.open_sites(private.private)
        private_rows = nearby.private_rows(table, private.private)
        if private.near >= 0 and private.near < n_known and private.private[private.near]:
            private_rows -= int(per_site[private.near])  # the near site is open to it
    sites, _ = bound.network.within(bound.site, bound.max_rtt_ms, open_sites, keep_self=True)
    sites = sites[sites < n_known]
    rows = nearby.runs(order, start[sites], per_site[sites])
    rows.sort()
    return rows, private_rows, terms[0][0] if private is not None else None, sites
