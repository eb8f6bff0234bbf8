"""The world as the console draws it (``world.json`` beside a run's results,
and the live server's own): tenants, sites with their tier, region, nodes and
capacity, the links between listed sites, and device populations aggregated
per site they attach to, so that a million devices are a few numbers per edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from suanli.model.fleet import TIERS
from suanli.model.work import World


def world_json(world: World) -> dict[str, Any]:
    fleet = world.fleet
    table = fleet.site_table
    n_sites = len(table)
    keys = list(fleet.resource_keys)
    nodes = np.bincount(fleet.node_site, minlength=n_sites)
    capacity = np.zeros((n_sites, len(keys)), np.int64)
    np.add.at(capacity, fleet.node_site, fleet.node_capacity)
    listed = np.flatnonzero(table.population_of < 0)
    tiers, regions = table.tier_names(), table.region_names()
    sites = [{"name": table.names.name(int(s)), "tier": str(tiers[s]), "region": str(regions[s]),
              "nodes": int(nodes[s]), "capacity": {k: int(v) for k, v in zip(keys, capacity[s]) if v}}
             for s in listed.tolist()]
    links = fleet.link_arrays
    pop_a, pop_b = table.population_of[links.a], table.population_of[links.b]
    both = (pop_a < 0) & (pop_b < 0)
    out_links = [{"between": [table.names.name(int(a)), table.names.name(int(b))], "rtt_ms": float(r),
                  "bandwidth_mbps": float(w)}
                 for a, b, r, w in zip(links.a[both].tolist(), links.b[both].tolist(),
                                       links.rtt_ms[both].tolist(), links.bandwidth_mbps[both].tolist())]
    populations = []
    for p, name in enumerate(table.population_names):
        members = np.flatnonzero(table.population_of == p)
        if not members.size:
            continue
        # the listed site each member's links reach: devices per edge
        member_a = (pop_a == p) & (pop_b < 0)
        member_b = (pop_b == p) & (pop_a < 0)
        to = np.concatenate([links.b[member_a], links.a[member_b]])
        attached, counts = np.unique(to, return_counts=True)
        populations.append({
            "name": name, "tier": str(tiers[members[0]]), "count": int(members.size),
            "nodes": int(nodes[members].sum()),
            "capacity": {k: int(v) for k, v in zip(keys, capacity[members].sum(axis=0)) if v},
            "first": table.names.name(int(members[0])), "last": table.names.name(int(members[-1])),
            "attached": {table.names.name(int(s)): int(c) for s, c in zip(attached.tolist(), counts.tolist())},
        })
    tenants = [{"name": t.name, "weight": t.weight, "allowed_sites": list(t.allowed_sites),
                "quota": {k: int(v) for k, v in zip(keys, _quota_vector(fleet, t.quota)) if v},
                **({"cohort": t.cohort, "reclaim": t.reclaim,
                    "borrowing_limit": _limits(fleet, keys, t.borrowing_limit or {}),
                    "lending_limit": _limits(fleet, keys, t.lending_limit)}
                   if t.cohort is not None else {})}
               for t in world.tenants.values()]
    return {"resources": keys, "tiers": list(TIERS), "sites": sites, "links": out_links,
            "populations": populations, "tenants": tenants,
            "vcs": {name: vc.tenant for name, vc in world.vcs.items()}}


def _limits(fleet, keys: list[str], limits) -> dict[str, int]:
    """A cohort member's borrowing or lending limits by resource key, those it names (0 included)."""
    return {key: int(limits[name]) for key, name in zip(keys, fleet.resources) if name in limits}


def _quota_vector(fleet, quota) -> list[int]:
    """A tenant's quota (resource name -> canonical amount) per resource key (0: no bound)."""
    return [int(quota.get(name, 0)) for name in fleet.resources]
