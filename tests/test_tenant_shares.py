"""Weighted dominant shares over the ``[T, R]`` usage table: the vectorized
``dominant_shares`` gives exactly the per-tenant computation's values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu, node_group, site, tenant, world
from suanli.scheduling.state import PlacementState
from suanli.spec.build import load_world

N_TENANTS = 6


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> PlacementState:
    path = world(tmp_path_factory.mktemp("shares"),
                 sites=[site("s1", groups=[node_group(count=3, accelerators=[gpu(2)])])],
                 tenants=[tenant(f"t{i}", weight=1 + i * 0.75) for i in range(N_TENANTS)])
    return PlacementState(load_world([path]))


def per_tenant(used: np.ndarray, total: np.ndarray, weight: float) -> float:
    """One tenant's share, as it was computed tenant by tenant."""
    share = used / np.maximum(total, 1)
    return float(share.max(initial=0.0)) / weight


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_vectorized_shares_equal_per_tenant(state, data):
    r = state.used.shape[1]
    used = np.array(data.draw(st.lists(st.lists(st.integers(0, 10**12), min_size=r, max_size=r),
                                       min_size=N_TENANTS, max_size=N_TENANTS)), np.int64)
    weights = data.draw(st.lists(st.floats(0.01, 1000), min_size=N_TENANTS, max_size=N_TENANTS))
    state.used[:] = used
    world_weights = state.weights.copy()
    try:
        shares = state.dominant_shares()
        for i, name in enumerate(state.tenant_index):  # the world's weights, and one tenant by name
            assert shares[i] == per_tenant(used[i], state.total, state.world.tenants[name].weight)
            assert state.dominant_share(name) == shares[i] == state.share_by_tenant()[name]
            assert np.array_equal(state.tenant_used[name], used[i])
        state.weights[:] = weights  # random weights
        rows = np.array(data.draw(st.lists(st.integers(0, N_TENANTS - 1), max_size=N_TENANTS)), np.intp)
        expect = [per_tenant(used[i], state.total, weights[i]) for i in rows]
        assert state.dominant_shares(rows).tolist() == expect
    finally:
        state.used[:] = 0
        state.weights[:] = world_weights
