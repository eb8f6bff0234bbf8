"""The routes that change what a live server runs: Fleet, Tenant and
VirtualCluster documents (``PUT`` to apply, ``DELETE`` to remove) and the
agents of nodes that register themselves (register, renew the lease, leave).

Every change is checked as files are (``config.documents``), written as one
new configuration version (refused with 409 when another change came first),
and the scheduler is told at once; every server process of the database sees
it within a second.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError

from suanli.model.globs import glob_match
from suanli.model.quantities import QuantityError, format_amount, parse_duration_s
from suanli.model.work import World
from suanli.server.bodies import BodyError, read_body
from suanli.server.config import KINDS, PATHS, as_rows, documents, key, runtime_problems, tenant_of, world_of
from suanli.server.controller import internal, shown
from suanli.server.store import AgentRefused, AgentRow, Principal, Store
from suanli.spec import schema

LEASE_DEFAULT_S = 10.0
LEASE_MIN_S, LEASE_MAX_S = 1.0, 3600.0
# An agent token's registrations: a rack's worth at once, then one a second (a node
# that registers again after each loss is held down anyway, docs/serve.md).
REGISTRATIONS_PER_S, REGISTRATIONS_BURST = 1.0, 10
# A node's renewals: ``suanli agent`` sends 3 a lease; 4 a lease on average, 6 at once,
# leave room for retries and no more.
RENEWALS_PER_LEASE, RENEWALS_BURST = 4.0, 6


class ObjectOut(BaseModel):
    kind: str
    name: str
    tenant: str | None = None
    version: int = Field(description="the configuration's version after this change")
    created: bool = False
    document: dict | None = None


class AgentIn(BaseModel):
    site: str = Field(description="the site the node is at; a population's site for one of its devices")
    name: str | None = Field(None, max_length=200, pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$",
                             description="the node's name at its site (the node is SITE/NAME); none for a device")
    node: dict | None = Field(None, description="what the node has, as a node group has it (cpu, memory, arch, "
                              "accelerators, fabrics, labels, costPerHour); none for a device")
    lease: str = Field("10s", max_length=32, description="the node is lost when no renewal comes for this long")


class AgentOut(BaseModel):
    name: str
    site: str
    state: str
    lease_s: float
    expires_at: float | None = None
    was: str | None = Field(None, description="its state before this registration (new: never seen)")
    token_id: str | None = Field(None, description="the agent token that registered it (its public id; none: "
                                 "the server's executor did)")


@dataclass
class Context:
    """What the routes share with the rest of the API."""

    world: World
    store: Store
    controller: Any
    principal: Callable
    admin: Callable
    problem: Callable  # (status, title, detail, errors) -> an exception to raise
    refresh: Callable[[bool], None]


def _body(kind: str) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "description": f"a {kind} document, as in a file (apiVersion, kind, metadata, spec)",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                       "metadata": {"type": "object"}, "spec": {"type": "object"}}}}}}}


def add_object_routes(api: FastAPI, ctx: Context) -> None:
    from suanli.server.api import ADMIN_ERRORS, ERRORS, RateLimiter, problems, too_many  # (made before the API is)

    world, store, controller, fail = ctx.world, ctx.store, ctx.controller, ctx.problem

    def may_change(who: Principal, kind: str, tenant: str | None) -> None:
        if who.admin:
            return
        if kind == "VirtualCluster" and who.role == "tenant-admin" and tenant == who.tenant:
            return
        what = "its tenant's virtual clusters" if who.role == "tenant-admin" else "nothing of the configuration"
        raise fail(403, "Forbidden", f"a {who.role} token changes {what}")

    def visible(who: Principal, kind: str, tenant: str | None) -> bool:
        return who.admin or (kind != "Fleet" and tenant == who.tenant and who.role != "agent")

    def read(raw: bytes, ctype: str, kind: str, name: str, who: Principal) -> dict:
        try:
            doc = read_body(raw, ctype)
        except BodyError as exc:
            raise fail(exc.status, "Bad Request" if exc.status == 400 else "Unprocessable Content", exc.message,
                       [{"path": exc.path, "message": exc.message}] if exc.status == 422 else None) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
            raise fail(422, "Unprocessable Content", f"the body is one {kind} document",
                       [{"path": "metadata", "message": "a mapping with name is required"}])
        if doc.get("kind") != kind:
            raise fail(422, "Unprocessable Content", f"the body is one {kind} document",
                       [{"path": "kind", "message": f"expected {kind!r}, got {doc.get('kind')!r}"}])
        if doc["metadata"].get("name") != name:
            raise fail(422, "Unprocessable Content", "the document's name is the path's",
                       [{"path": "metadata.name", "message": f"expected {name!r}, got {doc['metadata'].get('name')!r}"}])
        if kind == "VirtualCluster" and not who.admin and doc["metadata"].get("tenant") is None:
            doc["metadata"]["tenant"] = who.tenant
        return doc

    def checked(rows: list[tuple[str, str, dict]], before: list[tuple[str, str, dict]]):
        docs, problems = documents(rows)
        if not problems:
            problems = runtime_problems(documents(before)[0], docs)
        if problems:
            raise fail(422, "Unprocessable Content", "the configuration would not be valid",
                       [{"path": f"{p.file}: {p.path}".rstrip(": ") if p.file else p.path, "message": p.message}
                        for p in problems])
        return docs

    def write(put, remove, version: int) -> int:
        got = store.put_objects(put, remove, expect=version)
        if got is None:
            raise fail(409, "Conflict", "the configuration changed meanwhile; read it again and retry")
        ctx.refresh(True)
        controller.poke()
        return got

    def apps_using(kind: str, doc: dict) -> list:
        """The applications a document's removal takes: its tenant's (a Tenant's
        own), or those placed in it (a virtual cluster, named as its tenant names it)."""
        tenant = tenant_of(kind, doc)
        if kind == "Tenant":
            return store.apps(tenant)
        if kind == "VirtualCluster":
            name = doc["metadata"]["name"]
            return [a for a in store.apps(tenant)
                    if ((a.document.get("spec") or {}).get("virtualCluster") or "") == name]
        return []

    def stored_key(kind: str, name: str, who: Principal, tenant: str | None, before) -> str:
        """The key of the document a path names: a virtual cluster is the caller's
        tenant's (another tenant's is as missing as none); an admin names the
        tenant (``?tenant=``), or the name is one tenant's alone."""
        if kind != "VirtualCluster":
            return name
        tenant = tenant if who.admin else who.tenant
        if tenant is not None:
            return internal(tenant, name)
        keys = [n for k, n, _ in before if k == kind and name in (n, shown(n))]
        if len(keys) > 1:
            raise fail(422, "Unprocessable Content", f"{len(keys)} tenants each have a virtual cluster {name!r}: "
                       "an admin names the tenant (?tenant=NAME)",
                       [{"path": "tenant", "message": "required: the name is not one tenant's alone"}])
        return keys[0] if keys else name

    def apply(kind: str):
        async def put(name: str, request: Request, who: Principal = Depends(ctx.principal),
                      tenant: str | None = Query(None, max_length=128, description="VirtualCluster: an admin's, "
                                                 "its tenant (or metadata.tenant); a tenant's token: its own")):
            raw = await request.body()
            return put_object(kind, name, raw, request.headers.get("content-type", ""), who, tenant)
        put.__name__ = f"apply_{PATHS[kind]}"
        put.__doc__ = (f"Apply a {kind} document (JSON, or YAML with a YAML content type): made, or changed "
                       "as it says. The whole configuration after the change is checked as files are."
                       + (" A virtual cluster's name is its tenant's own: a tenant-admin applies its tenant's "
                          "virtual cluster of that name, whatever other tenants have." if kind == "VirtualCluster"
                          else ""))
        return put

    def put_object(kind: str, name: str, raw: bytes, ctype: str, who: Principal, named: str | None = None):
        doc = read(raw, ctype, kind, name, who)
        if kind == "VirtualCluster" and who.admin and named is not None:
            if doc["metadata"].setdefault("tenant", named) != named:
                raise fail(422, "Unprocessable Content", "the document's tenant is the one the query names",
                           [{"path": "metadata.tenant", "message": f"expected {named!r} (?tenant=), "
                             f"got {doc['metadata']['tenant']!r}"}])
        tenant = tenant_of(kind, doc)
        may_change(who, kind, tenant)
        at = key(kind, doc)
        version = store.config_version()
        before = as_rows(store.objects())
        old = next((d for k, n, d in before if (k, n) == (kind, at)), None)
        after = [(k, n, d) for k, n, d in before if (k, n) != (kind, at)] + [(kind, at, doc)]
        checked(after, before)
        if kind == "VirtualCluster" and old is not None and apps_using(kind, old):
            shape = lambda d: {g["name"]: {k: v for k, v in g.items() if k not in ("count", "min", "max")}  # noqa: E731
                               for g in (d.get("spec") or {}).get("hostGroups") or []}
            was, now = shape(old), shape(doc)
            if any(g not in now or now[g] != spec for g, spec in was.items()):
                raise fail(409, "Conflict", f"virtual cluster {name!r} has applications: while it has, its host "
                           "groups may change their count, min and max, and new groups may come, but none may go "
                           "or change its hosts; delete its applications first")
        got = write([(kind, at, tenant, doc)], (), version)
        return JSONResponse({"kind": kind, "name": name, "tenant": tenant, "version": got, "created": old is None},
                            status_code=201 if old is None else 200)

    def remove(kind: str):
        def delete(name: str, who: Principal = Depends(ctx.principal),
                   cascade: bool = Query(False, description="Tenant, VirtualCluster: delete their applications "
                                         "too (without it, one that has applications is refused)"),
                   tenant: str | None = Query(None, max_length=128, description="VirtualCluster: an admin's, its "
                                              "tenant (needed when tenants have one of that name each)")):
            return delete_object(kind, name, who, cascade, tenant)
        delete.__name__ = f"delete_{PATHS[kind]}"
        delete.__doc__ = (f"Remove a {kind}. A tenant's virtual clusters go with it, and its tokens are revoked. "
                          "Whatever has applications is refused without ?cascade=true. What goes with it goes in "
                          "the same transaction: all of it, or (a crash meanwhile) none.")
        return delete

    def delete_object(kind: str, name: str, who: Principal, cascade: bool, named: str | None = None):
        version = store.config_version()
        before = as_rows(store.objects())
        at = stored_key(kind, name, who, named, before)
        old = next((d for k, n, d in before if (k, n) == (kind, at)), None)
        if old is None or not visible(who, kind, tenant_of(kind, old)):
            raise fail(404, "Not Found", f"no {kind} {name!r}")
        may_change(who, kind, tenant_of(kind, old))
        gone = {(kind, at)}
        if kind == "Tenant":
            gone |= {(k, n) for k, n, d in before if k == "VirtualCluster" and tenant_of(k, d) == name}
        after = [(k, n, d) for k, n, d in before if (k, n) not in gone]
        checked(after, before)
        apps = apps_using(kind, old)
        if apps and not cascade:
            raise fail(409, "Conflict", f"{kind} {name!r} has {len(apps)} applications ({', '.join(a.name for a in apps[:5])}"
                       f"{', ...' if len(apps) > 5 else ''}); delete them first, or add ?cascade=true")
        done = store.remove_objects(sorted(gone), version, apps=[a.id for a in apps],
                                    tenant=name if kind == "Tenant" else None)
        if done is None:
            raise fail(409, "Conflict", "the configuration changed meanwhile; read it again and retry")
        for tenant, app, app_id in done.apps:  # the scheduler stops them before it takes the configuration
            controller.delete(tenant, app, app_id)
        ctx.refresh(True)
        controller.poke()
        return Response(status_code=204)

    def listing(kind: str):
        def get_all(who: Principal = Depends(ctx.principal)):
            return [{"kind": r.kind, "name": shown(r.name) if kind == "VirtualCluster" else r.name,
                     "tenant": r.tenant, "version": r.version, "document": r.document}
                    for r in store.objects() if r.kind == kind and visible(who, kind, r.tenant)]
        get_all.__name__ = f"list_{PATHS[kind]}_documents"
        get_all.__doc__ = f"The {kind} documents the server runs, as last applied."
        return get_all

    for kind in KINDS:
        path = PATHS[kind] + ("/{name:path}" if kind == "VirtualCluster" else "/{name}")  # a VC's name has a /
        api.put(f"/v1/{path}", response_model=ObjectOut, summary=f"Apply a {kind}", openapi_extra=_body(kind),
                responses={**ERRORS, 201: {"model": ObjectOut, "description": "made"}, **problems(400, 403, 409)}
                )(apply(kind))
        api.delete(f"/v1/{path}", status_code=204, summary=f"Remove a {kind}",
                   responses={**ERRORS, **problems(403, 409)})(remove(kind))
        api.get(f"/v1/config/{PATHS[kind]}", response_model=list[ObjectOut], summary=f"{kind} documents",
                responses=ERRORS)(listing(kind))

    # -------------------------------------------------------- agents

    registrations = RateLimiter(REGISTRATIONS_PER_S, REGISTRATIONS_BURST)  # per agent token
    renewals = RateLimiter(1.0, RENEWALS_BURST, keys=100_000)  # per node, each at RENEWALS_PER_LEASE per its lease
    bounds: dict[str, Any] = {"version": None, "sites": {}}  # agent_bounds of the configuration's version

    def agent_only(who: Principal) -> None:
        if who.role not in ("admin", "agent"):
            raise fail(403, "Forbidden", "this needs an agent or admin token")

    def owned(name: str, who: Principal) -> AgentRow:
        return agent_owned(store, fail, name, who)

    def in_scope(who: Principal, site: str, name: str | None, node: str) -> None:
        """403 unless an agent token's scope lets it register ``node``. A token from
        before scopes registers its own nodes again (after a loss), nothing new."""
        scope = who.scope
        if scope is None:
            row = store.agent(node)
            if row is None or row.state == "left" or row.token_id != who.token_id:
                raise fail(403, "Forbidden", f"agent token {who.token_id} has no scope (it was made before agent "
                           "tokens had one): it renews and ends the nodes it registered, and registers no new one; "
                           "mint a scoped one (suanli token create --role agent --sites ...)")
            return
        if not any(glob_match(g, site) for g in scope.sites):
            raise fail(403, "Forbidden", f"agent token {who.token_id} registers at sites {list(scope.sites)}, "
                       f"not at {site!r} (its scope: {scope})")
        if name is not None and not any(glob_match(g, name) for g in scope.names):
            raise fail(403, "Forbidden", f"agent token {who.token_id} registers nodes named {list(scope.names)}, "
                       f"not {name!r} (its scope: {scope})")

    def site_bound(site: str) -> "AgentBound | None":
        version = store.config_version()
        if bounds["version"] != version:
            docs, problems = documents(as_rows(store.objects()))
            if not problems:
                bounds.update(version=version, sites=agent_bounds(docs))
        return bounds["sites"].get(site)

    def checked_claim(site: str, name: str, spec: dict, bound: "AgentBound | None") -> None:
        """A 422 unless what a node says it has is a valid node, of accelerator kinds
        the server knows, within its site's bound."""
        try:
            group = schema.NodeGroupSpec.model_validate({**spec, "name": name, "count": 1})
        except ValidationError as exc:
            raise fail(422, "Unprocessable Content", "the node is not valid",
                       [{"path": "node." + ".".join(str(x) for x in e["loc"]), "message": e["msg"]}
                        for e in exc.errors()]) from None
        known = set(world.fleet.kinds.names)
        for i, a in enumerate(group.accelerators):
            if a.kind not in known:
                raise fail(422, "Unprocessable Content", f"accelerator kind {a.kind!r} is new to the server: a "
                           "kind is a resource of quotas and placements, so a new one needs a restart",
                           [{"path": f"node.accelerators[{i}].kind", "message": f"kinds are {sorted(known)}"}])
        claimed = claim_problems(site, group, bound)
        if claimed:
            raise fail(422, "Unprocessable Content", f"the node claims more than site {site} allows an agent's node",
                       claimed)

    def claim_problems(site: str, group: schema.NodeGroupSpec, bound: "AgentBound | None") -> list[dict]:
        """What a node claims past its site's bound, one entry per field."""
        if bound is None or bound.cpu_milli is None:
            return [{"path": "site", "message": f"site {site} has no bound for agents' nodes (the fleet has no node "
                     "group): the site's agents.node in its Fleet document says what one may claim"}]

        def past(path: str, field: str, most: str, got: str) -> dict:
            whence = f"{bound.source}.{field}" if bound.declared else bound.source
            return {"path": path, "message": f"at most {most} at site {site} ({whence}), got {got}"}

        out = []
        if group.cpu > bound.cpu_milli:
            out.append(past("node.cpu", "cpu", format_amount(0, bound.cpu_milli), format_amount(0, group.cpu)))
        if group.memory > bound.mem_mib:
            out.append(past("node.memory", "memory", format_amount(1, bound.mem_mib), format_amount(1, group.memory)))
        for i, a in enumerate(group.accelerators):
            most = bound.devices.get(a.kind, 0)
            if a.count > most:
                out.append(past(f"node.accelerators[{i}].count", "accelerators", f"{most} {a.kind}", str(a.count)))
        return out

    @api.post("/v1/agents", status_code=201, response_model=AgentOut, responses={**ERRORS, **problems(400, 403, 409)})
    def register_agent(body: AgentIn, who: Principal = Depends(ctx.principal)):
        """A node registers itself (again, after a loss): it is added to the fleet, or
        found again, and is lost when ``lease`` passes without a renewal. An agent
        token registers within its scope, and nodes of its own."""
        agent_only(who)
        if who.role == "agent":
            wait = registrations.allow(who.token_id or "")
            if wait:
                raise too_many(wait, f"at most {REGISTRATIONS_PER_S:g} registrations per second per agent token "
                               f"(bursts of {REGISTRATIONS_BURST})")
        try:
            lease_s = parse_duration_s(body.lease)
        except QuantityError as exc:
            raise fail(422, "Unprocessable Content", "the lease is not a duration",
                       [{"path": "lease", "message": str(exc)}]) from None
        if not LEASE_MIN_S <= lease_s <= LEASE_MAX_S:
            raise fail(422, "Unprocessable Content", "the lease is out of bounds",
                       [{"path": "lease", "message": f"between {LEASE_MIN_S:g}s and {LEASE_MAX_S:g}s, got {lease_s:g}s"}])
        fleet = world.fleet
        table = fleet.site_table
        at = table.names.get(body.site)
        if at < 0:
            raise fail(422, "Unprocessable Content", f"no site {body.site!r} in the fleet",
                       [{"path": "site", "message": "an agent registers at a site of the fleet (apply the Fleet "
                         "document with the site first)"}])
        device = table.population_of[at] >= 0
        bound = None
        if device:
            name, spec = body.site, {}
            if body.name is not None or body.node is not None:
                raise fail(422, "Unprocessable Content", f"{body.site!r} is a device of population "
                           f"{table.population_names[table.population_of[at]]!r}: its nodes are the population's",
                           [{"path": "node" if body.node is not None else "name", "message": "not for a device"}])
            if who.role == "agent":
                in_scope(who, body.site, None, name)
        else:
            if body.name is None or body.node is None:
                raise fail(422, "Unprocessable Content", "a node registers with its name and what it has",
                           [{"path": "name" if body.name is None else "node", "message": "required"}])
            name = f"{body.site}/{body.name}"
            if who.role == "agent":
                in_scope(who, body.site, body.name, name)
            spec, bound = dict(body.node), site_bound(body.site)
            checked_claim(body.site, body.name, spec, bound)
            if _listed_node(fleet, name):
                raise fail(409, "Conflict", f"node {name!r} is one of the Fleet document's; an agent's name is its own")
        try:
            was = store.register_agent(name, body.site, spec, lease_s, who.token_id, scope=who.scope,
                                       site_nodes=None if bound is None else bound.nodes)
        except AgentRefused as exc:
            raise fail(exc.status, "Forbidden" if exc.status == 403 else "Conflict", exc.message) from None
        controller.poke()
        return JSONResponse({"name": name, "site": body.site, "state": "ready", "lease_s": lease_s,
                             "expires_at": time.time() + lease_s, "was": was}, status_code=201)

    @api.put("/v1/agents/{name:path}/lease", response_model=AgentOut, responses={**ERRORS, **problems(403, 409)})
    def renew_agent(name: str, who: Principal = Depends(ctx.principal)):
        """A heartbeat: the lease runs again from now. A lost or departed agent
        answers 409 and registers again. Only the token that registered the node
        (or an admin) renews it."""
        row = owned(name, who)
        wait = renewals.allow(name, rate=RENEWALS_PER_LEASE / row.lease_s)
        if wait:
            raise too_many(wait, f"at most {RENEWALS_PER_LEASE:g} renewals per lease of a node "
                           f"({row.lease_s:g}s; bursts of {RENEWALS_BURST})")
        state = store.renew_agent(name)
        if state is None:
            raise fail(404, "Not Found", f"no agent {name!r}")
        if state != "ready":
            raise fail(409, "Conflict", f"agent {name!r} is {state}: register again")
        return {"name": name, "site": row.site, "state": state, "lease_s": row.lease_s,
                "expires_at": time.time() + row.lease_s}

    @api.delete("/v1/agents/{name:path}", status_code=204, responses={**ERRORS, **problems(403)})
    def leave_agent(name: str, who: Principal = Depends(ctx.principal)):
        """The agent leaves: its node is removed from the fleet (its work moves, as
        off a failed node); a device goes offline. Only the token that registered
        the node (or an admin) ends it."""
        owned(name, who)
        store.end_agents([name], "left")
        controller.poke()
        return Response(status_code=204)

    @api.get("/v1/agents", response_model=list[AgentOut], responses=ADMIN_ERRORS)
    def list_agents(who: Principal = Depends(ctx.admin)):
        """Every agent with its state (ready, lost, left), lease and the token that registered it."""
        return [{"name": a.name, "site": a.site, "state": a.state, "lease_s": a.lease_s, "expires_at": a.expires_at,
                 "token_id": a.token_id} for a in store.agents()]


def agent_owned(store: Store, fail: Callable, name: str, who: Principal) -> AgentRow:
    """Node ``name``'s agent, when ``who`` may act for it: the token that
    registered it, or an admin."""
    if who.role not in ("admin", "agent"):
        raise fail(403, "Forbidden", "this needs an agent or admin token")
    row = store.agent(name)
    if row is None:
        raise fail(404, "Not Found", f"no agent {name!r}")
    if not who.admin and row.token_id != who.token_id:
        raise fail(403, "Forbidden", f"node {name!r} was registered by another agent token")
    return row


@dataclass(frozen=True)
class AgentBound:
    """What one agent's node may claim at a site, and how many agents' nodes the
    site takes (None: no bound but the tokens')."""

    cpu_milli: int | None  # None: nothing says (the fleet has no node group), so no node registers there
    mem_mib: int = 0
    devices: dict[str, int] = dataclasses.field(default_factory=dict)  # accelerator kind -> count
    source: str = ""  # whence the bound, for messages
    declared: bool = False  # written in the site's ``agents.node`` (``source`` is its path)
    nodes: int | None = None


def agent_bounds(docs) -> dict[str, AgentBound]:
    """Each listed site's bound on agents' nodes: its ``agents`` as the Fleet
    document says; else its largest node group (the most of each resource
    that a group's node has), or for a site without node groups the fleet's."""
    def largest(groups: list, source: str) -> AgentBound | None:
        if not groups:
            return None
        devices: dict[str, int] = {}
        for g in groups:
            for a in g.accelerators:
                devices[a.kind] = max(devices.get(a.kind, 0), a.count)
        return AgentBound(max(g.cpu for g in groups), max(g.memory for g in groups), devices, source)

    every = [g for fl in docs.fleets for s in fl.doc.spec.sites for g in s.node_groups] + \
        [g for fl in docs.fleets for p in fl.doc.spec.populations for g in p.node_groups]
    fleet_wide = largest(every, "the largest of the fleet's node groups; the site has none") or AgentBound(None)
    out: dict[str, AgentBound] = {}
    for fl in docs.fleets:
        for i, site in enumerate(fl.doc.spec.sites):
            bound = largest(site.node_groups, "the largest of the site's node groups") or fleet_wide
            agents = site.agents
            if agents is not None and agents.node is not None:
                node = agents.node
                bound = AgentBound(node.cpu, node.memory, {a.kind: a.count for a in node.accelerators},
                                   f"Fleet {fl.name}: spec.sites[{i}].agents.node", declared=True)
            out[site.name] = dataclasses.replace(bound, nodes=None if agents is None else agents.nodes)
    return out


def _listed_node(fleet, name: str) -> bool:
    """A node of the fleet's documents (not an agent's own)."""
    try:
        node = fleet.node_by_name(name)
    except KeyError:
        return False
    return not fleet.groups[int(fleet.node_group[node])].single


def refresher(world: World, store: Store, every_s: float = 1.0) -> Callable[[bool], None]:
    """A function that brings ``world`` (in place) to the store's configuration:
    at once when forced, else at most once every ``every_s``."""
    seen = {"version": store.config_version(), "at": time.monotonic()}

    def refresh(force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - seen["at"] < every_s:
            return
        seen["at"] = now
        version = store.config_version()
        if version == seen["version"]:
            return
        docs, problems = documents(as_rows(store.objects()))
        if problems:
            return
        fresh = world_of(docs)
        for mine, new in ((world.tenants, fresh.tenants), (world.vcs, fresh.vcs)):
            mine.update(new)
            for name in [n for n in mine if n not in new]:
                del mine[name]
        object.__setattr__(world, "fleet", fresh.fleet)
        seen["version"] = version

    return refresh
