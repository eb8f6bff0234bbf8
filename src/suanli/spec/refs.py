"""Cross-document checks: unique names and references that must resolve.

A dangling reference (a tenant, virtual cluster, application, site, node or
link that no document defines) is a problem at the field that holds it.
"""

from __future__ import annotations

import os
from typing import Iterator, Mapping

from suanli.model import quantities as q
from suanli.model.globs import glob_match
from suanli.spec.loader import Documents, Loaded, problem_at
from suanli.spec.problems import Problem


def check_references(docs: Documents) -> list[Problem]:
    problems: list[Problem] = []
    problems += _unique(docs.fleets, "fleet")
    problems += _unique(docs.tenants, "tenant")
    problems += _unique(docs.virtual_clusters, "virtual cluster")
    problems += _unique(docs.applications, "application")
    problems += _unique(docs.scenarios, "scenario")

    sites: dict[str, str] = {}  # name -> tier
    where: dict[str, str] = {}  # name -> "FILE (document N, spec.sites[I])", for messages
    nodes = _NodeNames()
    kinds: set[str] = set()
    problems += _fleet_size(docs)
    for fl in docs.fleets:
        for i, site in enumerate(fl.doc.spec.sites):
            if site.name in sites:
                problems.append(problem_at(fl.src, ("spec", "sites", i, "name"), f"site {site.name!r} is already defined in {where[site.name]}; site names must be unique"))
            else:
                sites[site.name] = site.tier
                where[site.name] = f"{fl.src.file} (document {fl.src.index}, spec.sites[{i}])"
            for g in site.node_groups:
                nodes.add_group(site.name, g.name, g.count)
                kinds.update(d.kind for d in g.accelerators)
    links: set[frozenset[str]] = set()
    for fl in docs.fleets:
        for i, link in enumerate(fl.doc.spec.links):
            for j, end in enumerate(link.between):
                if end not in sites:
                    problems.append(_missing(fl, ("spec", "links", i, "between", j), "site", end, sites))
            pair = frozenset(link.between)
            if pair in links:
                problems.append(problem_at(fl.src, ("spec", "links", i, "between"), f"a link between {sorted(pair)} is defined twice"))
            links.add(pair)

    tenants = {t.name: t.doc.spec.max_priority for t in docs.tenants}
    for t in docs.tenants:
        for key in (t.doc.spec.quota or {}):
            if key not in ("cpu", "memory") and key not in kinds and docs.fleets:
                known = ", ".join(["cpu", "memory", *sorted(kinds)])
                problems.append(problem_at(t.src, ("spec", "quota", key), f"no accelerator of kind {key!r} in the fleet; quota keys are {known}"))
        for i, pattern in enumerate(t.doc.spec.allowed_sites):
            if docs.fleets and not any(_glob(pattern, s) for s in sites):
                problems.append(problem_at(t.src, ("spec", "allowedSites", i), f"pattern {pattern!r} matches no site; sites are {_few(sites)}"))

    vcs: dict[str, str] = {}
    for vc in docs.virtual_clusters:
        tenant = vc.doc.metadata.tenant
        vcs[vc.name] = tenant
        if tenant not in tenants:
            problems.append(_missing(vc, ("metadata", "tenant"), "tenant", tenant, tenants))
        for i, g in enumerate(vc.doc.spec.host_groups):
            if g.near is not None and g.near.site not in sites:
                problems.append(_missing(vc, ("spec", "hostGroups", i, "near", "site"), "site", g.near.site, sites))
            for j, pattern in enumerate(g.sites.names or []):
                if not any(_glob(pattern, s) for s in sites):
                    problems.append(problem_at(vc.src, ("spec", "hostGroups", i, "sites", "names", j), f"pattern {pattern!r} matches no site; sites are {_few(sites)}"))

    apps = {a.name for a in docs.applications}
    for app in docs.applications:
        problems += _check_app(app, app.doc.metadata.tenant, app.doc.spec, ("spec",), tenants, vcs, sites)

    for sc in docs.scenarios:
        problems += _check_scenario(sc, tenants, vcs, sites, nodes, links, apps)
    return problems


def check_application(app: Loaded, world) -> list[Problem]:
    """An Application document's references (tenant, virtual cluster, sites)
    and its priorities (within its tenant's ``maxPriority``), checked against
    a world already built (a live control plane's). Only the tenant's own
    virtual clusters are known to it: another tenant's is as missing as one
    that does not exist, and no message names it."""
    tenant = app.doc.metadata.tenant
    vcs = {name: vc.tenant for name, vc in world.vcs.items() if not vc.default and vc.tenant == tenant}
    sites = {s.name: s.tier for s in world.fleet.sites}
    tenants = {name: t.max_priority for name, t in world.tenants.items()}
    return _check_app(app, tenant, app.doc.spec, ("spec",), tenants, vcs, sites)


def _check_app(src: Loaded, tenant: str, spec, base: tuple, tenants: Mapping[str, int | None], vcs,
               sites) -> list[Problem]:
    """``tenants``: each tenant's maxPriority (None: no ceiling of its own)."""
    out: list[Problem] = []
    if tenant not in tenants:
        where = ("metadata", "tenant") if base == ("spec",) else base[:-1] + ("tenant",)
        out.append(_missing(src, where, "tenant", tenant, tenants))
    else:
        out += _priorities_within(src, tenant, tenants[tenant], spec, base)
    vc = spec.virtual_cluster
    if vc is not None:
        if vc not in vcs:
            out.append(_missing(src, base + ("virtualCluster",), "virtual cluster", vc, vcs))
        elif vcs[vc] != tenant:
            out.append(problem_at(src.src, base + ("virtualCluster",), f"virtual cluster {vc!r} belongs to tenant {vcs[vc]!r}, not {tenant!r}"))
    for i, comp in enumerate(spec.components):
        here = base + ("components", i)
        if comp.near is not None and comp.near.site not in sites:
            out.append(_missing(src, here + ("near", "site"), "site", comp.near.site, sites))
        if comp.data is not None:
            for key in ("source", "sink"):
                name = getattr(comp.data, key)
                if name is not None and name not in sites:
                    out.append(_missing(src, here + ("data", key), "site", name, sites))
    return out


def _priorities_within(src: Loaded, tenant: str, ceiling: int | None, spec, base: tuple) -> list[Problem]:
    """Priorities above the tenant's maxPriority (its admin's ceiling), where written."""
    if ceiling is None:
        return []
    out = []
    if spec.priority > ceiling:
        out.append(problem_at(src.src, base + ("priority",),
                              f"priority {spec.priority} is above tenant {tenant}'s maxPriority {ceiling}"))
    for i, comp in enumerate(spec.components):
        if comp.priority is not None and comp.priority > ceiling:
            out.append(problem_at(src.src, base + ("components", i, "priority"),
                                  f"priority {comp.priority} is above tenant {tenant}'s maxPriority {ceiling}"))
    return out


def _fleet_size(docs: Documents) -> list[Problem]:
    """At most ``FLEET_NODES`` nodes over all Fleet documents: named at the node
    group that goes past it."""
    total = 0
    for fl in docs.fleets:
        for i, site in enumerate(fl.doc.spec.sites):
            for j, g in enumerate(site.node_groups):
                total += g.count
                if total > q.FLEET_NODES:
                    return [problem_at(fl.src, ("spec", "sites", i, "nodeGroups", j, "count"),
                                       f"the fleet reaches {total} nodes here; "
                                       f"at most {q.FLEET_NODES} nodes in all Fleet documents")]
    return []


def _check_scenario(sc: Loaded, tenants, vcs, sites, nodes, links, apps) -> list[Problem]:
    out: list[Problem] = []
    spec = sc.doc.spec
    arrived: set[str] = set()
    for i, arr in enumerate(spec.arrivals):
        if arr.app not in apps:
            out.append(_missing(sc, ("spec", "arrivals", i, "app"), "application", arr.app, apps))
        elif arr.app in arrived:
            out.append(problem_at(sc.src, ("spec", "arrivals", i, "app"), f"application {arr.app!r} arrives twice"))
        arrived.add(arr.app)
    for i, gen in enumerate(spec.generators):
        here = ("spec", "generators", i)
        out += _check_app(sc, gen.tenant, gen.template, here + ("template",), tenants, vcs, sites)
    base = os.path.dirname(sc.src.file)
    for i, tr in enumerate(spec.traces):
        here = ("spec", "traces", i)
        if tr.tenant not in tenants:
            out.append(_missing(sc, here + ("tenant",), "tenant", tr.tenant, tenants))
        if tr.format == "swf" and tr.site not in sites:  # an openb site may be new: its nodes come from the trace
            out.append(_missing(sc, here + ("site",), "site", tr.site, sites))
        for key in ("nodes", "pods", "path"):
            path = getattr(tr, key)
            if path is not None and not os.path.exists(os.path.join(base, path)):
                out.append(problem_at(sc.src, here + (key,), f"file {path!r} does not exist (paths are relative to the scenario file)"))
    for i, ev in enumerate(spec.events):
        here = ("spec", "events", i)
        if ev.kind == "delete" and ev.app not in apps:
            out.append(_missing(sc, here + ("app",), "application", ev.app, apps))
        elif ev.kind in ("nodeDown", "nodeUp", "nodeDrain", "nodeCordon") and ev.node not in nodes:
            out.append(problem_at(sc.src, here + ("node",), f"no node {ev.node!r}; nodes are named SITE/GROUP-INDEX, e.g. {nodes.examples()}"))
        elif ev.kind in ("linkDown", "linkUp"):
            for j, end in enumerate(ev.between):
                if end not in sites:
                    out.append(_missing(sc, here + ("between", j), "site", end, sites))
            if all(e in sites for e in ev.between) and frozenset(ev.between) not in links:
                out.append(problem_at(sc.src, here + ("between",), f"no link between {ev.between[0]!r} and {ev.between[1]!r}"))
        elif ev.kind == "deviceBusy":
            if ev.site is not None and ev.site not in sites:
                out.append(_missing(sc, here + ("site",), "site", ev.site, sites))
            if ev.node is not None and ev.node not in nodes:
                out.append(problem_at(sc.src, here + ("node",), f"no node {ev.node!r}; nodes are named SITE/GROUP-INDEX, e.g. {nodes.examples()}"))
    return out


class _NodeNames:
    """Node names SITE/GROUP-INDEX, checked by parsing rather than listing every node."""

    def __init__(self) -> None:
        self._count: dict[tuple[str, str], int] = {}

    def add_group(self, site: str, group: str, count: int) -> None:
        self._count[(site, group)] = max(count, self._count.get((site, group), 0))

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or "/" not in name:
            return False
        site, _, rest = name.partition("/")
        group, dash, index = rest.rpartition("-")
        if not dash or not index.isdigit() or (index != "0" and index.startswith("0")):
            return False
        return int(index) < self._count.get((site, group), 0)

    def examples(self, n: int = 2) -> str:
        names = [f"{s}/{g}-{k}" for (s, g), c in self._count.items() for k in range(min(c, n))]
        return ", ".join(names[:n]) if names else "none (the fleet has no nodes)"


def _unique(items: list[Loaded], what: str) -> Iterator[Problem]:
    seen: dict[str, Loaded] = {}
    for it in items:
        if it.name in seen:
            first = seen[it.name].src
            yield problem_at(it.src, ("metadata", "name"), f"{what} {it.name!r} is already defined in {first.file} (document {first.index})")
        else:
            seen[it.name] = it


def _missing(src: Loaded, loc: tuple, what: str, name: str, known) -> Problem:
    return problem_at(src.src, loc, f"no {what} named {name!r}; known: {_few(known)}")


def _few(names, n: int = 8) -> str:
    names = sorted(names)
    if not names:
        return "none"
    head = ", ".join(names[:n])
    return head + (f" (+{len(names) - n} more)" if len(names) > n else "")


_glob = glob_match
