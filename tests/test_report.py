"""The HTML report of a simulated run: self-contained, complete, deterministic."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from suanli.sim.report import decimate, duration, render_report

SECTIONS = ("allocation", "delays", "moves", "fairness")


def _simulate(path):
    from suanli.sim.results import result_json
    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    sim = Simulation(load_world([str(path)]))
    end = sim.run()
    return sim, end, result_json(sim, end)


@pytest.fixture(scope="module")
def ai_run(examples):
    sim, end, result = _simulate(examples / "ai-hpc-mix.yaml")
    return sim, end, result, render_report(result, sim.events)


def _section(doc: str, anchor: str) -> str:
    m = re.search(rf'<section id="{anchor}">(.*?)</section>', doc, re.S)
    assert m, f"no section {anchor}"
    return m.group(1)


def _assert_self_contained(doc: str) -> None:
    assert doc.startswith("<!DOCTYPE html>") and doc.rstrip().endswith("</html>")
    assert doc.count("<html") == 1 and doc.count("</body>") == 1
    assert not re.search(r'\b(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//', doc, re.I)
    assert "<script" not in doc.lower() and "<link" not in doc.lower() and "@import" not in doc
    for src in re.findall(r'\bsrc="([^"]*)"', doc):
        assert src.startswith("data:image/png;base64,")


def test_report_of_ai_hpc_mix_is_one_self_contained_document(ai_run):
    sim, _, result, doc = ai_run
    _assert_self_contained(doc)
    for anchor in SECTIONS:
        body = _section(doc, anchor)
        assert re.search(r"<h2>[^<]+</h2>", body)
        assert "<img" in body or "<svg" in body, anchor
    assert "<title>Simulation report — ai-hpc-mix</title>" in doc
    assert "<h1>ai-hpc-mix</h1>" in doc
    assert f"seed <b>{result['seed']}</b>" in doc and f"simulated <b>{duration(result['end_s'])}</b>" in doc
    assert duration(result["end_s"]) == "3 h"
    tasks = result["metrics"]["tasks"]
    for status, n in tasks.items():
        assert re.search(rf'<div class="v">{n:,}</div><div class="k">{status}</div>', doc), status
    moves = _section(doc, "moves")
    incidents = [e for e in sim.events if e["kind"] in ("nodeDown", "nodeUp", "linkDown", "linkUp")]
    assert incidents  # the scenario takes a node and a link down and up again
    for e in incidents:  # each is listed in the incidents table
        assert (e["node"] if "node" in e else " ↔ ".join(e["between"])) in moves
    assert f"{result['metrics']['fairness']['jain_weighted']:.3f}" in _section(doc, "fairness")
    for tenant in result["metrics"]["queueing_delay_by_tenant_s"]:
        assert tenant in _section(doc, "tenants")


def test_report_is_byte_identical_and_write_outputs_writes_it(ai_run, tmp_path):
    from suanli.sim.results import write_outputs

    sim, end, result, doc = ai_run
    paths = write_outputs(sim, end, tmp_path)
    assert paths["report"].read_text(encoding="utf-8") == doc
    # result.json is written item by item, as the whole object would be dumped
    text = paths["result"].read_text(encoding="utf-8")
    assert text == json.dumps(result, separators=(",", ":")) + "\n"
    assert result["placements"] and result["hosts"]
    # the files alone give the same report
    again = render_report(json.loads(paths["result"].read_text(encoding="utf-8")),
                          [json.loads(line) for line in paths["events"].read_text(encoding="utf-8").splitlines()])
    assert again == doc


def test_report_of_autodrive_shows_the_moves_and_the_delete(examples):
    sim, _, result = _simulate(examples / "autodrive.yaml")
    doc = render_report(result, sim.events)
    _assert_self_contained(doc)
    assert "<h1>autodrive</h1>" in doc and "simulated <b>1 h</b>" in doc
    assert '<div class="v">0</div><div class="k">failed</div>' in doc
    assert "<code>deleted</code> <b>1</b>" in doc
    assert "<code>preempted</code> <b>3</b>" in doc and "<code>migrated</code> <b>5</b>" in doc
    for anchor in SECTIONS:
        assert "<img" in _section(doc, anchor)


def test_minimal_synthetic_results_render():
    empty = {"scenario": None, "seed": None, "until_s": None, "end_s": 0.0, "hosts": [], "placements": [],
             "unscheduled": [], "timeline": {"t": [], "by_tier": {}, "dominant_share": {}},
             "metrics": {"tasks": {}, "queueing_delay_s": {}, "completion_time_s": {},
                         "queueing_delay_by_tenant_s": {}, "pending_reasons": {}, "allocation_time_average": {},
                         "fairness": {"dominant_share": {}, "weighted_share": {}, "jain_weighted": 1.0},
                         "events": {}, "moves": {}}}
    doc = render_report(empty, [])
    _assert_self_contained(doc)
    for anchor in SECTIONS:
        _section(doc, anchor)
    assert "No allocation samples were recorded." in doc and "Nothing was pending" in doc
    # one sample, one pending task, names that need escaping, a value missing
    odd = {"scenario": "<b>a & b</b>", "seed": 3, "end_s": 0.0,
           "metrics": {"tasks": {"submitted": 1, "pending": 1},
                       "queueing_delay_s": {"short/small": {"count": 1, "p50": 2.0, "p90": None, "p99": 2.0,
                                                            "max": 2.0}}},
           "unscheduled": [{"task": "x/<script>/0", "tenant": "t", "since_s": 0.0,
                            "reasons": {"insufficient gpu": 3}}],
           "timeline": {"t": [0.0], "by_tier": {"cloud": {"cpu_milli": [0.5]}}, "dominant_share": {"t$": [0.5]}}}
    doc = render_report(odd, [{"t": 0.0, "kind": "nodeDown", "node": "n<1>"}, {"kind": "lost"}])
    _assert_self_contained(doc)
    assert "&lt;b&gt;a &amp; b&lt;/b&gt;" in doc and "<b>a & b</b>" not in doc
    assert "x/&lt;script&gt;/0" in doc and "n&lt;1&gt;" in doc
    assert "insufficient gpu ×3" in doc
    for anchor in SECTIONS:
        assert "<img" in _section(doc, anchor)


def test_migrations_and_long_series_are_drawn():
    n = 3_000
    t = [i * 0.5 for i in range(n)]
    result = {"scenario": "replay", "seed": 0, "end_s": t[-1],
              "timeline": {"t": t, "by_tier": {"cloud": {"gpu_milli": [(i % 97) / 96 for i in range(n)]}},
                           "dominant_share": {"a": [(i % 13) / 12 for i in range(n)]}}}
    events = [{"t": 10.0 * i, "kind": "migrated", "task": f"j/w/{i}", "from": "a", "to": "b",
               "bytes": 2 ** 30, "downtime_s": 1.5} for i in range(200)]
    doc = render_report(result, events)
    _assert_self_contained(doc)
    assert "200 migrations; 200.0 GiB of state moved" in doc
    assert "3,000 samples" in doc


def test_decimate_keeps_peaks_and_the_last_sample():
    import numpy as np

    t = np.arange(10_000, dtype=float)
    y = np.zeros_like(t)
    y[4321] = 1.0  # a one-sample spike
    y[-1] = 0.5
    tt, hi, lo = decimate(t, [y], 100)
    assert len(tt) <= 100 and tt[0] == 0 and tt[-1] == t[-1]
    assert hi[0].max() == 1.0 and hi[0][-1] == 0.5 and lo is not None and lo[0].min() == 0.0
    assert np.all(np.diff(tt) >= 0)
    same, ys, none = decimate(t[:50], [y[:50]], 100)
    assert len(same) == 50 and none is None


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (0.25, "0.25 s"), (42, "42 s"), (200, "3 min 20 s"),
                                           (10800, "3 h"), (7500, "2 h 5 min"), (90000, "1 d 1 h"),
                                           (None, "–")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_result_json_is_written_as_the_whole_object_would_be_dumped(tmp_path, examples):
    """Hosts and placements are written as text, one by one: the file is
    ``json.dumps`` of ``result_json`` byte for byte, on worlds with device
    shares (the city), explicit VC hosts with groups, and a population."""
    import sys

    from suanli.sim.results import result_json, write_outputs
    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    sys.path.insert(0, str(Path(__file__).parent))
    from test_metrics import vc_scenario

    city = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"
    seen = {"groups": 0, "devices": 0}
    for i, (path, sizes) in enumerate([(city, {"cars": "200"}), (vc_scenario(tmp_path), None),
                                       (examples / "ai-hpc-mix.yaml", None)]):
        sim = Simulation(load_world([str(path)], sizes))
        end = sim.run()
        paths = write_outputs(sim, end, tmp_path / str(i))
        text = paths["result"].read_text(encoding="utf-8")
        assert text == json.dumps(result_json(sim, end), separators=(",", ":")) + "\n", path
        got = json.loads(text)
        seen["groups"] += sum(1 for h in got["hosts"] if h["group"])
        seen["devices"] += sum(1 for p in got["placements"] if p["devices"])
    assert seen["groups"] > 0 and seen["devices"] > 0, seen


def test_a_pending_tasks_binding_constraint_is_shown_first_in_figures():
    from suanli.sim.report import _pending_table

    why = [{"reason": "insufficient cpu", "layer": "business", "nodes": 3, "resource": "cpu", "requested": 16000,
            "free": 12000, "gap": 4000, "binding": True, "count": 3},
           {"reason": "site not allowed for tenant", "count": 58, "binding": False},
           {"reason": "arch mismatch", "count": 9, "binding": False},
           {"reason": "no gpu", "count": 2, "binding": False}]
    u = {"task": "a/c/0", "tenant": "t", "vc": "t/default", "since_s": 0,
         "reasons": {"site not allowed for tenant": 58, "arch mismatch": 9, "insufficient cpu": 3, "no gpu": 2}, "why": why}
    html = _pending_table([u], 60.0, {})
    first = html.index("insufficient cpu: 16 requested, 12 free at best (4 more needed) on 3 nodes")
    assert first < html.index("site not allowed for tenant ×58") < html.index("arch mismatch ×9")
    assert "no gpu" not in html and "+1 more" in html
