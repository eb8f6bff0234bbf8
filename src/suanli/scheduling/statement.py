"""One statement for all tentative work.

Placing a gang, an affinity group or a unit whose VC grows hosts for it;
holding quota for members not yet committed; asking "would it fit if these
left?" before a preemption, a defragmentation or a device claim: each is a
series of changes that must either all stand or all be undone. A
``Statement`` records each change with its inverse as it is made: ``commit``
keeps them (into the enclosing statement, when there is one), ``discard``
undoes them in reverse order. A statement used as a context manager is a
probe: whatever it recorded is undone on leaving it.
"""

from __future__ import annotations

from typing import Callable, Sequence

from suanli.scheduling.table import Allocation, CandidateTable


class Statement:
    __slots__ = ("_undo", "_on_commit", "_parent", "taken")

    def __init__(self, parent: "Statement | None" = None) -> None:
        self._undo: list = []  # (table, allocations, taken) or a callable, in the order made
        self._on_commit: list[Callable[[], None]] = []
        self._parent = parent
        self.taken = 0  # allocations taken so far (a group's members placed)

    # ------------------------------------------------------------ operations

    def take(self, table: CandidateTable, allocs: Sequence[Allocation]) -> None:
        """Take ``allocs`` from ``table``; undone by giving them back."""
        table.take_all(allocs)
        self._undo.append((table, allocs, True))
        self.taken += len(allocs)

    def give(self, table: CandidateTable, allocs: Sequence[Allocation]) -> None:
        """Give ``allocs`` back to ``table`` (a probe: as if they had left); undone by taking them again."""
        for a in allocs:
            table.give(a)
        self._undo.append((table, allocs, False))

    def did(self, undo: Callable[[], None]) -> None:
        """A change made by the caller, with how to undo it."""
        self._undo.append(undo)

    def at_commit(self, fn: Callable[[], None]) -> None:
        """Something to do once the statement's work stands (tentative figures cleared)."""
        self._on_commit.append(fn)

    # ------------------------------------------------------------ outcome

    def commit(self) -> None:
        """Keep every change; inside another statement, they become part of it."""
        for fn in self._on_commit:
            fn()
        if self._parent is not None:
            self._parent._undo.extend(self._undo)
            self._parent.taken += self.taken
        self._undo, self._on_commit, self.taken = [], [], 0

    def discard(self) -> None:
        """Undo every change, the latest first."""
        undo, self._undo, self._on_commit, self.taken = self._undo, [], [], 0
        for op in reversed(undo):
            if callable(op):
                op()
                continue
            table, allocs, taken = op
            if taken:
                for a in reversed(allocs):
                    table.give(a)
            else:
                table.take_all(allocs)

    def __enter__(self) -> "Statement":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()
