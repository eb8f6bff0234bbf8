"""The live control plane, read for the console: tasks and events from the
store (filtered, counted and paged by the database), what is in use now
from the controller, the world from the server's own documents. Everything
a tenant's principal reads is its own: the store is asked for that tenant's
rows only, and the world's tenants and sites are cut to what it may see.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from suanli.console import model
from suanli.console.world import world_json

EVENTS_WINDOW_S = 3600.0  # the live events timeline: the last hour


class LiveRun(model.RunData):
    live = True

    def __init__(self, store, controller, world, who, shared: dict[str, Any]) -> None:
        self.store, self.controller, self.who = store, controller, who
        self.tenant = who.tenant  # None: an admin, who reads everything
        if "world" not in shared:
            shared["world"] = world_json(world)
        self.world = shared["world"]
        self.vcs = world.vcs  # the server's own, kept current as the configuration changes (the drawing's is not)
        self.title = "control plane"
        self.tiers = model.SiteTiers(self.world)
        self.logs = bool(shared.get("logs"))

    # ---------------------------------------------------------------- helpers

    def _now(self) -> dict[str, Any]:
        try:
            got = self.controller.ask("console")
        except Exception:  # the controller is away for a moment: what the store knows
            return {"allocation": {}, "history": {"t": [], "by_tier": {}}, "tenants": {}}
        return got

    def _event(self, row) -> dict[str, Any]:
        from suanli.server.api import event_body

        return event_body(row.body, self.who.admin)

    def _sites_of_tier(self, tier: str) -> tuple[list[str], list[str]]:
        sites = [s["name"] for s in self.world["sites"] if s["tier"] == tier]
        prefixes = [p["first"].rstrip("0123456789") for p in self.world["populations"] if p["tier"] == tier]
        return sites, prefixes

    # ---------------------------------------------------------------- RunData

    def overview(self, at: float | None = None) -> dict[str, Any]:
        now = self._now()
        counts = dict(self.store.counts_by("status", self.tenant, most=10))
        by_site = self.store.counts_by("site", self.tenant, "running", most=1000)
        tiers = {t: 0 for t in model.TIERS}
        for site, n in by_site:
            tier = self.tiers.tier(site)
            if tier in tiers:
                tiers[tier] += n
        _, incidents = self.store.recent_events(self.tenant, model.INCIDENT_KINDS, limit=10, count=False)
        return {
            "at": time.time(), "counts": {s: counts.get(s, 0) for s in model.STATUSES},
            "running_by_tier": tiers, "running_by_site": by_site[:12],
            "allocation": now["history"],  # sampled by the controller, whether the console was open or not
            "pending_by_reason": dict(self.store.counts_by("reason", self.tenant, "pending", most=20)),
            "incidents": [self._event(e) for e in incidents],
        }

    def tasks(self, q: model.TaskQuery) -> dict[str, Any]:
        tenant = self.tenant if self.tenant is not None else q.tenant
        sites, prefixes = (None, ()) if q.tier is None else self._sites_of_tier(q.tier)
        if q.site is not None:
            sites, prefixes = ([q.site] if sites is None or q.site in sites else []), ()
        total, rows = self.store.task_page(tenant, app=q.app, status=q.state, sites=sites, site_prefixes=prefixes,
                                           reason_code=q.reason, text=q.text, offset=q.offset, limit=q.limit)
        return {"at": None, "total": total, "offset": q.offset, "limit": q.limit,
                "rows": [{"task": r.name, "tenant": r.tenant, "app": app, "status": r.status, "site": r.site,
                          "tier": self.tiers.tier(r.site), "reason": r.reason} for r, app in rows]}

    def task(self, name: str, at: float | None = None, tenant: str | None = None) -> dict[str, Any] | None:
        owner = self.tenant if self.tenant is not None else tenant
        if owner is None:
            return None  # an admin names the tenant (the tasks table's links do)
        row = self.store.task(owner, name)
        if row is None:
            return None
        _, events = self.store.recent_events(owner, task=name, limit=1000, count=False, app_id=row.app_id)
        history = [self._event(e) for e in reversed(events)]
        lead = model.gang_of(name)
        lead_history = history
        if lead != name and (lead_row := self.store.task(owner, lead)) is not None:
            _, lead_events = self.store.recent_events(owner, task=lead, limit=1000, count=False,
                                                      app_id=lead_row.app_id)
            lead_history = [self._event(e) for e in reversed(lead_events)]
        now = time.time()
        return {"task": row.name, "tenant": row.tenant, "app": row.name.split("/", 1)[0], "status": row.status,
                "site": row.site, "tier": self.tiers.tier(row.site), "node": row.node, "reason": row.reason,
                "ready": row.ready,
                "why": row.why, "history": history, "now": now,
                "segments": model.segments(history, now, self.tiers),
                "logs_url": _logs_url(name, row.tenant, self.who.admin) if self.logs and row.placements else None,
                "moves": [e for e in history if e["kind"] in model.MOVE_KINDS],
                "widths": model.widths(lead_history)}

    def events(self, kinds: Iterable[str] = (), before: float | None = None, limit: int = 100) -> dict[str, Any]:
        total, rows = self.store.recent_events(self.tenant, tuple(kinds), limit=limit)
        return {"total": total, "rows": [self._event(e) for e in rows]}

    def event_counts(self, kinds: Iterable[str], buckets: int = model.BUCKETS) -> dict[str, Any]:
        end = time.time()
        start = end - EVENTS_WINDOW_S
        return {"start": start, "end": end,
                "kinds": self.store.event_counts(self.tenant, tuple(kinds), start, end, buckets)}

    def topology(self, at: float | None = None) -> dict[str, Any]:
        load = dict(self.store.counts_by("site", self.tenant, "running", most=1_000_000))
        _, links = self.store.recent_events(None if self.who.admin else self.tenant, ("linkDown", "linkUp"),
                                            limit=10_000, count=False)
        down = model.down_links(self._event(e) for e in reversed(links))
        return model.topology(self.world, load, time.time(), down)

    def tenants(self, at: float | None = None) -> list[dict[str, Any]]:
        now = self._now()
        out = []
        for t in self.world["tenants"]:
            if self.tenant is not None and t["name"] != self.tenant:
                continue
            usage = now["tenants"].get(t["name"], {})
            counts = dict(self.store.counts_by("status", t["name"], most=10))
            out.append({"name": t["name"], "weight": t["weight"], "quota": t["quota"], "used": usage.get("used", {}),
                        "dominant_share": usage.get("dominant_share"),
                        "tasks": {s: counts.get(s, 0) for s in model.STATUSES}, "hosts": self._hosts(t["name"]),
                        **model.cohort_of(t, usage)})
        return out

    def _hosts(self, tenant: str) -> list[dict[str, Any]]:
        try:
            vcs = self.controller.ask("vcs", [n for n in self._vc_names(tenant)])
        except Exception:
            return []
        per: dict[tuple[str, str, str], int] = {}
        for vc in vcs:
            for h in vc["hosts"]:
                key = (vc["name"], h.get("group") or "", h["node"].split("/", 1)[0])
                per[key] = per.get(key, 0) + 1
        return [{"vc": vc, "group": group or None, "site": site, "hosts": n}
                for (vc, group, site), n in sorted(per.items())]

    def _vc_names(self, tenant: str) -> list[str]:
        return [name for name, vc in list(self.vcs.items()) if vc.tenant == tenant]


def _logs_url(task: str, tenant: str, admin: bool) -> str:
    """The API's log of a task run for real (the session's cookie reads it)."""
    from urllib.parse import quote

    return f"/v1/logs/{quote(task)}" + (f"?tenant={quote(tenant)}" if admin else "")
