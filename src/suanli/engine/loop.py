"""The event loop: one priority queue ordered by ``(time, sequence)``.

Events scheduled for the same time run in the order they were scheduled, so
a run is deterministic. Handlers may schedule more events; the loop stops at
``until`` (events after it stay queued) or when the queue is empty.

Other threads (a real executor's watchers) hand events in with ``post``: they
are queued at the time the loop takes them, before the next instant. On a
wall clock that can be woken, the loop waits for them until ``until`` even
with nothing queued.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Any, Callable

from suanli.engine.clock import Clock, VirtualClock


class EventLoop:
    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or VirtualClock()
        self._queue: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()
        self._posted: deque[Any] = deque()  # appended by other threads
        self.on_post: Callable[[], None] | None = None  # called after each post (a driver's wake-up)
        self._wakeable = hasattr(self.clock, "wake")
        self._cancelled: set[tuple[float, Any]] = set()  # (time, event) taken back: never delivered

    def __len__(self) -> int:
        return len(self._queue)

    def now(self) -> float:
        return self.clock.now()

    def schedule(self, at: float, event: Any) -> None:
        """Queue ``event`` at time ``at`` (never before now)."""
        heapq.heappush(self._queue, (max(at, self.now()), next(self._seq), event))

    def cancel(self, at: float, event: Any) -> None:
        """Take back ``event`` queued at ``at`` (equal events there go too): it
        is never delivered, and makes no instant of its own."""
        self._cancelled.add((at, event))

    def _drop_cancelled(self) -> None:
        q = self._queue
        while q and (q[0][0], q[0][2]) in self._cancelled:
            self._cancelled.discard((q[0][0], q[0][2]))
            heapq.heappop(q)

    def post(self, event: Any) -> None:
        """Hand ``event`` in from any thread; it happens when the loop next looks."""
        self._posted.append(event)
        if self._wakeable:
            self.clock.wake()
        if self.on_post is not None:
            self.on_post()

    def _take_posted(self) -> None:
        now = self.now()
        while self._posted:
            self.schedule(now, self._posted.popleft())

    def peek_time(self) -> float | None:
        if self._posted:
            self._take_posted()
        if self._cancelled:
            self._drop_cancelled()
        return self._queue[0][0] if self._queue else None

    def run_due(self, handle: Callable[[float, list[Any]], None], until: float) -> None:
        """Deliver, as ``run`` does, every event due by ``until``, without waiting."""
        if self._posted:
            self._take_posted()
        if self._cancelled:
            self._drop_cancelled()
        while self._queue and self._queue[0][0] <= until:
            t = self._queue[0][0]
            handle(t, self._instant(t))
            if self._posted:
                self._take_posted()
            if self._cancelled:
                self._drop_cancelled()

    def run(self, handle: Callable[[float, list[Any]], None], until: float | None = None) -> float:
        """Deliver events in order, all those of one instant together, until ``until``.

        ``handle(t, events)`` gets every event due at ``t`` in sequence order;
        returns the time the loop stopped at.
        """
        while True:
            if self._posted:
                self._take_posted()
            if self._cancelled:
                self._drop_cancelled()
            if not self._queue or (until is not None and self._queue[0][0] > until):
                if until is None or not self._wakeable or self.clock.wait_until(until):
                    break
                continue  # woken before the end: something was posted
            t = self._queue[0][0]
            if not self.clock.wait_until(t):
                continue  # woken early: a posted event may come first
            handle(t, self._instant(t))
        if until is None:
            return self.now()
        self.clock.wait_until(until)
        return until

    def _instant(self, t: float) -> list[Any]:
        """Take every event queued at ``t`` off the queue, in sequence order."""
        batch = []
        while self._queue and self._queue[0][0] == t:
            event = heapq.heappop(self._queue)[2]
            if not self._cancelled or (t, event) not in self._cancelled:
                batch.append(event)
            else:
                self._cancelled.discard((t, event))
        return batch
