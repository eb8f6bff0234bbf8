"""The console's pages: server-rendered HTML (Jinja2, escaped), SVG drawn
here, one small script of the package's own (no library, nothing fetched
from elsewhere) for the time slider and the live event stream.

``add_console(app, data_for, auth)`` adds the pages to a FastAPI app: the
live server's (``auth`` signs in with a token: an HttpOnly, SameSite=Strict
cookie; forms carry a key made from it, and a form posted from another
origin is refused), or ``suanli view``'s over a recorded run (no sign-in).
"""

from __future__ import annotations

import dataclasses
import hmac
import math
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from suanli.console import COOKIE, model, svg
from suanli.model.quantities import format_amount, format_bytes
from suanli.phrases import binding_line, column_of

HERE = Path(__file__).parent
SESSION_S = 12 * 3600  # a sign-in lasts this long in the browser (the token's own expiry still counts)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
NAV = (("overview", "/", "Overview"), ("topology", "/topology", "Topology"), ("tenants", "/tenants", "Tenants"),
       ("tasks", "/tasks", "Tasks"), ("events", "/events", "Moves and events"))


MAX_PAGE_NUMBER = 2**62 // model.PAGE  # a page past it starts past any row a store numbers (the API's MAX_ID)


class ConsoleAuth:
    """Sign-in for the live console: a token (as the API's) kept in a cookie.
    ``limit(address, cost)``: the API's bucket of a client address (0: allowed,
    else the seconds to wait); every page and sign-in costs 1, a failed sign-in
    ``failed_cost`` in all."""

    def __init__(self, who: Callable[[str], Any], form_key: Callable[[str], str],
                 limit: Callable[[str, float], float] | None = None, failed_cost: float = 1.0) -> None:
        self._who, self._form_key = who, form_key
        self._limit, self.failed_cost = limit, failed_cost

    def wait(self, request: Request, cost: float = 1.0) -> float:
        """0 when the client's address may ask (``cost`` taken), else the seconds to wait."""
        if self._limit is None:
            return 0.0
        return self._limit(request.client.host if request.client else "-", cost)

    def token(self, request: Request) -> str | None:
        return request.cookies.get(COOKIE) or None

    def who(self, request: Request):
        token = self.token(request)
        return self._who(token) if token else None

    def form_key(self, request: Request) -> str:
        token = self.token(request)
        return self._form_key(token) if token else ""

    def form_ok(self, request: Request, given: str) -> bool:
        """A form of this console, posted from this origin."""
        if not _same_origin(request):
            return False
        want = self.form_key(request)
        return bool(want) and hmac.compare_digest(want, given or "")


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is None:
        return request.headers.get("sec-fetch-site") in (None, "same-origin")
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1].split("/", 1)[0] == host


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["n"] = lambda v: "–" if v is None else f"{v:,}" if isinstance(v, int) else str(v)
    env.filters["pct"] = lambda v: "–" if v is None else f"{v * 100:.1f}%"
    env.filters["size"] = lambda v: "–" if v is None else format_bytes(v)
    env.filters["amount"] = lambda v, key: "–" if v is None else _amount(key, v)
    env.filters["res_amount"] = lambda v, resource: format_amount(column_of(resource), int(v))
    env.filters["binding"] = binding_line
    env.filters["resource"] = _resource_name
    return env


def _resource_name(key: str) -> str:
    """A resource key as a user names the resource: cpu_milli -> cpu, mem_mib -> memory, gpu_milli -> gpu."""
    name = key.rsplit("_", 1)[0]
    return {"mem": "memory"}.get(name, name)


def _amount(key: str, v: int) -> str:
    """A canonical amount of a resource key (cpu_milli, mem_mib, gpu_milli) as a user writes it."""
    return format_amount(column_of(_resource_name(key)), int(v))


def add_console(app: FastAPI, data_for: Callable[[Any], model.RunData], auth: ConsoleAuth | None = None,
                title: str = "suanli") -> None:
    env = _env()
    env.globals["signed"] = auth is not None  # a live control plane's (a recorded run's has no sign-in)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")

    def when(data: model.RunData, seconds: float | None) -> str:
        if seconds is None:
            return "–"
        if data.live:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
        return "t = " + svg.clock(seconds)

    def tick(data: model.RunData):
        """How a chart's axis names an instant: a recorded run's clock, the live one's time of day."""
        return (lambda s: time.strftime("%H:%M:%S", time.localtime(s))) if data.live else svg.clock

    def page(request: Request, name: str, data: model.RunData, who, **ctx) -> HTMLResponse:
        span = data.span()
        at = ctx.get("at")
        context = {"request": request, "nav": NAV, "title": title, "run": data, "who": who, "span": span,
                   "at": at, "when": lambda s: when(data, s), "form_key": auth.form_key(request) if auth else "",
                   "query": lambda **kw: _query(request, **kw), "Markup": Markup, **ctx}
        body = env.get_template(name).render(**context)
        return HTMLResponse(body, headers=SECURITY_HEADERS)

    def too_many(request: Request, wait: float) -> HTMLResponse:
        """429 in the console's own page, saying when to come back (as ``Retry-After`` does)."""
        seconds = max(1, round(wait + 0.49))
        body = env.get_template("busy.html").render(title=title, nav=(), who=None, run=None, request=request,
                                                    span=None, at=None, seconds=seconds)
        return HTMLResponse(body, status_code=429, headers={**SECURITY_HEADERS, "Retry-After": str(seconds)})

    def sign_in(request: Request) -> Response | tuple[Any, model.RunData]:
        who = None
        if auth is not None:
            wait = auth.wait(request)
            if wait:
                return too_many(request, wait)
            who = auth.who(request)
            if who is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)
        return who, data_for(who)

    def at_of(request: Request, data: model.RunData) -> float | None:
        raw = request.query_params.get("at")
        if data.live or raw in (None, ""):
            return None
        try:
            v = float(raw)
        except ValueError:
            return None
        return v if math.isfinite(v) else None

    # ------------------------------------------------------------ signing in

    if auth is not None:
        @app.get("/login", include_in_schema=False)
        def login_page(request: Request, next: str = "/"):
            wait = auth.wait(request)
            if wait:
                return too_many(request, wait)
            return HTMLResponse(env.get_template("login.html").render(title=title, next=_local(next), error=None,
                                                                      nav=(), who=None, request=request),
                                headers=SECURITY_HEADERS)

        @app.post("/login", include_in_schema=False)
        async def login(request: Request):
            form = await _form(request)
            token, next = form.get("token", "").strip(), form.get("next", "/")
            if not _same_origin(request):
                return HTMLResponse("a sign-in from another site is refused", status_code=403, headers=SECURITY_HEADERS)
            wait = auth.wait(request)
            if wait:
                return too_many(request, wait)
            who = auth._who(token) if token else None
            if who is None:
                auth.wait(request, auth.failed_cost - 1)  # guessing drains the address's bucket, as in the API
                body = env.get_template("login.html").render(title=title, next=_local(next), nav=(), who=None,
                                                             error="That token is not valid (unknown, expired or "
                                                                   "revoked).", request=request)
                return HTMLResponse(body, status_code=401, headers=SECURITY_HEADERS)
            request.state.principal = who  # the audit log's who
            out = RedirectResponse(_local(next), status_code=303)
            out.set_cookie(COOKIE, token, max_age=SESSION_S, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https", path="/")
            return out

        @app.post("/logout", include_in_schema=False)
        async def logout(request: Request):
            form = await _form(request)
            request.state.principal = auth.who(request)
            if not auth.form_ok(request, form.get("form_key", "")):
                return HTMLResponse("refused: not a form of this console", status_code=403, headers=SECURITY_HEADERS)
            out = RedirectResponse("/login", status_code=303)
            out.delete_cookie(COOKIE, path="/")
            return out

    # ------------------------------------------------------------ views

    def view(path: str):
        """A page of the console at ``path``: signed in (live), then ``fn(request, who, data, at)``."""
        def register(fn):
            @app.get(path, include_in_schema=False, name=fn.__name__)
            def handler(request: Request):
                got = sign_in(request)
                if isinstance(got, Response):
                    return got
                who, data = got
                return fn(request, who, data, at_of(request, data))
            return fn
        return register

    @view("/")
    def overview(request: Request, who, data: model.RunData, at: float | None):
        o = data.overview(at)
        alloc = o["allocation"]
        charts = {}
        for key in _shown_resources(alloc.get("by_tier") or {}):
            series = {tier: v[key] for tier, v in (alloc.get("by_tier") or {}).items() if key in v and any(v[key])}
            if series:
                charts[key] = Markup(svg.lines(alloc["t"], series, at=o["at"] if not data.live else None,
                                               label=tick(data)))
        return page(request, "overview.html", data, who, active="overview", at=o["at"], o=o, charts=charts)

    @view("/topology")
    def topology(request: Request, who, data: model.RunData, at: float | None):
        topo = data.topology(at)
        return page(request, "topology.html", data, who, active="topology", at=topo["at"], topo=topo,
                    picture=Markup(svg.topology(topo)))

    @view("/tenants")
    def tenants(request: Request, who, data: model.RunData, at: float | None):
        rows = data.tenants(at)
        return page(request, "tenants.html", data, who, active="tenants",
                    at=at if at is not None else (data.span() or (None, None))[1], tenants=rows)

    @view("/tasks")
    def tasks(request: Request, who, data: model.RunData, at: float | None):
        p = request.query_params
        try:
            pg = min(max(1, int(p.get("page") or 1)), MAX_PAGE_NUMBER)
        except ValueError:
            pg = 1
        q = model.TaskQuery(tenant=p.get("tenant") or None, app=p.get("app") or None, state=p.get("state") or None,
                            site=p.get("site") or None, tier=p.get("tier") or None, reason=p.get("reason") or None,
                            text=(p.get("q") or None), at=at, offset=(pg - 1) * model.PAGE)
        found = data.tasks(q)
        pages = max(1, math.ceil(found["total"] / model.PAGE))
        if pg > pages:  # past the last page: the last
            pg = pages
            q = dataclasses.replace(q, offset=(pg - 1) * model.PAGE)
            found = data.tasks(q)
        return page(request, "tasks.html", data, who, active="tasks", at=found.get("at"), found=found, q=q,
                    pg=pg, pages=pages, statuses=model.STATUSES, tiers=("cloud", "edge", "device"))

    @view("/tasks/{task:path}")
    def task(request: Request, who, data: model.RunData, at: float | None):
        name = request.path_params["task"]
        t = data.task(name, at, request.query_params.get("tenant"))
        if t is None:
            body = env.get_template("missing.html").render(title=title, nav=NAV, who=who, run=data, active="tasks",
                                                           what=f"task {name}", request=request, span=None, at=None,
                                                           form_key=auth.form_key(request) if auth else "",
                                                           query=lambda **kw: _query(request, **kw))
            return HTMLResponse(body, status_code=404, headers=SECURITY_HEADERS)
        start = t["history"][0]["t"] if t["history"] else 0.0
        end = t.get("now") or (data.span() or (0.0, 0.0))[1]
        picture = Markup(svg.lane(t["segments"], t["moves"], start, max(end, start + 1), label=tick(data))) \
            if t["segments"] else None
        return page(request, "task.html", data, who, active="tasks", at=at, t=t, lane=picture)

    @view("/events")
    def events(request: Request, who, data: model.RunData, at: float | None):
        kind = request.query_params.get("kind") or None
        kinds = (kind,) if kind in model.TIMELINE_KINDS else model.TIMELINE_KINDS
        found = data.events(kinds=kinds, before=at, limit=200)
        strip = Markup(svg.timeline(data.event_counts(kinds), label=tick(data)))
        return page(request, "events.html", data, who, active="events", at=at, found=found, kind=kind,
                    kinds=model.TIMELINE_KINDS, strip=strip)


FORM_MAX = 8192  # bytes of a console form (a token and a few fields)


async def _form(request: Request) -> dict[str, str]:
    """A posted form (application/x-www-form-urlencoded), each field's first value; {} for anything else."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return {}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX:
            return {}
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        return {}
    return {k: v[0] for k, v in fields.items() if v}


def _shown_resources(by_tier: dict[str, dict[str, list]]) -> list[str]:
    keys: list[str] = []
    for series in by_tier.values():
        for k in series:
            if k not in keys:
                keys.append(k)
    return [k for k in keys if k != "mem_mib"]


def _local(target: str) -> str:
    """Only a path of this site to go to after signing in (no other host)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


def _query(request: Request, **changes: Any) -> str:
    """This page's query with some parameters changed (None: dropped)."""
    params = dict(request.query_params)
    for k, v in changes.items():
        if v is None or v == "":
            params.pop(k, None)
        else:
            params[k] = str(v)
    return ("?" + urlencode(params)) if params else "?"
