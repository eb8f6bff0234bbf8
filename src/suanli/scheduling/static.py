"""Static scheduling: place a world once, through both layers.

``schedule(world, seed)`` reads as its steps: build the tables, let the
global layer place the virtual clusters' fixed hosts, cut the applications
into units, let the business layer place them (growing elastic groups and
fitting default-VC hosts as it goes), and return the outcome as data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from suanli.model.work import World
from suanli.scheduling.business_layer import BusinessLayer, Unscheduled, build_units
from suanli.scheduling.global_layer import GlobalLayer, UnplacedHosts
from suanli.scheduling.policies import policy_for
from suanli.scheduling.state import PlacementState


@dataclass
class Outcome:
    state: PlacementState
    unscheduled: list[Unscheduled]
    unplaced_hosts: list[UnplacedHosts]
    n_tasks: int


def schedule(world: World, seed: int | None = None, policy: str | None = None) -> Outcome:
    """``policy``: a placement policy's name (policies.py); default: the Scenario's, else ``default``."""
    rng = np.random.default_rng(world.seed if seed is None else seed)
    state = PlacementState(world)
    global_layer = GlobalLayer(state, rng)
    global_layer.place_initial()
    units = build_units(world.apps)
    n_tasks = sum(len(u.tasks) for u in units)
    business = BusinessLayer(state, global_layer, rng, policy=policy_for(world, policy))
    handed, units = [units], None  # no list kept here: a unit goes once it is placed (10^7 units are 2 GiB)
    business.run(handed.pop())
    return Outcome(state, business.unscheduled, global_layer.unplaced, n_tasks)
