"""The autodrive case at city scale (examples/city-autodrive.yaml) at 10,000 cars.

One simulated hour: infotainment at home on every car, autopilot on a tenth
of them at random times, infotainment moved to edges and clouds within its
bound and back, handovers and offline spells. The benchmark runs it larger
(bench/bench_city.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from test_populations import run_cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"


def test_the_city_at_two_thousand_cars(tmp_path):
    """The city's behaviour at a size a test can afford (its scale runs are
    ``bench/bench_city.py``'s, up to a million cars)."""
    code, out, err = run_cli("simulate", EXAMPLE, "--out", tmp_path, "--population", "cars=2000")
    assert code == 0, err
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    kinds = Counter(e["kind"] for e in events)
    assert kinds["submitted"] == 6_000 + 2 * 200  # 3 infotainment services per car, autopilot on a tenth
    assert kinds["handover"] > 60 and kinds["deviceOffline"] > 10 and kinds["left"] > 100, kinds
    moved = [e for e in events if e["kind"] == "migrated"]
    assert len(moved) > 100
    assert all(e["bytes"] > 0 for e in moved)  # every moved infotainment service is stateful: it carried its state
    to = Counter(e["to"].split("/")[0].split("-")[0] for e in moved)
    assert to["edge"] > 0 and to["car"] > 0  # offloaded to the edge, and home again
    # a car runs only its own work (the population is private)
    for e in events:
        if e["kind"] == "started" and e["site"].startswith("car-"):
            assert e["task"].split("/")[0].split(".", 1)[1] == e["site"], e
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["metrics"]["tasks"]["failed"] == 0
    first = result["metrics"]["pending_by_first_reason"]  # a line per reason, not per car
    assert first.get("its own device is offline", 0) > 0 and not [k for k in first if "car-0" in k], first
    assert sum(first.values()) == result["metrics"]["tasks"]["pending"]
    assert result["metrics"]["near_violations"]["max_concurrent"] == 0  # no task ever ran beyond its bound
    assert (tmp_path / "report.html").stat().st_size < 2_000_000  # charts aggregate: no mark per task
