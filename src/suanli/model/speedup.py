"""How fast a job's work goes on a given allocation: a component's speed-up model.

A job's ``work`` is task-time at parallelism 1; a model says how many
task-seconds of it a second of running does on ``members`` members spread
over ``nodes`` nodes that share ``fabric`` (``speed``). The work left is
integrated over time as the allocation changes (``advance``), so a job that
is resized runs each stretch at the speed of that stretch's allocation.

- ``Formula`` (the default): ``p * efficiency ** log2(p)``, the same for
  every fabric.
- ``Table``: measured speed-ups by members (``{1: 1.0, 2: 1.9, 4: 3.5}``),
  read linearly between points, proportionally below the first and flat
  beyond the last (more members than measured buy nothing).
- ``Amdahl``: a serial fraction ``s`` and a communication cost per step by
  the fabric the members share: a step of ``step`` seconds on one member
  takes ``step * (s + (1 - s) / p) + sync`` on ``p``, where ``sync`` is the
  fabric's time per step (``coherent`` within one node; between nodes the
  gang's fabric, growing with ``log2`` of the nodes spanned) and zero alone.
- ``Parts``: a job split into equal parts (``decompose``), ``p`` at a
  time: in waves.
- ``Measured``: a deep-learning job's measured profile (``profiles.py``):
  throughput by GPUs, nodes and batch size, and statistical efficiency by
  batch size, as Pollux models them. Its work is the profile's progress to
  its last epoch, in steps at the smallest batch size; its speed changes at
  epoch boundaries, and with ``batch`` unset it runs at the batch size of
  best goodput for its allocation.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

FABRICS = ("coherent", "ib", "roce", "ethernet")


@dataclass(frozen=True, slots=True)
class Formula:
    efficiency: float = 1.0
    kind = "formula"

    def speed(self, members: int, nodes: int = 1, fabric: str | None = None, done: float = 0.0,
              placement: tuple[int, ...] | None = None) -> float:
        if members <= 0:
            return 0.0
        return members * self.efficiency ** math.log2(members)

    def json(self) -> dict[str, Any]:
        return {"model": "formula", "efficiency": self.efficiency}


@dataclass(frozen=True, slots=True)
class Table:
    points: tuple[tuple[int, float], ...]  # (members, speed-up), members rising
    kind = "table"

    def speed(self, members: int, nodes: int = 1, fabric: str | None = None, done: float = 0.0,
              placement: tuple[int, ...] | None = None) -> float:
        if members <= 0:
            return 0.0
        pts = self.points
        first_p, first_s = pts[0]
        if members <= first_p:
            return first_s * members / first_p
        if members >= pts[-1][0]:
            return pts[-1][1]
        i = bisect_right([p for p, _ in pts], members)
        (p0, s0), (p1, s1) = pts[i - 1], pts[i]
        return s0 + (s1 - s0) * (members - p0) / (p1 - p0)

    def json(self) -> dict[str, Any]:
        return {"model": "table", "table": {str(p): s for p, s in self.points}}


@dataclass(frozen=True, slots=True)
class Amdahl:
    serial: float = 0.0
    step_s: float = 1.0
    sync_s: tuple[tuple[str, float], ...] = ()  # (fabric, seconds per step)
    kind = "amdahl"

    def sync(self, members: int, nodes: int, fabric: str | None) -> float:
        if members <= 1 or not self.sync_s:
            return 0.0
        costs = dict(self.sync_s)
        slowest = max(costs.values())
        if nodes <= 1:
            return costs.get("coherent", 0.0)
        per = costs.get(fabric or "ethernet", costs.get("ethernet", slowest))
        return per * (1.0 + math.log2(nodes))

    def speed(self, members: int, nodes: int = 1, fabric: str | None = None, done: float = 0.0,
              placement: tuple[int, ...] | None = None) -> float:
        if members <= 0:
            return 0.0
        step = self.step_s * (self.serial + (1.0 - self.serial) / members) + self.sync(members, nodes, fabric)
        return self.step_s / step

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": "amdahl", "serialFraction": self.serial}
        if self.sync_s:
            out["stepS"] = self.step_s
            out["syncS"] = dict(self.sync_s)
        return out


@lru_cache(maxsize=64)
def _profile(directory: str):
    from suanli.model.profiles import Profile

    return Profile.load(directory)


@dataclass(frozen=True, slots=True)
class Measured:
    directory: str  # a profile in the Pollux artifact's format (placements, scalability, validation-*.csv)
    batch: int | None = None  # fixed total batch size; None: the best for the allocation
    kind = "measured"

    @property
    def profile(self):
        return _profile(self.directory)

    def work(self) -> float:
        """Progress to the last epoch, in steps at the smallest batch size."""
        return float(self.profile.total)

    def speed(self, members: int, nodes: int = 1, fabric: str | None = None, done: float = 0.0,
              placement: tuple[int, ...] | None = None) -> float:
        if members <= 0:
            return 0.0
        return self.profile.rate(placement or _packed(members, nodes), done, self.batch)

    def time_to_finish(self, left: float, members: int, nodes: int, placement: tuple[int, ...] | None,
                       batch: int | None = None) -> float:
        prof = self.profile
        return prof.time_to_finish(placement or _packed(members, nodes), prof.total - left,
                                   self.batch if batch is None else batch)

    def advance(self, left: float, seconds: float, members: int, nodes: int,
                placement: tuple[int, ...] | None, batch: int | None = None) -> float:
        prof = self.profile
        done = prof.advance(placement or _packed(members, nodes), prof.total - left, seconds,
                            self.batch if batch is None else batch)
        return max(prof.total - done, 0.0)

    def json(self) -> dict[str, Any]:
        return {"model": "profile", "profile": Path(self.directory).name,
                **({"batchSize": self.batch} if self.batch else {})}


@dataclass(frozen=True, slots=True)
class Parts:
    """A job of ``parts`` equal parts run ``p`` at a time (``decompose``): in
    ``ceil(parts / p)`` waves of one part's time each, so ``p`` slots do
    ``parts / ceil(parts / p)`` times one's work a second."""

    parts: int
    kind = "parts"

    def speed(self, members: int, nodes: int = 1, fabric: str | None = None, done: float = 0.0,
              placement: tuple[int, ...] | None = None) -> float:
        if members <= 0:
            return 0.0
        return self.parts / math.ceil(self.parts / min(members, self.parts))

    def json(self) -> dict[str, Any]:
        return {"model": "parts", "parts": self.parts}


Speedup = Formula | Table | Amdahl | Measured | Parts
DEFAULT = Formula(1.0)


def members_per_node(nodes: Iterable[int]) -> tuple[int, ...]:
    """Members per node, nodes in the order the members name them."""
    return tuple(Counter(nodes).values())


def _packed(members: int, nodes: int) -> tuple[int, ...]:
    """Members spread as evenly as they go over ``nodes`` nodes."""
    nodes = max(1, min(nodes, members))
    base, extra = divmod(members, nodes)
    return tuple(base + (1 if i < extra else 0) for i in range(nodes))


def time_to_finish(model: Speedup, left: float, members: int, nodes: int = 1, fabric: str | None = None,
                   placement: tuple[int, ...] | None = None) -> float:
    """Seconds to do ``left`` work at a constant allocation (inf on none)."""
    if left <= 0:
        return 0.0
    if isinstance(model, Measured):
        return model.time_to_finish(left, members, nodes, placement) if members > 0 else math.inf
    s = model.speed(members, nodes, fabric)
    return left / s if s > 0 else math.inf


def advance(model: Speedup, left: float, seconds: float, members: int, nodes: int = 1,
            fabric: str | None = None, placement: tuple[int, ...] | None = None) -> float:
    """The work left after running ``seconds`` at a constant allocation."""
    if left <= 0 or seconds <= 0 or members <= 0:
        return max(left, 0.0)
    if isinstance(model, Measured):
        return model.advance(left, seconds, members, nodes, placement)
    return max(left - seconds * model.speed(members, nodes, fabric), 0.0)
