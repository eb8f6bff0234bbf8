"""A request: what one placement needs, compiled against the fleet's codes.

Tasks and hosts are both requests: a resource vector, accelerator needs and
the constraints that decide where it may go. Site-level and node-group-level
constraints are evaluated once into small masks (``[S]`` and ``[G]``) that
the filters broadcast to table rows; a latency bound is kept as the few sites
within it (``NearBound``) and reachability as a component label, so that a
request bound near one of a million devices costs what its neighbourhood
costs, not what the fleet does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from suanli.model.fleet import TIERS, Fleet
from suanli.model.work import Near, Resources, Selector, Tenant
from suanli.model.globs import glob_regex
from suanli.scheduling.reasons import Why


@dataclass(frozen=True, slots=True, eq=False)
class AccelNeed:
    kind: int  # column 2 + kind in resource vectors; -1 when the fleet has none of this kind
    kind_name: str
    models: np.ndarray | None  # allowed model codes; None: any model
    milli: int

    @property
    def whole(self) -> bool:
        return self.milli >= 1000

    @property
    def count(self) -> int:
        return self.milli // 1000


@dataclass(frozen=True, slots=True, eq=False)
class NearBound:
    """The sites within a latency bound of one site that could ever hold the
    request (a site whose largest node is too small is left out), found from
    the network without a column over every site: the aggregate a decision
    starts from. ``mask`` is the bound itself, over every site."""

    sites: np.ndarray  # int64[k], ascending
    rtt: np.ndarray  # float64[k]: each one's path rtt to the near site
    n_sites: int
    network: object
    site: int
    max_rtt_ms: float
    complete: bool  # no site within the bound was left out

    def listed(self, sites: np.ndarray) -> np.ndarray:
        """bool[k]: which of ``sites`` are among its own (within the bound,
        able to hold the request: all of those within it when ``complete``)."""
        if not self.sites.size:
            return np.zeros(len(sites), bool)
        at = np.searchsorted(self.sites, sites)
        return (at < self.sites.size) & (self.sites[np.minimum(at, self.sites.size - 1)] == sites)

    def mask(self) -> np.ndarray:
        """bool[S]: the sites within the bound (made when a check over every site is asked for)."""
        if not self.complete:
            return self.network.rtt_to(self.site) <= self.max_rtt_ms
        out = np.zeros(self.n_sites, bool)
        out[self.sites] = True
        return out


@dataclass(frozen=True, slots=True, eq=False)
class Private:
    """Sites of private populations, of which only ``near`` (-1: none) is open."""

    private: np.ndarray  # bool[S]
    near: int

    def mask(self) -> np.ndarray:
        out = ~self.private
        if self.near >= 0:
            out[self.near] = True
        return out

    def at(self, sites: np.ndarray) -> np.ndarray:
        return ~self.private[sites] | (sites == self.near)


# A site check: (reason, bool[S]) as most are; (reason, Private) for private sites; or (reason, NearBound) for a
# latency bound, or (reason, int) for "reachable from the sites of this network
# component": both read at a few sites without a mask over all of them.
SiteTerm = tuple[Why, "np.ndarray | NearBound | int"]


@dataclass(eq=False)
class Request:
    """Everything the filters and scores need about one kind of placement."""

    vec: np.ndarray  # int64[R]
    accels: tuple[AccelNeed, ...] = ()
    whole_node: bool = False
    site_terms: tuple[SiteTerm, ...] = ()  # site checks, in the order of explanations
    group_checks: tuple[tuple[Why, np.ndarray], ...] = ()  # (reason, bool[G])
    arch: np.ndarray | None = None  # allowed arch codes
    arch_why: Why = Why("arch")  # what a node of another arch is told (its image's variants, where they bind)
    near_site: int = -1
    near_max_ms: float | None = None
    data_sites: tuple[int, ...] = ()
    near: NearBound | None = None  # the sites within the near bound (a task's own: not a merged host's)
    network: object = None  # the network the terms were read from (components label sites)
    moving: tuple[int, int] | None = None  # a moving task's state: (the site holding it, its bytes)
    cache: dict = field(default_factory=dict)  # small values of its own (the last row taken, vec as ints)

    def __post_init__(self) -> None:
        # allocations of the request share its vector: it must never change
        self.vec.flags.writeable = False

    @property
    def site_checks(self) -> tuple[tuple[Why, np.ndarray], ...]:
        """Every site term as (reason, bool[S]) (a bound's mask and a
        component's only here: a decision over a few sites reads ``sites_ok``).
        Kept with the request only when every term is a mask already: a
        million requests bound near a million cars must not each hold masks
        over every site (the table's caches, bounded by bytes, keep what the
        filters make of them)."""
        got = self.cache.get("site_checks")
        if got is None:
            got = tuple((reason, self._mask(term)) for reason, term in self.site_terms)
            if all(isinstance(term, np.ndarray) for _, term in self.site_terms):
                self.cache["site_checks"] = got
        return got

    def _mask(self, term) -> np.ndarray:
        if isinstance(term, (NearBound, Private)):
            return term.mask()
        if isinstance(term, (int, np.integer)):
            return self.network.component == term
        return term

    def sites_ok(self, sites: np.ndarray, skip: "NearBound | None" = None) -> np.ndarray:
        """bool[k]: which of ``sites`` pass every site term (but ``skip``, known to hold)."""
        ok = np.ones(len(sites), bool)
        for _, term in self.site_terms:
            if term is not skip:
                ok &= self.term_ok(term, sites)
        return ok

    def term_ok(self, term, sites: np.ndarray) -> np.ndarray:
        """bool[k]: which of ``sites`` pass one of its site terms (read at those sites only)."""
        if isinstance(term, Private):
            return term.at(sites)
        if isinstance(term, NearBound) and not term.complete:
            return term.network.rtt_at(term.site, sites) <= term.max_rtt_ms
        if isinstance(term, NearBound):
            return term.listed(sites)
        if isinstance(term, (int, np.integer)):
            return self.network.component[sites] == term
        return term[sites]

    @property
    def plain(self) -> tuple[list[int], bool]:
        """``vec`` as Python ints, and whether it asks for anything: for scalar arithmetic."""
        p = self.cache.get("plain")
        if p is None:
            v = self.vec.tolist()
            p = self.cache["plain"] = (v, any(x > 0 for x in v))
        return p


def site_mask(fleet: Fleet, patterns: Iterable[str]) -> np.ndarray:
    """bool[S]: the sites some glob names; read-only, kept per pattern set
    (a population's names are matched one by one, so once)."""
    key = tuple(patterns)
    got = fleet.masks.get(key)
    if got is None:
        rx = re.compile("|".join(f"(?:{glob_regex(p)})" for p in key) or "(?!)")
        got = fleet.masks[key] = fleet.site_table.names.match(rx)
        got.setflags(write=False)
    return got


def resource_vector(fleet: Fleet, res: Resources) -> tuple[np.ndarray, tuple[AccelNeed, ...]]:
    vec = np.zeros(len(fleet.resources), np.int64)
    vec[0], vec[1] = res.cpu_milli, res.mem_mib
    needs = []
    for a in res.accelerators:
        k = fleet.kinds.get(a.kind)
        models = None
        if a.models is not None:
            models = np.array([fleet.models.get(m) for m in a.models if fleet.models.get(m) >= 0], np.int16)
        if k >= 0:
            vec[2 + k] = a.milli
        needs.append(AccelNeed(k, a.kind, models, a.milli))
    return vec, tuple(needs)


def compile_request(
    fleet: Fleet,
    res: Resources,
    *,
    tenant: Tenant | None = None,
    arch: Iterable[str] | None = None,
    near: Near | None = None,
    data_sites: Iterable[str] = (),
    selector: Selector | None = None,
    state_site: str | None = None,
    state_bytes: int = 0,
    local: bool = False,
    arch_why: Why | None = None,
) -> Request:
    """Compile resources and constraints into a Request for ``fleet``.
    ``state_site``: where a moving task's state is held; it must be able to
    travel, and a place costs the seconds its ``state_bytes`` take to get there. ``local``: the node's
    own work (a ``deviceBusy`` claim), which a private device takes as it
    takes the work bound near it."""
    vec, needs = resource_vector(fleet, res)
    site_checks: list[tuple[Why, np.ndarray]] = []
    group_checks: list[tuple[Why, np.ndarray]] = []
    if tenant is not None and tuple(tenant.allowed_sites) != ("*",):
        site_checks.append((Why("site"), site_mask(fleet, tenant.allowed_sites)))
    if selector is not None:
        if selector.tiers:
            tiers = [TIERS.index(t) for t in selector.tiers]
            site_checks.append((Why("selector", "tier"), np.isin(fleet.site_table.tier, tiers)))
        if selector.names:
            site_checks.append((Why("selector", "site"), site_mask(fleet, selector.names)))
        if selector.regions:
            table = fleet.site_table
            codes = [i for i, r in enumerate(table.regions) if r in selector.regions]
            site_checks.append((Why("selector", "region"), np.isin(table.region, codes)))
        if selector.labels:
            labels = [{**fleet.sites[g.site].labels, **g.labels} for g in fleet.groups]  # group labels win
            ok = np.array([all(lb.get(k) == v for k, v in selector.labels.items()) for lb in labels], bool)
            group_checks.append((Why("selector", "labels"), ok))
    near_site, near_max, bound = -1, None, None
    network = fleet.network
    if near is not None:
        near_site, near_max = fleet.site_index[near.site], near.max_rtt_ms
        if near_max is not None:
            able, everywhere = fleet.sites_able(vec)  # private sites left out: the near one comes back
            self_ok = bool(fleet.sites_able_ignoring_private(vec)[near_site]) if not everywhere else True
            bound = NearBound(*network.within(near_site, near_max, None if everywhere else able, self_ok),
                              len(fleet.sites), network, near_site, near_max, complete=everywhere)
    if fleet.any_private and not local:  # a device's own sites take only the work bound near them (a reason before distance)
        site_checks.append((Why("private"), Private(fleet.site_table.private, near_site)))
    if bound is not None:
        site_checks.append((Why("near", ms=near_max, site=near.site), bound))
    data_idx = tuple(fleet.site_index[s] for s in data_sites)
    exact = network.labels_exact() if data_idx or state_site is not None else True

    def reach(s: int) -> "int | np.ndarray":  # a label where labels say it, else the sites a column reaches
        return int(network.component[s]) if exact else network.reachable_to(s)
    for s in data_idx:
        site_checks.append((Why("reach", "data", site=fleet.site_table.names.name(s)), reach(s)))
    moving = None
    if state_site is not None:
        s = fleet.site_index[state_site]
        site_checks.append((Why("reach", "state", site=state_site), reach(s)))
        moving = (s, state_bytes)  # its placement costs the move's seconds (``scores.moving_cost``)
    arch_codes = None
    if arch is not None:
        arch_codes = np.array([fleet.archs.get(a) for a in arch if fleet.archs.get(a) >= 0], np.int16)
    return Request(
        vec=vec,
        accels=needs,
        whole_node=res.whole,
        site_terms=tuple(site_checks),
        group_checks=tuple(group_checks),
        arch=arch_codes,
        arch_why=arch_why or Why("arch"),
        near_site=near_site,
        near_max_ms=near_max,
        data_sites=data_idx,
        near=bound,
        network=network,
        moving=moving,
    )


def arch_reason(comp) -> Why | None:
    """What a node of an arch ``comp`` cannot run on is told, where its
    image's variants bind (``run.images``); None: the plain arch mismatch."""
    run = comp.run
    if run is None or run.images is None:
        return None
    return Why("arch", "image", archs=", ".join(a for a, _ in run.images))
