"""Importers for recorded traces: read files written by others into tables and records.

This module owns reading external trace files and stops there. It knows two
formats:

* the Alibaba ``openb`` GPU cluster trace (cluster-trace-gpu-v2023, the FGD
  paper's data): node lists via :func:`load_openb_nodes` and pod lists via
  :func:`load_openb_pods`, held as NumPy columns;
* the Standard Workload Format (SWF) of the Parallel Workloads Archive, plain or
  gzip, streamed one job at a time via :func:`iter_swf`, with the header
  comments available from :func:`read_swf_header`.

It does not build fleets or work: the simulator turns each :class:`NodeShape`
into a :class:`suanli.model.fleet.NodeGroup` (with a ``DeviceType`` of ``gpus``
devices of ``model``) and each arrival into a task. Every problem with an input
file (missing, unreadable, missing columns, a value that is not a number, a
contradiction) raises :class:`TraceError` naming the file, the line and, where
there is one, the column.

GPU requests in openb pod lists
-------------------------------
A pod asks for ``num_gpu`` GPUs and ``gpu_milli`` thousandths *of each* of
them, so its total request is ``gpu_request_milli = num_gpu * gpu_milli``:

* ``num_gpu == 0`` and ``gpu_milli == 0``: a CPU-only pod;
* ``num_gpu == 1`` and ``0 < gpu_milli < 1000``: shares one GPU, using that part;
* ``num_gpu >= 1`` and ``gpu_milli == 1000``: takes ``num_gpu`` whole GPUs;
* ``num_gpu >= 2`` and ``gpu_milli < 1000``: no row of the 26 published pod
  files has this (all 3,652 rows with ``num_gpu >= 2`` have 1000). It is read as
  ``num_gpu`` GPUs each shared at ``gpu_milli``, the reading of the FGD
  simulator (its ``gpu-milli`` annotation is per GPU, 0-1000), and accepted;
* ``num_gpu == 0`` with ``gpu_milli > 0``, or ``num_gpu >= 1`` with
  ``gpu_milli == 0``: contradictory (none in the data) and rejected, as is
  ``gpu_milli`` outside 0-1000.
"""

from __future__ import annotations

import csv
import gzip
import math
import re
import zlib
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import IO, Iterator, Mapping, Sequence

import numpy as np

__all__ = [
    "NodeShape",
    "OpenbNodes",
    "OpenbPods",
    "PodArrival",
    "SwfHeader",
    "SwfJob",
    "TraceError",
    "iter_swf",
    "load_openb_nodes",
    "load_openb_pods",
    "read_swf_header",
]

_GZIP_MAGIC = b"\x1f\x8b"
# What reading a text file can raise besides our own errors: I/O, a damaged or
# truncated gzip stream, bytes that are not UTF-8, and the csv module's own.
_READ_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error)
_ARRIVAL_CHUNK = 4096  # rows turned into Python values at a time by arrivals()
_CSV_CHUNK = 512  # rows read before their columns are converted; a few hundred stay in cache


class TraceError(ValueError):
    """A trace file is missing, unreadable or malformed; says where and what."""

    def __init__(
        self, path: str | Path, what: str, *, line: int | None = None, column: str | None = None
    ) -> None:
        self.path, self.what, self.line, self.column = str(path), what, line, column
        where = self.path if line is None else f"{self.path}:{line}"
        if column is not None:
            where += f": column {column!r}"
        super().__init__(f"{where}: {what}")

    def __reduce__(self):  # keyword-only fields: pickle (e.g. across processes) needs help
        return _rebuild_trace_error, (self.path, self.what, self.line, self.column)


def _rebuild_trace_error(path: str, what: str, line: int | None, column: str | None) -> TraceError:
    return TraceError(path, what, line=line, column=column)


# ------------------------------------------------------------------ files


def _require_file(path: str | Path) -> Path:
    """Fail early (at call time, not first iteration) for a path that is no file."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file")
    if not path.is_file():
        raise TraceError(path, "not a regular file")
    return path


def _open_text(path: Path, encoding: str) -> IO[str]:
    """Open for text, decompressing when the file is gzip (by magic bytes or suffix)."""
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        # newline="" keeps line endings for csv (quoted fields may span lines).
        if magic == _GZIP_MAGIC or path.suffix == ".gz":
            return gzip.open(path, "rt", encoding=encoding, newline="")
        return open(path, encoding=encoding, newline="")
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot open: {exc.strerror or exc}") from None


# ------------------------------------------------------------ CSV columns


@dataclass(frozen=True, slots=True)
class _Col:
    name: str
    kind: type  # int (required cell), float (empty cell -> NaN) or str
    required: bool = False


def _parse_int(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        # Exported tables sometimes write integers as "12000.0"; accept exact ones.
        try:
            f = float(text)
        except ValueError:
            return None
        if not (math.isfinite(f) and f.is_integer()):
            return None
        value = int(f)
    return value if -(2**63) <= value < 2**63 else None  # must fit int64


def _cell(path: Path, line: int, col: _Col, text: str) -> int | float | str:
    text = text.strip()
    if col.kind is str:
        return text
    if col.kind is float:
        if not text:
            return math.nan  # an empty time cell means "not recorded"
        value = _float_or_nan(text)
        if math.isfinite(value):
            return value
        raise TraceError(path, f"not a finite number: {text!r}", line=line, column=col.name)
    if not text:
        raise TraceError(path, "empty value, expected an integer", line=line, column=col.name)
    got = _parse_int(text)
    if got is None:
        raise TraceError(path, f"not an integer: {text!r}", line=line, column=col.name)
    return got


def _read_header(path: Path, reader, cols: Sequence[_Col]) -> tuple[dict[str, int], int]:
    """Where each known column is, and how many fields every row must have."""
    header = next(reader, None)
    if header is None:
        raise TraceError(path, "empty file, expected a header line", line=1)
    where: dict[str, int] = {}
    for i, name in enumerate(header):
        where.setdefault(name.strip(), i)  # first of duplicated names wins
    missing = [c.name for c in cols if c.required and c.name not in where]
    if missing:
        raise TraceError(path, f"missing required column(s): {', '.join(missing)}", line=1)
    return {c.name: where[c.name] for c in cols if c.name in where}, len(header)


def _read_csv(path: str | Path, cols: Sequence[_Col]) -> tuple[dict, np.ndarray, frozenset[str]]:
    """Read a CSV into one NumPy array per known column.

    Returns the columns, each row's line number (for later error messages) and
    the names of the known columns the file has.

    Rows are read a chunk at a time and each column of a chunk is converted at
    once (see :func:`_convert`): a Python call per cell costs more than reading
    the row. That handles the files met in practice; anything else (a bad cell,
    a row of the wrong width, a quoted field over several lines, a read error)
    sends the whole file to :func:`_read_csv_by_cell`, which reads what it can
    take and reports the first problem in file order.
    """
    path = _require_file(path)
    try:
        return _read_csv_by_column(path, cols)
    except _Unusual:
        return _read_csv_by_cell(path, cols)


class _Unusual(Exception):
    """The file needs reading cell by cell."""


def _read_csv_by_column(path: Path, cols: Sequence[_Col]) -> tuple[dict, np.ndarray, frozenset[str]]:
    """:func:`_read_csv` for a file without surprises; :class:`_Unusual` at the first."""
    parts: dict[str, list[np.ndarray]] = {c.name: [] for c in cols}
    line_parts: list[np.ndarray] = []
    with _open_text(path, "utf-8-sig") as fh:
        reader = csv.reader(fh, strict=True)
        try:
            where, width = _read_header(path, reader, cols)
            plan = [(c, where[c.name]) for c in cols if c.name in where]
            while True:
                start = reader.line_num
                rows = list(islice(reader, _CSV_CHUNK))
                if not rows:
                    break
                if reader.line_num - start != len(rows):
                    raise _Unusual  # a quoted field spans lines: the rows' line numbers are unknown
                lines = np.arange(start + 1, reader.line_num + 1, dtype=np.int64)
                if set(map(len, rows)) != {width}:
                    keep = [i for i, row in enumerate(rows) if row]  # a blank line is no row
                    rows, lines = [rows[i] for i in keep], lines[keep]
                    if set(map(len, rows)) - {width}:
                        raise _Unusual
                cells = list(zip(*rows))  # one tuple per column, empty for no rows
                for col, i in plan:
                    parts[col.name].append(_convert(path, col, cells[i] if cells else (), lines))
                line_parts.append(lines)
        except (*_READ_ERRORS, TraceError) as exc:
            raise _Unusual from exc
    present = frozenset(where)
    lines = np.concatenate(line_parts) if line_parts else np.zeros(0, np.int64)
    out = {c.name: _column(c, parts[c.name], len(lines), c.name in present) for c in cols}
    return out, _frozen(lines), present


def _convert(path: Path, col: _Col, texts: tuple[str, ...], lines: np.ndarray) -> np.ndarray:
    """One column of a chunk, as :func:`_cell` reads it cell by cell.

    The builtin ``int``/``float`` mapped over the cells does it in C. Each
    takes only text that :func:`_cell` reads as the same value (both strip the
    same blanks; an int outside int64 is an OverflowError), so a column they
    take whole is done; otherwise ("12000.0", a cell of spaces, a bad cell) the
    column goes cell by cell.
    """
    if col.kind is str:
        return np.array(list(map(str.strip, texts)), dtype=np.str_)
    try:
        if col.kind is int:
            return np.fromiter(map(int, texts), np.int64, len(texts))
        # An empty time cell (not recorded, common) is NaN; any other must be finite.
        blanks = texts.count("")
        cells = [t or "nan" for t in texts] if blanks else texts
        values = np.fromiter(map(float, cells), np.float64, len(texts))
        if np.count_nonzero(~np.isfinite(values)) == blanks:
            return values
    except (ValueError, OverflowError):
        pass
    by_cell = [_cell(path, line, col, t) for line, t in zip(lines.tolist(), texts)]
    return np.array(by_cell, dtype=_dtype(col.kind))


def _read_csv_by_cell(path: Path, cols: Sequence[_Col]) -> tuple[dict, np.ndarray, frozenset[str]]:
    """:func:`_read_csv`, one cell at a time: slower, but takes any file and
    stops at the first problem in file order."""
    sinks = {c.name: _new_sink(c.kind) for c in cols}
    lines = array("q")
    with _open_text(path, "utf-8-sig") as fh:  # -sig: tolerate a byte-order mark
        reader = csv.reader(fh, strict=True)  # a stray quote is an error, not data
        try:
            where, width = _read_header(path, reader, cols)
            plan = [(c, where[c.name], sinks[c.name]) for c in cols if c.name in where]
            for row in reader:
                if not row:
                    continue  # blank line
                line = reader.line_num
                if len(row) != width:
                    raise TraceError(path, f"expected {width} fields, found {len(row)}", line=line)
                for col, i, sink in plan:
                    sink.append(_cell(path, line, col, row[i]))
                lines.append(line)
        except _READ_ERRORS as exc:
            # csv.Error is about the line just read; other errors hit reading the next one
            line = reader.line_num + (0 if isinstance(exc, csv.Error) else 1)
            raise TraceError(path, f"cannot read: {exc}", line=line) from exc
    present = frozenset(where)
    out = {c.name: _column(c, [_from_sink(c, sinks[c.name])], len(lines), c.name in present) for c in cols}
    return out, _frozen(np.array(lines, dtype=np.int64)), present


def _new_sink(kind: type) -> array | list:
    # Typed arrays hold numbers unboxed while the file streams by; only str
    # columns need Python objects, and those end up as NumPy str arrays.
    return array("q") if kind is int else array("d") if kind is float else []


def _from_sink(col: _Col, sink: array | list) -> np.ndarray:
    return np.array(sink, dtype=_dtype(col.kind))  # copies an array's buffer, no per-item objects


def _column(col: _Col, parts: list[np.ndarray], n: int, present: bool) -> np.ndarray:
    if present:
        arr = np.concatenate(parts) if parts else np.array([], dtype=_dtype(col.kind))
    elif col.kind is str:  # optional column absent from this file (multigpu*: no times)
        arr = np.array([""] * n, dtype=np.str_)
    else:
        arr = np.full(n, math.nan if col.kind is float else 0, dtype=_dtype(col.kind))
    return _frozen(arr)


def _dtype(kind: type) -> type:
    return np.int64 if kind is int else np.float64 if kind is float else np.str_


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)  # the tables are frozen dataclasses; keep their columns so too
    return arr


def _check(path: str | Path, lines: np.ndarray, bad: np.ndarray, column: str, what: str) -> None:
    """Raise for the first row where ``bad`` holds, naming its line."""
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(path, what, line=int(lines[i]), column=column)


# -------------------------------------------------------------- openb nodes


_NODE_COLS = (
    _Col("sn", str, True),
    _Col("cpu_milli", int, True),
    _Col("memory_mib", int, True),
    _Col("gpu", int, True),
    _Col("model", str, True),
)


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Identical nodes of an openb node list; becomes one NodeGroup."""

    name: str
    count: int
    cpu_milli: int
    mem_mib: int
    gpus: int
    model: str  # "" when the node has no GPU


@dataclass(frozen=True, slots=True, eq=False)
class OpenbNodes:
    """An openb node list, one array element per node in file order."""

    name: np.ndarray  # str, the node's ``sn``
    cpu_milli: np.ndarray  # int64
    mem_mib: np.ndarray  # int64
    gpus: np.ndarray  # int64
    model: np.ndarray  # str, "" for CPU-only nodes

    def __len__(self) -> int:
        return len(self.name)

    def groups(self) -> list[NodeShape]:
        """Distinct node shapes, in order of first appearance, with unique readable names."""
        first, group = _group_rows(self)
        counts = np.bincount(group, minlength=len(first))
        rows = [
            (str(self.model[r]), int(self.gpus[r]), int(self.cpu_milli[r]), int(self.mem_mib[r]))
            for r in first
        ]
        names = _shape_names(rows)
        return [
            NodeShape(name=n, count=int(c), cpu_milli=cpu, mem_mib=mem, gpus=g, model=m)
            for n, c, (m, g, cpu, mem) in zip(names, counts, rows)
        ]

    def node_order(self) -> tuple[np.ndarray, np.ndarray]:
        """``(group, index)`` for every node row: its shape in :meth:`groups` and its
        position among that shape's nodes (file order). In a Fleet built from the
        groups in this order, row ``i`` is node ``group_first_node[group[i]] + index[i]``.
        """
        first, group = _group_rows(self)
        counts = np.bincount(group, minlength=len(first))
        by_group = np.argsort(group, kind="stable")
        starts = np.cumsum(counts) - counts
        index = np.empty(len(group), dtype=np.int64)
        index[by_group] = np.arange(len(group)) - np.repeat(starts, counts)
        return group, index


def _group_rows(nodes: OpenbNodes) -> tuple[np.ndarray, np.ndarray]:
    """First row of each distinct shape (first-appearance order) and each row's group."""
    if len(nodes) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    _, model_code = np.unique(nodes.model, return_inverse=True)
    keys = np.stack([model_code.ravel(), nodes.gpus, nodes.cpu_milli, nodes.mem_mib], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))  # np.unique sorts; we want file order
    return np.sort(first), rank[inverse.ravel()]


def _shape_names(rows: Sequence[tuple[str, int, int, int]]) -> list[str]:
    """``<model>-g<gpus>-c<cores>`` or ``cpu-c<cores>``; memory (``-m<GiB>g``) is added
    only to shapes whose short names collide, so GPU shapes keep short names in
    both the GPU-only and the all-node lists; a numeric suffix settles the rest
    (models that differ only in characters the slug drops).
    """
    short = [_short_name(m, g, cpu) for m, g, cpu, _ in rows]
    clash = {s for s, n in Counter(short).items() if n > 1}
    names = [s + _mem_tag(mem) if s in clash else s for s, (_, _, _, mem) in zip(short, rows)]
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}-{seen[n]}")
    return out


def _short_name(model: str, gpus: int, cpu_milli: int) -> str:
    cores = f"c{cpu_milli // 1000}" if cpu_milli % 1000 == 0 else f"c{cpu_milli}m"
    if gpus == 0:
        return f"cpu-{cores}"
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "gpu"
    return f"{slug}-g{gpus}-{cores}"


def _mem_tag(mem_mib: int) -> str:
    return f"-m{mem_mib // 1024}g" if mem_mib % 1024 == 0 else f"-m{mem_mib}mi"


def load_openb_nodes(path: str | Path) -> OpenbNodes:
    """Read an ``openb_node_list_*.csv`` (columns sn, cpu_milli, memory_mib, gpu, model)."""
    cols, lines, _ = _read_csv(path, _NODE_COLS)
    for name in ("cpu_milli", "memory_mib", "gpu"):
        _check(path, lines, cols[name] < 0, name, "negative value")
    # Node names key the (group, index) mapping, so they must be unique.
    by_name = np.argsort(cols["sn"], kind="stable")
    repeats = by_name[1:][cols["sn"][by_name[1:]] == cols["sn"][by_name[:-1]]]
    if len(repeats):
        i = int(repeats.min())  # the earliest row that repeats a name
        raise TraceError(path, f"duplicate node {cols['sn'][i]!r}", line=int(lines[i]), column="sn")
    return OpenbNodes(cols["sn"], cols["cpu_milli"], cols["memory_mib"], cols["gpu"], cols["model"])


# --------------------------------------------------------------- openb pods


_POD_COLS = (
    _Col("name", str),
    _Col("cpu_milli", int, True),
    _Col("memory_mib", int, True),
    _Col("num_gpu", int, True),
    _Col("gpu_milli", int, True),
    _Col("gpu_spec", str),
    _Col("qos", str),
    _Col("pod_phase", str),
    _Col("creation_time", float),
    _Col("deletion_time", float),
    _Col("scheduled_time", float),
)


@dataclass(frozen=True, slots=True)
class PodArrival:
    """One pod as the simulator meets it: what it asks for, when it comes and goes."""

    name: str
    cpu_milli: int
    mem_mib: int
    num_gpu: int
    gpu_milli: int  # share of each of the num_gpu GPUs (see the module docstring)
    models: tuple[str, ...]  # allowed GPU models; () = any
    at_s: float
    leave_at_s: float | None  # None: no recorded end at or after the arrival
    qos: str

    @property
    def gpu_request_milli(self) -> int:
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True, slots=True, eq=False)
class OpenbPods:
    """An openb pod list, one array element per pod in file order.

    Columns a file lacks (the ``multigpu*`` files stop after ``gpu_milli``) are
    "" for text and NaN for times; empty time cells are NaN too.
    """

    name: np.ndarray  # str
    cpu_milli: np.ndarray  # int64
    memory_mib: np.ndarray  # int64
    num_gpu: np.ndarray  # int64
    gpu_milli: np.ndarray  # int64, per GPU
    gpu_spec: np.ndarray  # str, models joined by "|"; "" = any
    qos: np.ndarray  # str
    pod_phase: np.ndarray  # str
    creation_time: np.ndarray  # float64 seconds, NaN = unknown
    deletion_time: np.ndarray  # float64 seconds, NaN = unknown
    scheduled_time: np.ndarray  # float64 seconds, NaN = unknown

    def __len__(self) -> int:
        return len(self.name)

    @property
    def gpu_request_milli(self) -> np.ndarray:
        """Total GPU request of each pod in milli-GPUs: ``num_gpu * gpu_milli``."""
        return self.num_gpu * self.gpu_milli

    def shape_counts(self, order: np.ndarray | None = None) -> dict[tuple[int, int, int, int, tuple[str, ...]], int]:
        """How many pods ask for each (cpu, memory, GPUs, share per GPU, allowed models);
        a CPU-only pod's share is 0. ``order``: the pods these indices list (with
        repeats), instead of each pod once."""
        counts: dict[tuple, int] = {}
        models: dict[str, tuple[str, ...]] = {}
        at = slice(None) if order is None else order
        for cpu, mem, ng, gm, spec in zip(self.cpu_milli[at].tolist(), self.memory_mib[at].tolist(),
                                          self.num_gpu[at].tolist(), self.gpu_milli[at].tolist(),
                                          self.gpu_spec[at].tolist()):
            m = models.get(spec)
            if m is None:
                m = models[spec] = _split_models(spec)
            key = (cpu, mem, ng, gm if ng else 0, m)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def arrivals(self) -> Iterator[PodArrival]:
        """Pods in creation-time order (ties keep file order; unknown time counts as 0)."""
        at = np.nan_to_num(self.creation_time, nan=0.0)
        order = np.argsort(at, kind="stable")
        models: dict[str, tuple[str, ...]] = {}  # few distinct specs; split each once
        for lo in range(0, len(order), _ARRIVAL_CHUNK):
            idx = order[lo : lo + _ARRIVAL_CHUNK]
            # tolist() per chunk: fast Python values without one per pod for the whole file
            cols = (self.name, self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, at,
                    self.deletion_time, self.qos, self.gpu_spec)  # fmt: skip
            for n, cpu, mem, ng, gm, t, end, qos, spec in zip(*(c[idx].tolist() for c in cols)):
                allowed = models.get(spec)
                if allowed is None:
                    allowed = models[spec] = _split_models(spec)
                # a pod deleted when it was made (the trace's pending ones) leaves at once; one that
                # ends before it comes has no end it could keep (NaN >= t is False: unknown, None too)
                yield PodArrival(n, cpu, mem, ng, gm, allowed, t, end if end >= t else None, qos)


def _split_models(spec: str) -> tuple[str, ...]:
    # Specs repeat models ("V100M16|V100M32|V100M32"); keep each once, in order.
    return tuple(dict.fromkeys(p.strip() for p in spec.split("|") if p.strip()))


def load_openb_pods(path: str | Path) -> OpenbPods:
    """Read an ``openb_pod_list_*.csv``; see the module docstring for GPU requests."""
    c, lines, present = _read_csv(path, _POD_COLS)
    for name in ("cpu_milli", "memory_mib", "num_gpu"):
        _check(path, lines, c[name] < 0, name, "negative value")
    ng, gm = c["num_gpu"], c["gpu_milli"]
    _check(path, lines, (gm < 0) | (gm > 1000), "gpu_milli", "outside 0-1000 (a share of one GPU)")
    _check(path, lines, (ng == 0) & (gm > 0), "gpu_milli", "GPU share given but num_gpu is 0")
    _check(path, lines, (ng > 0) & (gm == 0), "gpu_milli", "num_gpu > 0 but gpu_milli is 0")
    if "name" not in present:  # keep names unique so arrivals can be told apart
        c["name"] = _frozen(np.array([f"pod-{i}" for i in range(len(lines))], dtype=np.str_))
    return OpenbPods(**c)


# ---------------------------------------------------------------------- SWF


_SWF_FIELDS = (
    "job number", "submit time", "wait time", "run time", "allocated processors",
    "average cpu time", "used memory", "requested processors", "requested time",
    "requested memory", "status", "user", "group", "executable", "queue", "partition",
    "preceding job", "think time",
)  # fmt: skip
_SWF_INTS = (0, 4, 7, 10, 11, 12, 14)  # fields that are counts or codes, used as int
_swf_int_fields = itemgetter(*_SWF_INTS)
_HEADER_LINE = re.compile(r";\s*([A-Za-z][\w ]*?)\s*:\s*(.*?)\s*$")


@dataclass(frozen=True, slots=True)
class SwfHeader:
    """The ``; Key: value`` comments that open an SWF file."""

    max_procs: int | None  # None when absent or not a positive count
    max_nodes: int | None
    fields: Mapping[str, str] = field(default_factory=dict)  # repeated keys joined by "\n"


@dataclass(frozen=True, slots=True)
class SwfJob:
    """One SWF job; -1 ("unknown") becomes None for times, 0 for run time and processors."""

    job_id: int
    submit_s: float
    wait_s: float | None
    run_s: float  # 0.0 when unknown or negative: the job finishes at once
    processors: int  # allocated if positive, else requested if positive, else 0
    requested_time_s: float | None
    status: int  # SWF code: 1 completed, 0 failed, 5 cancelled, -1 unknown, ...
    user: int  # -1 unknown
    group: int  # -1 unknown
    queue: int  # -1 unknown

    @property
    def usable(self) -> bool:
        """False when the trace gives no processor count, so the job cannot be placed."""
        return self.processors > 0


def read_swf_header(path: str | Path) -> SwfHeader:
    """Parse the comment block before the first job line (the rest is not read)."""
    path = _require_file(path)
    found: dict[str, str] = {}
    lineno = 0
    with _open_text(path, "latin-1") as fh:  # latin-1: any byte decodes; comments may be odd
        try:
            for lineno, line in enumerate(fh, 1):
                body = line.strip()
                if body and not body.startswith(";"):
                    break
                m = _HEADER_LINE.match(body)
                if m:
                    key, value = m.groups()
                    found[key] = f"{found[key]}\n{value}" if key in found else value
        except _READ_ERRORS as exc:
            raise TraceError(path, f"cannot read: {exc}", line=lineno + 1) from exc
    procs, nodes = _header_count(found.get("MaxProcs")), _header_count(found.get("MaxNodes"))
    return SwfHeader(procs, nodes, found)


def _header_count(value: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", value or "")
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def iter_swf(path: str | Path) -> Iterator[SwfJob]:
    """Stream the jobs of an SWF file (plain or gzip); only a read buffer is held.

    A missing file fails here; a malformed line fails when the iteration reaches
    it, after the jobs before it have been yielded.
    """
    return _swf_jobs(_require_file(path))


def _swf_jobs(path: Path) -> Iterator[SwfJob]:
    lineno = 0
    with _open_text(path, "latin-1") as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                body = line.strip()
                if body and not body.startswith(";"):
                    yield _swf_job(path, lineno, body)
        except _READ_ERRORS as exc:  # e.g. a truncated gzip stream
            raise TraceError(path, f"cannot read: {exc}", line=lineno + 1) from exc


def _swf_job(path: Path, lineno: int, body: str) -> SwfJob:
    parts = body.split()
    if len(parts) != len(_SWF_FIELDS):
        what = f"expected {len(_SWF_FIELDS)} fields, found {len(parts)}"
        raise TraceError(path, what, line=lineno)
    v = _swf_numbers(path, lineno, parts)
    if v[1] < 0:  # without an arrival time the job cannot be replayed at all
        raise TraceError(path, "unknown or negative", line=lineno, column=_SWF_FIELDS[1])
    # Allocated processors when known (positive); cancelled jobs often have 0 or
    # -1 there, and what they asked for is the best size left.
    procs = int(v[4]) if v[4] > 0 else int(v[7]) if v[7] > 0 else 0
    return SwfJob(
        job_id=int(v[0]),
        submit_s=v[1],
        wait_s=v[2] if v[2] >= 0 else None,
        run_s=v[3] if v[3] > 0 else 0.0,
        processors=procs,
        requested_time_s=v[8] if v[8] > 0 else None,
        status=int(v[10]),
        user=int(v[11]),
        group=int(v[12]),
        queue=int(v[14]),
    )


def _swf_numbers(path: Path, lineno: int, parts: list[str]) -> list[float]:
    try:
        v = list(map(float, parts))
    except ValueError:
        v = [_float_or_nan(p) for p in parts]
    else:
        # Fast path for good lines, in C: NaN or inf anywhere makes the sum non-finite
        # (so might a huge sum, which the loop below then accepts).
        if math.isfinite(sum(v)) and all(map(float.is_integer, _swf_int_fields(v))):
            return v
    for i, x in enumerate(v):  # slow path: name the first bad field
        if not math.isfinite(x) or (i in _SWF_INTS and not x.is_integer()):
            kind = "an integer" if i in _SWF_INTS else "a finite number"
            what = f"field {i + 1} is not {kind}: {parts[i]!r}"
            raise TraceError(path, what, line=lineno, column=_SWF_FIELDS[i])
    return v


def _float_or_nan(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
