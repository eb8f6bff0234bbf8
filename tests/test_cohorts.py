"""Cohorts: tenants lend one another the quota they do not use, within
borrowing and lending limits, and get it back by reclaiming borrowed work."""

from __future__ import annotations

import json
from pathlib import Path
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import app, component, gpu, node_group, scenario, site, tenant
from test_populations import run_cli
from suanli.phrases import why_json
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

GPU_NODES = [site("cloud-a", groups=[node_group("gpu", count=2, cpu=64, memory="512Gi",
                                                accelerators=[gpu(4, shareable=False)])])]


def trials(n: int, name="sweep", who="speech", hours="2h", priority=0):
    return app(name, who, [component("trial", "job", cpu=4, memory="16Gi", replicas=n, duration=hours,
                                     accelerators=[{"kind": "gpu", "count": 1}])], priority=priority)


def gang(n: int, name="train", who="vision", priority=0):
    return app(name, who, [component("worker", "job", cpu=8, memory="64Gi", gang={"size": n}, duration="1h",
                                     accelerators=[{"kind": "gpu", "count": 1}])], priority=priority)


def two(vision: dict | None = None, speech: dict | None = None):
    return [tenant("vision", quota={"gpu": 4}, cohort="research", **(vision or {})),
            tenant("speech", quota={"gpu": 4}, cohort="research", **(speech or {}))]


def simulate(tmp_path, tenants, apps, arrivals, until="4h", **kw) -> Simulation:
    path = scenario(tmp_path, sites=GPU_NODES, tenants=tenants, apps=apps, arrivals=arrivals, until=until, **kw)
    sim = Simulation(load_world([path]), seed=1)
    sim.run()
    return sim


def of(sim, kind: str, **match) -> list[dict]:
    return [e for e in sim.events if e.get("kind") == kind and all(e.get(k) == v for k, v in match.items())]


def test_a_tenant_borrows_and_its_owner_reclaims_with_reasons(tmp_path):
    """speech runs 8 one-GPU trials on a quota of 4: the last 4 on quota
    borrowed from vision. vision's 3-GPU gang comes at 30 min and takes 3
    of them back; they wait, and run again when the gang is done."""
    sim = simulate(tmp_path, two(), [trials(8), gang(3)], [{"at": 0, "app": "sweep"}, {"at": "30m", "app": "train"}])
    placed = of(sim, "placed", t=0.0)
    assert len(placed) == 8
    borrowed = [e for e in placed if e.get("borrowed_from")]
    assert [e["task"] for e in borrowed] == [f"sweep/trial/{i}" for i in range(4, 8)]
    assert all(e["borrowed_from"] == ["vision"] and e["reason"] == "running on quota borrowed from tenant vision"
               for e in borrowed)
    evicted = of(sim, "preempted")
    assert len(evicted) == 3 and {e["t"] for e in evicted} == {1800.0}
    assert all(e["cause"] == "cohort reclaim" and e["reason"] == "reclaimed by its owner vision" for e in evicted)
    assert {e["task"] for e in evicted} <= {e["task"] for e in borrowed}  # borrowed work goes, not speech's own
    assert len(of(sim, "placed", t=1800.0)) == 3  # the gang, at once
    again = [e for e in of(sim, "placed") if e["t"] > 1800 and e["task"].startswith("sweep")]
    assert len(again) == 3 and all(e["t"] == 5400.0 for e in again)  # when the gang has finished
    assert Counter(e["cause"] for e in evicted) == {"cohort reclaim": 3}


def test_reclaim_never_leaves_the_owner_waiting_on_what_it_lent(tmp_path):
    sim = simulate(tmp_path, two(vision={"reclaimWithinCohort": "never"}), [trials(8), gang(3)],
                   [{"at": 0, "app": "sweep"}, {"at": "30m", "app": "train"}], until="1h")
    assert not of(sim, "preempted")
    rec = sim.view.tasks["train/worker/0"]
    assert rec.status == "pending"
    why = why_json(rec.reasons)[0]
    assert why["reason"] == "tenant vision quota for gpu: 3 of it lent in cohort research, not reclaimed", why


def test_lower_priority_reclaims_only_lower_standing_work(tmp_path):
    """With ``lowerPriority``, borrowed work of the same standing stays; of a
    lower one it goes."""
    vision = {"reclaimWithinCohort": "lowerPriority", "maxPriority": 100}
    same = simulate(tmp_path, two(vision=vision), [trials(8), gang(3)],
                    [{"at": 0, "app": "sweep"}, {"at": "30m", "app": "train"}], until="1h")
    assert not of(same, "preempted")
    higher = simulate(tmp_path, two(vision=vision), [trials(8), gang(3, priority=50)],
                      [{"at": 0, "app": "sweep"}, {"at": "30m", "app": "train"}], until="1h")
    assert len(of(higher, "preempted", cause="cohort reclaim")) == 3


@pytest.mark.parametrize("limits, runs", [
    ({"speech": {"borrowingLimit": {"gpu": 2}}}, 6),  # at most 2 above its quota
    ({"vision": {"lendingLimit": {"gpu": 1}}}, 5),  # vision lends 1 of its 4
    ({"speech": {"borrowingLimit": {"gpu": 0}}}, 4),  # borrows nothing
    ({}, 8),  # all of vision's unused quota
])
def test_borrowing_and_lending_limits_bound_what_runs(tmp_path, limits, runs):
    sim = simulate(tmp_path, two(limits.get("vision"), limits.get("speech")), [trials(10)],
                   [{"at": 0, "app": "sweep"}], until="1h")
    assert len(of(sim, "placed")) == runs
    if runs < 8:  # (8: the fleet is full)
        why = why_json(sim.view.tasks[f"sweep/trial/{runs}"].reasons)[0]
        assert why["reason"] == "tenant speech quota for gpu, with what cohort research lends: 1 more needed", why


def test_validate_cli_and_result_speak_of_the_cohort(tmp_path):
    path = scenario(tmp_path, sites=GPU_NODES, tenants=two(), apps=[trials(8)], arrivals=[{"at": 0, "app": "sweep"}],
                    until="1h")
    out = tmp_path / "out"
    code, _, err = run_cli("simulate", path, "--out", out)
    assert code == 0, err
    result = json.loads((out / "result.json").read_text())
    assert result["tenant_cohorts"] == {"vision": {"cohort": "research", "borrowed": {}, "lent": {"gpu_milli": 4000}},
                                        "speech": {"cohort": "research", "borrowed": {"gpu_milli": 4000}, "lent": {}}}
    code, out_text, err = run_cli("schedule", path, "-o", "json")
    assert code == 0, err
    tenants = json.loads(out_text)["metrics"]["tenants"]
    assert tenants["speech"]["borrowed"]["gpu_milli"] == 4000 and tenants["vision"]["lent"]["gpu_milli"] == 4000


# ---------------------------------------------------------------- the property


@st.composite
def cohort_worlds(draw):
    """A few tenants, in one or two cohorts or none, with random quotas and
    limits, on a small GPU fleet; jobs and gangs arriving over an hour."""
    n = draw(st.integers(2, 4))
    tenants, apps, arrivals = [], [], []
    for i in range(n):
        spec: dict = {"quota": {"gpu": draw(st.integers(0, 6)), "cpu": draw(st.integers(8, 96))}}
        cohort = draw(st.sampled_from(["c1", "c1", "c2", None]))
        if cohort:
            spec["cohort"] = cohort
            if draw(st.booleans()):
                spec["borrowingLimit"] = {"gpu": draw(st.integers(0, 4))}
            if draw(st.booleans()):
                spec["lendingLimit"] = {"gpu": draw(st.integers(0, 4))}
            spec["reclaimWithinCohort"] = draw(st.sampled_from(["any", "any", "lowerPriority", "never"]))
            spec["maxPriority"] = 100
        tenants.append(tenant(f"t{i}", **spec))
        for j in range(draw(st.integers(1, 3))):
            name = f"a{i}x{j}"
            size = draw(st.integers(1, 6))
            shape = {"gang": {"size": min(size, 3)}} if draw(st.booleans()) else {"replicas": size}
            apps.append(app(name, f"t{i}", [component("w", "job", cpu=draw(st.integers(1, 8)), memory="1Gi",
                                                      duration=f"{draw(st.integers(20, 120))}m",
                                                      accelerators=[{"kind": "gpu", "count": 1}], **shape)],
                            priority=draw(st.sampled_from([0, 50]))))
            arrivals.append({"at": f"{draw(st.integers(0, 60))}m", "app": name})
    return tenants, apps, arrivals


def test_no_tenant_holds_more_than_its_quota_and_borrowing_and_no_lender_lends_beyond_its_limit(tmp_path):
    """After every instant of random cohort worlds: each member within its
    quota plus borrowing limit, each cohort drawing no more than its members
    lend, and what each lends (attributed) within its lending limit and its
    unused quota; a tenant in no cohort within its quota. Not vacuous:
    tenants borrow, owners reclaim, and quotas bind."""
    seen: Counter = Counter()

    def check(sim):
        state = sim.state
        cohorts = state.cohorts
        assert cohorts.holds(state.used) == []
        lone = cohorts.of < 0
        assert (state.used[lone] <= state.quota_table[lone]).all()
        lent = cohorts.lent(state.used)
        assert (lent <= cohorts.lend).all()
        assert (lent <= np.maximum(0, state.quota_table - state.used)).all()  # only what it does not use
        borrowed = cohorts.borrowed(state.used)
        for rows in cohorts.members.values():  # what is borrowed is what is lent
            assert (borrowed[rows].sum(axis=0) <= lent[rows].sum(axis=0)).all()
        seen["borrowing"] += int(borrowed.any())
        seen["instants"] += 1

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(cohort_worlds())
    def each(world):
        tenants, apps, arrivals = world
        sites = [site("s", groups=[node_group("g", count=3, cpu=32, memory="256Gi", accelerators=[gpu(4)])])]
        path = scenario(tmp_path, sites=sites, tenants=tenants, apps=apps, arrivals=arrivals, until="2h")
        sim = Simulation(load_world([path]), seed=1, on_instant=lambda t: check(sim))
        sim.run()
        assert not [e for e in sim.events if e.get("kind") == "failed"]  # (a refused unit, such as by a loop of evictions)
        evictions = [e for e in sim.events if e.get("kind") == "preempted"]
        assert len(evictions) <= 2 * len(sim.view.tasks), "evictions that undo one another"
        cohort_of = {t["metadata"]["name"]: t["spec"].get("cohort") for t in tenants}
        for e in evictions:  # between members of one cohort, only reclaim evicts
            if e["cause"] == "priority":
                mine, theirs = sim.view.tasks[e["by"]].tenant, sim.view.tasks[e["task"]].tenant
                assert mine == theirs or cohort_of[mine] is None or cohort_of[mine] != cohort_of[theirs], e
                seen["priority"] += 1
        seen["reclaims"] += sum(1 for e in evictions if e.get("cause") == "cohort reclaim")
        seen["quota bound"] += sum(1 for r in sim.view.tasks.values()
                                   for w in (r.reasons or ()) if w.code == "quota")
        seen["worlds"] += 1

    each()
    assert seen["worlds"] >= 30 and seen["borrowing"] > 0 and seen["reclaims"] > 0 and seen["quota bound"] > 0 \
        and seen["priority"] > 0, seen


def test_two_cohorts_whose_quotas_the_fleet_cannot_hold_evict_no_ring(tmp_path):
    """12 GPUs, quotas of 13 in two cohorts. Work that would run on borrowed
    quota evicted another cohort's work by priority, whose owner reclaimed
    what it lent, and round again: 78 evictions in one instant, each undoing
    the one before, until the pass limit stopped them. A unit that borrows
    evicts no other tenant's work by priority: it waits for room."""
    gpus = [{"kind": "gpu", "count": 1}]

    def member(name, cohort, quota):
        return tenant(name, quota={"gpu": quota, "cpu": 8}, cohort=cohort, reclaimWithinCohort="any", maxPriority=100)

    def job(name, owner, replicas, priority):
        return app(name, owner, [component("w", "job", cpu=1, memory="1Gi", duration="20m", accelerators=gpus,
                                           replicas=replicas)], priority=priority)

    tenants = [member("t0", "c1", 4), member("t1", "c1", 4), member("t2", "c2", 5), member("t3", "c2", 0)]
    apps = [job("a0x0", "t0", 1, 0), job("a0x1", "t0", 1, 0), job("a1x0", "t1", 6, 50), job("a2x0", "t2", 3, 0),
            job("a2x1", "t2", 1, 0), job("a3x0", "t3", 1, 50)]
    sites = [site("s", groups=[node_group("g", count=3, cpu=32, memory="256Gi", accelerators=[gpu(4)])])]
    path = scenario(tmp_path, sites=sites, tenants=tenants, apps=apps,
                    arrivals=[{"at": "0m", "app": a["metadata"]["name"]} for a in apps], until="2h")
    sim = Simulation(load_world([path]), seed=1)
    sim.run()
    evictions = [e for e in sim.events if e.get("kind") == "preempted"]
    assert 0 < len(evictions) <= 4, evictions  # owners still reclaim what they lent
    assert {e["cause"] for e in evictions} <= {"cohort reclaim", "fair share"}, evictions
    assert all(e["t"] == 0 for e in evictions)
    assert sum(e["kind"] == "finished" for e in sim.events) == 13  # every task ran, one after another


def test_the_example_borrows_and_reclaims(tmp_path):
    """``examples/cohorts.yaml``, as docs/scheduling.md tells it."""
    from pathlib import Path
    out = tmp_path / "run"
    code, _, err = run_cli("simulate", Path(__file__).parent.parent / "examples" / "cohorts.yaml", "--out", out)
    assert code == 0, err
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    borrowed = [e for e in events if e["kind"] == "placed" and e.get("borrowed_from") == ["vision"]]
    reclaimed = [e for e in events if e["kind"] == "preempted"]
    assert len(borrowed) == 4 + 3 and len(reclaimed) == 3  # four at first, three again after the gang
    assert all(e["cause"] == "cohort reclaim" and e["t"] == 1800.0 for e in reclaimed)


# ---------------------------------------------------------------- live


def test_a_live_server_borrows_reclaims_and_shows_it(tmp_path):
    """``suanli serve`` with the example's tenants, in no cohort at first:
    speech runs 4 of its 8 trials; the tenants join the cohort while the
    server runs and the other 4 run on vision's quota (the API says so);
    vision's gang takes three back (the evicted tasks' history names the
    owner), and the console's tenants page shows what each borrows and
    lends."""
    import httpx
    import yaml
    from pathlib import Path

    from serving import ADMIN, Server, free_port, wait
    from suanli.server.store import sqlite_url

    docs = list(yaml.safe_load_all((Path(__file__).parent.parent / "examples" / "cohorts.yaml").read_text()))
    world = tmp_path / "world.yaml"
    alone = [{**d, "spec": {"quota": d["spec"]["quota"]}} if d["kind"] == "Tenant" else d  # no cohort yet
             for d in docs if d["kind"] in ("Fleet", "Tenant")]
    world.write_text(yaml.safe_dump_all(alone))
    apps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Application"}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(sqlite_url(tmp_path / "s.db"), free_port(), log, speed=1, files=(world,))
        try:
            server.start()
            http = httpx.Client(base_url=server.url, timeout=30)
            assert http.post("/v1/applications", json=apps["sweep"], headers=admin).status_code == 201

            def tasks(app: str) -> list[dict]:
                return http.get("/v1/tasks", params={"app": app}, headers=admin).json()

            wait(lambda: sorted(x["status"] for x in tasks("sweep")) == ["pending"] * 4 + ["running"] * 4,
                 what="speech's own quota used")
            for d in docs:  # the cohort, joined while the server runs
                if d["kind"] == "Tenant":
                    r = http.put(f"/v1/tenants/{d['metadata']['name']}", json=d, headers=admin)
                    assert r.status_code in (200, 201), r.text
            tenants = {t["name"]: t for t in http.get("/v1/tenants", headers=admin).json()}
            assert tenants["speech"]["cohort"] == "research" and tenants["speech"]["borrowing_limit"] == {"gpu": 4000}

            running = wait(lambda: len(t := [x for x in tasks("sweep") if x["status"] == "running"]) == 8 and t,
                           what="eight trials running")
            borrowed = sorted(x["task"] for x in running if x["reason"] == "running on quota borrowed from tenant vision")
            assert borrowed == [f"sweep/trial/{i}" for i in range(4, 8)], running
            with httpx.Client(base_url=server.url, timeout=30) as browser:
                r = browser.post("/login", data={"token": ADMIN}, headers={"origin": server.url}, follow_redirects=False)
                assert r.status_code == 303, r.text
                page = wait(lambda: 'class="num borrowed">4<' in (t := browser.get("/tenants").text) and t,
                            what="the tenants page's borrowed figure")
                assert "cohort <b>research</b>" in page and 'class="num lent">4<' in page
            assert http.post("/v1/applications", json=apps["train"], headers=admin).status_code == 201
            wait(lambda: all(x["status"] == "running" for x in tasks("train")) and len(tasks("train")) == 3,
                 what="the gang running")
            evicted = [x for x in tasks("sweep") if x["status"] == "pending"]
            assert len(evicted) == 3, evicted
            story = http.get(f"/v1/tasks/{evicted[0]['task']}", params={"tenant": "speech"}, headers=admin).json()
            stop = [e for e in story["history"] if e.get("cause") == "cohort reclaim"]
            assert stop and stop[-1]["reason"] == "reclaimed by its owner vision", story
            assert stop[-1]["by"] == "train/worker/0" and stop[-1]["byTenant"] == "vision", story  # (an admin's view)
            token = http.post("/v1/tokens", json={"tenant": "speech", "role": "tenant-admin"}, headers=admin).json()
            mine = http.get(f"/v1/tasks/{evicted[0]['task']}", headers={"Authorization": f"Bearer {token['token']}"})
            stop = [e for e in mine.json()["history"] if e.get("cause") == "cohort reclaim"]
            assert stop[-1]["by"] == "tenant vision, reclaiming the quota it lent", mine.text
        finally:
            server.stop()


def test_the_recorded_console_shows_the_cohort_at_the_end(tmp_path):
    """A recorded run's tenants page: the cohort and its limits, and at the
    end what each member borrows and lends (a run that ends while speech
    borrows: until 1h)."""
    from test_console import simulated, viewer

    path = scenario(tmp_path, sites=GPU_NODES, tenants=two(vision={"lendingLimit": {"gpu": 3}}),
                    apps=[trials(8)], arrivals=[{"at": 0, "app": "sweep"}], until="1h")
    client = viewer(simulated(path, tmp_path / "out", seed=1))
    page = client.get("/tenants", params={"at": 3600}).text
    assert "cohort <b>research</b>" in page
    assert page.count('class="num borrowed">3<') == 1 and page.count('class="num lent">3<') == 1, page
    assert "what the cohort lends" in page  # speech's borrowing limit: none written


def test_a_reclaim_and_a_priority_preemption_do_not_undo_one_another():
    """A world the property above drew: four members of one cohort, one of
    them reclaiming `lowerPriority`; at t=1200 s cohort reclaim and priority
    preemption evicted each other's work in turn (a unit within its tenant's
    quota evicted a lender's gang, itself within its quota, for priority; the
    lender reclaimed), 180 evictions for 14 tasks, until the instant's bound
    on passes stopped them. Between members only reclaim evicts."""
    path = Path(__file__).resolve().parent / "data" / "cohort_churn.yaml"
    sim = Simulation(load_world([path]), seed=1)
    sim.run()
    evictions = [e for e in sim.events if e.get("kind") == "preempted"]
    assert len(evictions) <= 2 * len(sim.view.tasks), f"{len(evictions)} evictions for {len(sim.view.tasks)} tasks"
