"""Widths of elastic gangs: how many members each runs, decided again every
``policy.elastic.every`` seconds.

The policies (``policy.elastic``):

- ``none``: a gang keeps the width it started at; a waiting gang starts as
  wide as fits, up to its size, in the order it waits.
- ``greedy``: waiting gangs first get their least width (``minSize``),
  taken from the widest running gangs down to their least; what room is
  left grows running gangs toward ``maxSize``, in the order they started.
- ``goodput``: the widths that maximise the cluster's weighted goodput:
  the sum over jobs of ``speed(w) / speed(1) / T1``, where ``T1`` is the
  time the job's remaining work takes on one member. Work nearest its end
  weighs most (a shortest-remaining-time rule, for short average job
  times); a job whose slowdown so far (time since it was submitted over the
  time it would take alone at its best width) is past ``maxSlowdown`` is
  served first. A resize is charged what it costs: over the time the job
  would run at its new width (at most ``horizon``), the seconds its
  restart stops it (``resizeCost`` and its state's transfer) are lost, and
  a resize must gain ``hysteresis`` beyond that. Tenants' fair shares
  (weights, within quotas) split the room first; each tenant's share goes
  to its jobs by the rule above, and what a tenant leaves is shared again.

The goodput allocation is a Lagrangian one, computed for all jobs at once:
at a price ``lam`` per unit of room each job takes the width of most
``value(w) - lam * units(w)`` (a row of a jobs x widths matrix), and ``lam``
is bisected per tenant until the tenant's widths fit its share; what is
left by the discreteness of widths is then given one job at a time to the
best value per unit. Non-concave speed-ups (a restart's cost makes the
current width a bump) are handled as they are: each job picks a best point
of its own curve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

POLICIES = ("none", "greedy", "goodput")
STARVED_WEIGHT = 1e3
BISECTIONS = 30
PREEMPT_COST = 1.0
DWELL = 0  # a width is kept for this many times its restart's cost (0: none)


@dataclass
class Jobs:
    """The elastic jobs of one decision, as columns (one row a job)."""

    current: np.ndarray  # width now (0: waiting)
    least: np.ndarray  # minSize
    most: np.ndarray  # maxSize (for none: size, the most it starts at)
    units: np.ndarray  # room a member takes (e.g. GPUs a member)
    speed: np.ndarray  # [job, width 0..W] work a second at each width (speed[:, 0] == 0)
    left: np.ndarray  # work left
    waited: np.ndarray  # seconds since submitted
    alone: np.ndarray  # seconds the whole job would take alone at its best width
    restart: np.ndarray  # seconds a resize (or a start) stops it
    order: np.ndarray  # the order they wait or started in (lower first)
    tenant: np.ndarray  # tenant code per job
    preemptible: np.ndarray  # bool: its width may go to 0
    since: np.ndarray | None = None  # seconds since its width last changed (None: long ago)

    @property
    def n(self) -> int:
        return len(self.current)


def decide(policy: str, jobs: Jobs, room: float, shares: np.ndarray | None = None,
           quotas: np.ndarray | None = None, max_slowdown: float = 4.0, hysteresis: float = 0.05,
           horizon: float = 3600.0) -> np.ndarray:
    """New widths for ``jobs`` within ``room`` (units), per ``policy``.
    ``shares``: the tenants' weights (default equal); ``quotas``: the most
    room each tenant may hold (default none)."""
    if jobs.n == 0:
        return np.zeros(0, dtype=np.int64)
    if policy == "none":
        return _none(jobs, room)
    if policy == "greedy":
        return _greedy(jobs, room)
    if policy == "goodput":
        return _goodput(jobs, room, shares, quotas, max_slowdown, hysteresis, horizon)
    raise ValueError(f"unknown elastic policy {policy!r}; expected one of {', '.join(POLICIES)}")


def _none(jobs: Jobs, room: float) -> np.ndarray:
    """Running jobs keep their widths; waiting ones start, in order, as wide as fits."""
    width = jobs.current.astype(np.int64).copy()
    free = room - float((width * jobs.units).sum())
    for j in np.argsort(jobs.order, kind="stable"):
        if width[j] > 0:
            continue
        fits = int(free // jobs.units[j]) if jobs.units[j] > 0 else int(jobs.most[j])
        w = min(int(jobs.most[j]), fits)
        if w >= jobs.least[j]:
            width[j] = w
            free -= w * jobs.units[j]
    return width


def _greedy(jobs: Jobs, room: float) -> np.ndarray:
    """Waiting jobs get their least width (from running jobs above theirs,
    widest first); then running jobs grow toward their most, in order."""
    width = jobs.current.astype(np.int64).copy()
    units = jobs.units
    free = room - float((width * units).sum())
    by_order = np.argsort(jobs.order, kind="stable")
    for j in by_order:
        if width[j] > 0:
            continue
        need = jobs.least[j] * units[j]
        while free < need:
            above = np.flatnonzero(width > jobs.least)
            if len(above) == 0:
                break
            k = above[np.argmax((width[above] - jobs.least[above]) * units[above])]
            give = min(int(width[k] - jobs.least[k]), int(np.ceil((need - free) / units[k])))
            width[k] -= give
            free += give * units[k]
        if free >= need:
            width[j] = jobs.least[j]
            free -= need
    for j in by_order:
        if width[j] == 0:
            continue
        grow = min(int(jobs.most[j] - width[j]), int(free // units[j]) if units[j] > 0 else 0)
        if grow > 0:
            width[j] += grow
            free -= grow * units[j]
    return width


def values(jobs: Jobs, max_slowdown: float, hysteresis: float, horizon: float) -> np.ndarray:
    """[job, width] the goodput policy's value of each width (-inf where a
    width is not allowed)."""
    n, cols = jobs.speed.shape
    w = np.arange(cols)
    speed = jobs.speed
    one = np.maximum(speed[:, 1], 1e-300)
    t1 = np.maximum(jobs.left / one, 1e-9)  # remaining time on one member
    weight = 1.0 / t1
    starved = jobs.waited > max_slowdown * np.maximum(jobs.alone, 1e-9)
    weight = np.where(starved, weight * STARVED_WEIGHT, weight)
    value = speed / one[:, None] * weight[:, None]
    # a change of width stops the job for its restart: over the time it would
    # run at that width (at most the horizon) it loses that share, and a
    # hysteresis besides
    with np.errstate(divide="ignore", invalid="ignore"):
        runs = np.minimum(np.where(speed > 0, jobs.left[:, None] / speed, np.inf), horizon)
        kept = np.clip((runs - jobs.restart[:, None]) / runs, 0.0, 1.0) * (1.0 - hysteresis)
    change = w[None, :] != jobs.current[:, None]
    value = np.where(change & (w[None, :] > 0), value * kept, value)
    # stopping a running job costs it a restart when it runs again
    rows = np.arange(n)
    now = value[rows, jobs.current]
    stop_cost = now * jobs.restart / np.maximum(np.minimum(runs[rows, jobs.current], horizon), 1e-9)
    value[:, 0] = np.where(jobs.current > 0, -PREEMPT_COST * stop_cost, 0.0)
    allowed = ((w[None, :] >= jobs.least[:, None]) & (w[None, :] <= jobs.most[:, None])) | (w[None, :] == 0)
    allowed &= (w[None, :] > 0) | jobs.preemptible[:, None] | (jobs.current[:, None] == 0)
    if jobs.since is not None:  # a job resized lately keeps its width until its restart is paid off
        held = (jobs.since < DWELL * jobs.restart) & (jobs.current > 0)
        allowed &= ~held[:, None] | (w[None, :] == jobs.current[:, None])
    return np.where(allowed, value, -np.inf)


def _goodput(jobs: Jobs, room: float, shares: np.ndarray | None, quotas: np.ndarray | None,
             max_slowdown: float, hysteresis: float, horizon: float) -> np.ndarray:
    value = values(jobs, max_slowdown, hysteresis, horizon)
    n, cols = value.shape
    tenants = int(jobs.tenant.max()) + 1
    cost = jobs.units[:, None] * np.arange(cols)[None, :]  # room each width takes
    # the tenants' budgets: weighted max-min shares of the room over what each could use
    demand = np.bincount(jobs.tenant, weights=jobs.most * jobs.units, minlength=tenants)
    if quotas is not None:
        demand = np.minimum(demand, quotas[:tenants])
    # what running jobs that may not stop hold at least is theirs whatever the shares
    stuck = (jobs.current > 0) & ~jobs.preemptible
    forced = np.bincount(jobs.tenant, weights=np.where(stuck, jobs.least * jobs.units, 0.0), minlength=tenants)
    demand = np.maximum(demand, forced)
    budget = forced + _water_fill(room - forced.sum(), demand - forced,
                                  np.ones(tenants) if shares is None else shares[:tenants])
    width = _priced(value, cost, jobs.tenant, budget)
    # what the widths' discreteness leaves, one job at a time: within each
    # tenant's share first, then what tenants leave, up to their quotas
    used = np.bincount(jobs.tenant, weights=width * jobs.units, minlength=tenants)
    for cap in (np.maximum(budget, used), demand if quotas is not None else np.full(tenants, np.inf)):
        width = _fill(value, cost, jobs.tenant, width, used, cap, room)
    return width


def _fill(value: np.ndarray, cost: np.ndarray, tenant: np.ndarray, width: np.ndarray, used: np.ndarray,
          cap: np.ndarray, room: float) -> np.ndarray:
    """Widen the job of most value a unit of room while room and its
    tenant's cap allow (``_fill_kernel``)."""
    free = room - float(used.sum())
    if free <= 0 or len(width) == 0:
        return width
    width = width.astype(np.int64)
    _fill_kernel(np.ascontiguousarray(value, dtype=np.float64), np.ascontiguousarray(cost, dtype=np.float64),
                 tenant.astype(np.int64), width, used, np.asarray(cap, dtype=np.float64), free)
    return width


@njit(cache=True, nogil=True)
def _best_step(value, cost, tenant, width, used, cap, free, j):
    """Job ``j``'s best step up: (gain a unit, width), or (-inf, -1)."""
    at = width[j]
    best, to = -np.inf, -1
    for w in range(value.shape[1]):
        extra = cost[j, w] - cost[j, at]
        if extra <= 0 or extra > free + 1e-9 or not np.isfinite(value[j, w]):
            continue
        if used[tenant[j]] + extra > cap[tenant[j]] + 1e-9:
            continue
        gain = (value[j, w] - value[j, at]) / extra
        if gain > 0 and gain > best:
            best, to = gain, w
    return best, to


@njit(cache=True, nogil=True)
def _fill_kernel(value, cost, tenant, width, used, cap, free):
    """A lazy greedy: each job's best step is kept and found again only for
    the job that moved, or when a kept step no longer fits (room and caps
    only shrink, so a kept step overstates what its job can gain): the same
    choices as finding every step each time."""
    n = width.shape[0]
    best = np.empty(n)
    to = np.empty(n, np.int64)
    for j in range(n):
        best[j], to[j] = _best_step(value, cost, tenant, width, used, cap, free, j)
    while free > 0:
        j = np.argmax(best)
        if not best[j] > -np.inf:
            break
        w = to[j]
        extra = cost[j, w] - cost[j, width[j]]
        if extra > free + 1e-9 or used[tenant[j]] + extra > cap[tenant[j]] + 1e-9:
            best[j], to[j] = _best_step(value, cost, tenant, width, used, cap, free, j)
            continue
        free -= extra
        used[tenant[j]] += extra
        width[j] = w
        best[j], to[j] = _best_step(value, cost, tenant, width, used, cap, free, j)


def _priced(value: np.ndarray, cost: np.ndarray, tenant: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Each job's width of most value less a price per unit of room, the
    price bisected per tenant until the tenant's widths fit its budget."""
    tenants = len(budget)
    lo = np.zeros(tenants)
    finite = np.where(np.isfinite(value), value, 0.0)
    hi = np.full(tenants, max(float(np.abs(finite).max()), 1e-12) * 1e3 + 1.0)
    rows = np.arange(len(tenant))

    def pick(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        net = value - lam[tenant][:, None] * cost
        w = np.argmax(net, axis=1)
        return w, np.bincount(tenant, weights=cost[rows, w], minlength=tenants)

    w, used = pick(lo)
    if (used <= budget + 1e-9).all():
        return w
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        _, used = pick(mid)
        over = used > budget + 1e-9
        lo = np.where(over, mid, lo)
        hi = np.where(over, hi, mid)
    w, _ = pick(hi)
    return w


def _water_fill(room: float, demand: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Weighted max-min shares of ``room``: no tenant gets more than it demands."""
    share = np.zeros(len(demand))
    active = demand > 0
    left = float(room)
    while active.any() and left > 1e-9:
        per = left / weight[active].sum()
        want = demand[active] - share[active]
        give = np.minimum(want, per * weight[active])
        share[active] += give
        left -= give.sum()
        active &= share < demand - 1e-9
        if give.sum() <= 1e-12:
            break
    return share
