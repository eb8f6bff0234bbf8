"""Paths between sites: lowest-rtt routes and their bottleneck bandwidth.

The network keeps the links that are up as a sparse graph (O(links) memory),
never an all-pairs matrix. For sites ``a`` and ``b``:

- ``rtt(a, b)`` is the summed rtt of the lowest-rtt path (inf when
  unreachable; a site's own intra-site rtt for ``a == b``);
- ``bandwidth(a, b)`` is the narrowest link on that path, the widest such
  path among equal-rtt ones (0 when unreachable; inf within a site: the node
  fabric decides);
- ``component[s]`` labels mutually reachable sites, in order of their lowest
  site index.

Paths are computed on demand, one site at a time: ``rtt_to(b)`` and
``bandwidth_to(b)`` are the columns from every site to ``b``, found by one
single-source Dijkstra with the lexicographic key (rtt ascending, bandwidth
descending) and kept in a cache bounded by bytes. The Dijkstra runs over the
*core* only: a *leaf* (a site with one neighbour, whose neighbour has more)
can carry no path through it, so its values follow from its neighbour's in
one vectorized step. With a million single-link devices on a thousand edge
and cloud sites, a column costs a Dijkstra over the thousand plus O(sites).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Iterable

import numpy as np
from numba import njit

if TYPE_CHECKING:
    from suanli.model.fleet import Link, Site

CACHE_BYTES = 512 * 2**20  # columns kept, by size: 32 of a million sites, 4,096 of 8,000


@njit(cache=True, nogil=True)
def _dijkstra(indptr, indices, rtt, bw, seed, seed_rtt, seed_bw):  # pragma: no cover - compiled
    """Single-source lowest-rtt paths from ``seed`` (reached at ``seed_rtt``
    over a bottleneck of ``seed_bw``) over a CSR graph; on equal rtt the wider
    bottleneck wins. Returns (rtt, bandwidth) per vertex: inf and 0 when
    unreachable. A binary heap with lazy deletion; the key is isotone, so the
    result does not depend on the order equal keys are popped in."""
    n = indptr.shape[0] - 1
    dist = np.full(n, np.inf)
    wide = np.zeros(n)
    done = np.zeros(n, np.bool_)
    cap = indices.shape[0] + 1
    hd = np.empty(cap)
    hb = np.empty(cap)
    hv = np.empty(cap, np.int64)
    dist[seed], wide[seed] = seed_rtt, seed_bw
    hd[0], hb[0], hv[0] = seed_rtt, seed_bw, seed
    size = 1
    while size > 0:
        d, b, u = hd[0], hb[0], hv[0]
        size -= 1
        if size > 0:  # move the last entry to the root and sift it down
            ld, lb, lv = hd[size], hb[size], hv[size]
            i = 0
            while True:
                c = 2 * i + 1
                if c >= size:
                    break
                if c + 1 < size and (hd[c + 1] < hd[c] or (hd[c + 1] == hd[c] and hb[c + 1] > hb[c])):
                    c += 1
                if hd[c] < ld or (hd[c] == ld and hb[c] > lb):
                    hd[i], hb[i], hv[i] = hd[c], hb[c], hv[c]
                    i = c
                else:
                    break
            hd[i], hb[i], hv[i] = ld, lb, lv
        if done[u] or d != dist[u] or b != wide[u]:
            continue  # a stale entry
        done[u] = True
        for k in range(indptr[u], indptr[u + 1]):
            v = indices[k]
            if done[v]:
                continue
            nd = d + rtt[k]
            nb = min(b, bw[k])
            if nd < dist[v] or (nd == dist[v] and nb > wide[v]):
                dist[v], wide[v] = nd, nb
                i = size  # push and sift up
                size += 1
                while i > 0:
                    p = (i - 1) // 2
                    if nd < hd[p] or (nd == hd[p] and nb > hb[p]):
                        hd[i], hb[i], hv[i] = hd[p], hb[p], hv[p]
                        i = p
                    else:
                        break
                hd[i], hb[i], hv[i] = nd, nb, v
    return dist, wide


def _best_links(n: int, a: np.ndarray, b: np.ndarray, rtt: np.ndarray, bw: np.ndarray):
    """One link per unordered site pair: among parallel links the lower rtt,
    the wider on a tie. Links from a site to itself carry no path and go."""
    keep = a != b
    a, b, rtt, bw = a[keep], b[keep], rtt[keep], bw[keep]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = lo * n + hi
    order = np.lexsort((-bw, rtt, key))
    key = key[order]
    first = np.ones(len(key), bool)
    first[1:] = key[1:] != key[:-1]
    pick = order[first]
    return lo[pick], hi[pick], rtt[pick], bw[pick]


def _csr(n: int, a: np.ndarray, b: np.ndarray, rtt: np.ndarray, bw: np.ndarray):
    """Both directions of the undirected links as CSR arrays, by source."""
    src = np.concatenate([a, b])
    dst = np.concatenate([b, a])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order].astype(np.int64), np.concatenate([rtt, rtt])[order], np.concatenate([bw, bw])[order]


@njit(cache=True, nogil=True)
def _components(n, a, b):  # pragma: no cover - compiled
    """int32[n]: component labels numbered in order of each one's lowest site,
    by union-find over the links (path halving, union by lower root)."""
    root = np.arange(n)
    for k in range(a.shape[0]):
        x, y = a[k], b[k]
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        while root[y] != y:
            root[y] = root[root[y]]
            y = root[y]
        if x < y:
            root[y] = x
        elif y < x:
            root[x] = y
    label = np.full(n, -1, np.int32)
    count = 0
    for i in range(n):  # a root is its set's lowest site, so it comes first
        r = i
        while root[r] != r:
            r = root[r]
        if label[r] < 0:
            label[r] = count
            count += 1
        label[i] = label[r]
    return label


class Network:
    """The links that are up, as a sparse graph, with paths computed per
    destination site on demand and cached (see the module docstring)."""

    def __init__(self, intra_rtt_ms: np.ndarray, a: np.ndarray, b: np.ndarray, rtt: np.ndarray,
                 bw: np.ndarray, cache_bytes: int = CACHE_BYTES) -> None:
        n = len(intra_rtt_ms)
        self.n = n
        self.intra_rtt_ms = intra_rtt_ms
        self.component = _components(n, a, b)
        indptr, nbr, w, c = _csr(n, a, b, rtt, bw)
        degree = np.diff(indptr)
        first = np.minimum(indptr[:-1], max(len(nbr) - 1, 0))  # a leaf's one neighbour is its first
        self.leaf = (degree == 1) & (degree[nbr[first]] >= 2) if len(nbr) else np.zeros(n, bool)
        self.leaves = np.flatnonzero(self.leaf)
        self.parent = nbr[first[self.leaves]]
        self.leaf_rtt, self.leaf_bw = w[first[self.leaves]], c[first[self.leaves]]
        # the core: every other site, renumbered, with the links among them
        self.core = np.flatnonzero(~self.leaf)
        self.core_id = np.full(n, -1, np.int64)
        self.core_id[self.core] = np.arange(len(self.core))
        inner = ~self.leaf[a] & ~self.leaf[b]
        self._graph = _csr(len(self.core), self.core_id[a[inner]], self.core_id[b[inner]], rtt[inner], bw[inner])
        self._cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._cached = 0  # bytes in the cache

    @staticmethod
    def build(sites: "Iterable[Site]", links: "Iterable[Link]", down: frozenset = frozenset(),
              cache_bytes: int = CACHE_BYTES) -> "Network":
        """The network of ``sites`` over ``links`` less those whose site pair is in ``down``."""
        sites = list(sites)
        n = len(sites)
        links = list(links)
        a = np.fromiter((ln.a for ln in links), np.int64, len(links))
        b = np.fromiter((ln.b for ln in links), np.int64, len(links))
        rtt = np.fromiter((ln.rtt_ms for ln in links), float, len(links))
        bw = np.fromiter((ln.bandwidth_mbps for ln in links), float, len(links))
        if down:
            pairs = [tuple(p) for p in down if len(p) == 2]
            cut = np.array([min(p) * n + max(p) for p in pairs], np.int64)
            up = ~np.isin(np.minimum(a, b) * n + np.maximum(a, b), cut)
            a, b, rtt, bw = a[up], b[up], rtt[up], bw[up]
        intra = np.fromiter((s.intra_site_rtt_ms for s in sites), float, n)
        return Network(intra, *_best_links(n, a, b, rtt, bw), cache_bytes=cache_bytes)

    # ------------------------------------------------------------ columns

    def _column(self, site: int) -> tuple[np.ndarray, np.ndarray]:
        """(rtt, bandwidth) from every site to ``site``, read-only, cached (LRU by bytes)."""
        site = int(site)
        hit = self._cache.get(site)
        if hit is not None:
            self._cache.move_to_end(site)
            return hit
        hit = self._compute(site)
        self._cache[site] = hit
        self._cached += hit[0].nbytes + hit[1].nbytes
        while self._cached > self._cache_bytes and len(self._cache) > 1:
            _, (r, w) = self._cache.popitem(last=False)
            self._cached -= r.nbytes + w.nbytes
        return hit

    def _compute(self, site: int) -> tuple[np.ndarray, np.ndarray]:
        """One Dijkstra over the core from ``site`` (a leaf starts at its
        neighbour, one link away), then the leaves from their neighbours: the
        same sums in the same order as a Dijkstra over the whole graph."""
        if self.leaf[site]:
            at = int(np.searchsorted(self.leaves, site))
            seed, seed_rtt, seed_bw = self.parent[at], float(self.leaf_rtt[at]), float(self.leaf_bw[at])
        else:
            seed, seed_rtt, seed_bw = site, 0.0, np.inf
        rtt = np.full(self.n, np.inf)
        bw = np.zeros(self.n)
        core_rtt, core_bw = _dijkstra(*self._graph, self.core_id[seed], seed_rtt, seed_bw)
        rtt[self.core], bw[self.core] = core_rtt, core_bw
        rtt[self.leaves] = rtt[self.parent] + self.leaf_rtt
        bw[self.leaves] = np.minimum(bw[self.parent], self.leaf_bw)
        rtt[site], bw[site] = self.intra_rtt_ms[site], np.inf
        rtt.setflags(write=False)
        bw.setflags(write=False)
        return rtt, bw

    def rtt_to(self, site: int) -> np.ndarray:
        """float64[S]: the rtt of the lowest-rtt path from every site to ``site``."""
        return self._column(site)[0]

    def bandwidth_to(self, site: int) -> np.ndarray:
        """float64[S]: the bottleneck bandwidth of that path from every site to ``site``."""
        return self._column(site)[1]

    def reachable_to(self, site: int) -> np.ndarray:
        """bool[S]: which sites have a path to ``site`` (no path search needed)."""
        return self.component == self.component[site]

    # ------------------------------------------------------------ pairs

    def rtt(self, a, b):
        """The rtt between sites ``a`` and ``b``: scalars, or ``a`` an array with one ``b``."""
        return self._pair(self.rtt_to, a, b)

    def bandwidth(self, a, b):
        """The bottleneck bandwidth between ``a`` and ``b``, as ``rtt``."""
        return self._pair(self.bandwidth_to, a, b)

    def reachable(self, a, b):
        """Whether ``a`` and ``b`` are connected, elementwise."""
        out = self.component[a] == self.component[b]
        return bool(out) if np.ndim(out) == 0 else out

    @staticmethod
    def _pair(column, a, b):
        """Values for pairs via the cached columns of the distinct ``b``s."""
        if np.ndim(b) == 0:
            out = column(int(b))[a]
            return float(out) if np.ndim(out) == 0 else out
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        out = np.empty(a.shape)
        for s in np.unique(b):  # one column per distinct destination, not per pair
            sel = b == s
            out[sel] = column(int(s))[a[sel]]
        return out
