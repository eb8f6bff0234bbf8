"""The JSON object of a static placement (SPEC.md, Outputs).

``outcome_json`` turns an ``Outcome`` into plain dicts and lists in a fixed
order, so the same input and seed give byte-identical JSON. Metrics are
documented in ``docs/outputs.md``.
"""

from __future__ import annotations

import json
from collections import Counter
from json.encoder import encode_basestring_ascii as _string
from typing import Any, Iterator

import numpy as np

from suanli.model.fleet import TIERS
from suanli.phrases import first_reasons_json, reasons_json, why_json
from suanli.scheduling.state import Placement, PlacementState
from suanli.scheduling.static import Outcome
from suanli.scheduling.table import Allocation, CandidateTable



def cohorts_json(state, nonzero: bool = False) -> dict[str, dict[str, Any]]:
    """Each cohort member's cohort, and what it borrows and lends now (per
    resource, as the quota writes them; ``nonzero``: only what it borrows or
    lends), by tenant; tenants in no cohort are left out. The attribution
    over the tenants is made once, not once per tenant."""
    cohorts = state.cohorts
    if not cohorts:
        return {}
    borrowed, lent = cohorts.borrowed(state.used), cohorts.lent(state.used)
    out: dict[str, dict[str, Any]] = {}
    for name, i in state.tenant_index.items():
        c = int(cohorts.of[i])
        if c < 0:
            continue
        b, ln = resources_json(state, borrowed[i]), resources_json(state, lent[i])
        if nonzero:
            b, ln = {k: v for k, v in b.items() if v}, {k: v for k, v in ln.items() if v}
        out[name] = {"cohort": cohorts.names[c], "borrowed": b, "lent": ln}
    return out


def resources_json(state: PlacementState, vec: np.ndarray) -> dict[str, int]:
    keys = state.fleet.resource_keys
    out = {keys[0]: int(vec[0]), keys[1]: int(vec[1])}
    out.update({keys[i]: int(vec[i]) for i in range(2, len(keys)) if vec[i]})
    return out


def devices_json(state: PlacementState, table: CandidateTable, a: Allocation) -> list[dict[str, Any]]:
    fleet = state.fleet
    out = []
    for slot, milli in sorted(zip(a.slots, a.milli), key=lambda sm: table.dev_index[sm[0], a.row]):
        out.append({
            "kind": fleet.kinds.names[int(table.dev_kind[slot, a.row])],
            "model": fleet.models.names[int(table.dev_model[slot, a.row])],
            "index": int(table.dev_index[slot, a.row]),
            "milli": int(milli),
        })
    return out


def placement_json(state: PlacementState, p: Placement) -> dict[str, Any]:
    fleet = state.fleet
    return {
        "task": p.task,
        "tenant": p.tenant,
        "vc": p.vc,
        "host": p.host.name,
        "node": fleet.node_name(p.host.node),
        "site": fleet.site_name_of(p.host.node),
        "resources": resources_json(state, p.alloc.vec),
        "devices": devices_json(state, state.vcs[p.vc].table, p.alloc),
    }


class TextOf:
    """The compact JSON text (``separators=(",", ":")``, ASCII) of placements and
    hosts, as ``json`` would write ``placement_json`` and ``hosts_json``, made
    from strings: millions of them without a dict each. Resource vectors and
    the few names that repeat (tenants, VCs) are encoded once."""

    def __init__(self, state: PlacementState) -> None:
        self.state = state
        self.dumps = json.JSONEncoder(separators=(",", ":")).encode
        self._res: dict[bytes, str] = {}
        self._dev: dict[tuple, str] = {}
        self._last: tuple[int, str] = (-1, "")
        self._names: dict[str, str] = {}
        fleet = state.fleet
        self._node_name = fleet.node_name
        self._site_name_of = fleet.site_name_of

    def _name(self, s: str) -> str:
        got = self._names.get(s)
        if got is None:
            got = self._names[s] = _string(s)
        return got

    def _resources(self, vec: np.ndarray) -> str:
        key = vec.tobytes()
        got = self._res.get(key)
        if got is None:
            got = self._res[key] = self.dumps(resources_json(self.state, vec))
        return got

    def _devices(self, table: CandidateTable, a: Allocation) -> str:
        if not a.slots:
            return "[]"
        if len(a.slots) > 1:
            return self.dumps(devices_json(self.state, table, a))
        slot, row = a.slots[0], a.row  # one device share: its text depends on four numbers
        key = (int(table.dev_kind[slot, row]), int(table.dev_model[slot, row]), int(table.dev_index[slot, row]),
               int(a.milli[0]))
        got = self._dev.get(key)
        if got is None:
            got = self._dev[key] = self.dumps(devices_json(self.state, table, a))
        return got

    def _where(self, node: int) -> str:
        if node == self._last[0]:  # a device's tasks are written one after another
            return self._last[1]
        text = (',"node":' + _string(self._node_name(node))
                + ',"site":' + _string(self._site_name_of(node)))
        self._last = (node, text)
        return text

    def placement(self, p: Placement) -> str:
        a = p.alloc
        devices = self._devices(self.state.vcs[p.vc].table, a)
        return ('{"task":' + _string(p.task) + ',"tenant":' + self._name(p.tenant) + ',"vc":' + self._name(p.vc)
                + ',"host":' + _string(p.host.name) + self._where(p.host.node)
                + ',"resources":' + self._resources(a.vec) + ',"devices":' + devices + "}")

    def hosts(self) -> Iterator[str]:
        state = self.state
        fitted = state.placements.fitted_allocs()
        for vc in state.vcs.values():
            vc_text = self._name(vc.name)
            for h in vc.hosts:
                a = _held(fitted, vc, h)
                devices = self._devices(state.nodes, a)
                group = "null" if h.group is None else self._name(h.group)
                yield ('{"vc":' + vc_text + ',"host":' + _string(h.name) + ',"group":' + group
                       + self._where(h.node) + ',"resources":' + self._resources(a.vec)
                       + ',"devices":' + devices + "}")


def _held(fitted: dict, vc, host) -> Allocation:
    """What ``host`` holds on its node: a default VC's fitted host from
    ``fitted`` (``Placements.fitted_allocs``), another host its own slice."""
    a = fitted.get((vc.name, host.node)) if vc.default else None
    return a if a is not None else host.peek_alloc()


def hosts_json(state: PlacementState) -> Iterator[dict[str, Any]]:
    fleet = state.fleet
    fitted = state.placements.fitted_allocs()
    return (
        {
            "vc": vc.name,
            "host": h.name,
            "group": h.group,
            "node": fleet.node_name(h.node),
            "site": fleet.site_name_of(h.node),
            "resources": resources_json(state, a.vec),
            "devices": devices_json(state, state.nodes, a),
        }
        for vc in state.vcs.values()
        for h in vc.hosts
        for a in (_held(fitted, vc, h),)
    )


def _in_task_order(state: PlacementState, items, task_of) -> list:
    """``items`` in the order the world writes their tasks (application,
    component, replica): a static pass's task ids (``Catalogue``)."""
    ids = state.task_ids
    return sorted(items, key=lambda x: ids.get(task_of(x)))


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    parts = _parts(outcome)
    return {key: list(items) if key != "metrics" else items() for key, items in parts}


def outcome_lines(outcome: Outcome) -> Iterator[dict[str, Any]]:
    """The outcome as one object per line (NDJSON), each with its ``kind``: every
    host, placement, unscheduled task and unplaced host group as ``outcome_json``
    lists them, then the metrics; made one at a time, for worlds whose JSON
    array of a million placements would itself be the problem."""
    for key, items in _parts(outcome):
        if key == "metrics":
            yield {"kind": "metrics", **items()}
        else:
            for item in items:
                yield {"kind": _KINDS[key], **item}


_KINDS = {"hosts": "host", "placements": "placement", "unscheduled": "unscheduled",
          "unplaced_hosts": "unplacedHosts"}  # each part's ``kind`` in NDJSON


def outcome_text_lines(outcome: Outcome) -> Iterator[str]:
    """``outcome_lines`` as the compact JSON text of each line (with its
    newline): hosts and placements made as text (``TextOf``), the same bytes."""
    encode = json.JSONEncoder(separators=(",", ":")).encode
    text = TextOf(outcome.state)
    for key, items in _parts(outcome, text):
        if key in ("hosts", "placements"):  # their text, with the kind put first
            head = '{"kind":' + _string(_KINDS[key]) + ","
            for item in items:
                yield head + item[1:] + "\n"
        elif key == "metrics":
            yield encode({"kind": "metrics", **items()}) + "\n"
        else:
            for item in items:
                yield encode({"kind": _KINDS[key], **item}) + "\n"


def _parts(outcome: Outcome, text: "TextOf | None" = None) -> list[tuple[str, Any]]:
    """(key, iterator of items) in output order; the metrics as a function
    (with ``text``: hosts and placements as their JSON text)."""
    state = outcome.state
    placed = state.placements.values()  # in task id order: a static pass's are the world's (``Catalogue``)
    placements = (placement_json(state, p) for p in placed) if text is None else map(text.placement, placed)
    unscheduled = (
        {"task": u.task, "tenant": u.tenant, "vc": u.vc, "reasons": reasons_json(u.reasons), "why": why_json(u.reasons)}
        for u in _in_task_order(state, outcome.unscheduled, lambda u: u.task)
    )
    unplaced = (
        {"vc": u.vc, "group": u.group, "missing": u.missing, "reasons": reasons_json(u.reasons)}
        for u in outcome.unplaced_hosts
    )
    return [("hosts", hosts_json(state) if text is None else text.hosts()), ("placements", placements), ("unscheduled", unscheduled),
            ("unplaced_hosts", unplaced), ("metrics", lambda: metrics_json(outcome))]


def metrics_json(outcome: Outcome) -> dict[str, Any]:
    state = outcome.state
    fleet = state.fleet
    keys = fleet.resource_keys
    r = len(keys)
    node_tier = fleet.node_tier
    # a default VC's fitted hosts hold exactly what its tasks take
    reserved = state.placements.used_by(node_tier, len(TIERS), default_only=True)
    for vc in state.vcs.values():
        if not vc.default:
            for h in vc.hosts:
                reserved[node_tier[h.node]] += h.node_alloc.vec
    used = state.placements.used_by(node_tier, len(TIERS))
    capacity = np.zeros((len(TIERS), r), np.int64)
    np.add.at(capacity, node_tier, fleet.node_capacity)

    def block(cap_row, res_row, used_row) -> dict[str, Any]:
        out = {}
        for i, key in enumerate(keys):
            c = int(cap_row[i])
            out[key] = {
                "capacity": c,
                "reserved": int(res_row[i]),
                "used": int(used_row[i]),
                "reserved_ratio": round(res_row[i] / c, 6) if c else 0.0,
                "used_ratio": round(used_row[i] / c, 6) if c else 0.0,
            }
        return out

    by_tier = {
        tier: block(capacity[t], reserved[t], used[t]) for t, tier in enumerate(TIERS) if capacity[t].any()
    }
    reasons: Counter = Counter()
    for u in outcome.unscheduled:
        reasons.update(u.reasons.keys())
    cohorts = cohorts_json(state)
    tenants = {
        name: {
            "weight": t.weight,
            "dominant_share": round(state.dominant_share(name) * t.weight, 6),
            "weighted_share": round(state.dominant_share(name), 6),
            "reserved": resources_json(state, state.tenant_used[name]),
            **cohorts.get(name, {}),
        }
        for name, t in state.world.tenants.items()
    }
    placed = len(state.placements)
    return {
        "tasks": {"total": outcome.n_tasks, "placed": placed, "unscheduled": len(outcome.unscheduled)},
        "hosts": {
            "total": sum(len(vc.hosts) for vc in state.vcs.values()),
            "by_vc": {vc.name: len(vc.hosts) for vc in state.vcs.values() if vc.hosts},
        },
        "allocation": {
            "by_resource": block(capacity.sum(axis=0), reserved.sum(axis=0), used.sum(axis=0)),
            "by_tier": by_tier,
        },
        "tenants": tenants,
        "unscheduled_reasons": reasons_json(reasons),  # tasks per reason they mention
        "unscheduled_by_first_reason": first_reasons_json((u.reasons for u in outcome.unscheduled), fleet),
    }
