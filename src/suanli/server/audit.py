"""Who did what, and how long it took: every request gets an id (``X-Request-ID``, in its answer
and in the access log), and every request that asks for a change (any
method but GET, HEAD and OPTIONS) is recorded in the store's audit log:
when, the token's public id and tenant (or that no valid token was given),
the method and route, the path, the status it got, the request id and the
client's address.

Recording does not hold up the answer: rows wait in memory and one task
writes them, every ``FLUSH_S`` or ``FLUSH_ROWS``, and all of them when the
server stops. A crash loses the rows of at most the last ``FLUSH_S``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from typing import Any

from suanli.server.store import Store

FLUSH_S = 0.2
FLUSH_ROWS = 500
SAFE = ("GET", "HEAD", "OPTIONS")
REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # a client's own id is kept if it looks like one
access = logging.getLogger("suanli.access")


class AuditLog:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.pending: list[dict[str, Any]] = []
        self._task: asyncio.Task | None = None
        self._wake = None

    def add(self, row: dict[str, Any]) -> None:
        self.pending.append(row)
        if len(self.pending) >= FLUSH_ROWS and self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        self._wake = asyncio.Event()
        try:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), FLUSH_S)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                await asyncio.to_thread(self.flush)
        except asyncio.CancelledError:
            pass

    def flush(self) -> None:
        rows, self.pending = self.pending, []
        if rows:
            try:
                self.store.audit_add(rows)
            except Exception as exc:  # the store refuses writes for now: keep them for the next try
                self.pending[:0] = rows
                access.warning("audit rows not written yet (%d waiting): %s", len(self.pending), exc)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.to_thread(self.flush)


class Observer:
    """ASGI middleware: each request's id, its count by method, route and
    status (for /metrics), its line in the access log, and for a change its
    row in the audit log."""

    def __init__(self, app, observed, audit: AuditLog) -> None:
        self.app, self.observed, self.audit = app, observed, audit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if REQUEST_ID.match(given) else secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500  # no answer started: the server failed
        started = time.perf_counter()

        async def seen(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, seen)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")  # the router sets it on a match
            method = scope["method"]
            seconds = time.perf_counter() - started
            self.observed.requests.labels(method, route, str(status)).inc()
            self.observed.latency.labels(method, route).observe(seconds)
            who = scope["state"].get("principal")
            client = scope.get("client")
            address = client[0] if client else None
            line = {"request_id": request_id, "method": method, "path": scope["path"], "route": route,
                    "status": status, "ms": round(seconds * 1000, 2),
                    "token_id": getattr(who, "token_id", None), "address": address}
            if access.isEnabledFor(logging.INFO):
                access.info(json.dumps(line, separators=(",", ":")))
            if method not in SAFE:
                self.audit.add({"at": time.time(), "token_id": line["token_id"],
                                "tenant": getattr(who, "tenant", None), "admin": bool(who is not None and who.admin),
                                "action": f"{method} {route}", "object": scope["path"][:1000], "status": status,
                                "request_id": request_id, "address": address})
