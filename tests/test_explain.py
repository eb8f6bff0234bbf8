"""Explanations over a neighbourhood equal explanations over every row.

A request whose first checks are other devices' sites and its near bound is
explained over the rows of open sites within the bound, the others only
counted. Checked against the full
explanation (every row, every check in order) on the city's cars: their
infotainment and autopilot requests, with the fleet partly placed, nodes
down, and the default VC's quota and reach checks as extra masks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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
        for app in data.draw(st.lists(st.sampled_from(apps), min_size=1, max_size=4)):
            for comp in app.components:
                req = business.request(comp, app.tenant)
                extra = TaskExtras(business, vcs).checks(req, table)
                fast = filters.explain(table, req, extra)
                assert fast == reference(table, req, extra), (app.name, comp.name)
                near = filters._near_first(table, req) is not None
                TALLY["over the neighbourhood"] += near
                inside = set(fast) - {r for r, _ in req.site_terms[:2]}
                TALLY["refused inside it"] += near and bool(inside)
    finally:
        for node in down:
            state.set_node_enabled(node, True)


def test_the_neighbourhood_path_was_taken():
    assert TALLY["over the neighbourhood"] > 0 and TALLY["refused inside it"] > 0, TALLY
