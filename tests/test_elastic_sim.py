"""Elastic gangs resized while they run in a simulation (``policy.elastic``):
the widths keep every bound, the work is conserved across resizes, and a
job never ends later than at the slowest width it ran at."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from incli import cli

from suanli.model.speedup import Table
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

SPEEDS = {1: 1.0, 2: 1.9, 4: 3.6, 8: 6.5, 16: 11.0}


def _docs(jobs, tenants, nodes, domains, policy, quota=None):
    groups = [{"name": f"g{d}", "count": nodes, "arch": "x86_64", "cpu": 64, "memory": "512Gi",
               "fabrics": {"ib": f"ib-{d}"}, "accelerators": [{"kind": "gpu", "model": "A100", "count": 4}]}
              for d in range(domains)]
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": [{"name": "dc", "tier": "cloud", "nodeGroups": groups}]}}
    docs = [fleet]
    for k in range(tenants):
        spec = {"weight": 1 + k}
        if quota is not None and k == 0:
            spec["quota"] = {"gpu": quota}
        docs.append({"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": f"t{k}"}, "spec": spec})
    arrivals = []
    for i, (tenant, least, size, most, work_h, at, cost) in enumerate(jobs):
        gang = {"size": size, "minSize": least, "resizeCost": f"{cost}s"}
        if most > size:
            gang["maxSize"] = most
        docs.append({"apiVersion": "suanli/v1", "kind": "Application",
                     "metadata": {"name": f"j{i}", "tenant": f"t{tenant % tenants}"},
                     "spec": {"components": [{"name": "train", "lifetime": "job", "gang": gang, "coupling": "ib",
                                              "resources": {"cpu": 4, "memory": "16Gi",
                                                            "accelerators": [{"kind": "gpu", "count": 1}]},
                                              "work": f"{work_h}h", "scaling": {"table": SPEEDS}}]}})
        arrivals.append({"app": f"j{i}", "at": f"{at}s"})
    docs.append({"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "s"},
                 "spec": {"policy": {"elastic": {"policy": policy, "every": "60s"}}, "arrivals": arrivals}})
    return docs


@st.composite
def worlds(draw):
    tenants = draw(st.integers(1, 3))
    jobs = []
    for _ in range(draw(st.integers(2, 9))):
        least = draw(st.integers(1, 4))
        size = draw(st.integers(least, 8))
        most = draw(st.sampled_from([size, size, 12, 16]))
        jobs.append((draw(st.integers(0, 5)), least, size, max(most, size), draw(st.sampled_from([1, 2, 5, 12])),
                     draw(st.integers(0, 4)) * 300, draw(st.sampled_from([0, 30]))))
    return (jobs, tenants, draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.sampled_from(["goodput",
            "greedy"])), draw(st.sampled_from([None, None, 6, 10])))


seen: Counter = Counter()


def _check(sim, quota) -> None:
    """At an instant: each running elastic gang within its bounds, in one ib
    domain, the first tenant within its quota."""
    shard = sim.shard
    fleet = sim.world.fleet
    gpus = Counter()
    for uid in shard.resizer.units:
        us = shard._units[uid]
        run = us.run
        if run is None:
            continue
        lead = us.unit.components[0]
        assert (lead.min_size or 1) <= run.parallelism <= len(us.unit.tasks)
        nodes = {shard.state.placements[task].host.node for task in run.tasks}
        domains = {fleet.node_name(n).split("/")[1].split("-")[0] for n in nodes}
        assert len(domains) == 1, domains  # one ib domain (a node group each)
        gpus[us.unit.tenant] += run.parallelism
        seen["running"] += 1
        if run.parallelism < len(us.unit.tasks):
            seen["below its most"] += 1
    if quota is not None:
        assert gpus["t0"] <= quota
        seen["quota binds"] += gpus["t0"] > quota - 2


def _runs(events):
    """Per job: its runs as (start, end, width, after a resize, how it ended)
    from the events: a run opens when its first member starts (its width the
    members started then) or at a resize (its width the resize's ``to``), and
    ends at the next resize, or when its first member finishes or stops."""
    runs = defaultdict(list)
    open_at: dict[str, list] = {}
    for e in events:
        kind, task = e["kind"], e.get("task", "")
        job = task.split("/")[0]
        if kind == "resized":
            start, width, resized, _ = open_at.pop(job)
            assert width == e["from"], (job, width, e)
            runs[job].append((start, e["t"], width, resized, "resizing"))
            open_at[job] = [e["t"], e["to"], True, True]
        elif kind == "started":
            if job not in open_at:
                open_at[job] = [e["t"], 1, False, False]
            elif not open_at[job][3] and open_at[job][0] == e["t"]:
                open_at[job][1] += 1  # a member of the run that started now
        elif kind in ("finished", "preempted", "requeued", "lost") and task.endswith("/train/0") and job in open_at:
            start, width, resized, _ = open_at.pop(job)
            runs[job].append((start, e["t"], width, resized, kind))
    return runs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
@example(([(0, 1, 4, 16, 5, 0, 30), (0, 2, 4, 8, 2, 300, 0), (1, 1, 2, 12, 1, 600, 0)], 2, 2, 1, "goodput", 6))
@example(([(0, 2, 8, 16, 2, 0, 0), (0, 1, 2, 4, 1, 0, 30)], 1, 3, 1, "greedy", 10))
def test_resizes_keep_bounds_domains_and_quotas_and_conserve_work(tmp_path_factory, world):
    jobs, tenants, nodes, domains, policy, quota = world
    path = tmp_path_factory.mktemp("w") / "w.yaml"
    path.write_text(yaml.safe_dump_all(_docs(jobs, tenants, nodes, domains, policy, quota), sort_keys=False))
    sim = Simulation(load_world([path]), seed=1, on_instant=lambda t: _check(sim, quota))
    sim.run()
    events = sim.events.take()
    seen["resized"] += sum(1 for e in events if e["kind"] == "resized")
    seen["shrunk"] += sum(1 for e in events if e["kind"] == "resized" and e["to"] < e["from"])
    table = Table(tuple(SPEEDS.items()))
    costs = {f"j{i}": job[6] for i, job in enumerate(jobs)}
    works = {f"j{i}": job[4] * 3600.0 for i, job in enumerate(jobs)}
    for job, runs in _runs(events).items():
        if runs[-1][4] != "finished":
            continue
        done, saved, pauses, slowest = 0.0, 0.0, 0.0, math.inf
        for k, (start, end, w, _, how) in enumerate(runs):
            pause = costs[job] if k > 0 and runs[k - 1][4] == "resizing" else 0.0
            done += max(end - start - pause, 0.0) * table.speed(w)
            if how == "resizing":  # a resize checkpoints the gang
                saved = done
            elif how in ("preempted", "requeued"):  # no checkpoint of its own: back to the last resize's
                done = saved
            pauses += pause
            slowest = min(slowest, table.speed(w))
        # work done plus work left (none: it finished) equals the work declared
        assert done == pytest.approx(works[job], rel=1e-6), (job, runs)
        seen["finished"] += 1
        if all(r[4] in ("resizing", "finished") for r in runs):  # ran from its start to its end
            first, last = runs[0][0], runs[-1][1]
            assert last - first <= works[job] / slowest + pauses + 1e-6 * works[job], (job, runs)
            seen["never later"] += len(runs) > 1


def test_the_resize_cases_are_not_vacuous():
    assert seen["resized"] > 20 and seen["shrunk"] > 3 and seen["finished"] > 20 and seen["never later"] > 5, seen
    assert seen["below its most"] > 10 and seen["quota binds"] > 0, seen


def test_a_gang_grows_into_free_room_shrinks_for_arrivals_and_its_work_adds_up(tmp_path):
    """One 40-hour gang (8 of up to 16 GPUs) and a 4-hour one arriving at 600 s,
    on 16 GPUs: the first grows at the first turn, shrinks to 8 when the second
    arrives and grows back when it ends. Its end is its work over the widths it
    ran at, each run after a resize 30 s late."""
    path = tmp_path / "w.yaml"
    docs = _docs([(0, 2, 8, 16, 40, 0, 30), (0, 1, 8, 8, 4, 600, 0)], 1, 4, 1, "goodput")
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    out = tmp_path / "out"
    r = cli("simulate", str(path), "--out", str(out))
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    resized = [(e["t"], e["from"], e["to"]) for e in events if e["kind"] == "resized"]
    assert resized == [(60.0, 8, 16), (600.0, 16, 8), (2820.0, 8, 16)]
    small_end = 600 + 4 * 3600 / 6.5
    ends = {e["t"] for e in events if e["kind"] == "finished" and e["task"].startswith("j1/")}
    assert len(ends) == 1 and ends.pop() == pytest.approx(small_end)
    left = 40 * 3600 - 60 * 6.5 - (540 - 30) * 11 - (2220 - 30) * 6.5
    end = {e["t"] for e in events if e["kind"] == "finished" and e["task"].startswith("j0/")}
    assert len(end) == 1 and end.pop() == pytest.approx(2820 + 30 + left / 11)
    result = json.loads((out / "result.json").read_text())
    assert result["metrics"]["tasks"]["finished"] == 24  # 16 members of the first, 8 of the second


def test_with_elastic_none_a_gang_keeps_the_width_it_started_at(tmp_path):
    path = tmp_path / "w.yaml"
    docs = _docs([(0, 2, 8, 16, 40, 0, 30), (0, 1, 8, 8, 4, 600, 0)], 1, 4, 1, "none")
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim = Simulation(load_world([path]), seed=1)
    sim.run()
    events = sim.events.take()
    assert not [e for e in events if e["kind"] == "resized"]
    assert sum(1 for e in events if e["kind"] == "started" and e["task"].startswith("j0/")) == 8  # its size
    assert sum(1 for e in events if e["kind"] == "omitted" and e["task"].startswith("j0/")) == 8  # up to maxSize


def _simulated(tmp_path: Path, docs: list, policy: str) -> list[dict]:
    """The events of a simulation of ``docs`` under elastic ``policy``."""
    docs[-1]["spec"]["policy"]["elastic"]["policy"] = policy
    return _simulated_docs(docs, tmp_path / f"{policy}.yaml")


def _simulated_docs(docs: list, path: Path) -> list[dict]:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    sim = Simulation(load_world([path]), seed=1)
    sim.run()
    return sim.events.take()


def test_the_elastic_example_grows_gives_back_and_shortens_the_average_job(tmp_path):
    """examples/elastic.yaml: under goodput the long job grows at the first turn,
    gives its GPUs back when the short jobs arrive and grows when they end;
    the average job time is shorter than with elastic: none."""
    example = Path(__file__).resolve().parents[1] / "examples" / "elastic.yaml"
    docs = list(yaml.safe_load_all(example.read_text()))
    jct = {}
    for policy in ("goodput", "none"):
        events = _simulated(tmp_path, docs, policy)
        sizes = [(e["from"], e["to"]) for e in events if e["kind"] == "resized"]
        if policy == "goodput":
            assert sizes[0] == (8, 16) and any(b < a for a, b in sizes) and sizes[-1][1] == 16, sizes
        else:
            assert not sizes
        at = {e["app"]: e["at"] for e in docs[-1]["spec"]["arrivals"]}
        arrive = {"pretrain": 0.0, "finetune": 600.0, "eval": 1800.0}
        assert set(at) == set(arrive)
        ends = {e["task"].split("/")[0]: e["t"] for e in events if e["kind"] == "finished"}
        jct[policy] = sum(ends[a] - arrive[a] for a in arrive) / len(arrive)
    assert jct["goodput"] < 0.8 * jct["none"], jct


def test_a_preemption_shrinks_an_elastic_gang_before_it_stops_one_whole(tmp_path):
    """A 16-GPU gang (down to 4) fills the pod; a higher-priority 6-GPU job
    arrives: the gang goes on with 10 members where they are (its last six
    give their room back), nothing is preempted, and it grows back to 16 when
    the job ends. With elastic: none the gang is stopped whole instead."""
    docs = _docs([(0, 4, 16, 16, 40, 0, 30), (0, 6, 6, 6, 6, 300, 0)], 1, 4, 1, "goodput")
    docs[2]["spec"]["priority"], docs[3]["spec"]["priority"] = 0, 100
    docs[3]["spec"]["components"][0].pop("scaling")
    docs[3]["spec"]["components"][0]["gang"] = {"size": 6}
    for policy in ("goodput", "none"):
        events = _simulated(tmp_path, docs, policy)
        kinds = Counter(e["kind"] for e in events)
        if policy == "none":
            assert kinds["preempted"] == 16 and not kinds["resized"], kinds
            continue
        resized = [(e["t"], e["from"], e["to"], e["why"]) for e in events if e["kind"] == "resized"]
        assert resized[0] == (300.0, 16, 10, "priority: room for j1/train/0"), resized
        assert resized[1][1:3] == (10, 16) and kinds["preempted"] == 0, (resized, kinds)
        stopped = [e["task"] for e in events if e["kind"] == "resizing" and e["t"] == 300.0]
        assert stopped == [f"j0/train/{i}" for i in range(10, 16)]  # the last six; the others did not move
        moved = [e for e in events if e["kind"] == "placed" and e["t"] == 300.0 and e["task"].startswith("j0/")]
        first = {e["task"]: e["node"] for e in events if e["kind"] == "placed" and e["t"] == 0.0}
        assert all(first[e["task"]] == e["node"] for e in moved) and len(moved) == 10
        ends = {e["task"].split("/")[0]: e["t"] for e in events if e["kind"] == "finished"}
        assert ends["j1"] == pytest.approx(300 + 6 * 3600 / 6)


def test_a_real_executor_that_cannot_regroup_a_gang_keeps_its_width_and_the_user_is_told(tmp_path, caplog):
    from suanli.executors.local import LocalExecutor

    class Fixed(LocalExecutor):  # (as the agents' executor: no gang state shared between members)
        regroups = False

    example = Path(__file__).resolve().parents[1] / "examples" / "elastic.yaml"
    for kind, on in ((LocalExecutor, True), (Fixed, False)):
        caplog.clear()
        with caplog.at_level("WARNING"):
            sim = Simulation(load_world([example]), executor=lambda a: kind(a, tmp_path / kind.__name__))
        try:
            assert sim.shard.resizer.on is on
            assert ("does not restart a gang at another width" in caplog.text) is not on
        finally:
            sim.executor.close()


def test_a_growth_that_places_members_on_other_nodes_waits_for_the_gangs_state_over_the_path(tmp_path):
    """The grow-shrink-grow case with a 40 GiB state: each growth's restart is
    its resizeCost and the state's time from rank 0's node to the farthest
    new member (within the site: its fabric's bandwidth); a shrink moves none."""
    from suanli.scheduling.scores import INTRA_SITE_MBPS

    docs = _docs([(0, 2, 8, 16, 40, 0, 30), (0, 1, 8, 8, 4, 600, 0)], 1, 4, 1, "goodput")
    docs[2]["spec"]["components"][0]["state"] = {"kind": "stateful", "size": "40Gi"}
    events = _simulated_docs(docs, tmp_path / "w.yaml")
    moved = 40 * 2**30 * 8 / (INTRA_SITE_MBPS * 1e6)
    resized = [(e["t"], e["from"], e["to"], e.get("state_s")) for e in events if e["kind"] == "resized"]
    assert [(t, a, b) for t, a, b, _ in resized] == [(60.0, 8, 16), (600.0, 16, 8), (2820.0, 8, 16)]
    assert [s for *_, s in resized] == [pytest.approx(moved, rel=1e-3), None, pytest.approx(moved, rel=1e-3)]
    left = 40 * 3600 - 60 * 6.5 - (540 - 30 - resized[0][3]) * 11 - (2220 - 30) * 6.5
    end = {e["t"] for e in events if e["kind"] == "finished" and e["task"].startswith("j0/")}
    assert len(end) == 1 and end.pop() == pytest.approx(2820 + 30 + resized[2][3] + left / 11)


def test_an_explicit_vcs_elastic_hosts_follow_its_gangs_width(tmp_path):
    """A VC of whole-node hosts (1 to 4, InfiniBand) and a gang of 4 that may
    run with 16: under goodput its hosts grow by three at the first turn and
    the gang runs at 16 on them; when it ends they go after scaleDownAfter,
    down to the group's min. With elastic: none neither happens."""
    docs = _docs([(0, 2, 4, 16, 40, 0, 30)], 1, 4, 1, "goodput")
    docs.insert(2, {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": {"name": "pool", "tenant": "t0"},
                    "spec": {"autoscale": {"scaleDownAfter": "120s"},
                             "hostGroups": [{"name": "gpus", "min": 1, "max": 4, "resources": "whole",
                                             "coupling": "ib"}]}})
    docs[3]["spec"]["virtualCluster"] = "pool"
    for policy, grown in (("goodput", 3), ("none", 0)):
        events = _simulated(tmp_path, docs, policy)
        added = [e["t"] for e in events if e["kind"] == "hostAdded"]
        assert added == [0.0] + [60.0] * grown
        resized = [(e["t"], e["from"], e["to"]) for e in events if e["kind"] == "resized"]
        assert resized == ([(60.0, 4, 16)] if grown else [])
        end = max(e["t"] for e in events if e["kind"] == "finished")
        removed = [e for e in events if e["kind"] == "hostRemoved"]
        assert [e["t"] for e in removed] == [end + 120] * grown and all("idle" in e["reason"] for e in removed)
        assert sum(1 for e in events if e["kind"] == "finished") == 4 + 12 * (grown > 0)


def _cpu_pod(nodes: int) -> str:
    """A fleet of ``nodes`` nodes of 16 cores and tenant ``t``, as YAML."""
    return f"""\
apiVersion: suanli/v1
kind: Fleet
metadata: {{name: f}}
spec:
  sites:
    - {{name: dc, tier: cloud, nodeGroups: [{{name: g, count: {nodes}, arch: x86_64, cpu: 16, memory: 64Gi}}]}}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {{name: t}}
spec: {{}}
"""


def _render(tmp_path: Path, nodes: int, decompose: str, extra: str = "", policy: str = "none") -> list[dict]:
    path = tmp_path / "render.yaml"
    path.write_text(f"""\
{_cpu_pod(nodes)}---
apiVersion: suanli/v1
kind: Application
metadata: {{name: render, tenant: t}}
spec:
  components:
    - {{name: frames, lifetime: job, resources: {{cpu: 4, memory: 8Gi}}, work: 16h, decompose: {decompose}}}
{extra}---
apiVersion: suanli/v1
kind: Scenario
metadata: {{name: s}}
spec:
  policy: {{elastic: {policy}}}
  arrivals: [{{app: other, at: 0}}, {{app: render, at: 0}}]
""")
    sim = Simulation(load_world([path]), seed=1)
    sim.run()
    return sim.events.take()


OTHER = """---
apiVersion: suanli/v1
kind: Application
metadata: {name: other, tenant: t}
spec:
  priority: 10
  components: [{name: c, lifetime: job, resources: {cpu: 4, memory: 8Gi}, work: 30m}]
"""


@pytest.mark.parametrize("nodes, slots", [(2, 7), (1, 3), (5, 16)])
def test_a_job_in_parts_runs_as_many_at_a_time_as_fit_and_takes_waves(tmp_path, nodes, slots):
    """Sixteen one-hour parts of a 16-hour job, nodes of four slots, one slot
    held by another job first: on 2 nodes 7 at a time, three waves; on one
    node 3 at a time (the least is 2), six waves; on 5 nodes all at once."""
    events = _render(tmp_path, nodes, "{parts: 16, minParallel: 2}", OTHER)
    started = [e for e in events if e["kind"] == "started" and e["task"].startswith("render/")]
    assert len(started) == slots
    waves = -(-16 // slots)
    ends = {e["t"] for e in events if e["kind"] == "finished" and e["task"].startswith("render/")}
    assert len(ends) == 1 and ends.pop() == pytest.approx(waves * 3600.0)
    assert sum(1 for e in events if e["kind"] == "finished" and e["task"].startswith("render/")) == 16
    if slots < 16:
        omitted = [e for e in events if e["kind"] == "omitted"]
        assert omitted and omitted[0]["reason"] == f"running {slots} of 16 parts at a time", omitted[0]


def test_parts_grow_into_room_that_frees_under_an_elastic_policy(tmp_path):
    """One node: another job holds it for half an hour, so the parts start at 3
    (of 4 slots); under goodput they go to 4 at a turn after it ends."""
    events = _render(tmp_path, 1, "{parts: 16, minParallel: 2}", OTHER, policy="goodput")
    resized = [(e["from"], e["to"]) for e in events if e["kind"] == "resized"]
    assert resized and resized[-1][1] == 4, resized


@pytest.mark.parametrize("component, field, words", [
    ("{name: frames, lifetime: service, resources: {cpu: 1}, decompose: {parts: 4}}", "decompose", "service"),
    ("{name: frames, lifetime: job, gang: {size: 2}, resources: {cpu: 1}, work: 1h, decompose: {parts: 4}}",
     "decompose", "no gang"),
    ("{name: frames, lifetime: job, resources: {cpu: 1}, duration: 1h, decompose: {parts: 4}}", "decompose",
     "not a duration"),
    ("{name: frames, lifetime: job, resources: {cpu: 1}, work: 1h, decompose: {parts: 4, minParallel: 5}}",
     "decompose.minParallel", "above parts 4"),
    ("{name: frames, lifetime: job, resources: {cpu: 1}, work: 1h, decompose: {parts: 1}}",
     "decompose.parts", ""),
])
def test_a_bad_decompose_is_one_clear_problem(tmp_path, component, field, words):
    path = tmp_path / "w.yaml"
    path.write_text(f"""\
{_cpu_pod(1)}---
apiVersion: suanli/v1
kind: Application
metadata: {{name: a, tenant: t}}
spec:
  components: [{component}]
""")
    r = cli("validate", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"spec.components[0].{field}" in r.stderr and words in r.stderr, r.stderr
