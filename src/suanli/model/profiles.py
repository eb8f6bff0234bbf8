"""Measured speed-up profiles of deep-learning training jobs.

A profile holds, for one application, the measured step time of one
optimizer step at each GPU placement and local batch size, and the
gradient statistics of each epoch at each validated total batch size.
From these it gives the rate of statistical progress (in steps at the
smallest batch size B0) of a job at a placement, either with a fixed total
batch or with the batch size that gives the highest goodput, and so how
long a job takes to finish at a constant placement.

A placement is a tuple of GPUs per node, e.g. ``(4, 2)``. Zeros are
dropped, and a placement is the same as any cyclic rotation of it
(``(4, 2, 4)`` is ``(2, 4, 4)``), but not as any other reordering.

The files read, under ``traces/<app>/``:

* ``placements.csv`` (``placement,local_bsz,step_time,sync_time``): every
  placement over at most 4 nodes, written as digits in its smallest
  rotation;
* ``scalability.csv`` (``num_nodes,num_replicas,local_bsz,step_time,
  sync_time``): larger jobs, used with the former to interpolate
  placements over 5 or more nodes;
* ``validation-<B>.csv`` (``progress,iteration,metric,grad_sqr,grad_var``),
  one row per epoch.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from scipy.interpolate import LinearNDInterpolator

# Tolerance of the ceilings and floors of batch arithmetic.
_EPS = 1e-8
# Number of candidate total batch sizes tried by the batch-size choice.
_CANDIDATES = 50
# Nodes beyond this count are treated as this many by the interpolation.
_MAX_NODES = 16
# The most GPUs one job may hold.
_MAX_GPUS = 64

# Per-application settings that the files do not carry.
_OVERRIDES: dict[str, dict[str, int]] = {
    "bert": {"epochs": 2},
    "cifar10": {"epochs": 100},
    "deepspeech2": {"epochs": 80},
    "imagenet": {"epochs": 90},
    "ncf": {"epochs": 10, "max_gpus": 1},
    "yolov3": {"epochs": 50, "max_local": 8},
}

Placement = tuple[int, ...]


def canonical(placement: Sequence[int]) -> Placement:
    """The placement without zeros, in its lexicographically smallest rotation."""
    p = tuple(int(g) for g in placement if g)
    if len(p) < 2:
        return p
    return min(p[i:] + p[:i] for i in range(len(p)))


def packed(replicas: int, per_node: int = 4) -> Placement:
    """GPUs per node when `replicas` GPUs are packed `per_node` to a node."""
    if replicas < 0 or per_node < 1:
        raise ValueError(f"bad packing: {replicas} GPUs, {per_node} per node")
    full, rest = divmod(replicas, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


def _read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    """The header and the numeric rows of a CSV file."""
    with open(path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=float)
    return header, data


def _columns(path: Path, names: Sequence[str]) -> list[np.ndarray]:
    header, data = _read_csv(path)
    try:
        return [data[:, header.index(n)] for n in names]
    except ValueError as e:
        raise ValueError(f"{path}: expected columns {list(names)}, found {header}") from e


def _linear_interpolator(points: np.ndarray, values: np.ndarray) -> LinearNDInterpolator:
    """SciPy's piecewise-linear interpolator on the Delaunay triangulation of
    `points` (NaN outside their convex hull).

    The triangulation's barycentric transforms are computed here in one
    batched inversion, in the layout SciPy uses (rows 0..d-1: the inverse of
    the matrix whose columns are the simplex's edges from its last vertex;
    row d: that vertex; NaN for a simplex too flat to invert). SciPy would
    otherwise compute them lazily with one small LAPACK call per simplex,
    which can take seconds under a multi-threaded BLAS. The triangulation of
    points on a grid has many flat simplices."""
    from scipy.interpolate import LinearNDInterpolator
    from scipy.spatial import Delaunay

    tri = Delaunay(points)
    if hasattr(tri, "_transform"):
        corners = points[tri.simplices]  # (simplex, vertex, axis)
        origin = corners[:, -1, :]
        edges = (corners[:, :-1, :] - origin[:, None, :]).transpose(0, 2, 1)
        d = points.shape[1]
        transform = np.full((len(edges), d + 1, d), np.nan)
        transform[:, d, :] = origin
        volume = np.abs(np.linalg.det(edges))
        ok = volume > 1e-14 * np.prod(np.linalg.norm(edges, axis=1), axis=1)
        inverse = np.linalg.inv(edges[ok])
        # The reciprocal condition number (1-norm of the transpose), as the
        # lazily computed transforms would judge it.
        rcond = 1 / (
            np.abs(edges[ok]).sum(axis=2).max(axis=1)
            * np.abs(inverse).sum(axis=2).max(axis=1)
        )
        good = np.flatnonzero(ok)[rcond >= np.finfo(float).eps]
        transform[good, :d, :] = inverse[rcond >= np.finfo(float).eps]
        tri._transform = transform
    return LinearNDInterpolator(tri, values)


@dataclass(frozen=True, slots=True)
class _Schedule:
    """Progress rate per epoch at one placement and batch rule, and the
    cumulative time to reach each epoch boundary from progress 0."""

    rates: tuple[float, ...]
    cum: tuple[float, ...]  # cum[e] = seconds from 0 to boundary P(e)


class Profile:
    """One application's measured profile."""

    def __init__(
        self,
        name: str,
        placements: dict[Placement, tuple[np.ndarray, np.ndarray, np.ndarray]],
        scalability: np.ndarray,
        validation: dict[int, dict[str, np.ndarray]],
        *,
        epochs: int | None = None,
        min_local: int | None = None,
        max_local: int | None = None,
        max_gpus: int | None = None,
    ) -> None:
        """`placements` maps a canonical placement to its (local_bsz,
        step_time, sync_time) rows sorted by local_bsz; `scalability` has rows
        (num_nodes, num_replicas, local_bsz, step_time, sync_time);
        `validation` maps a validated batch size to its columns."""
        if not placements or not validation:
            raise ValueError(f"{name}: no placements or no validation data")
        self.name = name
        self._placements = placements
        self._scalability = scalability
        sizes = sorted(validation)
        self._sizes = np.array(sizes, dtype=float)
        self.b0 = int(sizes[0])
        self.bmax = int(sizes[-1])
        all_local = np.concatenate([rows[0] for rows in placements.values()])
        self.min_local = int(min_local if min_local is not None else all_local.min())
        self.max_local = int(max_local if max_local is not None else all_local.max())
        shortest = min(len(validation[b]["progress"]) for b in sizes)
        self.epochs = int(epochs if epochs is not None else shortest)
        if not 1 <= self.epochs <= shortest:
            raise ValueError(f"{name}: {self.epochs} epochs but only {shortest} recorded")
        e = self.epochs
        progress = np.array([validation[b]["progress"][:e] for b in sizes])
        self._sqr = np.array([validation[b]["grad_sqr"][:e] for b in sizes])
        self._var = np.array([validation[b]["grad_var"][:e] for b in sizes])
        # Epoch e ends when progress reaches the least progress any validated
        # batch size had made by the end of that epoch.
        bounds = np.concatenate([[0.0], progress.min(axis=0)])
        if np.any(np.diff(bounds) <= 0):
            raise ValueError(f"{name}: epoch boundaries are not increasing")
        self._bounds: list[float] = [float(x) for x in bounds]
        self.total = self._bounds[-1]
        cap = min(_MAX_GPUS, self.bmax // self.min_local)
        self.max_gpus = int(min(cap, max_gpus) if max_gpus is not None else cap)
        self._interp: LinearNDInterpolator | None = None  # built when first needed
        self._canon: dict[Sequence[int], Placement] = {}
        self._step: dict[tuple[Placement, float], tuple[float, float]] = {}
        self._gain: dict[int, np.ndarray] = {}
        self._best: dict[Placement, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._sched: dict[tuple[Placement, int | None], _Schedule] = {}
        self._sched_raw: dict[tuple[Sequence[int], int | None], _Schedule | None] = {}

    # ------------------------------------------------------------------ files

    @classmethod
    def load(cls, directory: str | Path) -> Profile:
        """Read `traces/<app>`; the application's name is the directory's."""
        d = Path(directory)
        name = d.name
        pid, bsz, step, sync = _columns(
            d / "placements.csv", ("placement", "local_bsz", "step_time", "sync_time")
        )
        placements: dict[Placement, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for ident in np.unique(pid):
            rows = pid == ident
            order = np.argsort(bsz[rows], kind="stable")
            key = tuple(int(c) for c in str(int(ident)))
            if canonical(key) != key:
                raise ValueError(f"{d}: placement {key} is not in its smallest rotation")
            placements[key] = (bsz[rows][order], step[rows][order], sync[rows][order])
        scal = np.column_stack(
            _columns(
                d / "scalability.csv",
                ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"),
            )
        )
        validation: dict[int, dict[str, np.ndarray]] = {}
        for path in d.glob("validation-*.csv"):
            size = int(path.stem.split("-")[-1])
            cols = ("progress", "grad_sqr", "grad_var")
            validation[size] = dict(zip(cols, _columns(path, cols)))
        return cls(name, placements, scal, validation, **_OVERRIDES.get(name, {}))

    # ------------------------------------------------------------- throughput

    def _canonical(self, placement: Sequence[int]) -> Placement:
        try:
            c = self._canon.get(placement)
        except TypeError:  # an unhashable placement, such as a list
            return canonical(placement)
        if c is None:
            c = self._canon[placement] = canonical(placement)
        return c

    def step_time(self, placement: Sequence[int], local_bsz: float) -> tuple[float, float]:
        """(step_time, sync_time) in seconds of one optimizer step without
        accumulation, `local_bsz` samples per GPU."""
        p = self._canonical(placement)
        key = (p, float(local_bsz))
        hit = self._step.get(key)
        if hit is None:
            hit = self._step[key] = self._measure(p, float(local_bsz))
        return hit

    def _measure(self, p: Placement, m: float) -> tuple[float, float]:
        if not p:
            raise ValueError(f"{self.name}: an empty placement has no step time")
        rows = self._placements.get(p)
        if rows is not None:
            bsz, step, sync = rows
            if not bsz[0] <= m <= bsz[-1]:
                raise ValueError(
                    f"{self.name}: local batch {m} outside {bsz[0]:g}..{bsz[-1]:g} at {p}"
                )
            return float(np.interp(m, bsz, step)), float(np.interp(m, bsz, sync))
        nodes = min(len(p), _MAX_NODES)
        step, sync = self._interpolator()([[nodes, sum(p), m]])[0]
        if not (math.isfinite(step) and math.isfinite(sync)):
            raise ValueError(f"{self.name}: {p} at local batch {m} is outside the measurements")
        return float(step), float(sync)

    def _interpolator(self) -> LinearNDInterpolator:
        """Piecewise-linear interpolation over (nodes, GPUs, local batch) of
        the placements' times averaged per point, and the larger jobs'."""
        if self._interp is None:
            sums: dict[tuple[float, float, float], list[float]] = {}
            for p, (bsz, step, sync) in self._placements.items():
                for b, s, y in zip(bsz, step, sync):
                    acc = sums.setdefault((len(p), sum(p), float(b)), [0.0, 0.0, 0])
                    acc[0] += s
                    acc[1] += y
                    acc[2] += 1
            pts = [k for k in sums]
            vals = [(a[0] / a[2], a[1] / a[2]) for a in sums.values()]
            pts.extend(map(tuple, self._scalability[:, :3]))
            vals.extend(map(tuple, self._scalability[:, 3:5]))
            self._interp = _linear_interpolator(np.array(pts, float), np.array(vals, float))
        return self._interp

    def _optimizer_step(self, placement: Sequence[int], m: float, a: int) -> float:
        """Seconds of one optimizer step with `a` accumulation micro-steps."""
        step, sync = self.step_time(placement, m)
        return step + a * (step - sync)

    # ---------------------------------------------------------------- batches

    def _gains(self, batch: int) -> np.ndarray:
        """Progress per optimizer step at total batch `batch`, per epoch."""
        g = self._gain.get(batch)
        if g is None:
            if not self.b0 <= batch <= self.bmax:
                raise ValueError(
                    f"{self.name}: batch {batch} outside the validated {self.b0}..{self.bmax}"
                )
            sizes = self._sizes
            hi = int(np.searchsorted(sizes, batch, side="left"))
            if sizes[hi] == batch:
                sqr, var = self._sqr[hi], self._var[hi]
            else:
                lo = hi - 1
                w = (batch - sizes[lo]) / (sizes[hi] - sizes[lo])
                sqr = (1 - w) * self._sqr[lo] + w * self._sqr[hi]
                var = (1 - w) * self._var[lo] + w * self._var[hi]
            s = batch / self.b0
            denom = var / s + sqr
            safe = np.where(denom > 0, denom, 1.0)
            g = self._gain[batch] = np.where(denom > 0, (var + sqr) / safe, 1.0)
        return g

    def gain(self, batch: int, progress: float) -> float:
        """Progress (in B0-steps) made by one optimizer step of total batch
        `batch` during the epoch containing `progress`."""
        return float(self._gains(batch)[min(self.epoch_of(progress), self.epochs - 1)])

    def fixed_config(self, replicas: int, batch: int) -> tuple[int, int]:
        """(m, a): per-GPU micro-batch and accumulation steps for a total batch
        `batch` on `replicas` GPUs."""
        if replicas < 1 or batch < 1:
            raise ValueError(f"bad configuration: batch {batch} on {replicas} GPUs")
        local = math.ceil(batch / replicas - _EPS)
        a = math.ceil(local / self.max_local - _EPS) - 1
        if replicas == 1 and batch > self.b0:
            a = max(a, 1)
        m = math.ceil(local / (a + 1) - _EPS)
        m = min(m, self.bmax // (replicas * (a + 1)))
        return m, a

    def _best_table(self, p: Placement) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per epoch: the best (B, m, a) at placement `p` and its rate."""
        hit = self._best.get(p)
        if hit is not None:
            return hit
        r = sum(p)
        low = max(self.b0, self.min_local * r)
        local = np.geomspace(low, self.bmax, _CANDIDATES) / r
        accum = np.ceil(local / self.max_local - _EPS).astype(int) - 1
        if r == 1:
            accum = np.where(local > self.b0 + _EPS, np.maximum(accum, 1), accum)
        micro = np.ceil(local / (accum + 1) - _EPS).astype(int)
        valid = (self.min_local <= micro) & (micro <= self.max_local)
        micro = np.minimum(micro, self.bmax // (r * (accum + 1)))
        valid &= micro >= self.min_local
        rates = np.full((_CANDIDATES, self.epochs), -np.inf)
        seen: dict[tuple[int, int], np.ndarray] = {}
        for i in np.flatnonzero(valid):
            m, a = int(micro[i]), int(accum[i])
            row = seen.get((m, a))
            if row is None:
                batch = r * m * (a + 1)
                try:
                    seconds = self._optimizer_step(p, m, a)
                    row = self._gains(batch) / seconds
                except ValueError:
                    row = np.full(self.epochs, -np.inf)
                seen[(m, a)] = row
            rates[i] = row
        if not np.isfinite(rates).any():
            raise ValueError(f"{self.name}: no valid batch size at placement {p}")
        pick = np.argmax(rates, axis=0)
        m_best, a_best = micro[pick], accum[pick]
        table = (
            r * m_best * (a_best + 1),
            m_best,
            a_best,
            rates[pick, np.arange(self.epochs)],
        )
        self._best[p] = table
        return table

    def best_config(self, placement: Sequence[int], progress: float) -> tuple[int, int, int]:
        """(B, m, a) with the highest goodput at `placement` during the epoch
        containing `progress`."""
        p = self._canonical(placement)
        if not p:
            raise ValueError(f"{self.name}: an empty placement has no batch size")
        total, micro, accum, _ = self._best_table(p)
        e = min(self.epoch_of(progress), self.epochs - 1)
        return int(total[e]), int(micro[e]), int(accum[e])

    # ------------------------------------------------------------------ rates

    def _schedule(self, placement: Sequence[int], batch: int | None) -> _Schedule | None:
        """Rates per epoch and times to each epoch boundary; None when the
        placement is empty."""
        key = (placement, batch)
        try:
            return self._sched_raw[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable placement, such as a list
            return self._schedule(tuple(placement), batch)
        p = self._canonical(placement)
        sched = self._sched.get((p, batch)) if p else None
        if p and sched is None:
            if batch is None:
                rates = self._best_table(p)[3]
            else:
                r = sum(p)
                m, a = self.fixed_config(r, batch)
                rates = self._gains(r * m * (a + 1)) / self._optimizer_step(p, m, a)
            lengths = np.diff(np.array(self._bounds))
            cum = np.concatenate([[0.0], np.cumsum(lengths / rates)])
            sched = _Schedule(tuple(float(x) for x in rates), tuple(float(x) for x in cum))
            self._sched[(p, batch)] = sched
        self._sched_raw[key] = sched
        return sched

    def boundary(self, epoch: int) -> float:
        """Progress P(epoch) at which epoch `epoch` starts (P(0) = 0)."""
        return self._bounds[epoch]

    def epoch_of(self, progress: float) -> int:
        """The epoch containing `progress`; `epochs` once the job is done."""
        return min(bisect_right(self._bounds, progress) - 1, self.epochs) if progress > 0 else 0

    def epoch_rate(self, placement: Sequence[int], epoch: int, batch: int | None = None) -> float:
        """Progress per second at `placement` during epoch `epoch`."""
        sched = self._schedule(placement, batch)
        if sched is None or epoch >= self.epochs:
            return 0.0
        return sched.rates[epoch]

    def rate(self, placement: Sequence[int], progress: float, batch: int | None = None) -> float:
        """Progress per second (B0-steps/s) at `placement` during the epoch
        containing `progress`: with the best batch size when `batch` is None,
        else with total batch `batch`. Zero on no GPUs or once done; a
        ValueError where the placement admits no valid configuration."""
        sched = self._schedule(placement, batch)
        if sched is None:
            return 0.0
        e = self.epoch_of(progress)
        return sched.rates[e] if e < self.epochs else 0.0

    def _clock(self, sched: _Schedule, progress: float) -> float:
        """Seconds from progress 0 to `progress` under `sched`."""
        e = self.epoch_of(progress)
        if e >= self.epochs:
            return sched.cum[-1]
        return sched.cum[e] + (max(progress, 0.0) - self._bounds[e]) / sched.rates[e]

    def time_to_finish(
        self, placement: Sequence[int], progress: float, batch: int | None = None
    ) -> float:
        """Seconds to go from `progress` to `total` at a constant placement."""
        if progress >= self.total:
            return 0.0
        sched = self._schedule(placement, batch)
        if sched is None:
            return math.inf
        return max(sched.cum[-1] - self._clock(sched, progress), 0.0)

    def advance(
        self,
        placement: Sequence[int],
        progress: float,
        seconds: float,
        batch: int | None = None,
    ) -> float:
        """Progress after `seconds` at a constant placement, at most `total`."""
        if progress >= self.total:
            return self.total
        sched = self._schedule(placement, batch)
        if sched is None or seconds <= 0:
            return progress
        t = self._clock(sched, progress) + seconds
        if t >= sched.cum[-1]:
            return self.total
        e = min(bisect_right(sched.cum, t) - 1, self.epochs - 1)
        done = self._bounds[e] + (t - sched.cum[e]) * sched.rates[e]
        return max(progress, min(done, self._bounds[e + 1]))


def load_profiles(root: str | Path) -> dict[str, Profile]:
    """Every application's profile under `root/traces`, by name."""
    traces = Path(root) / "traces"
    return {
        d.name: Profile.load(d)
        for d in sorted(traces.iterdir())
        if d.is_dir() and (d / "placements.csv").is_file()
    }
