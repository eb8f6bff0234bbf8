"""Which running tasks away from home a return plan must look at again.

A return plan (``rescheduler.plan_returns``) asks, for each running task
away from its near site, whether a closer row has room and would be worth
the move. Asked of every such task at every instant, that is a neighbourhood
search per task per instant: at a million cars, tens of thousands of
searches an instant. Most answers cannot have changed: a task whose last
answer was "no move" (without a tie drawn from the generator) gives the
same answer until one of the rows it could move to changes what it has free
(the tables' change log says which rows did), paths near it change, its
hysteresis ends, or it moves. Such a task is set aside ("quiet") with the
rows it watches; the plan looks only at the others, in the order it always
did. Work whose answer depends on more (a tenant's quota, anti-affinity, a
search over every row) is never set aside. A test runs scenarios with and
without the watch and compares every event.
"""

from __future__ import annotations

import heapq
from typing import Iterable

import numpy as np

from suanli.sim.watch import RowWatch

ENABLED = True  # False: every task away from home is looked at, at every instant (the reference)


class ReturnWatch:
    def __init__(self) -> None:
        self.order: dict[str, int] = {}  # task away from home -> its place (``near_running``'s order)
        self.active: dict[str, None] = {}  # the tasks to look at
        self.quiet: dict[str, bool] = {}  # task set aside -> whether it watches rows
        self._rows = RowWatch()  # the rows the quiet ones watch
        self._later: list[tuple[float, str]] = []  # (time, task): quiet until its hysteresis ends
        self._count = 0
        self.skipped = 0  # looks saved (for tests and benchmarks)

    # ------------------------------------------------------------ the tasks

    def enter(self, task: str) -> None:
        """``task`` is now away from home (it was not)."""
        self.order[task] = self._count
        self._count += 1
        self.active[task] = None

    def leave(self, task: str) -> None:
        """``task`` is home, or ended."""
        self.order.pop(task, None)
        self.active.pop(task, None)
        self._unquiet(task)

    def wake(self, tasks: Iterable[str]) -> None:
        """Look at ``tasks`` again (they moved, or paths near them changed)."""
        for task in tasks:
            if task in self.order:
                self._unquiet(task)
                self.active[task] = None

    def wake_all(self) -> None:
        self.wake(list(self.quiet))

    def rest(self, task: str, table=None, rows: np.ndarray | None = None, until: float | None = None) -> None:
        """``task``'s answer was no move and drew nothing: set it aside until
        one of ``rows`` of ``table`` changes (or, with ``until``, until then)."""
        if not ENABLED:
            return
        self.active.pop(task, None)
        self.quiet[task] = table is not None
        if until is not None:
            heapq.heappush(self._later, (until, task))
        if table is not None:
            self._rows.add(task, table, rows)

    def _unquiet(self, task: str) -> None:
        if self.quiet.pop(task, None) is not None:
            self._rows.discard(task)

    # ------------------------------------------------------------ each plan

    def due(self, t: float) -> list[str]:
        """The tasks to look at now, in ``near_running``'s order: the active
        ones, those whose watched rows changed since the last plan, and those
        whose hysteresis is over."""
        while self._later and self._later[0][0] <= t:
            _, task = heapq.heappop(self._later)
            if self.quiet.get(task) is False:  # waiting out its hysteresis (not a row)
                self.wake((task,))
        self.wake(self._rows.changed())
        self.skipped += len(self.quiet)
        order = self.order
        return sorted(self.active, key=order.__getitem__)
