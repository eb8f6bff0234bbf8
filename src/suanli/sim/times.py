"""Time columns that keep a code a row, not a float.

A run's clock gives far fewer distinct times than it has tasks: the city's
hour at a million cars has 3.2 million tasks and about 300,000 instants,
and every task of an instant is submitted, placed, started or ended at the
same time. The ledger's time columns (a task's submission, first placement
and end, a run's start) so keep an int32 code a row into one table of the
distinct times (``Instants``), rising as the clock does: a new time is
appended, one already there is found by a bisection. A time that comes
after a later one and is not in the table (a record restored with its old
times) is kept apart. The float read back is the one written, bit for bit
(a zero keeps its sign), and NaN stands for a time not yet.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from math import copysign

import numpy as np

NONE = -1  # the code of NaN: a time not yet
_NAN = float("nan")


class Instants:
    """The distinct times of a run's columns: ``at`` rising, and apart from
    it the times that came out of order (codes ``-2 - k``)."""

    __slots__ = ("at", "_last", "_code", "_odd", "_odd_code")

    def __init__(self) -> None:
        self.at = array("d")
        self._last = _NAN
        self._code = NONE
        self._odd = array("d")
        self._odd_code: dict[tuple[float, float], int] = {}

    def code(self, t: float) -> int:
        """The code of time ``t`` (added when new)."""
        last = self._last
        if t == last and (t or copysign(1.0, t) == copysign(1.0, last)):
            return self._code  # (most writes: the instant's time again)
        if t != t:
            return NONE
        at = self.at
        if not at or t > at[-1]:
            at.append(t)
            self._last = float(t)
            c = self._code = len(at) - 1
            return c
        k = bisect_left(at, t)
        if k < len(at) and at[k] == t and (t or copysign(1.0, t) == copysign(1.0, at[k])):
            return k
        key = (float(t), copysign(1.0, t))
        c = self._odd_code.get(key)
        if c is None:
            self._odd.append(t)
            c = self._odd_code[key] = -1 - len(self._odd)
        return c

    def value(self, c: int) -> float:
        if c >= 0:
            return self.at[c]
        return _NAN if c == NONE else self._odd[-2 - c]

    def values(self, codes: np.ndarray) -> np.ndarray:
        """The times of ``codes`` (NaN for ``NONE``), as float64."""
        out = np.full(codes.shape, np.nan)
        ok = codes >= 0
        if len(self.at):
            at = np.frombuffer(self.at, np.float64)  # (a view, let go of here: the table may grow)
            out[ok] = at[codes[ok]]
            del at
        odd = codes < NONE
        if odd.any():
            apart = np.frombuffer(self._odd, np.float64)
            out[odd] = apart[-2 - codes[odd]]
            del apart
        return out

    def __len__(self) -> int:
        return len(self.at) + len(self._odd)


class TimeColumn:
    """A float64 column read and written as one (``col[i]``, ``col[i] = t``,
    ``append``), kept as codes into shared ``Instants``: 4 bytes a row."""

    __slots__ = ("codes", "instants")

    def __init__(self, instants: Instants) -> None:
        self.codes = array("i")
        self.instants = instants

    def append(self, t: float) -> None:
        instants = self.instants
        if t == instants._last and t:  # (the instant's time again: most writes, without a call)
            self.codes.append(instants._code)
        else:
            self.codes.append(instants.code(t))

    def __getitem__(self, i: int) -> float:
        c = self.codes[i]
        return self.instants.at[c] if c >= 0 else self.instants.value(c)

    def __setitem__(self, i: int, t: float) -> None:
        instants = self.instants
        self.codes[i] = instants._code if t == instants._last and t else instants.code(t)

    def __len__(self) -> int:
        return len(self.codes)

    def is_none(self, i: int) -> bool:
        return self.codes[i] == NONE

    def numpy(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The column's times (a copy), of the rows from ``start`` to ``stop``."""
        if not len(self.codes):
            return np.zeros(0)
        codes = np.frombuffer(self.codes, np.int32)[start:stop].copy()  # (no view kept: the column grows)
        return self.instants.values(codes)
