"""Outputs of a simulated run: ``result.json``, ``events.jsonl``, ``report.html``.

Field names follow SPEC.md (Outputs); everything is written in a fixed order
so the same scenario and seed give byte-identical files. Files are written
to a temporary name and renamed, so a file that exists is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from suanli.output import TextOf, cohorts_json, hosts_json, placement_json
from suanli.phrases import reasons_json, why_json
from suanli.sim.events import encode
from suanli.sim.metrics import Readout, summarize
from suanli.sim.report import PENDING_ROWS


def result_json(sim: Readout, end: float) -> dict[str, Any]:
    """The whole ``result.json`` object (in memory: for tests and small runs)."""
    return {key: (list(value) if key in _STREAMED else value) for key, value in _parts(sim, end)}


_STREAMED = ("hosts", "placements", "unscheduled")  # the parts that number in millions: written item by item


def _parts(sim: Readout, end: float, text: TextOf | None = None) -> Iterator[tuple[str, Any]]:
    """``result.json``'s fields in order; hosts, placements and waiting tasks
    as iterators (with ``text``: hosts and placements of their JSON text)."""
    state = sim.state
    placements = state.placements
    placed = placements.values()  # (in id order, as the records are: none is placed without one)
    unscheduled = (  # (made as it is written: a city ends with tens of thousands waiting)
        {"task": r.task, "tenant": r.tenant, "vc": sim.view.units[r.unit].unit.app.vc,
         "since_s": round(r.submitted_at, 6),
         "reasons": reasons_json(r.reasons), "why": why_json(r.reasons)}
        for r in sim.view.pending()
    )
    scenario = sim.world.scenario
    yield "scenario", scenario.metadata.name if scenario is not None else None
    yield "seed", sim.seed
    yield "until_s", sim.until
    yield "end_s", round(end, 6)
    yield "hosts", hosts_json(state) if text is None else text.hosts()
    yield "placements", (placement_json(state, p) for p in placed) if text is None else map(text.placement, placed)
    yield "unscheduled", unscheduled
    yield "metrics", summarize(sim, end)
    yield "timeline", sim.recorder.timeline()
    keys = sim.world.fleet.resource_keys
    yield "tenant_usage", {name: {k: int(v) for k, v in zip(keys, used) if v}  # at the end, canonical amounts
                           for name in sim.world.tenants if (used := state.tenant_used[name]).any()}
    if state.cohorts:  # what each cohort member borrows and lends at the end
        yield "tenant_cohorts", cohorts_json(state, nonzero=True)


def _write_result(path: Path, sim: Readout, end: float) -> dict[str, Any]:
    """Write ``result.json`` as ``json.dumps(result_json(...))`` would, without
    holding its millions of hosts and placements (or their text) at once:
    those are written item by item as text (``TextOf``), and so are the
    waiting tasks. Returns the object with the hosts and placements replaced
    by their counts, and the waiting tasks by the first the report shows
    (``unscheduled``) and their count (``unscheduled_total``)."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    kept: dict[str, Any] = {}
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("{")
        for i, (key, value) in enumerate(_parts(sim, end, TextOf(sim.state))):
            f.write(("," if i else "") + dumps(key) + ":")
            if key in _STREAMED:
                head: list = []
                if key == "unscheduled":  # objects, not text: the report is given the first it shows
                    value = _text_keeping(value, head, PENDING_ROWS, dumps)
                n = 0
                f.write("[")
                for item in value:
                    f.write(("," if n else "") + item)
                    n += 1
                f.write("]")
                kept[key] = n
                if key == "unscheduled":
                    kept[key], kept["unscheduled_total"] = head, n
            else:
                f.write(dumps(value))
                kept[key] = value
        f.write("}\n")
    os.replace(tmp, path)
    return kept


def _text_keeping(items: Iterator[Any], head: list, keep: int, dumps) -> Iterator[str]:
    """``items`` as JSON text, the first ``keep`` of them also put in ``head``."""
    for k, item in enumerate(items):
        if k < keep:
            head.append(item)
        yield dumps(item)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_outputs(sim: Readout, end: float, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"result": out / "result.json", "events": out / "events.jsonl", "report": out / "report.html",
             "world": out / "world.json"}
    log = sim.events
    if log.path is not None:  # streamed as the run went: complete now
        log.close()
        os.replace(log.path, paths["events"])
        log.path = paths["events"]
    else:
        _write(paths["events"], "".join(encode(e) for e in log))
    result = _write_result(paths["result"], sim, end)
    from suanli.console.world import world_json

    _write(paths["world"], json.dumps(world_json(sim.world), separators=(",", ":")))  # what the console draws
    from suanli.sim.report import render_report

    _write(paths["report"], render_report(result, log.notable, count=len(log)))
    return paths
