"""Turn validated documents into the model (``World``)."""

from __future__ import annotations

import os
import zlib
from typing import Mapping, Sequence

import numpy as np

from suanli.model import quantities as q
from suanli.model.fleet import DeviceType, Fleet, Link, LinkArrays, NodeGroup
from suanli.model.sites import NamePattern, SiteTable, attach_weight, selects
from suanli.model.work import (
    AcceleratorRequest,
    Application,
    Component,
    HostGroup,
    Near,
    Probe,
    Resources,
    RunCommand,
    Selector,
    Tenant,
    VirtualCluster,
    World,
    app_for_site,
    default_vc_name,
    site_application,
)
from suanli.spec import schema
from suanli.spec.loader import Documents, load_documents, problem_at
from suanli.spec.problems import Problem, SpecError


def load_world(paths: Sequence[str | os.PathLike[str]], populations: Mapping[str, str] | None = None,
               strict: bool = False) -> World:
    """Load files and build the world; raise SpecError with every problem.
    ``populations``: sizes in place of the documents' (``--population``);
    ``strict``: warnings are problems too (the world's ``warnings`` otherwise)."""
    docs = load_documents(paths, populations=populations, strict=strict)
    trace_nodes = any(tr.format == "openb" and tr.nodes for sc in docs.scenarios for tr in sc.doc.spec.traces)
    if not docs.fleets and not trace_nodes:
        files = ", ".join(docs.files) or "(none)"
        raise SpecError([Problem(files, "no Fleet document among the files; a world needs sites and nodes")])
    return build_world(docs)


def build_fleet(docs: Documents) -> Fleet:
    table = SiteTable()
    groups: list[NodeGroup] = []
    for fl in docs.fleets:
        for s in fl.doc.spec.sites:
            site = table.add(s.name, s.tier, s.region, s.intra_site_rtt_ms, dict(s.labels), s.transit)
            for g in s.node_groups:
                groups.append(_group(len(groups), site, g))
    _add_trace_nodes(docs, table, groups)
    index = table.names
    links = [
        Link(index[ln.between[0]], index[ln.between[1]], ln.rtt_ms, ln.bandwidth)
        for fl in docs.fleets
        for ln in fl.doc.spec.links
    ]
    listed = list(table.listed)  # the sites a population may attach to: those listed, not other populations'
    parts = [LinkArrays.of(links)]
    for fl in docs.fleets:
        for pop in fl.doc.spec.populations:
            parts.append(_add_population(table, groups, pop, listed))
    fleet = Fleet(table.freeze(), groups, LinkArrays.concat(parts))
    fleet.attach_rules = {pop.name: pop.attach.to for fl in docs.fleets for pop in fl.doc.spec.populations
                          if pop.attach is not None}
    return fleet


def _group(index: int, site: int, g: schema.NodeGroupSpec, site_count: int = 1) -> NodeGroup:
    devices = tuple(DeviceType(d.kind, d.model, d.count, d.memory, d.shareable, d.cdi) for d in g.accelerators)
    fabrics = {k: v for k, v in g.fabrics.model_dump().items() if v is not None}
    return NodeGroup(index, site, g.name, g.count, g.arch, g.cpu, g.memory, devices, fabrics, dict(g.labels),
                     g.cost_per_hour, site_count)


def _add_population(table: SiteTable, groups: list[NodeGroup], pop: schema.PopulationSpec,
                    listed: list[tuple[int, str, str, str, dict]]) -> LinkArrays:
    """The population's sites, its template's node groups (one per template
    group, spanning every site) and the links ``attach`` draws, as arrays.
    The draws depend on the population's name and seed only."""
    n = pop.count
    rng = np.random.default_rng([pop.seed, zlib.crc32(pop.name.encode())])
    at = pop.attach
    homes = np.zeros((n, 0), np.int64)
    if at is not None:
        cand = [site for site in listed if selects(at.to, *site[1:])]
        p = np.array([attach_weight(at.weights, name) for _, name, *_ in cand])
        p /= p.sum()
        pick = np.empty((n, at.homes), np.int64)  # indices into cand
        pick[:, 0] = rng.choice(len(cand), size=n, p=p)
        for h in range(1, at.homes):  # distinct homes: redraw the ones that repeat an earlier home
            col = rng.choice(len(cand), size=n, p=p)
            clash = (col[:, None] == pick[:, :h]).any(axis=1)
            while clash.any():
                col[clash] = rng.choice(len(cand), size=int(clash.sum()), p=p)
                clash = (col[:, None] == pick[:, :h]).any(axis=1)
            pick[:, h] = col
        homes = np.array([i for i, *_ in cand], np.int64)[pick]
    if pop.region is not None:
        regions = np.full(n, table.region_code(pop.region), np.int32)
    elif at is not None:  # the region of the first home
        regions = np.array([table.region_code(region) for _, _, _, region, _ in cand], np.int32)[pick[:, 0]]
    else:
        regions = np.full(n, table.region_code(""), np.int32)
    first = table.add_population(pop.name, NamePattern.parse(pop.sites), n, pop.tier, regions, pop.intra_site_rtt_ms,
                                 dict(pop.labels), pop.private, pop.transit)
    for g in pop.node_groups:
        groups.append(_group(len(groups), first, g, site_count=n))
    if at is None:
        return LinkArrays.of(())
    k = homes.shape[1]
    a = np.repeat(np.arange(first, first + n, dtype=np.int64), k)
    rtt = at.rtt_ms.draw(rng, n * k, q.RTT_MS)
    bw = at.bandwidth.draw(rng, n * k, q.BANDWIDTH)
    return LinkArrays(a, homes.reshape(-1), rtt, bw)


def scenario_dir(docs: Documents) -> str:
    """Trace paths are relative to the scenario's file."""
    return os.path.dirname(docs.scenarios[0].src.file) if docs.scenarios else "."


def _add_trace_nodes(docs: Documents, table: SiteTable, groups: list[NodeGroup]) -> None:
    """An openb trace's node list becomes the nodes of a site (``site``, default
    ``openb``): a new cloud site, or more node groups of an existing one."""
    from suanli.sim.traces import TraceError, load_openb_nodes

    if not docs.scenarios:
        return
    sc = docs.scenarios[0]
    for i, tr in enumerate(sc.doc.spec.traces):
        if tr.format != "openb" or tr.nodes is None:
            continue
        try:
            shapes = load_openb_nodes(os.path.join(scenario_dir(docs), tr.nodes)).groups()
        except TraceError as exc:
            raise SpecError([problem_at(sc.src, ("spec", "traces", i, "nodes"), str(exc))]) from None
        name = tr.site or "openb"
        site = table.names.get(name)
        if site < 0:
            site = table.add(name, "cloud")
        for shape in shapes:
            devices = (DeviceType("gpu", shape.model, shape.gpus, None, True),) if shape.gpus else ()
            groups.append(NodeGroup(len(groups), site, shape.name, shape.count, "x86_64",
                                    shape.cpu_milli, shape.mem_mib, devices))


def resources_of(spec: schema.ResourcesSpec) -> Resources:
    accels = tuple(
        AcceleratorRequest(a.kind, tuple(a.model) if a.model else None, a.count) for a in spec.accelerators
    )
    return Resources(spec.cpu, spec.memory, accels, spec.whole)


def selector_of(sel: schema.SelectorSpec) -> Selector:
    return Selector(tuple(sel.tier) if sel.tier else None, tuple(sel.names) if sel.names else None,
                    tuple(sel.regions) if sel.regions else None, dict(sel.labels))


def _near(spec: schema.NearSpec | None, site: str | None = None) -> Near | None:
    return None if spec is None else Near(_site(spec.site, site), spec.max_rtt_ms)


def _site(ref: str | None, site: str | None) -> str | None:
    """A site field as written, with ``{site}`` standing for ``site``."""
    return site if ref == schema.EACH_SITE else ref


def build_applications(name: str, tenant: str, spec: schema.ApplicationSpec, fleet: Fleet) -> list[Application]:
    """The document's application, or with ``each`` one per site of the
    population, named APP.SITE (each kept as its site's number, the rest held
    once by its prototype's class: ``SiteApplication``)."""
    if spec.each is None:
        return [build_application(name, tenant, spec)]
    proto = build_application(name, tenant, spec, site=schema.EACH_SITE, template=name)
    cls = site_application(proto, fleet.site_table.names)
    return [app_for_site(cls, s) for s in fleet.site_table.population_range(spec.each)]


def build_application(name: str, tenant: str, spec: schema.ApplicationSpec, site: str | None = None,
                      template: str | None = None) -> Application:
    """``site``: what ``{site}`` stands for (an application made with ``each``)."""
    comps = []
    for c in spec.components:
        comps.append(
            Component(
                app=name,
                name=c.name,
                lifetime=c.lifetime,
                size=max(c.size, c.gang.max_size or 0) if c.gang is not None else c.size,
                resources=resources_of(c.resources),
                priority=spec.priority if c.priority is None else c.priority,
                preemptible=spec.preemptible if c.preemptible is None else c.preemptible,
                gang=c.gang is not None or c.decompose is not None,
                min_size=c.gang.min_size if c.gang is not None else
                (c.decompose.min_parallel if c.decompose is not None else None),
                parts=c.decompose is not None,
                coupling=c.coupling,
                work_s=c.work if c.scaling.profile is None else _speedup(c).work(),
                duration_s=c.duration,
                time_limit_s=c.time_limit,
                efficiency=c.scaling.efficiency,
                scaling=_speedup(c),
                max_size=c.gang.max_size if c.gang is not None else None,
                start_size=c.gang.size if c.gang is not None and (c.gang.max_size or 0) > c.gang.size else None,
                resize_cost_s=c.gang.resize_cost if c.gang is not None else 0.0,
                stateful=c.state.kind == "stateful",
                state_mib=c.state.size,
                checkpoint_every_s=c.state.checkpoint_every,
                arch=_archs(c),
                data_source=_site(c.data.source, site) if c.data else None,
                data_sink=_site(c.data.sink, site) if c.data else None,
                near=_near(c.near, site),
                affinity=(c.affinity.group, c.affinity.scope) if c.affinity else None,
                anti_affinity=(c.anti_affinity.group, c.anti_affinity.scope) if c.anti_affinity else None,
                run=_run(c),
                selector=selector_of(c.sites) if c.sites is not None else None,
            )
        )
    vc = spec.virtual_cluster or default_vc_name(tenant)
    return Application(name, tenant, vc, spec.priority, spec.preemptible, tuple(comps), template)


def _speedup(c: schema.ComponentSpec):
    """The component's speed-up model (None: the formula with its efficiency)."""
    from suanli.model import speedup

    sc = c.scaling
    if c.decompose is not None:
        return speedup.Parts(c.decompose.parts)
    if sc.model == "table":
        return speedup.Table(tuple(sc.table.items()))
    if sc.model == "amdahl":
        comm = sc.communication
        return speedup.Amdahl(sc.serial_fraction or 0.0, comm.step if comm else 1.0,
                              tuple(sorted(comm.per_step.items())) if comm else ())
    if sc.model == "profile":
        return speedup.Measured(sc.profile, sc.batch_size)
    return None


def _run(c: schema.ComponentSpec) -> RunCommand | None:
    if c.run is None:
        return None
    r = c.run
    restart = r.restart or ("always" if c.lifetime == "service" else "never")
    return RunCommand(tuple(r.command or ()), tuple(sorted(r.env.items())), restart, r.max_restarts, r.stop_grace,
                      r.image, tuple(sorted(r.images.items())) if r.images is not None else None,
                      _probe(r.readiness), _probe(r.liveness))


def _probe(p: schema.ProbeSpec | None) -> Probe | None:
    if p is None:
        return None
    kind = "exec" if p.exec is not None else "http" if p.http is not None else "tcp"
    port = p.http.port if p.http is not None else p.tcp.port if p.tcp is not None else 0
    return Probe(kind, tuple(p.exec or ()), port, p.http.path if p.http is not None else "/", p.initial_delay,
                 p.period, p.timeout, p.failure_threshold, p.success_threshold)


def _archs(c: schema.ComponentSpec) -> tuple[str, ...] | None:
    """The archs a component's tasks may run on: its platform's, and of those
    the ones its image has a variant for (``run.images``)."""
    archs = tuple(c.platform.arch) if c.platform else None
    if c.run is not None and c.run.images is not None:
        archs = tuple(a for a in (archs or sorted(c.run.images)) if a in c.run.images)
    return archs


def _check_drawn_links(docs: Documents, fleet: Fleet) -> None:
    """A scenario's link events that name a population's site must name a
    link its attachment drew (known only once the fleet is built)."""
    if not docs.scenarios:
        return
    sc = docs.scenarios[0]
    la, names = fleet.link_arrays, fleet.site_table.names
    listed = fleet.site_table.population_of < 0
    problems = []
    for i, ev in enumerate(sc.doc.spec.events):
        if ev.kind not in ("linkDown", "linkUp"):
            continue
        a, b = (names.get(e) for e in ev.between)
        if a < 0 or b < 0 or (listed[a] and listed[b]):
            continue
        if not (((la.a == a) & (la.b == b)) | ((la.a == b) & (la.b == a))).any():
            dev = a if not listed[a] else b
            ends = sorted({names.name(int(x)) for x in np.concatenate([la.b[la.a == dev], la.a[la.b == dev]])})
            problems.append(problem_at(sc.src, ("spec", "events", i, "between"),
                                       f"no link between {ev.between[0]!r} and {ev.between[1]!r}; "
                                       f"{names.name(dev)} is linked to {', '.join(ends) or 'no site'}"))
    if problems:
        raise SpecError(problems)


def tenant_of(name: str, spec) -> Tenant:
    """A tenant as the scheduler reads it, from its document's spec."""
    return Tenant(name, spec.weight, dict(spec.quota or {}), tuple(spec.allowed_sites), spec.max_priority,
                  spec.cohort, None if spec.borrowing_limit is None else dict(spec.borrowing_limit),
                  dict(spec.lending_limit or {}), spec.reclaim_within_cohort)


def build_world(docs: Documents) -> World:
    fleet = build_fleet(docs)
    _check_drawn_links(docs, fleet)
    tenants = {
        t.name: tenant_of(t.name, t.doc.spec)
        for t in docs.tenants
    }
    vcs: dict[str, VirtualCluster] = {}
    for v in docs.virtual_clusters:
        groups = []
        for g in v.doc.spec.host_groups:
            sel = g.sites
            groups.append(
                HostGroup(
                    name=g.name,
                    resources=resources_of(g.resources),
                    count=g.count,
                    min=g.min or 0,
                    max=g.max,
                    coupling=g.coupling,
                    selector=selector_of(sel),
                    near=_near(g.near),
                    arch=tuple(g.platform.arch) if g.platform else None,
                )
            )
        vcs[v.name] = VirtualCluster(v.name, v.doc.metadata.tenant, tuple(groups), v.doc.spec.autoscale.scale_down_after)
    apps = tuple(app for a in docs.applications
                 for app in build_applications(a.name, a.doc.metadata.tenant, a.doc.spec, fleet))
    for name in tenants:  # every tenant has a default VC (generated work may use it later)
        vcs[default_vc_name(name)] = VirtualCluster(default_vc_name(name), name, (), default=True)
    scenario = docs.scenarios[0].doc if docs.scenarios else None
    seed = scenario.spec.seed if scenario is not None else 0
    return World(fleet, tenants, vcs, apps, seed, scenario, scenario_dir(docs), tuple(docs.warnings))
