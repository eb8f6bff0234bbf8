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
