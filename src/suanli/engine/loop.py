"""The event loop: one priority queue ordered by ``(time, sequence)``.

Events scheduled for the same time run in the order they were scheduled, so
a run is deterministic. Handlers may schedule more events; the loop stops at
``until`` (events after it stay queued) or when the queue is empty.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable

from suanli.engine.clock import Clock, VirtualClock


class EventLoop:
    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or VirtualClock()
        self._queue: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._queue)

    def now(self) -> float:
        return self.clock.now()

    def schedule(self, at: float, event: Any) -> None:
        """Queue ``event`` at time ``at`` (never before now)."""
        heapq.heappush(self._queue, (max(at, self.now()), next(self._seq), event))

    def peek_time(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def run_due(self, handle: Callable[[float, list[Any]], None], until: float) -> None:
        """Deliver, as ``run`` does, every event due by ``until``, without waiting."""
        while self._queue and self._queue[0][0] <= until:
            t = self._queue[0][0]
            handle(t, self._instant(t))

    def run(self, handle: Callable[[float, list[Any]], None], until: float | None = None) -> float:
        """Deliver events in order, all those of one instant together, until ``until``.

        ``handle(t, events)`` gets every event due at ``t`` in sequence order;
        returns the time the loop stopped at.
        """
        while self._queue:
            t = self._queue[0][0]
            if until is not None and t > until:
                break
            self.clock.wait_until(t)
            handle(t, self._instant(t))
        end = self.now() if until is None else max(until, self.now())
        if until is not None:
            self.clock.wait_until(until)
        return end

    def _instant(self, t: float) -> list[Any]:
        """Take every event queued at ``t`` off the queue, in sequence order."""
        batch = []
        while self._queue and self._queue[0][0] == t:
            batch.append(heapq.heappop(self._queue)[2])
        return batch
