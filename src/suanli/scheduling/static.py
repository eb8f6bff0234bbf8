"""Static scheduling: place a world once, through both layers.

``schedule(world, seed)`` reads as its steps: build the tables, let the
global layer place the virtual clusters' fixed hosts, cut the applications
into units, let the business layer place them (growing elastic groups and
fitting default-VC hosts as it goes), and return the outcome as data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from suanli.model.work import World, task_count
from suanli.scheduling.business_layer import BusinessLayer, Unscheduled
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
    n_tasks = sum(task_count(app) for app in world.apps)
    business = BusinessLayer(state, global_layer, rng, policy=policy_for(world, policy))
    business.run_apps(world.apps)  # each unit made when its turn comes, and let go once placed
    return Outcome(state, business.unscheduled, global_layer.unplaced, n_tasks)
