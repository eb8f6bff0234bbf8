"""Priority across tenants: a tenant's own priorities order its own work; only
the admin's ceilings (``Tenant.spec.maxPriority``) let them count against
another tenant's. Without ceilings tenants are peers, and fair share and
quota decide between them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import app, component, node_group, scenario, site, tenant, world
from conftest import schedule_json
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world
from suanli.spec.loader import validate_document
from suanli.spec.problems import Problem, SpecError
from suanli.spec.refs import check_application

ONE_NODE = [site("s", groups=[node_group(count=1, cpu=4)])]
PRIORITY = st.integers(-(10**9), 10**9)
FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def run(path):
    sim = Simulation(load_world([str(path)]))
    sim.run()
    return sim


def preempted(sim, task):
    return [e for e in sim.events if e["kind"] == "preempted" and e["task"] == task]


def late_arrival(tmp_path, tenants, low, high, high_tenant="beta"):
    """alpha's ``low`` runs on the only node; ``high_tenant``'s ``high`` arrives at 10m."""
    apps = [app("low", tenant="alpha", components=[component(cpu=4)], priority=low),
            app("high", tenant=high_tenant, components=[component(cpu=4)], priority=high)]
    return scenario(tmp_path, ONE_NODE, apps, tenants, arrivals=[{"at": 0, "app": "low"}, {"at": "10m", "app": "high"}])


# ------------------------------------------------------------------ no ceilings: peers


@FAST
@given(low=PRIORITY, gap=st.integers(1, 2 * 10**9))
def test_without_ceilings_a_higher_priority_never_preempts_another_tenant(tmp_path, low, gap):
    high = min(low + gap, 10**9)
    if high <= low:
        return
    sim = run(late_arrival(tmp_path, [tenant("alpha"), tenant("beta")], low, high))
    assert sim.view.tasks["low/c/0"].status == "running" and not preempted(sim, "low/c/0")
    assert sim.view.tasks["high/c/0"].status == "pending"


@FAST
@given(low=PRIORITY, gap=st.integers(1, 2 * 10**9))
def test_without_ceilings_a_higher_priority_is_not_placed_before_another_tenant(tmp_path, low, gap):
    high = min(low + gap, 10**9)
    if high <= low:
        return
    apps = [app("low", tenant="alpha", components=[component(cpu=4)], priority=low),
            app("high", tenant="beta", components=[component(cpu=4)], priority=high)]
    out = schedule_json(world(tmp_path, sites=ONE_NODE, tenants=[tenant("alpha"), tenant("beta")], apps=apps))
    # equal shares: the unit that came first goes first, whatever beta's priority says
    assert [p["task"] for p in out["placements"]] == ["low/c/0"]


def test_the_same_priorities_do_order_and_preempt_within_one_tenant(tmp_path):
    sim = run(late_arrival(tmp_path, [tenant("alpha")], 0, 10**9, high_tenant="alpha"))
    assert [e["cause"] for e in preempted(sim, "low/c/0")] == ["priority"]
    assert sim.view.tasks["high/c/0"].status == "running" and sim.view.tasks["low/c/0"].status == "pending"


def test_a_ceiling_granted_makes_the_same_request_jump_ahead(tmp_path):
    """The control for the test above it: with a ceiling, beta's priority counts."""
    apps = [app("low", tenant="alpha", components=[component(cpu=4)], priority=0),
            app("high", tenant="beta", components=[component(cpu=4)], priority=10**9)]
    tenants = [tenant("alpha"), tenant("beta", maxPriority=10**9)]
    out = schedule_json(world(tmp_path, sites=ONE_NODE, tenants=tenants, apps=apps))
    assert [p["task"] for p in out["placements"]] == ["high/c/0"]


def test_negative_priorities_order_a_tenants_own_work_but_do_not_give_way_to_others(tmp_path):
    sim = run(late_arrival(tmp_path, [tenant("alpha"), tenant("beta", maxPriority=100)], -50, 0))
    assert sim.view.tasks["low/c/0"].status == "running" and not preempted(sim, "low/c/0")


# ------------------------------------------------------------------ ceilings set by the admin


CEILINGS = [tenant("alpha", maxPriority=1000), tenant("beta", maxPriority=100)]


def test_within_the_ceilings_a_higher_priority_preempts_another_tenant(tmp_path):
    apps = [app("victim", tenant="beta", components=[component(cpu=4)], priority=50),
            app("urgent", tenant="alpha", components=[component(cpu=4)], priority=500)]
    path = scenario(tmp_path, ONE_NODE, apps, CEILINGS,
                    arrivals=[{"at": 0, "app": "victim"}, {"at": "10m", "app": "urgent"}])
    sim = run(path)
    [e] = preempted(sim, "victim/c/0")
    assert e["cause"] == "priority" and e["by"] == "urgent/c/0" and e["t"] == 600
    assert sim.view.tasks["urgent/c/0"].status == "running" and sim.view.tasks["victim/c/0"].status == "pending"


def test_equal_standing_does_not_preempt_across_tenants(tmp_path):
    """beta's 100 and alpha's 500 with beta's ceiling at 100: alpha outranks;
    alpha's 100 against beta's 100 does not."""
    apps = [app("victim", tenant="beta", components=[component(cpu=4)], priority=100),
            app("peer", tenant="alpha", components=[component(cpu=4)], priority=100)]
    path = scenario(tmp_path, ONE_NODE, apps, CEILINGS,
                    arrivals=[{"at": 0, "app": "victim"}, {"at": "10m", "app": "peer"}])
    sim = run(path)
    assert not preempted(sim, "victim/c/0") and sim.view.tasks["peer/c/0"].status == "pending"


@pytest.mark.parametrize("where", ["application", "component", "generator"])
def test_a_priority_above_the_tenants_ceiling_is_refused_in_files(tmp_path, where):
    comp = component(cpu=1, **({"priority": 900} if where == "component" else {}))
    spec = {"priority": 900} if where == "application" else {}
    docs = [app("over", tenant="beta", components=[comp], **spec)]
    path = scenario(tmp_path, ONE_NODE, docs, CEILINGS)
    if where == "generator":
        path.write_text(path.read_text().replace("  until: 1h\n", "  until: 1h\n  generators:\n"
                                                 "  - {name: g, tenant: beta, rate: 1/m, template: {priority: 900,"
                                                 " components: [{name: c, lifetime: service}]}}\n"))
    with pytest.raises(SpecError) as info:
        load_world([str(path)])
    [p] = info.value.problems
    expected = {"application": "spec.priority", "component": "spec.components[0].priority",
                "generator": "spec.generators[0].template.priority"}[where]
    assert p.path == expected and p.file == str(path) and p.line is not None
    assert p.message == "priority 900 is above tenant beta's maxPriority 100"


def test_a_priority_above_the_ceiling_is_refused_by_the_check_the_api_runs(tmp_path):
    live = load_world([str(world(tmp_path, sites=ONE_NODE, tenants=CEILINGS))])
    doc = app("over", tenant="beta", components=[component(cpu=1, priority=101)], priority=100)
    [loaded] = validate_document("request body", doc)
    problems = check_application(loaded, live)
    assert [(p.path, p.message) for p in problems] == [
        ("spec.components[0].priority", "priority 101 is above tenant beta's maxPriority 100")]
    fine = validate_document("request body", app("fine", tenant="beta", priority=100))[0]
    assert check_application(fine, live) == []


def test_max_priority_is_bounded():
    doc = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"},
           "spec": {"maxPriority": 10**9 + 1}}
    [p] = validate_document("request body", doc)
    assert isinstance(p, Problem) and p.path == "spec.maxPriority" and "at most 1000000000" in p.message
    doc["spec"]["maxPriority"] = -1
    [p] = validate_document("request body", doc)
    assert isinstance(p, Problem) and p.path == "spec.maxPriority"


# ------------------------------------------------------------------ fair share decides between peers


def reclaim_world(tmp_path, beta_ceiling):
    """beta fills both nodes with priority 10^9 work; alpha's priority-0 task arrives at 10m."""
    sites = [site("s", groups=[node_group(count=2, cpu=4)])]
    apps = [app("hog", tenant="beta", components=[component(cpu=4, replicas=2)], priority=10**9),
            app("share", tenant="alpha", components=[component(cpu=4)], priority=0)]
    beta = tenant("beta", maxPriority=beta_ceiling) if beta_ceiling is not None else tenant("beta")
    return scenario(tmp_path, sites, apps, [tenant("alpha"), beta],
                    arrivals=[{"at": 0, "app": "hog"}, {"at": "10m", "app": "share"}])


def test_fair_share_reclaims_from_a_tenant_whose_priority_has_no_ceiling(tmp_path):
    sim = run(reclaim_world(tmp_path, None))
    causes = [e["cause"] for e in sim.events if e["kind"] == "preempted"]
    assert causes == ["fair share"]
    assert sim.view.tasks["share/c/0"].status == "running"


def test_fair_share_leaves_work_whose_standing_the_admin_granted(tmp_path):
    sim = run(reclaim_world(tmp_path, 10**9))
    assert not [e for e in sim.events if e["kind"] == "preempted"]
    assert sim.view.tasks["share/c/0"].status == "pending"
