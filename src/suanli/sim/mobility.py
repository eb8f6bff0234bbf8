"""Devices that move and come and go, drawn per population as time passes.

A ``mobility`` entry gives a population rates per device: handovers (a device
re-attaches to another site its attachment rule may pick) and offline spells
(its nodes and links go, and come back after a drawn time). Over ``n``
devices, events of a rate ``r`` per device form a Poisson process of rate
``n * r`` with a device drawn uniformly for each: so the stream is one
exponential gap and one draw per event, and a million devices need no list
of a million events. Each event becomes the scenario event a user could
have written (``handover``, ``deviceOffline``, ``deviceOnline``).
"""

from __future__ import annotations

import heapq
import zlib
from typing import Iterator

import numpy as np

from suanli.model.fleet import Fleet
from suanli.model.sites import selects
from suanli.sim.workload import draw
from suanli.spec import schema


def _targets(fleet: Fleet, rule: schema.SelectorSpec) -> np.ndarray:
    """int64, ascending: the listed sites a selector picks."""
    return np.array(sorted(site[0] for site in fleet.site_table.listed if selects(rule, *site[1:])), np.int64)


def mobility_events(fleet: Fleet, spec: schema.MobilitySpec, index: int, seed: int,
                    horizon: float) -> Iterator[tuple[float, object]]:
    """(time, scenario event) in time order, until ``spec.until`` or ``horizon``."""
    rng = np.random.default_rng([seed, index, spec.seed, zlib.crc32(spec.population.encode())])
    sites = fleet.site_table.population_range(spec.population)
    first, n = sites.start, len(sites)
    end = min(horizon, spec.until if spec.until is not None else float("inf"))
    rule = spec.to or fleet.attach_rules.get(spec.population)
    targets = _targets(fleet, rule) if rule is not None else np.zeros(0, np.int64)
    offline: set[int] = set()
    back: list[tuple[float, int]] = []  # (time, site) of the devices that come back
    t_move = _gap(rng, spec.handovers, n, spec.start)
    t_off = _gap(rng, spec.offline, n, spec.start)
    while True:
        t = min(t_move, t_off, back[0][0] if back else float("inf"))
        if t > end or t == float("inf"):
            return
        if back and back[0][0] == t:
            _, site = heapq.heappop(back)
            offline.discard(site)
            yield t, schema.DeviceOnlineEvent.model_construct(at=t, kind="deviceOnline", site=_name(fleet, site))
        elif t == t_move:
            t_move = _gap(rng, spec.handovers, n, t)
            site = first + int(rng.integers(n))
            if site in offline:
                continue  # an offline device does not move
            homes = fleet.network.links_of(site)[0]
            choice = targets[~np.isin(targets, homes)]
            if not choice.size:
                continue
            to = [_name(fleet, int(choice[rng.integers(choice.size)]))]
            if homes.size == 2:  # a multi-homed device keeps one home, moves the other
                to.append(_name(fleet, int(homes[rng.integers(homes.size)])))
            elif homes.size > 2:  # (more homes: it keeps all but one, drawn)
                gone = int(rng.integers(homes.size))
                to.extend(_name(fleet, int(h)) for k, h in enumerate(homes.tolist()) if k != gone)
            yield t, schema.HandoverEvent.model_construct(at=t, kind="handover", site=_name(fleet, site), to=to,
                                                          rtt_ms=None, bandwidth=None)
        else:
            t_off = _gap(rng, spec.offline, n, t)
            site = first + int(rng.integers(n))
            if site in offline:
                continue
            offline.add(site)
            duration = draw(spec.offline_for, rng)
            heapq.heappush(back, (t + duration, site))
            yield t, schema.DeviceOfflineEvent.model_construct(at=t, kind="deviceOffline", site=_name(fleet, site))


def _gap(rng: np.random.Generator, rate: float | None, n: int, now: float) -> float:
    if rate is None or rate <= 0 or n == 0:
        return float("inf")
    return now + float(rng.exponential(1.0 / (rate * n)))


def _name(fleet: Fleet, site: int) -> str:
    return fleet.site_table.names.name(site)

