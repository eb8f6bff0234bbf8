"""The HTML report of a simulated run: self-contained, complete, deterministic."""

from __future__ import annotations

import html
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


def _render(result, events, **kw):
    """The report, and what each chart drew (read from its figure once saved:
    tick labels, texts, the y limits, the points of each collection)."""
    from suanli.sim import report

    drawn = []
    real = report._Charts.img

    def img(self, fig, alt):
        out = real(self, fig, alt)  # saving draws the figure: its tick labels are made by now
        drawn.append({"alt": alt, "axes": [_axes_drawn(ax) for ax in fig.axes],
                      "texts": [t.get_text() for t in fig.texts]})
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report._Charts, "img", img)
        doc = render_report(result, events, **kw)
    return doc, drawn


def _axes_drawn(ax):
    legend = ax.get_legend()
    return {"title": ax.get_title(loc="left"), "x": [t.get_text() for t in ax.get_xticklabels()],
            "y": [t.get_text() for t in ax.get_yticklabels()], "texts": [t.get_text() for t in ax.texts],
            "ylim": ax.get_ylim(), "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
            "points": [c.get_offsets().tolist() for c in ax.collections]}


@pytest.fixture(scope="module")
def ai_report(examples):
    sim, end, result = _simulate(examples / "ai-hpc-mix.yaml")
    doc, drawn = _render(result, sim.events)
    return sim, end, result, doc, drawn


@pytest.fixture(scope="module")
def ai_run(ai_report):
    return ai_report[:4]


@pytest.fixture(scope="module")
def autodrive_report(examples):
    sim, end, result = _simulate(examples / "autodrive.yaml")
    doc, drawn = _render(result, sim.events)
    return sim, end, result, doc, drawn


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


def test_report_of_autodrive_shows_the_moves_and_the_delete(autodrive_report):
    sim, _, result, doc, _ = autodrive_report
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


# ----------------------------------------------------------------- the story of a run


NEGATIVE_ZERO = re.compile(r"^[−-]0+(?:[.,]0*)?\D*$")


def _charts_labelled(drawn) -> list[tuple[str, str, list[str]]]:
    """Every axis of every chart, with its non-empty tick labels."""
    return [(chart["alt"], f"{axes['title']} {axis}", [x for x in axes[axis] if x])
            for chart in drawn for axes in chart["axes"] for axis in ("x", "y")]


def _built_run(tmp_path, name="world.yaml", **kw):
    from builders import scenario

    sim, end, result = _simulate(scenario(tmp_path, name=name, **kw))
    return sim, end, result


@pytest.fixture(scope="module")
def waits_run(tmp_path_factory):
    """Two nodes of 16 cores. ``filler`` (a job, not preemptible) holds one
    for 20 min, ``lo`` (a job) the other; ``hi`` (higher priority) comes at
    5 min and preempts ``lo``, which waits until ``filler`` ends and then runs
    on its node: a second wait of 15 min and a move. ``big`` never fits."""
    from builders import app, component, node_group, site

    sim, end, result = _built_run(
        tmp_path_factory.mktemp("waits"),
        sites=[site("s1", groups=[node_group("n", count=2, cpu=16)])],
        apps=[app("filler", components=[component("f", lifetime="job", cpu=12, duration="20m")], preemptible=False),
              app("lo", components=[component("c", lifetime="job", cpu=12, duration="50m")]),
              app("hi", components=[component("c", lifetime="job", cpu=12, duration="30m")], priority=10,
                  preemptible=False),
              app("big", components=[component("c", cpu=64)])],
        arrivals=[{"at": "5m", "app": "hi"}], until="1h")
    doc, drawn = _render(result, sim.events)
    return sim, end, result, doc, drawn


def test_a_task_never_placed_waits_until_the_end_and_is_censored(waits_run):
    sim, end, result, doc, drawn = waits_run
    assert end == 3600 and [u["task"] for u in result["unscheduled"]] == ["big/c/0"]
    # the only resident task never ran: its wait is the whole run, still open (censored)
    assert result["metrics"]["queueing_delay_s"]["resident/small"] == {
        "count": 1, "p50": 3600.0, "p90": 3600.0, "p99": 3600.0, "max": 3600.0, "censored": 1}
    assert result["metrics"]["queueing_delay_by_tenant_s"]["t"]["censored"] == 1
    assert "no task waited" not in doc
    (chart,) = [c for c in drawn if c["alt"].startswith("queueing delay")]
    assert "resident/small\nn=1\n1 censored" in chart["axes"][0]["x"]


def test_a_preempted_task_placed_again_adds_its_second_wait(waits_run):
    sim, end, result, doc, _ = waits_run
    jobs = result["metrics"]["queueing_delay_s"]["short/small"]
    # filler, lo and hi placed at once; lo again 15 min after hi preempted it
    assert jobs["count"] == 4 and jobs["censored"] == 0 and jobs["max"] == 900.0
    assert result["metrics"]["queueing_delay_by_tenant_s"]["t"]["count"] == 5
    # the lane of lo: where it ran, the preemption and the move to the other node
    (lane,) = result["metrics"]["lanes"]["tasks"]
    assert lane["task"] == "lo/c/0" and lane["moves"] == 1 and lane["stops"] == 1
    assert [r[:3] for r in lane["ran"]] == [[0.0, 300.0, "s1/n-0"], [1200.0, 3600.0, "s1/n-1"]]
    assert [(m["t"], m["kind"]) for m in lane["marks"]] == [(300.0, "preempted"), (1200.0, "placed")]
    assert "<code>lo/c/0</code>" in _section(doc, "lanes")


def test_queueing_delay_wording_never_claims_no_wait_while_one_is_pending():
    from suanli.sim.report import _no_wait_text

    assert "no task waited" in _no_wait_text({"short/small": {"count": 3, "max": 0.0, "censored": 0}}, {"pending": 0})
    for delays, tasks in (({"short/small": {"count": 3, "max": 0.0, "censored": 1}}, {"pending": 1}),
                          ({"short/small": {"count": 3, "max": 0.0}}, {"pending": 2})):  # an older result.json
        text = _no_wait_text(delays, tasks)
        assert "no task waited" not in text and "still waiting" in text
    text = _no_wait_text({"short/small": {"count": 2, "max": 0.0, "censored": 1}}, {"pending": 0})
    assert "no task waited" not in text and "1 ended without a placement" in text  # deleted as it waited


def test_autodrive_lanes_name_the_tasks_that_moved(autodrive_report):
    sim, _, result, doc, drawn = autodrive_report
    lanes = result["metrics"]["lanes"]
    moved = {e["task"] for e in sim.events if e["kind"] == "migrated"}
    assert moved == {"infotainment/movie/0", "infotainment/music/0", "infotainment/short-video/0"}
    assert lanes["moved"] == 3 and {lane["task"] for lane in lanes["tasks"]} == moved
    movie = next(lane for lane in lanes["tasks"] if lane["task"] == "infotainment/movie/0")
    # on the car, at the edge while autopilot drove, back on the car (a return), coloured by tier
    assert [(r[3], r[4]) for r in movie["ran"]] == [("car-1", "device"), ("edge-1", "edge"), ("car-1", "device")]
    assert movie["moves"] == 2 and movie["marks"][-1]["cause"] == "return"
    # short-video waited 30 min for room on the car: its second wait is counted
    assert result["metrics"]["queueing_delay_s"]["resident/small"]["max"] == 1800.0
    body = _section(doc, "lanes")
    assert re.search(r"<h2>[^<]+</h2>", body) and "<img" in body
    for task in moved:
        assert f"<code>{task}</code>" in body
    (chart,) = [c for c in drawn if c["alt"].startswith("where each task that moved ran")]
    (axes,) = chart["axes"]
    assert all(any(label.startswith(task) for label in axes["y"]) for task in moved)
    assert {"car-1", "edge-1"} <= set(axes["texts"])  # sites written on the bars
    assert 'href="#lanes"' in doc


def test_autodrive_migrations_are_labelled_and_zero_byte_moves_visible(autodrive_report):
    sim, _, result, doc, drawn = autodrive_report
    migrations = [e for e in sim.events if e["kind"] == "migrated"]
    zero = [m for m in migrations if m["bytes"] == 0]
    assert len(migrations) == 5 and len(zero) == 4
    (panel,) = [a for c in drawn for a in c["axes"] if a["title"].startswith("migrations")]
    for m in migrations:  # few: each is labelled with its task, from and to
        assert any(text.startswith(f"{m['task']}: {m['from']} → {m['to']}") for text in panel["texts"]), m
    # the moves that carried no state sit on the zero line, above the axis' bottom, as their own markers
    assert panel["ylim"][0] < 0
    assert [[t, 0.0] for t in sorted(m["t"] / 60 for m in zero)] in [sorted(p) for p in panel["points"]]
    assert any("0 B (4)" in text for text in panel["legend"])
    assert "4 carried no state (0 B)" in _section(doc, "moves")


def test_lanes_of_tasks_named_and_from_events_alone(autodrive_report):
    sim, _, result, doc, _ = autodrive_report
    events = list(sim.events)
    named = render_report(result, events, tasks=["infotainment/music/0"])
    body = _section(named, "lanes")
    assert "<code>infotainment/music/0</code>" in body and "infotainment/movie/0" not in body
    # a task named that never stopped or moved has its lane too (where it ran), and is not counted as moved
    from suanli.sim.metrics import STOP_KINDS, task_lanes

    stirred = {e["task"] for e in events if e["kind"] in ("migrated", *STOP_KINDS)}
    calm = next(e["task"] for e in events if e["kind"] == "placed" and e["task"] not in stirred)
    lanes = task_lanes(events, result["end_s"], tasks=[calm, "infotainment/music/0"])
    assert [lane["task"] for lane in lanes["tasks"]] == [calm, "infotainment/music/0"]
    assert lanes["tasks"][0]["moves"] == lanes["tasks"][0]["stops"] == 0 and lanes["tasks"][0]["ran"]
    # a result without lanes gets them from the whole log: the same lanes, but tiers are not known
    bare = json.loads(json.dumps(result))
    del bare["metrics"]["lanes"]
    again = render_report(bare, events)
    for task in ("infotainment/movie/0", "infotainment/music/0", "infotainment/short-video/0"):
        assert f"<code>{task}</code>" in _section(again, "lanes")
    # and from the moves alone (no placements) there is nothing to make them of: said so
    assert "not the whole log" in _section(render_report(bare, sim.events.notable, count=len(sim.events)), "lanes")


def test_members_an_elastic_gang_runs_without_are_omitted_not_failed(tmp_path):
    from builders import app, component, gpu, node_group, site, tenant

    comp = component("m", lifetime="job", cpu=8, memory="32Gi", accelerators=[{"kind": "gpu", "count": 4}],
                     gang={"size": 6, "minSize": 2}, coupling="ib")
    nodes = node_group("g", count=7, cpu=48, memory="384Gi", accelerators=[gpu(4, shareable=False)],
                       fabrics={"ib": "ib-a"})
    sim, _, result = _built_run(tmp_path, sites=[site("dc", groups=[nodes])], apps=[app("train", components=[comp])],
                                tenants=[tenant(quota={"gpu": 18})], until="10m")
    assert result["metrics"]["tasks"]["omitted"] == 2 and result["metrics"]["tasks"]["failed"] == 0
    assert result["metrics"]["omitted_by"] == {"quota": 2}
    doc = render_report(result, sim.events)
    assert '<div class="card omitted"><div class="v">2</div><div class="k">omitted</div></div>' in doc
    assert '<div class="card failed zero"><div class="v">0</div>' in doc
    text = html.unescape(doc)
    assert "2 members of elastic gangs were not needed: their gangs ran without them " \
           "(2 left out by their tenant's quota). Omitted, not failed." in text
    assert "FAILED" not in doc and not re.search(r"\.card\.omitted \.v\{color:#c0392b", doc)
    # omitted members are not waits: the four that ran waited 0 s, nothing is still waiting
    assert result["metrics"]["queueing_delay_s"]["short/large"] == {
        "count": 4, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "censored": 0}


def test_tick_labels_are_distinct_and_never_a_negative_zero(ai_report, autodrive_report, waits_run):
    seen = 0
    for *_, drawn in (ai_report, autodrive_report, waits_run):
        for alt, axis, labels in _charts_labelled(drawn):
            seen += len(labels)
            assert len(set(labels)) == len(labels), (alt, axis, labels)
            assert not [x for x in labels if NEGATIVE_ZERO.match(x)], (alt, axis, labels)
    assert seen > 100
    # the fairness axis of autodrive (one tenant at 0.6 % then 1.1 %) has the decimals its steps need
    (fair,) = [a for c in autodrive_report[4] for a in c["axes"] if a["title"].startswith("dominant share")]
    assert fair["y"][:3] == ["0.00%", "0.25%", "0.50%"]


@pytest.mark.parametrize("lo, hi, labels", [
    (0, 1.08, ["0.00", "0.25", "0.50", "0.75", "1.00"]),
    (-0.03, 0.011, ["−0.03", "−0.02", "−0.01", "0.00", "0.01"]),
    (0, 106, ["0", "25", "50", "75", "100"]),
    (0, 0, ["0"]),
    (2.5, 2.5000001, None),
])
def test_nice_ticks(lo, hi, labels):
    from suanli.sim.report import _nice_ticks_between, _tick_text

    ticks, decimals = _nice_ticks_between(lo, hi, 5)
    text = [_tick_text(v, decimals) for v in ticks]
    if labels is not None:
        assert text == labels
    assert len(set(text)) == len(text) and not [x for x in text if NEGATIVE_ZERO.match(x)]
    assert all(lo - 1e-9 <= v <= hi + 1e-9 for v in ticks)


def test_a_streamed_log_gives_the_same_metrics_and_report(autodrive_report, examples, tmp_path):
    """``summarize`` reads a streamed log's file (bytes, by a regular
    expression) as it reads a log in memory: the same waits and lanes."""
    from suanli.sim.results import write_outputs
    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    _, _, result, doc, _ = autodrive_report
    sim = Simulation(load_world([str(examples / "autodrive.yaml")]), events_to=tmp_path / "events.jsonl.part")
    end = sim.run()
    paths = write_outputs(sim, end, tmp_path)
    written = json.loads(paths["result"].read_text(encoding="utf-8"))
    for key in ("queueing_delay_s", "queueing_delay_by_tenant_s", "lanes", "omitted_by"):
        assert written["metrics"][key] == result["metrics"][key], key
    assert paths["report"].read_text(encoding="utf-8") == doc


def test_a_task_deleted_while_it_waited_counts_its_wait_as_censored(tmp_path):
    from builders import app, component

    sim, end, result = _built_run(tmp_path, apps=[app("big", components=[component("c", cpu=64)])],
                                  events=[{"at": "30m", "kind": "delete", "app": "big"}], until="1h")
    assert result["metrics"]["tasks"]["withdrawn"] == 1 and result["metrics"]["tasks"]["failed"] == 0
    assert not result["unscheduled"]
    assert result["metrics"]["queueing_delay_s"]["resident/small"] == {
        "count": 1, "p50": 1800.0, "p90": 1800.0, "p99": 1800.0, "max": 1800.0, "censored": 1}


def test_waiting_tasks_are_written_one_by_one_and_the_report_counts_them_all(tmp_path, monkeypatch):
    """The waiting tasks are made as they are written to ``result.json`` (a
    city ends with tens of thousands): the file is still ``json.dumps`` of
    the whole object, and the report, given the first rows and the count,
    says how many more wait."""
    from builders import app, component, node_group, scenario, site

    from suanli.sim import report, results
    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    monkeypatch.setattr(results, "PENDING_ROWS", 2)
    monkeypatch.setattr(report, "PENDING_ROWS", 2)
    path = scenario(tmp_path, sites=[site("s1", groups=[node_group("n", count=1, cpu=4)])],
                    apps=[app("big", components=[component("c", cpu=8, replicas=5)])], until="10m")
    sim = Simulation(load_world([str(path)]))
    end = sim.run()
    paths = results.write_outputs(sim, end, tmp_path / "out")
    text = paths["result"].read_text(encoding="utf-8")
    whole = results.result_json(sim, end)
    assert text == json.dumps(whole, separators=(",", ":")) + "\n"
    assert [u["task"] for u in json.loads(text)["unscheduled"]] == [f"big/c/{i}" for i in range(5)]
    doc = paths["report"].read_text(encoding="utf-8")
    assert "… and 3 more pending tasks" in doc and doc.count("<code>big/c/") == 2
