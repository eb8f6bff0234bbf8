"""The simulator: golden scenarios, the runtime model, determinism, conservation."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import app, component, node_group, site, tenant
from suanli.engine.clock import WallClock
from suanli.executors.sim import speed
from suanli.scheduling.reasons import Why
from suanli.sim.results import result_json
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world


def simulate(*paths, **kw):
    sim = Simulation(load_world([str(p) for p in paths]), **kw)
    end = sim.run()
    return sim, end


def by_task(events):
    out = defaultdict(list)
    for e in events:
        if "task" in e:
            out[e["task"]].append(e)
    return out


@pytest.fixture(scope="module")
def ai_mix(examples):
    return simulate(examples / "ai-hpc-mix.yaml")


def test_every_generated_job_finishes_or_waits_with_a_reason(ai_mix):
    sim, end = ai_mix
    assert end == 3 * 3600
    generated = [r for r in sim.view.tasks.values() if r.task.split("/")[0].rsplit("-", 1)[0] in ("finetune", "mpi", "batch")]
    assert len(generated) > 900
    for r in generated:
        assert r.status in ("finished", "pending", "running"), r
        if r.status == "pending":
            assert r.reasons and all(v > 0 for v in r.reasons.values())
        if r.status == "running":  # still inside its run time when the scenario ends
            assert sim.view.units[r.unit].run.finish_at > end


def test_the_failed_nodes_tasks_are_placed_again(ai_mix):
    sim, _ = ai_mix
    lost = [e for e in sim.events if e["kind"] == "lost"]
    assert lost and all(e["node"] == "cloud-north/a100-3" and e["t"] == 1800 for e in lost)
    events = by_task(sim.events)
    for e in lost:
        later = [x for x in events[e["task"]] if x["t"] >= e["t"] and x["kind"] == "placed"]
        assert later, f"{e['task']} was not placed again"
        assert sim.view.tasks[e["task"]].status in ("running", "finished")


def test_llm_train_finishes_when_its_work_and_parallelism_imply(ai_mix):
    sim, _ = ai_mix
    events = by_task(sim.events)
    members = [t for t in sim.view.tasks if t.startswith("llm-train/trainer/")]
    started = [e for t in members for e in events[t] if e["kind"] == "started"]
    finished = [e for t in members for e in events[t] if e["kind"] == "finished"]
    p = len(started)
    assert 8 <= p <= 12 and len(finished) == p
    expected = 16 * 3600 / (p * 0.92 ** math.log2(p))
    assert {round(f["t"] - s["t"], 3) for s, f in zip(started, finished)} == {round(expected, 3)}


def test_autodrive_runs_infotainment_on_the_car(examples):
    sim, end = simulate(examples / "autodrive.yaml")
    assert end == 3600
    placed = {e["task"]: e for e in sim.events if e["kind"] == "placed" and e["t"] < 600}
    info = [t for t in sim.view.tasks if t.startswith("infotainment/")]
    assert set(placed) == set(info) and {placed[t]["site"] for t in info} == {"car-1"}
    deleted = [e for e in sim.events if e.get("reason") == "deleted"]
    assert deleted and all(e["t"] == 2400 for e in deleted)


def test_same_scenario_and_seed_give_identical_outputs(examples):
    a, end_a = simulate(examples / "ai-hpc-mix.yaml", until=3600)
    b, end_b = simulate(examples / "ai-hpc-mix.yaml", until=3600)
    assert json.dumps(result_json(a, end_a)) == json.dumps(result_json(b, end_b))
    assert json.dumps(list(a.events)) == json.dumps(list(b.events))
    c, _ = simulate(examples / "ai-hpc-mix.yaml", until=3600, seed=99)
    assert json.dumps(list(c.events)) != json.dumps(list(a.events))


def test_a_run_collects_garbage_less_often_and_puts_the_thresholds_back(examples):
    import gc

    from suanli.sim.simulation import GC_THRESHOLDS

    before = gc.get_threshold()
    seen = []
    sim = Simulation(load_world([str(examples / "autodrive.yaml")]), until=60,
                     on_instant=lambda t: seen.append(gc.get_threshold()))
    try:
        gc.set_threshold(700, 10, 10)
        sim.run()
        assert seen and all(s == GC_THRESHOLDS for s in seen)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(50_000, 5, 100)  # never more often than the caller asked
        seen.clear()
        Simulation(load_world([str(examples / "autodrive.yaml")]), until=60,
                   on_instant=lambda t: seen.append(gc.get_threshold())).run()
        assert seen and all(s == (50_000, 20, 100) for s in seen)
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("p, eff, expected", [(1, 0.9, 1.0), (2, 0.9, 1.8), (8, 0.5, 1.0), (4, 1.0, 4.0)],
                         ids=["serial", "pair", "poor-scaling", "perfect"])
def test_speed_of_parallel_work(p, eff, expected):
    assert speed(p, eff) == pytest.approx(expected)


def _scenario_world(tmp_path, components, events=(), until="2h", groups=None, extra=None):
    docs = [
        {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
         "spec": {"sites": [site("s", groups=groups or [node_group(count=2, cpu=8)])]}},
        tenant(),
        app("w", components=components),
        {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
         "spec": {"until": until, "arrivals": [{"at": 0, "app": "w"}], "events": list(events), **(extra or {})}},
    ]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def test_work_deleted_before_it_was_placed_is_withdrawn_not_failed(tmp_path):
    """An application deleted while one of its tasks waits and another runs:
    the waiting one is ``withdrawn`` (not failed) in its event, the ledger,
    ``result.json``'s counts, the report's cards and the console's view of
    the run; the running one finishes; its first wait is counted, censored."""
    import json
    import subprocess
    import sys

    from suanli.console.recorded import RecordedRun

    comps = [component("big", cpu=12), component("ok", cpu=2)]
    path = _scenario_world(tmp_path, comps, events=[{"at": "10m", "kind": "delete", "app": "w"}],
                           groups=[node_group(count=1, cpu=8)], until="30m")
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "suanli.cli", "simulate", str(path), "--out", str(out)],
                   check=True, capture_output=True)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    ends = {e["task"]: (e["kind"], e["t"], e.get("reason")) for e in events
            if e["kind"] in ("finished", "failed", "withdrawn")}
    assert ends == {"w/big/0": ("withdrawn", 600.0, "deleted before it was placed"),
                    "w/ok/0": ("finished", 600.0, "deleted")}, ends
    metrics = json.loads((out / "result.json").read_text())["metrics"]
    assert metrics["tasks"]["withdrawn"] == 1 and metrics["tasks"]["failed"] == 0, metrics["tasks"]
    report = (out / "report.html").read_text()
    assert '<div class="card withdrawn"><div class="v">1</div>' in report
    assert '<div class="card failed zero"><div class="v">0</div>' in report
    run = RecordedRun(out)
    assert run.overview(None)["counts"]["withdrawn"] == 1 and run.overview(None)["counts"]["failed"] == 0
    assert run.task("w/big/0")["status"] == "withdrawn"
    sim, _ = simulate(path)
    assert sim.view.tasks["w/big/0"].status == "withdrawn"
    delay = metrics["queueing_delay_s"]  # both waited: the withdrawn one 10 minutes, cut short (censored)
    assert sum(d["count"] for d in delay.values()) == 2 and sum(d["censored"] for d in delay.values()) == 1, delay
    assert max(d["max"] for d in delay.values()) == 600.0, delay


def test_a_stateful_job_resumes_from_its_last_checkpoint(tmp_path):
    job = component("j", lifetime="job", cpu=8, duration="1h",
                    state={"kind": "stateful", "size": "1Gi", "checkpointEvery": "10m"})
    path = _scenario_world(tmp_path, [job], events=[{"at": "25m", "kind": "nodeDown", "node": "s/n-0"}],
                           groups=[node_group(count=1, cpu=8), node_group("m", count=1, cpu=16)])  # packing picks n-0
    sim, _ = simulate(path)
    ev = by_task(sim.events)["w/j/0"]
    assert [e["kind"] for e in ev] == ["submitted", "placed", "started", "lost", "placed", "started", "finished"]
    # 20 of the 25 minutes were checkpointed: 40 minutes remain after the loss at 25m
    assert ev[-1]["t"] == pytest.approx(25 * 60 + 40 * 60)


def test_a_gang_that_loses_a_member_is_requeued_whole(tmp_path):
    gang = component("g", lifetime="job", cpu=8, gang={"size": 2}, duration="1h")
    path = _scenario_world(tmp_path, [gang], events=[{"at": "10m", "kind": "nodeDown", "node": "s/n-0"},
                                                    {"at": "20m", "kind": "nodeUp", "node": "s/n-0"}])
    sim, _ = simulate(path)
    kinds = {t: [e["kind"] for e in ev] for t, ev in by_task(sim.events).items()}
    assert sorted(k[3] for k in kinds.values()) == ["lost", "requeued"]
    assert all(k[-1] == "finished" for k in kinds.values())
    finished = {e["t"] for e in sim.events if e["kind"] == "finished"}
    assert finished == {20 * 60 + 3600}  # restarted whole when the node came back, from the start


def test_a_tiny_scenario_runs_in_real_time(tmp_path):
    job = component("j", lifetime="job", cpu=1, duration=0.05)
    path = _scenario_world(tmp_path, [job], until=0.1)
    sim = Simulation(load_world([str(path)]), clock=WallClock())
    end = sim.run()
    assert end == pytest.approx(0.1)
    assert sim.view.tasks["w/j/0"].status == "finished"
    assert sim.loop.now() >= 0.1  # the wall clock really waited


# ---------------------------------------------------------------- conservation


@st.composite
def scenarios(draw):
    n_nodes = draw(st.integers(1, 4))
    comps = []
    for i in range(draw(st.integers(1, 3))):
        lifetime = draw(st.sampled_from(["job", "service"]))
        extra = {"duration": f"{draw(st.integers(1, 90))}m"} if lifetime == "job" else {}
        if draw(st.booleans()):
            extra["gang"] = {"size": draw(st.integers(1, 3))}
        else:
            extra["replicas"] = draw(st.integers(1, 4))
        comps.append(component(f"c{i}", lifetime=lifetime, cpu=draw(st.sampled_from([1, 2, 4, 8])), **extra))
    events = []
    for _ in range(draw(st.integers(0, 4))):
        node = f"s/n-{draw(st.integers(0, n_nodes - 1))}"
        events.append({"at": f"{draw(st.integers(0, 100))}m", "kind": draw(st.sampled_from(["nodeDown", "nodeUp"])),
                       "node": node})
    if draw(st.booleans()):
        events.append({"at": f"{draw(st.integers(0, 110))}m", "kind": "delete", "app": "w"})
    gen = {"name": "gen", "tenant": "t", "rate": f"1/{draw(st.integers(2, 30))}m", "until": "100m",
           "template": {"components": [component("x", lifetime="job", cpu=draw(st.sampled_from([1, 4])),
                                                 duration="10m")]},
           "jitter": {"duration": "lognormal(10m, 1.0)"}}
    return comps, events, n_nodes, {"generators": [gen], "seed": draw(st.integers(0, 1000))}


TERMINAL = {"finished": "finished", "failed": "failed", "omitted": "omitted", "withdrawn": "withdrawn"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios())
def test_every_task_ends_in_exactly_one_state_and_every_transition_is_logged(tmp_path, case):
    comps, events, n_nodes, extra = case
    path = _scenario_world(tmp_path, comps, events, groups=[node_group(count=n_nodes, cpu=8)], extra=extra)
    sim, end = simulate(path)
    times = [e["t"] for e in sim.events]
    assert times == sorted(times) and all(t <= end for t in times)
    log = by_task(sim.events)
    assert set(log) == set(sim.view.tasks)
    for task, ev in log.items():
        kinds = [e["kind"] for e in ev]
        assert kinds[0] == "submitted" and kinds.count("submitted") == 1
        for before, after in zip(kinds, kinds[1:]):
            assert before not in TERMINAL, kinds  # nothing after an end
            if after == "started":
                assert before in ("placed", "migrated")
            if after == "migrated":
                assert before == "placed"
        status = sim.view.tasks[task].status
        last = kinds[-1]
        # a migrated task whose state is still on its way holds its place: it runs
        expected = {"started": "running", "migrated": "running", **TERMINAL}.get(last, "pending")
        assert status == expected, (task, kinds, status)
        if status == "running":
            assert task in sim.state.placements
        else:
            assert task not in sim.state.placements
    counts = result_json(sim, end)["metrics"]["tasks"]
    assert counts["submitted"] == sum(counts[k] for k in ("finished", "running", "pending", "failed", "omitted", "withdrawn"))


def test_device_busy_takes_its_capacity_moving_what_stands_in_the_way(tmp_path):
    svc = component("s", cpu=6, accelerators=[{"kind": "npu", "count": 0.5}])
    small = component("m", cpu=1)
    groups = [node_group(count=1, cpu=8, accelerators=[{"kind": "npu", "model": "Orin", "count": 2, "shareable": True}])]
    busy = {"at": "10m", "kind": "deviceBusy", "site": "s", "duration": "5m",
            "resources": {"cpu": 4, "accelerators": [{"kind": "npu", "count": 1}]}}
    path = _scenario_world(tmp_path, [svc, small], events=[busy], groups=groups, until="30m")
    sim, _ = simulate(path)
    claimed = next(e for e in sim.events if e["kind"] == "deviceBusy")
    assert claimed["claimed"] == {"cpu_milli": 4000, "mem_mib": 0, "npu_milli": 1000} and "short" not in claimed
    # the 6-core service had to go (the 1-core one alone would not have made room); it comes back at 15m
    moved = [e for e in sim.events if e["kind"] == "preempted"]
    assert [(e["task"], e["t"], e["cause"]) for e in moved] == [("w/s/0", 600, "capacity claimed")]
    assert sim.view.tasks["w/m/0"].status == "running" and sim.view.tasks["w/s/0"].status == "running"
    freed = next(e for e in sim.events if e["kind"] == "deviceFree")
    assert freed["t"] == 15 * 60 and freed["freed"] == claimed["claimed"]
    back = [e for e in sim.events if e.get("task") == "w/s/0" and e["kind"] == "placed"]
    assert [e["t"] for e in back] == [0, 900]


def test_device_busy_evicts_no_more_than_the_claim_needs(tmp_path):
    """Cheapest first until the claim fits, then each evicted unit that the
    claim fits without is kept: the 1-core service, cheapest but not needed
    once the 4-core one goes, stays where it runs (evicted, it would only come
    back to the node it left). The one that moves waits until the claim ends."""
    comps = [component("a", cpu=1, priority=0), component("b", cpu=4, priority=1), component("c", cpu=2, priority=2)]
    busy = {"at": "10m", "kind": "deviceBusy", "node": "s/n-0", "duration": "5m", "resources": {"cpu": 4}}
    path = _scenario_world(tmp_path, comps, events=[busy], groups=[node_group(count=1, cpu=8)], until="30m")
    sim, _ = simulate(path)
    first = {e["task"]: e["node"] for e in sim.events if e["kind"] == "placed" and e["t"] == 0}
    assert len(first) == 3, first  # 7 of the node's 8 cores
    moved = [(e["task"], e["cause"]) for e in sim.events if e["kind"] == "preempted"]
    assert moved == [("w/b/0", "capacity claimed")], moved
    assert not [e for e in sim.events if e["kind"] == "migrated" and e["t"] == 600]  # nothing came straight back
    claimed = next(e for e in sim.events if e["kind"] == "deviceBusy")
    assert claimed["claimed"]["cpu_milli"] == 4000 and "short" not in claimed
    back = [e["t"] for e in sim.events if e.get("task") == "w/b/0" and e["kind"] == "placed"]
    assert back == [0, 900] and sim.view.tasks["w/a/0"].status == "running"


def test_device_busy_reports_what_even_evictions_cannot_free(tmp_path):
    svc = component("s", cpu=2)
    busy = {"at": "10m", "kind": "deviceBusy", "node": "s/n-0", "resources": {"cpu": 12}}
    path = _scenario_world(tmp_path, [svc], events=[busy], groups=[node_group(count=1, cpu=8)], until="30m")
    sim, _ = simulate(path)
    claimed = next(e for e in sim.events if e["kind"] == "deviceBusy")
    assert claimed["claimed"]["cpu_milli"] == 6000 and claimed["short"] == {"cpu_milli": 6000}
    assert not [e for e in sim.events if e["kind"] == "preempted"]  # evicting would not make 12 cores fit
    assert sim.view.tasks["w/s/0"].status == "running"


DRONES = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
    - {name: edge, tier: edge, nodeGroups: [{name: n, count: 1, arch: x86_64, cpu: 16, memory: 64Gi}]}
  populations:
    - name: drones
      count: 2
      sites: drone-##
      private: %s
      nodeGroups: [{name: soc, count: 1, arch: aarch64, cpu: 4, memory: 8Gi}]
      attach: {to: {tier: edge}, rttMs: 5, bandwidth: 100Mbps}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: track, tenant: t}
spec:
  each: drones
  components:
    - {name: s, lifetime: service, resources: {cpu: 3, memory: 1Gi}, near: {site: "{site}", maxRttMs: 20}}
---
apiVersion: suanli/v1
kind: Scenario
metadata: {name: sc}
spec:
  until: 10m
  events:
    - {at: 60s, kind: deviceBusy, site: drone-01, duration: 2m, resources: {cpu: 2}}
  policy: {rescheduling: {enabled: true, hysteresis: 30s}}
"""


@pytest.mark.parametrize("private", ["true", "false"])
def test_device_busy_moves_work_off_a_private_device_too(tmp_path, private):
    """A drone's own work claims 2 of its 4 cores, where the 3-core tracker
    bound near it runs: the tracker moves to the edge, on a private drone as
    on a shared one (the claim is the device's own work, which a private site
    takes), and comes back when the claim ends."""
    path = tmp_path / "drones.yaml"
    path.write_text(DRONES % private)
    sim, _ = simulate(path)
    claimed = next(e for e in sim.events if e["kind"] == "deviceBusy")
    assert claimed["claimed"]["cpu_milli"] == 2000 and "short" not in claimed, claimed
    moves = [(e["t"], e["kind"], e.get("to") or e.get("node")) for e in sim.events
             if e.get("task") == "track.drone-01/s/0" and e["kind"] in ("preempted", "migrated")]
    assert moves[:2] == [(60, "preempted", "drone-01/soc-0"), (60, "migrated", "edge/n-0")], moves
    assert moves[-1][1:] == ("migrated", "drone-01/soc-0") and moves[-1][0] >= 180, moves


# ---------------------------------------------------------------- traces

DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-2023"


def openb_scenario(tmp_path):
    """A scenario file replaying the openb default trace on its node list, for tenant t."""
    scenario = {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "openb"},
                "spec": {"traces": [{"format": "openb", "tenant": "t",
                                     "nodes": str(DATA / "openb_node_list_all_node.csv"),
                                     "pods": str(DATA / "openb_pod_list_default.csv")}]}}
    path = tmp_path / "openb.yaml"
    path.write_text(yaml.safe_dump_all([tenant(), scenario], sort_keys=False))
    return path


def test_the_openb_default_trace_replays(tmp_path):
    path = openb_scenario(tmp_path)
    world = load_world([str(path)])
    assert world.fleet.n_nodes == 1523 and world.fleet.sites[0].name == "openb"
    sim, end = simulate(path)
    result = result_json(sim, end)
    tasks = result["metrics"]["tasks"]
    assert tasks["submitted"] == 8152
    assert tasks["submitted"] == tasks["finished"] + tasks["running"] + tasks["pending"] + tasks["failed"] + \
        tasks["withdrawn"]
    assert tasks["withdrawn"] == 1  # openb-pod-7285, deleted when it was made
    gpu = result["timeline"]["by_tier"]["cloud"]["gpu_milli"]
    assert len(gpu) == len(result["timeline"]["t"]) > 1000  # allocation over time
    # the recorded times keep at most ~50 GPUs' worth of pods alive at once (of 6,212)
    assert 0.005 < max(gpu) < 0.02
    assert result["metrics"]["allocation_time_average"]["cloud"]["gpu_milli"] > 0


def test_a_fitted_host_holds_exactly_what_its_tasks_take_as_they_come_and_go(tmp_path):
    """A default VC's fitted host is the sum of its running tasks' allocations
    (resources and device shares), on a node where some run, and goes with the
    last of them; checked through a replay where pods keep arriving and leaving."""
    path = openb_scenario(tmp_path)
    checked, hosts_seen = [], []

    def check(t):
        if len(checked) % 97:  # every 97th instant: the check reads every placement
            checked.append(None)
            return
        state = sim.state
        for vc in state.vcs.values():
            if not vc.default:
                continue
            by_node = defaultdict(list)
            for p in state.placements.values():
                if p.vc == vc.name:
                    by_node[p.host.node].append(p)
            assert set(vc.by_node) == set(by_node) == {h.node for h in vc.hosts}
            assert len({h.name for h in vc.hosts}) == len(vc.hosts)
            for node, placed in by_node.items():
                hosts_seen.append(node)
                host = vc.by_node[node]
                assert all(p.host == host and p.host.name == host.name for p in placed)
                assert host.count == len(placed) and host in vc.hosts
                want_vec = sum(p.alloc.vec for p in placed)
                shares = Counter()
                for p in placed:
                    for slot, m in zip(p.alloc.slots, p.alloc.milli):
                        shares[slot] += m
                got = host.node_alloc
                assert got.row == node and got.vec.tolist() == want_vec.tolist()
                assert list(got.slots) == sorted(s for s, m in shares.items() if m)
                assert list(got.milli) == [shares[s] for s in got.slots]
        checked.append(t)

    sim = Simulation(load_world([str(path)]), on_instant=check)
    sim.run()
    assert sum(1 for c in checked if c is not None) > 20 and len(hosts_seen) > 1000


def test_trace_records_due_at_one_time_arrive_in_one_instant(tmp_path):
    """A trace's records with the same time are submitted together and placed in
    one scheduling pass, as the events of one instant are."""
    swf = tmp_path / "log.swf"
    swf.write_text("".join(f"{i} {t} -1 60 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
                           for i, t in enumerate([0, 5, 5, 5, 5, 9, 9], start=1)))
    scenario = {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "swf"},
                "spec": {"traces": [{"format": "swf", "path": "log.swf", "site": "hpc", "tenant": "t"}]}}
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": [site("hpc", groups=[node_group(count=2, cpu=4)])]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump_all([fleet, tenant(), scenario], sort_keys=False))
    instants: list[float] = []
    sim = Simulation(load_world([str(path)]), on_instant=instants.append)
    sim.run()
    assert [t for t in instants if t < 60] == [0.0, 5.0, 9.0]
    placed = Counter(e["t"] for e in sim.events if e["kind"] == "placed")
    assert placed == {0.0: 1, 5.0: 4, 9.0: 2}


def test_an_swf_log_replays(tmp_path):
    swf = tmp_path / "log.swf"
    swf.write_text("; MaxProcs: 8\n"
                   "1 0 -1 600 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
                   "2 10 -1 0 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n"  # zero run time: finishes at once
                   "3 20 -1 300 -1 -1 -1 6 -1 -1 1 1 1 -1 1 -1 -1 -1\n"  # allocated unknown: 6 requested
                   "4 30 -1 100 0 -1 -1 0 -1 -1 1 1 1 -1 1 -1 -1 -1\n")  # no processors: counted as failed
    scenario = {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "swf"},
                "spec": {"traces": [{"format": "swf", "path": "log.swf", "site": "hpc", "tenant": "t"}]}}
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": [site("hpc", groups=[node_group(count=1, cpu=8)]), site("other")]}}
    path = tmp_path / "swf.yaml"
    path.write_text(yaml.safe_dump_all([fleet, tenant(), scenario], sort_keys=False))
    sim, end = simulate(path)
    status = {t: r.status for t, r in sim.view.tasks.items()}
    assert sum(1 for t in status if t.startswith("swf-1/")) == 4 and sum(1 for t in status if t.startswith("swf-3/")) == 6
    assert status["swf-4/rank/0"] == "failed"
    assert all(s == "finished" for t, s in status.items() if not t.startswith("swf-4/"))
    ends = {t.split("/")[0]: sim.view.tasks[t].ended_at for t in status}
    assert ends["swf-2"] == 10  # zero run time: finished on arrival
    assert ends["swf-1"] == 600
    assert ends["swf-3"] == 600 + 300  # 8 cores: waited for job 1's 4 to free up
    assert {e["site"] for e in sim.events if e["kind"] == "placed"} == {"hpc"}


def test_metrics_by_site_fragmentation_and_near_violations(tmp_path):
    comps = [component("near", cpu=8, near={"site": "car", "maxRttMs": 10}),
             component("frac", replicas=3, cpu=1, accelerators=[{"kind": "gpu", "count": 0.25}])]
    docs = [
        {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
         "spec": {"sites": [site("car", tier="device", groups=[node_group(cpu=2)]),
                            site("edge", tier="edge", groups=[node_group(cpu=16, accelerators=[
                                {"kind": "gpu", "model": "T4", "count": 2, "shareable": True}])])],
                  "links": [{"between": ["car", "edge"], "rttMs": 5, "bandwidth": "1Gbps"}]}},
        tenant(), app("w", components=comps),
        {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
         "spec": {"until": "1h", "events": [{"at": "30m", "kind": "linkDown", "between": ["car", "edge"]}],
                  # the rescheduler off: the task whose bound broke keeps running, counted as a violation
                  "policy": {"rescheduling": {"enabled": False}}}},
    ]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim, end = simulate(path)
    m = result_json(sim, end)["metrics"]
    assert m["near_violations"] == {"max_concurrent": 1, "at_end": 1, "task_seconds": 1800.0}
    # three quarter-shares on one T4 of two: a quarter of a device stranded, of 2 devices
    assert m["fragmentation"]["gpu"] == {"mean": 0.125, "peak": 0.125, "at_end": 0.125}
    edge = m["allocation_by_site"]["edge"]
    assert edge["cpu_milli"] == {"mean": 11 / 16, "peak": 11 / 16}
    assert edge["gpu_milli"]["mean"] == 0.375


def test_written_outputs_are_byte_identical_across_runs(examples, tmp_path):
    from suanli.sim.results import write_outputs

    files = []
    for name in ("a", "b"):
        sim, end = simulate(examples / "autodrive.yaml")
        paths = write_outputs(sim, end, tmp_path / name)
        files.append({k: p.read_bytes() for k, p in paths.items()})
    assert files[0] == files[1]
    lines = files[0]["events"].decode().splitlines()
    assert all(json.loads(line)["t"] >= 0 for line in lines) and len(lines) == len(sim.events)


def test_a_streamed_event_log_gives_the_same_outputs_as_one_kept_in_memory(examples, tmp_path):
    """Long runs stream events.jsonl as it grows and keep only running figures;
    result.json, events.jsonl and report.html must not notice."""
    from suanli.sim.results import write_outputs

    files = []
    for name in ("memory", "streamed"):
        out = tmp_path / name
        out.mkdir()
        world = load_world([examples / "autodrive.yaml"])
        sim = Simulation(world, events_to=out / "events.jsonl.part" if name == "streamed" else None)
        end = sim.run()
        paths = write_outputs(sim, end, out)
        files.append({k: p.read_bytes() for k, p in paths.items()})
    assert files[0] == files[1]
    assert not (tmp_path / "streamed" / "events.jsonl.part").exists()
    metrics = json.loads(files[1]["result"])["metrics"]
    assert metrics["moves"]["migrations"] > 0 and metrics["moves"]["causes"]


# ---------------------------------------------------------------- preemption


def test_autopilot_preempts_infotainment_on_the_car(examples):
    sim, _ = simulate(examples / "autodrive.yaml")
    ev = sim.events
    core = {e["task"]: e for e in ev if e["kind"] == "placed" and e["task"] in
            ("autopilot/perception/0", "autopilot/control/0")}
    assert {e["site"] for e in core.values()} == {"car-1"} and all(600 <= e["t"] <= 660 for e in core.values())
    info = [e for e in ev if e.get("task", "").startswith("infotainment/")]
    assert not [e for e in info if e["kind"] in ("lost", "finished", "failed")]
    for e in [e for e in info if e["kind"] == "migrated"]:
        comp = sim.view.tasks[e["task"]].component
        assert e["bytes"] == (comp.state_mib * 2**20 if comp.stateful else 0) and e["downtime_s"] >= 0
    # the game (most state) stays; what moved to the edge stayed within its near bound
    assert not [e for e in info if e["task"] == "infotainment/game/0" and e["kind"] == "preempted"]
    for e in [e for e in info if e["kind"] == "placed" and e["t"] >= 600]:
        comp = sim.view.tasks[e["task"]].component
        rtt = sim.world.fleet.network.rtt(sim.world.fleet.site_index[e["site"]],
                                          sim.world.fleet.site_index["car-1"])
        assert rtt <= comp.near.max_rtt_ms


def test_preemption_evicts_a_gang_whole_or_not_at_all(tmp_path):
    low = component("g", cpu=8, gang={"size": 2})  # one member per node
    docs = [
        {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
         "spec": {"sites": [site("s", groups=[node_group(count=2, cpu=8)])]}},
        tenant(),
        app("low", components=[low], priority=1),
        app("high", components=[component("h", cpu=8)], priority=9),
        {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
         "spec": {"until": "1h", "arrivals": [{"at": 0, "app": "low"}, {"at": "10m", "app": "high"}]}},
    ]
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim, _ = simulate(path)
    preempted = sorted(e["task"] for e in sim.events if e["kind"] == "preempted")
    assert preempted == ["low/g/0", "low/g/1"]  # evicting one member would strand the other
    assert sim.view.tasks["high/h/0"].status == "running"
    assert [sim.view.tasks[t].status for t in preempted] == ["pending", "pending"]
    assert not [t for t in sim.state.placements if t.startswith("low/")]


def test_preemption_takes_the_cheapest_victims(tmp_path):
    comps = [component("big", cpu=4, state={"kind": "stateful", "size": "8Gi"}),
             component("small", cpu=4)]
    docs = [
        {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
         "spec": {"sites": [site("s", groups=[node_group(count=1, cpu=8)])]}},
        tenant(),
        app("low", components=comps, priority=1),
        app("high", components=[component("h", cpu=4)], priority=9),
        {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
         "spec": {"until": "1h", "arrivals": [{"at": 0, "app": "low"}, {"at": "10m", "app": "high"}]}},
    ]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim, _ = simulate(path)
    assert [e["task"] for e in sim.events if e["kind"] == "preempted"] == ["low/small/0"]


def test_infotainment_comes_home_after_autopilot_without_flapping(examples):
    sim, _ = simulate(examples / "autodrive.yaml")
    info = [t for t in sim.view.tasks if t.startswith("infotainment/")]
    site_at = {}
    moves = defaultdict(int)
    for e in sim.events:
        if e.get("task") in info and e["kind"] == "placed":
            site_at[e["task"]] = (e["t"], e["site"])
        if e.get("task") in info and e["kind"] == "migrated":
            moves[e["task"]] += 1
    for task in info:
        t, where = site_at[task]
        assert where == "car-1" and t <= 2400 + 300, (task, t, where)
        assert sim.view.tasks[task].status == "running"
    assert max(moves.values()) <= 2


def test_a_broken_link_moves_or_stops_what_it_breaks_and_the_report_says_so(examples, tmp_path):
    text = (examples / "autodrive.yaml").read_text().replace(
        "  events:\n    - {at: 40m, kind: delete, app: autopilot}",
        "  events:\n    - {at: 20m, kind: linkDown, between: [car-1, edge-1]}\n"
        "    - {at: 40m, kind: delete, app: autopilot}")
    text = text.replace("include: [city-fleet.yaml, tenants.yaml]",
                        f"include: [{examples / 'city-fleet.yaml'}, {examples / 'tenants.yaml'}]")
    path = tmp_path / "autodrive-link.yaml"
    path.write_text(text)
    sim, end = simulate(path)
    metrics = result_json(sim, end)["metrics"]
    # car-1's only link is down: what ran on edge-1 bound to car-1 cannot stay; none of it runs out of bound
    assert metrics["near_violations"]["max_concurrent"] == 0
    broken = {e["task"]: e for e in sim.events if e["kind"] == "preempted" and e["cause"] == "bound broken"}
    assert {"infotainment/movie/0", "infotainment/music/0", "autopilot/planning/0"} <= set(broken)
    assert all(e["t"] == 1200 and e["site"] == "edge-1" for e in broken.values())
    assert broken["autopilot/fleet-learning/0"]["reason"] == "data site car-1 unreachable"
    assert metrics["moves"]["causes"]["bound broken"] == len(broken)
    # infotainment waits or fits on the car, and is all back there by 40m, state and all
    for task in ("infotainment/movie/0", "infotainment/music/0", "infotainment/game/0"):
        last = [e for e in sim.events if e.get("task") == task and e["kind"] == "placed"][-1]
        assert last["site"] == "car-1" and last["t"] <= 2400
        assert sim.view.tasks[task].status == "running"
    for e in [e for e in sim.events if e["kind"] == "migrated" and e["task"].startswith("infotainment/")]:
        comp = sim.view.tasks[e["task"]].component
        assert e["bytes"] == (comp.state_mib * 2**20 if comp.stateful else 0)


def test_a_stopped_stateful_service_waits_for_a_path_its_state_can_take(tmp_path):
    """A service stopped on a site a partition cuts off may go only where its
    state can follow: it waits for the link, then moves with its state."""
    low = component("s", cpu=4, state={"kind": "stateful", "size": "1Gi"}, near={"site": "a"})
    high = component("h", cpu=4, near={"site": "a", "maxRttMs": 1})
    docs = [
        {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
         "spec": {"sites": [site("a", groups=[node_group(count=1, cpu=4)]),
                            site("b", groups=[node_group(count=1, cpu=4)])],
                  "links": [{"between": ["a", "b"], "rttMs": 5, "bandwidth": "1Gbps"}]}},
        tenant(),
        app("low", components=[low], priority=1),
        app("high", components=[high], priority=9),
        {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "sc"},
         "spec": {"until": "1h", "arrivals": [{"at": 0, "app": "low"}, {"at": "10m", "app": "high"}],
                  "events": [{"at": "5m", "kind": "linkDown", "between": ["a", "b"]},
                             {"at": "30m", "kind": "linkUp", "between": ["a", "b"]}]}},
    ]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim, _ = simulate(path, until=20 * 60)
    assert sim.view.tasks["low/s/0"].status == "pending"
    assert Why("reach", "state", site="a") in sim.view.tasks["low/s/0"].reasons
    sim, _ = simulate(path)
    ev = [e for e in sim.events if e.get("task") == "low/s/0"]
    assert [(e["kind"], e.get("site")) for e in ev if e["kind"] in ("placed", "preempted")] == [
        ("placed", "a"), ("preempted", "a"), ("placed", "b")]
    moved = next(e for e in ev if e["kind"] == "migrated")
    assert moved["t"] == 1800 and moved["from"] == "a/n-0" and moved["to"] == "b/n-0"
    assert moved["bytes"] == 2**30 and moved["downtime_s"] == pytest.approx(1200 + 2**30 * 8 / 1e9 + 0.005 + 5)
    started = [e for e in ev if e["kind"] == "started"][-1]
    assert started["t"] == pytest.approx(1800 + 2**30 * 8 / 1e9 + 0.005 + 5)  # once its state has arrived and it restarted


def test_plan_shows_the_moves_without_making_them(examples, tmp_path):
    import subprocess
    import sys

    text = (examples / "autodrive.yaml").read_text()
    text = text.replace("rescheduling: {enabled: true, hysteresis: 60s}", "rescheduling: {enabled: false}")
    text = text.replace("include: [city-fleet.yaml, tenants.yaml]",
                        f"include: [{examples / 'city-fleet.yaml'}, {examples / 'tenants.yaml'}]")
    path = tmp_path / "autodrive-off.yaml"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "suanli.cli", "plan", str(path), "--at", "41m", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    plan = json.loads(out)
    returns = {m["move"][0]["task"]: m for m in plan["moves"] if m["kind"] == "return"}
    assert set(returns) == {"infotainment/movie/0", "infotainment/music/0"}
    assert all(m["move"][0]["from"].startswith("edge-1/") and m["move"][0]["to"] == "car-1/soc-0" and m["gain"] > 0
               and m["held"] is None and m["cost"]["downtime_s"] >= 5 for m in returns.values())
    assert plan["running_by_site"]["edge-1"] == 2  # nothing was moved


def test_plan_names_the_quota_a_task_waits_on_as_simulate_does(tmp_path):
    """A task held back by its tenant's quota: the plan lists every reason the
    task has, the quota's gap among them, as the simulation's results do."""
    from builders import scenario
    from suanli.sim.plan import dry_run
    from suanli.sim.results import result_json

    sites = [site("cloud-1", groups=[node_group(count=3, cpu=16), node_group("arm", count=4, cpu=16, arch="aarch64")]),
             site("other", groups=[node_group(count=6, cpu=16)]),
             *(site(f"edge-{i}", tier="edge", groups=[node_group(count=3, cpu=4)]) for i in range(8))]
    apps = [app(f"a{i}", components=[component(cpu=8, platform={"arch": ["x86_64"]})]) for i in range(3)]
    path = scenario(tmp_path, sites=sites, apps=apps,
                    tenants=[tenant(quota={"cpu": 20}, allowedSites=["cloud-*", "edge-*"])])
    sim, end = simulate(path, until=600)
    plan = dry_run(sim, end)
    waiting = {p["task"]: p["reasons"] for p in plan["pending"]}
    assert list(waiting) == ["a2/c/0"]  # two of 8 cores within 20; the third would exceed the quota
    reasons = waiting["a2/c/0"]
    assert reasons["tenant t quota for cpu: 4 more needed"] == 2  # the nodes with room, but for the quota
    assert reasons["insufficient cpu"] == 25  # the edges' nodes and the node the two others fill
    assert len(reasons) == 4 and min(reasons.values()) == 2  # the quota has the fewest nodes of four reasons
    assert {u["task"]: u["reasons"] for u in result_json(sim, end)["unscheduled"]} == waiting


def test_members_an_elastic_gang_runs_without_name_the_quota_first(tmp_path):
    """An elastic gang held to its tenant's quota runs at the size the quota
    allows; the members left out end with the quota named first, in figures
    (what the whole gang asks, what the quota leaves, the gap), then the size."""
    from builders import gpu, scenario

    comp = component("m", lifetime="job", cpu=8, memory="32Gi", accelerators=[{"kind": "gpu", "count": 4}],
                     gang={"size": 6, "minSize": 2}, coupling="ib")
    nodes = node_group("g", count=7, cpu=48, memory="384Gi", accelerators=[gpu(4, shareable=False)], fabrics={"ib": "ib-a"})
    path = scenario(tmp_path, sites=[site("dc", groups=[nodes])], apps=[app("train", components=[comp])],
                    tenants=[tenant(quota={"gpu": 18})])
    sim, _ = simulate(path, until=600)
    assert sorted(t for t, r in sim.view.tasks.items() if r.status == "running") == [f"train/m/{i}" for i in range(4)]
    ev = by_task(sim.events)
    for task in ("train/m/4", "train/m/5"):
        assert sim.view.tasks[task].status == "omitted"  # left out, not failed
        (failed,) = [e for e in ev[task] if e["kind"] == "omitted"]
        quota, size = failed["why"]
        assert quota["binding"] and quota["code"] == "quota" and quota["resource"] == "gpu", quota
        assert (quota["requested"], quota["allowed"], quota["gap"]) == (24000, 18000, 6000), quota
        assert size["code"] == "elastic" and size["args"] == {"members": 6, "placed": 4}, size
        assert failed["reason"].startswith(quota["reason"])


def test_fair_share_reclaim_moves_shares_toward_the_weights(tmp_path):
    job = {"components": [{"name": "w", "resources": {"cpu": 8, "memory": "8Gi"}, "duration": "2h"}]}
    gens = [{"name": "jb", "tenant": "b", "rate": "1/30s", "until": "2h", "template": job},
            {"name": "ja", "tenant": "a", "rate": "1/30s", "start": "2m", "until": "2h", "template": job},
            {"name": "jc", "tenant": "c", "rate": "1/30s", "start": "40m", "until": "2h", "template": job}]
    docs = [
        {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
         "spec": {"sites": [site("s", groups=[node_group(count=12, cpu=8, memory="32Gi")])]}},
        tenant("a", weight=2), tenant("b", weight=1), tenant("c", weight=1),
        {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "fair"},
         "spec": {"seed": 3, "until": "1h", "generators": gens}},
    ]
    path = tmp_path / "fair.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim, _ = simulate(path, until=39 * 60)
    share = {t: sim.state.dominant_share(t) * sim.world.tenants[t].weight for t in "abc"}
    # b flooded first; once a arrives, reclaim brings them to 2:1 (8 and 4 of 12 nodes)
    assert share["a"] / share["b"] == pytest.approx(2.0, rel=0.1)
    assert [e for e in sim.events if e["kind"] == "preempted"]
    sim, _ = simulate(path, until=60 * 60)
    weighted = {t: sim.state.dominant_share(t) for t in "abc"}
    assert weighted["c"] > 0  # the late tenant gets its share too
    assert max(weighted.values()) - min(weighted.values()) <= 1 / 12 + 1e-9  # within one node of fair


def test_the_game_moves_with_its_state_when_the_edge_has_room_for_it(examples, tmp_path):
    """A variant: the edge has an NPU node and perception needs both car NPUs,
    so the game itself must go; its 512 MiB cross the 200 Mbps car link."""
    fleet = (examples / "city-fleet.yaml").read_text().replace(
        "    - name: edge-2\n",
        "        - {name: npu, count: 1, arch: aarch64, cpu: 16, memory: 64Gi,\n"
        "           accelerators: [{kind: npu, model: Orin, count: 2, shareable: true}]}\n"
        "    - name: edge-2\n", 1)
    (tmp_path / "city-fleet.yaml").write_text(fleet)
    (tmp_path / "tenants.yaml").write_text((examples / "tenants.yaml").read_text())
    text = (examples / "autodrive.yaml").read_text().replace(
        "accelerators: [{kind: npu, model: Orin, count: 1}]", "accelerators: [{kind: npu, model: Orin, count: 2}]")
    path = tmp_path / "autodrive.yaml"
    path.write_text(text)
    sim, _ = simulate(path)
    game = [e for e in sim.events if e.get("task") == "infotainment/game/0"]
    moves = [e for e in game if e["kind"] == "migrated"]
    assert [(e["from"], e["to"]) for e in moves] == [("car-1/soc-0", "edge-1/npu-0"), ("edge-1/npu-0", "car-1/soc-0")]
    transfer = 512 * 2**20 * 8 / 200e6 + 0.008 + 5  # the state over the link, then the restart (restartTime)
    assert all(e["bytes"] == 512 * 2**20 and e["downtime_s"] == pytest.approx(transfer) for e in moves)
    assert 600 <= moves[0]["t"] <= 660 and 2400 <= moves[1]["t"] <= 2700
    started = [e["t"] for e in game if e["kind"] == "started"]
    assert started[1:] == [pytest.approx(m["t"] + transfer) for m in moves]  # running again once the state is there
    assert not [e for e in game if e["kind"] in ("lost", "finished", "failed")]


@pytest.mark.parametrize("seed,arrive,delete", [(1, 10, 40), (23, 3, 20), (5, 25, 50), (7, 10, 80)])
def test_autodrive_acceptance_holds_on_variants(examples, tmp_path, seed, arrive, delete):
    """The same checks with other seeds, times and horizons."""
    text = (examples / "autodrive.yaml").read_text()
    text = text.replace("seed: 7", f"seed: {seed}").replace("until: 1h", "until: 2h")
    text = text.replace("{at: 10m, app: autopilot}", f"{{at: {arrive}m, app: autopilot}}")
    text = text.replace("{at: 40m, kind: delete, app: autopilot}", f"{{at: {delete}m, kind: delete, app: autopilot}}")
    text = text.replace("include: [city-fleet.yaml, tenants.yaml]",
                        f"include: [{examples / 'city-fleet.yaml'}, {examples / 'tenants.yaml'}]")
    path = tmp_path / "variant.yaml"
    path.write_text(text)
    sim, _ = simulate(path)
    fleet, ev = sim.world.fleet, sim.events
    a, d = arrive * 60, delete * 60
    info = [t for t in sim.view.tasks if t.startswith("infotainment/")]
    placed = defaultdict(list)
    for e in ev:
        if e["kind"] == "placed":
            placed[e["task"]].append(e)
    for task in info:
        assert placed[task][0]["site"] == "car-1" and placed[task][0]["t"] < a
        assert placed[task][-1]["site"] == "car-1" and placed[task][-1]["t"] <= d + 300
        assert sim.view.tasks[task].status == "running"
        for e in placed[task]:
            rtt = fleet.network.rtt(fleet.site_index[e["site"]], fleet.site_index["car-1"])
            assert rtt <= sim.view.tasks[task].component.near.max_rtt_ms
    for task in ("autopilot/perception/0", "autopilot/control/0"):
        assert placed[task][0]["site"] == "car-1" and a <= placed[task][0]["t"] <= a + 60
    assert not [e for e in ev if e.get("task") in info and e["kind"] in ("lost", "finished", "failed")]
    moves = Counter(e["task"] for e in ev if e["kind"] == "migrated" and e["task"] in info)
    assert max(moves.values()) <= 2
    for e in ev:
        if e["kind"] == "migrated" and e["task"] in info:
            comp = sim.view.tasks[e["task"]].component
            assert e["bytes"] == (comp.state_mib * 2**20 if comp.stateful else 0) and e["downtime_s"] >= 0


def two_links(tmp_path):
    """A drone 5 ms from two edges, over 100 Mbps and over 10 Gbps; a 4 GiB
    tracker bound near it; the drone's own work claims it at 60 s for 2 min."""
    from builders import link, scenario

    small = [node_group("soc", cpu=4, memory="8Gi")]
    sites = [site("drone-1", tier="device", groups=small), site("e-slow", tier="edge"), site("e-fast", tier="edge")]
    tracker = component("s", cpu=3, near={"site": "drone-1", "maxRttMs": 20}, state={"kind": "stateful", "size": "4Gi"})
    return scenario(tmp_path, sites=sites, links=[link("drone-1", "e-slow", 5, "100Mbps"),
                                                  link("drone-1", "e-fast", 5, "10Gbps")],
                    apps=[app("track", components=[tracker])], arrivals=[{"at": 0, "app": "track"}], until="10m",
                    events=[{"at": "60s", "kind": "deviceBusy", "site": "drone-1", "duration": "2m",
                             "resources": {"cpu": 2}}], policy={"enabled": True, "hysteresis": "30s"})


@pytest.mark.parametrize("seed", range(6))
def test_a_moving_service_goes_where_its_state_gets_soonest_by_the_return_plans_measure(tmp_path, seed):
    """A claimed drone's 4 GiB tracker has two edges 5 ms away, one over
    100 Mbps and one over 10 Gbps: it goes to the fast one whatever the seed
    (its placement counts the seconds the move takes, one point each, as the
    return plan counts them: 4 GiB over 10 Gbps plus the rtt plus the restart,
    8.44 s), is not moved between the edges after, and comes home when the
    claim ends."""
    sim, _ = simulate(two_links(tmp_path), seed=seed)
    moves = [e for e in sim.events if e.get("task") == "track/s/0" and e["kind"] == "migrated"]
    assert moves[0]["to"] == "e-fast/n-0" and moves[0]["t"] == 60, moves
    assert abs(moves[0]["downtime_s"] - (4 * 2**30 * 8 / 10e9 + 0.005 + 5)) < 1e-3, moves[0]
    assert [m["to"] for m in moves[1:]] == ["drone-1/soc-0"] and moves[1]["t"] >= 180, moves


def test_a_generators_copies_are_what_its_template_makes_under_each_name(examples, tmp_path):
    """A generator reads its template once and renames the application for
    each arrival: each copy equals, field by field, the application made
    from the template under its name (its drawn duration or work aside,
    where it has jitter): the generators of ``ai-hpc-mix`` and of
    PureEdgeSim's world (bound near devices, on named sites)."""
    import subprocess
    import sys
    from dataclasses import replace

    from suanli.sim.workload import generated
    from suanli.spec.build import build_application

    pes = tmp_path / "pes.yaml"
    subprocess.run([sys.executable, str(examples.parent / "worlds" / "pureedgesim_default.py"), "12", str(pes)],
                   check=True, capture_output=True)
    seen = Counter()
    for path in (examples / "ai-hpc-mix.yaml", pes):
        for i, spec in enumerate(load_world([path]).scenario.spec.generators):
            for arrival, _ in zip(generated(spec, i, 7, 3600.0), range(5)):
                copy = arrival.app
                made = build_application(copy.name, spec.tenant, spec.template)
                assert replace(made, components=copy.components) == copy
                for c, m in zip(copy.components, made.components, strict=True):
                    assert c == replace(m, duration_s=c.duration_s, work_s=c.work_s) if spec.jitter else c == m
                    assert c.app == copy.name
                seen["jitter" if spec.jitter else "plain"] += 1
    assert seen["plain"] >= 20 and seen["jitter"] >= 10, seen  # not vacuous: both kinds, five copies each
