"""Readable tables of a placement outcome, for people (``-o table``)."""

from __future__ import annotations

from collections import Counter, defaultdict
from enum import Enum
from typing import Any

from rich.console import Console
from rich.table import Table

from suanli.phrases import binding_line


class OutputFormat(str, Enum):
    """``-o``: a table for people, JSON for programs."""

    table = "table"
    json = "json"


class ScheduleOutput(str, Enum):
    """``schedule -o``: also NDJSON (one object per line, streamed) and a summary
    (no line per task), for worlds of a million placements."""

    table = "table"
    json = "json"
    ndjson = "ndjson"
    summary = "summary"

MAX_ROWS = 200  # beyond this, tables summarise; -o json has everything
MAX_SITES = 20  # sites named in a summary line
MAX_REASONS = 20  # reasons listed in a summary


def _devices(devs: list[dict[str, Any]]) -> str:
    if not devs:
        return ""
    parts = []
    for d in devs:
        share = "" if d["milli"] == 1000 else f"×{d['milli'] / 1000:g}"
        parts.append(f"{d['kind']}{d['index']}{share}")
    return " ".join(parts)


def _res(r: dict[str, int]) -> str:
    out = [f"cpu {r['cpu_milli'] / 1000:g}", f"mem {r['mem_mib'] / 1024:g}Gi"]
    out += [f"{k[:-6]} {v / 1000:g}" for k, v in r.items() if k.endswith("_milli") and k != "cpu_milli"]
    return ", ".join(out)


def print_outcome(result: dict[str, Any], console: Console) -> None:
    hosts = result["hosts"]
    if hosts:
        t = Table(title=f"Virtual cluster hosts ({len(hosts)})", title_justify="left")
        for col in ("vc", "host", "node", "resources", "devices"):
            t.add_column(col)
        for h in hosts[:MAX_ROWS]:
            t.add_row(h["vc"], h["host"], h["node"], _res(h["resources"]), _devices(h["devices"]))
        console.print(t)
        if len(hosts) > MAX_ROWS:
            console.print(f"… {len(hosts) - MAX_ROWS} more hosts (see -o json)")

    placements = result["placements"]
    t = Table(title=f"Placements ({len(placements)})", title_justify="left")
    for col in ("task", "tenant", "vc", "host", "node", "devices"):
        t.add_column(col)
    for p in placements[:MAX_ROWS]:
        t.add_row(p["task"], p["tenant"], p["vc"], p["host"], p["node"], _devices(p["devices"]))
    console.print(t)
    if len(placements) > MAX_ROWS:
        by_site: Counter = Counter(p["site"] for p in placements)
        top = by_site.most_common(MAX_SITES)
        rest = f", and {len(by_site) - len(top)} more sites" if len(by_site) > len(top) else ""
        console.print(f"… {len(placements) - MAX_ROWS} more; by site: "
                      + ", ".join(f"{s} {n}" for s, n in top) + rest)

    unscheduled = result["unscheduled"]
    if unscheduled:
        t = Table(title=f"Unscheduled ({len(unscheduled)})", title_justify="left")
        t.add_column("task")
        t.add_column("why", overflow="fold")
        for u in unscheduled[:MAX_ROWS]:
            t.add_row(u["task"], why_text(u.get("why"), u["reasons"]))
        console.print(t)
    for u in result.get("unplaced_hosts", []):
        why = ", ".join(f"{n} {r}" for r, n in u["reasons"].items())
        console.print(f"[yellow]host group {u['vc']}/{u['group']}: {u['missing']} hosts not placed[/yellow] ({why})")

    print_summary(result["metrics"], console)


def why_text(why: list[dict[str, Any]] | None, reasons: dict[str, int]) -> str:
    """A task's ``why`` list as one line: the binding constraint first, in
    figures, then the other reasons with their node counts (without ``why``,
    an older record: its ``reasons`` map)."""
    if not why:
        return ", ".join(f"{n} {r}" for r, n in reasons.items())
    parts = []
    for w in why:
        if w.get("binding"):
            parts.append(binding_line(w))
        else:
            parts.append(f"{w['count']} {w['reason']}")
    return "; ".join(parts[:1]) + ("; " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def plan_text(m: dict[str, Any]) -> str:
    """One plan of ``suanli plan`` as one line: what it does, what it costs and
    gains, and what holds it back (``moves.plan_json``'s shape)."""
    parts = [f"{m['kind']:<10}"]
    if "for" in m:
        parts.append(f"for {', '.join(m['for'])} (priority {m['priority']}):")
    if "evict" in m:
        parts.append("evict " + ", ".join(m["evict"]))
    if "move" in m:
        parts.append("move " + "; ".join(f"{x['task']} {x['from']} -> {x['to']}"
                                         + (f" (devices {x['devices']})" if "devices" in x else "") for x in m["move"]))
    if m.get("reason") and "for" not in m:
        parts.append(f"({m['reason']})")
    c = m["cost"]
    cost = [f"{c['tasks']} task{'s' if c['tasks'] != 1 else ''}"]
    if c["state_bytes"]:
        cost.append(f"{c['state_bytes'] / 2**30:.3g} GiB of state")
    if "downtime_s" in c:
        cost.append(f"downtime {c['downtime_s']:g}s")
    if "max_priority" in c:
        cost.append(f"priority up to {c['max_priority']}")
    line = " ".join(parts) + f" [cost: {', '.join(cost)}" + (f"; gain {m['gain']:g}" if "gain" in m else "") + "]"
    held = m.get("held")
    if held:
        when = f"until t={held['until_s']:g}s" if held.get("until_s") is not None else \
            (f"until {', '.join(held['after'])} run{'s' if len(held['after']) == 1 else ''} again"
             if held.get("after") else "until a move in flight ends")
        line += f"  held back by {held['by']} {when}"
    return line


def print_summary(m: dict[str, Any], console: Console) -> None:
    """What was placed, the allocation by tier, and why the rest waits (the
    most frequent reasons): the outcome without a line per task."""
    tasks = m["tasks"]
    console.print(f"\n[bold]{tasks['placed']}/{tasks['total']} tasks placed[/bold], "
                  f"{tasks['unscheduled']} unscheduled, {m['hosts']['total']} hosts")
    t = Table(title="Allocation by tier (used by tasks / reserved by hosts / capacity)", title_justify="left")
    t.add_column("tier")
    keys = list(m["allocation"]["by_resource"])
    for k in keys:
        t.add_column(k, justify="right")
    rows: dict[str, dict] = defaultdict(dict, m["allocation"]["by_tier"])
    rows["all"] = m["allocation"]["by_resource"]
    for tier, block in rows.items():
        cells = []
        for k in keys:
            b = block.get(k)
            cells.append("" if not b or not b["capacity"] else f"{b['used_ratio']:.0%} / {b['reserved_ratio']:.0%}")
        t.add_row(tier, *cells)
    console.print(t)
    reasons = list(m.get("unscheduled_by_first_reason", {}).items())
    if reasons:
        t = Table(title="Why tasks wait (tasks by what holds each back: the constraint that binds first)",
                  title_justify="left")
        t.add_column("reason", overflow="fold")
        t.add_column("tasks", justify="right")
        for reason, n in reasons[:MAX_REASONS]:
            t.add_row(reason, str(n))
        console.print(t)
        if len(reasons) > MAX_REASONS:
            console.print(f"… {len(reasons) - MAX_REASONS} more reasons (see -o json)")
