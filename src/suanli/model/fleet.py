"""The physical world: sites, node groups expanded into nodes, links, fabrics.

``Fleet`` is immutable; its per-site and per-node facts are NumPy arrays
indexed by site and node number so the scheduler can filter without Python
loops. Names are interned into integer codes (``Codes``) once here. A
population (a million cars) is one row block of the site table and one node
group per template group spanning all its sites: no object per device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from suanli.model.network import Network
from suanli.model.sites import TIERS, Codes, Site, SiteSeq, SiteTable

__all__ = ["TIERS", "Site", "DeviceType", "NodeGroup", "Link", "LinkArrays", "Codes", "Fleet"]
FABRIC_LEVELS: tuple[str, ...] = ("coherent", "ib", "roce", "ethernet")
COUPLING_LEVELS: tuple[str, ...] = FABRIC_LEVELS + ("wan",)
CPU, MEM = 0, 1  # resource columns; accelerator kinds follow from column 2


@dataclass(frozen=True, slots=True)
class DeviceType:
    kind: str
    model: str
    count: int
    memory_mib: int | None = None
    shareable: bool = False
    cdi: str | None = None  # their CDI kind (VENDOR/CLASS): device i is VENDOR/CLASS=i to a container runtime


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` nodes on each of the sites ``site`` .. ``site + site_count - 1``
    (more than one site for a population's template)."""

    index: int
    site: int
    name: str
    count: int
    arch: str
    cpu_milli: int
    mem_mib: int
    devices: tuple[DeviceType, ...] = ()
    fabrics: Mapping[str, str] = field(default_factory=dict)  # level -> domain name
    labels: Mapping[str, str] = field(default_factory=dict)
    cost_per_hour: float | None = None
    site_count: int = 1
    first: int = 0  # the number in the name of its first node (nodes added to a group later count on)
    single: bool = False  # one node named ``SITE/NAME`` (a node that registered itself)

    @property
    def n_nodes(self) -> int:
        return self.count * self.site_count


@dataclass(frozen=True, slots=True)
class Link:
    a: int
    b: int
    rtt_ms: float
    bandwidth_mbps: float


@dataclass(frozen=True, slots=True)
class LinkArrays:
    """Links as columns: site ids ``a``, ``b``, rtt (ms) and bandwidth (Mbps)."""

    a: np.ndarray
    b: np.ndarray
    rtt_ms: np.ndarray
    bandwidth_mbps: np.ndarray

    @staticmethod
    def of(links: Sequence[Link]) -> "LinkArrays":
        n = len(links)
        return LinkArrays(np.fromiter((ln.a for ln in links), np.int64, n),
                          np.fromiter((ln.b for ln in links), np.int64, n),
                          np.fromiter((ln.rtt_ms for ln in links), float, n),
                          np.fromiter((ln.bandwidth_mbps for ln in links), float, n))

    @staticmethod
    def concat(parts: Sequence["LinkArrays"]) -> "LinkArrays":
        if not parts:
            return LinkArrays.of(())
        return LinkArrays(*(np.concatenate([getattr(p, f) for p in parts])
                            for f in ("a", "b", "rtt_ms", "bandwidth_mbps")))

    def __len__(self) -> int:
        return len(self.a)


class Fleet:
    """Sites, node groups and nodes, with per-node arrays for the scheduler."""

    def __init__(self, sites: Sequence[Site] | SiteTable, groups: Sequence[NodeGroup],
                 links: Sequence[Link] | LinkArrays, base: "Fleet | None" = None, network: Network | None = None):
        """``base``: a fleet this one grows (a live server's, changed at run
        time): its sites and groups come first, unchanged in number, so its
        nodes keep their numbers and the codes of their facts; it must know
        every accelerator kind (a kind is a resource column)."""
        self.site_table = sites if isinstance(sites, SiteTable) else SiteTable.of(sites)
        self.sites = SiteSeq(self.site_table)
        self.groups = tuple(groups)
        self.link_arrays = links if isinstance(links, LinkArrays) else LinkArrays.of(list(links))
        self._links: tuple[Link, ...] | None = None
        self.site_index = self.site_table.names  # name -> site id (a mapping that parses population names)
        self.masks: dict[tuple, object] = {}  # site globs -> bool[S] (request.site_mask), and sites_able
        self._by_site: tuple[np.ndarray, np.ndarray] | None = None  # nodes by site (nodes_of)
        self.any_private = bool(self.site_table.private.any())
        self.attach_rules: dict[str, object] = {}  # population -> its attach selector (handovers pick from it)
        kinds = {d.kind for g in groups for d in g.devices}
        if base is not None and not kinds <= set(base.kinds.names):
            raise ValueError(f"accelerator kind {sorted(kinds - set(base.kinds.names))[0]!r} is new to the fleet")
        grown = lambda codes, names: Codes([*(codes.names if base is not None else ()), *sorted(names)])  # noqa: E731
        self.kinds = grown(base.kinds, ()) if base is not None else Codes(sorted(kinds))
        self.models = grown(base.models if base else None, {d.model for g in groups for d in g.devices})
        self.archs = grown(base.archs if base else None, {g.arch for g in groups})
        self.domains = Codes(base.domains.names if base is not None else ())  # named fabric domains, one code space
        self.domain_next = base.domain_next if base is not None else 0  # codes past every one in use
        self.resources: tuple[str, ...] = ("cpu", "memory", *self.kinds.names)
        self.resource_keys: tuple[str, ...] = ("cpu_milli", "mem_mib", *(f"{k}_milli" for k in self.kinds.names))
        self.max_devices = max((sum(d.count for d in g.devices) for g in groups), default=0)
        if base is not None:
            self.max_devices = max(self.max_devices, base.max_devices)
        self._by_name: dict[tuple[int, str], list[int]] | None = None  # (site, group name) -> groups (node_by_name)

        counts = np.array([g.n_nodes for g in groups], dtype=np.int64)
        self.node_group = np.repeat(np.arange(len(groups), dtype=np.int32), counts)
        self.group_first_node = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.n_nodes = int(counts.sum())
        self._names: list[str] | None = None
        self.node_site = np.concatenate(
            [g.site + np.arange(g.n_nodes, dtype=np.int32) // max(g.count, 1) for g in groups]
        ).astype(np.int32) if len(groups) else np.zeros(0, np.int32)
        self.site_tier = self.site_table.tier
        self.node_tier = self.site_tier[self.node_site]
        self.node_arch = np.array([self.archs.code(g.arch) for g in groups], dtype=np.int16)[self.node_group]

        self.node_fabric = self._fabric_codes(groups, base)
        self.retired = np.zeros(self.n_nodes, bool)  # nodes removed from a live server's fleet (kept numbered)
        if base is not None:
            self.retired[:base.n_nodes] = base.retired

        r = len(self.resources)
        cap = np.zeros((len(groups), r), dtype=np.int64)
        dev_kind = np.full((len(groups), self.max_devices), -1, dtype=np.int16)
        dev_model = np.full((len(groups), self.max_devices), -1, dtype=np.int16)
        dev_share = np.zeros((len(groups), self.max_devices), dtype=bool)
        for gi, g in enumerate(groups):
            cap[gi, 0], cap[gi, 1] = g.cpu_milli, g.mem_mib
            slot = 0
            for d in g.devices:
                k = self.kinds.code(d.kind)
                cap[gi, 2 + k] += 1000 * d.count
                dev_kind[gi, slot : slot + d.count] = k
                dev_model[gi, slot : slot + d.count] = self.models.code(d.model)
                dev_share[gi, slot : slot + d.count] = d.shareable
                slot += d.count
        self.group_capacity = cap
        self.group_dev_kind, self.group_dev_model = dev_kind, dev_model  # per group's device slots (few groups)
        self.node_capacity = cap[self.node_group]
        # per node and device slot, kept [slot, node] in C order (the node table's layout: it
        # reads these columns in place, ``CandidateTable.from_fleet``, one slot across rows
        # contiguous); ``node_dev_*`` are [node, slot] views made when read (a pickled fleet,
        # sent to a shard, keeps one copy)
        self.dev_kind_cols = np.ascontiguousarray(dev_kind[self.node_group].T)
        self.dev_model_cols = np.ascontiguousarray(dev_model[self.node_group].T)
        self.dev_shareable_cols = np.ascontiguousarray(dev_share[self.node_group].T)
        self.network = network if network is not None else self.fresh_network()  # given: a grown fleet's, paths as they were

    node_dev_kind = property(lambda self: self.dev_kind_cols.T)  # int16[node, slot]: kind code, -1: none
    node_dev_model = property(lambda self: self.dev_model_cols.T)
    node_dev_shareable = property(lambda self: self.dev_shareable_cols.T)

    def _domain(self, name: str) -> int:
        code = self.domains.index.get(name)
        if code is None:
            code = self.domain_next
            self.domains.index[name] = code
            self.domains.names.append(name)
            self.domain_next += 1
        return code

    def _fabric_codes(self, groups: Sequence[NodeGroup], base: "Fleet | None") -> np.ndarray:
        """Per node and fabric level, its domain's code (-1: none). Every node
        has an ethernet: its site's by default; a group spanning many sites
        (a population's) has each site's own, numbered in a block. A grown
        fleet keeps its base's codes and numbers new domains past them."""
        old = len(base.groups) if base is not None else 0
        fabric = np.full((len(groups), len(FABRIC_LEVELS)), -1, dtype=np.int64)
        eth = FABRIC_LEVELS.index("ethernet")
        for gi, g in enumerate(groups[old:], old):
            for li, level in enumerate(FABRIC_LEVELS):
                name = g.fabrics.get(level)
                if level == "ethernet" and name is None and g.site_count == 1:
                    name = self.site_table.names.name(g.site)  # every node has an ethernet; the site's by default
                if name is not None:
                    fabric[gi, li] = self._domain(f"{level}:{name}")
        node_fabric = fabric[self.node_group]
        for gi in range(old, len(groups)):
            g = groups[gi]
            if g.site_count > 1 and g.fabrics.get("ethernet") is None:  # the sites' own ethernets
                first = self.group_first_node[gi]
                rows = slice(first, first + g.n_nodes)
                node_fabric[rows, eth] = self.domain_next + self.node_site[rows] - self.node_site[first]
                self.domain_next += g.site_count
        if base is not None:
            node_fabric[:base.n_nodes] = base.node_fabric
        return node_fabric.astype(np.int32) if self.n_nodes < 2**31 else node_fabric

    def sites_able(self, vec: np.ndarray) -> tuple[np.ndarray, bool]:
        """(bool[S] read-only, whether that is every site): the sites with a
        node whose capacity could ever hold ``vec`` in every resource (per
        resource, the site's largest node), a necessary condition of every
        node check, and that are not private (a private site takes only work
        bound near it: the caller adds it back); kept per vector."""
        key = ("able", vec.tobytes())
        got = self.masks.get(key)
        if got is None:
            able = self.sites_able_ignoring_private(vec) & ~self.site_table.private  # a private site: its own work
            able.setflags(write=False)
            got = self.masks[key] = (able, bool(able.all()))
        return got

    def sites_able_ignoring_private(self, vec: np.ndarray) -> np.ndarray:
        """``sites_able``'s capacity condition alone (bool[S], read-only)."""
        key = ("capacity", vec.tobytes())
        got = self.masks.get(key)
        if got is None:
            # per resource asked, a site with a node that has that much (its largest has: the
            # same test, with no [S, R] column of largest nodes kept, 32 bytes a device)
            got = np.ones(len(self.site_table), bool)
            for r in np.flatnonzero(vec > 0).tolist():
                got &= np.bincount(self.node_site[self.node_capacity[:, r] >= vec[r]],
                                   minlength=len(self.site_table)) > 0
            self.masks[key] = got
            got.setflags(write=False)
        return got

    def nodes_of(self, site: int) -> np.ndarray:
        """int64: the nodes of ``site``, ascending (from an index by site made once)."""
        if self._by_site is None:  # (int32: nodes below 2^31; a million devices' 8 bytes, not 16)
            order = np.argsort(self.node_site, kind="stable").astype(np.int32)
            start = np.zeros(len(self.site_table) + 1, np.int32)
            start[1:] = np.cumsum(np.bincount(self.node_site, minlength=len(self.site_table)))
            self._by_site = (order, start)
        order, start = self._by_site
        return order[start[site]: start[site + 1]].astype(np.int64)

    def fresh_network(self) -> Network:
        """The network of the fleet's links, all up (a run changes its own in place)."""
        la = self.link_arrays
        return Network.from_arrays(self.site_table.intra_rtt_ms, la.a, la.b, la.rtt_ms, la.bandwidth_mbps,
                                   transit=self.site_table.transit)

    @property
    def links(self) -> tuple[Link, ...]:
        """The links as objects (made on first use: a big fleet reads ``link_arrays``)."""
        if self._links is None:
            la = self.link_arrays
            self._links = tuple(Link(int(a), int(b), float(r), float(w))
                                for a, b, r, w in zip(la.a, la.b, la.rtt_ms, la.bandwidth_mbps))
        return self._links

    # ------------------------------------------------------------ names

    def node_name(self, node: int) -> str:
        if self._names is None:  # listed groups' names made once, on first use: events name nodes all the time
            self._names = [self._name(n) for n in range(self._listed_nodes())]
        return self._names[node] if node < len(self._names) else self._name(node)

    def _listed_nodes(self) -> int:
        """Nodes before the first group that spans many sites (their names are made when asked)."""
        for g in self.groups:
            if g.site_count > 1:
                return int(self.group_first_node[g.index])
        return self.n_nodes

    def _name(self, node: int) -> str:
        g = self.groups[int(self.node_group[node])]
        local = node - int(self.group_first_node[g.index])
        site = g.site + local // max(g.count, 1)
        if g.single:
            return f"{self.site_table.names.name(site)}/{g.name}"
        return f"{self.site_table.names.name(site)}/{g.name}-{g.first + local % max(g.count, 1)}"

    def node_by_name(self, name: str) -> int:
        """The node's number. A name that a removed node and a later one share
        (a live fleet's) is the later one's."""
        site, _, rest = name.partition("/")
        s = self.site_table.names.get(site)
        if s < 0:
            raise KeyError(name)
        if self._by_name is None:
            self._by_name = {}
            for g in self.groups:
                if g.site_count == 1:
                    self._by_name.setdefault((g.site, g.name), []).append(g.index)
        found = -1
        for gi in reversed(self._by_name.get((s, rest), ())):  # one that registered itself
            if self.groups[gi].single:
                found = int(self.group_first_node[gi])
                if not self.retired[found]:
                    return found
        gname, _, idx = rest.rpartition("-")
        if found < 0 and idx.isdigit():
            i = int(idx)
            for gi in reversed(self._by_name.get((s, gname), ())):
                g = self.groups[gi]
                if not g.single and g.first <= i < g.first + g.count:
                    node = int(self.group_first_node[gi]) + i - g.first
                    if not self.retired[node]:
                        return node
                    found = node if found < 0 else found
            if found < 0:
                for g in self.groups:  # a population's groups span many sites
                    if g.site_count > 1 and g.site <= s < g.site + g.site_count and g.name == gname and i < g.count:
                        return int(self.group_first_node[g.index]) + (s - g.site) * g.count + i
        if found < 0:
            raise KeyError(name)
        return found

    def site_of(self, node: int) -> Site:
        return self.sites[int(self.node_site[node])]

    def site_name_of(self, node: int) -> str:
        """``site_of(node).name`` without making the ``Site``."""
        return self.site_table.names.name(int(self.node_site[node]))

    def total_capacity(self) -> np.ndarray:
        """What the nodes in the fleet hold, removed ones left out."""
        if self.retired.any():
            return self.node_capacity[~self.retired].sum(axis=0)
        return self.node_capacity.sum(axis=0)
