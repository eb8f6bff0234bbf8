"""The REST API of ``suanli serve`` (FastAPI; the OpenAPI document at ``/openapi.json``, pages at ``/docs``).

Every route under ``/v1`` needs a bearer token. A tenant's token sees and
changes only the tenant's own objects: another tenant's object answers 404,
exactly as one that does not exist. Admin tokens see everything, act on
nodes and mint, list and revoke tokens. Errors are RFC 9457 problem details
(``application/problem+json``) with, for a rejected document, one entry per
problem and its field path, found by the same spec code that reads files.

Reads of applications, tasks and events come from the store; questions about
the scheduler's live state (nodes, hosts, the rescheduler's plan) are asked
of the controller, which answers between instants.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from suanli.executors.logs import ROTATED
from suanli.executors.tasks import safe
from suanli.console import COOKIE
from suanli.server.audit import AuditLog, Observer
from suanli.server.metrics import Observed, gauge
from suanli.server.agents_api import add_agent_work_routes
from suanli.server.objects_api import Context, add_object_routes, refresher
from suanli.server.bodies import BodyError, read_body
from suanli.server.log_reads import RangeRefused, byte_range, chunks
from suanli.model.work import World
from suanli.server.controller import PRIVATE, Controller, build_app, check_document, internal, shown
from suanli.server.remote import ControllerUnavailable, RemoteController
from suanli.server.streams import EventHub, StreamsFull
from suanli.server.store import ROLES, TENANT_ROLES, AgentScope, AppRow, Conflict, KeyReused, Principal, Store
from suanli.server.store import TaskRow, digest
from suanli.server.store import MintRefused, TokenRow, token_state
from suanli.model.quantities import QuantityError, parse_duration_s

PROBLEM = "application/problem+json"
STALL_S = 10.0  # a scheduler whose turns have not gone through for this long is failing
PAGE, MAX_PAGE = 1000, 10_000  # items in one page of a listing: by default, at most
MAX_ID = 2**62  # ids and offsets in queries: past what any store holds, within what any store compares


UNKNOWN_TOKEN_COST = 10  # requests an unknown token counts for, in its address's bucket


TaskStatus = Literal["pending", "running", "finished", "failed", "omitted", "withdrawn"]
TASK_STATUSES = get_args(TaskStatus)  # omitted: a member an elastic gang runs without; withdrawn: deleted unplaced


@dataclass
class Limits:
    max_body_bytes: int = 1 << 20  # a request body larger than this answers 413
    rate: float = 500.0  # requests per second per tenant (admins together count as one), on average
    burst: int = 1000  # requests per tenant at once
    address_rate: float | None = None  # per client address, before the token is checked: 4 x rate
    address_burst: int | None = None  # 4 x burst
    events_page: int = 1000  # events in one answer at most
    streams_per_token: int = 8  # event streams open at once with one token
    streams: int = 1000  # event streams open at once in all
    # retention (docs/serve.md): events kept this long and at most this many, an application whose
    # every task ended kept this long; the store pruned this often (None: kept)
    keep_events_s: float | None = 7 * 86400.0
    keep_events: int | None = 10_000_000
    keep_ended_s: float | None = 86400.0
    prune_every_s: float = 60.0

    def __post_init__(self) -> None:
        if self.address_rate is None:
            self.address_rate = 4 * self.rate  # one address may carry several tenants' clients
        if self.address_burst is None:
            self.address_burst = 4 * self.burst


# ------------------------------------------------------------------ problems


class ProblemError(Exception):
    def __init__(self, status: int, title: str, detail: str = "", errors: list[dict] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail or title)
        self.status, self.title, self.detail, self.errors, self.headers = status, title, detail, errors, headers


class ProblemDetail(BaseModel):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str = ""
    instance: str | None = None
    errors: list[dict[str, Any]] | None = Field(None, description="one per problem: path (field path), message")


def problem_response(request: Request, status: int, title: str, detail: str = "", errors=None,
                     headers=None) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail,
            "instance": request.url.path}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def not_found(what: str, name: str) -> ProblemError:
    return ProblemError(404, "Not Found", f"no {what} {name!r}")


def problems(*codes: int) -> dict[int, dict]:
    """Documented answers that are problem details (FastAPI would file a ``model`` under application/json)."""
    return {code: {"content": {PROBLEM: {"schema": ProblemDetail.model_json_schema()}}} for code in codes}


ERRORS = problems(401, 404, 413, 422, 429, 503)
ADMIN_ERRORS = {**ERRORS, **problems(403)}


# ------------------------------------------------------------------ response bodies


class TaskOut(BaseModel):
    task: str
    tenant: str
    app: str
    status: TaskStatus
    node: str | None = None
    site: str | None = None
    vc: str | None = None
    host: str | None = None
    reasons: dict[str, int] | None = None
    why: list[dict[str, Any]] | None = None  # the reasons in reading order, the binding constraint first
    # waiting: the first of ``why``; running: why it runs as it does (on quota borrowed in its cohort)
    reason: str | None = None
    # admitted: it may be placed when room comes; inadmissible: it waits for what no room can give (a larger
    # node, a larger coupling domain), its bound in ``why``, until the fleet grows; null once it is no longer waiting
    admission: Literal["admitted", "inadmissible"] | None = None
    placements: int = 0
    # running with a readiness probe: whether it passes; a task that is not ready runs but does not serve
    ready: bool | None = None
    submitted_at: str
    started_at: str | None = None
    ended_at: str | None = None


class TaskDetail(TaskOut):
    history: list[dict[str, Any]]


class AppOut(BaseModel):
    name: str
    tenant: str
    created_at: str
    tasks: dict[str, int]  # status -> count
    document: dict[str, Any]
    revision: int = 1  # one more for each changed document applied
    change: Literal["created", "configured", "unchanged"] | None = None  # what a PUT did


class RolloutOut(BaseModel):
    name: str
    revision: int  # the application's revision (its document's)
    rolling: int | None  # the revision the scheduler rolls out (None: it has not taken it yet)
    done: bool  # every replica runs that revision and is ready
    components: dict[str, dict[str, int]]  # component -> replicas, updated, ready


class ScaleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replicas: int = Field(ge=0, le=1_000_000)
    component: str | None = None  # default: the application's only component with replicas


class EventOut(BaseModel):
    id: int
    kind: str
    t: float
    body: dict[str, Any]


class NodeOut(BaseModel):
    node: str
    site: str
    tier: str
    arch: str
    state: Literal["ready", "cordoned", "drained", "down", "removed"]
    capacity: dict[str, int]
    free: dict[str, int]
    tasks: int


class SiteOut(BaseModel):
    name: str
    tier: str
    region: str
    nodes: int


class FleetOut(BaseModel):
    sites: int
    nodes: int
    capacity: dict[str, int]
    free: dict[str, int]


class TenantOut(BaseModel):
    name: str
    weight: float
    quota: dict[str, int]
    allowed_sites: list[str]
    cohort: str | None = None  # tenants that lend one another unused quota (docs/scheduling.md)
    borrowing_limit: dict[str, int] | None = None
    lending_limit: dict[str, int] | None = None
    reclaim_within_cohort: str | None = None


class HostOut(BaseModel):
    host: str
    group: str | None
    node: str
    resources: dict[str, int]


class VCOut(BaseModel):
    name: str
    tenant: str
    default: bool
    hosts: list[HostOut]


MAX_TOKEN_TTL_S = 3650 * 86400.0  # ten years; a token meant to last for ever is made without a ttl
AGENT_NODES = 10_000  # nodes one agent token may have at once, at most (a site's racks, not a population)
AGENT_GLOBS, AGENT_GLOB_CHARS = 100, 128  # globs of an agent token's sites or names, and characters of each


class AuditOut(BaseModel):
    id: int
    at: str
    token_id: str | None  # None: no valid token was given
    tenant: str | None  # with admin false and no token: nobody known
    admin: bool
    action: str  # METHOD /route/{template}
    object: str  # the path asked for
    status: int
    request_id: str
    address: str | None


class TokenIn(BaseModel):
    tenant: str | None = Field(None, description="the tenant the token speaks for; none: an admin token")
    ttl: str | None = Field(None, max_length=32, examples=["30d"], description="how long it is valid: "
                            "'30d', '12h', '90m' (at most 3650d); none: until revoked")
    name: str | None = Field(None, max_length=200, description="a note: whom or what the token is for")
    role: Literal[ROLES] | None = Field(None, description="with a tenant: tenant-admin, member (the default) or "
                                        "viewer; without: admin (the default) or agent")
    sites: list[str] | None = Field(None, max_length=AGENT_GLOBS, examples=[["edge-*"]], description="an agent "
                                    "token's (required): globs of the sites where it may register nodes")
    names: list[str] | None = Field(None, max_length=AGENT_GLOBS, examples=[["gw-*"]], description="an agent "
                                    "token's: globs of the names (at their site) it may register; none: any")
    nodes: int | None = Field(None, description=f"an agent token's: how many nodes it may have at once, registered "
                              f"or lost and not departed (1 to {AGENT_NODES:,}); none: 1")


class AgentScopeOut(BaseModel):
    sites: list[str]
    names: list[str]
    nodes: int


class TokenOut(BaseModel):
    token: str = Field(description="the token, shown this once: only a keyed digest of it is kept")
    id: str = Field(description="its public id (tok_...), as listings show it and revocation takes it")
    tenant: str | None
    name: str | None = None
    role: str = "admin"
    expires_at: str | None = None
    scope: AgentScopeOut | None = None


class TokenInfo(BaseModel):
    id: str
    tenant: str | None
    name: str | None
    role: str = "admin"
    source: Literal["minted", "env"] = Field(description="env: the SUANLI_ADMIN_TOKEN of the server's start")
    scheme: Literal["sha256", "hmac-sha256"] = Field(description="how its digest is made (sha256: an older token)")
    state: Literal["active", "expired", "revoked"]
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    scope: AgentScopeOut | None = Field(None, description="an agent token's: where and how many nodes it registers "
                                        "(none for an agent token made before scopes: it registers no new node)")
    minted_by: str | None = Field(None, description="the id of the token that minted it (none: made at start, "
                                  "or before tokens recorded it); revoking a tenant-admin's token revokes what it "
                                  "minted")


class Health(BaseModel):
    status: Literal["ok", "failing"]
    controller: Literal["starting", "running", "standby", "restarting", "stopped"] = Field(
        description="standby: another server's controller on this database is active; this one takes over "
                    "when that one's lease runs out")
    instants: int
    since_turn_s: float | None = Field(None, description="seconds since a turn of the scheduler went through")
    store: str = Field(description="ok, or why the store takes no writes")
    restarts: int = Field(0, description="times the controller's process was started again")


APP_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {
            "type": "object",
            "description": "an Application document, as in a file (apiVersion, kind, metadata, spec)",
            "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"}, "spec": {"type": "object"}},
        }}},
    }
}


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def token_info(row: TokenRow, now: float) -> dict[str, Any]:
    """A token as an admin's listing shows it: never the token, which is not kept."""
    return {"id": row.public_id, "tenant": row.tenant, "name": row.name, "role": row.role, "source": row.source,
            "scheme": row.scheme, "state": token_state(row, now), "created_at": iso(row.created_at),
            "expires_at": iso(row.expires_at), "revoked_at": iso(row.revoked_at), "scope": _scope(row),
            "minted_by": row.minted_by}


def _scope(row: TokenRow) -> dict[str, Any] | None:
    scope = AgentScope.of(row.scope) if row.role == "agent" else None
    return None if scope is None else scope.as_json()


def agent_scope(body: "TokenIn", role: str) -> AgentScope | None:
    """The scope a token is minted with: an agent token's (its sites required);
    none for another role, which a scope given is a 422 for."""
    given = [f for f in ("sites", "names", "nodes") if getattr(body, f) is not None]
    if role != "agent":
        if given:
            raise ProblemError(422, "Unprocessable Content", "a scope is an agent token's",
                               [{"path": given[0], "message": f"not for a {role} token"}])
        return None
    if not body.sites:
        raise ProblemError(422, "Unprocessable Content", "an agent token is scoped to sites",
                           [{"path": "sites", "message": "give the globs of the sites where it may register "
                             "nodes, e.g. ['edge-*']"}])
    for field in ("sites", "names"):
        for i, glob in enumerate(getattr(body, field) or ()):
            if not 0 < len(glob) <= AGENT_GLOB_CHARS:
                raise ProblemError(422, "Unprocessable Content", "the agent token's scope is not valid",
                                   [{"path": f"{field}[{i}]", "message": f"a glob of 1 to {AGENT_GLOB_CHARS} "
                                     f"characters, got {len(glob)}"}])
    nodes = 1 if body.nodes is None else body.nodes
    if not 1 <= nodes <= AGENT_NODES:
        raise ProblemError(422, "Unprocessable Content", "the agent token's scope is not valid",
                           [{"path": "nodes", "message": f"from 1 to {AGENT_NODES:,}, got {nodes}"}])
    return AgentScope(tuple(body.sites), tuple(body.names or ("*",)), nodes)


def token_ttl_s(ttl: str | None) -> float | None:
    """A token's ttl in seconds (None: until revoked); a 422 naming ``ttl`` when it is not a bounded duration."""
    if ttl is None:
        return None
    try:
        seconds = parse_duration_s(ttl)
    except QuantityError as exc:
        raise ProblemError(422, "Unprocessable Content", "the token's ttl is not valid",
                           [{"path": "ttl", "message": str(exc)}]) from None
    if not 0 < seconds <= MAX_TOKEN_TTL_S:
        raise ProblemError(422, "Unprocessable Content", "the token's ttl is not valid",
                           [{"path": "ttl", "message": f"must be above 0 and at most 3650d (ten years), got {ttl!r}"}])
    return seconds


def task_out(row: TaskRow) -> dict[str, Any]:
    return {"task": row.name, "tenant": row.tenant, "app": row.name.split("/", 1)[0], "status": row.status,
            "node": row.node, "site": row.site, "vc": row.vc, "host": row.host, "reasons": row.reasons, "why": row.why,
            "reason": row.reason, "admission": _admission(row), "placements": row.placements, "ready": row.ready, "submitted_at": iso(row.submitted_at), "started_at": iso(row.started_at),
            "ended_at": iso(row.ended_at)}


def _admission(row: TaskRow) -> str | None:
    """A waiting task's admission: inadmissible when its binding reason is."""
    if row.status != "pending":
        return None
    return "inadmissible" if row.reason_code == "inadmissible" else "admitted"


def event_body(body: dict[str, Any], admin: bool) -> dict[str, Any]:
    """An event's body as ``admin`` (or a tenant) may see it: the private part
    (what names another tenant's work) merged in for admins, gone for tenants."""
    if PRIVATE not in body:
        return body
    out = {k: v for k, v in body.items() if k != PRIVATE}
    if admin:
        out.update(body[PRIVATE])
    return out


def event_out(row, admin: bool) -> dict[str, Any]:
    return {"id": row.id, "kind": row.kind, "t": row.at, "body": event_body(row.body, admin)}


# ------------------------------------------------------------------ limits


class RateLimiter:
    """A token bucket per key, for at most ``keys`` keys: the least recently
    used one is forgotten first (a forgotten bucket comes back full), so memory
    stays bounded whatever a client sends, and each call costs the same."""

    def __init__(self, rate: float, burst: int, keys: int = 10_000) -> None:
        self.rate, self.burst, self.keys = rate, burst, keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str, cost: float = 1.0, rate: float | None = None) -> float:
        """0 when allowed (and ``cost`` taken), else the seconds to wait; ``rate``:
        this key's own (a node's renewals go at a rate of its lease)."""
        rate = self.rate if rate is None else rate
        now = time.monotonic()
        with self._lock:
            level, at = self._buckets.pop(key, (float(self.burst), now))
            level = min(float(self.burst), level + (now - at) * rate)
            wait = 0.0
            if level < cost:
                wait = (cost - level) / rate
            else:
                level -= cost
            self._buckets[key] = (level, now)
            if len(self._buckets) > self.keys:
                self._buckets.popitem(last=False)
            return wait

    def __len__(self) -> int:
        return len(self._buckets)


def too_many(wait: float, detail: str) -> ProblemError:
    return ProblemError(429, "Too Many Requests", detail, headers={"Retry-After": str(max(1, round(wait + 0.49)))})


class BodyLimit:
    """ASGI middleware: a body over ``limit`` bytes answers 413 before it is read whole."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from suanli.server.agents_api import larger_body

        limit = larger_body(scope.get("path", "")) or self.limit
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await self._too_large(scope, send, limit)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._too_large(scope, send, limit)

    async def _too_large(self, scope, send, limit: int):
        body = json.dumps({"type": "about:blank", "title": "Content Too Large", "status": 413,
                           "detail": f"request bodies are at most {limit} bytes",
                           "instance": scope.get("path", "")}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", PROBLEM.encode()), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


# ------------------------------------------------------------------ the application


def _serve_console(api: FastAPI, world: World, store: Store, controller, logs: bool,
                   by_address: "RateLimiter") -> None:
    """The console at /, signed in with a token (docs/console.md); ``logs``: tasks run for real
    have logs (a task's page links to ``/v1/logs/TASK``). Its sign-in and pages take from
    the API's bucket of the client's address; a failed sign-in costs what an unknown token does."""
    from suanli.console.live import LiveRun
    from suanli.console.web import ConsoleAuth, add_console

    def who(token: str):
        found = store.remembered(token) or store.principal(token)
        return found if found is not None and (found.tenant is None or found.tenant in world.tenants) else None

    shared: dict[str, Any] = {"logs": logs}
    add_console(api, lambda p: LiveRun(store, controller, world, p, shared),
                ConsoleAuth(who, store.form_key, limit=by_address.allow, failed_cost=UNKNOWN_TOKEN_COST))


def _serve_docs(api: FastAPI) -> None:
    """The API's pages at /docs, their scripts and styles served from here (the
    package that ships them), so that the page loads nothing from elsewhere."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    api.mount("/docs/assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @api.get("/docs", include_in_schema=False)
    def docs_page():
        return get_swagger_ui_html(openapi_url="/openapi.json", title="suanli API",
                                   swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/assets/swagger-ui.css",
                                   swagger_favicon_url="/docs/assets/favicon-32x32.png")



FORWARDED = "x-suanli-forwarded"  # a request a standby server sent on: answered here, never sent on again
FORWARD_HEADERS = ("authorization", "content-type", "accept", "x-request-id", "idempotency-key", "cookie")


def create_api(world: World, store: Store, controller: "Controller | RemoteController", limits: Limits | None = None,
               start_controller: bool = True, logs_dir: Path | None = None, docs: bool = True,
               forward_verify: Any = True, agent_work: Path | None = None,
               log_max_bytes: int | None = None) -> FastAPI:
    """``forward_verify``: how a standby server checks the active one's certificate
    when it sends it a question (httpx's ``verify``)."""
    limits = limits or Limits()
    by_tenant = RateLimiter(limits.rate, limits.burst)  # admins share one bucket
    by_address = RateLimiter(limits.address_rate, limits.address_burst)
    hub = EventHub(store, limits.events_page, limits.streams_per_token, limits.streams)
    bearer = HTTPBearer(auto_error=False, description="a token from `suanli token create`")

    audit = AuditLog(store)
    refresh = refresher(world, store)  # the configuration as the store has it (any process may change it)

    async def retain() -> None:
        """Prune the store every ``limits.prune_every_s`` (``Limits``' retention), and have the
        scheduler forget the applications that went."""
        while True:
            await asyncio.sleep(limits.prune_every_s)
            try:
                gone = await asyncio.to_thread(store.prune, time.time(), limits.keep_events_s, limits.keep_events,
                                               limits.keep_ended_s)
            except Exception:  # the store refuses writes for now: next time
                continue
            for tenant, name, app_id in gone["apps"]:
                controller.delete(tenant, name, app_id)
            await count_rows()

    rows: dict[str, int] = {}  # the store's rows per table, counted after each pruning

    async def count_rows() -> None:
        try:
            rows.update(await asyncio.to_thread(store.counts))
        except Exception:  # the store away: counted next time
            pass

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if start_controller:
            controller.start()
        audit.start()
        pruning = asyncio.get_running_loop().create_task(retain())
        counting = asyncio.get_running_loop().create_task(count_rows())
        try:
            yield
        finally:
            pruning.cancel()
            counting.cancel()
            await asyncio.gather(pruning, counting, return_exceptions=True)
            await audit.stop()
            if start_controller:
                controller.stop()

    api = FastAPI(title="suanli", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="The live control plane: the suanli scheduler on wall-clock time.")
    if docs:
        _serve_docs(api)
    _serve_console(api, world, store, controller, logs=logs_dir is not None, by_address=by_address)

    # -------------------------------------------------------- errors as problems

    @api.exception_handler(ProblemError)
    async def _problem(request: Request, exc: ProblemError):
        return problem_response(request, exc.status, exc.title, exc.detail, exc.errors, exc.headers)

    @api.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        title = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(exc.status_code, "Error")
        headers = exc.headers
        if exc.status_code == 405:  # the path's methods, not only those of the first route that matched it
            headers = {**(headers or {}), "Allow": ", ".join(_allowed(request.scope))}
        return problem_response(request, exc.status_code, title, str(exc.detail), headers=headers)

    def _allowed(scope) -> list[str]:
        """The methods of the path's own route: of the routes the path matches
        (``/v1/agents/{name:path}`` matches ``/v1/agents/N/assignments`` too),
        the one whose template spells most of it."""
        matching = [r for r in api.router.routes if r.matches(scope)[0] is not Match.NONE]
        own = max(matching, key=lambda r: len(re.sub(r"\{[^}]*\}", "", getattr(r, "path", ""))))
        return sorted({m for r in api.router.routes if getattr(r, "path", None) == own.path
                       for m in getattr(r, "methods", None) or ()})

    @api.exception_handler(ControllerUnavailable)
    async def _unavailable(request: Request, exc: ControllerUnavailable):
        if getattr(controller, "state", None) == "standby" and FORWARDED not in request.headers:
            answer = await _forward(request)  # the active server's scheduler answers
            if answer is not None:
                return answer
        return problem_response(request, 503, "Service Unavailable", f"{exc}; try again shortly",
                                headers={"Retry-After": "1"})

    async def _forward(request: Request) -> Response | None:
        """A request this standby server's scheduler cannot answer, sent as it came
        to the server whose controller is active (its address in the lease), and
        its answer; None when there is none to ask."""
        import httpx

        from suanli.server.remote import LEASE

        lease = await asyncio.to_thread(store.lease, LEASE)
        if lease is None or not lease.address or lease.expires_at < time.time() or \
                lease.holder == getattr(controller, "holder", None):
            return None
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARD_HEADERS}
        try:
            async with httpx.AsyncClient(base_url=lease.address, timeout=10, verify=forward_verify) as http:
                r = await http.request(request.method, request.url.path, params=request.query_params,
                                       headers={**headers, FORWARDED: "1"}, content=await request.body())
        except httpx.HTTPError:
            return None
        keep = {k: v for k, v in r.headers.items() if k.lower() not in ("content-length", "transfer-encoding",
                                                                         "connection", "content-encoding")}
        return Response(r.content, status_code=r.status_code, headers=keep)

    @api.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errors = [{"path": ".".join(str(x) for x in e["loc"]), "message": e["msg"]} for e in exc.errors()]
        if all(e["loc"][:1] == ("header",) for e in exc.errors()):  # the request's framing, not its content
            return problem_response(request, 400, "Bad Request", "a header is not valid", errors)
        return problem_response(request, 422, "Unprocessable Content", "the request is not valid", errors)

    # -------------------------------------------------------- who asks

    async def principal(request: Request,
                        creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
        """Who asks. Limited by client address before the token is looked at (so
        that made-up tokens cost a bucket per address, not one each; an unknown
        token costs that bucket ``UNKNOWN_TOKEN_COST`` requests), then by tenant (the
        admins together, and each agent token, have a bucket of their own)."""
        address = request.client.host if request.client else "-"
        wait = by_address.allow(address)
        if wait:
            raise too_many(wait, f"at most {limits.address_rate:g} requests per second per client address")
        if creds is None and request.method in ("GET", "HEAD") and request.cookies.get(COOKIE):
            # the console's session reads (its event stream) with its cookie; never a change: a
            # cookie goes with requests that other sites make, a bearer header does not
            creds = HTTPAuthorizationCredentials(scheme="Bearer", credentials=request.cookies[COOKIE])
        if creds is None or creds.scheme.lower() != "bearer":
            raise ProblemError(401, "Unauthorized", "a bearer token is required",
                               headers={"WWW-Authenticate": "Bearer"})
        # a known token is answered from memory, on the event loop; only a new one is looked up
        who = store.remembered(creds.credentials) or await asyncio.to_thread(store.principal, creds.credentials)
        if who is None:
            by_address.allow(address, UNKNOWN_TOKEN_COST - 1)  # guessing drains the address's bucket
            raise ProblemError(401, "Unauthorized", "the token is not valid (unknown, expired or revoked)",
                               headers={"WWW-Authenticate": "Bearer"})
        refresh(False)
        if who.tenant is not None and who.tenant not in world.tenants:
            raise ProblemError(403, "Forbidden", f"tenant {who.tenant!r} is no longer served: its Tenant "
                               "document was removed")
        if who.role == "agent" and not request.url.path.startswith("/v1/agents"):
            raise ProblemError(403, "Forbidden", "an agent's token registers nodes, renews their leases and runs "
                               "their work only")
        # a bucket per tenant, one for the admins, one per agent token: none waits on another's requests
        wait = by_tenant.allow("admin" if who.admin else f"agent:{who.token_id}" if who.role == "agent"
                               else f"tenant:{who.tenant}")
        if wait:
            raise too_many(wait, f"at most {limits.rate:g} requests per second per tenant (and per agent token)")
        request.state.token = digest(creds.credentials)  # streams are counted per token
        request.state.principal = who  # for the audit and access logs
        return who

    async def admin(who: Principal = Depends(principal)) -> Principal:
        if not who.admin:
            raise ProblemError(403, "Forbidden", "this needs an admin token")
        return who

    async def writer(who: Principal = Depends(principal)) -> Principal:
        if not who.writes:
            raise ProblemError(403, "Forbidden", f"a {who.role} token reads only")
        return who

    context = Context(world, store, controller, principal, admin, ProblemError, refresh)
    add_object_routes(api, context)
    add_agent_work_routes(api, context, agent_work, *([log_max_bytes] if log_max_bytes else []))

    def tenant_of(who: Principal, tenant: str | None) -> str:
        """The tenant a request acts for: a tenant token's own; an admin names one."""
        if who.admin:
            if tenant is None:
                raise ProblemError(422, "Unprocessable Content", "an admin names the tenant (?tenant=NAME)")
            return tenant
        return who.tenant

    # -------------------------------------------------------- health and metrics

    probe = {"at": -1e9, "why": None}  # the store's last write probe: when, and what failed

    def store_trouble() -> str | None:
        """None if the store takes a write now (tried at most once a second), else why not."""
        now = time.monotonic()
        if now - probe["at"] >= 1.0:
            probe["why"], probe["at"] = store.writable(), now
        return probe["why"]

    def health() -> tuple[dict[str, Any], bool, bool]:
        """The server's state, and whether it is alive (a supervisor may leave it
        running) and ready (it should be sent requests)."""
        trouble = store_trouble()
        stats: dict[str, Any] = {}
        if controller.ready:
            try:
                stats = controller.stats(timeout=2.0)
            except Exception:  # no answer: as good as stalled
                stats = {}
        since = stats.get("since_turn_s")
        stalled = controller.ready and (since is None or since > STALL_S)
        alive = (controller.alive or not start_controller) and trouble is None and not stalled
        ready = alive and (controller.ready or not start_controller)
        body = {"status": "ok" if alive else "failing", "controller": controller.state,
                "instants": stats.get("instants", 0), "since_turn_s": since,
                "store": "ok" if trouble is None else trouble,
                "restarts": controller.restarts}
        return body, alive, ready

    @api.get("/healthz", response_model=Health, responses={503: {"model": Health}})
    def healthz():
        """Liveness: 503 when the server should be restarted: the scheduler's turns
        have stopped going through, the store takes no writes, or the controller
        could not be started again. A controller being started again is alive."""
        body, alive, _ = health()
        return JSONResponse(body, status_code=200 if alive else 503)

    @api.get("/readyz", response_model=Health, responses={503: {"model": Health}})
    def readyz():
        """Readiness: 200 only while requests can be served in full (alive, and the
        controller running, not starting or being started again)."""
        body, _, ready = health()
        return JSONResponse(body, status_code=200 if ready else 503)

    scrape: dict[str, Any] = {}  # what one scrape read of the controller, for the collector

    def gauges():
        counts = store.task_counts()
        states = scrape.get("states") or []
        by_state = Counter(states)
        yield gauge("suanli_tasks", "Tasks by status.", {(s,): counts.get(s, 0) for s in TASK_STATUSES}, ("status",))
        yield gauge("suanli_nodes", "Nodes by state.",
                    {(s,): by_state.get(s, 0) for s in ("ready", "cordoned", "drained", "down")}, ("state",))
        yield gauge("suanli_applications", "Applications accepted and not deleted.", store.app_count())
        yield gauge("suanli_controller_up", "Whether the scheduler's process is running.", int(controller.ready))
        restarts = CounterMetricFamily("suanli_controller_restarts", "Times the scheduler's process was started again.")
        restarts.add_metric([], controller.restarts)
        yield restarts
        yield gauge("suanli_event_streams", "Event streams open.", hub.open)
        if rows:  # counted after each pruning, not per scrape (a count of ten million rows takes seconds)
            yield gauge("suanli_store_rows", "Rows the store keeps, per table (what retention bounds), as "
                        "counted after the last pruning.", {(table,): n for table, n in rows.items()}, ("table",))

    observed = Observed(gauges, lambda: scrape.get("stats") or {})
    before = store.on_commit  # a controller in this process measures the same store's commits too
    store.on_commit = observed.commits.observe if before is None else \
        (lambda seconds: (before(seconds), observed.commits.observe(seconds)))

    @api.get("/metrics", response_class=PlainTextResponse, responses=ADMIN_ERRORS)
    def metrics(who: Principal = Depends(admin)):
        """Prometheus text format (admin token): tasks by status, nodes by state,
        requests and their latency per route, store commits, the scheduler's
        turns, each tenant's tasks' time from submission to placement."""
        try:
            scrape["stats"], scrape["states"] = controller.stats(timeout=2.0), controller.ask("node_states")
        except Exception:  # the controller is away: what the API knows
            scrape["stats"], scrape["states"] = {}, []
        return PlainTextResponse(generate_latest(observed.registry).decode(), media_type=CONTENT_TYPE_LATEST)

    # -------------------------------------------------------- fleet

    @api.get("/v1/fleet", response_model=FleetOut, responses=ERRORS)
    def get_fleet(who: Principal = Depends(principal)):
        return controller.ask("fleet")

    @api.get("/v1/sites", response_model=list[SiteOut], responses=ERRORS)
    def get_sites(who: Principal = Depends(principal)):
        fleet = world.fleet
        counts = np.bincount(fleet.node_site, minlength=len(fleet.sites)).tolist()
        return [{"name": s.name, "tier": s.tier, "region": s.region, "nodes": counts[s.index]}
                for s in fleet.sites]

    @api.get("/v1/nodes", response_model=list[NodeOut], responses=ERRORS)
    def get_nodes(who: Principal = Depends(principal), site: str | None = None):
        return controller.ask("nodes", site)

    def _node_index(name: str) -> None:
        """404 unless the scheduler has a node of that name (an agent's too)."""
        if not controller.ask("has_node", name):
            raise not_found("node", name)

    def node_action(action: str):
        def act(node: str, who: Principal = Depends(admin)):
            _node_index(node)
            state = {"cordon": "cordoned", "drain": "drained", "uncordon": None}[action]
            store.set_node_state(node, state, action)
            controller.node(node, action)
            return controller.ask("node", node)
        act.__name__ = f"{action}_node"
        return act

    for action in ("cordon", "drain", "uncordon"):
        api.post(f"/v1/nodes/{{node:path}}/{action}", response_model=NodeOut, responses=ADMIN_ERRORS,
                 summary=f"{action.capitalize()} a node")(node_action(action))

    # After the actions: ``{node:path}`` matches ``NODE/cordon`` too, and the first route a path
    # matches is the one whose methods a 405 answer lists in ``Allow``.
    @api.get("/v1/nodes/{node:path}", response_model=NodeOut, responses=ERRORS)
    def get_node(node: str, who: Principal = Depends(principal)):
        _node_index(node)
        return controller.ask("node", node)

    # -------------------------------------------------------- tenants and virtual clusters

    def _tenant_out(name: str) -> dict[str, Any]:
        t = world.tenants[name]
        out = {"name": t.name, "weight": t.weight, "quota": dict(t.quota), "allowed_sites": list(t.allowed_sites)}
        if t.cohort is not None:
            out.update(cohort=t.cohort, borrowing_limit=None if t.borrowing_limit is None else dict(t.borrowing_limit),
                       lending_limit=dict(t.lending_limit), reclaim_within_cohort=t.reclaim)
        return out

    @api.get("/v1/tenants", response_model=list[TenantOut], responses=ERRORS)
    def get_tenants(who: Principal = Depends(principal)):
        return [_tenant_out(n) for n in world.tenants if who.admin or n == who.tenant]

    @api.get("/v1/tenants/{name}", response_model=TenantOut, responses=ERRORS)
    def get_tenant(name: str, who: Principal = Depends(principal)):
        if name not in world.tenants or not (who.admin or name == who.tenant):
            raise not_found("tenant", name)
        return _tenant_out(name)

    @api.get("/v1/vcs", response_model=list[VCOut], responses=ERRORS)
    def get_vcs(who: Principal = Depends(principal)):
        names = [n for n, vc in world.vcs.items() if who.admin or vc.tenant == who.tenant]
        return controller.ask("vcs", names)

    @api.get("/v1/vcs/{name:path}", response_model=VCOut, responses=ERRORS)
    def get_vc(name: str, who: Principal = Depends(principal),
               tenant: str | None = Query(None, max_length=128, description="an admin's: the tenant whose "
                                          "virtual cluster of that name (needed when tenants have one each)")):
        """A virtual cluster of the token's tenant (names are each tenant's own:
        another tenant's of that name is as missing as none)."""
        owner = tenant if who.admin else who.tenant
        found = [n for n, vc in world.vcs.items() if name in (n, shown(n)) and owner in (None, vc.tenant)]
        if len(found) > 1:
            raise ProblemError(422, "Unprocessable Content", f"{len(found)} tenants each have a virtual cluster "
                               f"{name!r}: an admin names the tenant (?tenant=NAME)",
                               [{"path": "tenant", "message": "required: the name is not one tenant's alone"}])
        if not found:
            raise not_found("virtual cluster", name)
        got = controller.ask("vcs", found)
        if not got:
            raise ProblemError(503, "Service Unavailable", f"virtual cluster {name!r} is being applied; try again "
                               "shortly", headers={"Retry-After": "1"})
        return got[0]

    # -------------------------------------------------------- applications

    def _app_out(row: AppRow, counts: dict[str, int] | None = None) -> dict[str, Any]:
        """An application and its tasks by status (``counts``, when known, else read)."""
        if counts is None:
            counts = store.task_counts(row.id)
        return {"name": row.name, "tenant": row.tenant, "created_at": iso(row.created_at),
                "tasks": {s: counts.get(s, 0) for s in TASK_STATUSES},
                "document": row.document, "revision": row.revision or 1}

    @api.post("/v1/applications", status_code=201, response_model=AppOut,
              responses={**ERRORS, 200: {"model": AppOut, "description": "the same idempotency key again"},
                         **problems(400, 403, 409)},
              openapi_extra=APP_BODY)
    async def create_application(request: Request, who: Principal = Depends(writer),
                                 idempotency_key: str | None = Header(None, min_length=1, max_length=256, pattern=r"\S")):
        """Submit an Application document (JSON, or YAML with a YAML content type). A
        repeated ``Idempotency-Key`` with the same document returns the application
        it created first; with another document it answers 422."""
        raw = await request.body()
        return await asyncio.to_thread(_create, raw, request.headers.get("content-type", ""), who, idempotency_key)

    def _create(raw: bytes, ctype: str, who: Principal, key: str | None) -> Response:
        doc = _read_document(raw, ctype)
        tenant, found = _checked(doc, who)
        name = found.name
        app = build_app(tenant, name, found.doc, world.vcs)
        tasks = [f"{name}/{c.name}/{i}" for c in app.components for i in range(c.size)]
        try:
            row, new = store.create_app(tenant, name, doc, tasks, key)
        except Conflict:
            raise ProblemError(409, "Conflict", f"an application {name!r} exists: change it with PUT "
                                                f"/v1/applications/{name} (suanli apply), or delete it first") from None
        except KeyReused as exc:
            raise ProblemError(422, "Unprocessable Content",
                               f"this Idempotency-Key was used for another document (application "
                               f"{exc.name!r}); use a new key for a new document",
                               [{"path": "Idempotency-Key", "message": "reused with a different body"}]) from None
        if not new:
            return JSONResponse(_app_out(row), status_code=200)
        controller.submit(app, row.id)
        return JSONResponse(_app_out(row, {"pending": len(tasks)}), status_code=201)

    def _read_document(raw: bytes, ctype: str) -> dict:
        try:
            data = read_body(raw, ctype)
        except BodyError as exc:
            title = "Bad Request" if exc.status == 400 else "Unprocessable Content"
            raise ProblemError(exc.status, title, exc.message,
                               [{"path": exc.path, "message": exc.message}] if exc.status == 422 else None) from None
        if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
            raise ProblemError(422, "Unprocessable Content", "the body is one Application document",
                               [{"path": "metadata", "message": "a mapping with name is required"}])
        if data.get("kind") != "Application":
            raise ProblemError(422, "Unprocessable Content", "the body is one Application document",
                               [{"path": "kind", "message": f"expected 'Application', got {data.get('kind')!r}"}])
        return data

    @api.get("/v1/applications", response_model=list[AppOut], responses=ERRORS)
    def list_applications(request: Request, response: Response, who: Principal = Depends(principal),
                          limit: int = Query(PAGE, ge=1, le=MAX_PAGE), cursor: str | None = Query(None, max_length=1000)):
        """Applications, oldest first, a page at a time: when more follow, the
        ``Link`` header (rel="next") and ``X-Next-Cursor`` say where."""
        after = _cursor(cursor, _an_id)
        rows = store.apps(who.tenant, after=after, limit=limit)
        counts = store.task_counts_of([r.id for r in rows])
        if len(rows) == limit:
            _next_page(request, response, rows[-1].id)
        return [_app_out(r, counts.get(r.id, {})) for r in rows]

    def _own_app(who: Principal, tenant: str | None, name: str) -> tuple[str, AppRow]:
        """The application ``name`` of the token's tenant (an admin's: ``tenant``'s); 404 when there is none."""
        owner = tenant_of(who, tenant)
        row = store.app(owner, name)
        if row is None:
            raise not_found("application", name)
        return owner, row

    @api.get("/v1/applications/{name}", response_model=AppOut, responses=ERRORS)
    def get_application(name: str, who: Principal = Depends(principal), tenant: str | None = None):
        return _app_out(_own_app(who, tenant, name)[1])

    @api.put("/v1/applications/{name}", response_model=AppOut,
             responses={**ERRORS, 201: {"model": AppOut, "description": "made"}, **problems(400, 403)},
             openapi_extra=APP_BODY)
    async def put_application(name: str, request: Request, who: Principal = Depends(writer)):
        """Make the application, or change it: a changed document is its next
        revision, rolled out to its running replicas in place
        (``spec.update.maxUnavailable``); the same document changes nothing (200)."""
        raw = await request.body()
        return await asyncio.to_thread(_put, name, raw, request.headers.get("content-type", ""), who)

    def _checked(doc: dict, who: Principal) -> tuple[str, Any]:
        """The document's tenant (a tenant's token: its own), and the document checked."""
        tenant = doc["metadata"].get("tenant")
        if who.admin and tenant is None:
            raise ProblemError(422, "Unprocessable Content", "an admin names the tenant (metadata.tenant)",
                               [{"path": "metadata.tenant", "message": "required for an admin token"}])
        if not who.admin:
            if tenant is not None and tenant != who.tenant:
                raise ProblemError(403, "Forbidden", "a tenant's token submits only the tenant's own applications",
                                   [{"path": "metadata.tenant", "message": f"must be {who.tenant!r} or absent"}])
            doc["metadata"]["tenant"] = tenant = who.tenant
        found, problems = check_document("request body", doc, world)
        if problems:
            raise ProblemError(422, "Unprocessable Content", "the application document is not valid",
                               [{"path": p.path, "message": p.message} for p in problems])
        return tenant, found

    def _put(name: str, raw: bytes, ctype: str, who: Principal) -> Response:
        doc = _read_document(raw, ctype)
        if doc["metadata"].get("name") != name:
            raise ProblemError(422, "Unprocessable Content", "the document's name is the one in the path",
                               [{"path": "metadata.name", "message": f"must be {name!r}"}])
        tenant, found = _checked(doc, who)
        return _update(tenant, name, found.doc, doc, created_if_missing=True)

    def _update(tenant: str, name: str, spec_doc: Any, doc: dict, created_if_missing: bool = False) -> Response:
        app = build_app(tenant, name, spec_doc, world.vcs)
        tasks = [f"{name}/{c.name}/{i}" for c in app.components for i in range(c.size)]
        got = store.update_app(tenant, name, doc, tasks)
        if got is None:
            if not created_if_missing:
                raise not_found("application", name)
            try:
                row, _ = store.create_app(tenant, name, doc, tasks, None)
            except Conflict:  # made meanwhile: change it
                return _update(tenant, name, spec_doc, doc)
            controller.submit(app, row.id)
            return JSONResponse({**_app_out(row, {"pending": len(tasks)}), "change": "created"}, status_code=201)
        row, changed = got
        if changed:
            policy = spec_doc.spec.update
            controller.update(app, row.id, row.revision, policy.max_unavailable, policy.max_surge)
        return JSONResponse({**_app_out(row), "change": "configured" if changed else "unchanged"}, status_code=200)

    @api.get("/v1/applications/{name}/rollout", response_model=RolloutOut, responses=ERRORS)
    def get_rollout(name: str, who: Principal = Depends(principal), tenant: str | None = None):
        """How far the application's last change is rolled out: per component,
        its replicas, those that run the new revision, and those ready."""
        owner, row = _own_app(who, tenant, name)
        got = controller.ask("rollout", owner, name)
        taken = got is not None and got["revision"] == (row.revision or 1)  # not yet: the scheduler has not taken it
        return {"name": name, "revision": row.revision or 1, "rolling": got["revision"] if got else None,
                "done": taken and got["done"], "components": got["components"] if got else {}}

    @api.post("/v1/applications/{name}/rollout/undo", response_model=AppOut, responses={**ERRORS, **problems(403, 409)})
    def undo_rollout(name: str, who: Principal = Depends(writer), tenant: str | None = None):
        """Apply the document before the last change again (a new revision, rolled out as any change)."""
        owner, row = _own_app(who, tenant, name)
        if row.previous is None:
            raise ProblemError(409, "Conflict", f"application {name!r} has no earlier revision to go back to")
        found, problems = check_document("the previous revision", row.previous, world)
        if problems:
            raise ProblemError(409, "Conflict", f"the previous revision is no longer valid: {problems[0].message}",
                               [{"path": p.path, "message": p.message} for p in problems])
        return _update(owner, name, found.doc, row.previous)

    @api.post("/v1/applications/{name}/scale", response_model=AppOut, responses={**ERRORS, **problems(400, 403, 409)})
    def scale_application(name: str, body: ScaleIn, who: Principal = Depends(writer), tenant: str | None = None):
        """Set a component's replicas (a new revision: replicas added or withdrawn at once)."""
        owner, row = _own_app(who, tenant, name)
        doc = json.loads(json.dumps(row.document))
        comps = doc["spec"]["components"]
        with_replicas = [c for c in comps if c.get("gang") is None]
        if body.component is None:
            if len(with_replicas) != 1:
                raise ProblemError(422, "Unprocessable Content", "name the component to scale",
                                   [{"path": "component", "message": "the application has "
                                     f"{len(with_replicas)} components with replicas: "
                                     f"{', '.join(c['name'] for c in with_replicas)}"}])
            target = with_replicas[0]
        else:
            target = next((c for c in with_replicas if c["name"] == body.component), None)
            if target is None:
                raise ProblemError(422, "Unprocessable Content", f"no component {body.component!r} with replicas",
                                   [{"path": "component", "message": "one of " + ", ".join(
                                       c["name"] for c in with_replicas)}])
        target["replicas"] = body.replicas
        found, problems = check_document("request body", doc, world)
        if problems:
            raise ProblemError(422, "Unprocessable Content", "the scaled application is not valid",
                               [{"path": p.path, "message": p.message} for p in problems])
        return _update(owner, name, found.doc, doc)

    @api.delete("/v1/applications/{name}", status_code=204, responses=ERRORS)
    def delete_application(name: str, who: Principal = Depends(writer), tenant: str | None = None):
        """Delete an application: its running tasks stop, its records go."""
        owner = tenant_of(who, tenant)
        app_id = store.delete_app(owner, name)
        if app_id is None:
            raise not_found("application", name)
        controller.delete(owner, name, app_id)
        return Response(status_code=204)

    # -------------------------------------------------------- tasks

    @api.get("/v1/tasks", response_model=list[TaskOut], responses=ERRORS)
    def list_tasks(request: Request, response: Response, who: Principal = Depends(principal), app: str | None = None,
                   status: TaskStatus | None = None,
                   admission: Literal["admitted", "inadmissible"] | None = None,
                   limit: int = Query(PAGE, ge=1, le=MAX_PAGE), cursor: str | None = Query(None, max_length=1000)):
        """Tasks by tenant, application and name, a page at a time: when more
        follow, the ``Link`` header (rel="next") and ``X-Next-Cursor`` say where.
        ``admission``: waiting tasks only, those admitted or those inadmissible."""
        after = _cursor(cursor, lambda k: isinstance(k, list) and len(k) == 3 and isinstance(k[0], str)
                        and _an_id(k[1]) and isinstance(k[2], str))
        if admission is not None:
            if status not in (None, "pending"):
                raise ProblemError(422, "Unprocessable Content", "admission is a waiting task's",
                                   [{"path": "admission", "message": "give it with status=pending or alone"}])
            status = "pending"
        rows = store.tasks(who.tenant, app, status, after=tuple(after) if after else None, limit=limit,
                           inadmissible=None if admission is None else admission == "inadmissible")
        if len(rows) == limit:
            last = rows[-1]
            _next_page(request, response, [last.tenant, last.app_id, last.name])
        return [task_out(r) for r in rows]

    def _an_id(k: Any) -> bool:
        return isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= MAX_ID

    def _cursor(cursor: str | None, valid) -> Any:
        """The key a cursor stands for (None: the first page); a cursor not made here is a 422."""
        if cursor is None:
            return None
        try:
            key = json.loads(base64.urlsafe_b64decode(cursor.encode() + b"=" * (-len(cursor) % 4)))
        except ValueError:
            key = None
        if key is None or not valid(key):
            raise ProblemError(422, "Unprocessable Content", "the cursor is not one this server gave",
                               [{"path": "cursor", "message": "use the X-Next-Cursor of the previous page"}])
        return key

    def _next_page(request: Request, response: Response, key: Any) -> None:
        cursor = base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode().rstrip("=")
        response.headers["X-Next-Cursor"] = cursor
        response.headers["Link"] = f'<{request.url.include_query_params(cursor=cursor)}>; rel="next"'

    @api.get("/v1/tasks/{task:path}", response_model=TaskDetail, responses=ERRORS)
    def get_task(task: str, who: Principal = Depends(principal), tenant: str | None = None):
        owner = tenant_of(who, tenant)
        row = store.task(owner, task)
        if row is None:
            raise not_found("task", task)
        history = [event_body(e.body, who.admin)
                   for e in store.events(owner, task=task, limit=limits.events_page, app_id=row.app_id)]
        return {**task_out(row), "history": history}

    @api.get("/v1/logs/{task:path}", response_class=StreamingResponse, responses={**ERRORS, **problems(400, 416)})
    def task_logs(task: str, who: Principal = Depends(principal), tenant: str | None = None,
                  after: int | None = Query(None, ge=0, le=MAX_ID, description="skip this many bytes (what was "
                                            "read before)"),
                  tail: int | None = Query(None, ge=0, le=MAX_ID, description="only the last this many bytes"),
                  rotated: bool = Query(False, description="the rotated part (TASK.log.1): the output before the "
                                        "log last went over its cap"),
                  range_header: str | None = Header(None, alias="range", description="bytes=START-END (one range)")):
        """A task's log: the output of every run it had, each after a header
        line (kept by the local and ray executors; the sim executor runs no
        processes), sent in chunks. One of ``after``, ``tail`` and ``Range``
        (206, with ``Content-Range``) chooses a part; ``X-Log-File`` changes
        when the log rotates."""
        owner = tenant_of(who, tenant)
        if store.task(owner, task) is None:
            raise not_found("task", task)
        given = [name for name, value in (("query.after", after), ("query.tail", tail), ("header.range", range_header))
                 if value is not None]
        if len(given) > 1:
            raise ProblemError(422, "Unprocessable Content", "give one of after, tail and Range",
                               [{"path": p, "message": "one of after, tail and Range"} for p in given])
        if logs_dir is None:
            raise ProblemError(404, "No log", f"task {task!r} has no log: the sim executor runs no processes")
        name = f"{safe(internal(owner, task))}.log" + (ROTATED if rotated else "")
        try:
            f = open(logs_dir / name, "rb")
        except FileNotFoundError:
            raise ProblemError(404, "No log", f"task {task!r} has no " + (
                "rotated log: its log never went over its cap" if rotated else "log: it has not run yet")) from None
        st = os.fstat(f.fileno())
        start, end, status = min(after or 0, st.st_size), st.st_size, 200
        headers = {"Accept-Ranges": "bytes", "X-Log-File": f"{st.st_ino:x}"}
        if tail is not None:
            start = max(end - tail, 0)
        if range_header is not None:
            try:
                start, end = byte_range(range_header, st.st_size)
            except RangeRefused as exc:
                f.close()
                raise ProblemError(exc.status, "Range Not Satisfiable" if exc.status == 416 else "Bad Request",
                                   "the Range header is not one this log can answer",
                                   [{"path": "header.range", "message": exc.message}],
                                   {"Content-Range": f"bytes */{st.st_size}"} if exc.status == 416 else None) from None
            status, headers["Content-Range"] = 206, f"bytes {start}-{end - 1}/{st.st_size}"
        headers["Content-Length"] = str(end - start)
        return StreamingResponse(chunks(f, start, end), status_code=status, media_type="text/plain; charset=utf-8",
                                 headers=headers)

    # -------------------------------------------------------- events

    @api.get("/v1/events", response_model=list[EventOut], responses=ERRORS)
    def list_events(who: Principal = Depends(principal), after: int = Query(0, ge=0, le=MAX_ID),
                    limit: int = Query(100, ge=1, le=1000)):
        """Events after id ``after``, oldest first (a tenant's own; all for an admin)."""
        return [event_out(e, who.admin) for e in store.events(who.tenant, after, min(limit, limits.events_page))]

    @api.get("/v1/events/stream", responses=ERRORS,
             response_class=StreamingResponse)
    async def stream_events(request: Request, who: Principal = Depends(principal),
                            after: int | None = Query(None, ge=0, le=MAX_ID),
                            last_event_id: str | None = Header(None)):
        """Server-sent events: each event as it is recorded (``id`` is the event's id;
        a reconnect with ``Last-Event-ID`` resumes after it). Without ``after``, from now."""
        start = after
        if start is None and last_event_id and last_event_id.isdigit() and len(last_event_id) <= 18:
            start = int(last_event_id)
        token = request.state.token
        try:
            hub.reserve(token)
        except StreamsFull as exc:
            if exc.per_token:
                raise too_many(1.0, exc.detail) from None
            raise ProblemError(503, "Service Unavailable", exc.detail, headers={"Retry-After": "5"}) from None

        async def gen():
            try:
                yield ServerSentEvent(comment="suanli events")
                async for e in hub.follow(who.tenant, start):
                    if e is None:  # nothing new for a while (and all recorded before has been sent)
                        yield ServerSentEvent(comment="keep-alive")
                    else:
                        yield ServerSentEvent(json.dumps(event_body(e.body, who.admin)), event=e.kind, id=str(e.id))
            finally:
                hub.release(token)

        # the protocol (framing, a client gone, the server stopping) is a maintained library's
        return EventSourceResponse(gen(), sep="\n", headers={"Cache-Control": "no-cache"})

    # -------------------------------------------------------- the rescheduler's plan

    @api.get("/v1/plan", responses=ADMIN_ERRORS)
    def get_plan(who: Principal = Depends(admin)) -> dict[str, Any]:
        """The dry run of the rescheduler now: what runs where, what waits, the moves it would make."""
        return controller.ask("plan")

    # -------------------------------------------------------- audit

    @api.get("/v1/audit", response_model=list[AuditOut], responses=ADMIN_ERRORS)
    def list_audit(request: Request, response: Response, who: Principal = Depends(admin),
                   after: int = Query(0, ge=0, le=MAX_ID), limit: int = Query(PAGE, ge=1, le=MAX_PAGE),
                   tenant: str | None = Query(None, max_length=128)):
        """Every request that asked for a change, oldest first (admin): when, who (the
        token's public id and tenant), what (method and route, the path), the status
        it got and the request id (as in the answer's X-Request-ID and the access log)."""
        rows = store.audit(after, limit, tenant)
        if len(rows) == limit:
            response.headers["X-Next-After"] = str(rows[-1].id)
        return [{"id": r.id, "at": iso(r.at), "token_id": r.token_id, "tenant": r.tenant, "admin": r.admin,
                 "action": r.action, "object": r.object, "status": r.status, "request_id": r.request_id,
                 "address": r.address} for r in rows]

    # -------------------------------------------------------- tokens

    async def token_keeper(who: Principal = Depends(principal)) -> Principal:
        if who.role not in ("admin", "tenant-admin"):
            raise ProblemError(403, "Forbidden", "this needs an admin or tenant-admin token")
        return who

    @api.post("/v1/tokens", status_code=201, response_model=TokenOut, responses={**ADMIN_ERRORS, **problems(400)})
    def create_token(body: TokenIn, who: Principal = Depends(token_keeper)):
        """Mint a token for a tenant with a role (tenant-admin, member, viewer), or,
        with no tenant, another admin token or an agent's; valid for ``ttl`` (none:
        until revoked). It is shown once, with its id. A tenant-admin mints its own
        tenant's tokens only, and none that outlives its own (none given: they
        expire together)."""
        tenant = body.tenant if who.admin else (body.tenant or who.tenant)
        if not who.admin and tenant != who.tenant:
            raise ProblemError(403, "Forbidden", "a tenant-admin mints its own tenant's tokens only",
                               [{"path": "tenant", "message": f"must be {who.tenant!r} or absent"}])
        if tenant is not None and tenant not in world.tenants:
            raise ProblemError(422, "Unprocessable Content", f"no tenant {tenant!r}",
                               [{"path": "tenant", "message": f"tenants are {', '.join(sorted(world.tenants))}"}])
        role = body.role or ("member" if tenant is not None else "admin")
        allowed = TENANT_ROLES if tenant is not None else ("admin", "agent")
        if role not in allowed:
            raise ProblemError(422, "Unprocessable Content", f"a {'tenant' if tenant else 'tenantless'} token's role "
                               f"is one of {', '.join(allowed)}", [{"path": "role", "message": f"got {role!r}"}])
        scope = agent_scope(body, role)
        try:
            token, row = store.issue(tenant, ttl_s=token_ttl_s(body.ttl), name=body.name, role=role, scope=scope,
                                     minter=who.token_id)
        except MintRefused as exc:
            if exc.path is None:  # the minter revoked or expired since its request was let in
                raise ProblemError(401, "Unauthorized", "the token is not valid (unknown, expired or revoked)",
                                   headers={"WWW-Authenticate": "Bearer"}) from None
            raise ProblemError(422, "Unprocessable Content", f"the token's {exc.path} is not valid",
                               [{"path": exc.path, "message": exc.message}]) from None
        return {"token": token, "id": row.public_id, "tenant": row.tenant, "name": row.name, "role": row.role,
                "expires_at": iso(row.expires_at), "scope": _scope(row)}

    @api.get("/v1/tokens", response_model=list[TokenInfo], responses=ADMIN_ERRORS)
    def list_tokens(request: Request, response: Response, who: Principal = Depends(token_keeper),
                    limit: int = Query(PAGE, ge=1, le=MAX_PAGE), cursor: str | None = Query(None, max_length=1000)):
        """Tokens, oldest first, in any state: id, tenant, role, name, source, state
        and times; a page at a time, as the other listings. A tenant-admin sees its
        tenant's."""
        now = time.time()
        rows = store.tokens(after=_cursor(cursor, _an_id), limit=limit)
        if len(rows) == limit:
            _next_page(request, response, rows[-1].id)
        return [token_info(r, now) for r in rows if who.admin or r.tenant == who.tenant]

    @api.delete("/v1/tokens/{token_id}", status_code=204, responses=ADMIN_ERRORS)
    def revoke_token(token_id: str, who: Principal = Depends(token_keeper)):
        """Revoke a token by its id: from now on it answers 401 (in every process of the
        server within a second), and so do the tokens it minted and theirs (those an
        admin token minted stay). Revoking it again changes nothing. A tenant-admin
        revokes its tenant's tokens only."""
        if not who.admin and not any(r.public_id == token_id and r.tenant == who.tenant for r in store.tokens()):
            raise not_found("token", token_id)
        if not store.revoke(token_id):
            raise not_found("token", token_id)
        return Response(status_code=204)

    api.add_middleware(Observer, observed=observed, audit=audit)
    api.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    return api
