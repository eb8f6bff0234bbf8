"""Placement policies: how the business layer chooses a row and its devices.

A policy is a plugin of the selection step (``select._fill``): given a table,
a request and the mask of rows where it fits, it returns the allocation (row
and device slots) to take. Every mode uses the same plugins: ``schedule``,
``simulate`` and ``experiment``.

- ``default``: the general scores (packing, no stranded devices, near, data;
  ``scores.py``) and best-fit device choice.
- ``random``, ``dotprod``, ``clustering``, ``packing``, ``bestfit``, ``fgd``:
  the GPU-sharing policies of the FGD study (Weng et al., USENIX ATC 2023),
  with their integer scores and tie rules, so that their published figures
  can be reproduced (``docs/fgd.md``).
- ``suanli``: fragmentation gradient descent corrected by the device share a
  row's cpu and memory could no longer feed, by the whole rows whole-row
  tasks still need, and (where tasks are bound to models) by the share taken
  of models bound tasks press on; shares placed first where they lose least
  of the devices' worth under the workload's packing LP; ties broken by best
  fit and the row's fragmentation after (``SuanliPolicy``, ``docs/fgd.md``).

All work on one accelerator kind (``gpu`` unless the fleet has another
single shareable kind); a request's other kinds get best-fit devices.
Everything is vectorized over rows; there is no per-row Python.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from suanli.model.network import Network
from suanli.scheduling import scores
from suanli.scheduling.filters import usable_slots
from suanli.scheduling.request import AccelNeed, Request
from suanli.scheduling.select import allocation
from suanli.scheduling.share_values import BlockReserve, ShareValues
from suanli.scheduling.table import Allocation, CandidateTable, one

MILLI = 1000


class Policy:
    """The default: general scores, ties to a seeded draw, best-fit devices."""

    name = "default"
    repeatable = True  # a request may take the row it just took without rescoring (see select._repeat)

    def place(self, table: CandidateTable, req: Request, mask: np.ndarray, network: Network,
              rng: np.random.Generator) -> Allocation | None:
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return None
        row = int(rows[0]) if rows.size == 1 else _best(rows, self.scores(table, req, rows, network), rng)
        return allocation(table, req, row)

    def scores(self, table: CandidateTable, req: Request, rows: np.ndarray, network: Network) -> np.ndarray:
        return scores.total(table, req, rows, network)


def _best(rows: np.ndarray, s: np.ndarray, rng: np.random.Generator) -> int:
    top = rows[s >= s.max() - 1e-9]
    return int(top[rng.integers(top.size)]) if top.size > 1 else int(top[0])


# ---------------------------------------------------------------- GPU view


def kind_of(table_kinds, name: str = "gpu") -> int:
    code = table_kinds.get(name)
    return code if code >= 0 else (0 if len(table_kinds) == 1 else -1)


def _need(req: Request, kind: int) -> AccelNeed | None:
    return next((n for n in req.accels if n.kind == kind), None)


def _gpu_state(table: CandidateTable, kind: int, at) -> tuple[np.ndarray, np.ndarray]:
    """Per row: free milli of each slot of ``kind`` (-1 elsewhere) [D, rows], and the count of such slots."""
    ok = table.dev_kind[:, at] == kind
    left = np.where(ok, table.dev_free[:, at], -1).astype(np.int64)
    return left, ok.sum(axis=0)


def _pod_gpu(req: Request, kind: int) -> tuple[int, int]:
    """(GPUs, milli per GPU) the request asks of ``kind``."""
    need = _need(req, kind)
    if need is None:
        return 0, 0
    return (need.count, MILLI) if need.whole else (1, need.milli)


def _choose(table: CandidateTable, req: Request, row: int, kind: int, rule: str,
            rng: np.random.Generator | None = None, slot: int | None = None) -> Allocation:
    """The allocation on ``row`` with the devices of ``kind`` chosen by ``rule``:
    ``best`` (the fitting device with least free, lowest index first), ``random``
    (any fitting device), or the given ``slot``. Whole devices: the lowest-index
    free ones. Other kinds: best fit."""
    need = _need(req, kind)
    if slot is not None and len(req.accels) == 1 and not req.whole_node:
        return Allocation(row, req.vec, one(slot), one(need.milli))
    base = allocation(table, req, row)
    if need is None or need.whole:
        return base
    ok = usable_slots(table, req)[req.accels.index(need)][:, row] & (table.dev_free[:, row] >= need.milli)
    fit = np.flatnonzero(ok)
    if slot is None:
        if rule == "random":
            slot = int(fit[rng.integers(fit.size)])
        else:
            slot = int(fit[np.lexsort((fit, table.dev_free[fit, row]))][0])
    slots, milli = list(base.slots), list(base.milli)
    for i, s in enumerate(slots):
        if table.dev_kind[s, row] == kind:
            slots[i] = slot
            break
    return Allocation(row, base.vec, tuple(slots), tuple(milli))


class _GpuPolicy(Policy):
    """A policy of the FGD study: integer node scores, ties to a seeded draw
    (``tie_rule = "draw"``) or to the first of the best in a seeded random
    order of the rows, fixed for the table's life (``tie_rule = "order"``)."""

    repeatable = False
    device_rule = "best"
    tie_rule = "draw"

    def __init__(self, kind: int = 0) -> None:
        self.kind = kind
        self._ranks: dict[int, tuple[CandidateTable, np.ndarray]] = {}  # id(table) -> (table, rank per row)

    def norms(self, table: CandidateTable) -> tuple[float, float]:
        """``_norm`` of the table, computed again only when its rows change."""
        key = (id(table), table.version, table.n)
        if getattr(self, "_norm_key", None) != key:
            self._norm_val, self._norm_key = _norm(table, self.kind), key
        return self._norm_val

    def place(self, table, req, mask, network, rng):
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return None
        s = self.int_scores(table, req, rows)
        if rows.size == 1:
            row = int(rows[0])
        elif self.tie_rule == "order":
            top = rows[s >= s.max()]
            row = int(top[np.argmin(self.ranks(table, rng)[top])])
        else:
            row = _best(rows, s.astype(np.float64), rng)
        return _choose(table, req, row, self.kind, self.device_rule, rng)

    def ranks(self, table: CandidateTable, rng: np.random.Generator) -> np.ndarray:
        """A seeded random rank per row, drawn once per table and kept (rows
        added later rank after the rows before them, in a random order of
        their own). The study's simulator names its nodes after a seeded
        random permutation at the start of a run and, between nodes of equal
        score, always takes the first name: in effect a fixed random order."""
        got = self._ranks.get(id(table))
        if got is None or got[0] is not table:
            got = self._ranks[id(table)] = (table, rng.permutation(table.n))
        rank = got[1]
        if rank.size < table.n:
            rank = np.concatenate([rank, rank.size + rng.permutation(table.n - rank.size)])
            self._ranks[id(table)] = (table, rank)
        return rank

    def int_scores(self, table, req, rows) -> np.ndarray:
        raise NotImplementedError


class RandomPolicy(_GpuPolicy):
    name = "random"
    device_rule = "random"

    def int_scores(self, table, req, rows):
        return np.zeros(rows.size, np.int64)  # all tie: a uniform draw


def _norm(table: CandidateTable, kind: int) -> tuple[float, float]:
    """The study's normalisers (128 cores, 8 GPUs), taken from the table."""
    cpu = float(max(table.view("cap")[0].max(initial=1), 1))
    gpus = float(max((table.view("dev_kind") == kind).sum(axis=0).max(initial=1), 1)) * MILLI
    return cpu, gpus


def _free_share(left: np.ndarray) -> np.ndarray:
    """Per row, the free share of the kind's devices, from ``_gpu_state``'s ``left``."""
    return np.where(left > 0, left, 0).sum(axis=0)


def _left_after(table: CandidateTable, req: Request, rows: np.ndarray, free_share: np.ndarray,
                kind: int, norms: tuple[float, float]) -> np.ndarray:
    """BestFit's waste: cpu and device share a row keeps free after the request,
    each over the largest row's, half and half."""
    cpu_n, gpu_n = norms
    k, d = _pod_gpu(req, kind)
    return 0.5 * (table.free[0, rows] - req.vec[0]) / cpu_n + 0.5 * (free_share - k * d) / gpu_n


class DotProdPolicy(_GpuPolicy):
    name = "dotprod"

    def int_scores(self, table, req, rows):
        cpu_n, gpu_n = self.norms(table)
        gpu_left = _free_share(_gpu_state(table, self.kind, rows)[0])
        k, d = _pod_gpu(req, self.kind)
        dot = (table.free[0, rows] / cpu_n) * (req.vec[0] / cpu_n) + (gpu_left / gpu_n) * (k * d / gpu_n)
        return (100 * (1 - dot / 2)).astype(np.int64)


class BestFitPolicy(_GpuPolicy):
    name = "bestfit"

    def int_scores(self, table, req, rows):
        waste = _left_after(table, req, rows, _free_share(_gpu_state(table, self.kind, rows)[0]),
                            self.kind, self.norms(table))
        s = (100 * (1 - waste)).astype(np.int64)
        lo, hi = s.min(), s.max()
        return (s - lo) * 100 // (hi - lo) if hi > lo else np.zeros_like(s)


class PackingPolicy(_GpuPolicy):
    name = "packing"
    tie_rule = "order"

    def int_scores(self, table, req, rows):
        k, d = _pod_gpu(req, self.kind)
        if k == 0:
            return np.zeros(rows.size, np.int64)
        left, n_gpu = _gpu_state(table, self.kind, rows)
        full = (left == MILLI).sum(axis=0)
        # the k fitting devices with the least free share, as the study takes them
        fits = np.where(left >= d, left, MILLI + 1)
        chosen = np.sort(fits, axis=0)[:k]
        full_used = (chosen == MILLI).sum(axis=0)
        shared = 100 - (chosen * 100 // MILLI).sum(axis=0) // 10
        s = np.where(full_used > 0, np.maximum(50 - full_used, 33), np.maximum(shared, 50))
        return np.where(full == n_gpu, np.maximum(33 - full, full), s).astype(np.int64)


class ClusteringPolicy(_GpuPolicy):
    """Nodes already running GPU work of the same kind (sharing, or N whole
    GPUs) score higher, emptier less. The tags of a row are read from the
    allocations it holds, which the policy follows through the table."""

    name = "clustering"
    tie_rule = "order"

    def __init__(self, kind: int = 0) -> None:
        super().__init__(kind)
        self.tags: dict[int, dict[int, np.ndarray]] = {}  # id(table) -> tag -> count per row
        self._watched: dict[int, CandidateTable] = {}

    def _on_change(self, table: CandidateTable, a: Allocation, sign: int) -> None:
        tag = _tag(table, a, self.kind)
        if tag is None:
            return
        per = self.tags.setdefault(id(table), {})
        counts = per.get(tag)
        if counts is None or counts.size < len(table.node):
            grown = np.zeros(len(table.node), np.int64)
            if counts is not None:
                grown[: counts.size] = counts
            counts = per[tag] = grown
        counts[a.row] += sign

    def watch(self, table: CandidateTable) -> None:
        if self._watched.get(id(table)) is not table:  # a table seen for the first time
            self._watched[id(table)] = table
            self.tags[id(table)] = {}
            table.listeners.append(self._on_change)

    def int_scores(self, table, req, rows):
        self.watch(table)
        k, d = _pod_gpu(req, self.kind)
        if k == 0:
            return np.zeros(rows.size, np.int64)
        tag = k if d == MILLI else 0
        per = self.tags[id(table)]
        n_tags = np.zeros(rows.size, np.int64)
        mine = np.zeros(rows.size, bool)
        for t, counts in per.items():
            c = counts[rows] if counts.size > rows.max() else np.zeros(rows.size, np.int64)
            n_tags += c > 0
            if t == tag:
                mine = c > 0
        _, gpu_n = self.norms(table)
        gpu_left = _free_share(_gpu_state(table, self.kind, rows)[0])
        used = (25 * (gpu_n - gpu_left) // gpu_n).astype(np.int64)
        base = np.where(mine, np.where(n_tags == 1, 75, 50), np.where(n_tags == 0, 25, 0))
        return used + base


def _tag(table: CandidateTable, a: Allocation, kind: int) -> int | None:
    """0 for a share of one device, N for N whole devices; None without ``kind``."""
    slots = [(s, m) for s, m in zip(a.slots, a.milli) if table.dev_kind[s, a.row] == kind]
    if not slots:
        return None
    return 0 if len(slots) == 1 and slots[0][1] < MILLI else len(slots)


# ---------------------------------------------------------------- fragmentation


@dataclass
class TargetWorkload:
    """Task shapes and their frequencies: what fragmentation is measured against.

    ``cpu`` in milli-cores, ``mem`` in MiB, ``gpus`` and ``milli`` per GPU
    (whole GPUs have milli 1000; CPU-only shapes 0 and 0), ``models`` a tuple
    of allowed model names (empty: any), ``weight`` the shape's frequency
    (the weights sum to 1)."""

    cpu: np.ndarray
    mem: np.ndarray
    gpus: np.ndarray
    milli: np.ndarray
    models: list[tuple[str, ...]]
    weight: np.ndarray

    @classmethod
    def from_counts(cls, counts: dict[tuple[int, int, int, int, tuple[str, ...]], float]) -> "TargetWorkload":
        """From counts per (cpu, mem, gpus, milli, models), most frequent first."""
        items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][:4], kv[0][4]))
        w = np.array([c for _, c in items], np.float64)
        col = lambda i: np.array([k[i] for k, _ in items], np.int64)  # noqa: E731
        return cls(col(0), col(1), col(2), col(3), [k[4] for k, _ in items], w / max(w.sum(), 1e-300))

    def typical(self, threshold: float = 0.95) -> "TargetWorkload":
        """The study's "typical pods": shapes told apart by cpu, GPUs, share and
        models only (memory plays no part in its fragmentation measure), the most
        frequent first (ties: the larger cpu, share, GPU count first), as many as
        it takes to cover ``threshold`` of the tasks, their weights scaled to sum to 1."""
        merged: dict[tuple, float] = {}
        for c, g, m, mo, w in zip(self.cpu.tolist(), self.gpus.tolist(), self.milli.tolist(), self.models,
                                  self.weight.tolist()):
            key = (c, 0, g, m, mo)
            merged[key] = merged.get(key, 0.0) + w
        items = sorted(merged.items(), key=lambda kv: (-kv[1], -kv[0][0], -kv[0][3], -kv[0][2], kv[0][4]))
        total, kept, cum = sum(merged.values()), {}, 0.0
        for key, w in items:
            if cum >= threshold * total:
                break
            kept[key] = w
            cum += w
        return TargetWorkload.from_counts(kept)


class FragModel:
    """The target workload compiled for fast fragmentation arithmetic.

    For a row whose devices of the kind have free shares ``x_g`` (total ``G``),
    with ``c`` free cpu and ``m`` free memory, the fragmentation against shape
    s is ``G`` unless s fits there (cpu, memory, model, and enough devices with
    a free share ``>= d_s``), and then the free share s could not use. So

        F = G * P - sum_j W_j(c, m, model) * U_j(x)

    over classes j of GPU demand (N whole devices, or a share d of one), where
    ``W_j`` is the weight of the class's shapes whose cpu and memory fit and
    whose model is allowed (a 2-D step function of ``c`` and ``m``, tabled per
    model), and ``U_j`` the share the class could use: the sum of the ``x_g >=
    d``, or 1000 x the free whole devices when there are at least N. CPU-only
    shapes use no device: all of ``G`` is fragment to them.
    """

    def __init__(self, target: TargetWorkload, models) -> None:
        gpu = target.gpus > 0
        self.P = float(target.weight.sum())
        # classes: shares of one device first, then whole devices (so both are slices)
        keys = sorted({(int(g), int(m)) for g, m in zip(target.gpus[gpu], target.milli[gpu])},
                      key=lambda km: (km[1] >= MILLI, km)) or [(1, MILLI)]
        self.k = np.array([g for g, _ in keys], np.int64)
        self.d = np.array([m for _, m in keys], np.int64)
        self.nf = int((self.d < MILLI).sum())
        self.frac = slice(0, self.nf)
        self.whole = slice(self.nf, None)
        self.df = self.d[self.frac]
        self.kw = self.k[self.whole]
        self.df_list, self.kw_list = self.df.tolist(), self.kw.tolist()
        n_models = max(len(models), 1)
        cls_of = {key: j for j, key in enumerate(keys)}
        self.tc = np.unique(target.cpu[gpu]) if gpu.any() else np.zeros(1, np.int64)
        self.tm = np.unique(target.mem[gpu]) if gpu.any() else np.zeros(1, np.int64)
        tab = np.zeros((n_models + 1, self.tc.size + 1, self.tm.size + 1, len(keys)))
        for i in np.flatnonzero(gpu):
            j = cls_of[(int(target.gpus[i]), int(target.milli[i]))]
            a = int(np.searchsorted(self.tc, target.cpu[i])) + 1
            b = int(np.searchsorted(self.tm, target.mem[i])) + 1
            allowed = [models.get(m) for m in target.models[i]] if target.models[i] else range(n_models)
            for mu in allowed:
                if mu is not None and mu >= 0:
                    tab[mu, a, b, j] += target.weight[i]
        # the last model row stays zero: rows without a device of the kind
        self.W = np.cumsum(np.cumsum(tab, axis=1), axis=2)  # [model, cpu step, mem step, class]
        self.tc_list, self.tm_list = self.tc.tolist(), self.tm.tolist()
        self.none = n_models

    def weights(self, cpu: np.ndarray, mem: np.ndarray, model: np.ndarray) -> np.ndarray:
        """[C, J]: per state, the weight of each class's shapes that fit its cpu, memory and model."""
        a = np.searchsorted(self.tc, cpu, side="right")
        b = np.searchsorted(self.tm, mem, side="right")
        return self.W[model, a, b]

    def usable(self, left: np.ndarray) -> np.ndarray:
        """[C, J] from per-slot free shares ``left`` [D, C] (-1: not a slot of the kind)."""
        x = np.where(left > 0, left, 0)
        full = (left == MILLI).sum(axis=0)
        u = np.empty((left.shape[1], self.k.size))
        u[:, self.frac] = (np.where(x[None] >= self.df[:, None, None], x[None], 0)).sum(axis=1).T
        u[:, self.whole] = np.where(full[:, None] >= self.kw, MILLI * full[:, None], 0)
        return u


class FgdPolicy(_GpuPolicy):
    """Fragmentation gradient descent (Weng et al., ATC 2023): the node and
    device that least increase the cluster's fragmentation, as the study's
    simulator has it. Scored as published, ``int(100 * sigmoid(decrease /
    1000))``, against the study's typical pods (``TargetWorkload.typical``);
    ties between nodes to the first in a seeded random order of the nodes
    fixed for the run (the simulator's node names, see ``_GpuPolicy.ranks``),
    between a node's devices to the lowest index. The coarse score ties
    often (a whole GPU taken from a node whose other GPUs every typical shape
    can still use changes nothing), and the fixed order then fills nodes one
    after another: a draw per pod spreads whole-GPU tasks over empty nodes
    (10.84% unallocated instead of 4.65 on the default trace, seed 42)."""

    name = "fgd"
    tie_rule = "order"

    def __init__(self, target: TargetWorkload, models, kind: int = 0) -> None:
        super().__init__(kind)
        self.frag = FragModel(target, models)
        self._cache: dict[int, list] = {}
        self._memo: dict[int, list] = {}  # id(request) -> [request, best score per state, best shares per state]

    MAX_STATES = 200_000  # distinct row states remembered before starting afresh

    def _rows(self, table: CandidateTable):
        """Per row, kept up to date where the table changed: usable share per
        class, free share, free whole devices, model, fragmentation now, and
        the row's state: rows in the same state (free cpu and memory, free
        share and model of each device) score alike."""
        n = table.n
        c = self._cache.get(id(table))
        if c is None or c[-1] is not table or c[0].size != n or len(c[7]) > self.MAX_STATES:
            j = self.frag.k.size
            c = self._cache[id(table)] = [np.full(n, -1, np.int64), np.zeros((n, j)), np.zeros(n),
                                          np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n),
                                          np.zeros(n, np.int64), {}, table]
            self._memo.clear()  # state ids start afresh
        stamp, U, G, full, model, F, state, ids, _ = c
        dirty = np.flatnonzero(stamp[:n] != table.stamp[:n])
        if dirty.size > 4:
            on = table.dev_kind[:, dirty] == self.kind
            enc = np.sort(np.where(on, table.dev_free[:, dirty].astype(np.int64) * 4096 + table.dev_model[:, dirty], -1), axis=0)
            keys = np.vstack([table.free[:2, dirty], enc]).T.tolist()
            for r, key in zip(dirty.tolist(), keys):
                state[r] = ids.setdefault(tuple(key), len(ids))
            left, _ = _gpu_state(table, self.kind, dirty)
            U[dirty] = self.frag.usable(left)
            G[dirty] = _free_share(left)
            full[dirty] = (left == MILLI).sum(axis=0)
            models = np.where(on, table.dev_model[:, dirty], -1).max(axis=0)
            model[dirty] = np.where(models >= 0, models, self.frag.none)
            W = self.frag.weights(table.free[0, dirty], table.free[1, dirty], model[dirty])
            F[dirty] = G[dirty] * self.frag.P - (W * U[dirty]).sum(axis=1)
            stamp[dirty] = table.stamp[dirty]
        else:  # one row changed (a placement): the same in plain Python, cheaper for one row
            fr = self.frag
            n_slots = table.dev_kind.shape[0]
            for r in dirty.tolist():
                kinds, frees, mdls = (table.dev_kind[:, r].tolist(), table.dev_free[:, r].tolist(),
                                      table.dev_model[:, r].tolist())
                mine = [(f, m) for kd, f, m in zip(kinds, frees, mdls) if kd == self.kind]
                left = [f for f, _ in mine]
                mdl = max((m for _, m in mine), default=fr.none)
                cpu, mem = int(table.free[0, r]), int(table.free[1, r])
                enc = [-1] * (n_slots - len(mine)) + sorted(f * 4096 + m for f, m in mine)
                state[r] = ids.setdefault((cpu, mem, *enc), len(ids))
                g, nf = sum(left), left.count(MILLI)
                arr = np.array(left, np.int64)
                U[r, fr.frac] = (arr * (arr >= fr.df[:, None])).sum(axis=1)
                U[r, fr.whole] = np.where(nf >= fr.kw, MILLI * nf, 0)
                G[r], full[r], model[r] = g, nf, mdl
                w = fr.W[mdl, bisect_right(fr.tc_list, cpu), bisect_right(fr.tm_list, mem)]
                F[r] = g * fr.P - float(np.dot(w, U[r]))
                stamp[r] = table.stamp[r]
        return U, G, full, model, F, state, ids

    def frag_now(self, table: CandidateTable, rows: np.ndarray) -> np.ndarray:
        return self._rows(table)[4][rows]

    def decrease(self, table, req, rows, cache=None):
        """Every (row, slot) the request could take, as (index into ``rows``,
        slot), and how much the row's fragmentation falls (negative: rises) if
        it does. Whole-device and cpu-only requests have one candidate per row
        (slot -1)."""
        U, G, full, model, F = (cache or self._rows(table))[:5]
        fm = self.frag
        k, d = _pod_gpu(req, self.kind)
        Wa = fm.weights(table.free[0, rows] - req.vec[0], table.free[1, rows] - req.vec[1], model[rows])
        f_after_base = (G[rows] - k * d) * fm.P
        if k == 0 or d == MILLI:
            u = U[rows]
            if k:
                u = u.copy()
                u[:, fm.frac] -= MILLI * k
                fa = full[rows] - k
                u[:, fm.whole] = np.where(fa[:, None] >= fm.kw, MILLI * fa[:, None], 0)
            after = f_after_base - (Wa * u).sum(axis=1)
            return np.arange(rows.size), np.full(rows.size, -1), F[rows] - after
        need = _need(req, self.kind)
        left = table.dev_free[:, rows]
        ok = usable_slots(table, req)[req.accels.index(need)][:, rows] & (left >= d)
        at, slot = np.nonzero(ok.T)  # by row, then slot; equal shares on a row score alike
        x = left[slot, at].astype(np.int64)
        # after = base - Wa.(U - delta(x)) = [base - Wa.U] + Wa.delta(x), per row then per candidate
        row_part = f_after_base - (Wa * U[rows]).sum(axis=1)
        xs = x[:, None]
        delta = xs * (xs >= fm.df) - (xs - d) * (xs - d >= fm.df)
        cand = (Wa[at, : fm.nf] * delta).sum(axis=1)
        shared_whole = x == MILLI
        if fm.kw.size and shared_whole.any():  # a whole free device is the one shared
            fn = full[rows][:, None]
            lost = MILLI * (fn * (fn >= fm.kw) - (fn - 1) * (fn - 1 >= fm.kw))
            cand += np.where(shared_whole, (Wa[:, fm.whole] * lost).sum(axis=1)[at], 0.0)
        return at, slot, F[rows[at]] - (row_part[at] + cand)

    def score(self, decrease: np.ndarray, table=None, req=None, reps=None, at=None, cache=None,
              slots=None) -> np.ndarray:
        return np.floor(100.0 / (1.0 + np.exp(-decrease / 1000.0)))

    def place(self, table, req, mask, network, rng):
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return None
        cache = self._rows(table)
        state = cache[5]
        # a row's score depends only on its state (content) and the request: score each
        # state once per request, remember it, and let every row of a best state win
        best, shares = self._memo_for(req, len(cache[6]))
        sid = state[rows]
        known = best[sid]
        missing = np.isnan(known)
        if missing.any():
            _, first = np.unique(sid[missing], return_index=True)
            self._remember(table, req, rows[missing][first], cache, best, shares)
            known = best[sid]
        row = self.choose(table, rows, known, cache, rng)
        slot = None
        xs = shares.get(int(state[row]))
        if xs is not None:  # a share of one device: the lowest-index device with a best free share
            kinds, frees = table.dev_kind[:, row].tolist(), table.dev_free[:, row].tolist()
            xs = self.device_among(xs)
            slot = next(i for i, (kd, f) in enumerate(zip(kinds, frees)) if kd == self.kind and f in xs)
        return _choose(table, req, row, self.kind, "best", rng, slot)

    def device_among(self, shares: set) -> set:
        """Which of the best free shares a row's device may have (FGD: any; the lowest index wins)."""
        return shares

    def choose(self, table: CandidateTable, rows: np.ndarray, known: np.ndarray, cache, rng) -> int:
        """The row among the best-scored: the first in the fixed order, or a seeded draw (``tie_rule``)."""
        winners = rows[known >= known.max() - 1e-9]
        if winners.size == 1:
            return int(winners[0])
        if self.tie_rule == "order":
            return int(winners[np.argmin(self.ranks(table, rng)[winners])])
        return int(winners[rng.integers(winners.size)])

    def _memo_for(self, req: Request, n_states: int):
        memo = self._memo.get(id(req))
        if memo is None or memo[0] is not req:
            if len(self._memo) > 4096:
                self._memo.clear()
            memo = self._memo[id(req)] = [req, np.full(max(2 * n_states, 64), np.nan), {}]
        if memo[1].size < n_states:
            grown = np.full(2 * n_states, np.nan)
            grown[: memo[1].size] = memo[1]
            memo[1] = grown
        return memo[1], memo[2]

    def _remember(self, table, req, reps, cache, best, shares) -> None:
        """Score states not yet scored for this request (one row of each)."""
        state = cache[5]
        at, slots, dec = self.decrease(table, req, reps, cache)
        s = self.score(dec, table, req, reps, at, cache, slots)
        per = np.full(reps.size, -np.inf)
        np.maximum.at(per, at, s)
        best[state[reps]] = per
        if slots.size and slots[0] >= 0:
            tied = np.flatnonzero(s >= per[at] - 1e-9)
            x = table.dev_free[slots[tied], reps[at[tied]]].tolist()
            for a, v in zip(at[tied].tolist(), x):
                shares.setdefault(int(state[reps[a]]), set()).add(v)


class SuanliPolicy(FgdPolicy):
    """suanli's policy for shared devices: fragmentation gradient descent
    that also prices what a placement costs the work still to come.

    The decrease of fragmentation FGD scores is corrected three ways:

    1. **Stranded share.** Less the rise of the row's free device share its
       free cpu or memory cannot carry at the workload's rate (cpu and
       memory per milli of device demand, ``rho_cpu`` and ``rho_mem``):

           S = max(0, G - c / rho_cpu, G - m / rho_mem)

       FGD looks one task ahead: a row with 8 cores and two free devices is
       no fragment to a task of 8 cores, yet after it the second device has
       none left for anything. ``S`` sends cpu-hungry tasks to rows rich in
       cpu and cpu-light ones to rows poor in it. The rate is the device
       tasks' own, unless the cpu-only tasks ask for more cpu than the rows
       have to spare beyond it (``fit``): then every device counts on the
       whole workload's rate, cpu-only tasks included (cpu250: 5.2% left
       instead of 6.8%). Where tasks are bound to models, only a rise of
       ``S`` counts, not a fall (a fall draws tasks to the models the bound
       ones need).
    2. **Whole rows for whole-row work** (``BlockReserve``): less the worth
       of the hosts of multi-device shapes the placement ends, priced by how
       few hosts are left for the tasks expected.
    3. **Bound models.** Where tasks are bound to models (5% or more of the
       device demand, the gpuspec traces), less the share a task takes of a
       model bound tasks press on, times ``pressure``.

    Then, where any task may use any model, a share of one device goes
    first where it loses least of the devices' worth under the packing LP
    of the workload (``ShareValues``: a placement the best packing would
    make loses none); among those, and for every other task, the corrected
    decrease is bucketed as ``int(100 * sigmoid(d / 500))`` and the bucket's
    best is the row left with the least free cpu and device share (half and
    half, over the largest row's) and the least fragmentation, weighed
    equally; between a row's devices, the fullest of the best. Where tasks
    are bound to models: FGD's own score and a seeded draw between ties.
    """

    name = "suanli"
    tie_rule = "draw"
    BOUND_SHARE = 0.05

    def __init__(self, target: TargetWorkload, models, kind: int = 0) -> None:
        super().__init__(target, models, kind)
        gpu = target.gpus > 0
        demand = target.weight * target.gpus * np.maximum(target.milli, 0)
        bound = np.array([bool(m) for m in target.models]) & gpu
        share = demand[bound].sum() / max(demand[gpu].sum(), 1e-300)
        self.pack = share < self.BOUND_SHARE
        self.target, self.model_codes = target, models
        self._pressure: tuple[tuple, np.ndarray] | None = None
        self._demand = max(float(demand[gpu].sum()), 1e-300)
        per = lambda col, sel: float((target.weight * col)[sel].sum())  # noqa: E731
        every = np.ones(gpu.size, bool)
        self._rates_gpu = tuple(max(per(c, gpu) / self._demand, 1e-9) for c in (target.cpu, target.mem))
        self._rates_all = tuple(max(per(c, every) / self._demand, 1e-9) for c in (target.cpu, target.mem))
        self._cpu_only = (per(target.cpu, ~gpu), per(target.mem, ~gpu))
        self.rho_cpu, self.rho_mem = self._rates_gpu
        self._rates_key: tuple | None = None
        self.values = ShareValues.of(target) if self.pack else None
        self.reserve = BlockReserve(target, models)

    def fit(self, table: CandidateTable) -> None:
        """What the policy derives from the table's rows, again when they
        change: the share prices for its devices (``ShareValues``), and
        ``rho_cpu`` and ``rho_mem``: the device tasks' own
        cpu (memory) per milli of device demand, unless the cpu-only tasks
        ask for more cpu (memory) than the rows have beyond what device work
        needs at that rate; then every device must count on the workload's
        whole rate, cpu-only tasks included (``SuanliPolicy`` doc)."""
        key = (id(table), table.version, table.n)
        if self._rates_key == key:
            return
        self._rates_key = key
        cap = table.view("cap")
        devices = (table.view("dev_kind") == self.kind).sum(axis=0) * float(MILLI)
        scale = devices.sum() / self._demand  # the workload scaled to fill the devices
        rho = []
        for i in range(2):
            spare = np.maximum(cap[i] - devices * self._rates_gpu[i], 0.0).sum()
            rho.append(self._rates_all[i] if self._cpu_only[i] * scale > spare else self._rates_gpu[i])
        self.rho_cpu, self.rho_mem = rho
        if self.values is not None and self.values.devices != int(devices.sum() // MILLI):
            self.values.solve(int(devices.sum() // MILLI))

    def stranded(self, share: np.ndarray, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """The free device share that free cpu and memory cannot carry at the workload's rates."""
        return np.maximum(share - np.minimum(cpu * (1.0 / self.rho_cpu), mem * (1.0 / self.rho_mem)), 0.0)

    def decrease(self, table, req, rows, cache=None):
        """FGD's decrease of fragmentation, less the rise of the row's stranded
        share and the worth of the whole-row hosts the placement ends."""
        cache = cache or self._rows(table)
        self.fit(table)
        at, slot, dec = super().decrease(table, req, rows, cache)
        G, full, model = cache[1], cache[2], cache[3]
        k, d = _pod_gpu(req, self.kind)
        cpu, mem = table.free[0, rows], table.free[1, rows]
        rise = self.stranded(G[rows] - k * d, cpu - req.vec[0], mem - req.vec[1]) - self.stranded(G[rows], cpu, mem)
        if self.reserve:
            r = rows[at]
            if d == MILLI or k == 0:
                full_after = full[r] - k
            else:
                full_after = full[r] - (table.dev_free[slot, r] == MILLI)
            dec = dec - self.reserve.cost(table, G, full, model, r, full_after,
                                          table.free[0, r] - req.vec[0], table.free[1, r] - req.vec[1])
        if self.pack:
            return at, slot, dec - rise[at]
        dec = dec - np.maximum(rise, 0.0)[at]
        if k * d > 0:  # what the task takes of a model that bound tasks press on
            pressure = self.pressure(table)
            dec = dec - pressure[model[rows][at]] * (k * d)
        return at, slot, dec

    def pressure(self, table: CandidateTable) -> np.ndarray:
        """Per device model (by code, as the rows' models are kept; 0 for rows without one):
        how much more of the model the bound tasks of the target workload ask
        for than its share of capacity, as (bound demand on it / all demand) /
        (its capacity / all capacity). A bound task's demand is spread over
        its allowed models by their capacity. Cached until the table's rows change."""
        key = (id(table), table.version, table.n)
        if self._pressure is not None and self._pressure[0] == key:
            return self._pressure[1]
        on = table.view("dev_kind") == self.kind
        n = len(self.model_codes.names)
        cap = np.bincount(table.view("dev_model")[on].astype(np.int64), weights=table.view("dev_cap")[on],
                          minlength=n)[:n].astype(np.float64)
        t = self.target
        demand = t.weight * t.gpus * np.maximum(t.milli, 0)
        bound = np.zeros(n)
        for names, d in zip(t.models, demand):
            codes = sorted({c for c in (self.model_codes.get(x) for x in names) if c >= 0}) if names else []
            if d > 0 and codes and cap[codes].sum() > 0:
                bound[codes] += d * cap[codes] / cap[codes].sum()
        share = cap / max(cap.sum(), 1e-300)
        p = np.zeros(self.frag.none + 1)  # the last entry: rows without a device of the kind
        np.divide(bound / max(demand.sum(), 1e-300), share, out=p[:n], where=share > 0)
        self._pressure = (key, p)
        return p

    def score(self, decrease, table=None, req=None, reps=None, at=None, cache=None, slots=None):
        if not self.pack:
            return super().score(decrease)
        bucket = np.floor(100.0 / (1.0 + np.exp(-decrease / 500.0)))
        rows = reps[at]
        norms = self.norms(table)
        gpu_n = norms[1]
        cache = cache or self._rows(table)
        G, F = cache[1], cache[4]
        left = _left_after(table, req, rows, G[rows], self.kind, norms)
        fragmented = np.minimum((F[rows] - decrease) / gpu_n, 1.0)  # the row's fragmentation after
        s = bucket * 1000.0 + (1.0 - 0.5 * (left + fragmented)) * 999.0  # < 101,000
        k, d = _pod_gpu(req, self.kind)
        if self.values is not None and slots is not None and k == 1 and d < MILLI:
            # first the share's loss of worth (in 0.1 milli steps), then the rest
            loss = self.values.loss(table.dev_free[slots, rows].astype(np.int64), d)
            s = s - np.round(loss, 1) * 1e7
        return s

    def device_among(self, shares: set) -> set:
        return {min(shares)} if self.pack else shares


POLICY_NAMES = ("default", "random", "dotprod", "clustering", "packing", "bestfit", "fgd", "suanli")


def make_policy(name: str, fleet, target: TargetWorkload | None = None) -> Policy:
    """The named policy for ``fleet``; fragmentation policies need the target workload."""
    kind = kind_of(fleet.kinds)
    simple = {"default": Policy, "random": RandomPolicy, "dotprod": DotProdPolicy,
              "clustering": ClusteringPolicy, "packing": PackingPolicy, "bestfit": BestFitPolicy}
    if name == "default":
        return Policy()
    if name in simple:
        return simple[name](max(kind, 0))
    if name in ("fgd", "suanli"):
        if target is None:
            raise ValueError(f"policy {name} needs a target workload")
        if name == "fgd":
            return FgdPolicy(target.typical(), fleet.models, max(kind, 0))
        return SuanliPolicy(target, fleet.models, max(kind, 0))
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")


def policy_for(world, name: str | None = None) -> Policy | None:
    """The placement policy for a world: ``name``, else the Scenario's
    ``policy.placement``; None for the default scores (the fast path)."""
    if name is None and world.scenario is not None:
        name = world.scenario.spec.policy.placement
    if name is None or name == "default":
        return None
    return make_policy(name, world.fleet, target_of_world(world) if name in ("fgd", "suanli") else None)


def target_of_world(world) -> TargetWorkload:
    """The task shapes a world will run, by how many tasks have each: its
    applications' components (replicas or gang members), its generators'
    templates (expected copies: rate x span) and its openb traces' pods."""
    from suanli.spec.build import build_application

    counts: dict[tuple, float] = {}
    gpu = world.fleet.kinds.get("gpu")
    kind_name = "gpu" if gpu >= 0 else (world.fleet.kinds.names[0] if world.fleet.kinds.names else "gpu")

    def add(comp, n: float) -> None:
        acc = next((a for a in comp.resources.accelerators if a.kind == kind_name), None)
        if acc is None:
            key = (comp.resources.cpu_milli, comp.resources.mem_mib, 0, 0, ())
        elif acc.milli < MILLI:
            key = (comp.resources.cpu_milli, comp.resources.mem_mib, 1, acc.milli, tuple(acc.models or ()))
        else:
            key = (comp.resources.cpu_milli, comp.resources.mem_mib, acc.milli // MILLI, MILLI, tuple(acc.models or ()))
        counts[key] = counts.get(key, 0.0) + n

    for app in world.apps:
        for comp in app.components:
            add(comp, comp.size)
    spec = world.scenario.spec if world.scenario is not None else None
    if spec is not None:
        horizon = spec.until or 0.0
        for gen in spec.generators:
            span = max((gen.until or horizon) - gen.start, 0.0)
            app = build_application(f"{gen.name}-0", gen.tenant, gen.template)
            for comp in app.components:
                add(comp, comp.size * gen.rate * max(span, 1.0))
        for tr in spec.traces:
            if tr.format == "openb" and tr.pods:
                import os

                from suanli.sim.traces import load_openb_pods
                for key, n in load_openb_pods(os.path.join(world.base_dir, tr.pods)).shape_counts().items():
                    counts[key] = counts.get(key, 0.0) + n
    if not counts:
        counts[(0, 0, 0, 0, ())] = 1.0
    return TargetWorkload.from_counts(counts)
