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

from suanli.model.work import AcceleratorRequest, Near, Resources
from suanli.scheduling import kernels, live, scores
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
            assert v.best_rows()[1].tolist() == top
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


@SETTINGS
@given(st.data())
def test_a_run_of_identical_members_lands_as_one_by_one_would(data):
    """``_fill`` places a run of the same request in a few steps (whole rows, a
    kept ranking); the result must be the same as placing the members one by
    one (``select.RUNS`` off): same rows, same devices, the same draws from
    the generator."""
    import copy

    from suanli.scheduling import select
    from suanli.scheduling.domains import coupling_domain
    from suanli.scheduling.select import place_group

    fleet, table = data.draw(tables())
    if data.draw(st.booleans()):
        kw = data.draw(requests(fleet))
    else:  # sized so that a few copies fill a row: runs go from row to row
        kinds = list(fleet.kinds.names)
        accels = ()
        if kinds and data.draw(st.booleans()):
            accels = (AcceleratorRequest(data.draw(st.sampled_from(kinds)), None,
                                         data.draw(st.sampled_from([250, 500, 1000, 2000]))),)
        kw = {"res": Resources(data.draw(st.sampled_from([1000, 2000, 4000])),
                               data.draw(st.sampled_from([512, 1024, 2048])), accels)}
        if data.draw(st.booleans()):
            kw["near"] = Near(data.draw(st.sampled_from([s.name for s in fleet.sites])), None)
    n = data.draw(st.integers(2, 24))
    level = data.draw(st.sampled_from([None, "ib", "ethernet", "wan"]))
    seed = data.draw(st.integers(0, 2**16))
    restrict = np.array(data.draw(st.lists(st.booleans(), min_size=table.n, max_size=table.n)), bool) \
        if data.draw(st.booleans()) else None
    table.views = None
    twin = copy.deepcopy(table)
    results = []
    for t, runs in ((table, True), (twin, False)):
        domain = coupling_domain(t, fleet.network, level) if level else None
        rng = np.random.default_rng(seed)
        select.RUNS = runs
        try:
            res = place_group(t, [compile_(fleet, kw)] * n, fleet.network, rng, domain=domain, restrict=restrict)
        finally:
            select.RUNS = True
        results.append(([(a.row, a.slots, a.milli, a.vec.tolist()) for a in res.allocations],
                        int(rng.integers(1 << 30))))
    assert results[0] == results[1]
    assert table.free[:, : table.n].tolist() == twin.free[:, : twin.n].tolist()


def test_runs_on_larger_fleets_land_as_one_by_one_would():
    """The same comparison on seeded fleets of 20 to 60 nodes, partly used,
    where gangs of up to 48 members fill row after row (ties included: many
    nodes are alike), inside coupling domains or anywhere."""
    import copy

    from suanli.model.fleet import DeviceType, Fleet, Link, NodeGroup, Site
    from suanli.scheduling import select
    from suanli.scheduling.domains import coupling_domain
    from suanli.scheduling.request import compile_request
    from suanli.scheduling.select import allocation, place_group

    ranked = 0
    for seed in range(40):
        g = np.random.default_rng(seed)
        sites = [Site(i, f"s{i}", "cloud") for i in range(3)]
        groups = []
        for i in range(int(g.integers(4, 9))):
            dev = (DeviceType("gpu", "A100", int(g.choice([2, 4, 8])), None, bool(g.integers(2))),) if g.integers(3) else ()
            groups.append(NodeGroup(i, int(g.integers(3)), f"g{i}", int(g.integers(3, 9)), "x86_64",
                                    int(g.choice([8000, 16000])), int(g.choice([16384, 32768])), dev,
                                    {"ib": f"ib{int(g.integers(3))}"} if g.integers(2) else {}))
        fleet = Fleet(sites, groups, [Link(0, 1, 2.0, 1000.0), Link(1, 2, 5.0, 1000.0)])
        table = CandidateTable.from_fleet(fleet)
        for _ in range(int(g.integers(0, 30))):  # some of the fleet in use
            filler = compile_request(fleet, Resources(int(g.choice([1000, 2000])), 1024, ()))
            table.take(allocation(table, filler, int(g.integers(table.n))))
        accels = (AcceleratorRequest("gpu", None, int(g.choice([250, 500, 1000, 2000]))),) if g.integers(2) else ()
        near = Near(f"s{int(g.integers(3))}", None) if g.integers(2) else None
        res = Resources(int(g.choice([1000, 2000, 4000])), int(g.choice([1024, 4096])), accels)
        n = int(g.integers(8, 49))
        level = [None, "ib", "wan"][int(g.integers(3))]
        restrict = g.random(table.n) < 0.8 if g.integers(2) else None
        table.views = None
        twin = copy.deepcopy(table)
        out = []
        for t, runs in ((table, True), (twin, False)):
            req = compile_request(fleet, res, near=near)
            rng = np.random.default_rng(seed)
            select.RUNS = runs
            built = select._Ranked.__init__
            count = [0]

            def counting(self, *a, _built=built, _count=count):
                _count[0] += 1
                _built(self, *a)
            select._Ranked.__init__ = counting
            try:
                domain = coupling_domain(t, fleet.network, level) if level else None
                got = place_group(t, [req] * n, fleet.network, rng, domain=domain, restrict=restrict)
            finally:
                select.RUNS = True
                select._Ranked.__init__ = built
            ranked += count[0]
            out.append(([(a.row, a.slots, a.milli) for a in got.allocations], int(rng.integers(1 << 30))))
        assert out[0] == out[1], f"seed {seed}"
    assert ranked >= 10  # the kept ranking was really used


def test_kept_best_rows_stay_exact_when_many_rows_change_at_once():
    """Between two looks, 9 to 60 rows change on a 240-row table (the array
    path): the best rows a view keeps must be the ones a fresh computation
    finds, whether the changes raise a new best, tie with the old one, or
    take the old best rows themselves. Many nodes are alike, so ties abound."""
    from suanli.model.fleet import DeviceType, Fleet, NodeGroup, Site
    from suanli.scheduling.request import compile_request

    fleet = Fleet([Site(0, "s0", "cloud")],
                  [NodeGroup(0, 0, "cpu", 120, "x86_64", 16000, 32768, (), {}),
                   NodeGroup(1, 0, "gpu", 120, "x86_64", 32000, 65536, (DeviceType("gpu", "A100", 4, None, True),), {})], [])
    shapes = [Resources(1000, 1024), Resources(4000, 8192),
              Resources(2000, 2048, (AcceleratorRequest("gpu", None, 500),)),
              Resources(8000, 4096, (AcceleratorRequest("gpu", None, 2000),))]
    kept = 0
    for seed in range(12):
        g = np.random.default_rng(seed)
        table = CandidateTable.from_fleet(fleet)
        reqs = [compile_request(fleet, r) for r in shapes]
        held: list = []
        for _ in range(25):
            for _ in range(int(g.integers(9, 61))):
                if held and g.random() < 0.45:
                    table.give(held.pop(int(g.integers(len(held)))))
                    continue
                req = reqs[int(g.integers(len(reqs)))]
                v = live.view(table, req, fleet.network)
                rows = np.flatnonzero(v.ok)
                if rows.size:  # a packed row, often the view's own best one
                    row = int(v.best_rows()[1][0]) if g.random() < 0.5 else int(rows[g.integers(rows.size)])
                    a = allocation(table, req, row)
                    table.take(a)
                    held.append(a)
            for req in reqs:
                v = table.views.get(req)
                had = v.n_top >= 0
                v.sync(table, fleet.network)
                kept += had and v.n_top >= 0
                ok, value = fresh(table, req, fleet.network)
                best = value.max(initial=-np.inf)
                top = np.flatnonzero(value >= best - live.TIE).tolist() if best > -np.inf else []
                assert v.value.tolist() == value.tolist()
                assert v.best_rows()[1].tolist() == top, seed
    assert kept >= 50  # the kept rows were really carried through array updates


def keep_best(value: list[float], top: list[int], changed: list[int], best: float) -> list[int] | None:
    """``kernels.keep_best`` on a small view whose best was ``best`` before
    ``changed`` took the values in ``value``: the best rows now (None: to be
    found again)."""
    value = np.array(value)
    buf = np.zeros(value.size, np.int32)
    buf[: len(top)] = top
    _, n = kernels.keep_best(value, np.array(changed, np.int64), buf, len(top), best, live.TIE, live.LONG)
    return None if n < 0 else buf[:n].tolist()


def test_a_best_row_falling_by_less_than_tie_lets_rows_outside_the_kept_ones_lead():
    """Row 0 held the best (10); row 2 is within TIE of it, row 1 just outside. Row
    0 falls by less than TIE: row 2 leads, and rows 0 and 1 are within TIE of it.
    The kept rows alone cannot show that, so they are found again."""
    t = live.TIE
    value = [10.0 - 0.8 * t, 10.0 - 1.5 * t, 10.0 - 0.5 * t, 0.0]
    buf = np.array([0, 2, 0, 0], np.int32)
    best, n = kernels.keep_best(np.array(value), np.array([0, 3]), buf, 2, 10.0, t, live.LONG)
    assert n == -1
    assert kernels.best_of(np.array(value), buf, t)[1] == 3 and buf[:3].tolist() == [0, 1, 2]


def test_a_changed_row_within_tie_below_the_best_joins_the_best_rows():
    """Row 3 rises to just under the unchanged best of row 0: it ties, in row order;
    a repeated changed row is taken once."""
    t = live.TIE
    value = [10.0, 5.0, 10.0 - 0.2 * t, 10.0 - 0.5 * t]
    assert keep_best(value, [0, 2], [3, 1, 3], 10.0) == [0, 2, 3]
    assert keep_best(value, [2], [0], 10.0 - 0.2 * t) == [0, 2]  # a new best keeps rows still within TIE
    assert keep_best([10.0, 9.0, 3.0], [0], [0, 2], 10.0) == [0]
    assert keep_best([-np.inf, -np.inf], [0], [0], 1.0) is None  # the best fell: found again
    assert keep_best([1.0] * 100, list(range(64)), [64, 65], 1.0) is None  # too many to merge


def test_the_compiled_best_rows_scan_matches_numpy():
    rng = np.random.default_rng(3)
    for _ in range(200):
        value = np.where(rng.random(50) < 0.3, -np.inf, rng.integers(0, 4, 50) + rng.choice([0, 1e-10, 1e-8], 50))
        buf = np.empty(50, np.int32)
        best, n = kernels.best_of(value, buf, live.TIE)
        want = value.max()
        assert best == want
        assert buf[:n].tolist() == (np.flatnonzero(value >= want - live.TIE).tolist() if want > -np.inf else [])
