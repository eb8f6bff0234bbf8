"""What a live server runs, changed while it runs: its Fleet, Tenant and
VirtualCluster documents (kept in the store, applied through the API and
checked exactly as files are), and the nodes that registered themselves
(``suanli agent``).

A change is checked as a whole: the documents as they would be after it go
through the same checks as files (``check_references``), plus what a
running scheduler cannot take without a restart (a population changed, an
accelerator kind no node had: a kind is a resource column).

A tenant's virtual cluster is kept and built under ``TENANT:NAME`` (``key``),
as applications are inside the scheduler, so that two tenants may each have
one called ``train``; its tenant knows it as ``NAME`` (``shown``).

The scheduler's fleet grows in place (``grown_fleet``): nodes keep their
numbers, new sites and nodes are appended, and what is removed stays
numbered but retired (never a candidate again), so that running work and
caches keyed on node numbers stay right. A restart builds it afresh from the
documents and the agents.
"""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import numpy as np

from suanli.model.fleet import Fleet, LinkArrays, NodeGroup
from suanli.model.sites import Site
from suanli.model.work import World
from suanli.server.controller import internal, shown
from suanli.spec import schema
from suanli.spec.build import _group, build_world
from suanli.spec.loader import Documents, Loaded, validate_document
from suanli.spec.problems import Problem
from suanli.spec.refs import check_references, outside_allowed_sites

KINDS = ("Fleet", "Tenant", "VirtualCluster")
PATHS = {"Fleet": "fleets", "Tenant": "tenants", "VirtualCluster": "vcs"}  # the API's collection of each kind


def display(kind: str, name: str) -> str:
    return f"{kind} {shown(name) if kind == 'VirtualCluster' else name}"


def key(kind: str, document: Mapping) -> str:
    """The name a document is stored and built under: its own, but a virtual
    cluster's is ``TENANT:NAME`` (its tenant's own name space)."""
    meta = document.get("metadata") or {}
    name = meta.get("name")
    return internal(meta["tenant"], name) if kind == "VirtualCluster" and meta.get("tenant") else name


def documents(objects: Iterable[tuple[str, str, dict]]) -> tuple[Documents, list[Problem]]:
    """Stored (or applied) documents read as a load reads files: the documents,
    and the problems of their schema and references (warnings apart). A
    virtual cluster is read under its key (``TENANT:NAME``)."""
    docs, problems = Documents(), []
    for kind, name, document in objects:
        for got in validate_document(display(kind, name), document):
            if isinstance(got, Problem):
                problems.append(got)
            elif kind == "VirtualCluster":
                meta = got.doc.metadata.model_copy(update={"name": internal(got.doc.metadata.tenant, got.name)})
                docs.add(Loaded(got.doc.model_copy(update={"metadata": meta}), got.src))
            else:
                docs.add(got)
    if not problems:
        found = check_references(docs)
        problems = [p for p in found if not p.warning]
        docs.warnings = [p for p in found if p.warning]
    return docs, problems


def runtime_problems(before: Documents, after: Documents) -> list[Problem]:
    """What a running server does not take: populations changed, a new accelerator
    kind, or a virtual cluster that could never have hosts (``tenancy_problems``)."""
    out = tenancy_problems(before, after)
    pops = lambda docs: {p.name: p.model_dump() for f in docs.fleets for p in f.doc.spec.populations}  # noqa: E731
    if pops(before) != pops(after):
        out.append(Problem("Fleet", "populations are set when the server starts: a population added, removed or "
                           "changed needs a restart (their devices come and go through suanli agent)"))
    kinds = lambda docs: {a.kind for f in docs.fleets for s in (*f.doc.spec.sites, *f.doc.spec.populations)  # noqa: E731
                          for g in s.node_groups for a in g.accelerators}
    new = kinds(after) - kinds(before)
    if new:
        out.append(Problem("Fleet", f"accelerator kind {sorted(new)[0]!r} is new to the server: a kind is a resource "
                           "of quotas and placements, so a new one needs a restart"))
    return out


def tenancy_problems(before: Documents | None, after: Documents) -> list[Problem]:
    """Virtual clusters' host groups of ``after`` that select only sites outside
    their tenant's allowedSites, and were not so in ``before``: a change through
    the API, or files given to ``serve``, are refused with them (one stored
    before they were stays, without hosts, as a simulation keeps one)."""
    seen = {(p.file, p.path) for p in outside_allowed_sites(before)} if before is not None else set()
    return [p for p in outside_allowed_sites(after) if (p.file, p.path) not in seen]


def agent_group(spec: dict, site: int, name: str, index: int) -> NodeGroup:
    """The node an agent registered, as a group of one named ``SITE/NAME``."""
    return dataclasses.replace(_agent_group(json.dumps(spec, sort_keys=True), site, name), index=index)


@lru_cache(maxsize=1 << 16)
def _agent_group(spec: str, site: int, name: str) -> NodeGroup:
    g = schema.NodeGroupSpec.model_validate({**json.loads(spec), "name": name, "count": 1})
    return dataclasses.replace(_group(0, site, g), single=True)


def _facts(g: NodeGroup) -> tuple:
    """What a node of the group is, wherever it is and whatever it is called."""
    return (g.arch, g.cpu_milli, g.mem_mib, g.devices, tuple(sorted(g.fabrics.items())),
            tuple(sorted(g.labels.items())), g.cost_per_hour, g.single)


def _relays(site: Site) -> bool:
    """Whether a listed site relays paths: as written, else all but devices."""
    return site.transit if site.transit is not None else site.tier != "device"


def grown_fleet(current: Fleet, docs: Documents, agents: Sequence[tuple[str, str, dict, bool]] = ()
                ) -> tuple[Fleet | None, list[int], bool]:
    """The fleet ``current`` becomes to be as ``docs`` (and ``agents``: name,
    site, spec, present) say: (the grown fleet or None when no node, site or
    link is new and no site changed, the nodes to retire, whether paths
    changed). A node whose facts changed is retired and made again under its
    name. An agent that is not present keeps its node (down) until it leaves."""
    table = current.site_table
    listed = [s for f in docs.fleets for s in f.doc.spec.sites]
    wanted_sites = [Site(0, s.name, s.tier, s.region, s.intra_site_rtt_ms, dict(s.labels), s.transit) for s in listed]
    before = {name: (tier, region, dict(labels)) for _, name, tier, region, labels in table.listed}
    site_changed = any(s.name not in before or before[s.name] != (s.tier, s.region, s.labels) for s in wanted_sites)
    intra = {s.name: s.intra_site_rtt_ms for s in wanted_sites}
    rtt_changed = any(s.name in before and (float(table.intra_rtt_ms[table.names[s.name]]) != intra[s.name]
                                            or bool(table.transit[table.names[s.name]]) != _relays(s))
                      for s in wanted_sites)  # (a site that starts or stops relaying changes paths too)
    new_table = table.grown(wanted_sites) if site_changed or rtt_changed else table
    sites = new_table.names

    # what each (site, group, single) should have: its facts and how many nodes
    wanted: dict[tuple[int, str, bool], tuple[NodeGroup, int]] = {}
    for s in listed:
        for g in s.node_groups:
            made = _group(0, sites[s.name], g)
            wanted[(made.site, g.name, False)] = (made, g.count)
    for name, site, spec, _present in agents:
        made = _agent_group(json.dumps(spec, sort_keys=True), sites[site], name.partition("/")[2])
        wanted[(made.site, made.name, True)] = (made, 1)

    retire: list[int] = []
    have: dict[tuple[int, str, bool], np.ndarray] = {}  # per key: which numbers in the names are live
    for g in current.groups:
        if g.site_count > 1:
            continue  # a population's: set at start
        key = (g.site, g.name, g.single)
        first = int(current.group_first_node[g.index])
        want = wanted.get(key)
        same = want is not None and (want[0] is g or _facts(want[0]) == _facts(g))
        if g.count == 1:  # most are (agents' nodes): no arrays
            if current.retired[first]:
                continue
            if same and g.first < want[1]:
                have.setdefault(key, np.zeros(want[1], bool))[g.first] = True
            else:
                retire.append(first)
            continue
        live = np.flatnonzero(~current.retired[first:first + g.count])
        keep = live[g.first + live < want[1]] if same else live[:0]
        retire += (first + np.setdiff1d(live, keep)).tolist()
        if keep.size:
            have.setdefault(key, np.zeros(want[1], bool))[g.first + keep] = True
    groups = list(current.groups)
    for key, (made, count) in wanted.items():
        if count == 1 and key in have:
            continue
        missing = ~have.get(key, np.zeros(count, bool))
        edges = np.diff(np.concatenate([[0], missing.astype(np.int8), [0]]))
        for start, end in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):  # runs: a group each
            groups.append(dataclasses.replace(made, index=len(groups), first=int(start), count=int(end - start)))

    links = _links(current, new_table, docs)
    la = current.link_arrays
    paths = new_table is not table and (len(new_table) != len(table) or rtt_changed) or not _same_links(la, links)
    if len(groups) == len(current.groups) and new_table is table and not paths:
        return None, retire, False
    fleet = Fleet(new_table, groups, links, base=current, network=None if paths else current.network)
    fleet.attach_rules = current.attach_rules
    return fleet, retire, paths


def _links(current: Fleet, table, docs: Documents) -> LinkArrays:
    """The listed links as the documents give them, with the population links the current fleet drew."""
    index = table.names
    listed = [ln for f in docs.fleets for ln in f.doc.spec.links]
    own = LinkArrays(np.array([index[ln.between[0]] for ln in listed], np.int64),
                     np.array([index[ln.between[1]] for ln in listed], np.int64),
                     np.array([ln.rtt_ms for ln in listed], float),
                     np.array([ln.bandwidth for ln in listed], float))
    la = current.link_arrays
    pop = current.site_table.population_of
    drawn = (pop[la.a] >= 0) | (pop[la.b] >= 0) if len(la) else np.zeros(0, bool)
    return LinkArrays.concat([own, LinkArrays(la.a[drawn], la.b[drawn], la.rtt_ms[drawn], la.bandwidth_mbps[drawn])])


def _same_links(a: LinkArrays, b: LinkArrays) -> bool:
    """The same links, in any order and either direction."""
    if len(a) != len(b):
        return False
    rows = lambda la: np.stack([np.minimum(la.a, la.b), np.maximum(la.a, la.b), la.rtt_ms, la.bandwidth_mbps])  # noqa: E731
    x, y = rows(a), rows(b)
    return bool(np.array_equal(x[:, np.lexsort(x[::-1])], y[:, np.lexsort(y[::-1])]))


def world_of(docs: Documents, agents: Sequence[tuple[str, str, dict, bool]] = ()) -> World:
    """The world of the documents, with the agents' nodes."""
    return with_agents(build_world(docs), docs, agents)


def with_agents(world: World, docs: Documents, agents: Sequence[tuple[str, str, dict, bool]]) -> World:
    """``world`` (built from ``docs``) with the agents' nodes added to its fleet, in place."""
    if agents:
        fleet, _, _ = grown_fleet(world.fleet, docs, agents)
        if fleet is not None:
            object.__setattr__(world, "fleet", fleet)
    return world


def tenant_of(kind: str, document: Mapping) -> str | None:
    """The tenant a document belongs to: a Tenant's own name, a VirtualCluster's tenant."""
    meta = document.get("metadata") or {}
    return meta.get("name") if kind == "Tenant" else meta.get("tenant") if kind == "VirtualCluster" else None


def as_rows(rows: Iterable) -> list[tuple[str, str, dict]]:
    """Stored objects as (kind, name, document)."""
    return [(r.kind, r.name, r.document) for r in rows]


def seed(store, docs: Documents) -> list[Problem]:
    """The files' documents given to ``serve`` go into the store, each in place
    of a stored one of its kind and key (files win at start); documents
    applied through the API and not in the files stay. A virtual cluster stored
    under its bare name (before names were each tenant's) is moved to its key.
    The problems of the whole (none: written)."""
    stored = as_rows(store.objects())
    files = [(d.doc.kind, key(d.doc.kind, d.src.data), d.src.data) for d in docs.all() if d.doc.kind in KINDS]
    given = {(k, n) for k, n, _ in files}
    moved = [(k, n, d) for k, n, d in stored if n != key(k, d)]
    merged = [(k, key(k, d), d) for k, n, d in stored if (k, key(k, d)) not in given] + files
    after, problems = documents(merged)
    if not problems:
        problems = tenancy_problems(documents(stored)[0], after)
    if problems:
        return problems
    old = {(k, n): d for k, n, d in stored}
    changed = [(k, n, tenant_of(k, d), d) for k, n, d in files if old.get((k, n)) != d]
    changed += [(k, key(k, d), tenant_of(k, d), d) for k, n, d in moved if (k, key(k, d)) not in given]
    if changed or moved:
        store.put_objects(changed, [(k, n) for k, n, _ in moved])
    return []
