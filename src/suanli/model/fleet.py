"""The physical world: sites, node groups expanded into nodes, links, fabrics.

``Fleet`` is immutable; its per-node facts are NumPy arrays indexed by node
number so the scheduler can filter without Python loops. Names are interned
into integer codes (``Codes``) once here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from suanli.model.network import Network

TIERS: tuple[str, ...] = ("cloud", "edge", "device")
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


@dataclass(frozen=True, slots=True)
class Site:
    index: int
    name: str
    tier: str
    region: str = ""
    intra_site_rtt_ms: float = 0.2
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeGroup:
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


@dataclass(frozen=True, slots=True)
class Link:
    a: int
    b: int
    rtt_ms: float
    bandwidth_mbps: float


class Codes:
    """Interns names into dense integer codes, in first-seen order."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        for n in names:
            self.code(n)

    def code(self, name: str) -> int:
        got = self.index.get(name)
        if got is None:
            got = self.index[name] = len(self.names)
            self.names.append(name)
        return got

    def get(self, name: str, default: int = -1) -> int:
        return self.index.get(name, default)

    def __len__(self) -> int:
        return len(self.names)


class Fleet:
    """Sites, node groups and nodes, with per-node arrays for the scheduler."""

    def __init__(self, sites: Sequence[Site], groups: Sequence[NodeGroup], links: Sequence[Link]):
        self.sites = tuple(sites)
        self.groups = tuple(groups)
        self.links = tuple(links)
        self.site_index = {s.name: s.index for s in self.sites}
        self.kinds = Codes(sorted({d.kind for g in groups for d in g.devices}))
        self.models = Codes(sorted({d.model for g in groups for d in g.devices}))
        self.archs = Codes(sorted({g.arch for g in groups}))
        self.domains = Codes()  # fabric domain names, all levels share one code space
        self.resources: tuple[str, ...] = ("cpu", "memory", *self.kinds.names)
        self.resource_keys: tuple[str, ...] = ("cpu_milli", "mem_mib", *(f"{k}_milli" for k in self.kinds.names))
        self.max_devices = max((sum(d.count for d in g.devices) for g in groups), default=0)

        counts = np.array([g.count for g in groups], dtype=np.int64)
        self.node_group = np.repeat(np.arange(len(groups), dtype=np.int32), counts)
        self.group_first_node = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.n_nodes = int(counts.sum())
        self._names: list[str] | None = None
        group_site = np.array([g.site for g in groups], dtype=np.int32)
        self.node_site = group_site[self.node_group] if len(groups) else np.zeros(0, np.int32)
        self.site_tier = np.array([TIERS.index(s.tier) for s in self.sites], dtype=np.int8)
        self.node_tier = self.site_tier[self.node_site]
        self.node_arch = np.array([self.archs.code(g.arch) for g in groups], dtype=np.int16)[self.node_group]

        fabric = np.full((len(groups), len(FABRIC_LEVELS)), -1, dtype=np.int32)
        for gi, g in enumerate(groups):
            for li, level in enumerate(FABRIC_LEVELS):
                name = g.fabrics.get(level)
                if level == "ethernet" and name is None:
                    name = self.sites[g.site].name  # every node has an ethernet; the site's by default
                if name is not None:
                    fabric[gi, li] = self.domains.code(f"{level}:{name}")
        self.node_fabric = fabric[self.node_group]

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
        self.node_capacity = cap[self.node_group]
        self.node_dev_kind = dev_kind[self.node_group]
        self.node_dev_model = dev_model[self.node_group]
        self.node_dev_shareable = dev_share[self.node_group]
        self.network = Network.build(self.sites, self.links)

    # ------------------------------------------------------------ names

    def node_name(self, node: int) -> str:
        if self._names is None:  # made once, on first use: events name nodes all the time
            self._names = [self._name(n) for n in range(self.n_nodes)]
        return self._names[node]

    def _name(self, node: int) -> str:
        g = self.groups[int(self.node_group[node])]
        return f"{self.sites[g.site].name}/{g.name}-{node - int(self.group_first_node[g.index])}"

    def node_by_name(self, name: str) -> int:
        site, _, rest = name.partition("/")
        gname, _, idx = rest.rpartition("-")
        for g in self.groups:
            if self.sites[g.site].name == site and g.name == gname and idx.isdigit() and int(idx) < g.count:
                return int(self.group_first_node[g.index]) + int(idx)
        raise KeyError(name)

    def site_of(self, node: int) -> Site:
        return self.sites[int(self.node_site[node])]

    def total_capacity(self) -> np.ndarray:
        return self.node_capacity.sum(axis=0)
