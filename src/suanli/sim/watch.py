"""Items set aside until rows of a table change what they have free.

A table logs every row whose free capacity (or being in service) changes
(``CandidateTable.touch``). ``RowWatch`` keeps, per table, the rows each
item watches and how far it has read the table's log; ``changed`` names the
items one of whose rows changed since (all of a table's items when rows were
added to it or its log moved on past what was read). (Units waiting for
room, which care only about rows that gained some, are ``room.RoomWait``.)
"""

from __future__ import annotations

from typing import Hashable

import numpy as np


class RowWatch:
    def __init__(self) -> None:
        self._of: dict[Hashable, tuple[int, np.ndarray]] = {}  # item -> (id of its table, rows)
        self._watch: dict[int, dict[int, set]] = {}  # id(table) -> row -> items
        self._read: dict[int, tuple[object, int, int]] = {}  # id(table) -> (table, log read up to, version)

    def __contains__(self, item: Hashable) -> bool:
        return item in self._of

    def __len__(self) -> int:
        return len(self._of)

    def add(self, item: Hashable, table, rows: np.ndarray) -> None:
        """Watch ``rows`` of ``table`` for ``item`` (it must not be watched already)."""
        key = id(table)
        self._of[item] = (key, rows)
        if key not in self._read:
            self._read[key] = (table, table.logged, table.version)
        watch = self._watch.setdefault(key, {})
        for row in rows.tolist():
            s = watch.get(row)
            if s is None:
                s = watch[row] = set()
            s.add(item)

    def discard(self, item: Hashable) -> None:
        got = self._of.pop(item, None)
        if got is None:
            return
        key, rows = got
        watch = self._watch.get(key, {})
        for row in rows.tolist():
            s = watch.get(row)
            if s is not None:
                s.discard(item)
                if not s:
                    del watch[row]

    def items(self) -> list:
        return list(self._of)

    def changed(self) -> list:
        """The items one of whose rows changed since the last call (they stay
        watched: the caller discards those it takes back)."""
        out: list = []
        for key, (table, pos, version) in list(self._read.items()):
            watch = self._watch.get(key)
            if not watch:
                self._read.pop(key)
                self._watch.pop(key, None)
                continue
            rows = table.since(pos) if table.version == version else None
            if rows is None:  # rows were added, or the log moved on: every item looks again
                out += {item: None for s in watch.values() for item in s}
            elif rows.size:
                hit = [row for row in np.unique(rows).tolist() if row in watch]
                out += {item: None for row in hit for item in watch[row]}
            self._read[key] = (table, table.logged, table.version)
        return out
