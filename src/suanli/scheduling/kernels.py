"""Compiled loops for the few places where NumPy's per-call cost, not the work,
sets the pace.

A live view catches up on the rows the table changed since it last looked:
usually a few hundred scattered rows, each needing a dozen comparisons. As
array calls that is some twenty NumPy calls of a few microseconds each, most
of it call overhead; as one compiled loop it is one call. The loop computes
exactly what ``filters.dynamic_ok`` and ``scores.total`` compute, operation for
operation in the same order, so a view stays equal, element for element, to a
fresh computation (``tests/test_live.py`` holds it to that).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEED_WHOLE, NEED_COUNT, NEED_MILLI = 0, 1, 2  # columns of ``needs``


@njit(cache=True, nogil=True)
def catch_up(rows, ok, value, static, enabled, free, cap, dev_free, dev_cap, inv, bonus,
             vec, dims, needs, usable, whole_node, fit_weight, top, n_top, best, tie, long):
    """For each row of ``rows``: ``ok[r]``, whether the request fits it now, and,
    when ``value`` is not empty, ``value[r]``, its score there (-inf where it does
    not fit). Then the best rows, as ``keep_best`` leaves them: the new
    ``(best, n_top)``.

    ``free``/``cap`` [R, rows], ``dev_free``/``dev_cap`` [D, rows] and ``inv``
    [R, rows] are the table's columns; ``static`` the request's static mask;
    ``bonus`` its row-static scores; ``vec`` its resource vector and ``dims`` the
    resources it asks for; ``needs`` [K, 3] its accelerator needs (whole, count,
    milli) and ``usable`` [K, D, rows] the slots each need may use (for whole
    devices, only slots that hold a whole device)."""
    n_res, n_dev, n_dims = free.shape[0], dev_free.shape[0], dims.size
    scored = value.size > 0
    for i in range(rows.size):
        r = rows[i]
        fit = static[r] and enabled[r]
        if fit and vec[0] > 0 and free[0, r] < vec[0]:
            fit = False
        if fit and vec[1] > 0 and free[1, r] < vec[1]:
            fit = False
        k = 0
        while fit and k < needs.shape[0]:
            if needs[k, NEED_WHOLE]:
                n_free = 0
                for s in range(n_dev):
                    if usable[k, s, r] and dev_free[s, r] == 1000:
                        n_free += 1
                fit = n_free >= needs[k, NEED_COUNT]
            else:
                fit = False
                for s in range(n_dev):
                    if usable[k, s, r] and dev_free[s, r] >= needs[k, NEED_MILLI]:
                        fit = True
                        break
            k += 1
        if fit and whole_node:
            for j in range(n_res):
                if free[j, r] != cap[j, r]:
                    fit = False
            for s in range(n_dev):
                if dev_free[s, r] != dev_cap[s, r]:
                    fit = False
        ok[r] = fit
        if not scored:
            continue
        if not fit:
            value[r] = -np.inf
            continue
        if whole_node or n_dims == 0:
            used = 0.0
            has = 0
            for j in range(n_res):
                used += (cap[j, r] - free[j, r]) * inv[j, r]
                if inv[j, r] > 0:
                    has += 1
            packed = 100.0 * used / max(has, 1)
        else:
            packed = _packed(free, vec, dims, r, inv, inv)
        value[r] = fit_weight * packed + bonus[r]
    if not scored or n_top < 0:
        return best, -1
    return keep_best(value, rows, top, n_top, best, tie, long)


@njit(cache=True, nogil=True)
def _packed(free, vec, dims, r, inv, cap):
    """``scores.fit`` of row ``r`` for a request of ``vec`` (``dims``: the
    resources it asks for, at least one): 1 / capacity read from ``inv``
    [R, rows], or, when ``inv`` has no rows, computed from ``cap`` as
    ``CandidateTable.inverse_of`` computes it (the same floats)."""
    acc = 0.0
    for j in range(dims.size):
        d = dims[j]
        if inv.shape[1]:
            inverse = inv[d, r]
        else:
            c = np.float64(cap[d, r])
            inverse = 1.0 / c if c > 0 else 0.0
        term = (free[d, r] - vec[d]) * inverse
        acc = -term if j == 0 else acc - term
    return 100.0 + acc * (100.0 / dims.size)


@njit(cache=True, nogil=True)
def keep_best(value, rows, top, n_top, best, tie, long):
    """The best rows after ``rows`` changed: ``top[:n_top]`` held, in row order,
    every row within ``tie`` of the highest value ``best`` before. Returns the new
    ``(best, n_top)`` with ``top`` rewritten, or ``n_top`` -1 when they must be
    found again (``best_of``).

    Why this is exact: a row neither kept nor changed was below ``best - tie``.
    So when the highest value among the kept and the changed rows is at least
    ``best``, it is the highest of all, and every row within ``tie`` of it is
    among those two sets. When it is lower, a row outside them may lead: the
    best rows are found again. So are they when more than ``long`` would be
    merged (a scan is then as cheap)."""
    new = -np.inf
    for i in range(n_top):
        new = max(new, value[top[i]])
    for i in range(rows.size):
        new = max(new, value[rows[i]])
    if new < best:
        return best, -1
    if new == -np.inf:
        return new, 0
    floor = new - tie
    k = 0
    for i in range(n_top):  # kept rows still within tie, in row order
        if value[top[i]] >= floor:
            top[k] = top[i]
            k += 1
    kept = k
    for i in range(rows.size):  # changed rows within tie, not already there
        r = rows[i]
        if value[r] < floor:
            continue
        there = False
        for j in range(k):
            if top[j] == r:
                there = True
                break
        if there:
            continue
        if k >= long or k >= top.size:
            return new, -1
        top[k] = r
        k += 1
    if k > kept:
        top[:k].sort()
    return new, k


@njit(cache=True, nogil=True)
def best_of(value, top, tie):
    """The highest value and, in ``top[:count]`` (as long as ``value``), the rows
    within ``tie`` of it in row order: ``(best, count)``."""
    best = -np.inf
    for r in range(value.size):
        if value[r] > best:
            best = value[r]
    if best == -np.inf:
        return best, 0
    floor, k = best - tie, 0
    for r in range(value.size):
        if value[r] >= floor:
            top[k] = r
            k += 1
    return best, k


@njit(cache=True, nogil=True)
def node_figures(nodes, cap, free, dev_free, dev_cap, dev_kind, dev_shareable, has_idle, idle, tier, site,
                 held, used, stranded, now_used, now_reserved, now_site, d_stranded):
    """A sample's update for the changed ``nodes`` (repeats are harmless): per node
    and resource what is held (capacity less free) and used (held less what sits
    idle inside VC hosts, ``idle``; without ``has_idle`` nothing does, and
    ``idle`` and ``used`` are not read: used is what is held), and per
    accelerator kind the free share stranded on partly used shareable whole
    devices; ``held``, ``used`` and ``stranded`` [.., nodes] take the new
    figures, the totals by tier (``now_used``, ``now_reserved``) and site
    (``now_site``) their differences, and ``d_stranded`` [kinds] the change of
    stranded share. Every figure is a whole number, so the sums are exact in
    any order."""
    n_res, n_dev, n_kinds = free.shape[0], dev_free.shape[0], stranded.shape[0]
    for i in range(nodes.size):
        n = nodes[i]
        t, s = tier[n], site[n]
        for j in range(n_res):
            h = float(cap[j, n] - free[j, n])
            d_held = h - held[j, n]
            if has_idle:
                u = h - idle[j, n]
                d_used = u - used[j, n]
                used[j, n] = u
            else:
                d_used = d_held
            now_used[t, j] += d_used
            now_reserved[t, j] += d_held
            now_site[s, j] += d_used
            held[j, n] = h
        for k in range(n_kinds):
            x = 0.0
            for slot in range(n_dev):
                f = dev_free[slot, n]
                if dev_kind[slot, n] == k and dev_shareable[slot, n] and dev_cap[slot, n] == 1000 and 0 < f < 1000:
                    x += f
            d_stranded[k] += x - stranded[k, n]
            stranded[k, n] = x


@njit(cache=True, nogil=True)
def site_integrals(sites, t, own, area, last, now, firsts, ends, block_area, block_now, block_last, in_block,
                   before):
    """A sample's integrals of the changed ``sites`` (ascending, unique) up to
    ``t``, before their figures change: each site integrated on its own
    (``own``, ascending: its row of ``area`` and ``last``), each block of
    sites (``firsts``/``ends``, ascending) once, by its sum ``block_now``.
    ``in_block`` [sites] takes each site's block (-1: none) and ``before``
    [sites, res] its figures now, for ``site_changes``. Element by element
    the same sums as the arrays' expressions they replace."""
    n_res = now.shape[1]
    k = 0
    for i in range(sites.size):
        s = sites[i]
        while k < own.size and own[k] < s:
            k += 1
        if k < own.size and own[k] == s:
            dt = t - last[k]
            for j in range(n_res):
                area[k, j] += now[s, j] * dt
            last[k] = t
    b = -1
    for i in range(sites.size):
        s = sites[i]
        while b + 1 < firsts.size and firsts[b + 1] <= s:
            b += 1
        if b >= 0 and s < ends[b]:
            if block_last[b] != t:
                dt = t - block_last[b]
                for j in range(n_res):
                    block_area[b, j] += block_now[b, j] * dt
                block_last[b] = t
            in_block[i] = b
            for j in range(n_res):
                before[i, j] = now[s, j]
        else:
            in_block[i] = -1


@njit(cache=True, nogil=True)
def site_changes(sites, now, peak, block_now, in_block, before):
    """After a sample's update of ``now``: the changed ``sites``' peaks, and
    their blocks' sums by the differences (whole numbers: exact)."""
    n_res = now.shape[1]
    for i in range(sites.size):
        s = sites[i]
        b = in_block[i]
        for j in range(n_res):
            x = now[s, j]
            if x > peak[s, j]:
                peak[s, j] = x
            if b >= 0:
                block_now[b, j] += x - before[i, j]


@njit(cache=True, nogil=True)
def sample_changes(totals, area_totals, peak_totals, dt, changed, logged, t, node_site, own, area, last, now, firsts,
                   ends, block_area, block_now, block_last, peak, cap, free, dev_free, dev_cap, dev_kind, dev_shareable,
                   has_idle, idle, tier, held, used, stranded, now_used, now_reserved, stranded_total, kind_capacity,
                   fragmented, violations, at_violations):
    """A sample's changes in one call: the ``totals`` integrated over the
    ``dt`` since the last sample (``area_totals``: each the sum of a product,
    as the arrays' expression gives it), the sites of the ``changed`` nodes
    (``logged``: as a table's log has them, with repeats, in any order; else
    ascending, once each) integrated up to ``t`` (``site_integrals``), the
    nodes' figures (``node_figures``, into ``now`` and the totals), the
    sites' peaks and blocks (``site_changes``), then the stranded share's
    change (into ``stranded_total`` and its ratio to ``kind_capacity``,
    ``fragmented``, when it changed), the ``violations`` at their place in
    ``totals``, and the totals' peaks: the same steps, in the same order."""
    if dt > 0:
        for i in range(totals.size):
            x = totals[i] * dt
            area_totals[i] += x
    if logged:
        changed = np.unique(changed)
    sites = np.unique(node_site[changed])
    n_res = now.shape[1]
    in_block = np.empty(sites.size, np.int64)
    before = np.empty((sites.size, n_res), now.dtype)
    d_stranded = np.zeros(stranded.shape[0])
    site_integrals(sites, t, own, area, last, now, firsts, ends, block_area, block_now, block_last, in_block, before)
    node_figures(changed, cap, free, dev_free, dev_cap, dev_kind, dev_shareable, has_idle, idle, tier, node_site,
                 held, used, stranded, now_used, now_reserved, now, d_stranded)
    site_changes(sites, now, peak, block_now, in_block, before)
    moved = False
    for k in range(d_stranded.size):
        if d_stranded[k] != 0:
            moved = True
    if moved:
        for k in range(d_stranded.size):
            stranded_total[k] += d_stranded[k]
            if kind_capacity[k] > 0:
                fragmented[k] = stranded_total[k] / kind_capacity[k]
    totals[at_violations] = violations
    for i in range(totals.size):
        if totals[i] > peak_totals[i]:
            peak_totals[i] = totals[i]


@njit(cache=True, nogil=True)
def near_pick(rows, rtt, static, masked, enabled, free, cap, vec, dims, unused, w_fit, w_dev, w_near, near_on,
              near_ms, tie, value, top):
    """``nearby.pick`` for a request of cpu and memory alone, bound near a
    site: of ``rows`` (ascending, ``rtt`` theirs to the near site), those
    that pass ``static`` and ``masked`` (each by position; ``masked`` empty:
    no masks), are enabled and have room for ``vec``, scored as
    ``scores.fit`` plus ``nearby.bonus`` (the devices term from ``unused``,
    the bounded near term when ``near_on``), term by term in their order.
    Writes into ``top`` the rows within ``tie`` of the best, in row order,
    and returns how many (``value``: scratch, as long as ``rows``)."""
    no_inv = np.empty((0, 0))
    for i in range(rows.size):
        value[i] = -np.inf
        r = rows[i]
        if not static[i] or not enabled[r] or (masked.size > 0 and not masked[i]):
            continue
        if (vec[0] > 0 and free[0, r] < vec[0]) or (vec[1] > 0 and free[1, r] < vec[1]):
            continue
        b = w_dev * (0.0 if unused[r] else 100.0)
        if near_on:
            b += w_near * (100.0 / (1.0 + rtt[i] / near_ms))
        value[i] = w_fit * _packed(free, vec, dims, r, no_inv, cap) + b
    _, k = best_of(value, top, tie)
    for j in range(k):  # (positions in ``rows``, ascending: rows in row order)
        top[j] = rows[top[j]]
    return k


# ---------------------------------------------------------------- units parked for room (``sim/room.py``)
# What a watched row has free is read as one float64 vector: its free resources, its device
# shares, then 1.0 when it is in service (the columns of ``room._Table.seen``, in that order).


@njit(cache=True, nogil=True)
def _room_now(free, dev_free, enabled, r, out):
    n_free, n_dev = free.shape[0], dev_free.shape[0]
    for j in range(n_free):
        out[j] = free[j, r]
    for j in range(n_dev):
        out[n_free + j] = dev_free[j, r]
    out[n_free + n_dev] = 1.0 if enabled[r] else 0.0


@njit(cache=True, nogil=True)
def room_watch(rows, slot, count, seen, free, dev_free, enabled):
    """A watcher more on each of ``rows`` (distinct, each with a slot of
    ``seen``): ``seen`` there := what the row has free now where no one watched
    it, else the least of the two, element by element."""
    now = np.empty(seen.shape[1])
    for i in range(rows.size):
        r = rows[i]
        _room_now(free, dev_free, enabled, r, now)
        s = slot[r]
        if count[r] == 0:
            seen[s, :] = now
        else:
            for j in range(now.size):
                if now[j] < seen[s, j]:
                    seen[s, j] = now[j]
        count[r] += 1


@njit(cache=True, nogil=True)
def room_unwatch(rows, slot, count):
    """A watcher less on each of ``rows`` (distinct): the slots of ``seen``
    that rows no one watches any more give up, in the order of ``rows``."""
    freed = np.empty(rows.size, np.int64)
    k = 0
    for i in range(rows.size):
        r = rows[i]
        count[r] -= 1
        if count[r] == 0:
            freed[k] = slot[r]
            k += 1
            slot[r] = -1
    return freed[:k]


@njit(cache=True, nogil=True)
def room_remember(rows, slot, seen, free, dev_free, enabled):
    """``seen`` := what each watched row of ``rows`` has free now."""
    now = np.empty(seen.shape[1])
    for i in range(rows.size):
        r = rows[i]
        s = slot[r]
        if s >= 0:
            _room_now(free, dev_free, enabled, r, now)
            seen[s, :] = now


@njit(cache=True, nogil=True)
def room_risen(rows, count, slot, seen, free, dev_free, enabled, site):
    """Of the watched rows among ``rows`` (repeats allowed), the sites
    (ascending, distinct) of those with more of something free than
    ``seen``; the others only lost room and are remembered as they are."""
    rows = np.unique(rows)
    if rows.size and rows[-1] >= count.size:
        raise IndexError("a logged row past the watched table's rows")
    now = np.empty(seen.shape[1])
    sites = np.empty(rows.size, site.dtype)
    k = 0
    for i in range(rows.size):
        r = rows[i]
        if count[r] <= 0:
            continue
        _room_now(free, dev_free, enabled, r, now)
        s = slot[r]
        up = False
        for j in range(now.size):
            if now[j] > seen[s, j]:
                up = True
                break
        if up:
            sites[k] = site[r]
            k += 1
        else:
            seen[s, :] = now
    return np.unique(sites[:k])


@njit(cache=True, nogil=True)
def room_fits(order, lo, hi, count, enabled, free, v0, v1):
    """Whether a watched row among ``order[lo:hi]`` (a site's rows) is in
    service with ``v0`` cpu and ``v1`` memory free (``nearby.dynamic_ok`` of a
    request without accelerators or a whole node)."""
    for i in range(lo, hi):
        r = order[i]
        if count[r] > 0 and enabled[r] and not (v0 > 0 and free[0, r] < v0) and not (v1 > 0 and free[1, r] < v1):
            return True
    return False


# ---------------------------------------------------------------- explanations (``filters._explain_split``)


@njit(cache=True, nogil=True)
def explain_rows(static, at, known, rows, enabled, free, cap, vec, group, n_groups, dropped):
    """``filters._explain_split``'s counts and binding check over the few rows
    of a kept split, for a request without accelerators, a whole node or
    extra checks. The checks, in order: the split's (``static`` [C, k]), then
    the dynamic ones: in service, then cpu and memory free where ``vec`` asks
    for them. ``group``: each check's reason, numbered in order of first
    appearance (a reason's checks count together for the binding check);
    ``dropped``: a reason whose failing rows are no candidates (another
    device's own site, for work bound near its own), else -1.

    Returns (rows failing each check first among those after the first
    ``known``, with ``at`` the rows that pass those; the binding reason's
    number (-1: none) and its rows; the most cpu, memory free and cpu, memory
    held even empty among the rows it alone fails)."""
    n_static, k = static.shape
    n_checks = group.size
    ok = np.empty((n_checks, k), np.bool_)
    ok[:n_static] = static
    c = n_static
    for i in range(k):
        ok[c, i] = enabled[rows[i]]
    c += 1
    for col in range(2):
        if vec[col] > 0:
            for i in range(k):
                ok[c, i] = free[col, rows[i]] >= vec[col]
            c += 1
    failed = np.zeros(n_checks, np.int64)
    remaining = at.copy()
    for c in range(known, n_checks):
        n = 0
        for i in range(k):
            if remaining[i] and not ok[c, i]:
                n += 1
                remaining[i] = False
        failed[c] = n
    passes = np.ones((n_groups, k), np.bool_)
    for c in range(n_checks):
        g = group[c]
        for i in range(k):
            passes[g, i] = passes[g, i] and ok[c, i]
    single = np.empty(k, np.bool_)
    for i in range(k):
        fails = 0
        for g in range(n_groups):
            if g != dropped and not passes[g, i]:
                fails += 1
        single[i] = fails == 1 and (dropped < 0 or passes[dropped, i])
    best, most = -1, 0
    for g in range(n_groups):
        if g == dropped:
            continue
        n = 0
        for i in range(k):
            if single[i] and not passes[g, i]:
                n += 1
        if n > most:
            best, most = g, n
    figures = np.zeros(4, np.int64)  # cpu, memory free; cpu, memory held even empty
    first = True
    if best >= 0:
        for i in range(k):
            if single[i] and not passes[best, i]:
                r = rows[i]
                for col in range(2):
                    if first or free[col, r] > figures[col]:
                        figures[col] = free[col, r]
                    if first or cap[col, r] > figures[2 + col]:
                        figures[2 + col] = cap[col, r]
                first = False
    return failed, best, most, figures
