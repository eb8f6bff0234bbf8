"""Items set aside until rows of a table change what they have free.

A table logs every row whose free capacity (or being in service) changes
(``CandidateTable.touch``). ``RowWatch`` keeps, per table, the rows each
item watches and how far it has read the table's log; ``changed`` names the
items one of whose rows changed since (all of a table's items when rows were
added to it or its log moved on past what was read). With ``rises_only``, a
row counts as changed only when it has more of something free than when it
was last looked at, or came back into service: what waits for room cannot
fit on a row that only lost room.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np


class RowWatch:
    def __init__(self, rises_only: bool = False) -> None:
        self.rises_only = rises_only
        self._seen: dict[int, dict[int, tuple]] = {}  # id(table) -> row -> what it had free when last looked at
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
        seen = self._seen.setdefault(key, {}) if self.rises_only else None
        for row in rows.tolist():
            s = watch.get(row)
            if s is None:
                s = watch[row] = set()
                if seen is not None:
                    seen[row] = _free(table, row)
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
                    self._seen.get(key, {}).pop(row, None)

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
                if self.rises_only:
                    hit = self._risen(table, self._seen[key], hit)
                out += {item: None for row in hit for item in watch[row]}
            self._read[key] = (table, table.logged, table.version)
        return out

    @staticmethod
    def _risen(table, seen: dict[int, tuple], rows: list[int]) -> list[int]:
        """Of ``rows``, those with more of something free than when last looked
        at (or back in service); the others are remembered as they are now."""
        out = []
        for row in rows:
            now = _free(table, row)
            before = seen[row]
            if any(a > b for a, b in zip(now, before)):
                out.append(row)
            else:
                seen[row] = now
        return out


def _free(table, row: int) -> tuple:
    """What ``row`` has free, its device shares and whether it is in service, as one tuple."""
    return (*table.free[:, row].tolist(), *table.dev_free[:, row].tolist(), int(table.enabled[row]))
