"""Backfill with reservations: what may pass a unit that does not fit, in
each mode, and the promise a reservation makes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import app, component, node_group, scenario, site, tenant
from suanli.phrases import why_json
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

NODES = [site("dc", groups=[node_group("n", count=4, cpu=4, memory="16Gi")])]


def job(name: str, size: int, seconds: float, **extra):
    return app(name, "lab", [component("rank", "job", cpu=1, memory="1Gi", gang={"size": size},
                                       duration=f"{seconds}s", **extra)])


STORY = [job("a", 12, 100), job("wide", 16, 100), job("s1", 4, 50), job("s2", 4, 200)]
ARRIVALS = [{"at": f"{i}s", "app": name} for i, name in enumerate(["a", "wide", "s1", "s2"])]


def simulate(tmp_path, mode: str, apps=STORY, arrivals=ARRIVALS, until="1h", watch=None, **policy):
    """``watch(sim, t)``: called after each instant."""
    path = scenario(tmp_path, sites=NODES, tenants=[tenant("lab")], apps=apps, arrivals=arrivals, until=until,
                    name=f"{mode}.yaml")
    import yaml
    docs = list(yaml.safe_load_all(path.read_text()))
    docs[-1]["spec"]["policy"] = {"backfill": mode, **policy}
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim = Simulation(load_world([path]), seed=1, on_instant=(lambda t: watch(sim, t)) if watch else None)
    sim.run()
    return sim


def starts(sim) -> dict[str, float]:
    return {e["task"].split("/")[0]: e["t"] for e in sim.events if e["kind"] == "placed" and e["task"].endswith("/0")}


@pytest.mark.parametrize("mode, expect", [
    ("off", {"a": 0, "s1": 2, "s2": 52, "wide": 252}),  # first fit: s2 passes the wide job, which waits for it
    ("fcfs", {"a": 0, "wide": 100, "s1": 200, "s2": 200}),  # nothing passes the wide job
    ("easy", {"a": 0, "s1": 2, "wide": 100, "s2": 200}),  # s1 ends before the reservation; s2 would delay it
    ("conservative", {"a": 0, "s1": 2, "wide": 100, "s2": 200}),
])
def test_what_passes_a_wide_job_in_each_mode(tmp_path, mode, expect):
    assert starts(simulate(tmp_path, mode)) == expect


def test_a_reservation_and_a_held_unit_say_so_in_their_reasons(tmp_path):
    sim = simulate(tmp_path, "easy", until="60s")
    wide = why_json(sim.view.tasks["wide/rank/0"].reasons)
    assert "reserved from t=1s, expected start t=100s" in [w["reason"] for w in wide]
    held = why_json(sim.view.tasks["s2/rank/0"].reasons)
    assert held[0]["reason"] == "held for a reservation: wide/rank/0 from t=100s" and held[0]["binding"], held
    fcfs = simulate(tmp_path, "fcfs", until="60s")
    assert why_json(fcfs.view.tasks["s1/rank/0"].reasons)[0]["reason"] == \
        "queued behind wide/rank/0 (first come, first served)"


def test_a_time_limit_is_what_backfill_plans_with(tmp_path):
    """s1 states a time limit of 150 s (it runs 50): planned to end after the
    reservation at 100 s, it may not pass the wide job."""
    apps = [job("a", 12, 100), job("wide", 16, 100), job("s1", 4, 50, timeLimit="150s"), job("s2", 4, 200)]
    assert starts(simulate(tmp_path, "easy", apps=apps))["s1"] == 200


# ---------------------------------------------------------------- the property


@st.composite
def queues(draw):
    """One tenant's jobs (gangs of one-cpu tasks, 1 to 16 wide, 10 s to 5 min,
    their durations exact) arriving over ten minutes on 16 cpus."""
    n = draw(st.integers(4, 14))
    apps, arrivals = [], []
    for i in range(n):
        apps.append(job(f"j{i}", draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16])), draw(st.integers(10, 300))))
        arrivals.append({"at": f"{draw(st.integers(0, 600))}s", "app": f"j{i}"})
    return apps, arrivals, draw(st.sampled_from(["easy", "conservative"]))


def test_a_backfilled_job_never_delays_a_reservation(tmp_path):
    """Random queues, easy and conservative: once the unit at the head of the
    queue is reserved a start, no later pass moves that start later, and it
    starts by then, whatever was backfilled behind it meanwhile. (Only the
    head: in a conservative pass the reservations after it are made again
    each pass and may move when a unit ahead of them starts elsewhere or
    sooner; that is not a backfilled unit delaying them.) Not vacuous:
    reservations are made, units start past a reserved one, and
    reservations hold others back."""
    seen: Counter = Counter()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(queues())
    def each(world):
        apps, arrivals, mode = world
        promised: dict[int, tuple[float, str]] = {}

        def look(sim, t: float) -> None:
            bf = sim.business.backfill
            for r in bf.reservations[:1]:  # the head's (one tenant, one priority: arrival order)
                first = promised.setdefault(r.seq, (r.start, r.task))[0]
                assert r.start <= first + 1e-6, f"{r.task}'s start moved from {first} to {r.start}"
            seen["held"] += sum(1 for r in sim.view.pending() if r.reasons and
                                any(w.code == "reserved" for w in r.reasons))

        sim = simulate(tmp_path, mode, apps=apps, arrivals=arrivals, until="2h", watch=look)
        started = starts(sim)
        for start, task in promised.values():
            app_name = task.split("/")[0]
            assert app_name in started and started[app_name] <= start + 1e-6, (task, start, started.get(app_name))
        seen["reservations"] += len(promised)
        seen["backfilled"] += sim.business.backfill.backfilled
        seen[mode] += 1

    each()
    print(seen)
    assert seen["reservations"] > 20 and seen["backfilled"] > 5 and seen["held"] > 5, seen
    assert seen["easy"] and seen["conservative"], seen


def test_the_example_and_plan_show_the_reservation(tmp_path):
    """``examples/backfill.yaml`` as docs/scheduling.md tells it, and ``plan``
    at 60 s: the wide job reserved, the long one held for it."""
    import json
    from pathlib import Path

    from test_populations import run_cli

    example = Path(__file__).parent.parent / "examples" / "backfill.yaml"
    code, _, err = run_cli("simulate", example, "--out", tmp_path / "run")
    assert code == 0, err
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    first = {e["task"].split("/")[0]: e["t"] for e in events if e["kind"] == "placed" and e["task"].endswith("/0")}
    assert first == {"a": 0, "s1": 2, "wide": 100, "s2": 200}
    metrics = json.loads((tmp_path / "run" / "result.json").read_text())["metrics"]
    assert metrics["backfill"] == {"mode": "easy", "units_reserved": 2, "backfilled": 1}  # wide, then s2; s1 past wide
    code, out, err = run_cli("plan", example, "--at", "60s", "-o", "json")
    assert code == 0, err
    why = {p["task"]: [w["reason"] for w in p["why"]] for p in json.loads(out)["pending"]}
    assert "reserved from t=1s, expected start t=100s" in why["wide/rank/0"]
    assert why["s2/rank/0"][0] == "held for a reservation: wide/rank/0 from t=100s"


# ---------------------------------------------------------------- a gang no domain holds


GANG_FLEET = [site("dc", groups=[
    node_group("a", count=3, cpu=16, accelerators=[{"kind": "gpu", "model": "H100", "count": 8}], fabrics={"ib": "ib-a"}),
    node_group("b", count=2, cpu=16, accelerators=[{"kind": "gpu", "model": "H100", "count": 8}], fabrics={"ib": "ib-b"}),
])]


def gang_app(size: int, least: int | None = None):
    gang = {"size": size, **({"minSize": least} if least else {})}
    return app("big", "lab", [component("w", "job", cpu=8, memory="16Gi", gang=gang, coupling="ib", duration="1h",
                                        accelerators=[{"kind": "gpu", "count": 8}])])


def test_a_gang_no_coupling_domain_holds_is_inadmissible_with_the_domain_in_figures(tmp_path):
    """Six 8-GPU members coupled over ib; the largest ib domain has three
    8-GPU nodes: validate warns (an error under --strict) and the simulated
    gang waits inadmissible, "the largest ib domain holds 3 of its 6
    members". An elastic gang that may run with 3 is neither."""
    from test_populations import run_cli

    path = scenario(tmp_path, sites=GANG_FLEET, tenants=[tenant("lab")], apps=[gang_app(6)],
                    arrivals=[{"at": 0, "app": "big"}], until="10m")
    code, _, err = run_cli("validate", path)
    assert code == 0 and "spec.components[0].gang: no ib domain of the fleet holds its gang, even empty: the " \
                         "largest holds 3 of its 6 members; it can never be placed" in err, err
    assert run_cli("validate", "--strict", path)[0] == 2
    sim = Simulation(load_world([path]), seed=1)
    sim.run()
    first = why_json(sim.view.tasks["big/w/0"].reasons)[0]
    assert first["reason"] == "inadmissible: the largest ib domain holds 3 of its 6 members, even empty", first
    assert first["binding"] and first["code"] == "inadmissible"
    elastic = scenario(tmp_path, sites=GANG_FLEET, tenants=[tenant("lab")], apps=[gang_app(6, 3)],
                       arrivals=[{"at": 0, "app": "big"}], until="10m", name="elastic.yaml")
    code, _, err = run_cli("validate", elastic)
    assert code == 0 and "gang" not in err, err
    sim = Simulation(load_world([elastic]), seed=1)
    sim.run()
    assert sum(1 for e in sim.events if e["kind"] == "placed") == 3


def test_the_inadmissible_example_tells_each_bound(tmp_path):
    """``examples/inadmissible.yaml`` as its comment says: two warnings; the
    8-GPU task and the 6-gang wait inadmissible, each with its bound; the
    elastic gang runs with 3."""
    import json
    from pathlib import Path

    from test_populations import run_cli

    example = Path(__file__).parent.parent / "examples" / "inadmissible.yaml"
    code, _, err = run_cli("validate", example)
    assert code == 0 and err.count("it can never be placed") == 2, err
    code, _, err = run_cli("simulate", example, "--out", tmp_path / "run")
    assert code == 0, err
    metrics = json.loads((tmp_path / "run" / "result.json").read_text())["metrics"]
    assert metrics["pending_by_first_reason"] == {
        "inadmissible: the largest ib domain holds 3 of its 6 members, even empty": 6,
        "inadmissible: it asks 8 gpu on one node, and the most any node of the fleet has is 4": 1}
    assert metrics["tasks"]["finished"] == 3 and metrics["tasks"]["omitted"] == 3
