"""The words of reasons: each reason's text rendered from its code, detail
and figures (``scheduling.reasons.Why``), for every output that shows one:
the JSON of ``schedule``, ``simulate``, ``plan`` and the API (the
``reasons`` map and the ``why`` list), the command line and the report.
The scheduler itself writes no reason text.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any, Iterable

from suanli.model.quantities import format_amount
from suanli.scheduling.reasons import Domain, Why, binding_of

_AMOUNTS = ("gap", "requested", "allowed", "most")  # figures in the resource's canonical units

# (code, detail) -> the text, formatted with the reason's figures (``resource``
# and ``kind`` as names, amounts as a user writes them, a cause as its text)
TEXTS: dict[tuple[str, str | None], str] = {
    ("site", None): "site not allowed for tenant",
    ("selector", "tier"): "tier not selected",
    ("selector", "site"): "site not selected",
    ("selector", "region"): "region not selected",
    ("selector", "labels"): "labels not matched",
    ("private", None): "another device's own site",
    ("near", None): "beyond {ms:g} ms of {site}",
    ("reach", "data"): "data site {site} unreachable",
    ("reach", "state"): "state at {site} unreachable",
    ("reach", "hosts"): "unreachable from the virtual cluster's hosts",
    ("reach", "split"): "affinity group split by the network",
    ("arch", None): "arch mismatch",
    ("arch", "image"): "no variant of its image for the arch (it has {archs})",
    ("kind", None): "no {resource}",
    ("model", None): "{resource} model mismatch",
    ("capacity", None): "insufficient {resource}",
    ("shareable", None): "{resource} not shareable",
    ("unavailable", None): "node unavailable",
    ("in-use", None): "node in use",
    ("anti-affinity", None): "anti-affinity {group} ({scope})",
    ("quota", None): "tenant {tenant} quota",
    ("quota", "gap"): "tenant {tenant} quota for {resource}: {gap} more needed",
    ("quota", "cohort"): "tenant {tenant} quota for {resource}, with what cohort {cohort} lends: {gap} more needed",
    ("quota", "lent"): "tenant {tenant} quota for {resource}: {gap} of it lent in cohort {cohort}, not reclaimed",
    ("offline", None): "near site {site} is offline",
    ("inadmissible", "domain"): "inadmissible: the largest {domain} holds {fits} of its {members} members, even empty",
    ("queued", None): "queued behind {task} (first come, first served)",
    ("reserved", None): "held for a reservation: {task} from t={start:g}s",
    ("reserved", "rows"): "not one of the rows reserved for it",
    ("reservation", None): "reserved from t={made:g}s, expected start t={start:g}s",
    ("inadmissible", None): "inadmissible: it asks {requested} {resource} on one node, and the most any node of "
                            "the fleet has is {most}",
    ("domain", "partial"): "room for {taken} of {members} members",
    ("domain", "none"): "not in any {domain}",
    ("domain", "fewer"): "room for fewer than {least} members",
    ("domain", "no-room"): "no {domain} with room for {least} members",
    ("domain", "split"): "members do not all fit in one {domain}",
    ("domain", "held"): "outside the {domain} the group holds",
    ("elastic", None): "elastic gang placed with {placed} of {members} members",
    ("elastic", "parts"): "running {placed} of {members} parts at a time",
    ("hosts", None): "virtual cluster {vc} has no hosts",
    ("growth", None): "no elastic host group",
    ("growth", "too-little"): "host group {group}: hosts have too little {resource}",
    ("growth", "no-kind"): "host group {group}: hosts have no {resource}",
    ("growth", "models"): "host group {group}: hosts' {resource} models excluded",
    ("growth", "limit"): "host group {group}: needs {need} more hosts, room for {room} (max {max})",
    ("growth", "placing"): "grow {group}: {cause}",
}


def column_of(resource: str | None) -> int:
    """The column whose amounts ``resource``'s are formatted as (accelerators alike past 1)."""
    return {"cpu": 0, "memory": 1}.get(resource or "", 2)


def domain_text(d: Domain) -> str:
    """"ib domain", "site (affinity)", "ib domain and site", "set of mutually
    reachable sites", or "placement" (anywhere)."""
    if d.levels:
        levels = f"{' and '.join(d.levels)} domain"
        return f"{levels} and {d.scope}" if d.scope else levels
    if d.scope:
        return f"{d.scope} (affinity)"
    return "set of mutually reachable sites" if d.reachable else "placement"


def _format(code: str, detail: str | None, resource: str | None, args, nested) -> str:
    """The text of (code, detail) with its figures: amounts as a user writes
    them, a nested reason or domain through ``nested``."""
    col = column_of(resource)
    figures: dict[str, Any] = {"resource": resource}
    for k, v in args:
        if isinstance(v, (Why, Domain, dict)):
            v = nested(v)
        elif k in _AMOUNTS and v is not None:
            v = format_amount(col, v)
        figures[k] = v
    return TEXTS[code, detail].format(**figures)


@lru_cache(maxsize=1 << 16)
def text(why: Why) -> str:
    """A reason's text, from its code, detail and figures."""
    if not isinstance(why, Why):
        raise TypeError(f"a reason must be a Why, not {type(why).__name__}: {why!r}")
    return _format(why.code, why.detail, why.resource, why.args,
                   lambda v: domain_text(v) if isinstance(v, Domain) else text(v))


def entry_text(entry: dict[str, Any]) -> str:
    """A ``why`` entry's text made again from its code, detail, resource and
    figures alone (``args``; a cause is an entry of its own), as a client of
    the JSON may render it."""
    return _format(entry["code"], entry.get("detail"), entry.get("resource"), (entry.get("args") or {}).items(),
                   entry_text)


def reasons_json(reasons: Counter) -> dict[str, int]:
    """A task's reasons as outputs show them (the ``reasons`` map): text to
    count, most first, then by text."""
    out: Counter = Counter()
    for why, n in reasons.items():
        out[text(why)] += int(n)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


OWN_DEVICE = "beyond its bound from its own device"  # a population's near reasons, one line for all of them
# other reasons about one device of a population, one line each for all of them
_OWN_DEVICE_TEXTS = {("offline", None): "its own device is offline"}


def first_reasons_json(reason_sets: Iterable[Counter], fleet=None) -> dict[str, int]:
    """Waiting tasks per the reason each shows first (``why_json``'s first
    entry: its binding constraint, else the reason of most rows), most first,
    then by text: what holds each back, counted once. A reason about a device
    of a population (a million of them, each its own site) is one line for
    all of them, not a line per device: a bound near it ``OWN_DEVICE``, it
    being offline "its own device is offline", another its text with the
    population's name pattern for the site."""
    out: Counter = Counter()
    names = fleet.site_table.names if fleet is not None else None
    index = fleet.site_index if fleet is not None else None
    for reasons in reason_sets:
        if not reasons:
            continue
        b = binding_of(reasons)
        why = b.reason if b is not None else min(reasons.items(), key=lambda kv: (-kv[1], text(kv[0])))[0]
        site = why.arg("site") if names is not None else None
        i = index.get(site) if isinstance(site, str) else None
        block = names.block_of(i) if i is not None else None
        if block is None:
            out[text(why)] += 1
        elif why.code == "near":
            out[OWN_DEVICE] += 1
        else:
            pattern = next(str(p) for first, _, p in names.blocks() if first == block.start)
            out[_OWN_DEVICE_TEXTS.get((why.code, why.detail)) or text(why).replace(site, pattern)] += 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def reason_json(why: Why) -> dict[str, Any]:
    """A reason's own entry: its text, code, detail, layer, resource and figures."""
    out: dict[str, Any] = {"reason": text(why), "code": why.code}
    if why.detail is not None:
        out["detail"] = why.detail
    out["layer"] = why.layer
    if why.resource is not None:
        out["resource"] = why.resource
    if why.args:
        out["args"] = {k: reason_json(v) if isinstance(v, Why) else domain_text(v) if isinstance(v, Domain) else v
                       for k, v in why.args}
    return out


def why_json(reasons: Counter) -> list[dict[str, Any]]:
    """A task's reasons, the binding constraint first (marked, with its
    figures), then the others by rows, then by text."""
    b = binding_of(reasons)
    out = []
    if b is not None:
        out.append({**reason_json(b.reason), **b.json(), "binding": True, "count": int(reasons.get(b.reason, 0))})
    rest = [(text(why), why, n) for why, n in reasons.items() if b is None or why != b.reason]
    for _, why, n in sorted(rest, key=lambda t: (-t[2], t[0])):
        out.append({**reason_json(why), "count": int(n), "binding": False})
    return out


def binding_line(w: dict[str, Any]) -> str:
    """A binding constraint's ``why`` entry as one line: "insufficient cpu: 16
    requested, 12 free at best (4 more needed) on 3 nodes"."""
    nodes = w.get("nodes", 0)
    if not nodes:  # a bound on the whole unit (a quota), not on nodes
        return w["reason"]
    s = "s" if nodes != 1 else ""
    if w.get("free") is None or w.get("requested") is None:
        return f"{w['reason']} (the only obstacle on {nodes} node{s})"
    c = column_of(w.get("resource"))
    if w.get("capacity") is not None:  # more than those nodes hold even empty: it never fits there
        return (f"{w['reason']}: {format_amount(c, w['requested'])} requested, and the most any of those {nodes} "
                f"node{s} holds even empty is {format_amount(c, w['capacity'])}: it can never fit there")
    return (f"{w['reason']}: {format_amount(c, w['requested'])} requested, {format_amount(c, w['free'])} free "
            f"at best ({format_amount(c, w['gap'])} more needed) on {nodes} node{s}")
