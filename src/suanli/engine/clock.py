"""Clocks: virtual time for simulation, wall time for live runs.

The event loop asks the clock for ``now`` and tells it to ``wait_until`` the
next event; a virtual clock jumps there at once, a wall clock sleeps. The
scheduler never knows which one runs it.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def wait_until(self, t: float) -> bool:
        """Wait for ``t``; False when woken before it (``wake``)."""


class WakeableClock(Clock, Protocol):
    def wake(self) -> None:
        """End a ``wait_until`` early (another thread has news)."""


class VirtualClock:
    """Simulated seconds: waiting is a jump."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = start

    def now(self) -> float:
        return self._t

    def wait_until(self, t: float) -> bool:
        if t > self._t:
            self._t = t
        return True


class WallClock:
    """Real seconds since the clock was made, optionally sped up by ``speed``."""

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be above 0")
        self.speed = speed
        self._origin = time.monotonic()
        self._woken = threading.Event()

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.speed

    def wait_until(self, t: float) -> bool:
        delay = (t - self.now()) / self.speed
        if delay <= 0:
            return True
        woken = self._woken.wait(delay)
        self._woken.clear()  # events posted meanwhile are on the loop's list, looked at next
        return not woken

    def wake(self) -> None:
        self._woken.set()
