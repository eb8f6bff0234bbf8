"""Columns kept narrow while their codes are small, and widened when one
is not: the placements' tenant, VC and vector codes (int16 until a code
passes 32,767), the ledger's tenant codes and compact units' places."""

from __future__ import annotations

import numpy as np

from builders import node_group, site, world
from suanli.scheduling.state import PlacementState
from suanli.scheduling.table import Allocation
from suanli.sim.ledger import TaskTable, UnitTable
from suanli.spec.build import load_world


def test_placement_codes_widen_when_a_code_passes_int16_and_keep_what_they_held(tmp_path):
    state = PlacementState(load_world([world(tmp_path, sites=[site("s", groups=[node_group(count=2)])])]))
    p = state.placements
    r = state.nodes.free.shape[0]
    for i in range(33_000):  # as many distinct vectors: the vector codes pass int16
        vec = np.zeros(r, np.int64)
        vec[0], vec[1] = i + 1, 1
        p.add(f"t{i}", i % 7, f"vc{i % 3}", Allocation(i % 2, vec))
        if i == 100:
            assert p._vec.dtype == np.int16 and p._tenant.dtype == np.int16  # narrow while they fit
    assert p._vec.dtype == np.int32 and p._tenant.dtype == np.int32 and p._vc.dtype == np.int32
    p.add("big", 40_000, "vc0", Allocation(0, np.ones(r, np.int64)))  # a tenant code past int16
    ids = [p._ids.get(f"t{i}") for i in (0, 100, 32_767, 32_768, 32_999)]
    assert p._vec[ids].tolist() == [0, 100, 32_767, 32_768, 32_999]
    assert p._tenant[ids].tolist() == [0, 100 % 7, 32_767 % 7, 32_768 % 7, 32_999 % 7]
    assert p._vc[ids].tolist() == [0, 100 % 3, 32_767 % 3, 32_768 % 3, 32_999 % 3]
    assert int(p._tenant[p._ids.get("big")]) == 40_000
    assert len(p) == 33_001


def test_ledger_tenant_codes_and_component_places_widen_past_int16():
    tasks = TaskTable()
    units = UnitTable(tasks)
    for k in range(32_770):
        tasks.put(f"x{k}", f"tenant-{k}", None, -1, "pending", 0.0, None, "", False)
    assert tasks.tenant.typecode == "i"
    assert [tasks[f"x{k}"].tenant for k in (0, 32_767, 32_768, 32_769)] == \
        [f"tenant-{k}" for k in (0, 32_767, 32_768, 32_769)]
    assert units.comp.typecode == "h"


def test_device_share_codes_widen_past_int16():
    from suanli.scheduling.state import DevShares

    d = DevShares()
    for i in range(33_000):  # as many distinct (slots, milli) pairs
        d[2 * i] = ((0,), (i + 1,))
        if i == 10:
            assert d._code.typecode == "h"
    assert d._code.typecode == "i"
    assert d[0] == ((0,), (1,)) and d[2 * 32_768] == ((0,), (32_769,)) and d.get(1) is None
    assert d.ids().tolist() == list(range(0, 66_000, 2)) and len(d) == 33_000


def test_lists_turn_sparse_with_the_first_copy_made_per_site_and_stay_plain_without_one():
    """The records' components, the units and the catalogue's names are
    plain lists (read at C speed) in a world without applications made per
    site, and sparse once such a copy is kept as columns (the city's: a
    block of defaults keeps no slots); the outputs do not depend on it
    (the golden runs and the property tests compare them)."""
    from pathlib import Path

    from suanli.scheduling.state import SparseList
    from suanli.sim.simulation import Simulation

    city = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"
    sim = Simulation(load_world([city], {"cars": "3000"}), seed=1, until=30.0)
    sim.run()
    ledger = sim.ledger
    assert type(ledger.units.unit) is SparseList and type(ledger.tasks.component) is SparseList
    names = ledger.tasks.names._c._names
    assert type(names) is SparseList
    kept = sum(b is not None for b in ledger.units.unit._blocks)
    assert kept < len(ledger.units.unit._blocks) / 2, kept  # not vacuous: most blocks keep no slots
    assert sim.view.counts()["running"] > 8_000

    jobs = Path(__file__).resolve().parents[2] / "shared" / "examples" / "ai-hpc-mix.yaml"
    sim = Simulation(load_world([jobs]), seed=1, until=600.0)
    sim.run()
    assert type(sim.ledger.units.unit) is list and type(sim.ledger.tasks.component) is list
    assert len(sim.ledger.units.unit) > 10
