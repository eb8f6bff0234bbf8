"""Turn validated documents into the model (``World``)."""

from __future__ import annotations

import os
from typing import Sequence

from suanli.model.fleet import DeviceType, Fleet, Link, NodeGroup, Site
from suanli.model.work import (
    AcceleratorRequest,
    Application,
    Component,
    HostGroup,
    Near,
    Resources,
    RunCommand,
    Selector,
    Tenant,
    VirtualCluster,
    World,
    default_vc_name,
)
from suanli.spec import schema
from suanli.spec.loader import Documents, load_documents, problem_at
from suanli.spec.problems import Problem, SpecError


def load_world(paths: Sequence[str | os.PathLike[str]]) -> World:
    """Load files and build the world; raise SpecError with every problem."""
    docs = load_documents(paths)
    trace_nodes = any(tr.format == "openb" and tr.nodes for sc in docs.scenarios for tr in sc.doc.spec.traces)
    if not docs.fleets and not trace_nodes:
        files = ", ".join(docs.files) or "(none)"
        raise SpecError([Problem(files, "no Fleet document among the files; a world needs sites and nodes")])
    return build_world(docs)


def build_fleet(docs: Documents) -> Fleet:
    sites: list[Site] = []
    groups: list[NodeGroup] = []
    for fl in docs.fleets:
        for s in fl.doc.spec.sites:
            site = Site(len(sites), s.name, s.tier, s.region, s.intra_site_rtt_ms, dict(s.labels))
            sites.append(site)
            for g in s.node_groups:
                devices = tuple(DeviceType(d.kind, d.model, d.count, d.memory, d.shareable) for d in g.accelerators)
                fabrics = {k: v for k, v in g.fabrics.model_dump().items() if v is not None}
                groups.append(
                    NodeGroup(len(groups), site.index, g.name, g.count, g.arch, g.cpu, g.memory,
                              devices, fabrics, dict(g.labels), g.cost_per_hour)
                )
    _add_trace_nodes(docs, sites, groups)
    index = {s.name: s.index for s in sites}
    links = [
        Link(index[ln.between[0]], index[ln.between[1]], ln.rtt_ms, ln.bandwidth)
        for fl in docs.fleets
        for ln in fl.doc.spec.links
    ]
    return Fleet(sites, groups, links)


def scenario_dir(docs: Documents) -> str:
    """Trace paths are relative to the scenario's file."""
    return os.path.dirname(docs.scenarios[0].src.file) if docs.scenarios else "."


def _add_trace_nodes(docs: Documents, sites: list[Site], groups: list[NodeGroup]) -> None:
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
        site = next((x for x in sites if x.name == name), None)
        if site is None:
            site = Site(len(sites), name, "cloud", "", 0.2, {})
            sites.append(site)
        for shape in shapes:
            devices = (DeviceType("gpu", shape.model, shape.gpus, None, True),) if shape.gpus else ()
            groups.append(NodeGroup(len(groups), site.index, shape.name, shape.count, "x86_64",
                                    shape.cpu_milli, shape.mem_mib, devices))


def resources_of(spec: schema.ResourcesSpec) -> Resources:
    accels = tuple(
        AcceleratorRequest(a.kind, tuple(a.model) if a.model else None, a.count) for a in spec.accelerators
    )
    return Resources(spec.cpu, spec.memory, accels, spec.whole)


def _near(spec: schema.NearSpec | None) -> Near | None:
    return None if spec is None else Near(spec.site, spec.max_rtt_ms)


def build_application(name: str, tenant: str, spec: schema.ApplicationSpec) -> Application:
    comps = []
    for c in spec.components:
        comps.append(
            Component(
                app=name,
                name=c.name,
                lifetime=c.lifetime,
                size=c.size,
                resources=resources_of(c.resources),
                priority=spec.priority if c.priority is None else c.priority,
                preemptible=spec.preemptible if c.preemptible is None else c.preemptible,
                gang=c.gang is not None,
                min_size=c.gang.min_size if c.gang is not None else None,
                coupling=c.coupling,
                work_s=c.work,
                duration_s=c.duration,
                efficiency=c.scaling.efficiency,
                stateful=c.state.kind == "stateful",
                state_mib=c.state.size,
                checkpoint_every_s=c.state.checkpoint_every,
                arch=tuple(c.platform.arch) if c.platform else None,
                data_source=c.data.source if c.data else None,
                data_sink=c.data.sink if c.data else None,
                near=_near(c.near),
                affinity=(c.affinity.group, c.affinity.scope) if c.affinity else None,
                anti_affinity=(c.anti_affinity.group, c.anti_affinity.scope) if c.anti_affinity else None,
                run=_run(c),
            )
        )
    vc = spec.virtual_cluster or default_vc_name(tenant)
    return Application(name, tenant, vc, spec.priority, spec.preemptible, tuple(comps))


def _run(c: schema.ComponentSpec) -> RunCommand | None:
    if c.run is None:
        return None
    r = c.run
    restart = r.restart or ("always" if c.lifetime == "service" else "never")
    return RunCommand(tuple(r.command), tuple(sorted(r.env.items())), restart, r.max_restarts, r.stop_grace)


def build_world(docs: Documents) -> World:
    fleet = build_fleet(docs)
    tenants = {
        t.name: Tenant(t.name, t.doc.spec.weight, dict(t.doc.spec.quota or {}), tuple(t.doc.spec.allowed_sites),
                       t.doc.spec.max_priority)
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
                    selector=Selector(
                        tuple(sel.tier) if sel.tier else None,
                        tuple(sel.names) if sel.names else None,
                        tuple(sel.regions) if sel.regions else None,
                        dict(sel.labels),
                    ),
                    near=_near(g.near),
                    arch=tuple(g.platform.arch) if g.platform else None,
                )
            )
        vcs[v.name] = VirtualCluster(v.name, v.doc.metadata.tenant, tuple(groups), v.doc.spec.autoscale.scale_down_after)
    apps = tuple(build_application(a.name, a.doc.metadata.tenant, a.doc.spec) for a in docs.applications)
    for name in tenants:  # every tenant has a default VC (generated work may use it later)
        vcs[default_vc_name(name)] = VirtualCluster(default_vc_name(name), name, (), default=True)
    scenario = docs.scenarios[0].doc if docs.scenarios else None
    seed = scenario.spec.seed if scenario is not None else 0
    return World(fleet, tenants, vcs, apps, seed, scenario, scenario_dir(docs))
