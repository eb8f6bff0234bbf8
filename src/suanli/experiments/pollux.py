"""Pollux's workloads (OSDI'21) replayed with suanli's elastic policies.

Protocol (docs/scheduling.md, "Elastic gangs"), kept to the artifact's
simulator (``../shared/data/pollux-osdi21/MODEL.md``) so that its figures
stand beside ours:

- The cluster: 16 nodes of 4 GPUs. Each job is an elastic gang of one-GPU
  members: ``size`` the GPUs its user asked for, ``minSize`` 1, ``maxSize``
  the most its batch sizes can use (``Profile.max_gpus``), with the
  application's measured profile as its speed-up model (``speedup.Measured``):
  throughput by GPUs per node and batch size, statistical efficiency by
  batch size, progress by epochs.
- Time goes in rounds of 60 s. In a round each job runs at its allocation;
  a job that finishes mid-round ends then. Then the policy decides every
  active job's width (``scheduling/elastic.py``); a job whose width changes
  (its first start too) stops for its ``resizeCost`` of 30 s, the
  artifact's restart penalty. Members are placed on the nodes with the
  most free GPUs (whole nodes first); a job whose width is unchanged stays.
- ``none`` and ``greedy`` run each job at the batch size its user gave;
  ``goodput`` runs each at the batch size of most goodput for its
  allocation (as Pollux's jobs do).
- What differs from Pollux, and favours suanli: ``goodput`` reads each
  job's declared profile, where Pollux fits its model online from what the
  job has run at (and so grows a new job's GPUs by doubling).

JCT = completion - submission; makespan = last completion - first
submission; GPU utilisation = GPU-seconds allocated / (GPUs x makespan).
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from suanli.scheduling.elastic import POLICIES, Jobs, decide

NODES, GPUS = 16, 4
ROUND_S = 60.0
RESIZE_COST_S = 30.0
ARTIFACT_POLICIES = ("pollux", "optimus", "tiresias")


@dataclass(frozen=True)
class Job:
    name: str
    app: str
    submitted: float
    replicas: int  # GPUs its user asked for
    batch: int  # total batch size its user asked for


@dataclass
class Outcome:
    policy: str
    workload: str
    jct_s: dict[str, float]
    makespan_s: float
    gpu_seconds: float
    resizes: int
    seconds: float  # wall time of the replay
    rounds: int
    widths: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # job -> (t, width) at each change

    def summary(self) -> dict[str, Any]:
        jcts = np.array(list(self.jct_s.values()))
        return {"avg_jct_s": round(float(jcts.mean()), 1), "p50_jct_s": round(float(np.percentile(jcts, 50)), 1),
                "p99_jct_s": round(float(np.percentile(jcts, 99)), 1), "makespan_s": round(self.makespan_s, 1),
                "gpu_utilisation": round(self.gpu_seconds / (NODES * GPUS * self.makespan_s), 4)
                if self.makespan_s > 0 else 0.0,
                "jobs": len(jcts), "resizes": self.resizes, "rounds": self.rounds,
                "replay_s": round(self.seconds, 3)}


class WorkloadError(ValueError):
    """A workload or profile that cannot be read (the message names the file and row)."""


def load_workload(path: Path) -> list[Job]:
    jobs = []
    need = ("name", "time", "application", "num_replicas", "batch_size")
    try:
        with open(path, newline="") as f:
            rows = csv.DictReader(f)
            missing = [c for c in need if c not in (rows.fieldnames or ())]
            if missing:
                raise WorkloadError(f"{path}: no column {', '.join(missing)} (expected {','.join(need)})")
            for i, row in enumerate(rows, start=2):
                try:
                    jobs.append(Job(row["name"], row["application"], float(row["time"]), int(row["num_replicas"]),
                                    int(row["batch_size"])))
                except (TypeError, ValueError):
                    raise WorkloadError(f"{path}:{i}: expected numbers in time, num_replicas and batch_size, "
                                        f"got {row}") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: {exc.strerror or exc}") from None
    if not jobs:
        raise WorkloadError(f"{path}: no jobs")
    return jobs


def load_load(path: Path) -> float:
    """The relative load of a workload from its folder's name (workloads-1.5); 1.0 otherwise."""
    m = re.search(r"workloads?-(\d+(?:\.\d+)?)$", path.resolve().parent.name)
    return float(m.group(1)) if m else 1.0


def replay(jobs: list[Job], profiles: dict, policy: str, workload: str = "",
           max_slowdown: float = 4.0, hysteresis: float = 0.05) -> Outcome:
    """One workload under one policy (module docstring)."""
    started = time.perf_counter()
    n = len(jobs)
    prof = [profiles[j.app] for j in jobs]
    submitted = np.array([j.submitted for j in jobs])
    fixed_batch = policy != "goodput"
    batch = [j.batch if fixed_batch else None for j in jobs]
    # the most GPUs a job's batch sizes can use: its own batch's at a fixed batch
    cap = np.array([max(1, min(p.max_gpus, NODES * GPUS, j.batch // p.min_local if fixed_batch else NODES * GPUS))
                    for p, j in zip(prof, jobs)], dtype=np.int64)
    size = np.minimum(np.array([max(1, j.replicas) for j in jobs], dtype=np.int64), cap)
    most = size if policy == "none" else cap
    progress = np.zeros(n)
    total = np.array([float(p.total) for p in prof])
    width = np.zeros(n, dtype=np.int64)
    placement: list[tuple[int, ...]] = [()] * n
    on_nodes: list[np.ndarray] = [np.zeros(NODES, dtype=np.int64) for _ in range(n)]
    free = np.full(NODES, GPUS, dtype=np.int64)
    blocked = np.zeros(n)  # the time until which a restart stops it
    changed_at = np.full(n, -np.inf)  # when its width last changed
    done = np.full(n, np.nan)
    widths: dict[str, list[tuple[float, int]]] = {j.name: [] for j in jobs}
    alone = np.array([_alone(p, b, int(m)) for p, b, m in zip(prof, batch, cap)])
    gpu_seconds, resizes, rounds = 0.0, 0, 0
    t = 0.0
    while np.isnan(done).any():
        # this round: every running job goes on at its allocation
        for j in np.flatnonzero((width > 0) & np.isnan(done)):
            begin = max(t, blocked[j])
            gpu_seconds += width[j] * ROUND_S
            span = t + ROUND_S - begin
            if span <= 0:
                continue
            left = prof[j].time_to_finish(placement[j], progress[j], batch[j])
            if left <= span:
                done[j] = begin + left
                progress[j] = total[j]
            else:
                progress[j] = prof[j].advance(placement[j], progress[j], span, batch[j])
        t += ROUND_S
        rounds += 1
        for j in np.flatnonzero(~np.isnan(done) & (width > 0)):  # finished: its GPUs go at the round's end
            free += on_nodes[j]
            on_nodes[j][:] = 0
            width[j] = 0
            placement[j] = ()
        active = np.flatnonzero((submitted <= t) & np.isnan(done))
        if len(active) == 0:
            continue
        state = Jobs(current=width[active], least=np.ones(len(active), dtype=np.int64), most=most[active],
                     units=np.ones(len(active)), speed=_speeds(prof, active, progress, batch, most),
                     left=total[active] - progress[active], waited=t - submitted[active], alone=alone[active],
                     restart=np.full(len(active), RESIZE_COST_S), order=submitted[active] + active * 1e-6,
                     tenant=np.zeros(len(active), dtype=np.int64), preemptible=np.ones(len(active), dtype=bool),
                     since=t - changed_at[active])
        new = decide(policy, state, float(NODES * GPUS), max_slowdown=max_slowdown, hysteresis=hysteresis)
        changed = active[new != width[active]]
        for j in changed:  # free first, then place the widest first on the freest nodes
            free += on_nodes[j]
            on_nodes[j][:] = 0
        for j in sorted(changed, key=lambda j: -int(new[np.searchsorted(active, j)])):
            w = int(new[np.searchsorted(active, j)])
            if width[j] > 0 or w > 0:
                resizes += width[j] > 0 and w > 0
                widths[jobs[j].name].append((t, w))
            width[j] = w
            changed_at[j] = t
            if w == 0:
                placement[j] = ()
                continue
            take = _consolidate(free, w)
            free -= take
            on_nodes[j] = take
            placement[j] = tuple(int(c) for c in take if c)
            blocked[j] = t + RESIZE_COST_S
    jct = {j.name: float(done[i] - j.submitted) for i, j in enumerate(jobs)}
    makespan = float(np.nanmax(done) - submitted.min())
    return Outcome(policy, workload, jct, makespan, gpu_seconds, int(resizes), time.perf_counter() - started, rounds,
                   widths)


def _consolidate(free: np.ndarray, w: int) -> np.ndarray:
    """GPUs to take per node for ``w`` members, on as few nodes as they go:
    whole free nodes first, then the rest on the node it fits tightest
    (leaving the emptier nodes whole for wider jobs), else the freest nodes."""
    take = np.zeros_like(free)
    if w >= GPUS:
        for k in np.flatnonzero(free == GPUS)[: w // GPUS]:
            take[k] = GPUS
            w -= GPUS
    while w > 0:
        left = free - take
        fits = np.flatnonzero(left >= w)
        if len(fits):
            k = fits[np.argmin(left[fits])]
        else:
            k = int(np.argmax(left))
            if left[k] <= 0:
                raise RuntimeError("widths beyond the cluster's free GPUs")  # decide() keeps within the room
        got = min(int(left[k]), w)
        take[k] += got
        w -= got
    return take


def _packed(w: int) -> tuple[int, ...]:
    return (GPUS,) * (w // GPUS) + ((w % GPUS,) if w % GPUS else ())


def _speeds(prof: list, active: np.ndarray, progress: np.ndarray, batch: list, most: np.ndarray) -> np.ndarray:
    """[job, width 0..] progress a second at each width up to the job's most, packed four a node."""
    top = int(most[active].max())
    out = np.zeros((len(active), top + 1))
    for row, j in enumerate(active):
        p, m = prof[j], int(most[j])
        for w in range(1, m + 1):
            out[row, w] = p.rate(_packed(w), progress[j], batch[j])
        out[row, m + 1:] = out[row, m]
    return out


def _alone(p, batch: int | None, most: int) -> float:
    """Seconds the whole job takes alone at its best width (up to ``most``)."""
    return min(p.time_to_finish(_packed(w), 0.0, batch) for w in range(1, most + 1))


def artifact(root: Path, workload: str, load: float) -> dict[str, dict[str, float]]:
    """The artifact's own results for ``workload`` at ``load``: per policy the
    average, p50 and p99 JCT (seconds), where it ran that load."""
    out = {}
    for name in ARTIFACT_POLICIES:
        path = root / "results-jobload" / f"{name}-{load:g}" / "summary.json"
        if not path.is_file():
            path = root / "results-jobload" / f"{name}-{load:.1f}" / "summary.json"
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        jcts = data.get("jcts", {}).get(workload)
        if not jcts:
            continue
        v = np.array(list(jcts.values()), dtype=float)
        out[name] = {"avg_jct_s": round(float(v.mean()), 1), "p50_jct_s": round(float(np.percentile(v, 50)), 1),
                     "p99_jct_s": round(float(np.percentile(v, 99)), 1), "jobs": len(v)}
    return out


def experiment(workload: Path, traces: Path, policies: list[str],
               on_run: Callable[[Outcome], None] | None = None) -> tuple[str, list[Outcome]]:
    from suanli.model.profiles import Profile

    jobs = load_workload(workload)
    if (traces / "traces").is_dir():  # the data set's folder
        traces = traces / "traces"
    if not traces.is_dir():
        raise WorkloadError(f"{traces}: no such folder of profiles")
    profiles = {d.name: Profile.load(d) for d in sorted(traces.iterdir()) if (d / "placements.csv").is_file()}
    unknown = sorted({j.app for j in jobs} - set(profiles))
    if unknown:
        raise WorkloadError(f"{workload}: no profile for {', '.join(unknown)} under {traces}")
    name = workload.stem
    runs = []
    for policy in policies:
        run = replay(jobs, profiles, policy, name)
        runs.append(run)
        if on_run is not None:
            on_run(run)
    return name, runs


def results(runs: list[Outcome], ref: dict) -> dict[str, Any]:
    """An object keyed by policy, each with its figures (``avg_jct_s``, ...)
    and the artifact's average JCT for the workload beside (``artifact``:
    pollux, optimus, tiresias, where it ran that load)."""
    beside = {name: r["avg_jct_s"] for name, r in ref.items()}
    return {r.policy: {**r.summary(), "artifact": beside} for r in runs}


def write_outputs(out: Path, runs: list[Outcome], ref: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "jcts.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", *[r.policy for r in runs]])
        for name in runs[0].jct_s:
            w.writerow([name, *[round(r.jct_s[name], 1) for r in runs]])
    (out / "result.json").write_text(json.dumps(results(runs, ref), indent=2) + "\n")
    with open(out / "widths.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "job", "t", "width"])
        for r in runs:
            for job, changes in r.widths.items():
                for t, width in changes:
                    w.writerow([r.policy, job, t, width])


def hours(s: float) -> str:
    return f"{s / 3600:.2f}" if math.isfinite(s) else "-"


__all__ = ["POLICIES", "Job", "Outcome", "WorkloadError", "artifact", "experiment", "load_load", "load_workload",
           "replay", "results", "write_outputs"]
