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


def combine_domains(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Codes for the intersection of two partitions (-1 where either is -1)."""
    width = int(b.max()) + 1 if b.size else 1
    return np.where((a >= 0) & (b >= 0), a.astype(np.int64) * max(width, 1) + b, -1)


def levels_of(levels) -> tuple[str, ...]:
    """Distinct coupling levels, tightest first (None dropped)."""
    order = (*FABRIC_LEVELS, "wan")
    return tuple(sorted({lv for lv in levels if lv is not None}, key=order.index))


def couplings_domain(table: CandidateTable, network: Network, levels) -> tuple[np.ndarray | None, tuple[str, ...]]:
    """One domain of every given level at once. Fabric domains need not nest
    (two nodes may share a coherent domain but not an ib one), so each level is
    intersected rather than the tightest one assumed to imply the others.
    Returns the domain codes (None without levels) and the levels."""
    levels = levels_of(levels)
    if not levels:
        return None, ()
    domain = coupling_domain(table, network, levels[0])
    for level in levels[1:]:
        domain = combine_domains(domain, coupling_domain(table, network, level))
    return domain, levels


def tightest(levels) -> str | None:
    """The tightest coupling among ``levels`` (None if none given)."""
    order = (*FABRIC_LEVELS, "wan")
    given = [lv for lv in levels if lv is not None]
    return min(given, key=order.index) if given else None
