"""Properties of a static placement over random fleets and workloads.

Each example is a random but valid world written as YAML files (so the real
loader runs), scheduled once with a random seed; the JSON output is then
checked against the world it came from. The checks recompute everything they
need (node names, device layouts, path rtts, reachability, fabric domains)
from the world's plain facts rather than from the scheduler's arrays.

``SUANLI_PROPERTY_EXAMPLES`` scales the number of examples per property
(default 50) for longer local runs.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st

from suanli.model.work import Component, World
from suanli.output import outcome_json
from suanli.phrases import entry_text
from suanli.scheduling.static import schedule
from suanli.spec.build import load_world
from suanli.spec.problems import SpecError

pytestmark = pytest.mark.long(60)

EXAMPLES = int(os.environ.get("SUANLI_PROPERTY_EXAMPLES", "50"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TIERS = ("cloud", "edge", "device")
ARCHES = ("x86_64", "aarch64")
MODELS = {"gpu": ("A100", "H100", "T4"), "npu": ("Ascend910", "Ascend310")}
ALL_MODELS = tuple(m for ms in MODELS.values() for m in ms)
FABRIC_NAMES = {
    "coherent": ("nvl-1", "nvl-2"),
    "ib": ("ib-1", "ib-2"),
    "roce": ("roce-1", "roce-2"),
    "ethernet": ("eth-1",),
}
FABRIC_LEVELS = ("coherent", "ib", "roce", "ethernet")
COUPLINGS = (*FABRIC_LEVELS, "wan")


# ====================================================================== worlds


def one_in(draw, n: int) -> bool:
    """True about once in ``n`` draws (shrinks towards False)."""
    return draw(st.integers(0, n - 1)) == n - 1


def doc(kind: str, name: str, spec: dict, tenant: str | None = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if tenant is not None:
        meta["tenant"] = tenant
    return {"apiVersion": "suanli/v1", "kind": kind, "metadata": meta, "spec": spec}


def site_globs(site: dict) -> list[str]:
    """Glob patterns that match this site (and maybe others)."""
    name, tier = site["name"], site["tier"]
    if name.startswith("car-"):  # a population's site
        return [name, "car-*", "*-" + name.rsplit("-", 1)[1], name[:-1] + "?", "*"]
    return [name, f"{tier}-*", "*-" + name.rsplit("-", 1)[1], name[:-1] + "?", "*"]


@st.composite
def nested_fabrics(draw, site: int, pods: dict) -> dict:
    """Fabrics of a node group in one of its site's pods. Domains nest: nodes that
    share a coherent domain share their ib domain, nodes sharing an ib domain
    share their roce domain, and all of them are on their site's ethernet."""
    pod = draw(st.integers(0, 2))
    if pod not in pods:
        depth = draw(st.integers(0, 3))  # how many levels, from roce up
        levels = {"roce": f"roce-{site}", "ib": f"ib-{site}{pod // 2}", "coherent": f"nvl-{site}{pod}"}
        pods[pod] = dict(list(levels.items())[:depth])
    return dict(pods[pod])


@st.composite
def crossing_fabrics(draw) -> dict:
    """Fabric domain names drawn freely from small global sets: domains of
    different levels may cross each other and span sites."""
    fabrics = {}
    for level in ("coherent", "ib", "roce"):
        if one_in(draw, 3):
            fabrics[level] = draw(st.sampled_from(FABRIC_NAMES[level]))
    if one_in(draw, 6):
        fabrics["ethernet"] = "eth-1"
    return fabrics


@st.composite
def fleet_specs(draw, crossing: bool = False) -> dict:
    sites = []
    n_sites = draw(st.integers(1, 4))
    for i in range(n_sites):
        pods: dict = {}
        tier = draw(st.sampled_from(TIERS))
        site: dict[str, Any] = {"name": f"{tier}-{i}", "tier": tier,
                                "region": draw(st.sampled_from(["north", "south"]))}
        if one_in(draw, 5):
            site["intraSiteRttMs"] = draw(st.sampled_from([0, 0.5, 1, 3]))
        groups = []
        for k in range(draw(st.integers(1 if i == 0 else 0, 2))):
            g: dict[str, Any] = {
                "name": f"g{k}",
                "count": draw(st.integers(1, 3)),
                "arch": draw(st.sampled_from(ARCHES)),
                "cpu": draw(st.sampled_from([2, 4, 8])),
                "memory": draw(st.sampled_from(["2Gi", "4Gi", "8Gi"])),
            }
            accels = []
            for kind in ("gpu", "npu"):
                if one_in(draw, 2):
                    accels.append({
                        "kind": kind,
                        "model": draw(st.sampled_from(MODELS[kind])),
                        "count": draw(st.sampled_from([1, 2, 4, 8])),
                        "memory": "16Gi",
                        "shareable": draw(st.booleans()),
                    })
            if accels:
                g["accelerators"] = accels
            fabrics = draw(crossing_fabrics() if crossing else nested_fabrics(i, pods))
            if fabrics:
                g["fabrics"] = fabrics
            if one_in(draw, 2):
                g["labels"] = {"pool": draw(st.sampled_from(["a", "b"]))}
            groups.append(g)
        if groups:
            site["nodeGroups"] = groups
        sites.append(site)
    links = []
    for i in range(n_sites):
        for j in range(i + 1, n_sites):
            if draw(st.booleans()):
                links.append({
                    "between": [sites[i]["name"], sites[j]["name"]],
                    "rttMs": draw(st.integers(0, 60)) / 2,  # halves: sums stay exact
                    "bandwidth": draw(st.sampled_from(["200Mbps", "1Gbps", "10Gbps"])),
                })
    fleet = {"sites": sites, "links": links}
    if one_in(draw, 3):
        fleet["populations"] = [draw(populations(sites))]
    return fleet


@st.composite
def populations(draw, sites: list[dict]) -> dict:
    """A few single-node device sites written as a population, attached to the
    listed sites (rtts in halves, as the links: sums stay exact)."""
    homes = draw(st.integers(1, min(2, len(sites))))
    g = {"name": "soc", "count": draw(st.integers(1, 2)), "arch": draw(st.sampled_from(ARCHES)),
         "cpu": draw(st.sampled_from([2, 4])), "memory": draw(st.sampled_from(["2Gi", "4Gi"]))}
    if one_in(draw, 2):
        g["accelerators"] = [{"kind": "npu", "model": draw(st.sampled_from(MODELS["npu"])), "count": 1,
                              "shareable": draw(st.booleans())}]
    pop: dict[str, Any] = {"name": "cars", "count": draw(st.integers(1, 12)), "sites": "car-##", "nodeGroups": [g],
                           "seed": draw(st.integers(0, 3)), "private": draw(st.booleans())}
    if not one_in(draw, 6):
        pop["attach"] = {"to": {}, "homes": homes, "rttMs": draw(st.integers(0, 10)) / 2,
                         "bandwidth": draw(st.sampled_from(["100Mbps", "1Gbps"]))}
    return pop


def population_sites(fleet: dict) -> list[dict]:
    """The population's sites as the listed ones are written (name, tier), for references."""
    return [{"name": f"car-{k:02d}", "tier": "device"} for p in fleet.get("populations", ()) for k in range(p["count"])]


def fleet_kinds(fleet: dict) -> list[str]:
    groups = [g for s in fleet["sites"] for g in s.get("nodeGroups", ())]
    groups += [g for p in fleet.get("populations", ()) for g in p["nodeGroups"]]
    return sorted({a["kind"] for g in groups for a in g.get("accelerators", ())})


@st.composite
def accelerator_demands(draw, counts: list, present: list[str]) -> list[dict]:
    """One or two accelerator requests; mostly of kinds the fleet has."""
    out = []
    if present and not one_in(draw, 5):
        kinds = draw(st.lists(st.sampled_from(present), min_size=1, max_size=len(present), unique=True))
    else:
        kinds = draw(st.lists(st.sampled_from(["gpu", "npu"]), min_size=1, max_size=2, unique=True))
    for kind in kinds:
        a: dict[str, Any] = {"kind": kind, "count": draw(st.sampled_from(counts))}
        if one_in(draw, 3):
            pool = MODELS[kind] + (ALL_MODELS if one_in(draw, 4) else ())
            a["model"] = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))
        out.append(a)
    return out


@st.composite
def selectors(draw, sites: list[dict]) -> dict:
    sel: dict[str, Any] = {}
    if one_in(draw, 3):
        sel["tier"] = draw(st.lists(st.sampled_from(TIERS), min_size=1, max_size=2, unique=True))
    if one_in(draw, 3):
        site = draw(st.sampled_from(sites))
        sel["names"] = [draw(st.sampled_from(site_globs(site)))]
    if one_in(draw, 4):
        sel["regions"] = [draw(st.sampled_from(["north", "south"]))]
    if one_in(draw, 4):
        sel["labels"] = {"pool": draw(st.sampled_from(["a", "b"]))}
    return sel


@st.composite
def host_groups(draw, k: int, sites: list[dict], kinds: list[str]) -> dict:
    hg: dict[str, Any] = {"name": f"h{k}"}
    if one_in(draw, 4):
        hg["count"] = draw(st.integers(0, 3))
    else:
        hg["max"] = draw(st.integers(1, 6))
        if draw(st.booleans()):
            hg["min"] = draw(st.integers(0, hg["max"]))
    if one_in(draw, 4):
        hg["resources"] = "whole"
    else:
        res: dict[str, Any] = {"cpu": draw(st.sampled_from([1, 2, 4, 8])),
                               "memory": draw(st.sampled_from(["1Gi", "2Gi", "4Gi", "8Gi"]))}
        if one_in(draw, 3):
            res["accelerators"] = draw(accelerator_demands([0.5, 1, 2], kinds))
        hg["resources"] = res
    if one_in(draw, 3):
        hg["coupling"] = draw(st.sampled_from(COUPLINGS))
    sel = draw(selectors(sites)) if one_in(draw, 3) else {}
    if sel:
        hg["sites"] = sel
    if one_in(draw, 5):
        hg["near"] = {"site": draw(st.sampled_from(sites))["name"],
                      "maxRttMs": draw(st.integers(0, 40)) / 2}
    if one_in(draw, 4):
        hg["platform"] = {"arch": draw(st.lists(st.sampled_from(ARCHES), min_size=1, max_size=2, unique=True))}
    return hg


@st.composite
def components(draw, k: int, sites: list[dict], kinds: list[str]) -> dict:
    c: dict[str, Any] = {"name": f"c{k}"}
    if draw(st.booleans()):
        c["lifetime"] = "job"
        c["duration"] = "1h"
    else:
        c["lifetime"] = "service"
    if one_in(draw, 3):
        elastic = one_in(draw, 2)
        size = draw(st.integers(2, 10) if elastic else st.integers(1, 4))  # elastic: often past what fits
        c["gang"] = {"size": size}
        if elastic:
            c["gang"]["minSize"] = draw(st.integers(1, max(1, size // 2)))  # room to be placed below its size
        if one_in(draw, 2):
            c["coupling"] = draw(st.sampled_from(COUPLINGS))
    elif draw(st.booleans()):
        c["replicas"] = draw(st.integers(0, 5))
    res: dict[str, Any] = {}
    if not one_in(draw, 8):
        res["cpu"] = draw(st.sampled_from(["250m", 0.5, 1, 2, 4]))
    if not one_in(draw, 8):
        res["memory"] = draw(st.sampled_from(["256Mi", "512Mi", "1Gi", "2Gi"]))
    if one_in(draw, 3):
        res["accelerators"] = draw(accelerator_demands([0.25, 0.5, 1, 2], kinds))
    c["resources"] = res
    if one_in(draw, 4):
        arch = list(ARCHES) + (["riscv64"] if one_in(draw, 4) else [])
        c["platform"] = {"arch": draw(st.lists(st.sampled_from(arch), min_size=1, max_size=2, unique=True))}
    if one_in(draw, 4):
        near: dict[str, Any] = {"site": draw(st.sampled_from(sites))["name"]}
        if draw(st.booleans()):
            near["maxRttMs"] = draw(st.integers(0, 40)) / 2
        c["near"] = near
    if one_in(draw, 5):
        data: dict[str, Any] = {"source": draw(st.sampled_from(sites))["name"]}
        if draw(st.booleans()):
            data["sink"] = draw(st.sampled_from(sites))["name"]
        c["data"] = data
    if one_in(draw, 3):
        c["affinity"] = {"group": draw(st.sampled_from(["ag0", "ag1"])),
                         "scope": draw(st.sampled_from(["node", "site", "reachable", "fabric"]))}
    if one_in(draw, 3):
        c["antiAffinity"] = {"group": draw(st.sampled_from(["xg0", "xg1"])),
                             "scope": draw(st.sampled_from(["node", "site"]))}
    if one_in(draw, 4):
        c["priority"] = draw(st.sampled_from([0, 10, 100]))
    return c


def one_scope_per_group(app_spec: dict, field: str) -> None:
    """Members of one (anti-)affinity group all take the scope its first member declares."""
    first: dict[str, str] = {}
    for c in app_spec["components"]:
        got = c.get(field)
        if got is not None:
            got["scope"] = first.setdefault(got["group"], got["scope"])


@st.composite
def world_docs(draw, mixed_scopes: str | None = None, crossing: bool = False) -> list[dict]:
    """The documents of one random world: a fleet, tenants, VCs, applications.

    The members of an affinity or anti-affinity group share one scope, except
    for the field named by ``mixed_scopes`` ("affinity" or "antiAffinity").
    Fabric domains nest (see ``nested_fabrics``) unless ``crossing``."""
    fleet = draw(fleet_specs(crossing))
    sites = fleet["sites"] + population_sites(fleet)
    kinds = fleet_kinds(fleet)
    docs = [doc("Fleet", "fleet", fleet)]
    tenants = [f"t{i}" for i in range(draw(st.integers(1, 3)))]
    for t in tenants:
        spec: dict[str, Any] = {"weight": draw(st.integers(1, 3))}
        if one_in(draw, 2):
            quota: dict[str, Any] = {}
            if draw(st.booleans()):
                quota["cpu"] = draw(st.integers(1, 8))
            if draw(st.booleans()):
                quota["memory"] = f"{draw(st.integers(1, 8))}Gi"
            for kind in kinds:
                if draw(st.booleans()):
                    quota[kind] = draw(st.sampled_from([0.5, 1, 2, 3]))
            spec["quota"] = quota
        if one_in(draw, 2):
            spec["allowedSites"] = [draw(st.sampled_from(site_globs(draw(st.sampled_from(sites)))))
                                    for _ in range(draw(st.integers(1, 2)))]
        docs.append(doc("Tenant", t, spec))
    vcs: dict[str, str] = {}
    for t in tenants:
        if one_in(draw, 2):
            name = f"vc-{t}"
            vcs[t] = name
            groups = [draw(host_groups(k, sites, kinds)) for k in range(draw(st.integers(1, 2)))]
            docs.append(doc("VirtualCluster", name, {"hostGroups": groups}, tenant=t))
    for a in range(draw(st.integers(1, 4))):
        tenant = draw(st.sampled_from(tenants))
        spec = {"priority": draw(st.sampled_from([0, 10, 100])),
                "components": [draw(components(k, sites, kinds)) for k in range(draw(st.integers(1, 3)))]}
        if tenant in vcs and draw(st.booleans()):
            spec["virtualCluster"] = vcs[tenant]
        for field in ("affinity", "antiAffinity"):
            if field != mixed_scopes:
                one_scope_per_group(spec, field)
        docs.append(doc("Application", f"a{a}", spec, tenant=tenant))
    return docs


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@st.composite
def coupled_work_on_crossing_fabrics(draw) -> list[dict]:
    """One site whose node groups sit in fabric domains that cross each other, and
    gangs of several coupling levels that must share an affinity group or grow
    a coupled elastic host group."""
    groups = []
    for k in range(draw(st.integers(2, 4))):
        fabrics = {level: draw(st.sampled_from(FABRIC_NAMES[level]))
                   for level in ("coherent", "ib", "roce") if not one_in(draw, 3)}
        groups.append({"name": f"g{k}", "count": draw(st.integers(1, 2)), "arch": "x86_64",
                       "cpu": 2, "memory": "4Gi", "fabrics": fabrics})
    fleet = {"sites": [{"name": "cloud-0", "tier": "cloud", "nodeGroups": groups}]}
    docs = [doc("Fleet", "fleet", fleet), doc("Tenant", "t0", {})]
    levels = st.sampled_from(FABRIC_LEVELS)
    app: dict[str, Any] = {"components": []}
    if draw(st.booleans()):
        for k in range(2):
            app["components"].append({
                "name": f"c{k}", "lifetime": "service", "gang": {"size": draw(st.integers(1, 3))},
                "coupling": draw(levels), "resources": {"cpu": draw(st.sampled_from([1, 2])), "memory": "1Gi"},
                "affinity": {"group": "p", "scope": draw(st.sampled_from(["site", "reachable", "fabric"]))},
            })
    else:
        group = {"name": "h0", "max": 4, "coupling": draw(levels), "resources": {"cpu": 2, "memory": "2Gi"}}
        docs.append(doc("VirtualCluster", "vc", {"hostGroups": [group]}, tenant="t0"))
        app["virtualCluster"] = "vc"
        app["components"].append({
            "name": "c0", "lifetime": "service", "gang": {"size": draw(st.integers(1, 3))},
            "coupling": draw(levels), "resources": {"cpu": 2, "memory": "1Gi"},
        })
    docs.append(doc("Application", "a0", app, tenant="t0"))
    return docs


def yaml_text(docs: list[dict]) -> str:
    return yaml.dump_all(docs, Dumper=_DUMPER, sort_keys=False, default_flow_style=None)


def rounds_until(run, shown, rounds: int = 4) -> None:
    """``run()`` (a round of new random worlds) until ``shown()`` (the worlds
    so far exercised what the test is about), at most ``rounds`` times."""
    for _ in range(rounds):
        run()
        if shown():
            return


def load(docs: list[dict]) -> World:
    """Write the world as two YAML files (fleet; everything else) and load them."""
    fleet_text, rest_text = yaml_text(docs[:1]), yaml_text(docs[1:])
    note(f"{fleet_text}---\n{rest_text}")
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp, "fleet.yaml")
        rest = Path(tmp, "work.yaml")
        fleet.write_text(fleet_text)
        rest.write_text(rest_text)
        return load_world([fleet, rest])


@dataclass
class Run:
    world: World
    out: dict
    facts: "Facts"


EXERCISED: Counter = Counter()  # what the generated worlds made happen, over every property's runs
REASON_FORMS: Counter = Counter()  # (code, detail) of the reasons unscheduled tasks were given


def run(docs: list[dict], seed: int) -> Run:
    note(f"seed: {seed}")
    world = load(docs)
    out = outcome_json(schedule(world, seed))
    for u in out["unscheduled"]:  # each reason's text is made from its code and figures alone
        for w in u["why"]:
            assert entry_text(w) == w["reason"], w
            REASON_FORMS[(w["code"], w.get("detail"))] += 1
    codes = {c for u in out["unscheduled"] for w in u["why"]
             for c in (w["code"], w.get("args", {}).get("cause", {}).get("code"))}  # growth names its cause
    EXERCISED["runs"] += 1
    EXERCISED["something placed"] += bool(out["placements"])
    EXERCISED["a quota held work back"] += "quota" in codes
    EXERCISED["an elastic gang placed below its size"] += "elastic" in codes
    EXERCISED["a binding constraint named"] += any(w.get("binding") for u in out["unscheduled"] for w in u["why"])
    grouped = {c.app for a in world.apps for c in a.components if c.affinity is not None}
    EXERCISED["an affinity group placed"] += any(p["task"].split("/")[0] in grouped for p in out["placements"])
    gangs = {f"{c.app}/{c.name}/" for a in world.apps for c in a.components if c.gang}
    EXERCISED["a gang placed"] += any(p["task"].startswith(tuple(gangs)) for p in out["placements"]) if gangs else 0
    return Run(world, out, Facts(world))


scheduled = st.builds(lambda docs, seed: (docs, seed), world_docs(), st.integers(0, 2**16))


# ====================================================================== plain facts


@dataclass(frozen=True)
class Device:
    kind: str
    model: str
    shareable: bool


@dataclass(frozen=True)
class Node:
    name: str
    site: int
    group: Any  # the NodeGroup
    devices: tuple[Device, ...]  # by index on the node

    def capacity(self) -> Counter:
        cap = Counter({"cpu_milli": self.group.cpu_milli, "mem_mib": self.group.mem_mib})
        for d in self.devices:
            cap[f"{d.kind}_milli"] += 1000
        return cap

    def domain(self, level: str, site_name: str) -> str | None:
        got = self.group.fabrics.get(level)
        if got is None and level == "ethernet":
            return site_name
        return got


class Facts:
    """The world's facts recomputed from its sites, groups and links."""

    def __init__(self, world: World) -> None:
        fleet = world.fleet
        self.world = world
        self.sites = fleet.sites
        self.site_by_name = {s.name: s.index for s in fleet.sites}
        self.nodes: dict[str, Node] = {}
        for g in fleet.groups:
            devices = tuple(Device(d.kind, d.model, d.shareable) for d in g.devices for _ in range(d.count))
            for site in range(g.site, g.site + g.site_count):  # a population's group is on each of its sites
                for k in range(g.count):
                    name = f"{fleet.sites[site].name}/{g.name}-{k}"
                    self.nodes[name] = Node(name, site, g, devices)
        self.rtt = self._rtt(fleet)
        self.components: dict[str, tuple[Any, Component]] = {}  # task -> (app, component)
        for app in world.apps:
            for comp in app.components:
                for i in range(comp.size):
                    self.components[comp.task_name(i)] = (app, comp)

    def _rtt(self, fleet) -> list[list[float]]:
        """Lowest-rtt paths by Dijkstra from every site; a site's own intra-site rtt to itself."""
        n = len(fleet.sites)
        adj: list[dict[int, float]] = [dict() for _ in range(n)]
        for ln in fleet.links:
            for a, b in ((ln.a, ln.b), (ln.b, ln.a)):
                adj[a][b] = min(adj[a].get(b, math.inf), ln.rtt_ms)
        out = [[math.inf] * n for _ in range(n)]
        for src in range(n):
            dist = {src: 0.0}
            heap = [(0.0, src)]
            done = set()
            while heap:
                d, u = heapq.heappop(heap)
                if u in done:
                    continue
                done.add(u)
                for v, w in adj[u].items():
                    if d + w < dist.get(v, math.inf):
                        dist[v] = d + w
                        heapq.heappush(heap, (d + w, v))
            for v, d in dist.items():
                out[src][v] = d
            out[src][src] = fleet.sites[src].intra_site_rtt_ms
        return out

    def reachable(self, a: int, b: int) -> bool:
        return math.isfinite(self.rtt[a][b])

    def site_of(self, node: str) -> int:
        return self.nodes[node].site

    def site_name(self, node: str) -> str:
        return self.sites[self.nodes[node].site].name

    def domain(self, node: str, level: str) -> str | None:
        return self.nodes[node].domain(level, self.site_name(node))

    def one_domain(self, nodes: list[str], level: str) -> bool:
        """All nodes inside one domain of a coupling level (wan: mutually reachable)."""
        if not nodes:
            return True
        if level == "wan":
            sites = [self.site_of(n) for n in nodes]
            return all(self.reachable(a, b) for a in sites for b in sites)
        names = {self.domain(n, level) for n in nodes}
        return len(names) == 1 and None not in names

    def where(self, nodes: list[str], level: str) -> str:
        """Each node with its domain of ``level`` (its site for wan), for messages."""
        if level == "wan":
            return ", ".join(f"{n} (site {self.site_name(n)})" for n in nodes)
        return ", ".join(f"{n} ({level} {self.domain(n, level) or 'none'})" for n in nodes)


def vec(resources: dict) -> Counter:
    return Counter({k: v for k, v in resources.items() if v})


def tightest(levels) -> str | None:
    given = [lv for lv in levels if lv is not None]
    return min(given, key=COUPLINGS.index) if given else None


def host_key(entry: dict) -> tuple[str, str]:
    return entry["vc"], entry["host"]


def hosts_by_key(out: dict) -> dict[tuple[str, str], dict]:
    return {host_key(h): h for h in out["hosts"]}


def placements_of(out: dict) -> dict[str, dict]:
    return {p["task"]: p for p in out["placements"]}


def host_group(world: World, vc: str, group: str | None):
    if group is None:
        return None
    return next(g for g in world.vcs[vc].host_groups if g.name == group)


# ====================================================================== checks


def check_nodes_within_capacity(r: Run) -> None:
    used: dict[str, Counter] = defaultdict(Counter)
    shares: dict[tuple[str, int], int] = Counter()
    for h in r.out["hosts"]:
        node = r.facts.nodes[h["node"]]
        used[h["node"]].update(vec(h["resources"]))
        for d in h["devices"]:
            assert 0 <= d["index"] < len(node.devices), f"host {host_key(h)}: no device {d['index']} on {h['node']}"
            assert node.devices[d["index"]].kind == d["kind"], f"host {host_key(h)}: device kind differs from the node's"
            assert 0 < d["milli"] <= 1000, f"host {host_key(h)}: share {d['milli']}"
            shares[h["node"], d["index"]] += d["milli"]
    for name, u in used.items():
        cap = r.facts.nodes[name].capacity()
        over = {k: (v, cap[k]) for k, v in u.items() if v > cap[k]}
        assert not over, f"node {name} reserved beyond capacity (reserved, capacity): {over}"
    over_dev = {k: v for k, v in shares.items() if v > 1000}
    assert not over_dev, f"devices shared beyond one whole device: {over_dev}"


def check_hosts_within_capacity(r: Run) -> None:
    hosts = hosts_by_key(r.out)
    used: dict[tuple[str, str], Counter] = defaultdict(Counter)
    shares: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for p in r.out["placements"]:
        key = host_key(p)
        assert key in hosts, f"{p['task']} is on an unknown host {key}"
        used[key].update(vec(p["resources"]))
        for d in p["devices"]:
            shares[key][d["index"]] += d["milli"]
    for key, u in used.items():
        cap = vec(hosts[key]["resources"])
        over = {k: (v, cap[k]) for k, v in u.items() if v > cap[k]}
        assert not over, f"host {key} holds more than it has (used, capacity): {over}"
        held = Counter({d["index"]: d["milli"] for d in hosts[key]["devices"]})
        over_dev = {i: (m, held[i]) for i, m in shares[key].items() if m > held[i]}
        assert not over_dev, f"host {key}: device shares beyond what the host holds (used, held): {over_dev}"


def check_placement_on_its_hosts_node(r: Run) -> None:
    hosts = hosts_by_key(r.out)
    for h in r.out["hosts"]:
        assert h["node"] in r.facts.nodes, f"host {host_key(h)} on unknown node {h['node']}"
        assert h["site"] == r.facts.site_name(h["node"]), f"host {host_key(h)}: site is not its node's"
    for p in r.out["placements"]:
        h = hosts[host_key(p)]
        assert p["node"] == h["node"], f"{p['task']} on {p['node']}, its host {p['host']} on {h['node']}"
        assert p["site"] == r.facts.site_name(p["node"]), f"{p['task']}: site is not its node's"
        app, _ = r.facts.components[p["task"]]
        assert (p["tenant"], p["vc"]) == (app.tenant, app.vc), f"{p['task']} placed for the wrong tenant or VC"


def check_tenant_quota(r: Run) -> None:
    used: dict[str, Counter] = defaultdict(Counter)
    for h in r.out["hosts"]:
        used[r.world.vcs[h["vc"]].tenant].update(vec(h["resources"]))
    for name, tenant in r.world.tenants.items():
        for key, limit in tenant.quota.items():
            col = {"cpu": "cpu_milli", "memory": "mem_mib"}.get(key, f"{key}_milli")
            assert used[name][col] <= limit, f"tenant {name} holds {used[name][col]} {col}, quota {limit}"


def check_allowed_sites(r: Run) -> None:
    for h in r.out["hosts"]:
        tenant = r.world.tenants[r.world.vcs[h["vc"]].tenant]
        assert any(fnmatchcase(h["site"], p) for p in tenant.allowed_sites), (
            f"host {host_key(h)} at {h['site']}, tenant {tenant.name} allows {tenant.allowed_sites}")
    for p in r.out["placements"]:
        tenant = r.world.tenants[p["tenant"]]
        assert any(fnmatchcase(p["site"], pat) for pat in tenant.allowed_sites), (
            f"{p['task']} at {p['site']}, tenant {tenant.name} allows {tenant.allowed_sites}")


def check_every_task_once(r: Run) -> None:
    placed = Counter(p["task"] for p in r.out["placements"])
    waiting = Counter(u["task"] for u in r.out["unscheduled"])
    twice = {t for t, n in (placed + waiting).items() if n > 1}
    assert not twice, f"tasks reported more than once: {sorted(twice)}"
    tasks = set(r.facts.components)
    missing = tasks - set(placed) - set(waiting)
    assert not missing, f"tasks neither placed nor unscheduled: {sorted(missing)}"
    unknown = (set(placed) | set(waiting)) - tasks
    assert not unknown, f"unknown tasks in the output: {sorted(unknown)}"
    m = r.out["metrics"]["tasks"]
    assert (m["total"], m["placed"], m["unscheduled"]) == (len(tasks), len(placed), len(waiting))


def check_unscheduled_reasons(r: Run) -> None:
    for u in r.out["unscheduled"]:
        assert u["reasons"], f"{u['task']} is unscheduled without a reason"
        zero = {k: v for k, v in u["reasons"].items() if not (isinstance(v, int) and v > 0)}
        assert not zero, f"{u['task']}: reasons without a positive count: {zero}"
    for u in r.out["unplaced_hosts"]:
        assert u["reasons"], f"hosts of {u['vc']}/{u['group']} unplaced without a reason"
        zero = {k: v for k, v in u["reasons"].items() if not (isinstance(v, int) and v > 0)}
        assert not zero, f"hosts of {u['vc']}/{u['group']}: reasons without a positive count: {zero}"


def check_gangs(r: Run) -> None:
    placed = placements_of(r.out)
    waiting = {u["task"] for u in r.out["unscheduled"]}
    for app in r.world.apps:
        for comp in app.components:
            if not comp.gang:
                continue
            tasks = [comp.task_name(i) for i in range(comp.size)]
            on = [t for t in tasks if t in placed]
            least = comp.min_size if comp.min_size is not None else comp.size
            assert not on or least <= len(on) <= comp.size, (
                f"gang {app.name}/{comp.name}: {len(on)} of {comp.size} placed (at least {least} or none)")
            left = [t for t in tasks if t not in placed and t not in waiting]
            assert not left, f"gang {app.name}/{comp.name}: members neither placed nor unscheduled: {left}"
            if comp.coupling is not None:
                nodes = [placed[t]["node"] for t in on]
                assert r.facts.one_domain(nodes, comp.coupling), (
                    f"gang {app.name}/{comp.name} (coupling {comp.coupling}) is not inside one "
                    f"{comp.coupling} domain: {r.facts.where(nodes, comp.coupling)}")


def check_affinity(r: Run) -> None:
    placed = placements_of(r.out)
    for app in r.world.apps:
        groups: dict[str, list[Component]] = defaultdict(list)
        for comp in app.components:
            if comp.affinity is not None:
                groups[comp.affinity[0]].append(comp)
        for group, comps in groups.items():
            tasks = [c.task_name(i) for c in comps for i in range(c.size)]
            on = [t for t in tasks if t in placed]
            assert len(on) in (0, len(tasks)), f"affinity {app.name}/{group}: {len(on)} of {len(tasks)} placed"
            nodes = [placed[t]["node"] for t in on]
            for scope in {c.affinity[1] for c in comps}:  # every scope a member declares
                if scope == "node":
                    ok = len(set(nodes)) <= 1
                elif scope == "site":
                    ok = len({r.facts.site_of(n) for n in nodes}) <= 1
                elif scope == "reachable":
                    ok = r.facts.one_domain(nodes, "wan")
                else:  # fabric: one domain of the group's coupling, ethernet by default
                    ok = r.facts.one_domain(nodes, tightest(c.coupling for c in comps) or "ethernet")
                assert ok, f"affinity {app.name}/{group} ({scope}) spread over {nodes}"


def check_anti_affinity(r: Run) -> None:
    placed = placements_of(r.out)
    for app in r.world.apps:
        members: dict[str, list[tuple[str, str]]] = defaultdict(list)  # group -> (task, scope)
        for comp in app.components:
            if comp.anti_affinity is not None:
                for i in range(comp.size):
                    t = comp.task_name(i)
                    if t in placed:
                        members[comp.anti_affinity[0]].append((t, comp.anti_affinity[1]))
        for group, tasks in members.items():
            for i, (a, scope) in enumerate(tasks):
                for b, _ in tasks[i + 1:]:
                    if scope == "node":
                        same = placed[a]["node"] == placed[b]["node"]
                    else:
                        same = placed[a]["site"] == placed[b]["site"]
                    assert not same, f"anti-affinity {app.name}/{group} ({scope}): {a} and {b} together"


def check_near(r: Run) -> None:
    for p in r.out["placements"]:
        _, comp = r.facts.components[p["task"]]
        if comp.near is not None and comp.near.max_rtt_ms is not None:
            rtt = r.facts.rtt[r.facts.site_of(p["node"])][r.facts.site_by_name[comp.near.site]]
            assert rtt <= comp.near.max_rtt_ms, (
                f"{p['task']} at {p['site']}: {rtt} ms from {comp.near.site}, bound {comp.near.max_rtt_ms}")
    for h in r.out["hosts"]:
        g = host_group(r.world, h["vc"], h["group"])
        if g is not None and g.near is not None and g.near.max_rtt_ms is not None:
            rtt = r.facts.rtt[r.facts.site_of(h["node"])][r.facts.site_by_name[g.near.site]]
            assert rtt <= g.near.max_rtt_ms, (
                f"host {host_key(h)} at {h['site']}: {rtt} ms from {g.near.site}, bound {g.near.max_rtt_ms}")


def check_data_reachable(r: Run) -> None:
    for p in r.out["placements"]:
        _, comp = r.facts.components[p["task"]]
        for s in (comp.data_source, comp.data_sink):
            if s is not None:
                assert r.facts.reachable(r.facts.site_of(p["node"]), r.facts.site_by_name[s]), (
                    f"{p['task']} at {p['site']} cannot reach its data at {s}")


def check_arch_and_models(r: Run) -> None:
    for p in r.out["placements"]:
        _, comp = r.facts.components[p["task"]]
        node = r.facts.nodes[p["node"]]
        if comp.arch is not None:
            assert node.group.arch in comp.arch, f"{p['task']} on {node.group.arch}, allowed {comp.arch}"
        models = {a.kind: a.models for a in comp.resources.accelerators}
        for d in p["devices"]:
            allowed = models.get(d["kind"])
            model = node.devices[d["index"]].model
            assert allowed is None or model in allowed, f"{p['task']}: {d['kind']} {model}, allowed {allowed}"
    for h in r.out["hosts"]:
        g = host_group(r.world, h["vc"], h["group"])
        if g is None:
            continue
        node = r.facts.nodes[h["node"]]
        if g.arch is not None:
            assert node.group.arch in g.arch, f"host {host_key(h)} on {node.group.arch}, allowed {g.arch}"
        models = {a.kind: a.models for a in g.resources.accelerators}
        for d in h["devices"]:
            allowed = models.get(d["kind"])
            model = node.devices[d["index"]].model
            assert allowed is None or model in allowed, f"host {host_key(h)}: {d['kind']} {model}, allowed {allowed}"


def device_shape_problem(resources, entry: dict, node: Node) -> str | None:
    """Why a placement's (or host's) devices do not match its request, or None."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for d in entry["devices"]:
        by_kind[d["kind"]].append(d)
        if d["milli"] < 1000 and not node.devices[d["index"]].shareable:
            return f"a {d['milli']} share of unshareable {d['kind']} {d['index']}"
    asked = {a.kind: a.milli for a in resources.accelerators}
    if set(by_kind) - set(asked):
        return f"devices of kinds never requested: {sorted(set(by_kind) - set(asked))}"
    for kind, milli in asked.items():
        got = by_kind.get(kind, [])
        if milli < 1000:
            if [d["milli"] for d in got] != [milli]:
                return f"{kind} {milli} should be one device with that share, got {got}"
        else:
            idx = [d["index"] for d in got]
            if len(set(idx)) != milli // 1000 or any(d["milli"] != 1000 for d in got):
                return f"{kind} {milli} should be {milli // 1000} distinct whole devices, got {got}"
        if entry["resources"].get(f"{kind}_milli", 0) != milli:
            return f"resources say {entry['resources'].get(f'{kind}_milli', 0)} {kind}_milli, asked {milli}"
    return None


def check_device_shares(r: Run) -> None:
    for p in r.out["placements"]:
        _, comp = r.facts.components[p["task"]]
        res = comp.resources
        assert (p["resources"]["cpu_milli"], p["resources"]["mem_mib"]) == (res.cpu_milli, res.mem_mib), (
            f"{p['task']}: resources {p['resources']} differ from the request")
        problem = device_shape_problem(res, p, r.facts.nodes[p["node"]])
        assert problem is None, f"{p['task']}: {problem}"
    for h in r.out["hosts"]:
        g = host_group(r.world, h["vc"], h["group"])
        node = r.facts.nodes[h["node"]]
        if g is None:
            continue
        if g.resources.whole:
            assert vec(h["resources"]) == node.capacity(), f"whole host {host_key(h)} does not hold its whole node"
            assert sorted(d["index"] for d in h["devices"]) == list(range(len(node.devices)))
            continue
        assert (h["resources"]["cpu_milli"], h["resources"]["mem_mib"]) == (
            g.resources.cpu_milli, g.resources.mem_mib), f"host {host_key(h)}: resources differ from its group"
        problem = device_shape_problem(g.resources, h, node)
        assert problem is None, f"host {host_key(h)}: {problem}"


def check_host_groups(r: Run) -> None:
    counts = Counter((h["vc"], h["group"]) for h in r.out["hosts"])
    unplaced = {(u["vc"], u["group"]) for u in r.out["unplaced_hosts"]}
    for vc in r.world.vcs.values():
        sites = {r.facts.site_of(h["node"]) for h in r.out["hosts"] if h["vc"] == vc.name}
        assert all(r.facts.reachable(a, b) for a in sites for b in sites), (
            f"VC {vc.name} has hosts at mutually unreachable sites")
        for g in vc.host_groups:
            n = counts[vc.name, g.name]
            assert n <= g.limit, f"host group {vc.name}/{g.name}: {n} hosts, limit {g.limit}"
            if not g.elastic:
                assert n == g.count or (n == 0 and (vc.name, g.name) in unplaced), (
                    f"fixed host group {vc.name}/{g.name}: {n} of {g.count} hosts, none reported unplaced")
            elif n < g.min:
                assert (vc.name, g.name) in unplaced, f"host group {vc.name}/{g.name}: {n} hosts below min {g.min}"
    for h in r.out["hosts"]:
        g = host_group(r.world, h["vc"], h["group"])
        if g is None:
            continue
        node = r.facts.nodes[h["node"]]
        site = r.facts.sites[node.site]
        sel = g.selector
        where = f"host {host_key(h)} on {h['node']}"
        assert not sel.tiers or site.tier in sel.tiers, f"{where}: tier {site.tier} not in {sel.tiers}"
        assert not sel.names or any(fnmatchcase(site.name, p) for p in sel.names), f"{where}: not in {sel.names}"
        assert not sel.regions or site.region in sel.regions, f"{where}: region {site.region} not in {sel.regions}"
        assert all(node.group.labels.get(k) == v for k, v in sel.labels.items()), f"{where}: labels {sel.labels}"
    check_coupled_host_groups(r)


def check_coupled_host_groups(r: Run) -> None:
    for vc in r.world.vcs.values():
        for g in vc.host_groups:
            if g.coupling is not None:
                nodes = [h["node"] for h in r.out["hosts"] if h["vc"] == vc.name and h["group"] == g.name]
                assert r.facts.one_domain(nodes, g.coupling), (
                    f"host group {vc.name}/{g.name} (coupling {g.coupling}) is not inside one "
                    f"{g.coupling} domain: {r.facts.where(nodes, g.coupling)}")


def check_private_sites(r: Run) -> None:
    """A private population's site holds only tasks bound near it (and their hosts)."""
    table = r.world.fleet.site_table
    private = {table.names.name(int(i)) for i in np.flatnonzero(table.private)}
    for p in r.out["placements"]:
        if p["site"] in private:
            comp = r.facts.components[p["task"]][1]
            assert comp.near is not None and comp.near.site == p["site"], (
                f"{p['task']} on {p['site']}, a private site, bound near {comp.near}")


# ====================================================================== properties


@SETTINGS
@given(scheduled)
def test_private_sites_hold_only_their_own_work(case):
    check_private_sites(run(*case))


@SETTINGS
@given(scheduled)
def test_no_node_over_capacity(case):
    check_nodes_within_capacity(run(*case))


@SETTINGS
@given(scheduled)
def test_no_host_over_capacity(case):
    check_hosts_within_capacity(run(*case))


@SETTINGS
@given(scheduled)
def test_placements_are_on_their_hosts_node(case):
    check_placement_on_its_hosts_node(run(*case))


@SETTINGS
@given(scheduled)
def test_no_tenant_over_quota(case):
    check_tenant_quota(run(*case))


@SETTINGS
@given(scheduled)
def test_allowed_sites_respected(case):
    check_allowed_sites(run(*case))


@SETTINGS
@given(scheduled)
def test_every_task_placed_or_unscheduled_exactly_once(case):
    check_every_task_once(run(*case))


@SETTINGS
@given(scheduled)
def test_gangs_whole_or_absent_inside_one_coupling_domain(case):
    check_gangs(run(*case))


@SETTINGS
@given(scheduled)
def test_affinity_groups_whole_or_absent_inside_their_scope(case):
    check_affinity(run(*case))


@SETTINGS
@given(scheduled)
def test_anti_affinity_respected(case):
    check_anti_affinity(run(*case))


@SETTINGS
@given(scheduled)
def test_near_bound_respected(case):
    check_near(run(*case))


@SETTINGS
@given(scheduled)
def test_data_sites_reachable(case):
    check_data_reachable(run(*case))


@SETTINGS
@given(scheduled)
def test_arch_and_device_models_respected(case):
    check_arch_and_models(run(*case))


@SETTINGS
@given(scheduled)
def test_fractional_on_one_device_whole_on_distinct_devices(case):
    check_device_shares(run(*case))


@SETTINGS
@given(scheduled)
def test_host_groups_follow_their_selectors_sizes_and_coupling(case):
    check_host_groups(run(*case))


@SETTINGS
@given(scheduled)
def test_same_input_and_seed_give_identical_json(case):
    docs, seed = case
    note(f"seed: {seed}")
    first = json.dumps(outcome_json(schedule(load(docs), seed)))
    second = json.dumps(outcome_json(schedule(load(docs), seed)))
    assert first == second


# ---------------------------------------------------------------------- edge cases
#
# Properties over worlds the general strategy avoids (reasons without candidates,
# groups whose members declare different scopes, fabric domains that cross),
# each with an explicit smallest example. Those marked xfail do not hold today
# (see each reason); they search without shrinking, as the explicit example is
# already minimal.

WITHOUT_SHRINKING = settings(SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate])


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


TWO_NODE_FLEET = """
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
  - name: s0
    tier: cloud
    nodeGroups:
    - {name: g0, count: 2, arch: x86_64, cpu: 4, memory: 4Gi}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t0}
---
"""

GANG_COUPLED_WHERE_NO_NODE_HAS_THAT_FABRIC = TWO_NODE_FLEET + """
apiVersion: suanli/v1
kind: Application
metadata: {name: a0, tenant: t0}
spec:
  components:
  - name: c0
    lifetime: service
    gang: {size: 2}
    coupling: roce
    resources: {cpu: 1, memory: 1Gi}
"""

ANTI_AFFINITY_SITE_THEN_NODE = TWO_NODE_FLEET + """
apiVersion: suanli/v1
kind: Application
metadata: {name: a0, tenant: t0}
spec:
  components:
  - name: c0
    lifetime: service
    resources: {cpu: 1, memory: 1Gi}
    antiAffinity: {group: x, scope: site}
  - name: c1
    lifetime: service
    resources: {cpu: 1, memory: 1Gi}
    antiAffinity: {group: x, scope: node}
"""

AFFINITY_SITE_THEN_NODE = TWO_NODE_FLEET + """
apiVersion: suanli/v1
kind: Application
metadata: {name: a0, tenant: t0}
spec:
  components:
  - name: c0
    lifetime: service
    resources: {cpu: 2, memory: 1Gi}
    affinity: {group: p, scope: site}
  - name: c1
    lifetime: service
    replicas: 2
    resources: {cpu: 2, memory: 1Gi}
    affinity: {group: p, scope: node}
"""

CROSSING_FLEET = """
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
  - name: s0
    tier: cloud
    nodeGroups:
    - {name: g0, count: 1, arch: x86_64, cpu: 2, memory: 4Gi, fabrics: {coherent: nvl-1, ib: ib-1}}
    - {name: g1, count: 1, arch: x86_64, cpu: 2, memory: 4Gi, fabrics: {coherent: nvl-1, ib: ib-2}}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t0}
---
"""

IB_GANG_IN_AFFINITY_WITH_COHERENT_GANG = CROSSING_FLEET + """
apiVersion: suanli/v1
kind: Application
metadata: {name: a0, tenant: t0}
spec:
  components:
  - name: c0
    lifetime: service
    gang: {size: 2}
    coupling: ib
    resources: {cpu: 1.5, memory: 1Gi}
    affinity: {group: p, scope: site}
  - name: c1
    lifetime: service
    gang: {size: 1}
    coupling: coherent
    resources: {cpu: 0.5, memory: 1Gi}
    affinity: {group: p, scope: site}
"""

IB_HOST_GROUP_GROWN_FOR_COHERENT_GANG = CROSSING_FLEET + """
apiVersion: suanli/v1
kind: VirtualCluster
metadata: {name: vc, tenant: t0}
spec:
  hostGroups:
  - {name: h0, max: 2, coupling: ib, resources: {cpu: 2, memory: 2Gi}}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: a0, tenant: t0}
spec:
  virtualCluster: vc
  components:
  - name: c0
    lifetime: service
    gang: {size: 2}
    coupling: coherent
    resources: {cpu: 2, memory: 1Gi}
"""


@WITHOUT_SHRINKING
@given(scheduled)
@example(case=(docs_of(GANG_COUPLED_WHERE_NO_NODE_HAS_THAT_FABRIC), 0))
def test_unscheduled_tasks_say_why(case):
    """Every unscheduled task (and unplaced host group) has a reason, each with a
    positive count of candidates."""
    check_unscheduled_reasons(run(*case))


def mixed_scopes(docs: list[dict], field: str) -> bool:
    """Does some application have a group whose members declare different scopes?"""
    for d in docs:
        if d["kind"] == "Application":
            scopes: dict[str, set] = defaultdict(set)
            for c in d["spec"]["components"]:
                if field in c:
                    scopes[c[field]["group"]].add(c[field]["scope"])
            if any(len(v) > 1 for v in scopes.values()):
                return True
    return False


def run_unless_rejected(docs: list[dict], seed: int, field: str) -> Run | None:
    """The run, or None when the loader rejects the world at a ``field`` scope
    (which it may do only when members of one group declare different scopes)."""
    try:
        return run(docs, seed)
    except SpecError as exc:
        assert mixed_scopes(docs, field), f"a valid world was rejected: {exc}"
        assert all(f"{field}.scope" in p.path for p in exc.problems), f"rejected for another reason: {exc}"
        return None


@WITHOUT_SHRINKING
@given(st.builds(lambda docs, seed: (docs, seed), world_docs(mixed_scopes="antiAffinity"), st.integers(0, 2**16)))
@example(case=(docs_of(ANTI_AFFINITY_SITE_THEN_NODE), 0))
def test_anti_affinity_groups_with_mixed_scopes(case):
    """Members of one anti-affinity group may declare different scopes (node, site):
    the world is either rejected at the scope field, or each member's own scope
    holds against every other member of the group."""
    r = run_unless_rejected(*case, "antiAffinity")
    if r is not None:
        check_anti_affinity(r)


@SETTINGS
@given(st.builds(lambda docs, seed: (docs, seed), world_docs(mixed_scopes="affinity"), st.integers(0, 2**16)))
@example(case=(docs_of(AFFINITY_SITE_THEN_NODE), 0))
def test_affinity_groups_with_mixed_scopes(case):
    """Members of one affinity group may declare different scopes: the world is
    either rejected at the scope field, or every declared scope holds for the
    whole group."""
    r = run_unless_rejected(*case, "affinity")
    if r is not None:
        check_affinity(r)


@WITHOUT_SHRINKING
@given(st.builds(lambda docs, seed: (docs, seed), coupled_work_on_crossing_fabrics(), st.integers(0, 2**16)))
@example(case=(docs_of(IB_GANG_IN_AFFINITY_WITH_COHERENT_GANG), 0))
@example(case=(docs_of(IB_HOST_GROUP_GROWN_FOR_COHERENT_GANG), 0))
def test_couplings_hold_when_fabric_domains_cross(case):
    """Fabric domains of different levels need not nest (names are global): every
    gang and every coupled host group still sits inside one domain of its own level."""
    r = run_unless_rejected(*case, "affinity")
    if r is None:
        return
    check_gangs(r)
    check_coupled_host_groups(r)


def test_the_generated_worlds_exercise_what_the_properties_are_about():
    """Runs after the properties above: a meaningful share of their worlds
    place work, hold work back at a quota, shrink an elastic gang, place
    gangs and affinity groups, and name a binding constraint."""
    n = EXERCISED["runs"]
    assert n >= 100, EXERCISED
    assert EXERCISED["something placed"] >= 0.5 * n, EXERCISED
    for what in ("a quota held work back", "a gang placed", "an affinity group placed", "a binding constraint named"):
        assert EXERCISED[what] >= 0.05 * n, (what, EXERCISED)
    assert EXERCISED["an elastic gang placed below its size"] >= 0.005 * n, EXERCISED
    assert len(REASON_FORMS) >= 12, REASON_FORMS  # the texts checked against their figures are of many forms
