"""Partitions of table rows into domains: coupling levels and affinity scopes.

A domain array holds one integer code per row (-1: the row is in no domain of
that kind). Gangs and affinity groups are placed inside one domain.
"""

from __future__ import annotations

import numpy as np

from suanli.model.fleet import FABRIC_LEVELS
from suanli.model.network import Network
from suanli.scheduling.table import CandidateTable


def coupling_domain(table: CandidateTable, network: Network, level: str) -> np.ndarray:
    """Rows sharing a code share a domain of ``level`` (coherent .. ethernet, or wan)."""
    if level == "wan":
        return network.component[table.view("site")].astype(np.int64)
    return table.view("fabric")[:, FABRIC_LEVELS.index(level)].astype(np.int64)


def scope_domain(table: CandidateTable, network: Network, scope: str, level: str = "ethernet") -> np.ndarray:
    """Affinity scopes: one node, one site, mutually reachable, or one fabric domain."""
    if scope == "node":
        return table.view("node").astype(np.int64)
    if scope == "site":
        return table.view("site").astype(np.int64)
    if scope == "reachable":
        return network.component[table.view("site")].astype(np.int64)
    return coupling_domain(table, network, level)


def tightest(levels) -> str | None:
    """The tightest coupling among ``levels`` (None if none given)."""
    order = (*FABRIC_LEVELS, "wan")
    given = [lv for lv in levels if lv is not None]
    return min(given, key=order.index) if given else None
