"""The event log of a simulated run (``events.jsonl``), in time order.

A short run keeps its log in memory, as a list of dicts. A long one streams
it to a file as it grows: a million tasks make several million events, more
than memory should hold. Either way the log keeps, as events are appended,
what the figures and the report need from it: counts by kind and by cause,
the state bytes and downtime of migrations, and the events the report draws
one by one (moves and incidents, ``NOTABLE``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

MOVE_KINDS = ("nodeDown", "nodeUp", "nodeDrain", "linkDown", "linkUp", "lost", "requeued", "preempted", "migrated")
INCIDENT_KINDS = ("nodeDown", "nodeUp", "nodeDrain", "linkDown", "linkUp", "deviceBusy")
NOTABLE = frozenset(MOVE_KINDS + INCIDENT_KINDS)


_ENCODER = json.JSONEncoder(separators=(",", ":"))  # made once: json.dumps would make one per call


def encode(event: dict[str, Any]) -> str:
    """One line of ``events.jsonl`` (what ``json.dumps(event, separators=(",", ":"))`` gives)."""
    return _ENCODER.encode(event) + "\n"


class EventLog:
    """Append-only; with ``to``, each event is written there as it comes and only
    the running figures and ``notable`` events stay in memory."""

    def __init__(self, to: Path | None = None) -> None:
        self.kinds: Counter = Counter()
        self.causes: Counter = Counter()  # why work was disturbed: each preemption and move once
        self.migrated_bytes = 0
        self.migrated_downtime_s = 0.0
        self.notable: list[dict[str, Any]] = []
        self.path = to
        self._list: list[dict[str, Any]] | None = [] if to is None else None
        self._file = open(to, "w", encoding="utf-8") if to is not None else None
        self._n = 0

    def append(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        self._n += 1
        self.kinds[kind] += 1
        if "cause" in event:
            self.causes[event["cause"]] += 1
        if kind in NOTABLE:
            self.notable.append(event)
            if kind == "migrated":
                self.migrated_bytes += int(event.get("bytes", 0))
                self.migrated_downtime_s += float(event.get("downtime_s", 0.0))
        if self._list is not None:
            self._list.append(event)
        else:
            self._file.write(encode(event))

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._list is not None:
            return iter(self._list)
        return self._read()

    def __getitem__(self, i):
        if self._list is None:
            raise TypeError("a streamed event log is read by iterating over it")
        return self._list[i]

    def _read(self) -> Iterator[dict[str, Any]]:
        if not self._file.closed:
            self._file.flush()
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)

    def close(self) -> None:
        """Flush a streamed log to its file (nothing to do for one in memory)."""
        if self._file is not None and not self._file.closed:
            self._file.close()
