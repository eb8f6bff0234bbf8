"""Explanations over a neighbourhood equal explanations over every row.

A request whose first checks are other devices' sites and its near bound is
explained over the rows of open sites within the bound, the others only
counted; its binding check reads the open rows beyond the bound too, and
the other devices' rows within it where those are a relaxation. Checked
against the full explanation (every row, every check in order, and the
binding check over every row) on the city's cars: their infotainment and
autopilot requests, some bound near an edge or cloud instead, with the
fleet partly placed, nodes down, and the default VC's quota and reach
checks as extra masks."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import pes_world_text
from hypothesis import HealthCheck, given, settings, strategies as st

from suanli.model.work import Near
from suanli.scheduling import filters
from suanli.scheduling.business_layer import TaskExtras
from suanli.scheduling.static import schedule
from suanli.spec.build import load_world

CITY = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"
TALLY: Counter = Counter()


def reference(table, req, extra=()) -> Counter:
    """Every row charged to the first check it fails, in order."""
    counts: Counter = Counter()
    remaining = ~table.view("retired")
    for reason, mask in [*filters.static_checks(table, req), *filters.dynamic_checks(table, req), *extra]:
        failed = int(np.count_nonzero(remaining & ~mask))
        if failed:
            counts[reason] += failed
        remaining &= mask
    return counts


@pytest.fixture(scope="module")
def city():
    world = load_world([CITY], {"cars": "300"})
    out = schedule(world, seed=2)
    return world, out.state


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_a_neighbourhood_explains_as_every_row_does(city, data):
    world, state = city
    from suanli.scheduling.business_layer import BusinessLayer
    from suanli.scheduling.global_layer import GlobalLayer

    rng = np.random.default_rng(0)
    business = BusinessLayer(state, GlobalLayer(state, rng), rng)
    vcs = next(v for v in state.vcs.values() if v.default)
    table = vcs.table
    down = data.draw(st.lists(st.integers(0, state.fleet.n_nodes - 1), max_size=30, unique=True))
    for node in down:
        state.set_node_enabled(node, False)
    try:
        apps = [a for a in world.apps if a.template is not None]
        fleet = state.fleet
        open_sites = [s.name for s in fleet.sites if not fleet.site_table.private[s.index]]
        for app in data.draw(st.lists(st.sampled_from(apps), min_size=1, max_size=4)):
            for comp in app.components:
                if data.draw(st.integers(0, 2)) == 0:  # bound near an edge or cloud instead: other cars' sites
                    near = Near(data.draw(st.sampled_from(open_sites)), data.draw(st.sampled_from([1, 5, 20, 60])))
                    comp = replace(comp, near=near)  # within the bound are a relaxation
                req = business.request(comp, app.tenant)
                extra = TaskExtras(business, vcs).checks(req, table)
                fast = filters.explain(table, req, extra)
                assert fast == reference(table, req, extra), (app.name, comp.name)
                checks = [*filters.static_checks(table, req), *filters.dynamic_checks(table, req), *extra]
                want = filters._binding(table, req, checks, ~table.view("retired"), slice(0, table.n))
                assert fast.binding == want, (app.name, comp.name, fast.binding, want)
                near = filters._near_first(table, req) is not None
                TALLY["over the neighbourhood"] += near
                inside = set(fast) - {r for r, _ in req.site_terms[:2]}
                TALLY["refused inside it"] += near and bool(inside)
                TALLY["the bound binds"] += near and want is not None and want.reason.code == "near"
                TALLY["other cars' sites bind"] += near and want is not None and want.reason.code == "private"
    finally:
        for node in down:
            state.set_node_enabled(node, True)


def test_the_neighbourhood_path_was_taken():
    assert TALLY["over the neighbourhood"] > 0 and TALLY["refused inside it"] > 0 and TALLY["the bound binds"] > 0 \
        and TALLY["other cars' sites bind"] > 0, TALLY


# ---------------------------------------------------------------- site masks before the near bound

# what the short tasks' templates may name instead of PureEdgeSim's edge and cloud (the phones' own sites
# opened to their own work; the sites by tier; a tenant's allowed sites before the selector)
SELECTORS = {
    "named": None,
    "named, phones too": "sites: {names: [edge-dc1, cloud, phone-*]}",
    "by tier": "sites: {tier: [edge, cloud]}",
}
SPLIT: Counter = Counter()


def _pes_world(tmp_path, devices: int, edge_cpu: int, cloud_cpu: int, selector: str, allowed: bool,
               max_rtt_ms: int = 100) -> Path:
    """PureEdgeSim's default world at ``devices``, generating for one minute,
    its edge of ``edge_cpu`` cores and its cloud of ``cloud_cpu`` (small:
    tasks wait), the templates' site selector replaced by ``SELECTORS[selector]``
    and their bound by ``max_rtt_ms`` (the cloud is 65 ms from a device)."""
    path = tmp_path / "pes.yaml"
    text = pes_world_text(devices, 1, edge_cpu, cloud_cpu)
    text = text.replace("maxRttMs: 100}", f"maxRttMs: {max_rtt_ms}}}")
    if SELECTORS[selector] is not None:
        text = text.replace("sites: {names: [edge-dc1, cloud]}", SELECTORS[selector])
    if allowed:
        sites = "cloud, edge-*, ap-*, phone-*, rpi-*, laptop-*, sensor-*, msensor-*"
        text = text.replace("kind: Tenant\nmetadata: {name: iot}",
                            f"kind: Tenant\nmetadata: {{name: iot}}\nspec: {{allowedSites: [{sites}]}}")
        assert "allowedSites" in text
    path.write_text(text)
    return path


def _checked(explain):
    """``explain``, checked at each call against every row in order (counts and binding check).
    A check that fails inside a simulation's pass refuses the application (the pass catches
    placement errors): each is also counted (``SPLIT["not as every row"]``) for the test to assert on."""
    def checked(table, req, extra=()):
        try:
            return _compared(table, req, extra)
        except AssertionError:
            SPLIT["not as every row"] += 1
            raise

    def _compared(table, req, extra):
        got = explain(table, req, extra)
        split = filters.SPLIT and filters._near_first(table, req) is None and \
            filters._masks_first(table, req) is not None
        checks = [*filters.static_checks(table, req), *filters.dynamic_checks(table, req), *extra]
        want = filters._binding(table, req, checks, ~table.view("retired"), slice(0, table.n))
        assert got == reference(table, req, extra) and got.binding == want, (dict(got), got.binding, want)
        SPLIT["explained"] += filters.SPLIT
        SPLIT["split"] += split
        SPLIT["binding outside the rows that pass"] += split and want is not None and \
            want.reason in {r for r, _ in req.site_terms}
        SPLIT["no site could ever hold it within the bound"] += split and not req.near.sites.size
        return got
    return checked


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(20, 60), st.integers(1, 4), st.integers(1, 4), st.sampled_from(sorted(SELECTORS)), st.booleans(),
       st.sampled_from([100, 50, 5, 0]), st.integers(0, 2**16))
def _explained_alike(tmp_path, devices, edge_cpu, cloud_cpu, selector, allowed, max_rtt_ms, seed):
    from suanli.scheduling import select
    from suanli.sim.simulation import Simulation

    world = load_world([_pes_world(tmp_path, devices, edge_cpu, cloud_cpu, selector, allowed, max_rtt_ms)])
    runs = []
    for split in (True, False):
        old, filters.SPLIT = filters.SPLIT, split
        explain, select.explain = select.explain, _checked(select.explain)
        try:
            sim = Simulation(world, seed=seed)
            sim.run()
        finally:
            filters.SPLIT, select.explain = old, explain
        runs.append(sim.events.take())
    assert runs[0] == runs[1]


def test_site_masks_before_a_near_bound_explain_as_every_row_does(tmp_path):
    """Short tasks that wait (PureEdgeSim's world, its edge and cloud made
    small, its selector varied): each explanation over the rows that pass the
    site masks and the bound, or fail one alone, gives every row's counts
    and binding check, and the simulation the same events; most of them
    counted in one compiled loop."""
    SPLIT.clear()
    few = filters.EXPLAINED_FEW[0]
    _explained_alike(tmp_path)
    assert not SPLIT["not as every row"], SPLIT
    # the split's compiled counting and binding check (``_explain_few``) made most of them
    assert filters.EXPLAINED_FEW[0] - few >= SPLIT["split"] / 2 > 0, (filters.EXPLAINED_FEW[0] - few, SPLIT)
    # not vacuous: most explanations were split, and some binding checks were a site term (a row failing
    # only the selector or the bound, outside the rows read in full)
    assert SPLIT["split"] >= SPLIT["explained"] / 2 > 0, SPLIT
    assert SPLIT["binding outside the rows that pass"] > 0, SPLIT
    assert SPLIT["no site could ever hold it within the bound"] > 0, SPLIT


def test_a_kept_split_is_made_again_when_paths_or_nodes_change(tmp_path):
    """A request keeps its split (the rows read and their static checks)
    between explanations, made again when rows, retired rows or paths
    change: while tasks wait, the edge's link to the cloud goes down and up,
    the edge's node goes down and up, and a device's node leaves the fleet
    for good (a retired row: every row is read from then on), and each
    explanation, kept split or new, equals every row's, in each spell."""
    from suanli.executors.base import Call
    from suanli.scheduling import select
    from suanli.sim.simulation import Simulation

    text = pes_world_text(60, 1, 1, 1)
    events = ("  events:\n"
              "    - {at: 15s, kind: linkDown, between: [edge-dc1, cloud]}\n"
              "    - {at: 30s, kind: linkUp, between: [edge-dc1, cloud]}\n"
              "    - {at: 40s, kind: nodeDown, node: edge-dc1/dc-0}\n"
              "    - {at: 50s, kind: nodeUp, node: edge-dc1/dc-0}\n")
    assert "  policy: {rescheduling: {enabled: false}}\n" in text
    text = text.replace("  policy: {rescheduling: {enabled: false}}\n",
                        "  policy: {rescheduling: {enabled: false}}\n" + events)
    path = tmp_path / "pes.yaml"
    path.write_text(text)
    sim = Simulation(load_world([path]), seed=3)
    gone = sim.world.fleet.node_by_name("edge-dc1/dc-0")
    sim.loop.schedule(55.0, Call(lambda: sim.globe.retire_node(sim.now, gone, "left")))
    tally: Counter = Counter()
    kept = filters._split_kept

    def counted(table, req):
        old = req.cache.get("split")
        got = kept(table, req)
        spell = int(np.searchsorted([15, 30, 40, 50, 55], sim.now, side="right"))
        tally[spell, "kept" if old is not None and old[1] is got else "made"] += 1
        return got

    SPLIT["not as every row"] = 0
    explain, select.explain, filters._split_kept = select.explain, _checked(select.explain), counted
    try:
        sim.run()
    finally:
        select.explain, filters._split_kept = explain, kept
    assert not SPLIT["not as every row"], (SPLIT, tally)
    # not vacuous: in every spell (link up, down, up; node down, up) kept splits were read, and
    # splits were made again after the first
    assert all(tally[spell, "kept"] > 3 for spell in range(5)), tally
    assert sum(tally[spell, "made"] for spell in range(1, 5)) > 0, tally
    assert tally[5, "made"] > 0 and tally[5, "kept"] > 0, tally  # (kept: that there is no split)
