"""What free device share and whole free rows are worth to the work to come.

Two measures that ``SuanliPolicy`` adds to fragmentation gradient descent:

- ``ShareValues``: a price per free share of one device, from the linear
  program that packs the target workload, scaled to fill the fleet's devices,
  into them. Column generation (``scipy.optimize.linprog`` for the master,
  a knapsack over 0..1000 milli for the prices) gives each task size ``s``
  its value ``v_s`` in a device (``s`` less its dual price: a size the
  devices hold all of is worth less than its size) and ``V(x)``, the most a
  free share ``x`` can still be worth. Putting a share ``d`` on a device
  with ``x`` free loses ``V(x) - V(x - d) - v_d >= 0``; zero where the
  placement is one the best packing would make.
- ``BlockReserve``: rows that can still take a whole-row task (N whole
  devices with its cpu and memory) are few for some shapes (the 8-GPU tasks
  of 120 cores fit only the 39 nodes of 128 cores). Taking such a row for
  other work costs ``0.4 x N x 1000 x min(1, need / hosts)``: ``need`` the
  number of such tasks the free share still to fill is expected to bring,
  ``hosts`` the rows that can take them.
"""

from __future__ import annotations

import numpy as np

MILLI = 1000


def knapsack(sizes: np.ndarray, values: np.ndarray, cap: int = MILLI) -> tuple[np.ndarray, np.ndarray]:
    """``V[x]``, the most value items of ``sizes`` (any number of each) fit in
    ``x`` (0..cap), and the item taken last for it (-1: none, ``V[x] = V[x-1]``)."""
    V = np.zeros(cap + 1)
    last = np.full(cap + 1, -1, np.int64)
    order = np.argsort(sizes, kind="stable")
    s, v = sizes[order], values[order]
    for x in range(1, cap + 1):
        n = int(np.searchsorted(s, x, side="right"))
        V[x], last[x] = V[x - 1], -1
        if n:
            cand = V[x - s[:n]] + v[:n]
            i = int(np.argmax(cand))
            if cand[i] > V[x] + 1e-12:
                V[x], last[x] = cand[i], order[i]
    return V, last


def _pattern(sizes: np.ndarray, last: np.ndarray, cap: int = MILLI) -> np.ndarray:
    counts = np.zeros(sizes.size, np.int64)
    x = cap
    while x > 0:
        i = last[x]
        if i < 0:
            x -= 1
        else:
            counts[i] += 1
            x -= int(sizes[i])
    return counts


class ShareValues:
    """Prices of free share from the packing LP of a workload (module doc).

    ``sizes`` in milli (whole devices are 1000), ``weights`` how many devices'
    worth of tasks of each size per task of the workload (a 4-device task
    counts four of 1000)."""

    def __init__(self, sizes: np.ndarray, weights: np.ndarray) -> None:
        self.sizes = np.asarray(sizes, np.int64)
        self.weights = np.asarray(weights, np.float64)
        self.devices = -1
        self.V = np.zeros(MILLI + 1)
        self.value = np.zeros(MILLI + 1)  # per size in milli: v_s
        self.unallocated = 0.0  # the LP's own unallocated share, %: a bound no placement beats

    @classmethod
    def of(cls, target) -> "ShareValues | None":
        """From a ``TargetWorkload``; None when nothing shares a device."""
        gpu = target.gpus > 0
        per: dict[int, float] = {}
        for g, m, w in zip(target.gpus[gpu].tolist(), target.milli[gpu].tolist(), target.weight[gpu].tolist()):
            size, n = (m, 1) if m < MILLI else (MILLI, g)
            per[size] = per.get(size, 0.0) + w * n
        if not any(s < MILLI for s in per):
            return None
        sizes = np.array(sorted(per), np.int64)
        return cls(sizes, np.array([per[s] for s in sizes.tolist()]))

    def solve(self, devices: int, max_rounds: int = 200) -> None:
        """Prices for ``devices`` devices, the workload scaled to fill them."""
        from scipy.optimize import linprog

        self.devices = devices
        if devices <= 0:
            return
        s = self.sizes
        counts = self.weights * devices * MILLI / float((s * self.weights).sum())
        eye = np.eye(s.size, dtype=np.int64)
        pats = [eye[i] * (MILLI // int(x)) for i, x in enumerate(s.tolist())]
        v, V = s.astype(np.float64), None
        for _ in range(max_rounds):
            P = np.array(pats).T
            res = linprog(-(s @ P).astype(np.float64), A_ub=np.vstack([P, np.ones(P.shape[1])]),
                          b_ub=np.concatenate([counts, [devices]]), bounds=(0, None), method="highs")
            if res.status != 0:
                break
            dual = -res.ineqlin.marginals
            v, mu = np.maximum(s - dual[:-1], 0.0), dual[-1]
            V, last = knapsack(s, v)
            self.unallocated = 100.0 * (1.0 + res.fun / (devices * MILLI))
            if V[MILLI] <= mu + 1e-6:
                break
            pats.append(_pattern(s, last))
        self.V = V if V is not None else knapsack(s, v)[0]
        self.value = np.zeros(MILLI + 1)
        self.value[s] = v

    def loss(self, free: np.ndarray, d: int) -> np.ndarray:
        """What putting a share ``d`` on devices with ``free`` milli free loses of their worth."""
        return self.V[free] - self.V[free - d] - self.value[d]


class BlockReserve:
    """Rows kept for whole-row tasks while few rows can take them (module doc)."""

    WEIGHT = 0.4

    def __init__(self, target, models) -> None:
        whole = (target.gpus >= 2) & (target.milli >= MILLI)
        demand = target.weight * target.gpus * np.maximum(target.milli, 0)
        total = float(demand[target.gpus > 0].sum())
        shapes: dict[tuple, float] = {}
        for i in np.flatnonzero(whole).tolist():
            key = (int(target.gpus[i]), int(target.cpu[i]), int(target.mem[i]), tuple(target.models[i]))
            shapes[key] = shapes.get(key, 0.0) + float(demand[i]) / max(total, 1e-300)
        keys = sorted(shapes)
        self.k = np.array([k[0] for k in keys], np.int64)
        self.cpu = np.array([k[1] for k in keys], np.int64)
        self.mem = np.array([k[2] for k in keys], np.int64)
        self.share = np.array([shapes[k] for k in keys])
        n_models = max(len(models), 1)
        # allowed[model code, shape]; the last model row: rows without a device of the kind
        self.allowed = np.zeros((n_models + 1, len(keys)), bool)
        for j, key in enumerate(keys):
            codes = [models.get(m) for m in key[3]] if key[3] else range(n_models)
            for c in codes:
                if c is not None and c >= 0:
                    self.allowed[c, j] = True
        self._table = None  # the table whose rows' host flags are kept
        self._stamp = np.zeros(0, np.int64)
        self._flags = np.zeros((0, len(keys)), bool)
        self._count = np.zeros(len(keys), np.int64)

    def __bool__(self) -> bool:
        return bool(self.k.size)

    def hosts(self, full: np.ndarray, cpu: np.ndarray, mem: np.ndarray, model: np.ndarray) -> np.ndarray:
        """[rows, shapes]: which rows can take a task of each shape."""
        return ((full[:, None] >= self.k) & (cpu[:, None] >= self.cpu) & (mem[:, None] >= self.mem)
                & self.allowed[model])

    def prices(self, table, G: np.ndarray, full: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Per shape, what one of its hosts is worth now. Which rows are hosts
        is kept per row and refreshed only where the table changed."""
        n, free = table.n, table.free
        if self._table is not table or self._stamp.size != n:
            self._table, self._stamp = table, np.full(n, -1, np.int64)
            self._flags = np.zeros((n, self.k.size), bool)
            self._count = np.zeros(self.k.size, np.int64)
        dirty = np.flatnonzero(self._stamp != table.stamp[:n])
        if dirty.size:
            now = self.hosts(full[dirty], free[0, dirty], free[1, dirty], model[dirty])
            self._count = self._count + now.sum(axis=0) - self._flags[dirty].sum(axis=0)
            self._flags[dirty] = now
            self._stamp[dirty] = table.stamp[dirty]
        need = float(G[:n].sum()) * self.share / (self.k * MILLI)
        return self.WEIGHT * self.k * MILLI * np.minimum(1.0, need / np.maximum(self._count, 1))

    def cost(self, table, G: np.ndarray, full: np.ndarray, model: np.ndarray, rows: np.ndarray,
             full_after: np.ndarray, cpu_after: np.ndarray, mem_after: np.ndarray) -> np.ndarray:
        """Per candidate (a row and what it keeps free after), the worth of the hosts it would stop being."""
        price = self.prices(table, G, full, model)
        before = self._flags[rows]  # as of now: prices() brought every row up to date
        hosting = before.any(axis=1)
        out = np.zeros(rows.size)
        if hosting.any():
            h = np.flatnonzero(hosting)
            after = self.hosts(full_after[h], cpu_after[h], mem_after[h], model[rows[h]])
            out[h] = (before[h] & ~after) @ price
        return out
