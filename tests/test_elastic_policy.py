"""The elastic policies' widths (``scheduling/elastic.py``) and Pollux's
workloads replayed with them (``suanli experiment pollux``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from incli import cli

from suanli.scheduling.elastic import Jobs, decide

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pollux-osdi21"


@st.composite
def worlds(draw):
    n = draw(st.integers(1, 30))
    tenants = draw(st.integers(1, 4))
    cols = 17
    least = np.array(draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)))
    most = np.maximum(least, np.array(draw(st.lists(st.integers(1, 16), min_size=n, max_size=n))))
    units = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 4.0]), min_size=n, max_size=n)))
    # concave-ish speeds with noise (a measured curve need not be concave)
    alpha = np.array(draw(st.lists(st.floats(0.3, 1.0), min_size=n, max_size=n)))
    w = np.arange(cols)
    speed = np.where(w[None, :] > 0, w[None, :] ** alpha[:, None], 0.0)
    current = np.array([draw(st.integers(0, int(m))) for m in most])
    current = np.where((current > 0) & (current < least), least, current)
    room = float(draw(st.integers(4, 120)))
    # the running widths fit the room (they run now)
    while (current * units).sum() > room:
        k = int(np.argmax(current * units))
        current[k] = 0
    jobs = Jobs(current=current, least=least, most=most, units=units, speed=speed,
                left=np.array(draw(st.lists(st.floats(1.0, 1e5), min_size=n, max_size=n))),
                waited=np.array(draw(st.lists(st.floats(0.0, 1e5), min_size=n, max_size=n))),
                alone=np.array(draw(st.lists(st.floats(1.0, 1e4), min_size=n, max_size=n))),
                restart=np.full(n, 30.0), order=np.arange(n, dtype=float),
                tenant=np.array(draw(st.lists(st.integers(0, tenants - 1), min_size=n, max_size=n))),
                preemptible=np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))))
    quotas = np.array(draw(st.lists(st.floats(2.0, 20.0), min_size=tenants, max_size=tenants)))
    return jobs, room, quotas


seen = {"bound": 0, "shrunk": 0, "grown": 0, "quota": 0}


@settings(max_examples=150, deadline=None)
@given(worlds(), st.sampled_from(["none", "greedy", "goodput"]), st.booleans())
def test_widths_keep_the_bounds_the_room_and_the_quotas(world, policy, with_quotas):
    jobs, room, quotas = world
    q = quotas if with_quotas and policy == "goodput" else None
    width = decide(policy, jobs, room, quotas=q)
    assert width.shape == jobs.current.shape
    assert ((width == 0) | ((width >= jobs.least) & (width <= jobs.most))).all()
    assert (width * jobs.units).sum() <= room + 1e-9
    # a running job that may not be preempted keeps at least its least width
    stuck = (jobs.current > 0) & ~jobs.preemptible
    if policy == "goodput":
        assert (width[stuck] >= jobs.least[stuck]).all()
    if policy == "none":
        running = jobs.current > 0
        assert (width[running] == jobs.current[running]).all()
    if q is not None:
        _within_quotas(jobs, width, q)
    want = (jobs.most * jobs.units).sum()
    seen["bound"] += want > room and (width * jobs.units).sum() > room - 4.0
    seen["shrunk"] += bool(((width > 0) & (width < jobs.current)).any())
    seen["grown"] += bool((width > jobs.current).any())


def _within_quotas(jobs: Jobs, width: np.ndarray, q: np.ndarray) -> None:
    """No tenant holds more than its quota (or what its running jobs that may
    not stop hold at their least); counts the cases where a quota binds."""
    stuck = (jobs.current > 0) & ~jobs.preemptible
    used = np.bincount(jobs.tenant, weights=width * jobs.units, minlength=len(q))
    floor = np.bincount(jobs.tenant, weights=np.where(stuck, jobs.least * jobs.units, 0), minlength=len(q))
    assert (used <= np.maximum(q, floor) + 1e-9).all()
    seen["quota"] += bool((used > q - 4.0).any())  # within a member of its quota: it binds


@settings(max_examples=60, deadline=None)
@given(worlds())
def test_goodput_keeps_each_tenant_within_its_quota(world):
    jobs, room, quotas = world
    _within_quotas(jobs, decide("goodput", jobs, room, quotas=quotas), quotas)


def test_the_width_cases_are_not_vacuous():
    assert seen["bound"] > 20 and seen["shrunk"] > 5 and seen["grown"] > 20 and seen["quota"] > 10, seen


def test_goodput_gives_the_room_to_the_work_nearest_its_end():
    speed = np.tile(np.arange(9, dtype=float), (2, 1))  # linear speed-up to 8
    jobs = Jobs(current=np.zeros(2, dtype=np.int64), least=np.ones(2, dtype=np.int64), most=np.full(2, 8),
                units=np.ones(2), speed=speed, left=np.array([100.0, 10_000.0]), waited=np.zeros(2),
                alone=np.array([12.5, 1250.0]), restart=np.zeros(2), order=np.arange(2.0),
                tenant=np.zeros(2, dtype=np.int64), preemptible=np.ones(2, dtype=bool))
    assert list(decide("goodput", jobs, 8.0)) == [8, 0]
    # past its bound on slowdown, the long job is served first
    jobs.waited = np.array([0.0, 1250.0 * 5])
    assert list(decide("goodput", jobs, 8.0)) == [0, 8]


def test_tenants_share_the_room_by_weight_before_their_jobs_do():
    n = 4
    speed = np.tile(np.arange(17, dtype=float), (n, 1))
    jobs = Jobs(current=np.zeros(n, dtype=np.int64), least=np.ones(n, dtype=np.int64), most=np.full(n, 16),
                units=np.ones(n), speed=speed, left=np.array([10.0, 20.0, 30.0, 1e6]), waited=np.zeros(n),
                alone=np.full(n, 1.0), restart=np.zeros(n), order=np.arange(n, dtype=float),
                tenant=np.array([0, 0, 0, 1]), preemptible=np.ones(n, dtype=bool))
    width = decide("goodput", jobs, 16.0, shares=np.array([1.0, 3.0]))
    assert width[3] == 12 and width[:3].sum() == 4  # tenant 1 weighs three times tenant 0


@pytest.mark.skipif(not DATA.is_dir(), reason="no Pollux data")
@pytest.mark.parametrize("k", [2, 6])
def test_pollux_workloads_under_goodput_beat_the_artifacts_pollux_and_none(tmp_path, k):
    r = cli("experiment", "pollux", "--workload", DATA / "workloads" / f"workload-{k}.csv", "--traces",
            DATA / "traces", "--policy", "none,goodput", "--out", tmp_path, "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"none", "goodput"}  # keyed by policy, each with its figures
    assert set(out["goodput"]["artifact"]) == {"pollux", "optimus", "tiresias"}
    good, none, pollux = out["goodput"]["avg_jct_s"], out["none"]["avg_jct_s"], out["none"]["artifact"]["pollux"]
    assert out["goodput"]["jobs"] == 160 and out["goodput"]["resizes"] > 0 and out["none"]["resizes"] == 0
    assert good <= pollux and good <= 0.7 * none, (good, pollux, none)
    assert json.loads((tmp_path / "result.json").read_text())["goodput"]["avg_jct_s"] == good
    assert len((tmp_path / "jcts.csv").read_text().splitlines()) == 161


def test_a_bad_experiment_is_one_clear_message(tmp_path):
    r = cli("experiment", "pollux", "--workload", tmp_path / "none.csv", "--traces", tmp_path, "--policy", "fast",
            "--out", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--policy: unknown" in r.stderr and "--workload: file" in r.stderr
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\nx-0,zero,cifar10,1,128\n")
    r = cli("experiment", "pollux", "--workload", bad, "--traces", tmp_path, "--out", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "w.csv:2" in r.stderr, r.stderr
