"""The GPU-sharing experiment of the FGD study, with suanli's policies.

Protocol (docs/fgd.md), per policy and seed:

- The cluster is an openb node list (the study uses the 1,213 GPU nodes).
- Inflation: the trace's pods, shuffled with the seed, then copies drawn
  uniformly with replacement from the trace and appended until the total GPU
  request (``num_gpu x gpu_milli``) would exceed ``ratio`` (1.3) x the
  cluster's GPU capacity; a trace already above that loses random pods until
  it is not.
- Pods arrive one at a time and never leave; a pod that fits nowhere is
  skipped. The arrived GPU request counts skipped pods too.
- After each pod: arrived % and allocated % of the cluster's GPU milli. The
  curve's value at k% arrived is the mean allocation over the pods whose
  arrived % rounds to k (the window k-1..k+1 when none does).

The placement step is the business layer's: the same feasibility masks and
the same policy plugins as ``schedule`` and ``simulate``.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from suanli.model.fleet import DeviceType, Fleet, NodeGroup, Site
from suanli.model.work import AcceleratorRequest, Resources
from suanli.scheduling.filters import feasible
from suanli.scheduling.policies import POLICY_NAMES, TargetWorkload, make_policy
from suanli.scheduling.request import compile_request
from suanli.scheduling.table import CandidateTable
from suanli.sim.traces import OpenbPods, _split_models, load_openb_nodes, load_openb_pods

RATIO = 1.3
STEPS = 131  # 0..130 % arrived


def openb_fleet(nodes_csv: str | Path) -> Fleet:
    """One cloud site holding the node list's nodes, GPUs shareable."""
    shapes = load_openb_nodes(nodes_csv).groups()
    site = Site(0, "openb", "cloud")
    groups = [NodeGroup(i, 0, s.name, s.count, "x86_64", s.cpu_milli, s.mem_mib,
                        (DeviceType("gpu", s.model, s.gpus, None, True),) if s.gpus else ())
              for i, s in enumerate(shapes)]
    return Fleet([site], groups, [])


def target_workload(pods: OpenbPods) -> TargetWorkload:
    """The trace's task shapes (cpu, memory, GPUs, share per GPU, models) and frequencies."""
    return TargetWorkload.from_counts(pods.shape_counts())


def pods_target(pods: OpenbPods, order: np.ndarray) -> TargetWorkload:
    """The shapes and frequencies of the pods ``order`` lists (with repeats)."""
    return TargetWorkload.from_counts(pods.shape_counts(order))


def inflate(pods: OpenbPods, capacity_milli: int, seed: int, ratio: float = RATIO) -> np.ndarray:
    """Pod indices in arrival order: the trace shuffled, then copies drawn with
    replacement until the GPU request would exceed ``ratio`` x capacity (or
    random pods removed while it exceeds it)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pods))
    req = pods.gpu_request_milli.astype(np.int64)
    target = ratio * capacity_milli
    total = int(req.sum())
    if total > target:
        keep = np.ones(order.size, bool)
        for i in rng.permutation(order.size):
            if total <= target:
                break
            keep[i] = False
            total -= int(req[order[i]])
        return order[keep]
    extra: list[np.ndarray] = []
    while True:
        draw = rng.integers(len(pods), size=4096)
        acc = total + np.cumsum(req[draw])
        over = np.flatnonzero(acc > target)
        if over.size:
            extra.append(draw[: over[0]])
            break
        extra.append(draw)
        total = int(acc[-1])
    return np.concatenate([order, *extra])


@dataclass
class Run:
    policy: str
    seed: int
    curve: np.ndarray  # allocation % at 0..130 % arrived
    placed: int
    skipped: int
    pods: int
    seconds: float
    failed: dict[tuple[int, int], int] | None = None  # (GPUs, milli each) -> GPU milli failed up to 100% arrived
    capacity: int = 0  # GPU milli of the fleet

    def failed_share(self, gpus: int) -> float:
        """GPU demand of the failed pods of ``gpus`` whole GPUs up to 100% arrived, % of capacity."""
        return 100.0 * sum(v for (g, m), v in (self.failed or {}).items() if g == gpus and m >= 1000) / max(self.capacity, 1)


def run_once(fleet: Fleet, pods: OpenbPods, order: np.ndarray, policy_name: str, seed: int,
             target: TargetWorkload | None = None) -> Run:
    """Place the pods of ``order`` one by one with the policy; the allocation curve."""
    rng = np.random.default_rng(seed + 1_000_003)
    table = CandidateTable.from_fleet(fleet)
    policy = make_policy(policy_name, fleet, target)
    capacity = int(table.view("cap")[2:].sum()) if len(fleet.resources) > 2 else 0
    gpu = fleet.kinds.get("gpu")
    requests: dict[tuple, object] = {}
    models: dict[str, tuple[str, ...]] = {}
    cols = (pods.cpu_milli, pods.memory_mib, pods.num_gpu, pods.gpu_milli, pods.gpu_spec)
    arrived = np.empty(order.size, np.int64)
    used = np.empty(order.size, np.int64)
    a_sum = u_sum = placed = 0
    failed: dict[tuple[int, int], int] = {}
    start = time.perf_counter()
    for i, (cpu, mem, ng, gm, spec) in enumerate(zip(*(c[order].tolist() for c in cols))):
        key = (cpu, mem, ng, gm, spec)
        req = requests.get(key)
        if req is None:
            m = models.get(spec)
            if m is None:
                m = models[spec] = _split_models(spec)
            accels = ()
            if ng:
                milli = gm if (ng == 1 and gm < 1000) else 1000 * ng
                accels = (AcceleratorRequest("gpu", m or None, milli),)
            req = requests[key] = compile_request(fleet, Resources(cpu, mem, accels))
        a_sum += ng * gm
        a = policy.place(table, req, feasible(table, req), fleet.network, rng)
        if a is not None:
            table.take(a)
            placed += 1
            if gpu >= 0:
                u_sum += int(a.vec[2 + gpu])
        elif ng and a_sum <= capacity:
            failed[(ng, gm)] = failed.get((ng, gm), 0) + ng * gm
        arrived[i], used[i] = a_sum, u_sum
    seconds = time.perf_counter() - start
    return Run(policy_name, seed, allocation_curve(arrived, used, capacity), placed, order.size - placed,
               order.size, seconds, failed, capacity)


def allocation_curve(arrived: np.ndarray, used: np.ndarray, capacity: int) -> np.ndarray:
    """Mean allocation % per integer arrived % (0..130); the k-1..k+1 window where empty."""
    if capacity <= 0:
        return np.zeros(STEPS)
    pct = np.round(arrived * 100.0 / capacity).astype(np.int64)
    alloc = used * 100.0 / capacity
    ok = (pct >= 0) & (pct < STEPS)
    sums = np.bincount(pct[ok], weights=alloc[ok], minlength=STEPS)[:STEPS]
    counts = np.bincount(pct[ok], minlength=STEPS)[:STEPS]
    out = np.full(STEPS, np.nan)
    have = counts > 0
    out[have] = sums[have] / counts[have]
    for k in np.flatnonzero(~have):
        lo, hi = max(k - 1, 0), min(k + 2, STEPS)
        c = counts[lo:hi].sum()
        if c:
            out[k] = sums[lo:hi].sum() / c
    # still empty (no pod arrived near k): carry the last value forward
    for k in range(STEPS):
        if np.isnan(out[k]):
            out[k] = out[k - 1] if k else 0.0
    return out


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``42,43`` or ``7``."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds += list(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    return seeds


def experiment(nodes_csv: str | Path, pods_csv: str | Path, policies: list[str], seeds: list[int],
               on_run=None) -> tuple[str, list[Run]]:
    """Every policy x seed on one pod file; the workload's name and the runs."""
    for p in policies:
        if p not in POLICY_NAMES:
            raise ValueError(f"unknown policy {p!r}; expected one of {', '.join(POLICY_NAMES)}")
    fleet = openb_fleet(nodes_csv)
    pods = load_openb_pods(pods_csv)
    capacity = fleet_capacity(fleet)
    target = target_workload(pods)
    workload = Path(pods_csv).stem.removeprefix("openb_pod_list_")
    runs = []
    for seed in seeds:
        order = inflate(pods, capacity, seed)
        for p in policies:
            # FGD's typical pods are those of the workload it runs (the trace inflated with the seed)
            run = run_once(fleet, pods, order, p, seed, pods_target(pods, order) if p == "fgd" else target)
            runs.append(run)
            if on_run is not None:
                on_run(run)
    return workload, runs


def write_csv(path: Path, workload: str, runs: list[Run]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "policy", "seed", *range(STEPS)])
        for r in runs:
            w.writerow([workload, r.policy, r.seed, *(f"{v:.4f}" for v in r.curve)])
    tmp.replace(path)


STUDY_CSV = Path(__file__).with_name("fgd_study.csv")


def study_figures(workload: str, path: Path = STUDY_CSV) -> dict[str, dict[int, float]]:
    """The study's own unallocated GPU % at 100% arrived for ``workload``, per
    policy (``fgd``, ``bestfit``) and seed; empty for a workload it did not run."""
    out: dict[str, dict[int, float]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            if row["workload"] == workload:
                out.setdefault(row["policy"], {})[int(row["seed"])] = round(100.0 - float(row["allocated_at_100"]), 6)
    return out


@dataclass
class Summary:
    """One policy's runs at 100% arrived: unallocated GPU % (mean, sample sd,
    median) and the failed demand of 8-GPU pods (mean, % of capacity)."""

    policy: str
    unallocated: list[float]
    failed8: float = float("nan")

    @property
    def mean(self) -> float:
        return float(np.mean(self.unallocated))

    @property
    def sd(self) -> float:
        return float(np.std(self.unallocated, ddof=1)) if len(self.unallocated) > 1 else 0.0

    @property
    def median(self) -> float:
        return float(np.median(self.unallocated))


def summarize(runs: list[Run]) -> dict[str, Summary]:
    by: dict[str, list[Run]] = {}
    for r in runs:
        by.setdefault(r.policy, []).append(r)
    return {p: Summary(p, [100.0 - float(r.curve[100]) for r in rs], float(np.mean([r.failed_share(8) for r in rs])))
            for p, rs in by.items()}


def fleet_capacity(fleet: Fleet) -> int:
    """GPU milli of the fleet."""
    return 1000 * int(sum(g.count * sum(d.count for d in g.devices) for g in fleet.groups))


def medians(runs: list[Run]) -> dict[str, np.ndarray]:
    by: dict[str, list[np.ndarray]] = {}
    for r in runs:
        by.setdefault(r.policy, []).append(r.curve)
    return {p: np.median(np.stack(c), axis=0) for p, c in by.items()}


def plot(path: Path, workload: str, runs: list[Run]) -> None:
    """Unallocated GPU % against arrived %, the median over seeds, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = medians(runs)
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=110, gridspec_kw={"width_ratios": [1, 1.15]})
    x = np.arange(STEPS)
    # the zoom starts a little before the median policy leaves the diagonal (its first failed pods)
    leave = sorted(int(np.argmax((100 - c) > 100 - x + 0.5)) for c in med.values())
    lo = max(leave[len(leave) // 2] - 4, 0)
    for p, curve in med.items():
        line, = ax.plot(x, 100 - curve, lw=1.5)
        zoom.plot(x[lo:], 100 - curve[lo:], lw=1.6, color=line.get_color(),
                  label=f"{p} ({100 - curve[100]:.2f}% at 100%)")
    n = len({r.seed for r in runs})
    fig.suptitle(f"GPU sharing on openb ({workload}): unallocated GPU against arrived GPU request, "
                 f"median of {n} seed{'s' if n != 1 else ''}", fontsize=10)
    top = max(float(np.max(100 - c[min(lo + 4, STEPS - 1):])) for c in med.values())
    for a, (x0, y1) in ((ax, (0, None)), (zoom, (lo, top * 1.1 + 0.5))):
        a.set_xlabel("arrived GPU request, % of capacity")
        a.set_xlim(x0, STEPS - 1)
        a.set_ylim(0, y1)
        a.axvline(100, color="#999", lw=0.8, ls="--")
        a.grid(alpha=0.3)
    ax.set_ylabel("unallocated GPU, %")
    zoom.set_title(f"from {lo}% arrived", fontsize=9)
    zoom.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, metadata={"Software": None})
    plt.close(fig)
    tmp.replace(path)
