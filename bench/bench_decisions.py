"""Benchmark: scheduling decisions per second, against a pure-Python reference.

Cases (``--case``, default all):

- ``single``: single-task decisions on a 10,000-node fleet (the generated
  fleet of ``bench_static.py``: 40 cloud, edge and device sites). Every task
  asks for cpu, memory and a share of one GPU, and carries an arch filter
  and a site filter (its tenant's allowed sites), so every filter is on.
  Tasks of K shapes arrive in a seeded random order (K = 1: one shape, as in
  the usual scheduler throughput tests; K = 32: shapes interleaved); a task
  leaves after a fixed number of later decisions, so the fleet stays about
  half full and decisions go on for as long as the run lasts.
- ``gangs``: gangs of 8 to 64 members (one whole GPU and some cpu each) on a
  5,000-node fleet, each gang inside one InfiniBand domain, all members or
  none; gangs leave after a fixed number of later gangs.

Each decision goes through the scheduler's placement step
(``select.place_group``: live feasibility and scores, seeded tie-break, the
allocation committed on the table). The same decisions are also made by
``Reference``, a plain-Python scheduler that loops over every node with the
same filters, scores and tie-break, on the first tasks of the run; the two
must choose the same rows, and their speed ratio is reported.

Prints one JSON object; exits with status 1 if a check fails (decision
counts, agreement with the reference, every task placed or refused for want
of room).

    .venv/bin/python bench/bench_decisions.py [--case single|gangs] [--decisions N] [--seed 42]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_static import make_fleet  # noqa: E402

from suanli.model.work import AcceleratorRequest, Resources, Tenant  # noqa: E402
from suanli.scheduling.domains import coupling_domain  # noqa: E402
from suanli.scheduling.reasons import Domain  # noqa: E402
from suanli.scheduling.request import compile_request  # noqa: E402
from suanli.scheduling.select import MAX_DOMAIN_TRIES, place_group  # noqa: E402
from suanli.scheduling.table import CandidateTable  # noqa: E402
from suanli.spec.build import load_world  # noqa: E402


STAY = 15_000  # single tasks held before the oldest leaves: the fleet stays well used, every shape fits


def build_fleet(n_nodes: int, seed: int, out: Path):
    import yaml

    doc, _ = make_fleet(n_nodes, np.random.default_rng(seed))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"decisions-fleet-{n_nodes}.yaml"
    path.write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
    return load_world([path]).fleet


# ---------------------------------------------------------------- the reference


class Reference:
    """A scheduler in plain Python: for each decision, every row is checked and
    scored in a loop. Same filters, same scores (``scores.total`` for these
    requests: packing fit, unused devices and, with ``near``, nearness), same
    seeded tie-break.

    A request is a dict: ``vec`` (the resource vector), ``kind`` (the device
    kind's code, or None for none) with ``milli`` (a share, or 1000 per whole
    device) and ``models`` (allowed model codes, or None), ``arch`` and
    ``sites`` (allowed codes), ``near`` (a site index, or None)."""

    def __init__(self, table: CandidateTable, fleet) -> None:
        n = table.n
        self.n = n
        net = fleet.network  # the all-pairs matrix, column by column: a reference for small fleets
        self.rtt = np.stack([net.rtt_to(s) for s in range(len(fleet.sites))], axis=1).tolist()
        self.site = table.site[:n].tolist()
        self.arch = table.arch[:n].tolist()
        self.enabled = table.enabled[:n].tolist()
        self.cap = table.cap[:, :n].T.tolist()
        self.free = table.free[:, :n].T.tolist()
        self.dev_kind = table.dev_kind[:, :n].T.tolist()
        self.dev_model = table.dev_model[:, :n].T.tolist()
        self.dev_cap = table.dev_cap[:, :n].T.tolist()
        self.dev_free = table.dev_free[:, :n].T.tolist()
        self.shareable = table.dev_shareable[:, :n].T.tolist()

    def fits(self, r: int, req) -> bool:
        if not self.enabled[r] or self.site[r] not in req["sites"] or self.arch[r] not in req["arch"]:
            return False
        free, vec = self.free[r], req["vec"]
        if free[0] < vec[0] or free[1] < vec[1]:
            return False
        if req["kind"] is None:
            return True
        milli, slots = req["milli"], self.slots(r, req)
        if milli >= 1000:
            whole = [s for s in slots if self.dev_cap[r][s] == 1000 and self.dev_free[r][s] == 1000]
            return len(whole) >= milli // 1000
        return any(self.shareable[r][s] and self.dev_cap[r][s] >= milli and self.dev_free[r][s] >= milli
                   for s in slots)

    def slots(self, r: int, req) -> list[int]:
        """The row's device slots of the request's kind and an allowed model."""
        models = req.get("models")
        return [s for s, k in enumerate(self.dev_kind[r])
                if k == req["kind"] and (models is None or self.dev_model[r][s] in models)]

    def score(self, r: int, req) -> float:
        vec, cap, free = req["vec"], self.cap[r], self.free[r]
        dims = [d for d, v in enumerate(vec) if v > 0]
        acc = 0.0
        for d in dims:
            inv = 1.0 / cap[d] if cap[d] > 0 else 0.0
            acc -= (free[d] - vec[d]) * inv
        fit = 100.0 + acc * (100.0 / len(dims))
        unused = any(cap[2 + k] > 0 for k in range(len(vec) - 2) if vec[2 + k] == 0)
        bonus = 2.0 * (0.0 if unused else 100.0)
        if req.get("near") is not None:
            bonus += 4.0 * (100.0 / (1.0 + self.rtt[self.site[r]][req["near"]] / 2.0))
        return fit + bonus

    def pick(self, req, rng: np.random.Generator, allowed=None) -> int:
        best, top = -np.inf, []
        for r in range(self.n):
            if (allowed is not None and not allowed[r]) or not self.fits(r, req):
                continue
            s = self.score(r, req)
            if s > best + 1e-9:
                best, top = s, [r]
            elif s >= best - 1e-9:
                top.append(r)
                if s > best:
                    best = s
                    top = [t for t in top if self.score(t, req) >= best - 1e-9]
        if not top:
            return -1
        return top[int(rng.integers(len(top)))] if len(top) > 1 else top[0]

    def take(self, r: int, req) -> None:
        vec = req["vec"]
        for d in range(len(vec)):
            self.free[r][d] -= vec[d]
        if req["kind"] is None:
            return
        milli, slots = req["milli"], self.slots(r, req)
        if milli >= 1000:
            whole = [s for s in slots if self.dev_cap[r][s] == 1000 and self.dev_free[r][s] == 1000]
            for s in whole[: milli // 1000]:
                self.dev_free[r][s] -= 1000
        else:
            fit = [(self.dev_free[r][s], s) for s in slots
                   if self.shareable[r][s] and self.dev_free[r][s] >= milli]
            self.dev_free[r][min(fit)[1]] -= milli


# ---------------------------------------------------------------- the cases


def single_shapes(fleet, k: int, rng: np.random.Generator):
    """K task shapes: cpu, memory, a share of one GPU, an arch and allowed sites."""
    gpu = fleet.kinds.get("gpu")
    sites = [("cloud-*", "edge-*"), ("cloud-*",), ("cloud-*", "dev-*"), ("*",)]
    shapes = []
    for i in range(k):
        cpu = int(rng.choice([250, 500, 1000, 2000, 4000]))
        mem = int(rng.choice([512, 1024, 4096, 8192]))
        milli = int(rng.choice([100, 250, 500]))
        arch = ("x86_64",) if i % 4 else ("x86_64", "aarch64")
        allowed = sites[i % len(sites)]
        tenant = Tenant(f"t{i}", allowed_sites=allowed)
        req = compile_request(fleet, Resources(cpu, mem, (AcceleratorRequest("gpu", None, milli),)),
                              tenant=tenant, arch=arch)
        site_ok = set(np.flatnonzero(req.site_checks[0][1]).tolist()) if req.site_checks else set(range(len(fleet.sites)))
        shapes.append((req, {"vec": req.vec.tolist(), "kind": gpu, "milli": milli, "arch": set(req.arch.tolist()),
                             "sites": site_ok}))
    return shapes


def run_single(fleet, k: int, n_decisions: int, stay: int, seed: int, check: int) -> dict:
    rng = np.random.default_rng(seed)
    shapes = single_shapes(fleet, k, rng)
    order = rng.integers(k, size=n_decisions)
    out = decide(fleet, shapes, order, stay, seed, check)
    return {"case": f"single, {k} shape{'s' if k > 1 else ''}", **out}


def reference_rate(fleet, seed: int, decisions: int) -> dict:
    """The pure-Python reference on ``fleet`` for scale: ``decisions`` single tasks
    of 32 shapes (cpu, memory, a GPU share, arch and site filters) decided by it
    and by the scheduler's placement step, which must agree; its decisions per
    second."""
    got = run_single(fleet, 32, decisions, decisions + 1, seed, decisions)["reference"]
    return {"what": "single-task decisions of 32 shapes on this fleet", "decisions": got["decisions"],
            "agreed": got["agreed"], "decisions_per_s": got["decisions_per_s"]}


def decide(fleet, shapes: list, order, stay: int, seed: int, check: int, warm: int = 0) -> dict:
    """Single-task decisions on a new table of ``fleet``: task ``i`` has the shape
    ``shapes[order[i]]`` (a request and the reference's dict of it) and leaves
    ``stay`` decisions later; the reference, starting from the table as the
    first ``warm`` decisions left it, repeats the next ``check``, which must
    agree."""
    n_decisions = len(order)
    table = CandidateTable.from_fleet(fleet)
    ref = ref_tie = None
    tie = np.random.default_rng(seed + 1)
    held: deque = deque()
    lat = np.empty(n_decisions)
    placed = refused = agree = 0
    ref_s = aside = 0.0
    start = time.perf_counter()
    for i, s in enumerate(np.asarray(order).tolist()):
        req, plain = shapes[s]
        checked = warm <= i < warm + check
        if checked and ref is None:  # the reference takes over the state as it is now
            t1 = time.perf_counter()
            ref, ref_tie = Reference(table, fleet), copy.deepcopy(tie)
            aside += time.perf_counter() - t1  # counted in neither's time
        t0 = time.perf_counter()
        res = place_group(table, [req], fleet.network, tie)
        lat[i] = time.perf_counter() - t0
        row = res.allocations[0].row if res.ok else -1
        if checked:  # the reference decides the same task on its own copy of the state
            t1 = time.perf_counter()
            want = ref.pick(plain, ref_tie)
            ref_s += time.perf_counter() - t1
            if want != row:
                raise SystemExit(f"decision {i}: suanli chose row {row}, the reference {want}")
            agree += 1
            if want >= 0:
                ref.take(want, plain)
        if res.ok:
            placed += 1
            held.append(res.allocations[0])
        else:
            refused += 1
        if len(held) > stay:
            table.give(held.popleft())
            if checked:
                raise SystemExit("--stay must exceed the reference's decisions")
    wall = time.perf_counter() - start - ref_s - aside
    ref_per = ref_s / max(check, 1)
    us = lat * 1e6
    return {
        "nodes": fleet.n_nodes, "decisions": n_decisions,
        "placed": placed, "refused": refused, "wall_s": round(wall, 3),
        "decisions_per_s": round(n_decisions / wall), "p50_us": round(float(np.percentile(us, 50)), 1),
        "p99_us": round(float(np.percentile(us, 99)), 1), "max_us": round(float(us.max()), 1),
        "reference": {"decisions": check, "agreed": agree, "decisions_per_s": round(1 / ref_per, 1) if check else None,
                      "speedup": round(ref_per / (wall / n_decisions)) if check else None},
    }


class GangReference(Reference):
    """``place_group`` for a gang in one domain, in plain Python: domains ranked by
    the members they have room for (a sufficient one with the least room first,
    then by code), members placed one by one with ``Reference.pick`` inside it."""

    def room(self, r: int, req) -> int:
        if not self.enabled[r] or self.site[r] not in req["sites"] or self.arch[r] not in req["arch"]:
            return 0
        free, vec = self.free[r], req["vec"]
        n = min(free[d] // vec[d] for d in (0, 1) if vec[d] > 0)
        slots = [s for s, k in enumerate(self.dev_kind[r]) if k == req["kind"]]
        whole = sum(1 for s in slots if self.dev_cap[r][s] == 1000 and self.dev_free[r][s] == 1000)
        return min(n, whole // (req["milli"] // 1000))

    def place(self, req, size: int, domain: list[int], rng) -> list[int] | None:
        total: dict[int, int] = {}
        for r in range(self.n):
            if domain[r] >= 0:
                total[domain[r]] = total.get(domain[r], 0) + min(self.room(r, req), size)
        ranked = sorted((t, d) for d, t in total.items() if t >= size)
        for _, d in ranked[:MAX_DOMAIN_TRIES]:
            allowed = [c == d for c in domain]
            rows = []
            for _ in range(size):
                r = self.pick(req, rng, allowed)
                if r < 0:
                    break
                self.take(r, req)
                rows.append(r)
            if len(rows) == size:
                return rows
        return None


def gang_shape(fleet):
    gpu = fleet.kinds.get("gpu")
    req = compile_request(fleet, Resources(8000, 32768, (AcceleratorRequest("gpu", None, 1000),)),
                          arch=("x86_64",))
    return req, {"vec": req.vec.tolist(), "kind": gpu, "milli": 1000, "arch": set(req.arch.tolist()),
                 "sites": set(range(len(fleet.sites)))}


def run_gangs(fleet, n_gangs: int, stay: int, seed: int, check: int) -> dict:
    rng = np.random.default_rng(seed)
    req, plain = gang_shape(fleet)
    sizes = rng.integers(8, 65, size=n_gangs)
    table = CandidateTable.from_fleet(fleet)
    domain = coupling_domain(table, fleet.network, "ib")
    ref = GangReference(table, fleet) if check else None
    tie, ref_tie = np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)
    held: deque = deque()
    lat = np.empty(n_gangs)
    placed = refused = members = 0
    ref_s = 0.0
    start = time.perf_counter()
    for i, size in enumerate(sizes.tolist()):
        t0 = time.perf_counter()
        res = place_group(table, [req] * size, fleet.network, tie, domain=domain, kind=Domain(("ib",)))
        lat[i] = time.perf_counter() - t0
        rows = [a.row for a in res.allocations] if res.ok else None
        if i < check:
            t1 = time.perf_counter()
            want = ref.place(plain, size, domain.tolist(), ref_tie)
            ref_s += time.perf_counter() - t1
            if want != rows:
                raise SystemExit(f"gang {i}: suanli placed it on {rows}, the reference on {want}")
        if res.ok:
            if len(res.allocations) != size or len({int(domain[r]) for r in rows}) != 1:
                raise SystemExit(f"gang {i}: {len(res.allocations)} of {size} members, or more than one ib domain")
            placed += 1
            members += size
            held.append(res.allocations)
        else:
            refused += 1
        if len(held) > stay:
            table.give_all(held.popleft())
            if i < check:
                raise SystemExit("--stay must exceed the reference's gangs")
    wall = time.perf_counter() - start - ref_s
    ms = lat * 1e3
    ref_per = ref_s / max(check, 1)
    return {
        "case": "gangs of 8-64, one ib domain each", "nodes": fleet.n_nodes, "gangs": n_gangs,
        "ib_domains": int(np.unique(domain[domain >= 0]).size), "placed": placed, "refused": refused,
        "members_placed": members, "wall_s": round(wall, 3), "gangs_per_s": round(n_gangs / wall),
        "p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "reference": {"gangs": check, "gangs_per_s": round(1 / ref_per, 2) if check else None,
                      "speedup": round(ref_per / (wall / n_gangs)) if check else None},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", choices=["single", "gangs", "all"], default="all")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--check", type=int, default=60, help="decisions the reference repeats")
    ap.add_argument("--gang-nodes", type=int, default=5_000)
    ap.add_argument("--gangs", type=int, default=5_000)
    ap.add_argument("--gang-stay", type=int, default=40, help="gangs held before the oldest leaves")
    ap.add_argument("--gang-check", type=int, default=4, help="gangs the reference repeats")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case; the fastest is kept")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    out = HERE / "out"
    results, failures = [], []
    def best_of(run, key: str) -> dict:
        """``--repeat`` runs (the reference only in the first); the fastest, with every rate."""
        runs = [run(i) for i in range(args.repeat)]
        best = max(runs, key=lambda r: r[key])
        best[f"{key}_runs"] = [r[key] for r in runs]
        best["reference"] = runs[0]["reference"]
        return best

    if args.case in ("single", "all"):
        fleet = build_fleet(args.nodes, args.seed, out)
        for k in (1, 32):
            r = best_of(lambda i, k=k: run_single(fleet, k, args.decisions, stay=STAY, seed=args.seed,
                                                  check=args.check if i == 0 else 0), "decisions_per_s")
            results.append(r)
            if r["placed"] + r["refused"] != args.decisions:
                failures.append(f"{r['case']}: {r['placed']} + {r['refused']} decisions, not {args.decisions}")
            if r["placed"] < 0.95 * args.decisions:
                failures.append(f"{r['case']}: only {r['placed']} of {args.decisions} placed")
    if args.case in ("gangs", "all"):
        fleet = build_fleet(args.gang_nodes, args.seed, out)
        r = best_of(lambda i: run_gangs(fleet, args.gangs, stay=args.gang_stay, seed=args.seed,
                                        check=args.gang_check if i == 0 else 0), "gangs_per_s")
        results.append(r)
        if r["placed"] + r["refused"] != args.gangs or r["placed"] < 0.9 * args.gangs:
            failures.append(f"{r['case']}: {r['placed']} placed and {r['refused']} refused of {args.gangs}")
    print(json.dumps({"benchmark": "scheduling decisions", "results": results, "ok": not failures,
                      "failures": failures}, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
