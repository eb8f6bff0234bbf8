"""Live views (``scheduling/live.py``) are exact: after any sequence of table
changes, a request's view holds the very masks and scores a fresh computation
gives, and ``live.pick`` chooses the row ``select.pick`` chooses with the same
seeded generator.

Random fleets, tables and requests come from the filter reference tests. The
changes between two looks vary in number, so the row-by-row path, the
array path and the fresh start are all exercised.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

from suanli.scheduling import live, scores
from suanli.scheduling.filters import dynamic_ok, static_mask
from suanli.scheduling.select import allocation, pick
from suanli.scheduling.table import CandidateTable
from test_filters_reference import SETTINGS, compile_, partial_allocations, requests, tables


def fresh(table: CandidateTable, req, network) -> tuple[np.ndarray, np.ndarray]:
    ok = static_mask(table, req) & dynamic_ok(table, req, slice(0, table.n))
    value = np.where(ok, scores.total(table, req, np.arange(table.n), network), -np.inf)
    return ok, value


def change(data, table: CandidateTable, held: list) -> None:
    """One random change of what rows have free or whether they serve."""
    what = data.draw(st.sampled_from(["take", "take", "give", "enable", "retire"]))
    if what == "give" and held:
        a = held.pop(data.draw(st.integers(0, len(held) - 1)))
        table.give(a)
        note(f"given back: {a}")
    elif what == "enable":
        row = data.draw(st.integers(0, table.n - 1))
        table.set_enabled(row, data.draw(st.booleans()))
        note(f"row {row} enabled={bool(table.enabled[row])}")
    elif what == "retire" and data.draw(st.integers(0, 9)) == 0:
        row = data.draw(st.integers(0, table.n - 1))
        table.retire(row)
        held[:] = [a for a in held if a.row != row]
        note(f"retired row {row}")
    else:
        row = data.draw(st.integers(0, table.n - 1))
        if table.retired[row]:
            return
        a = data.draw(partial_allocations(table, row))
        table.take(a)
        held.append(a)
        note(f"taken: {a}")


@SETTINGS
@given(st.data())
def test_a_view_always_equals_a_fresh_computation(data):
    fleet, table = data.draw(tables())
    reqs = [compile_(fleet, data.draw(requests(fleet))) for _ in range(data.draw(st.integers(1, 3)))]
    held: list = []
    for _ in range(data.draw(st.integers(1, 6))):
        for _ in range(data.draw(st.sampled_from([0, 1, 2, 5, 12]))):
            change(data, table, held)
        for req in reqs:
            v = live.view(table, req, fleet.network)
            ok, value = fresh(table, req, fleet.network)
            assert v.ok.tolist() == ok.tolist()
            assert v.value.tolist() == value.tolist()
            best = value.max(initial=-np.inf)
            top = np.flatnonzero(value >= best - live.TIE).tolist() if best > -np.inf else []
            assert v.best_rows()[1] == top
            assert live.view(table, req).ok.tolist() == ok.tolist()


@SETTINGS
@given(st.data())
def test_live_pick_chooses_as_select_pick_does(data):
    fleet, table = data.draw(tables())
    req = compile_(fleet, data.draw(requests(fleet)))
    extra = np.array(data.draw(st.lists(st.booleans(), min_size=table.n, max_size=table.n)), bool)
    seed = data.draw(st.integers(0, 2**16))
    held: list = []
    for _ in range(data.draw(st.integers(1, 8))):
        ok, _ = fresh(table, req, fleet.network)
        for masks in ((), (extra,)):
            mask = ok & extra if masks else ok
            want = pick(table, req, mask, fleet.network, np.random.default_rng(seed))
            got = live.pick(table, req, fleet.network, np.random.default_rng(seed), masks)
            assert got == want
        row = live.pick(table, req, fleet.network, np.random.default_rng(seed))
        if row >= 0 and data.draw(st.booleans()):
            a = allocation(table, req, row)
            table.take(a)
            held.append(a)
        else:
            change(data, table, held)


def test_rows_added_to_a_table_are_seen():
    """A host appended to a VC table (the table's version moves) is a candidate at once."""
    from suanli.model.fleet import DeviceType, Fleet, NodeGroup, Site
    from suanli.model.work import AcceleratorRequest, Resources
    from suanli.scheduling.request import compile_request

    fleet = Fleet([Site(0, "c", "cloud")], [NodeGroup(0, 0, "g", 2, "x86_64", 8000, 8192,
                                                      (DeviceType("gpu", "A100", 2, None, True),))], [])
    nodes = CandidateTable.from_fleet(fleet)
    hosts = CandidateTable(len(fleet.resources), fleet.max_devices)
    req = compile_request(fleet, Resources(1000, 1024, (AcceleratorRequest("gpu", None, 500),)))
    assert live.view(hosts, req, fleet.network).ok.size == 0
    a = allocation(nodes, compile_request(fleet, Resources(4000, 4096, (AcceleratorRequest("gpu", None, 1000),))), 1)
    nodes.take(a)
    hosts.append_row(nodes, 1, a.vec, a.slots, a.milli)
    assert live.view(hosts, req, fleet.network).ok.tolist() == [True]
    assert live.pick(hosts, req, fleet.network, np.random.default_rng(0)) == 0
