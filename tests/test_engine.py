"""The event loop and its clocks."""

from __future__ import annotations

import time

from suanli.engine.clock import VirtualClock, WallClock
from suanli.engine.loop import EventLoop


def _collect(loop, until=None):
    seen = []
    end = loop.run(lambda t, batch: seen.append((t, list(batch))), until)
    return seen, end


def test_events_come_in_time_then_scheduling_order():
    loop = EventLoop()
    for at, name in [(5, "c"), (1, "a"), (5, "d"), (3, "b"), (1, "a2")]:
        loop.schedule(at, name)
    seen, end = _collect(loop)
    assert seen == [(1, ["a", "a2"]), (3, ["b"]), (5, ["c", "d"])]
    assert end == 5 and loop.now() == 5


def test_until_stops_and_keeps_later_events():
    loop = EventLoop()
    loop.schedule(1, "a")
    loop.schedule(10, "b")
    seen, end = _collect(loop, until=4)
    assert seen == [(1, ["a"])] and end == 4 and len(loop) == 1 and loop.now() == 4


def test_handlers_schedule_more_and_never_in_the_past():
    loop = EventLoop()
    order = []

    def handle(t, batch):
        order.extend(batch)
        if "start" in batch:
            loop.schedule(t, "same-instant")  # runs as the next batch, at the same time
            loop.schedule(t - 5, "late")  # clamped to now
            loop.schedule(t + 2, "later")

    loop.schedule(3, "start")
    loop.run(handle)
    assert order == ["start", "same-instant", "late", "later"] and loop.now() == 5


def test_virtual_clock_jumps():
    clock = VirtualClock()
    clock.wait_until(3600)
    assert clock.now() == 3600
    clock.wait_until(10)  # never backwards
    assert clock.now() == 3600


def test_wall_clock_runs_a_tiny_scenario_in_real_time():
    start = time.monotonic()  # before the clock's origin: the last event is due 0.08 s after that origin
    loop = EventLoop(WallClock())
    stamps = []
    for at in (0.02, 0.05, 0.08):
        loop.schedule(at, at)
    loop.run(lambda t, batch: stamps.append((t, loop.now())))
    assert [t for t, _ in stamps] == [0.02, 0.05, 0.08]
    assert all(now >= t for t, now in stamps)  # an event is never delivered early
    assert time.monotonic() - start >= 0.08


def test_a_cancelled_event_is_never_delivered_and_makes_no_instant():
    loop = EventLoop()
    seen = []
    loop.schedule(1.0, "a")
    loop.schedule(5.0, "stale")
    loop.schedule(3.0, "b")
    loop.schedule(3.0, "also stale")
    loop.cancel(5.0, "stale")
    loop.cancel(3.0, "also stale")
    end = loop.run(lambda t, evs: seen.append((t, evs)))
    assert seen == [(1.0, ["a"]), (3.0, ["b"])]
    assert end == 3.0  # the run ends with its last event, not at the taken-back one
