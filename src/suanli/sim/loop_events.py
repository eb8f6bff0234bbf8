"""What the event loop carries between the parts of a simulation.

The executors' events (a run finished, a task exited, a node lost or found)
are in ``executors.base``; these are the simulation's own: arrivals, the
scenario's events, and the wake-ups its parts ask for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from suanli.model.work import Application


@dataclass(frozen=True, slots=True)
class Submit:
    app: Application
    ended: Mapping[str, str] | None = None  # tasks that ended before (a restarted control plane) -> status


@dataclass(frozen=True, slots=True)
class Restore:
    apps: tuple[tuple[Application, Mapping[str, str]], ...]  # a restarted control plane's, with their ended tasks


@dataclass(frozen=True, slots=True)
class NextArrival:
    index: int  # which generator


@dataclass(frozen=True, slots=True)
class Leave:
    app: str  # a trace's application leaving at its recorded time


@dataclass(frozen=True, slots=True)
class ClaimEnded:
    claim: int


@dataclass(frozen=True, slots=True)
class MoveDone:
    task: str
    move: int  # which move of the simulation (a later stop makes it stale)


@dataclass(frozen=True, slots=True)
class Wake:
    """Nothing but a reason to look again (a hysteresis or an idle time is up)."""


@dataclass(frozen=True, slots=True)
class ScenarioEvent:
    spec: Any  # one of schema's event specs


@dataclass(frozen=True, slots=True)
class NextMove:
    index: int  # which mobility stream: its pending event is due


@dataclass(frozen=True, slots=True)
class Update:
    """A new revision of a running application, rolled out (``rollout.py``)."""

    app: Application
    revision: int
    max_unavailable: int | str
    max_surge: int | str = 0
