"""The event log as every part of a simulation writes it.

One ``Logbook`` is shared by the event engine, the global layer's state, the
shard and the rescheduler: events go in time order, with the node's and
site's names (kept for the nodes named lately), and the hosts added or removed since
the last event come first, before what they made possible.
"""

from __future__ import annotations

from typing import Any

from suanli.sim.events import EventLog

# Nodes whose names are kept made. Events name the same few nodes again and
# again (an edge's, a cloud's), but a million devices each named a few times
# would keep 200 bytes each for the run: past this many the names are dropped
# and made again as they are asked for.
NAMES_KEPT = 1 << 16


class Logbook:
    __slots__ = ("world", "state", "events", "_names", "_stamp")

    def __init__(self, world: Any, state: Any, events: EventLog) -> None:
        self.world, self.state, self.events = world, state, events
        self._names: dict[int, tuple[str, str]] = {}  # node -> its name and its site's
        self._stamp: tuple[float | None, float] = (None, 0.0)  # an instant's time and its rounding

    def log(self, t: float, kind: str, **fields: Any) -> None:
        if self.state.journal:
            self.flush_hosts(t)  # host changes come before what they made possible
        at, rounded = self._stamp
        if t is not at:  # round() is slow, and an instant logs many events with the one time object
            self._stamp = t, (rounded := round(t, 6))
        self.events.append({"t": rounded, "kind": kind, **fields})

    def flush_hosts(self, t: float, **why: Any) -> None:
        """Log the hosts added and removed since the last event."""
        changes = self.state.journal
        if not changes:  # most instants change no host
            return
        self.state.journal = {}
        name = self.world.fleet.node_name
        rounded = round(t, 6)
        append = self.events.append
        for (kind, _, _), h in changes.items():
            append({"t": rounded, "kind": kind, "vc": h.vc, "host": h.name, "node": name(h.node), **why})

    def names_of(self, node: int) -> tuple[str, str]:
        """The node's name and its site's (kept while few nodes are named: ``NAMES_KEPT``)."""
        names = self._names.get(node)
        if names is None:
            fleet = self.world.fleet
            if len(self._names) >= NAMES_KEPT:
                self._names.clear()
            names = self._names[node] = (fleet.node_name(node), fleet.site_name_of(node))
        return names

    def where(self, node: int) -> dict[str, str]:
        names = self.names_of(node)
        return {"node": names[0], "site": names[1]}
