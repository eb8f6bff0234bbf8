"""What the console's pages read, the same for a live control plane and a
recorded run: ``RunData`` and the shapes it answers with (plain dicts and
lists, ready for the templates and for JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from suanli.model.fleet import TIERS
from suanli.sim.events import INCIDENT_KINDS as _INCIDENTS

STATUSES = ("pending", "running", "finished", "failed", "omitted", "withdrawn")
RUNNING = STATUSES.index("running")
TIER_CODES = {t: i for i, t in enumerate(TIERS)}
MOVE_KINDS = ("migrated", "preempted", "lost", "requeued")
INCIDENT_KINDS = _INCIDENTS
TIMELINE_KINDS = (*MOVE_KINDS, *INCIDENT_KINDS, "omitted", "failed", "withdrawn")  # the moves-and-events view
PAGE = 50  # rows of a task table page
BUCKETS = 120  # time buckets of the events timeline


@dataclass(frozen=True)
class TaskQuery:
    tenant: str | None = None
    app: str | None = None
    state: str | None = None
    site: str | None = None
    tier: str | None = None
    reason: str | None = None  # the first reason's code
    text: str | None = None  # a part of the task's name
    at: float | None = None  # a recorded run: the instant (None: its end)
    offset: int = 0
    limit: int = PAGE


class RunData:
    """A run as the console reads it. ``live``: a control plane (no instant to
    choose); otherwise a recorded run with ``span()`` to slide over."""

    live: bool = False
    title: str = ""

    def span(self) -> tuple[float, float] | None:
        return None

    def overview(self, at: float | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def tasks(self, q: TaskQuery) -> dict[str, Any]:
        raise NotImplementedError

    def task(self, name: str, at: float | None = None, tenant: str | None = None) -> dict[str, Any] | None:
        """A task's page (None: no such task here): ``at`` a recorded run's instant,
        ``tenant`` the one an admin names on a live control plane."""
        raise NotImplementedError

    def events(self, kinds: Iterable[str] = (), before: float | None = None, limit: int = 100) -> dict[str, Any]:
        """Events of ``kinds`` (all: none given), the latest first (up to a recorded run's instant ``before``)."""
        raise NotImplementedError

    def topology(self, at: float | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def event_counts(self, kinds: Iterable[str], buckets: int = BUCKETS) -> dict[str, Any]:
        """Events of each kind per time bucket: ``start``, ``end`` and ``kinds``
        (kind -> counts, one per bucket), for the timeline of moves and events."""
        raise NotImplementedError

    def tenants(self, at: float | None = None) -> list[dict[str, Any]]:
        raise NotImplementedError


class SiteTiers:
    """The tier of a site by name: a listed site's own; a population member's
    (a device, named like ``car-0000123``) its population's."""

    def __init__(self, world: dict[str, Any]) -> None:
        self.listed = {s["name"]: s["tier"] for s in world.get("sites") or []}
        self.prefixes = [(p["first"].rstrip("0123456789"), p["tier"]) for p in world.get("populations") or []
                         if p.get("first")]

    def tier(self, site: str | None) -> str | None:
        if site is None:
            return None
        hit = self.listed.get(site)
        if hit is not None:
            return hit
        for prefix, tier in self.prefixes:
            if site.startswith(prefix) and site[len(prefix):].isdigit():
                return tier
        return None


def cohort_of(tenant: dict[str, Any], now: dict[str, Any] | None) -> dict[str, Any]:
    """The tenants page's cohort fields of one tenant of the world (``world_json``'s):
    its cohort, limits and reclaim policy, and what it borrows and lends ``now``
    (None: not known at this instant); nothing for a tenant in no cohort."""
    if not tenant.get("cohort"):
        return {}
    now_known = now is not None
    return {"cohort": tenant["cohort"], "reclaim": tenant.get("reclaim"),
            "borrowing_limit": tenant.get("borrowing_limit") or {}, "lending_limit": tenant.get("lending_limit") or {},
            "borrowed": (now or {}).get("borrowed", {}) if now_known else None,
            "lent": (now or {}).get("lent", {}) if now_known else None}


def gang_of(task: str) -> str:
    """The gang's first member, which a resize's event names."""
    return task.rsplit("/", 1)[0] + "/0"


def widths(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An elastic gang's width over time, from its first member's events: the
    width it started at, then each resize (empty when it was never resized)."""
    resized = [e for e in history if e["kind"] == "resized"]
    if not resized:
        return []
    start = next((e["t"] for e in history if e["kind"] == "started"), resized[0]["t"])
    out = [{"t": start, "width": resized[0]["from"], "why": "started"}]
    out += [{"t": e["t"], "width": e["to"], "why": e.get("why", "")} for e in resized]
    return out


def segments(history: list[dict[str, Any]], end: float, tiers: SiteTiers) -> list[dict[str, Any]]:
    """Where a task was over time, from its events: one segment per stay on a
    node (from its placement to when it left, or the end), with the site and
    tier, and whether it ran there or was on its way (placed, state moving)."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for e in history:
        kind, t = e["kind"], e["t"]
        if kind == "placed" or kind == "migrated" and cur is None:
            if cur is not None:
                cur["end"] = t
                out.append(cur)
            node = e.get("node") or e.get("to") or ""
            site = e.get("site") or node.split("/", 1)[0]
            cur = {"site": site, "node": node, "tier": tiers.tier(site), "start": t, "end": None, "running_from": None}
        elif kind == "started" and cur is not None:
            if cur["running_from"] is None:
                cur["running_from"] = t
        elif kind in ("preempted", "requeued", "lost", "finished", "failed", "omitted", "withdrawn") and cur is not None:
            cur["end"] = t
            out.append(cur)
            cur = None
    if cur is not None:
        cur["end"] = end
        out.append(cur)
    return out


def down_links(events: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The links down after these link events (oldest first)."""
    down: dict[tuple[str, ...], list[str]] = {}
    for e in events:
        pair = e.get("between") or []
        key = tuple(sorted(pair))
        if e["kind"] == "linkDown":
            down[key] = list(pair)
        elif e["kind"] == "linkUp":
            down.pop(key, None)
    return list(down.values())


def topology(world: dict[str, Any], load: dict[str, int], at: float | None,
             down: list[list[str]] = ()) -> dict[str, Any]:
    """Sites by tier with their links and running tasks; device populations
    aggregated per site they attach to, with their tasks (``load`` of member
    sites summed per population)."""
    sites = [{**s, "running": load.get(s["name"], 0)} for s in world.get("sites") or []]
    listed = {s["name"] for s in sites}
    tiers = SiteTiers(world)
    populations = []
    for p in world.get("populations") or []:
        prefix = p["first"].rstrip("0123456789")
        running = sum(n for name, n in load.items() if name not in listed and name.startswith(prefix))
        busy = sum(1 for name, n in load.items() if n and name not in listed and name.startswith(prefix))
        populations.append({**p, "running": running, "busy_sites": busy})
    by_tier: dict[str, list[dict[str, Any]]] = {t: [] for t in TIERS}
    for s in sites:
        by_tier.setdefault(s["tier"], []).append(s)
    others = {name: n for name, n in load.items() if name not in listed and tiers.tier(name) is None}
    return {"at": at, "by_tier": by_tier, "links": world.get("links") or [], "populations": populations,
            "unknown_sites": others, "down_links": list(down)}
