"""Speed-up models per component: how fast a job's work goes on an
allocation, the work left integrated over time, and the spec's checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incli import cli

from suanli.model import speedup
from suanli.model.speedup import Amdahl, Formula, Measured, Table

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pollux-osdi21"
FLEET = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
    - name: dc
      tier: cloud
      nodeGroups:
        - {name: g, count: 4, arch: x86_64, cpu: 32, memory: 256Gi, fabrics: {ib: ib-a},
           accelerators: [{kind: gpu, model: A100, count: 4}]}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t}
spec: {}
"""


def _job(scaling: str, gang: str = "{size: 8}", work: str = "work: 8h") -> str:
    return f"""---
apiVersion: suanli/v1
kind: Application
metadata: {{name: a, tenant: t}}
spec:
  components:
    - name: train
      lifetime: job
      gang: {gang}
      coupling: ib
      resources: {{cpu: 4, memory: 16Gi, accelerators: [{{kind: gpu, count: 1}}]}}
      {work}
      scaling: {scaling}
---
apiVersion: suanli/v1
kind: Scenario
metadata: {{name: s}}
spec:
  arrivals: [{{app: a, at: 0}}]
"""


def test_a_table_is_read_linearly_proportionally_below_and_flat_beyond():
    t = Table(((2, 1.8), (4, 3.2), (8, 5.0)))
    assert t.speed(1) == pytest.approx(0.9)
    assert t.speed(3) == pytest.approx(2.5)
    assert t.speed(6) == pytest.approx(4.1)
    assert t.speed(16) == pytest.approx(5.0)
    assert t.speed(0) == 0.0


def test_amdahl_pays_its_fabric_between_nodes_and_nothing_alone():
    m = Amdahl(0.05, 0.1, (("coherent", 0.001), ("ethernet", 0.04), ("ib", 0.004)))
    assert m.speed(1) == pytest.approx(1.0)
    one_node = m.speed(4, 1)
    ib = m.speed(8, 2, "ib")
    eth = m.speed(8, 2, "ethernet")
    assert one_node == pytest.approx(0.1 / (0.1 * (0.05 + 0.95 / 4) + 0.001))
    assert ib == pytest.approx(0.1 / (0.1 * (0.05 + 0.95 / 8) + 0.004 * 2))
    assert eth < ib  # the slower fabric costs more a step
    assert m.speed(8, 4, "ib") < ib  # more nodes spanned, more to synchronise
    assert m.speed(8, 2, "roce") == pytest.approx(eth)  # a fabric not given: the ethernet figure


MODELS = [Formula(0.9), Table(((1, 1.0), (2, 1.9), (4, 3.5), (8, 6.1))),
          Amdahl(0.1, 0.2, (("coherent", 0.002), ("ib", 0.01)))]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(MODELS))), st.floats(1.0, 1e6), st.lists(st.tuples(st.integers(1, 8),
       st.floats(1.0, 5e4)), min_size=1, max_size=8))
def test_work_is_conserved_across_allocations(which, work, stretches):
    """Work done plus work left equals the work declared, whatever the widths
    it ran at: each stretch does speed x seconds, until nothing is left."""
    model = MODELS[which]
    left, done = work, 0.0
    for members, seconds in stretches:
        before = left
        left = speedup.advance(model, left, seconds, members, nodes=math.ceil(members / 4), fabric="ib")
        done += min(before, seconds * model.speed(members, math.ceil(members / 4), "ib"))
        assert 0.0 <= left <= before
    assert done + left == pytest.approx(work, rel=1e-9)


@pytest.mark.skipif(not DATA.is_dir(), reason="no Pollux data")
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["cifar10", "bert", "deepspeech2"]), st.lists(st.tuples(st.integers(1, 8),
       st.floats(10.0, 3000.0)), min_size=1, max_size=6))
def test_a_measured_profiles_work_is_conserved_across_allocations(app, stretches):
    model = Measured(str(DATA / "traces" / app))
    total = model.work()
    left = total
    for members, seconds in stretches:
        placement = speedup._packed(members, math.ceil(members / 4))
        t = speedup.time_to_finish(model, left, members, placement=placement)
        after = speedup.advance(model, left, seconds, members, placement=placement)
        assert after <= left
        if seconds >= t:
            assert after == pytest.approx(0.0, abs=1e-6)
        # splitting a stretch in two changes nothing
        half = speedup.advance(model, speedup.advance(model, left, seconds / 2, members, placement=placement),
                               seconds / 2, members, placement=placement)
        assert half == pytest.approx(after, rel=1e-7, abs=1e-6)
        left = after
    assert 0.0 <= left <= total


def test_a_simulated_job_runs_at_its_tables_speed(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text(FLEET + _job("{table: {1: 1, 2: 1.8, 4: 3.2, 8: 5.0}}"))
    out = tmp_path / "out"
    r = cli("simulate", str(f), "--out", str(out))
    assert r.returncode == 0, r.stderr
    ends = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    finished = {e["t"] for e in ends if e["kind"] == "finished"}
    assert finished == {8 * 3600 / 5.0}  # 8 members: speed 5.0


def test_amdahl_in_a_simulation_reads_how_many_nodes_the_gang_spans(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text(FLEET + _job("{serialFraction: 0.0, communication: {step: 100ms, perStep: {coherent: 0ms, "
                              "ib: 10ms}}}"))
    out = tmp_path / "out"
    r = cli("simulate", str(f), "--out", str(out))
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    nodes = {e["node"] for e in events if e["kind"] == "placed"}
    assert len(nodes) == 2  # 8 members, 4 GPUs a node
    step = 0.1 / 8 + 0.010 * (1 + math.log2(2))
    ends = {e["t"] for e in events if e["kind"] == "finished"}
    assert len(ends) == 1 and ends.pop() == pytest.approx(8 * 3600 / (0.1 / step))


@pytest.mark.skipif(not DATA.is_dir(), reason="no Pollux data")
def test_a_profiled_job_does_its_profiles_epochs(tmp_path):
    rel = DATA
    f = tmp_path / "w.yaml"
    f.write_text(FLEET + _job(f"{{profile: {rel / 'traces' / 'cifar10'}, batchSize: 512}}", gang="{size: 4}",
                              work=""))
    out = tmp_path / "out"
    r = cli("simulate", str(f), "--out", str(out))
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    ends = {e["t"] for e in events if e["kind"] == "finished"}
    model = Measured(str(DATA / "traces" / "cifar10"), 512)
    assert len(ends) == 1 and ends.pop() == pytest.approx(model.profile.time_to_finish((4,), 0.0, 512))


@pytest.mark.parametrize("scaling, gang, work, field, words", [
    ("{table: {1: 1, 2: 1.9}, efficiency: 0.9}", "{size: 4}", "work: 1h", "scaling.table", "one speed-up model"),
    ("{table: {0: 1}}", "{size: 4}", "work: 1h", "scaling.table", "number of members"),
    ("{table: {2: -1}}", "{size: 4}", "work: 1h", "scaling.table", "above 0"),
    ("{profile: nowhere}", "{size: 4}", "", "scaling.profile", "no profile at 'nowhere'"),
    ("{serialFraction: 1.5}", "{size: 4}", "work: 1h", "scaling.serialFraction", ""),
    ("{communication: {step: 0s, perStep: {ib: 1ms}}}", "{size: 4}", "work: 1h", "scaling.communication.step",
     "some time"),
    ("{batchSize: 64}", "{size: 4}", "work: 1h", "scaling.batchSize", "give profile too"),
    ("{efficiency: 0.9}", "{size: 4, maxSize: 2}", "work: 1h", "gang.maxSize", "below size 4"),
])
def test_a_bad_speed_up_is_one_clear_problem(tmp_path, scaling, gang, work, field, words):
    f = tmp_path / "w.yaml"
    f.write_text(FLEET + _job(scaling, gang=gang, work=work))
    r = cli("validate", str(f))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert field in r.stderr and words in r.stderr, r.stderr


@pytest.mark.skipif(not DATA.is_dir(), reason="no Pollux data")
def test_a_profile_is_found_beside_its_document_and_gives_the_work(tmp_path):
    traces = tmp_path / "profiles"
    traces.mkdir()
    (traces / "cifar10").symlink_to(DATA / "traces" / "cifar10")
    f = tmp_path / "w.yaml"
    f.write_text(FLEET + _job("{profile: profiles/cifar10}", gang="{size: 4}", work="work: 2h"))
    r = cli("validate", str(f), cwd=Path("/"))
    assert r.returncode == 2 and "spec.components[0].work" in r.stderr and "profile's work" in r.stderr, r.stderr
    f.write_text(FLEET + _job("{profile: profiles/cifar10}", gang="{size: 4}", work=""))
    r = cli("validate", str(f), cwd=Path("/"))
    assert r.returncode == 0, r.stderr
