"""Cross-document checks: unique names and references that must resolve.

A dangling reference (a tenant, virtual cluster, application, site, node or
link that no document defines) is a problem at the field that holds it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from types import SimpleNamespace
from typing import Iterator, Mapping

from suanli.model import quantities as q
from suanli.model.globs import glob_match, glob_regex
from suanli.model.sites import NamePattern, SiteNames, attach_weight, selects
from suanli.spec.loader import Documents, Loaded, problem_at
from suanli.spec.schema import EACH_SITE
from suanli.spec.problems import Problem


def check_references(docs: Documents) -> list[Problem]:
    problems: list[Problem] = []
    problems += _unique(docs.fleets, "fleet")
    problems += _unique(docs.tenants, "tenant")
    problems += _unique(docs.virtual_clusters, "virtual cluster")
    problems += _unique(docs.applications, "application")
    problems += _unique(docs.scenarios, "scenario")

    sites = KnownSites()
    where: dict[str, str] = {}  # name -> "FILE (document N, spec.sites[I])", for messages
    nodes = _NodeNames()
    kinds: set[str] = set()
    problems += _fleet_size(docs)
    traced = any(tr.format == "openb" and tr.nodes for sc in docs.scenarios for tr in sc.doc.spec.traces)
    # what a selector's tier, region and labels are met by: each node group, with its site's labels
    # and its own (its own win, as the placement reads them), and each site alone
    facts = [(o.tier, o.region, labels) for fl in docs.fleets for o in (*fl.doc.spec.sites, *fl.doc.spec.populations)
             for labels in (o.labels, *({**o.labels, **g.labels} for g in o.node_groups if g.labels))]
    # each distinct one once: every selector of every document is checked against them
    facts = list({(t, r, tuple(sorted(labels.items()))): (t, r, labels) for t, r, labels in facts}.values())
    groups = [g for fl in docs.fleets for owner in (*fl.doc.spec.sites, *fl.doc.spec.populations)
              for g in owner.node_groups]
    hw = Hardware(((g.arch, ((d.kind, d.model) for d in g.accelerators)) for g in groups),
                  known=bool(docs.fleets) and not traced, facts=facts,
                  shapes=list(dict.fromkeys((g.arch, g.cpu, g.memory,
                                             tuple((d.kind, d.model, d.count) for d in g.accelerators))
                                            for g in groups if g.count > 0)))
    for fl in docs.fleets:  # each fabric domain's node groups (a site's own ethernet by default)
        for site in fl.doc.spec.sites:
            for g in site.node_groups:
                if g.count > 0:
                    hw.in_domains(g, {"ethernet": site.name})
        for pop in fl.doc.spec.populations:  # (devices' fabrics are not counted: not checked where they are)
            hw.unchecked.update(level for g in pop.node_groups for level in ("coherent", "ib", "roce", "ethernet")
                                if level == "ethernet" or getattr(g.fabrics, level))
    for fl in docs.fleets:
        for i, site in enumerate(fl.doc.spec.sites):
            if site.name in sites:
                problems.append(problem_at(fl.src, ("spec", "sites", i, "name"), f"site {site.name!r} is already defined in {where[site.name]}; site names must be unique"))
            else:
                sites.add(site.name, site.tier, site.region, dict(site.labels))
                where[site.name] = f"{fl.src.file} (document {fl.src.index}, spec.sites[{i}])"
            for g in site.node_groups:
                nodes.add_group(site.name, g.name, g.count)
                kinds.update(d.kind for d in g.accelerators)
    for fl in docs.fleets:
        for i, pop in enumerate(fl.doc.spec.populations):
            here = ("spec", "populations", i)
            pattern = NamePattern.parse(pop.sites)
            clash = sites.clash(pattern, pop.count)
            if clash is not None:
                problems.append(problem_at(fl.src, here + ("sites",), f"{pop.sites!r} names site {clash!r}, which is already defined{' in ' + where[clash] if clash in where else ''}; site names must be unique"))
                continue
            problems += _check_attach(fl, here, pop, sites)
            sites.add_population(pop.name, pattern, pop.count)
            for g in pop.node_groups:
                nodes.add_population(pattern, pop.count, g.name, g.count)
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
        spec = t.doc.spec
        for field, limits in (("quota", spec.quota), ("borrowingLimit", spec.borrowing_limit),
                              ("lendingLimit", spec.lending_limit)):
            for key in (limits or {}):
                if key not in ("cpu", "memory") and key not in kinds and docs.fleets:
                    known = ", ".join(["cpu", "memory", *sorted(kinds)])
                    problems.append(_about('Fleet', problem_at(t.src, ("spec", field, key), f"no accelerator of kind {key!r} in the fleet; {field} keys are {known}")))
        for i, pattern in enumerate(t.doc.spec.allowed_sites):
            if docs.fleets and not sites.any_match(pattern):
                problems.append(_no_site_matches(t, ("spec", "allowedSites", i), pattern, sites))

    members: dict[str, list] = {}
    for t in docs.tenants:
        if t.doc.spec.cohort is not None:
            members.setdefault(t.doc.spec.cohort, []).append(t)
    for cohort, alone in members.items():
        if len(alone) == 1:
            problems.append(dataclasses.replace(problem_at(alone[0].src, ("spec", "cohort"), f"cohort {cohort!r} has no other member: nothing to borrow, and no one to lend to"), warning=True))

    vcs: dict[str, str] = {}
    for vc in docs.virtual_clusters:
        tenant = vc.doc.metadata.tenant
        vcs[vc.name] = tenant
        if tenant not in tenants:
            problems.append(_missing(vc, ("metadata", "tenant"), "tenant", tenant, tenants))
        for i, g in enumerate(vc.doc.spec.host_groups):
            if g.near is not None and g.near.site not in sites:
                problems.append(_missing(vc, ("spec", "hostGroups", i, "near", "site"), "site", g.near.site, sites))
            problems += _selector_problems(vc, ("spec", "hostGroups", i, "sites"), g.sites, sites, hw)
            problems += hw.demand(vc, ("spec", "hostGroups", i), g.resources, g.platform, what="hosts")

    apps = {a.name: a.doc.spec.each for a in docs.applications}  # name -> its population, if made per site
    for app in docs.applications:
        problems += _check_app(app, app.doc.metadata.tenant, app.doc.spec, ("spec",), tenants, vcs, sites, hw)

    populations = {p.name: p for fl in docs.fleets for p in fl.doc.spec.populations}
    for sc in docs.scenarios:
        problems += _check_scenario(sc, tenants, vcs, sites, nodes, links, apps, hw)
        problems += _check_mobility(sc, populations, sites)
    return problems


def outside_allowed_sites(docs: Documents) -> list[Problem]:
    """Virtual clusters' host groups whose site names select only sites outside
    their tenant's ``allowedSites``, so that their hosts could never be placed.
    Not a problem of files (a simulation keeps such a VC, without hosts): a live
    server refuses them (server/config.py). For documents whose references hold."""
    allowed = {t.name: t.doc.spec.allowed_sites for t in docs.tenants}
    if all("*" in a for a in allowed.values()):
        return []
    sites = KnownSites()
    for fl in docs.fleets:
        for site in fl.doc.spec.sites:
            sites.add(site.name, site.tier, site.region, dict(site.labels))
        for pop in fl.doc.spec.populations:
            sites.add_population(pop.name, NamePattern.parse(pop.sites), pop.count)
    out: list[Problem] = []
    for vc in docs.virtual_clusters:
        tenant = vc.doc.metadata.tenant
        for i, g in enumerate(vc.doc.spec.host_groups if tenant in allowed else ()):
            out += _outside_allowed(vc, ("spec", "hostGroups", i, "sites"), g.sites, tenant, allowed[tenant], sites)
    return out


def check_application(app: Loaded, world) -> list[Problem]:
    """An Application document's references (tenant, virtual cluster, sites)
    and its priorities (within its tenant's ``maxPriority``), checked against
    a world already built (a live control plane's). Only the tenant's own
    virtual clusters are known to it: another tenant's is as missing as one
    that does not exist, and no message names it."""
    tenant = app.doc.metadata.tenant
    own = f"{tenant}:"  # a live server keeps a tenant's virtual cluster NAME as TENANT:NAME
    vcs = {name.removeprefix(own): vc.tenant for name, vc in world.vcs.items()
           if not vc.default and vc.tenant == tenant}
    sites = KnownSites.of(world.fleet)
    tenants = {name: t.max_priority for name, t in world.tenants.items()}
    return _check_app(app, tenant, app.doc.spec, ("spec",), tenants, vcs, sites, Hardware.of_fleet(world.fleet))


def _check_app(src: Loaded, tenant: str, spec, base: tuple, tenants: Mapping[str, int | None], vcs,
               sites, hw: Hardware | None = None) -> list[Problem]:
    """``tenants``: each tenant's maxPriority (None: no ceiling of its own).
    ``hw``: the fleet's hardware, to warn about demands no node meets."""
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
    each = spec.each
    if each is not None and base != ("spec",):
        out.append(problem_at(src.src, base + ("each",), "each makes one application per site of a population: "
                                                         "it belongs in an Application document"))
        each = None
    elif each is not None and each not in sites.populations:
        out.append(_about('Fleet', problem_at(src.src, base + ("each",), f"no population named {each!r}; known: "
                                                         f"{_few(sites.populations)}")))
    for i, comp in enumerate(spec.components):
        here = base + ("components", i)
        if hw is not None:
            images = comp.run.images if comp.run is not None else None
            found = hw.images(src, here, comp.platform, images) if images is not None else []
            found = found or hw.demand(src, here, comp.resources, _effective_platform(comp))
            out += found or (hw.gang(src, here, comp) if comp.gang is not None and comp.coupling else [])
        if comp.sites is not None:
            out += _selector_problems(src, here + ("sites",), comp.sites, sites, hw)
        refs = [(("near", "site"), comp.near.site if comp.near is not None else None)]
        if comp.data is not None:
            refs += [(("data", key), getattr(comp.data, key)) for key in ("source", "sink")]
        for loc, name in refs:
            if name == EACH_SITE:
                if spec.each is None:
                    out.append(problem_at(src.src, here + loc, f"{EACH_SITE} stands for the site an application "
                                                               "is made for: only with `each: POPULATION`"))
            elif name is not None and name not in sites:
                out.append(_missing(src, here + loc, "site", name, sites))
    return out


def _priorities_within(src: Loaded, tenant: str, ceiling: int | None, spec, base: tuple) -> list[Problem]:
    """Priorities above the tenant's maxPriority (its admin's ceiling), where written."""
    if ceiling is None:
        return []
    out = []
    if spec.priority > ceiling:
        out.append(_about(f"Tenant {tenant}", problem_at(src.src, base + ("priority",),
                              f"priority {spec.priority} is above tenant {tenant}'s maxPriority {ceiling}")))
    for i, comp in enumerate(spec.components):
        if comp.priority is not None and comp.priority > ceiling:
            out.append(_about(f"Tenant {tenant}", problem_at(src.src, base + ("components", i, "priority"),
                                  f"priority {comp.priority} is above tenant {tenant}'s maxPriority {ceiling}")))
    return out


def _fleet_size(docs: Documents) -> list[Problem]:
    """At most ``FLEET_NODES`` nodes over all Fleet documents: named at the node
    group (or population) that goes past it."""
    total = 0
    for fl in docs.fleets:
        for i, site in enumerate(fl.doc.spec.sites):
            for j, g in enumerate(site.node_groups):
                total += g.count
                if total > q.FLEET_NODES:
                    return [problem_at(fl.src, ("spec", "sites", i, "nodeGroups", j, "count"),
                                       f"the fleet reaches {total} nodes here; "
                                       f"at most {q.FLEET_NODES} nodes in all Fleet documents")]
    for fl in docs.fleets:
        for i, pop in enumerate(fl.doc.spec.populations):
            total += pop.count * sum(g.count for g in pop.node_groups)
            if total > q.FLEET_NODES:
                return [problem_at(fl.src, ("spec", "populations", i, "count"),
                                   f"the fleet reaches {total} nodes here; "
                                   f"at most {q.FLEET_NODES} nodes in all Fleet documents")]
    return []


def _check_attach(fl: Loaded, here: tuple, pop, sites: "KnownSites") -> list[Problem]:
    """A population attaches to listed sites: its selector must pick enough of
    them, and every weight's glob must name one of those."""
    if pop.attach is None:
        return []
    at = pop.attach
    picked = [n for n in sites.listed_names() if _selects(at.to, n, sites)]
    out = []
    if len(picked) < at.homes:
        out.append(problem_at(fl.src, here + ("attach", "to"),
                              f"the selector picks {len(picked)} listed site(s) ({_few(picked)}); "
                              f"homes: {at.homes} needs at least {at.homes}"))
        return out
    for pattern, w in at.weights.items():
        if not any(_glob(pattern, n) for n in picked):
            out.append(problem_at(fl.src, here + ("attach", "weights", pattern),
                                  f"pattern {pattern!r} names no site the selector picks ({_few(picked)})"))
    weight = [attach_weight(at.weights, n) for n in picked]
    if sum(weight) <= 0 or sum(1 for w in weight if w > 0) < at.homes:
        out.append(problem_at(fl.src, here + ("attach", "weights"),
                              f"the weights leave fewer than {at.homes} site(s) to attach to"))
    return out


def _no_site_matches(src: Loaded, loc: tuple, pattern: str, sites: "KnownSites") -> Problem:
    return _about("Fleet", problem_at(src.src, loc, f"pattern {pattern!r} matches no site; sites are {_few(sites)}"))


def _outside_allowed(src: Loaded, loc: tuple, sel, tenant: str, allowed, sites: "KnownSites") -> list[Problem]:
    """A host group's site names that select only sites its tenant may not use,
    when none of them selects one it may (its hosts could never be placed): one
    problem per such name (a name that selects no site has its own)."""
    if sel is None or not sel.names or "*" in allowed or any(sites.any_common(p, allowed) for p in sel.names):
        return []
    may = ", ".join(allowed) or "none"
    return [_about(f"Tenant {tenant}", problem_at(src.src, loc + ("names", j), f"pattern {pattern!r} selects only "
                                                  f"sites outside tenant {tenant}'s allowedSites ({may}): its hosts "
                                                  "could never be placed"))
            for j, pattern in enumerate(sel.names) if sites.any_match(pattern)]


def _selector_problems(src: Loaded, loc: tuple, sel, sites: "KnownSites", hw: "Hardware | None") -> list[Problem]:
    """A site selector's name globs that match no site (errors), and a tier,
    region and labels that no site has (a warning, when the fleet is known)."""
    out = [_no_site_matches(src, loc + ("names", j), pattern, sites)
           for j, pattern in enumerate(sel.names or []) if not sites.any_match(pattern)]
    if hw is not None and hw.known and hw.facts is not None:
        out += _selector_meets_nothing(src, loc, sel, hw.facts)
    return out


def _selector_meets_nothing(src: Loaded, loc: tuple, sel, facts) -> list[Problem]:
    """A warning when no site (listed, or of a population) has the tier,
    region and labels a selector asks for, its labels or one of its node
    groups' (its name globs are checked apart)."""
    if not (sel.tier or sel.regions or sel.labels):
        return []
    for tier, region, labels in facts:
        if ((not sel.tier or tier in sel.tier) and (not sel.regions or region is None or region in sel.regions)
                and all(labels.get(k) == v for k, v in sel.labels.items())):
            return []
    asked = [f"tier {_either(sel.tier)}"] if sel.tier else []
    asked += [f"region {_either(sel.regions)}"] if sel.regions else []
    asked += [f"labels {dict(sel.labels)}"] if sel.labels else []
    return [_warning(src, loc, f"no site or node group has {' and '.join(asked)}; nothing can be selected")]


def _selects(sel, name: str, sites: "KnownSites") -> bool:
    """Whether a selector picks the listed site ``name`` (by the site's own labels)."""
    return selects(sel, name, *sites.info(name))


def _may_meet(x: str, y: str) -> bool:
    """Whether two name patterns (``car-###``) can make the same name: equal
    length, equal literals, and a digit wherever one has a literal and the other '#'."""
    if len(x) != len(y):
        return False
    return all(a == b or (a == "#" and b.isdigit()) or (b == "#" and a.isdigit()) for a, b in zip(x, y))


class Hardware:
    """What the fleet's nodes are (archs, device kinds and their models), to
    warn about a demand that no node can meet. ``known`` is False when nodes
    come from a trace, whose hardware is seen only when it is read."""

    def __init__(self, groups=(), known: bool = True, facts=None, shapes=None) -> None:
        self.archs: set[str] = set()
        self.models: dict[str, set[str]] = {}  # kind -> models
        self.known = known
        self.facts = facts  # (tier, region, labels) of each listed site and population; None: not checked
        # (arch, cpu milli, memory MiB, ((kind, model, count), ...)) of each node group with nodes; None: not checked
        self.shapes = shapes
        self.domains: dict[str, dict[str, list]] = {}  # level -> domain -> [(node shape, nodes)] (``in_domains``)
        self.unchecked: set[str] = set()  # levels whose domains are not all counted (devices')
        self._met: set[tuple] = set()  # demands found met (``demand``): asked again, not checked again
        for arch, devices in groups:
            self.archs.add(arch)
            for kind, model in devices:
                self.models.setdefault(kind, set()).add(model)

    @staticmethod
    def of_fleet(fleet) -> "Hardware":
        return Hardware((g.arch, ((d.kind, d.model) for d in g.devices)) for g in fleet.groups)

    def demand(self, src: Loaded, here: tuple, resources, platform, what: str = "tasks") -> list[Problem]:
        """Warnings for a demand (a component's ``tasks`` or a host group's
        ``hosts``) that no node meets."""
        if not self.known:
            return []
        # what the answer reads of the demand (components of one template, or of generated
        # applications, ask the same: tens of thousands of them, a few distinct)
        key = (resources.cpu, resources.memory, resources.whole, what,
               None if platform is None else tuple(platform.arch),
               tuple((a.kind, None if a.model is None else tuple(a.model), a.count) for a in resources.accelerators))
        if key in self._met:
            return []
        out = []
        if platform is not None and not self.archs.intersection(platform.arch):
            out.append(_warning(src, here + ("platform", "arch"), f"no node has arch {_either(platform.arch)}; "
                                                                   f"archs in the fleet: {_few(self.archs)}"))
        for j, acc in enumerate(resources.accelerators):
            at = here + ("resources", "accelerators", j)
            models = self.models.get(acc.kind)
            if models is None:
                out.append(_warning(src, at + ("kind",), f"no node has a device of kind {acc.kind!r}; "
                                                         f"kinds in the fleet: {_few(self.models) or 'none'}"))
            elif acc.model and not models.intersection(acc.model):
                out.append(_warning(src, at + ("model",), f"no node has a {acc.kind} of model {_either(acc.model)}; "
                                                          f"{acc.kind} models in the fleet: {_few(models)}"))
        if not out and self.shapes is not None:
            out += self._no_node_holds(src, here, resources, platform, what)
        if not out and len(self._met) < 4096:
            self._met.add(key)
        return out

    def images(self, src: Loaded, here: tuple, platform, images: dict[str, str]) -> list[Problem]:
        """A warning when no node can run any variant of a component's image:
        none has the arch of one (of those its platform allows)."""
        archs = [a for a in images if platform is None or a in platform.arch]
        at = here + ("run", "images")
        if not archs:
            return [_warning(src, at, f"no variant for an arch its platform allows ({_either(platform.arch)}): "
                                      f"its tasks can never run")]
        if self.known and not self.archs.intersection(archs):
            return [_warning(src, at, f"no node has arch {_either(archs)}, the archs its image has variants for: "
                                      f"its tasks can never run; archs in the fleet: {_few(self.archs)}")]
        return []

    def in_domains(self, g, default: dict[str, str]) -> None:
        """A node group's nodes, counted in each fabric domain they are in."""
        for level in ("coherent", "ib", "roce", "ethernet"):
            name = getattr(g.fabrics, level) or default.get(level)
            if name is not None:
                shape = (g.arch, g.cpu, g.memory, tuple((d.kind, d.model, d.count) for d in g.accelerators))
                self.domains.setdefault(level, {}).setdefault(name, []).append((shape, g.count))

    def gang(self, src: Loaded, here: tuple, comp) -> list[Problem]:
        """A warning when no domain of a gang's coupling holds as many of its
        members as it needs (its size, or minSize), even empty: it can never
        be placed. Members per node: what the node holds of each resource
        over what one asks (an upper bound), on the nodes one could use."""
        level = comp.coupling
        if not self.known or comp.gang is None or level not in ("coherent", "ib", "roce", "ethernet") \
                or level in self.unchecked:
            return []
        res, platform = comp.resources, comp.platform

        def per_node(shape) -> int:
            arch, cpu, memory, devices = shape
            if platform is not None and arch not in platform.arch:
                return 0
            most = [cpu // res.cpu if res.cpu else None, memory // res.memory if res.memory else None]
            for acc in res.accelerators:
                have = sum(c for k, m, c in devices if k == acc.kind and (not acc.model or m in acc.model))
                most.append(have * 1000 // acc.count if acc.count < 1000 else have // (acc.count // 1000))
            known = [m for m in most if m is not None]
            return min(known) if known else comp.gang.size

        need = comp.gang.min_size or comp.gang.size
        held = max((min(sum(per_node(shape) * n for shape, n in groups), comp.gang.size)
                    for groups in self.domains.get(level, {}).values()), default=0)
        if held >= need:
            return []
        if not self.domains.get(level):
            return [_warning(src, here + ("coupling",), f"no node of the fleet is in a {level} domain; "
                                                        f"its gang can never be placed")]
        return [_warning(src, here + ("gang",), f"no {level} domain of the fleet holds its gang, even empty: the "
                                                f"largest holds {held} of its {need} members; it can never be placed")]

    def _no_node_holds(self, src: Loaded, here: tuple, resources, platform, what: str) -> list[Problem]:
        """A warning when no node of the fleet, even empty, holds what one task
        asks (on one node): it can never be placed. Names the bound that can
        never be met, in figures: what it asks against the most a node has."""
        from suanli.model.quantities import format_amount

        asks = [("cpu", 0, resources.cpu), ("memory", 1, resources.memory)]
        shapes = [s for s in self.shapes if platform is None or s[0] in platform.arch]
        if not shapes:
            return []

        def has(shape, acc) -> int:  # milli-devices of the kind (and models) asked, on one such node
            return 1000 * sum(c for k, m, c in shape[3] if k == acc.kind and (not acc.model or m in acc.model))

        def fits(shape) -> bool:
            return shape[1] >= resources.cpu and shape[2] >= resources.memory and all(
                has(shape, acc) >= (acc.count if acc.count >= 1000 else 1) for acc in resources.accelerators)

        if any(fits(s) for s in shapes):
            return []
        short = [f"{format_amount(col, want)} {name} on one node, and the most a node has is "
                 f"{format_amount(col, most)}"
                 for name, col, want, most in [(n, c, w, max(s[1 + c] for s in shapes)) for n, c, w in asks]
                 if want > most]
        short += [f"{format_amount(2, acc.count)} {acc.kind}{' of model ' + _either(acc.model) if acc.model else ''} "
                  f"on one node, and the most a node has is {format_amount(2, most)}"
                  for acc in resources.accelerators
                  for most in [max(has(s, acc) for s in shapes)] if acc.count > most]
        why = ("it asks " + "; ".join(short)) if short else \
            "each of its resources fits some node, but no node has them all together"
        return [_warning(src, here + ("resources",), f"no node of the fleet can hold one of its {what}, even empty: "
                                                     f"{why}; it can never be placed")]


def _either(names) -> str:
    return " or ".join(repr(n) for n in names)


def _warning(src: Loaded, loc: tuple, message: str) -> Problem:
    return dataclasses.replace(problem_at(src.src, loc, message), warning=True, refers="Fleet")


class KnownSites:
    """The sites the documents define, for references: listed names with
    their facts, and populations as name patterns (never a name each)."""

    def __init__(self) -> None:
        self._listed: dict[str, tuple[str, str, dict]] = {}  # name -> (tier, region, labels)
        self.names = SiteNames()
        self.populations: dict[str, int] = {}  # name -> its block among ``names.blocks()``
        self._matched: dict[str, bool] = {}  # pattern -> whether a site matches it

    @staticmethod
    def of(fleet) -> "KnownSites":
        out = KnownSites()
        out.names = fleet.site_table.names
        out.populations = {name: b for b, name in enumerate(fleet.site_table.population_names)}
        return out

    def add(self, name: str, tier: str, region: str = "", labels: dict | None = None) -> None:
        self._listed[name] = (tier, region, labels or {})
        self.names.add(name)
        self._matched.clear()

    def add_population(self, name: str, pattern: NamePattern, count: int) -> None:
        self.populations[name] = len(self.names.blocks())
        self.names.add_block(count, pattern)
        self._matched.clear()

    def info(self, name: str) -> tuple[str, str, dict]:
        return self._listed[name]

    def listed_names(self):
        return self._listed.keys()

    def clash(self, pattern: NamePattern, count: int) -> str | None:
        """A defined site name that a new population would also make, if any."""
        for name in self.names._index:
            k = pattern.index(name)
            if 0 <= k < count:
                return name
        for _, n, other in self.names.blocks():
            if not _may_meet(str(pattern), str(other)):
                continue
            a, na, b, nb = (pattern, count, other, n) if count <= n else (other, n, pattern, count)
            for k in range(na):  # the smaller population, name by name
                j = b.index(a.name(k))
                if 0 <= j < nb:
                    return a.name(k)
        return None

    def any_match(self, pattern: str) -> bool:
        seen = self._matched  # a selector written on each of many documents is looked at once
        got = seen.get(pattern)
        if got is None:
            got = seen[pattern] = self._any_match(pattern)
        return got

    def _any_match(self, pattern: str) -> bool:
        rx = re.compile(glob_regex(pattern))
        if any(rx.fullmatch(n) for n in self.names._index):
            return True
        for _, count, pat in self.names.blocks():
            if any(rx.fullmatch(pat.name(k)) for k in range(count)):
                return True
        return False

    def any_common(self, pattern: str, others) -> bool:
        """Whether a site matches ``pattern`` and one of ``others`` (globs) too."""
        rx, rxs = re.compile(glob_regex(pattern)), [re.compile(glob_regex(o)) for o in others]
        both = lambda name: rx.fullmatch(name) and any(r.fullmatch(name) for r in rxs)  # noqa: E731
        if any(both(n) for n in self.names._index):
            return True
        return any(both(pat.name(k)) for _, count, pat in self.names.blocks() for k in range(count))

    def few(self) -> list[str]:
        listed = sorted(self.names._index)
        return listed + [f"{p.name(0)}..{p.name(c - 1)}" for _, c, p in self.names.blocks()]

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self):
        return iter(self.few())

    def __len__(self) -> int:
        return len(self.names)


def _check_scenario(sc: Loaded, tenants, vcs, sites, nodes, links, apps, hw: Hardware | None = None) -> list[Problem]:
    out: list[Problem] = []
    spec = sc.doc.spec
    arrived: set[str] = set()
    for i, arr in enumerate(spec.arrivals):
        if arr.app not in apps:
            out.append(_missing(sc, ("spec", "arrivals", i, "app"), "application", arr.app, apps))
        elif apps[arr.app] is None:
            for key in ("share", "over", "stay"):
                if getattr(arr, key) is not None:
                    out.append(problem_at(sc.src, ("spec", "arrivals", i, key), f"{key} picks among the copies of "
                                          f"an application made per site (each); {arr.app!r} is one application"))
        elif arr.app in arrived:
            out.append(problem_at(sc.src, ("spec", "arrivals", i, "app"), f"application {arr.app!r} arrives twice"))
        arrived.add(arr.app)
    for i, gen in enumerate(spec.generators):
        here = ("spec", "generators", i)
        out += _check_app(sc, gen.tenant, gen.template, here + ("template",), tenants, vcs, sites, hw)
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
            out.append(_about('Fleet', problem_at(sc.src, here + ("node",), f"no node {ev.node!r}; nodes are named SITE/GROUP-INDEX, e.g. {nodes.examples()}")))
        elif ev.kind in ("linkDown", "linkUp"):
            for j, end in enumerate(ev.between):
                if end not in sites:
                    out.append(_missing(sc, here + ("between", j), "site", end, sites))
            drawn = any(e in sites and e not in sites.listed_names() for e in ev.between)  # checked once drawn
            if all(e in sites for e in ev.between) and not drawn and frozenset(ev.between) not in links:
                out.append(_about('Fleet', problem_at(sc.src, here + ("between",), f"no link between {ev.between[0]!r} and {ev.between[1]!r}")))
        elif ev.kind in ("handover", "deviceOffline", "deviceOnline"):
            if ev.site not in sites:
                out.append(_missing(sc, here + ("site",), "site", ev.site, sites))
            for j, end in enumerate(getattr(ev, "to", ())):
                if end not in sites:
                    out.append(_missing(sc, here + ("to", j), "site", end, sites))
                elif end == ev.site:
                    out.append(problem_at(sc.src, here + ("to", j), f"{end!r} is the device itself"))
        elif ev.kind == "deviceBusy":
            if ev.site is not None and ev.site not in sites:
                out.append(_missing(sc, here + ("site",), "site", ev.site, sites))
            if ev.node is not None and ev.node not in nodes:
                out.append(_about('Fleet', problem_at(sc.src, here + ("node",), f"no node {ev.node!r}; nodes are named SITE/GROUP-INDEX, e.g. {nodes.examples()}")))
    return out


def _check_mobility(sc: Loaded, populations: dict, sites: "KnownSites") -> list[Problem]:
    """Each mobility entry names a population, and a handover has somewhere to go."""
    out = []
    for i, mob in enumerate(sc.doc.spec.mobility):
        here = ("spec", "mobility", i)
        pop = populations.get(mob.population)
        if pop is None:
            out.append(_about('Fleet', problem_at(sc.src, here + ("population",), f"no population named {mob.population!r}; "
                                                                 f"known: {_few(populations)}")))
            continue
        if mob.handovers is None:
            continue
        rule = mob.to or (pop.attach.to if pop.attach is not None else None)
        if rule is None:
            out.append(problem_at(sc.src, here + ("to",), f"population {pop.name!r} has no attach rule: "
                                                          "say where its devices hand over to"))
            continue
        picked = [n for n in sites.listed_names() if _selects(rule, n, sites)]
        homes = pop.attach.homes if pop.attach is not None else 1
        if len(picked) <= homes:
            out.append(problem_at(sc.src, here + ("to" if mob.to else "population",),
                                  f"a handover needs another site to go to: the rule picks {len(picked)} "
                                  f"({_few(picked)}) for devices with {homes} home(s)"))
    return out


class _NodeNames:
    """Node names SITE/GROUP-INDEX, checked by parsing rather than listing every node."""

    def __init__(self) -> None:
        self._count: dict[tuple[str, str], int] = {}
        self._populations: list[tuple[NamePattern, int, str, int]] = []  # pattern, sites, group, nodes per site

    def add_group(self, site: str, group: str, count: int) -> None:
        self._count[(site, group)] = max(count, self._count.get((site, group), 0))

    def add_population(self, pattern: NamePattern, sites: int, group: str, count: int) -> None:
        self._populations.append((pattern, sites, group, count))

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or "/" not in name:
            return False
        site, _, rest = name.partition("/")
        group, dash, index = rest.rpartition("-")
        if not dash or not index.isdigit() or (index != "0" and index.startswith("0")):
            return False
        if int(index) < self._count.get((site, group), 0):
            return True
        return any(g == group and int(index) < c and 0 <= p.index(site) < n for p, n, g, c in self._populations)

    def examples(self, n: int = 2) -> str:
        names = [f"{s}/{g}-{k}" for (s, g), c in self._count.items() for k in range(min(c, n))]
        names += [f"{p.name(0)}/{g}-0" for p, _, g, c in self._populations if c]
        return ", ".join(names[:n]) if names else "none (the fleet has no nodes)"


def _unique(items: list[Loaded], what: str) -> Iterator[Problem]:
    seen: dict[str, Loaded] = {}
    for it in items:
        if it.name in seen:
            first = seen[it.name].src
            yield problem_at(it.src, ("metadata", "name"), f"{what} {it.name!r} is already defined in {first.file} (document {first.index})")
        else:
            seen[it.name] = it


_REFERS = {"site": "Fleet", "tenant": "Tenant", "virtual cluster": "VirtualCluster", "application": "Application"}


def _missing(src: Loaded, loc: tuple, what: str, name: str, known) -> Problem:
    kind = _REFERS.get(what, "")
    return _about(kind if kind == "Fleet" else f"{kind} {name}",
                  problem_at(src.src, loc, f"no {what} named {name!r}; known: {_few(known)}"))


def _about(document: str, problem: Problem) -> Problem:
    """``problem`` depends on ``document`` ("Tenant t"; "Fleet": what the
    Fleet documents define): it may be only an echo of another problem when
    that document is not valid."""
    return dataclasses.replace(problem, refers=document)


def _few(names, n: int = 8) -> str:
    names = names.few() if isinstance(names, KnownSites) else sorted(names)
    if not names:
        return "none"
    head = ", ".join(names[:n])
    return head + (f" (+{len(names) - n} more)" if len(names) > n else "")


_glob = glob_match


def _effective_platform(comp):
    """A component's platform as its image narrows it (``run.images``: only
    the archs it has variants for)."""
    images = comp.run.images if comp.run is not None else None
    if images is None:
        return comp.platform
    allowed = comp.platform.arch if comp.platform is not None else list(images)
    return SimpleNamespace(arch=[a for a in allowed if a in images])
