"""The units waiting to run, and those of them parked until something changes.

A unit that cannot fit because of something only one kind of event can undo
(every member bound near a device that is offline) is parked under that
device: the pass of each instant does not try it again, explain it again or
look for victims for it. The device's return wakes it. Waiting units are
tried in the order they were queued, parked or not: a woken unit takes its
old place again.
"""

from __future__ import annotations

from typing import Hashable, Iterator

ENABLED = True  # False: every waiting unit is tried at every instant (the reference the tests compare with)
SHRINK_FROM = 4096  # a queue that held at least this many units is copied anew once it holds an eighth (and again)


class WaitQueue:
    """Unit ids in queue order (a unit queued after it left goes to the back); those
    not parked are ``ready``. Every operation is O(1) but ``ready`` after a
    wake, which sorts the ready units once."""

    def __init__(self) -> None:
        self._ticket: dict[int, int] = {}  # every waiting unit -> its place in the queue, in that order
        self._ready: dict[int, int] = {}  # the ones not parked -> their place
        self._parked: dict[int, Hashable] = {}  # unit -> what it waits for
        self._by_key: dict[Hashable, dict[int, None]] = {}
        self._next = 0
        self._sorted = True  # _ready is in queue order
        self._peak = 0  # the most units waiting since the dicts were last made anew
        self._shrink_below = 0  # made anew when fewer wait (0: not while the peak is under SHRINK_FROM)

    def add(self, uid: int) -> None:
        """Queue ``uid`` at the back (a unit already waiting keeps its place)."""
        if uid in self._ticket:
            return
        self._ticket[uid] = self._ready[uid] = self._next
        self._next += 1
        if len(self._ticket) > self._peak:
            self._peak = len(self._ticket)
            if self._peak >= SHRINK_FROM:
                self._shrink_below = self._peak // 8

    def discard(self, uid: int) -> None:
        if self._ticket.pop(uid, None) is None:
            return
        if len(self._ticket) < self._shrink_below:
            # a dict keeps the table of its largest size: a city's first instant queues millions
            # of units and places them, and the emptied tables would be held for the whole run
            self._ticket, self._ready, self._peak = dict(self._ticket), dict(self._ready), len(self._ticket)
            # and again at each eighth, down to a small queue: a million units placed at once are
            # discarded a few at a time, so the first copy would still be sized for an eighth of them
            self._shrink_below = self._peak // 8 if self._peak >= SHRINK_FROM else 0
        if self._ready.pop(uid, None) is None:
            key = self._parked.pop(uid)
            waiting = self._by_key[key]
            del waiting[uid]
            if not waiting:
                del self._by_key[key]

    def park(self, uid: int, key: Hashable) -> None:
        """``uid`` is not tried again until ``wake(key)``."""
        del self._ready[uid]
        self._parked[uid] = key
        self._by_key.setdefault(key, {})[uid] = None

    def wake(self, key: Hashable) -> int:
        """Make the units parked under ``key`` ready again; how many."""
        waiting = self._by_key.pop(key, None)
        if not waiting:
            return 0
        for uid in waiting:
            del self._parked[uid]
            self._ready[uid] = self._ticket[uid]
        self._sorted = False
        return len(waiting)

    def wake_all(self) -> int:
        return sum(self.wake(key) for key in list(self._by_key))

    def ready(self) -> list[int]:
        """The units to try now, in queue order."""
        if not self._sorted:
            self._ready = dict(sorted(self._ready.items(), key=lambda kv: kv[1]))
            self._sorted = True
        return list(self._ready)

    def in_order(self, uids) -> list[int]:
        """``uids`` (waiting units) in queue order."""
        ticket = self._ticket
        return sorted(uids, key=ticket.__getitem__)

    def parked(self, uid: int) -> bool:
        return uid in self._parked

    @property
    def parked_count(self) -> int:
        return len(self._parked)

    def __contains__(self, uid: object) -> bool:
        return uid in self._ticket

    def __iter__(self) -> Iterator[int]:
        return iter(self._ticket)

    def __len__(self) -> int:
        return len(self._ticket)

    def __bool__(self) -> bool:
        return bool(self._ticket)
