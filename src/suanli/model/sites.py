"""Sites as columns: names, tiers, regions, rtts and labels as arrays.

A fleet lists some sites one by one and describes others as *populations*:
a million cars written as a count and a name pattern (``car-######``). Both
end up as rows of one ``SiteTable``: integer ids, a tier, a region code, an
intra-site rtt and a label set per row, in NumPy arrays. A population's names
are never stored: ``SiteNames`` formats ``car-000123`` from the index and
parses it back, so the table holds no Python object per site.
"""

from __future__ import annotations

import bisect
import copy
import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import numpy as np

TIERS: tuple[str, ...] = ("cloud", "edge", "device")


@dataclass(frozen=True, slots=True)
class NamePattern:
    """Names ``PREFIX`` + a zero-padded index of ``width`` digits + ``SUFFIX``
    (written ``car-######``: the run of ``#`` is the index)."""

    prefix: str
    width: int
    suffix: str

    FORM = "a name with one run of '#' for the index, e.g. 'car-######' (car-000000, car-000001, ...)"

    @staticmethod
    def parse(text: str) -> "NamePattern":
        runs = list(re.finditer(r"#+", text))
        if len(runs) != 1:
            raise ValueError(f"{text!r} is not {NamePattern.FORM}")
        m = runs[0]
        return NamePattern(text[: m.start()], m.end() - m.start(), text[m.end():])

    def name(self, index: int) -> str:
        return self.prefix + str(index).zfill(self.width) + self.suffix  # (as ``{index:0{width}d}``, faster)

    def index(self, name: str) -> int:
        """The index ``name`` stands for, or -1 when it is not of this pattern."""
        if len(name) != len(self.prefix) + self.width + len(self.suffix):
            return -1
        if not (name.startswith(self.prefix) and name.endswith(self.suffix)):
            return -1
        digits = name[len(self.prefix): len(self.prefix) + self.width]
        return int(digits) if digits.isascii() and digits.isdigit() else -1

    def __str__(self) -> str:
        return f"{self.prefix}{'#' * self.width}{self.suffix}"


@dataclass(frozen=True, slots=True)
class Site:
    """One site, made on demand from the table's row (see ``SiteTable.site``)."""

    index: int
    name: str
    tier: str
    region: str = ""
    intra_site_rtt_ms: float = 0.2
    labels: Mapping[str, str] = field(default_factory=dict)
    transit: bool | None = None  # relays paths between other sites (None: a device does not, others do)


class SiteNames:
    """Site names by id and ids by name: listed names in a dict, populations
    as (first id, count, pattern) blocks formatted and parsed on demand."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}  # listed sites
        self._listed: dict[int, str] = {}
        self._firsts: list[int] = []  # populations, by first id
        self._blocks: list[tuple[int, int, NamePattern]] = []
        # the blocks by (length of their names, their prefix): a name finds its few candidates at once,
        # not by trying every population's pattern (cars of ten operators are twenty blocks)
        self._by_prefix: dict[tuple[int, str], list[tuple[int, int, NamePattern]]] = {}
        self._shapes: list[tuple[int, int]] = []  # the (name length, prefix length) pairs of the blocks
        # names of the blocks found lately, and their ids: a device's name is read at each of its tasks'
        # placements (its bound's site); emptied when names are added, and when it holds PARSED_KEPT
        self._parsed: dict[str, int] = {}
        self.n = 0

    PARSED_KEPT = 1 << 14

    def add(self, name: str) -> int:
        self._parsed = {}
        i = self.n
        self._index[name] = i
        self._listed[i] = name
        self.n += 1
        return i

    def add_block(self, count: int, pattern: NamePattern) -> int:
        self._parsed = {}
        first = self.n
        self._firsts.append(first)
        self._blocks.append((first, count, pattern))
        size = len(pattern.prefix) + pattern.width + len(pattern.suffix)
        self._by_prefix.setdefault((size, pattern.prefix), []).append((first, count, pattern))
        if (size, len(pattern.prefix)) not in self._shapes:
            self._shapes.append((size, len(pattern.prefix)))
        self.n += count
        return first

    def name(self, i: int) -> str:
        i = int(i)
        got = self._listed.get(i)
        if got is not None:
            return got
        b = bisect.bisect_right(self._firsts, i) - 1
        if b < 0 or not 0 <= i - self._blocks[b][0] < self._blocks[b][1]:
            raise IndexError(i)
        first, _, pattern = self._blocks[b]
        return pattern.name(i - first)

    def get(self, name: str, default: int = -1) -> int:
        got = self._index.get(name)
        if got is not None:
            return got
        parsed = self._parsed
        got = parsed.get(name)
        if got is not None:
            return got if got >= 0 else default
        size, found = len(name), -1
        for length, cut in self._shapes:  # (the first block that matches, as when each was tried in turn)
            if length != size:
                continue
            for first, count, pattern in self._by_prefix.get((size, name[:cut]), ()):
                k = pattern.index(name)
                if 0 <= k < count and (found < 0 or first < found):
                    found = first + k
                    break
        if len(parsed) >= self.PARSED_KEPT:
            parsed.clear()
        parsed[name] = found
        return found if found >= 0 else default

    def __getitem__(self, name: str) -> int:
        got = self.get(name)
        if got < 0:
            raise KeyError(name)
        return got

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) >= 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[str]:
        return (self.name(i) for i in range(self.n))

    def listed(self) -> np.ndarray:
        """int64: the ids of the sites written one by one (not of a population)."""
        return np.fromiter(self._listed, np.int64, len(self._listed))

    def block_of(self, i: int) -> range | None:
        """The ids of the population site ``i`` is of (None: a listed site)."""
        b = bisect.bisect_right(self._firsts, i) - 1
        if b < 0 or i in self._listed or not 0 <= i - self._blocks[b][0] < self._blocks[b][1]:
            return None
        first, count, _ = self._blocks[b]
        return range(first, first + count)

    def blocks(self) -> list[tuple[int, int, NamePattern]]:
        return list(self._blocks)

    def match(self, regex: "re.Pattern[str]") -> np.ndarray:
        """bool[n]: the names ``regex`` fully matches. A population's names are
        read one by one (a regex over a pattern cannot be decided in general):
        callers keep the mask per pattern set."""
        out = np.zeros(self.n, bool)
        for i, name in self._listed.items():
            out[i] = regex.fullmatch(name) is not None
        for first, count, pattern in self._blocks:
            fm, fmt = regex.fullmatch, pattern.name
            out[first: first + count] = np.fromiter((fm(fmt(k)) is not None for k in range(count)), bool, count)
        return out


def selects(sel, name: str, tier: str, region: str, labels: Mapping[str, str]) -> bool:
    """Whether a site selector (``tier``, ``names`` globs, ``regions``,
    ``labels``: every given criterion must hold) picks a site of these facts."""
    from suanli.model.globs import glob_match

    return ((not sel.tier or tier in sel.tier)
            and (not sel.names or any(glob_match(p, name) for p in sel.names))
            and (not sel.regions or region in sel.regions)
            and all(labels.get(k) == v for k, v in sel.labels.items()))


def attach_weight(weights: Mapping[str, float], name: str) -> float:
    """A site's weight in an attachment rule: the largest of the globs naming it, 1 if none does."""
    from suanli.model.globs import glob_match

    return max((w for p, w in weights.items() if glob_match(p, name)), default=1.0)


class Codes:
    """Interns names into dense integer codes, in first-seen order."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        for n in names:
            self.code(n)

    def code(self, name: str) -> int:
        got = self.index.get(name)
        if got is None:
            got = self.index[name] = len(self.names)
            self.names.append(name)
        return got

    def get(self, name: str, default: int = -1) -> int:
        return self.index.get(name, default)

    def __len__(self) -> int:
        return len(self.names)


class SiteTable:
    """Every site of a fleet as a row of arrays (see the module docstring)."""

    def __init__(self) -> None:
        self.names = SiteNames()
        self._regions = Codes()
        self.label_sets: list[Mapping[str, str]] = []  # label-set code -> labels
        self._tier: list[np.ndarray] = []
        self._region: list[np.ndarray] = []
        self._intra: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []
        self._private: list[tuple[int, int]] = []  # (first, count) of the populations whose sites are private
        self._transit: dict[tuple[int, int], bool] = {}  # (first, count) -> transit, where not the tier's default
        self.tier = self.region = self.intra_rtt_ms = self.label_set = None  # arrays, after freeze
        self.private = None  # bool[S]: a site that runs only work bound near it (a device's own)
        self.transit = None  # bool[S]: a site that relays paths between others (by default all but devices)
        self.population_of = None  # int32[S]: the population a site belongs to, -1 if listed
        self.population_names: list[str] = []  # by population (block) number
        self.listed: list[tuple[int, str, str, str, Mapping[str, str]]] = []  # (id, name, tier, region, labels)

    @property
    def regions(self) -> list[str]:
        """Region names by code."""
        return self._regions.names

    def region_code(self, name: str) -> int:
        return self._regions.code(name)

    def add(self, name: str, tier: str, region: str = "", intra_site_rtt_ms: float = 0.2,
            labels: Mapping[str, str] | None = None, transit: bool | None = None) -> int:
        i = self.names.add(name)
        self._append(1, TIERS.index(tier), np.array([self.region_code(region)], np.int32),
                     intra_site_rtt_ms, labels or {})
        self.listed.append((i, name, tier, region, self.label_sets[-1]))
        self._transit.pop((i, 1), None)
        if transit is not None:
            self._transit[i, 1] = transit
        return i

    def add_population(self, name: str, pattern: NamePattern, count: int, tier: str, regions: np.ndarray,
                       intra_site_rtt_ms: float, labels: Mapping[str, str], private: bool = False,
                       transit: bool | None = None) -> int:
        """``regions``: int32[count] region codes (``region_code``), one per site."""
        first = self.names.add_block(count, pattern)
        self.population_names.append(name)
        if private:
            self._private.append((first, count))
        if transit is not None:
            self._transit[first, count] = transit
        self._append(count, TIERS.index(tier), np.asarray(regions, np.int32), intra_site_rtt_ms, labels)
        return first

    def _append(self, n: int, tier: int, regions: np.ndarray, intra: float, labels: Mapping[str, str]) -> None:
        self._tier.append(np.full(n, tier, np.int8))
        self._region.append(regions)
        self._intra.append(np.full(n, intra, float))
        self._labels.append(np.full(n, len(self.label_sets), np.int32))
        self.label_sets.append(dict(labels))

    def freeze(self) -> "SiteTable":
        cat = lambda parts, dt: np.concatenate(parts).astype(dt, copy=False) if parts else np.zeros(0, dt)  # noqa: E731
        self.tier = cat(self._tier, np.int8)
        self.region = cat(self._region, np.int32)
        self.intra_rtt_ms = cat(self._intra, float)
        self.label_set = cat(self._labels, np.int32)
        self.private = np.zeros(len(self.names), bool)
        for first, count in self._private:
            self.private[first: first + count] = True
        self.transit = self.tier != TIERS.index("device")
        for (first, count), relays in self._transit.items():
            self.transit[first: first + count] = relays
        self.population_of = np.full(len(self.names), -1, np.int32)
        for p, (first, count, _) in enumerate(self.names.blocks()):
            self.population_of[first: first + count] = p
        self._tier = self._region = self._intra = self._labels = []
        return self

    def grown(self, sites: Sequence[Site]) -> "SiteTable":
        """A frozen copy where the listed ``sites`` are as given: a known name
        keeps its id and takes the new tier, region, rtt and labels; a new one
        is appended (a live server's fleet, changed at run time)."""
        t = SiteTable()
        t.names = copy.copy(self.names)
        t.names._index, t.names._listed = dict(self.names._index), dict(self.names._listed)
        t.names._parsed = {}
        t._regions = Codes(self.regions)
        t.label_sets = list(self.label_sets)
        t.population_names = list(self.population_names)
        t._private = list(self._private)
        t._transit = dict(self._transit)
        t.listed = list(self.listed)
        at = {i: k for k, (i, *_) in enumerate(t.listed)}
        arrays = [self.tier.copy(), self.region.copy(), self.intra_rtt_ms.copy(), self.label_set.copy()]
        t._tier, t._region, t._intra, t._labels = ([a] for a in arrays)
        for s in sites:
            i = t.names.get(s.name)
            if i < 0:
                t.add(s.name, s.tier, s.region, s.intra_site_rtt_ms, s.labels, s.transit)
                continue
            t._transit.pop((i, 1), None)
            if s.transit is not None:
                t._transit[i, 1] = s.transit
            arrays[0][i], arrays[1][i], arrays[2][i] = TIERS.index(s.tier), t.region_code(s.region), s.intra_site_rtt_ms
            arrays[3][i] = len(t.label_sets)
            t.label_sets.append(dict(s.labels))
            t.listed[at[i]] = (i, s.name, s.tier, s.region, t.label_sets[-1])
        return t.freeze()

    @staticmethod
    def of(sites: Sequence[Site]) -> "SiteTable":
        """A table of listed sites (their ``index`` must be 0, 1, 2, ...)."""
        t = SiteTable()
        for s in sites:
            t.add(s.name, s.tier, s.region, s.intra_site_rtt_ms, s.labels, s.transit)
        return t.freeze()

    def __len__(self) -> int:
        return len(self.names)

    def population_range(self, name: str) -> range:
        """The site ids of population ``name``."""
        first, count, _ = self.names.blocks()[self.population_names.index(name)]
        return range(first, first + count)

    def site(self, i: int) -> Site:
        i = int(i)
        return Site(i, self.names.name(i), TIERS[int(self.tier[i])], self.regions[int(self.region[i])],
                    float(self.intra_rtt_ms[i]), self.label_sets[int(self.label_set[i])], bool(self.transit[i]))

    def tier_names(self) -> np.ndarray:
        return np.array(TIERS)[self.tier]

    def region_names(self) -> np.ndarray:
        return np.array(self.regions or [""], dtype=object)[self.region]


class SiteSeq(Sequence[Site]):
    """``fleet.sites``: the table read as a sequence of ``Site``, each made
    when asked for (iterating a million-site fleet makes a million: the hot
    paths read the arrays instead)."""

    def __init__(self, table: SiteTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self.table.site(k) for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.table.site(i)

    def __iter__(self) -> Iterator[Site]:
        return (self.table.site(i) for i in range(len(self)))
