"""Scores: pure functions from (table, request, rows) to vectors in 0..100.

Higher is better. The framework sums them with ``WEIGHTS`` and picks the
best row with a seeded tie-break (``select.py``).
"""

from __future__ import annotations

import numpy as np

from suanli.model.network import Network
from suanli.scheduling.filters import usable_slots
from suanli.scheduling.request import Request
from suanli.scheduling.table import CandidateTable

# Why these weights: keeping a task near its site and off hardware it does
# not use matter more than packing tightly; packing breaks the remaining ties.
WEIGHTS = {"fit": 1.0, "devices": 2.0, "near": 3.0, "data": 1.0}
_PREFERENCE_RTT_MS = 100.0  # scale for `near` without a bound
_DATA_RTT_MS = 10.0  # the rtt at which the data score halves


def fit(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """Most-allocated after placement over the requested dimensions (bin packing);
    for fractional devices, also the best-fitting device's leftover share."""
    cap = table.cap[rows]
    dims = req.vec > 0
    if req.whole_node or not dims.any():
        used = (cap - table.free[rows]).sum(axis=1) / np.maximum(cap.sum(axis=1), 1)
        out = 100.0 * used
    else:
        after = cap[:, dims] - table.free[rows][:, dims] + req.vec[dims]
        out = 100.0 * (after / np.maximum(cap[:, dims], 1)).mean(axis=1)
    for need, ok in zip(req.accels, usable_slots(table, req)):
        if need.whole:
            continue
        dev_free = table.dev_free[rows]
        fits = ok[rows] & (dev_free >= need.milli)
        best = np.where(fits, dev_free, 10_000).min(axis=1)
        leftover = np.clip(best - need.milli, 0, 1000)
        out = 0.5 * out + 0.5 * (100.0 - leftover / 10.0)
    return out


def devices(table: CandidateTable, req: Request, rows: np.ndarray) -> np.ndarray:
    """100 on rows with no accelerator kinds the request leaves unused, else 0:
    CPU work should not strand GPUs."""
    kinds = table.cap[rows][:, 2:]
    unused = kinds[:, req.vec[2:] == 0].sum(axis=1) > 0
    return np.where(unused, 0.0, 100.0)


def near(table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
    rtt = network.rtt_ms[table.site[rows], req.near_site]
    scale = req.near_max_ms if req.near_max_ms else _PREFERENCE_RTT_MS
    return 100.0 * np.clip(1.0 - rtt / max(scale, 1e-9), 0.0, 1.0)


def data(table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
    rtt = network.rtt_ms[np.ix_(table.site[rows], list(req.data_sites))].sum(axis=1)
    return 100.0 / (1.0 + rtt / _DATA_RTT_MS)


def total(table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
    s = WEIGHTS["fit"] * fit(table, req, rows) + WEIGHTS["devices"] * devices(table, req, rows)
    if req.near_site >= 0:
        s += WEIGHTS["near"] * near(table, req, rows, network)
    if req.data_sites:
        s += WEIGHTS["data"] * data(table, req, rows, network)
    return s
