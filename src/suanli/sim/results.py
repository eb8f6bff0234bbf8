"""Outputs of a simulated run: ``result.json``, ``events.jsonl``, ``report.html``.

Field names follow SPEC.md (Outputs); everything is written in a fixed order
so the same scenario and seed give byte-identical files. Files are written
to a temporary name and renamed, so a file that exists is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from suanli.output import hosts_json, placement_json
from suanli.sim.events import encode
from suanli.sim.metrics import summarize


def result_json(sim, end: float) -> dict[str, Any]:
    state = sim.state
    order = {task: i for i, task in enumerate(sim.tasks)}
    placements = [placement_json(state, p) for p in sorted(state.placements.values(), key=lambda p: order[p.task])]
    unscheduled = [
        {"task": r.task, "tenant": r.tenant, "vc": sim.units[r.unit].unit.app.vc,
         "since_s": round(r.submitted_at, 6),
         "reasons": {k: int(v) for k, v in sorted(r.reasons.items(), key=lambda kv: (-kv[1], kv[0]))}}
        for r in sim.tasks.values() if r.status == "pending"
    ]
    scenario = sim.world.scenario
    return {
        "scenario": scenario.metadata.name if scenario is not None else None,
        "seed": sim.seed,
        "until_s": sim.until,
        "end_s": round(end, 6),
        "hosts": list(hosts_json(state)),
        "placements": placements,
        "unscheduled": unscheduled,
        "metrics": summarize(sim, end),
        "timeline": sim.recorder.timeline(),
    }


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_outputs(sim, end: float, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    result = result_json(sim, end)
    paths = {"result": out / "result.json", "events": out / "events.jsonl", "report": out / "report.html"}
    log = sim.events
    if log.path is not None:  # streamed as the run went: complete now
        log.close()
        os.replace(log.path, paths["events"])
        log.path = paths["events"]
    else:
        _write(paths["events"], "".join(encode(e) for e in log))
    _write(paths["result"], json.dumps(result, separators=(",", ":")) + "\n")
    from suanli.sim.report import render_report

    _write(paths["report"], render_report(result, log.notable, count=len(log)))
    return paths
