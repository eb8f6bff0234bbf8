"""The vectorized filters against a slow, obviously correct reference.

Random fleets become candidate tables (physical nodes, or hosts sliced out of
them), partly used by random allocations and with some rows disabled; random
requests (resources, fractional and whole devices, models, arch, tenant sites,
selectors, latency bounds, data sites, whole nodes) are compiled against the
fleet. For every row, the reference decides with plain Python loops whether the
request fits now and how many copies of it fit, and the results must equal
``filters.feasible`` and ``select.room``.
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import numpy as np
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from suanli.model.fleet import DeviceType, Fleet, Link, NodeGroup, Site
from suanli.model.work import AcceleratorRequest, Near, Resources, Selector, Tenant
from suanli.scheduling import filters
from suanli.scheduling.filters import explain, feasible
from suanli.scheduling.request import compile_request
from suanli.scheduling.select import allocation, room, room_row
from suanli.scheduling.statement import Statement
from suanli.scheduling.table import Allocation, CandidateTable

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TIERS = ("cloud", "edge", "device")
ARCHES = ("x86_64", "aarch64")
MODELS = {"gpu": ("A100", "T4"), "npu": ("Ascend910",), "dsa": ("DSA-1",)}
UNBOUNDED = int(np.iinfo(np.int64).max)


# ====================================================================== fleets and tables


def sometimes(draw, n: int = 3) -> bool:
    """True about once in ``n`` draws."""
    return draw(st.integers(1, n)) == n


@st.composite
def fleets(draw) -> Fleet:
    sites, groups = [], []
    n_sites = draw(st.integers(1, 3))
    for i in range(n_sites):
        tier = draw(st.sampled_from(TIERS))
        intra = draw(st.sampled_from([0.2, 0.2, 0.0, 1.0]))
        sites.append(Site(i, f"{tier}-{i}", tier, draw(st.sampled_from(["north", "south"])), intra))
        for k in range(draw(st.integers(1 if i == 0 else 0, 2))):
            devices = []
            for kind in draw(st.lists(st.sampled_from(sorted(MODELS)), min_size=0 if sometimes(draw, 4) else 1,
                                      max_size=2, unique=True)):
                devices.append(DeviceType(kind, draw(st.sampled_from(MODELS[kind])),
                                          draw(st.integers(1, 4)), None, draw(st.booleans())))
            groups.append(NodeGroup(
                len(groups), i, f"g{k}", draw(st.integers(1, 3)), draw(st.sampled_from(ARCHES)),
                draw(st.sampled_from([2000, 4000, 8000])), draw(st.sampled_from([2048, 4096, 8192])),
                tuple(devices), {}, {"pool": draw(st.sampled_from(["a", "b"]))},
            ))
    links = []
    for a in range(n_sites):
        for b in range(a + 1, n_sites):
            if draw(st.booleans()):
                links.append(Link(a, b, draw(st.integers(0, 40)) / 2, 1000.0))
    return Fleet(sites, groups, links)


def by_row(table: CandidateTable, name: str) -> np.ndarray:
    """A two-dimensional column of the table as [row, entry], whatever its memory
    layout: the axis that is as long as the table's row capacity is the row axis."""
    arr = getattr(table, name)
    rows = len(table.node)
    if arr.shape[0] == rows and arr.shape[1] != rows:
        return arr
    if arr.shape[1] == rows and arr.shape[0] != rows:
        return arr.T
    # square: the live view is cut to table.n along the row axis
    view = table.view(name)
    if view.shape[0] == table.n and view.shape[1] == rows and table.n != rows:
        return arr
    if view.shape[1] == table.n and view.shape[0] == rows and table.n != rows:
        return arr.T
    raise LookupError(f"cannot tell the row axis of {name} {arr.shape}")


def slots_of(table: CandidateTable, row: int) -> range:
    return range(by_row(table, "dev_kind").shape[1])


def dev(table: CandidateTable, name: str, row: int, slot: int):
    """One device slot of one row."""
    return by_row(table, name)[row, slot].item()


def res(table: CandidateTable, name: str, row: int, col: int) -> int:
    """One resource (0 cpu, 1 memory, 2.. accelerator kinds) of one row, from cap or free."""
    return int(by_row(table, name)[row, col])


def n_resources(table: CandidateTable) -> int:
    return by_row(table, "cap").shape[1]


def unambiguous(table: CandidateTable) -> bool:
    try:
        for name in ("cap", "free", "dev_kind", "dev_free"):
            by_row(table, name)
    except LookupError:
        return False
    return True


@st.composite
def partial_allocations(draw, table: CandidateTable, row: int, device_odds: int = 2) -> Allocation:
    """Some of what is free on ``row``: cpu, memory and shares of its devices (each
    device with odds of 1 in ``device_odds`` of not being touched)."""
    vec = np.zeros(n_resources(table), np.int64)
    vec[0] = draw(st.integers(0, res(table, "free", row, 0)))
    vec[1] = draw(st.integers(0, res(table, "free", row, 1)))
    slots, milli = [], []
    for s in slots_of(table, row):
        free = dev(table, "dev_free", row, s)
        if dev(table, "dev_kind", row, s) >= 0 and free > 0 and not sometimes(draw, device_odds):
            m = draw(st.sampled_from(sorted({free, max(1, free // 2), min(free, 250), max(1, free - 100)})))
            slots.append(s)
            milli.append(m)
            vec[2 + dev(table, "dev_kind", row, s)] += m
    return Allocation(row, vec, tuple(slots), tuple(milli))


@st.composite
def tables(draw) -> tuple[Fleet, CandidateTable]:
    """A fleet and a candidate table over it: its nodes, or hosts sliced out of them,
    with some capacity already taken and some rows disabled."""
    fleet = draw(fleets())
    table = CandidateTable.from_fleet(fleet)
    assume(unambiguous(table))
    if draw(st.booleans()):
        nodes = table
        table = CandidateTable(len(fleet.resources), fleet.max_devices, capacity=draw(st.integers(1, 3)))
        for _ in range(draw(st.integers(1, 6))):
            row = draw(st.integers(0, nodes.n - 1))
            a = draw(partial_allocations(nodes, row))
            nodes.take(a)
            table.append_row(nodes, row, a.vec, a.slots, a.milli)
            note(f"host row {table.n - 1}: node {row}, {a}")
        assume(unambiguous(table))
    for _ in range(draw(st.integers(0, 8))):
        a = draw(partial_allocations(table, draw(st.integers(0, table.n - 1))))
        table.take(a)
        note(f"taken: {a}")
    for _ in range(draw(st.integers(0, 1))):
        row = draw(st.integers(0, table.n - 1))
        table.set_enabled(row, False)
        note(f"disabled row {row}")
    return fleet, table


# ====================================================================== requests


def globs_for(fleet: Fleet) -> list[str]:
    out = ["*", "nowhere-*"]
    for s in fleet.sites:
        out += [s.name, f"{s.tier}-*", s.name[:-1] + "?"]
    return out


@st.composite
def requests(draw, fleet: Fleet) -> dict:
    """The inputs of ``compile_request``: resources and constraints (each constraint
    present now and then, so that many requests fit somewhere)."""
    site_names = [s.name for s in fleet.sites]
    if sometimes(draw, 8):
        want = Resources(whole=True)
    else:
        accels = []
        kinds = list(fleet.kinds.names) if fleet.kinds.names and not sometimes(draw, 5) else ["gpu", "npu", "dsa", "tpu"]
        for kind in draw(st.lists(st.sampled_from(kinds), min_size=0 if sometimes(draw) else 1,
                                  max_size=2, unique=True)):
            models = None
            if sometimes(draw):
                pool = MODELS.get(kind, ()) + ("A100", "X-1")
                models = tuple(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True)))
            accels.append(AcceleratorRequest(kind, models, draw(st.sampled_from([100, 250, 500, 1000, 2000, 3000]))))
        want = Resources(draw(st.sampled_from([0, 250, 500, 1000, 2000])),
                         draw(st.sampled_from([0, 256, 1024, 2048])), tuple(accels))
    kw: dict = {"res": want}
    if sometimes(draw, 4):
        kw["tenant"] = Tenant("t", allowed_sites=tuple(draw(st.lists(st.sampled_from(globs_for(fleet)),
                                                                        min_size=1, max_size=2))))
    if sometimes(draw, 4):
        kw["arch"] = tuple(draw(st.lists(st.sampled_from([*ARCHES, "riscv64"]), min_size=1, max_size=2, unique=True)))
    if sometimes(draw, 4):
        kw["near"] = Near(draw(st.sampled_from(site_names)),
                          draw(st.none() | st.integers(0, 40).map(lambda x: x / 2)))
    if sometimes(draw, 4):
        kw["data_sites"] = tuple(draw(st.lists(st.sampled_from(site_names), min_size=1, max_size=2, unique=True)))
    if sometimes(draw, 4):
        kw["selector"] = Selector(
            tiers=draw(st.none() | st.lists(st.sampled_from(TIERS), min_size=1, max_size=2, unique=True).map(tuple)),
            names=draw(st.none() | st.lists(st.sampled_from(globs_for(fleet)), min_size=1, max_size=2).map(tuple)),
            regions=draw(st.none() | st.sampled_from([("north",), ("south",)])),
            labels=draw(st.sampled_from([{}, {"pool": "a"}, {"pool": "b"}])),
        )
    return kw


def crowd(data, table: CandidateTable, rows: np.ndarray) -> None:
    """Take random parts of what is free on some of ``rows`` (where a request fits),
    so that requests meet rows on the edge of fitting."""
    for row in rows:
        if not sometimes(data.draw, 3):
            a = data.draw(partial_allocations(table, int(row), device_odds=3))
            table.take(a)
            note(f"taken: {a}")


def case(data):
    """A fleet, a table, the request's inputs and the compiled request; the rows the
    request fits on are then partly used up."""
    fleet, table = data.draw(tables())
    kw = data.draw(requests(fleet))
    req = compile_(fleet, kw)
    crowd(data, table, np.flatnonzero(feasible(table, req)))
    return fleet, table, kw, req


def compile_(fleet: Fleet, kw: dict):
    return compile_request(fleet, kw["res"], tenant=kw.get("tenant"), arch=kw.get("arch"),
                           near=kw.get("near"), data_sites=kw.get("data_sites", ()),
                           selector=kw.get("selector"))


# ====================================================================== the reference


def path_rtt(fleet: Fleet) -> list[list[float]]:
    """Floyd–Warshall over the links in plain Python; a site's own intra-site rtt to itself."""
    n = len(fleet.sites)
    d = [[0.0 if i == j else math.inf for j in range(n)] for i in range(n)]
    for ln in fleet.links:
        d[ln.a][ln.b] = d[ln.b][ln.a] = min(d[ln.a][ln.b], ln.rtt_ms)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if d[i][k] + d[k][j] < d[i][j]:
                    d[i][j] = d[i][k] + d[k][j]
    for i in range(n):
        d[i][i] = fleet.sites[i].intra_site_rtt_ms
    return d


def kind_code(fleet: Fleet, kind: str) -> int | None:
    return fleet.kinds.names.index(kind) if kind in fleet.kinds.names else None


def usable(fleet: Fleet, table: CandidateTable, row: int, need: AcceleratorRequest) -> list[int]:
    """Device slots of the row that may serve ``need``: its kind, an allowed model,
    and for a share of one device, a shareable device."""
    k = kind_code(fleet, need.kind)
    out = []
    for s in slots_of(table, row):
        if k is None or dev(table, "dev_kind", row, s) != k:
            continue
        if need.models is not None and fleet.models.names[dev(table, "dev_model", row, s)] not in need.models:
            continue
        if need.milli < 1000 and not dev(table, "dev_shareable", row, s):
            continue
        out.append(s)
    return out


def place_allowed(fleet: Fleet, table: CandidateTable, row: int, kw: dict, rtt) -> bool:
    """Everything about where the row is (not what is free on it)."""
    site = fleet.sites[int(table.site[row])]
    group = fleet.groups[int(table.group[row])]
    tenant, sel, near = kw.get("tenant"), kw.get("selector"), kw.get("near")
    if tenant is not None and not any(fnmatchcase(site.name, p) for p in tenant.allowed_sites):
        return False
    if sel is not None:
        if sel.tiers and site.tier not in sel.tiers:
            return False
        if sel.names and not any(fnmatchcase(site.name, p) for p in sel.names):
            return False
        if sel.regions and site.region not in sel.regions:
            return False
        if any(group.labels.get(k) != v for k, v in sel.labels.items()):
            return False
    if near is not None and near.max_rtt_ms is not None:
        if not rtt[site.index][fleet.site_index[near.site]] <= near.max_rtt_ms:
            return False
    for name in kw.get("data_sites", ()):
        if math.isinf(rtt[site.index][fleet.site_index[name]]):
            return False
    if kw.get("arch") is not None and fleet.archs.names[int(table.arch[row])] not in kw["arch"]:
        return False
    return True


def take_one(fleet: Fleet, table: CandidateTable, row: int, want: Resources,
             free: list[int], dev_free: dict[int, int]) -> bool:
    """Take one copy of ``want`` from the free amounts (modified in place), or return False."""
    if free[0] < want.cpu_milli or free[1] < want.mem_mib:
        return False
    taken: dict[int, int] = {}
    for need in want.accelerators:
        slots = usable(fleet, table, row, need)
        if need.milli >= 1000:
            whole = [s for s in slots if dev(table, "dev_cap", row, s) == 1000 and dev_free[s] == 1000]
            if len(whole) < need.milli // 1000:
                return False
            for s in whole[: need.milli // 1000]:
                taken[s] = 1000
        else:
            fits = [s for s in slots if dev_free[s] >= need.milli]
            if not fits:
                return False
            taken[fits[0]] = need.milli
    free[0] -= want.cpu_milli
    free[1] -= want.mem_mib
    for s, m in taken.items():
        dev_free[s] -= m
    return True


def untouched(table: CandidateTable, row: int) -> bool:
    return (all(res(table, "free", row, c) == res(table, "cap", row, c) for c in range(n_resources(table)))
            and all(dev(table, "dev_free", row, s) == dev(table, "dev_cap", row, s) for s in slots_of(table, row)))


def reference_fits(fleet: Fleet, table: CandidateTable, row: int, kw: dict, rtt) -> bool:
    if not table.enabled[row] or not place_allowed(fleet, table, row, kw, rtt):
        return False
    want = kw["res"]
    if want.whole:
        return untouched(table, row)
    free = [res(table, "free", row, 0), res(table, "free", row, 1)]
    dev_free = {s: dev(table, "dev_free", row, s) for s in slots_of(table, row)}
    return take_one(fleet, table, row, want, free, dev_free)


def reference_room(fleet: Fleet, table: CandidateTable, row: int, kw: dict, allowed: bool) -> int:
    """How many copies fit on the row, counted by taking them one at a time."""
    want = kw["res"]
    if not allowed:
        return 0
    if want.whole:
        return 1
    if want.cpu_milli == 0 and want.mem_mib == 0 and not want.accelerators:
        return UNBOUNDED
    free = [res(table, "free", row, 0), res(table, "free", row, 1)]
    dev_free = {s: dev(table, "dev_free", row, s) for s in slots_of(table, row)}
    n = 0
    while take_one(fleet, table, row, want, free, dev_free):
        n += 1
    return n


# ====================================================================== properties


@SETTINGS
@given(st.data())
def test_feasible_matches_the_reference(data):
    fleet, table, kw, req = case(data)
    rtt = path_rtt(fleet)
    got = feasible(table, req)
    want = np.array([reference_fits(fleet, table, r, kw, rtt) for r in range(table.n)], bool)
    assert got.shape == (table.n,)
    assert got.tolist() == want.tolist(), f"rows that differ: {np.flatnonzero(got != want).tolist()}"
    one_row = getattr(filters, "fits_row", None)  # the single-row form, where there is one
    if one_row is not None:
        single = [bool(one_row(table, req, r)) for r in range(table.n)]
        assert single == want.tolist(), f"fits_row differs on rows {np.flatnonzero(np.array(single) != want).tolist()}"


@SETTINGS
@given(st.data())
def test_room_matches_the_reference(data):
    fleet, table, kw, req = case(data)
    for mask in (feasible(table, req), np.array(data.draw(st.lists(st.booleans(), min_size=table.n,
                                                                     max_size=table.n)), bool)):
        got = room(table, req, mask)
        want = [reference_room(fleet, table, r, kw, bool(mask[r])) for r in range(table.n)]
        assert got.tolist() == want, f"mask {mask.tolist()}"
    fits = feasible(table, req)
    for r in np.flatnonzero(fits):  # the single-row form, on rows the request fits
        assert room_row(table, req, int(r)) == reference_room(fleet, table, int(r), kw, True), f"row {r}"


@SETTINGS
@given(st.data())
def test_room_copies_can_be_allocated_one_after_another(data):
    """On every feasible row, ``room`` copies are allocated and taken in turn, each
    on usable devices, and then the request no longer fits."""
    fleet, table, kw, req = case(data)
    mask = feasible(table, req)
    copies = room(table, req, mask)
    for row in np.flatnonzero(mask):
        k = int(copies[row])
        if k >= 64:
            continue
        txn = Statement()
        for i in range(k):
            assert feasible(table, req)[row], f"row {row}: copy {i + 1} of {k} does not fit"
            a = allocation(table, req, row)
            if not kw["res"].whole:
                assert a.vec.tolist() == req.vec.tolist()
                for need in kw["res"].accelerators:
                    ok = set(usable(fleet, table, row, need))
                    kind = kind_code(fleet, need.kind)
                    mine = [(s, m) for s, m in zip(a.slots, a.milli) if dev(table, "dev_kind", row, s) == kind]
                    assert {s for s, _ in mine} <= ok, f"row {row}: devices {mine} are not usable for {need}"
                    if need.milli >= 1000:
                        assert sorted(m for _, m in mine) == [1000] * (need.milli // 1000)
                        assert len({s for s, _ in mine}) == need.milli // 1000
                    else:
                        assert [m for _, m in mine] == [need.milli]
            txn.take(table, [a])
            assert all(res(table, "free", row, c) >= 0 for c in range(n_resources(table))) and all(
                dev(table, "dev_free", row, s) >= 0 for s in slots_of(table, row))
        empty = not any(res(table, "cap", row, c) for c in range(n_resources(table))) and not any(dev(table, "dev_cap", row, s) for s in slots_of(table, row))
        if not (kw["res"].whole and empty):  # taking all of an empty row takes nothing
            assert not feasible(table, req)[row], f"row {row}: fits more than its room of {k}"
        txn.discard()


@SETTINGS
@given(st.data())
def test_explain_charges_each_infeasible_row_once(data):
    fleet, table, kw, req = case(data)
    counts = explain(table, req)
    assert all(v > 0 for v in counts.values())
    retired = getattr(table, "retired", np.zeros(len(table.node), bool))[: table.n]
    assert sum(counts.values()) == int(np.count_nonzero(~feasible(table, req) & ~retired))


def test_data_on_a_device_linked_directly_to_others_is_reached():
    """Devices relay nothing, so reachability among them is not a partition:
    three devices linked in a triangle each reach the other two directly
    (none through another). A row on any of them reaches data on any other,
    as the reference says; the component labels alone (one part per device)
    would say none does."""
    sites = [Site(i, f"device-{i}", "device", "north", 0.2) for i in range(3)]
    groups = [NodeGroup(i, i, "g", 1, "x86_64", 2000, 2048, (), {}, {}) for i in range(3)]
    links = [Link(0, 1, 5.5, 1000.0), Link(0, 2, 2.5, 1000.0), Link(1, 2, 10.5, 1000.0)]
    fleet = Fleet(sites, groups, links)
    net = fleet.network
    assert len(set(net.component.tolist())) == 3 and not net.labels_exact()
    table = CandidateTable.from_fleet(fleet)
    kw = {"res": Resources(500, 256), "data_sites": ("device-2",)}
    req = compile_(fleet, kw)
    rtt = path_rtt(fleet)
    want = [reference_fits(fleet, table, r, kw, rtt) for r in range(table.n)]
    assert want == [True, True, True] and feasible(table, req).tolist() == want
