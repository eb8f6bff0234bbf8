"""Paths between sites: lowest-rtt routes and their bottleneck bandwidth.

The network keeps its links as a sparse graph (O(links) memory), never an
all-pairs matrix. For sites ``a`` and ``b``:

- ``rtt(a, b)`` is the summed rtt of the lowest-rtt path over the links that
  are up (inf when unreachable; a site's own intra-site rtt for ``a == b``);
- ``bandwidth(a, b)`` is the narrowest link on that path, the widest such
  path among equal-rtt ones (0 when unreachable; inf within a site: the node
  fabric decides);
- ``component[s]`` labels mutually reachable sites, in order of their lowest
  site index.

Paths are computed on demand, one site at a time: ``rtt_to(b)`` and
``bandwidth_to(b)`` are the columns from every site to ``b``, found by one
single-source Dijkstra with the lexicographic key (rtt ascending, bandwidth
descending) and kept in a cache bounded by bytes. The Dijkstra runs over the
*core* only: a *leaf* (a site with one link, whose other end has more) can
carry no path through it, so its values follow from its parent's in one
compiled pass. With a million single-link devices on a thousand edge and
cloud sites, a column costs a Dijkstra over the thousand plus O(sites).

The network changes in place. Every link it was given is kept, up or down,
and a site is a leaf or core by all its links, so taking a link down or up
never moves a site between the two:

- ``link_down``/``link_up`` of a leaf's link changes that leaf alone: its
  entry in each cached column is set from its parent's (noted at once, made
  when the column is next read: the leaves changed since, together, as one
  gather), and components are labelled again (one compiled O(sites) pass);
- of a link between core sites, the core's CSR is rebuilt (O(core links)).
  A cached column the link cannot change (down: no lowest path to either end
  runs over it; up: it shortens neither end's) is kept as it is; another is
  marked stale and repaired when next read: a Dijkstra over the core, then
  the core sites whose value moved and their leaves. Components are labelled
  again only when the core's parts changed;
- ``attach`` replaces a site's links (a device handed over to other edges).
  A leaf that stays one, under another core site, is patched like a leaf's
  link above. A core site that relays nothing and holds up no leaf (a device
  on several edges) given as many links to core sites has its link slots and
  the CSR's rows patched in place (``_rehome``: O(its links + the rows
  between), no rebuild). Anything else updates the sites whose links
  changed, rebuilds the core's CSR and leaves the cached columns to be
  repaired.

A Dijkstra's result does not depend on the order of the vertices or of their
links (a vertex's key is the best offer from those settled before it, and
equal keys cannot improve each other), so a repaired column equals one
computed afresh bit for bit. Columns read before a change are not to be
kept across it: a cached one is patched in place.

``within(site, r)`` lists the sites within rtt ``r`` of ``site`` without a
column: a Dijkstra over the core that stops past ``r``, and the leaves of
the core sites it reached.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Iterable

import numpy as np
from numba import njit

if TYPE_CHECKING:
    from suanli.model.fleet import Link, Site

_NO_KEEP = np.zeros(1, np.bool_)  # ``within`` without a mask
_NO_SKIP = np.zeros(0, np.bool_)  # a search that reaches every vertex
CACHE_BYTES = 512 * 2**20  # columns kept, by size: 32 of a million sites, 4,096 of 8,000
FEW_LEAVES = 4096  # ``within``: a mask marking at most this many leaves reads them from their parents
LEAF_COLUMNS = 8  # of them, columns of leaves (devices) kept (``Network._keep_few_leaves``)
PATCHES_KEPT = 4096  # leaf patches noted before every cached column is caught up at once


@njit(cache=True, nogil=True)
def _dijkstra(indptr, indices, rtt, bw, stop, seed, seed_rtt, seed_bw, limit, skip):  # pragma: no cover - compiled
    """Single-source lowest-rtt paths from ``seed`` (reached at ``seed_rtt``
    over a bottleneck of ``seed_bw``) over a CSR graph; on equal rtt the wider
    bottleneck wins. A vertex marked in ``stop`` (a site that relays nothing)
    ends the paths that reach it: it is reached, never passed through. Stops once the rtt popped exceeds ``limit`` (inf: every
    vertex). Returns (rtt, bandwidth, settled): inf and 0 when unreachable,
    and the vertices settled within the limit in the order settled (their
    values are final; others may not be when the search stopped early). A
    binary heap with lazy deletion; the key is isotone, so the result does not
    depend on the order equal keys are popped in. ``skip`` (empty: none):
    vertices that relay nothing and are not wanted, never reached (their
    values stay inf): the others' are the same, as none relays."""
    n = indptr.shape[0] - 1
    skipping = skip.shape[0] > 0
    dist = np.full(n, np.inf)
    wide = np.zeros(n)
    done = np.zeros(n, np.bool_)
    settled = np.empty(n, np.int64)
    count = 0
    cap = indices.shape[0] + 1
    hd = np.empty(cap)
    hb = np.empty(cap)
    hv = np.empty(cap, np.int64)
    dist[seed], wide[seed] = seed_rtt, seed_bw
    hd[0], hb[0], hv[0] = seed_rtt, seed_bw, seed
    size = 1
    while size > 0:
        d, b, u = hd[0], hb[0], hv[0]
        if d > limit:
            break  # every key left is as far
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
        settled[count] = u
        count += 1
        if stop[u] and u != seed:
            continue  # reached; it relays nothing
        for k in range(indptr[u], indptr[u + 1]):
            v = indices[k]
            if done[v] or (skipping and skip[v]):
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
    return dist, wide, settled[:count]


@njit(cache=True, nogil=True)
def _fill(rtt, bw, leaf, parent, leaf_rtt, leaf_bw):  # pragma: no cover - compiled
    """Every leaf's entry of a column from its parent's: one link further."""
    for s in range(leaf.shape[0]):
        if leaf[s]:
            p = parent[s]
            rtt[s] = rtt[p] + leaf_rtt[s]
            bw[s] = min(bw[p], leaf_bw[s])


@njit(cache=True, nogil=True)
def _repair(rtt, bw, core, core_rtt, core_bw, dest, kid_head, kid_next, leaf_rtt, leaf_bw):  # pragma: no cover
    """Bring a column to ``dest`` up to date with a new Dijkstra over the core:
    the core sites whose value moved, and their leaves. ``dest``'s own entry
    stays (its intra-site values); its leaves hang from rtt 0 there."""
    moved = 0
    for i in range(core.shape[0]):
        s = core[i]
        if s == dest:
            continue
        nr, nb = core_rtt[i], core_bw[i]
        if rtt[s] == nr and bw[s] == nb:
            continue
        rtt[s], bw[s] = nr, nb
        moved += 1
        k = kid_head[s]
        while k >= 0:
            if k != dest:
                rtt[k] = nr + leaf_rtt[k]
                bw[k] = min(nb, leaf_bw[k])
            k = kid_next[k]
    return moved


@njit(cache=True, nogil=True)
def _neighbourhood(core, settled, dist, site, intra, limit, kid_head, kid_next, kids, leaf_rtt,
                   keep, use_keep, self_ok, with_leaves):  # pragma: no cover - compiled
    """(sites, rtt) within ``limit`` of ``site`` by ascending site: the core
    sites settled by a Dijkstra stopped past the limit, their leaves one link
    further (the sums of ``_fill``; not walked unless ``with_leaves``), and
    ``site`` at its intra-site rtt; with ``use_keep``, only the sites ``keep``
    marks (``site`` itself: if ``self_ok``)."""
    total = 1
    for i in range(settled.shape[0]):
        total += 1 + (kids[core[settled[i]]] if with_leaves else 0)
    out = np.empty(total, np.int64)
    val = np.empty(total)
    m = 0
    for i in range(settled.shape[0]):
        c = core[settled[i]]
        d = dist[settled[i]]
        if c != site and (not use_keep or keep[c]):
            out[m], val[m] = c, d
            m += 1
        k = kid_head[c] if with_leaves else -1
        while k >= 0:
            if k != site and (not use_keep or keep[k]):
                v = d + leaf_rtt[k]
                if v <= limit:
                    out[m], val[m] = k, v
                    m += 1
            k = kid_next[k]
    if intra <= limit and self_ok:
        out[m], val[m] = site, intra
        m += 1
    order = np.argsort(out[:m])
    return out[order], val[order]


@njit(cache=True, nogil=True)
def _kid_lists(leaf, parent):  # pragma: no cover - compiled
    """Each core site's leaves as a doubly linked list (head per site, next
    and previous per leaf, -1 at the ends; ascending), and their numbers."""
    n = leaf.shape[0]
    head = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    prv = np.full(n, -1, np.int64)
    kids = np.zeros(n, np.int64)
    for s in range(n - 1, -1, -1):
        if leaf[s]:
            p = parent[s]
            nxt[s] = head[p]
            if head[p] >= 0:
                prv[head[p]] = s
            head[p] = s
            kids[p] += 1
    return head, nxt, prv, kids


@njit(cache=True, nogil=True)
def _core_roots(m, a, b, stop):  # pragma: no cover - compiled
    """int64[m]: each core vertex's part, as the part's lowest vertex, by
    union-find over the links (path halving, union by lower root). A vertex
    marked in ``stop`` (it relays nothing) joins no two parts: it takes the
    part of its lowest neighbour that relays (whatever order its links are
    in), or is alone."""
    root = np.arange(m)
    for k in range(a.shape[0]):
        x, y = a[k], b[k]
        if stop[x] or stop[y]:
            continue
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
    for i in range(m):  # a root is never above its vertex: lower ones are final first
        root[i] = root[root[i]]
    best = np.full(m, -1, np.int64)  # a site that relays nothing: its lowest relaying neighbour
    for k in range(a.shape[0]):
        x, y = a[k], b[k]
        if stop[x] and not stop[y] and (best[x] < 0 or y < best[x]):
            best[x] = y
        elif stop[y] and not stop[x] and (best[y] < 0 or x < best[y]):
            best[y] = x
    for i in range(m):
        if best[i] >= 0:
            root[i] = root[best[i]]
    return root


@njit(cache=True, nogil=True)
def _csr_move(indptr, dst, w, c, s, x, y, ws, cs):  # pragma: no cover - compiled
    """In place: the entry of ``s`` leaves row ``x`` and one for ``s`` (of rtt
    ``ws``, bandwidth ``cs``) joins row ``y``; the rows between give up or take
    one slot each (a row's last entry moved to its other end: rows are sets)."""
    lo, hi = indptr[x], indptr[x + 1]
    at = lo
    while dst[at] != s:
        at += 1
    last = hi - 1  # the hole made at the row's end
    dst[at], w[at], c[at] = dst[last], w[last], c[last]
    hole = last
    if x < y:
        for r in range(x + 1, y + 1):  # row r starts one slot earlier: its last entry fills the hole
            end = indptr[r + 1] - 1
            if end >= indptr[r]:
                dst[hole], w[hole], c[hole] = dst[end], w[end], c[end]
            indptr[r] -= 1
            hole = end
    else:
        for r in range(x, y, -1):  # row r starts one slot later: its first entry fills the hole
            first = indptr[r]
            if hole != first:
                dst[hole], w[hole], c[hole] = dst[first], w[first], c[first]
            indptr[r] += 1
            hole = first
    dst[hole], w[hole], c[hole] = s, ws, cs


@njit(cache=True, nogil=True)
def _csr_weigh(indptr, dst, w, c, x, s, ws, cs):  # pragma: no cover - compiled
    """In place: the entry of ``s`` in row ``x`` gets rtt ``ws`` and bandwidth ``cs``."""
    for at in range(indptr[x], indptr[x + 1]):
        if dst[at] == s:
            w[at], c[at] = ws, cs
            return


@njit(cache=True, nogil=True)
def _labels(leaf, parent, up, core_id, root):  # pragma: no cover - compiled
    """int32[n] component labels numbered in order of each one's lowest site
    (a leaf is in its parent's, or alone while its link is down), and each
    label's lowest site."""
    n = leaf.shape[0]
    of_root = np.full(root.shape[0], -1, np.int64)
    label = np.empty(n, np.int32)
    first = np.empty(n, np.int64)
    count = 0
    for i in range(n):
        if leaf[i]:
            if not up[i]:
                label[i] = count
                first[count] = i
                count += 1
                continue
            r = root[core_id[parent[i]]]
        else:
            r = root[core_id[i]]
        if of_root[r] < 0:
            of_root[r] = count
            first[count] = i
            count += 1
        label[i] = of_root[r]
    return label, first[:count].copy()


def _best_links(n: int, a: np.ndarray, b: np.ndarray, rtt: np.ndarray, bw: np.ndarray):
    """One link per unordered site pair: among parallel links the lower rtt,
    the wider on a tie. Links from a site to itself carry no path and go."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    rtt, bw = np.asarray(rtt, float), np.asarray(bw, float)
    keep = a != b
    a, b, rtt, bw = a[keep], b[keep], rtt[keep], bw[keep]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    # a pair can repeat only between two sites of more than one link: sort those alone
    deg = np.bincount(lo, minlength=n) + np.bincount(hi, minlength=n)
    many = np.flatnonzero((deg[lo] > 1) & (deg[hi] > 1))
    key = lo[many] * n + hi[many]
    order = np.lexsort((-bw[many], rtt[many], key))
    key = key[order]
    first = np.ones(len(key), bool)
    first[1:] = key[1:] != key[:-1]
    if first.all():
        return lo, hi, rtt, bw
    single = np.ones(len(lo), bool)
    single[many] = False
    pick = np.concatenate([np.flatnonzero(single), many[order[first]]])
    return lo[pick], hi[pick], rtt[pick], bw[pick]


@njit(cache=True, nogil=True)
def _csr(n, a, b, rtt, bw):  # pragma: no cover - compiled
    """Both directions of the undirected links as CSR arrays, by source (a
    counting sort: each source's a→b entries in link order, then its b→a ones)."""
    m = a.shape[0]
    indptr = np.zeros(n + 1, np.int64)
    for k in range(m):
        indptr[a[k] + 1] += 1
        indptr[b[k] + 1] += 1
    for i in range(n):
        indptr[i + 1] += indptr[i]
    at = indptr[:-1].copy()
    dst = np.empty(2 * m, np.int64)
    w = np.empty(2 * m)
    c = np.empty(2 * m)
    for k in range(m):
        i = at[a[k]]
        dst[i], w[i], c[i] = b[k], rtt[k], bw[k]
        at[a[k]] += 1
    for k in range(m):
        i = at[b[k]]
        dst[i], w[i], c[i] = a[k], rtt[k], bw[k]
        at[b[k]] += 1
    return indptr, dst, w, c


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the network patches ``a`` itself)."""
    v = a.view()
    v.flags.writeable = False
    return v


def _offers(du, bu, dv, bv, rtt, bw) -> bool:
    """Whether reaching v from u over a link of (rtt, bw) beats v's key."""
    nd = du + rtt
    return bool(nd < dv or (nd == dv and min(bu, bw) > bv))


def _carries(du, bu, dv, bv, rtt, bw) -> bool:
    """Whether a link of (rtt, bw) from u gives v its key (v reached at all)."""
    return bool(du + rtt == dv and min(bu, bw) == bv and not (dv == np.inf and bv == 0.0))


class Network:
    """Every link, up or down, as a sparse graph, with paths computed per
    destination site on demand and cached (see the module docstring).
    ``version`` counts the changes made in place: the object stays the same,
    so what is kept from it is to be keyed on its version too."""

    def __init__(self, intra_rtt_ms: np.ndarray, a: np.ndarray, b: np.ndarray, rtt: np.ndarray,
                 bw: np.ndarray, cache_bytes: int = CACHE_BYTES, up: np.ndarray | None = None,
                 transit: np.ndarray | None = None) -> None:
        """The network over links given one per site pair (as ``_best_links``
        leaves them), ``up`` marking those that are up (all by default),
        ``transit`` the sites that relay paths between others (all by
        default; a device does not). Most callers want ``build`` or
        ``from_arrays``."""
        n = len(intra_rtt_ms)
        self.n = n
        self.transit = np.ones(n, bool) if transit is None else np.asarray(transit, bool).copy()
        self.labelled = 0  # counts the changes of ``component``: what is kept from it is keyed on this
        self.intra_rtt_ms = np.asarray(intra_rtt_ms, float)
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        rtt, bw = np.asarray(rtt, float), np.asarray(bw, float)
        up = np.ones(len(a), bool) if up is None else np.asarray(up, bool)
        keep = a != b
        lo, hi, rtt, bw, up = np.minimum(a, b)[keep], np.maximum(a, b)[keep], rtt[keep], bw[keep], up[keep]
        # leaves, by all links: a site with one whose other end has more
        deg = np.bincount(lo, minlength=n) + np.bincount(hi, minlength=n)
        only = np.full(n, -1, np.int64)  # the one link of a site that has one
        k = np.flatnonzero(deg[lo] == 1)
        only[lo[k]] = k
        k = np.flatnonzero(deg[hi] == 1)
        only[hi[k]] = k
        one = np.flatnonzero(only >= 0)
        other = lo[only[one]] + hi[only[one]] - one
        hangs = deg[other] >= 2
        leaves, parents, own = one[hangs], other[hangs], only[one[hangs]]
        self.leaf = np.zeros(n, bool)
        self.leaf[leaves] = True
        self.parent = np.full(n, -1, np.int64)  # a leaf's core site, -1 for the core
        self.parent[leaves] = parents
        self._link_rtt = np.full(n, np.inf)  # a leaf's link as given
        self._link_bw = np.zeros(n)
        self._link_up = np.zeros(n, bool)
        self._link_rtt[leaves], self._link_bw[leaves], self._link_up[leaves] = rtt[own], bw[own], up[own]
        # ... and as paths see it: inf and 0 while it is down
        self.leaf_rtt = np.where(self._link_up, self._link_rtt, np.inf)
        self.leaf_bw = np.where(self._link_up, self._link_bw, 0.0)
        self._kid_head, self._kid_next, self._kid_prev, self._kids = _kid_lists(self.leaf, self.parent)
        # the links among core sites, up or down, by slot (``_calive`` false: a slot freed)
        inner = ~self.leaf[lo] & ~self.leaf[hi]
        self._ca, self._cb, self._cr, self._cw = lo[inner], hi[inner], rtt[inner], bw[inner]
        self._cup = up[inner].copy()
        self._calive = np.ones(len(self._ca), bool)
        self._cslot = dict(zip((self._ca * n + self._cb).tolist(), range(len(self._ca))))
        # the core: every other site, numbered in site order
        self.core = np.flatnonzero(~self.leaf)
        self.core_id = np.full(n, -1, np.int64)
        self.core_id[self.core] = np.arange(len(self.core))
        self._edges_now = None
        self._build_graph()
        self._relabel()
        self._cache: OrderedDict[int, list] = OrderedDict()  # site -> [rtt, bandwidth, stale, patched up to]
        self._cache_bytes = cache_bytes
        self._cached = 0  # bytes in the cache
        self._patches: list[int] = []  # leaves whose link or parent changed, in order (``_patch_leaf``)
        self._patched = 0  # how many patches were dropped from the front of that list
        self.version = 0
        self._leaf_set = 0  # bumps when a site becomes a leaf or stops being one
        self._keeps: dict[int, tuple] = {}  # id(keep) -> (keep, _leaf_set, whether it keeps any leaf[, few leaves])

    @staticmethod
    def build(sites: "Iterable[Site]", links: "Iterable[Link]", down: frozenset = frozenset(),
              cache_bytes: int = CACHE_BYTES, transit: np.ndarray | None = None) -> "Network":
        """The network of ``sites`` over ``links``, those whose site pair is in ``down`` down."""
        sites = list(sites)
        n = len(sites)
        links = list(links)
        a = np.fromiter((ln.a for ln in links), np.int64, len(links))
        b = np.fromiter((ln.b for ln in links), np.int64, len(links))
        rtt = np.fromiter((ln.rtt_ms for ln in links), float, len(links))
        bw = np.fromiter((ln.bandwidth_mbps for ln in links), float, len(links))
        intra = np.fromiter((s.intra_site_rtt_ms for s in sites), float, n)
        return Network.from_arrays(intra, a, b, rtt, bw, down, cache_bytes=cache_bytes, transit=transit)

    @staticmethod
    def from_arrays(intra_rtt_ms, a, b, rtt_ms, bandwidth_mbps, down_pairs=None,
                    cache_bytes: int = CACHE_BYTES, transit: np.ndarray | None = None) -> "Network":
        """The network of ``len(intra_rtt_ms)`` sites over the links ``a[i]``–``b[i]``
        (site indices) of ``rtt_ms[i]`` and ``bandwidth_mbps[i]``; parallel
        links of a pair count as their best, and are down or up together.
        ``down_pairs``: the site pairs whose links start down, an int array of
        shape (k, 2) or pairs (a frozenset of two sites counts; others are ignored)."""
        intra = np.asarray(intra_rtt_ms, float)
        n = len(intra)
        lo, hi, rtt, bw = _best_links(n, a, b, rtt_ms, bandwidth_mbps)
        up = None
        if down_pairs is not None and len(down_pairs):
            if not isinstance(down_pairs, np.ndarray):
                down_pairs = [tuple(p) for p in down_pairs if len(p) == 2]
            pairs = np.asarray(down_pairs, np.int64).reshape(-1, 2)
            if len(pairs):
                cut = np.unique(pairs.min(axis=1) * n + pairs.max(axis=1))
                key = lo * n + hi
                up = cut[np.minimum(np.searchsorted(cut, key), len(cut) - 1)] != key
        return Network(intra, lo, hi, rtt, bw, cache_bytes=cache_bytes, up=up, transit=transit)

    def links_of(self, site: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(neighbours, rtt, bandwidth, up) of every link ``site`` has, as given
        (a link that is down keeps its rtt and bandwidth)."""
        site = int(site)
        if self.leaf[site]:
            return (np.array([self.parent[site]]), np.array([self._link_rtt[site]]),
                    np.array([self._link_bw[site]]), np.array([self._link_up[site]]))
        if self.transit[site]:
            k = np.flatnonzero(self._calive & ((self._ca == site) | (self._cb == site)))
        else:  # a device on several edges: without a scan of every link
            k = self._slots_of(site)
        other = self._ca[k] + self._cb[k] - site
        kids = []
        c = self._kid_head[site]
        while c >= 0:
            kids.append(c)
            c = self._kid_next[c]
        kids = np.array(kids, np.int64)
        return (np.concatenate([other, kids]), np.concatenate([self._cr[k], self._link_rtt[kids]]),
                np.concatenate([self._cw[k], self._link_bw[kids]]), np.concatenate([self._cup[k], self._link_up[kids]]))

    @property
    def leaves(self) -> np.ndarray:
        """int64[L]: the leaf sites, ascending."""
        return np.flatnonzero(self.leaf)

    # ------------------------------------------------------------ structure

    def _build_graph(self) -> None:
        """The core's CSR over the core links that are up (O(core links))."""
        self._own = None  # slots may move
        ea, eb, rtt, bw = self._core_edges(fresh=True)
        self.core_version = getattr(self, "core_version", -1) + 1  # the core graph changed
        self._graph = (*_csr(len(self.core), ea, eb, rtt, bw), ~self.transit[self.core])
        self._any_stop = bool(self._graph[4].any())  # core sites that relay nothing (multi-homed devices)

    def _core_edges(self, fresh: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(core id, core id, rtt, bandwidth) of each core link that is up, in slot order."""
        if fresh or self._edges_now is None:
            sel = np.flatnonzero(self._calive & self._cup)
            self._edges_now = (self.core_id[self._ca[sel]], self.core_id[self._cb[sel]], self._cr[sel], self._cw[sel])
        return self._edges_now

    def _relabel(self, if_split: bool = False) -> None:
        """Components again; with ``if_split``, only when the core's parts
        changed (no leaf moved: a leaf's label follows its parent's)."""
        root = _core_roots(len(self.core), *self._core_edges()[:2], ~self.transit[self.core])
        if if_split and np.array_equal(root, self._core_root):
            return
        self._core_root = root
        self.labelled += 1
        self.component, self._first = _labels(self.leaf, self.parent, self._link_up, self.core_id, root)

    def _add_kid(self, s: int, p: int) -> None:
        head = self._kid_head[p]
        self._kid_next[s], self._kid_prev[s] = head, -1
        if head >= 0:
            self._kid_prev[head] = s
        self._kid_head[p] = s
        self._kids[p] += 1

    def _drop_kid(self, s: int) -> None:
        p, nxt, prv = self.parent[s], self._kid_next[s], self._kid_prev[s]
        if prv >= 0:
            self._kid_next[prv] = nxt
        else:
            self._kid_head[p] = nxt
        if nxt >= 0:
            self._kid_prev[nxt] = prv
        self._kid_next[s] = self._kid_prev[s] = -1
        self._kids[p] -= 1

    def _set_leaf(self, s: int, p: int, rtt: float, bw: float, up: bool) -> None:
        """``s`` a leaf of core site ``p`` (-1: ``s`` joins the core) over that link."""
        if bool(self.leaf[s]) != (p >= 0):
            self._leaf_set += 1
        if p < 0:
            self.leaf[s], self.parent[s] = False, -1
            rtt, bw, up = np.inf, 0.0, False
        else:
            self.leaf[s], self.parent[s] = True, p
        self._link_rtt[s], self._link_bw[s], self._link_up[s] = rtt, bw, up
        self.leaf_rtt[s] = rtt if up else np.inf
        self.leaf_bw[s] = bw if up else 0.0

    def _add_core_links(self, a, b, rtt, bw, up) -> None:
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        if (~self._calive).sum() > self._calive.sum():  # mostly freed slots: pack them
            keep = self._calive
            self._ca, self._cb, self._cr, self._cw = self._ca[keep], self._cb[keep], self._cr[keep], self._cw[keep]
            self._cup, self._calive = self._cup[keep], self._calive[keep]
            self._cslot = dict(zip((self._ca * self.n + self._cb).tolist(), range(len(self._ca))))
        start = len(self._ca)
        self._ca, self._cb = np.concatenate([self._ca, lo]), np.concatenate([self._cb, hi])
        self._cr, self._cw = np.concatenate([self._cr, rtt]), np.concatenate([self._cw, bw])
        self._cup = np.concatenate([self._cup, np.asarray(up, bool)])
        self._calive = np.concatenate([self._calive, np.ones(len(lo), bool)])
        for i, key in enumerate((lo * self.n + hi).tolist()):
            self._cslot[key] = start + i

    def _seed(self, site: int):
        """Where a Dijkstra to ``site`` starts over the core: (core site, rtt,
        bandwidth); a leaf starts at its parent, one link away. None for a leaf
        whose link is down: it reaches nothing."""
        if not self.leaf[site]:
            return site, 0.0, np.inf
        if not self._link_up[site]:
            return None
        return int(self.parent[site]), float(self.leaf_rtt[site]), float(self.leaf_bw[site])

    # ------------------------------------------------------------ changes

    def link_down(self, a: int, b: int) -> bool:
        """Take the link between sites ``a`` and ``b`` down (all parallel links
        of the pair). Returns whether anything changed: False when no link
        joins them or it is down already."""
        return self._set_link(int(a), int(b), False)

    def link_up(self, a: int, b: int) -> bool:
        """Bring the link between ``a`` and ``b`` back up; as ``link_down``."""
        return self._set_link(int(a), int(b), True)

    def _set_link(self, a: int, b: int, up: bool) -> bool:
        if a == b or not (0 <= a < self.n and 0 <= b < self.n):
            return False
        for s, p in ((a, b), (b, a)):
            if self.leaf[s] and self.parent[s] == p:  # a leaf's own link
                if self._link_up[s] == up:
                    return False
                self._set_leaf(s, p, self._link_rtt[s], self._link_bw[s], up)
                self._patch_leaf(s)
                self._relabel()
                self.version += 1
                return True
        k = self._cslot.get(min(a, b) * self.n + max(a, b))
        if k is None or self._cup[k] == up:
            return False
        self._stale_by(k, up)
        self._cup[k] = up
        self._build_graph()
        self._relabel(if_split=True)
        self.version += 1
        return True

    def _stale_by(self, k: int, up: bool) -> None:
        """Mark stale the cached columns that core link ``k`` going ``up`` (or
        down) changes: those where it would beat an end's key (or gives one its
        key). The others are exactly what a new Dijkstra would give."""
        u, v = int(self._ca[k]), int(self._cb[k])
        rtt, bw = float(self._cr[k]), float(self._cw[k])
        test = _offers if up else _carries
        for dest, entry in self._cache.items():
            if entry[2]:
                continue
            col_rtt, col_bw = entry[0], entry[1]
            du, bu = (0.0, np.inf) if u == dest else (col_rtt[u], col_bw[u])
            dv, bv = (0.0, np.inf) if v == dest else (col_rtt[v], col_bw[v])
            if test(du, bu, dv, bv, rtt, bw) or test(dv, bv, du, bu, rtt, bw):
                entry[2] = True

    def _patch_leaf(self, s: int) -> None:
        """Leaf ``s``'s link or parent changed: its entry in each cached
        column is to follow its parent's (the sums of ``_fill``), which
        ``_catch_up`` does when the column is next read; its own column goes.
        (A device handed over costs O(1) here, not O(cached columns).)"""
        self._forget(s)
        self._patches.append(s)
        if len(self._patches) >= PATCHES_KEPT:  # every column caught up, and the list starts again
            for dest, entry in self._cache.items():
                self._catch_up(dest, entry)
            self._patched += len(self._patches)
            self._patches.clear()

    def _catch_up(self, dest: int, entry: list) -> None:
        """Make the leaf patches noted since ``entry`` was last caught up: each
        such leaf's value from its parent's as it is now, all at once (the
        values do not depend on the order the changes came in)."""
        done = entry[3] - self._patched
        if done >= len(self._patches):
            return
        entry[3] = self._patched + len(self._patches)
        leaves = np.unique(np.asarray(self._patches[done:], np.int64))
        leaves = leaves[self.leaf[leaves] & (leaves != dest)]  # a leaf since joined the core is _mend's
        if leaves.size == 0:
            return
        p = self.parent[leaves]
        col_rtt, col_bw = entry[0].base, entry[1].base
        at_dest = p == dest
        pr, pb = col_rtt[p], col_bw[p]
        pr[at_dest], pb[at_dest] = 0.0, np.inf
        col_rtt[leaves] = pr + self.leaf_rtt[leaves]
        col_bw[leaves] = np.minimum(pb, self.leaf_bw[leaves])

    def _forget(self, site: int) -> None:
        hit = self._cache.pop(site, None)
        if hit is not None:
            self._cached -= hit[0].nbytes + hit[1].nbytes

    def attach(self, site: int, neighbours, rtts, bandwidths) -> None:
        """Replace every link of ``site`` with links to ``neighbours`` (site
        indices; one, or more for a multi-homed site, or none) of the given
        rtts and bandwidths, all up. Parallel ones count as their best.

        A leaf handed over to another core site (a device moving between
        edges) costs O(cached columns): its entry in each is set from its new
        parent's, no Dijkstra. Anything else updates the sites whose links
        changed (a leaf that gains a link joins the core, so do the leaves of
        a core ``site``, left without one), rebuilds the core's CSR and leaves
        the cached columns to be repaired when read."""
        site = int(site)
        nbr = np.atleast_1d(np.asarray(neighbours, np.int64)).ravel()
        rtt = np.atleast_1d(np.asarray(rtts, float)).ravel()
        bw = np.atleast_1d(np.asarray(bandwidths, float)).ravel()
        if not (len(nbr) == len(rtt) == len(bw)):
            raise ValueError("attach: as many rtts and bandwidths as neighbours")
        if not 0 <= site < self.n or ((nbr < 0) | (nbr >= self.n)).any():
            raise IndexError("attach: site index out of range")
        keep = nbr != site
        nbr, rtt, bw = nbr[keep], rtt[keep], bw[keep]
        if len(nbr) > 1:  # one link per neighbour: the lower rtt, the wider on a tie
            order = np.lexsort((-bw, rtt, nbr))
            nbr, rtt, bw = nbr[order], rtt[order], bw[order]
            first = np.ones(len(nbr), bool)
            first[1:] = nbr[1:] != nbr[:-1]
            nbr, rtt, bw = nbr[first], rtt[first], bw[first]
        if len(nbr) == 1 and self.leaf[site] and not self.leaf[nbr[0]]:
            self._hand_over(site, int(nbr[0]), float(rtt[0]), float(bw[0]))
        elif not self._rehome(site, nbr, rtt, bw):
            self._reattach(site, nbr, rtt, bw)
        self.version += 1

    def _hand_over(self, s: int, q: int, rtt: float, bw: float) -> None:
        """Leaf ``s`` now hangs from core site ``q`` over an up link."""
        was_up, old = bool(self._link_up[s]), int(self.component[s])
        if self.parent[s] != q:
            self._drop_kid(s)
            self._set_leaf(s, q, rtt, bw, True)
            self._add_kid(s, q)
        else:
            self._set_leaf(s, q, rtt, bw, True)
        self._patch_leaf(s)
        new = int(self.component[q])
        if was_up and old == new:
            return
        if was_up and self._first[old] != s and self._first[new] < s:
            self.component[s] = new  # no part gains or loses its lowest site: no label moves
            self.labelled += 1
        else:
            self._relabel()

    def _rehome(self, site: int, nbr: np.ndarray, rtt: np.ndarray, bw: np.ndarray) -> bool:
        """A core site that relays nothing and holds up no leaf (a device on
        several edges) given as many links as it has, all up, to core sites:
        its links' slots, the CSR's rows and its part patched in place
        (O(its links + the rows between those it leaves and joins)), not
        rebuilt (O(core links)). False, changing nothing, for anything else."""
        if self.leaf[site] or self.transit[site] or self._kids[site] or len(nbr) < 2 or self.leaf[nbr].any():
            return False
        slots = self._slots_of(site)
        if len(slots) != len(nbr) or not self._cup[slots].all():
            return False
        n, cid = self.n, self.core_id
        old = (self._ca[slots] + self._cb[slots] - site).tolist()
        new = nbr.tolist()
        indptr, dst, w, c, stop = self._graph
        s = int(cid[site])
        gone = [x for x in old if x not in new]
        came = [k for k, y in enumerate(new) if y not in old]
        for x, k in zip(gone, came):
            _csr_move(indptr, dst, w, c, s, int(cid[x]), int(cid[new[k]]), float(rtt[k]), float(bw[k]))
        for k, y in enumerate(new):  # a neighbour kept: its link's figures may change
            if y in old:
                _csr_weigh(indptr, dst, w, c, int(cid[y]), s, float(rtt[k]), float(bw[k]))
        row = slice(indptr[s], indptr[s + 1])
        dst[row], w[row], c[row] = cid[nbr], rtt, bw
        for k in slots.tolist():
            del self._cslot[int(self._ca[k]) * n + int(self._cb[k])]
        lo, hi = np.minimum(nbr, site), np.maximum(nbr, site)
        self._ca[slots], self._cb[slots], self._cr[slots], self._cw[slots] = lo, hi, rtt, bw
        for k, key in zip(slots.tolist(), (lo * n + hi).tolist()):
            self._cslot[key] = k
        self._edges_now = None
        self.core_version += 1
        relays = nbr[self.transit[nbr]]
        root = self._core_root[cid[relays.min()]] if relays.size else s
        if root != self._core_root[s]:  # it joins another part
            self._core_root[s] = root
            self.labelled += 1
            self.component, self._first = _labels(self.leaf, self.parent, self._link_up, cid, self._core_root)
        self._forget(site)
        for entry in self._cache.values():
            entry[2] = True
        return True

    def _slots_of(self, site: int) -> np.ndarray:
        """The live link slots of ``site``, a core site that relays nothing
        (O(log links): the slots of all such sites are kept sorted by site
        until the slots move)."""
        if self._own is None:
            live = np.flatnonzero(self._calive)
            ends = np.concatenate([self._ca[live], self._cb[live]])
            slot = np.concatenate([live, live])
            mine = ~self.transit[ends] & ~self.leaf[ends]
            order = np.argsort(ends[mine], kind="stable")
            self._own = (ends[mine][order], slot[mine][order])
        ends, slot = self._own
        return np.sort(slot[np.searchsorted(ends, site, "left"):np.searchsorted(ends, site, "right")])

    def _reattach(self, site: int, nbr: np.ndarray, rtt: np.ndarray, bw: np.ndarray) -> None:
        gone = {site}  # sites whose own columns go: how they hang on changed
        joined: list[int] = []  # sites entering the core
        if self.leaf[site]:
            self._drop_kid(site)
            self._set_leaf(site, -1, 0.0, 0.0, False)
            joined.append(site)
        else:
            own = np.flatnonzero(self._calive & ((self._ca == site) | (self._cb == site)))
            self._calive[own] = False
            for key in (self._ca[own] * self.n + self._cb[own]).tolist():
                del self._cslot[key]
            k = int(self._kid_head[site])
            while k >= 0:  # its leaves lose their one link: alone in the core
                nxt = int(self._kid_next[k])
                self._drop_kid(k)
                self._set_leaf(k, -1, 0.0, 0.0, False)
                joined.append(k)
                gone.add(k)
                k = nxt
        for x in nbr.tolist():
            if self.leaf[x]:  # a leaf gaining a link joins the core with its link
                p = int(self.parent[x])
                self._add_core_links([x], [p], [self._link_rtt[x]], [self._link_bw[x]], [self._link_up[x]])
                self._drop_kid(x)
                self._set_leaf(x, -1, 0.0, 0.0, False)
                joined.append(x)
                gone.add(x)
        left: list[int] = []  # sites leaving the core
        if len(nbr) == 1:
            x = int(nbr[0])
            self._set_leaf(site, x, float(rtt[0]), float(bw[0]), True)
            self._add_kid(site, x)
            if site in joined:
                joined.remove(site)
            else:
                left.append(site)
        elif len(nbr):
            self._add_core_links(np.full(len(nbr), site), nbr, rtt, bw, np.ones(len(nbr), bool))
        core = self.core
        if left:
            core = core[~np.isin(core, left)]
            self.core_id[left] = -1
        if joined:
            add = np.sort(np.asarray(joined, np.int64))
            core = np.insert(core, np.searchsorted(core, add), add)
        self.core = core
        self.core_id[core] = np.arange(len(core))
        self._build_graph()
        self._relabel(if_split=not joined and not left)  # no leaf moved, the core numbered as before
        for s in gone:
            self._forget(s)
        for entry in self._cache.values():
            entry[2] = True
        if self.leaf[site]:
            self._patch_leaf(site)

    # ------------------------------------------------------------ columns

    def _column(self, site: int) -> tuple[np.ndarray, np.ndarray]:
        """(rtt, bandwidth) from every site to ``site``, read-only, cached (LRU by bytes)."""
        site = int(site)
        hit = self._cache.get(site)
        if hit is not None:
            self._cache.move_to_end(site)
            if hit[2]:
                self._mend(site, hit)
            self._catch_up(site, hit)
            return hit[0], hit[1]
        rtt, bw = self._compute(site)
        hit = self._cache[site] = [_frozen(rtt), _frozen(bw), False, self._patched + len(self._patches)]
        self._cached += rtt.nbytes + bw.nbytes
        if self.leaf[site]:
            self._keep_few_leaves()
        while self._cached > self._cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cached -= old[0].nbytes + old[1].nbytes
        return hit[0], hit[1]

    def _keep_few_leaves(self) -> None:
        """At most ``LEAF_COLUMNS`` leaves' columns cached, the least lately read let go.
        A device's column is asked for when something is bound near that device,
        seldom twice: in a city hour each was made once, for a different car,
        and a cache of whole columns of a million sites (16 MB each) kept those
        of the last 32 cars for nothing."""
        sites = np.fromiter(self._cache.keys(), np.int64, len(self._cache))
        leaves = sites[self.leaf[sites]]
        for site in leaves[:max(leaves.size - LEAF_COLUMNS, 0)].tolist():
            old = self._cache.pop(site)
            self._cached -= old[0].nbytes + old[1].nbytes

    def _compute(self, site: int) -> tuple[np.ndarray, np.ndarray]:
        """One Dijkstra over the core from ``site`` (a leaf starts at its
        neighbour, one link away), then the leaves from their neighbours: the
        same sums in the same order as a Dijkstra over the whole graph."""
        rtt = np.full(self.n, np.inf)
        bw = np.zeros(self.n)
        seed = self._seed(site)
        if seed is not None:
            at, seed_rtt, seed_bw = seed
            core_rtt, core_bw, _ = _dijkstra(*self._graph, self.core_id[at], seed_rtt, seed_bw, np.inf, _NO_SKIP)
            rtt[self.core], bw[self.core] = core_rtt, core_bw
            _fill(rtt, bw, self.leaf, self.parent, self.leaf_rtt, self.leaf_bw)
        rtt[site], bw[site] = self.intra_rtt_ms[site], np.inf
        return rtt, bw

    def _mend(self, site: int, hit: list) -> None:
        """A stale cached column made current in place: a new Dijkstra over the
        core, then the core sites whose value moved and their leaves."""
        seed = self._seed(site)
        if seed is not None:
            at, seed_rtt, seed_bw = seed
            core_rtt, core_bw, _ = _dijkstra(*self._graph, self.core_id[at], seed_rtt, seed_bw, np.inf, _NO_SKIP)
            _repair(hit[0].base, hit[1].base, self.core, core_rtt, core_bw, site,
                    self._kid_head, self._kid_next, self.leaf_rtt, self.leaf_bw)
        hit[2] = False

    def rtt_at(self, site: int, sites: np.ndarray) -> np.ndarray:
        """float64[k]: ``rtt_to(site)[sites]``, without the column when it is not
        cached (``_at``)."""
        return self._at(int(site), np.asarray(sites, np.int64))[0]

    def _at(self, site: int, sites: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rtt, bandwidth) float64[k]: the column of ``site`` at ``sites``; read
        from it when it is cached and current, else from one Dijkstra over the
        core from ``site``, each of ``sites`` as the column would hold it (a
        leaf one link beyond its parent, ``site`` itself at its intra-site
        rtt): the same sums. A path between two devices costs a walk over the
        core (tens of sites), not a column over a million."""
        hit = self._cache.get(site)
        if hit is not None and not hit[2]:
            self._catch_up(site, hit)
            return hit[0][sites], hit[1][sites]
        rtt, bw = np.full(sites.size, np.inf), np.zeros(sites.size)
        seed = self._seed(site)
        if seed is not None:
            at, seed_rtt, seed_bw = seed
            cid = self.core_id[sites]
            core = cid >= 0
            skip = self._skip_but(np.concatenate([cid[core], self.core_id[self.parent[sites[~core]]]])) \
                if self._any_stop else _NO_SKIP
            core_rtt, core_bw, _ = _dijkstra(*self._graph, self.core_id[at], seed_rtt, seed_bw, np.inf, skip)
            rtt[core], bw[core] = core_rtt[cid[core]], core_bw[cid[core]]
            leaf = sites[~core]
            up = self.core_id[self.parent[leaf]]  # (a leaf's parent is a core site)
            rtt[~core] = core_rtt[up] + self.leaf_rtt[leaf]
            bw[~core] = np.minimum(core_bw[up], self.leaf_bw[leaf])
        own = sites == site
        rtt[own], bw[own] = self.intra_rtt_ms[site], np.inf
        return rtt, bw

    def _skip_but(self, wanted: np.ndarray, mask: bool = False) -> np.ndarray:
        """What a search over the core need not reach: the core sites that
        relay nothing and hold up no leaf (a multi-homed device), but those
        ``wanted`` (core ids, or with ``mask`` a bool per core site). Asked
        only when the core has such sites (``_any_stop``): a core of clouds and
        edges builds no mask for it."""
        dead = self._graph[4] & (self._kids[self.core] == 0)  # (kids as they are now: leaves move)
        skip = dead & ~wanted if mask else dead
        if not mask:
            skip[wanted] = False
        return skip

    def rtt_to(self, site: int) -> np.ndarray:
        """float64[S]: the rtt of the lowest-rtt path from every site to ``site``."""
        return self._column(site)[0]

    def bandwidth_to(self, site: int) -> np.ndarray:
        """float64[S]: the bottleneck bandwidth of that path from every site to ``site``."""
        return self._column(site)[1]

    def reachable_to(self, site: int) -> np.ndarray:
        """bool[S]: which sites have a path to ``site``: the sites of its label
        where labels are exact (``labels_exact``), else those its column reaches."""
        if self.labels_exact():
            return self.component == self.component[site]
        return np.isfinite(self.rtt_to(site))

    def labels_exact(self) -> bool:
        """Whether ``component`` says exactly which sites have a path between
        them. Reachability through sites that relay nothing is not a
        partition: such a site linked directly to another such site reaches
        it (and neither reaches the other's other neighbours), and one linked
        to relaying sites of two parts reaches both. Where the core has such
        a site, the labels are not exact and reachability is read from a
        column (``reachable_to``). O(core links) when the core has changed
        and has sites that relay nothing, else O(1)."""
        key = (self.core_version, self.labelled)
        if self._exact_key == key:
            return self._exact
        exact = True
        if self._any_stop:
            ea, eb = self._core_edges()[:2]
            stop = self._graph[4]
            sa, sb = stop[ea], stop[eb]
            if (sa & sb).any():
                exact = False
            else:
                one = sa ^ sb
                xs = np.where(sa[one], ea[one], eb[one])  # the end that relays nothing
                parts = self._core_root[ea[one] + eb[one] - xs]  # the other end's part
                lo = np.full(len(self.core), np.iinfo(np.int64).max, np.int64)
                hi = np.full(len(self.core), -1, np.int64)
                np.minimum.at(lo, xs, parts)
                np.maximum.at(hi, xs, parts)
                exact = not bool((lo[xs] != hi[xs]).any())
        self._exact_key, self._exact = key, exact
        return exact

    _exact_key: tuple = ()
    _exact = True

    def within(self, site: int, max_rtt_ms: float, keep: np.ndarray | None = None,
               keep_self: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(int64[k] sites ascending, float64[k] their rtt): every site whose
        path rtt to ``site`` is at most ``max_rtt_ms``, ``site`` itself at its
        intra-site rtt when that is within; exactly
        ``np.flatnonzero(rtt_to(site) <= max_rtt_ms)`` and those values, from a
        Dijkstra over the core stopped past the bound and the leaves of the
        core sites it reached (no column: O(core reached + output)). With
        ``keep`` (bool[S]), only the sites it marks (the output stays small
        when most sites nearby could never be used); ``keep_self``, when
        given, says instead of ``keep`` whether ``site`` itself counts."""
        site = int(site)
        limit = float(max_rtt_ms)
        intra = float(self.intra_rtt_ms[site])
        if limit != limit:
            return np.zeros(0, np.int64), np.zeros(0)
        self_ok = True if keep is None else bool(keep[site]) if keep_self is None else keep_self
        if limit == np.inf:  # every site, reachable or not
            sites, rtt = np.arange(self.n, dtype=np.int64), self.rtt_to(site).copy()
            if keep is None:
                return sites, rtt
            mine = keep.copy()
            mine[site] = self_ok
            return sites[mine], rtt[mine]
        seed = self._seed(site)
        if seed is None:  # a leaf whose link is down reaches only itself
            inside = intra <= limit and self_ok
            return np.full(int(inside), site, np.int64), np.full(int(inside), intra)
        at, seed_rtt, seed_bw = seed
        skip = self._skip_but(keep[self.core], mask=True) if keep is not None and self._any_stop else _NO_SKIP
        dist, _, settled = _dijkstra(*self._graph, self.core_id[at], seed_rtt, seed_bw, limit, skip)
        leaves = keep is None or self._keeps_leaves(keep)
        few = self._kept_leaves(keep) if keep is not None and leaves else None
        sites, rtt = _neighbourhood(self.core, settled, dist, site, intra, limit,
                                    self._kid_head, self._kid_next, self._kids, self.leaf_rtt,
                                    _NO_KEEP if keep is None else keep, keep is not None, self_ok,
                                    leaves and few is None)
        if few is None or not few.size:
            return sites, rtt
        # the few leaves ``keep`` marks, read from their parents (not every leaf of every core site
        # reached: a cloud behind an edge is a leaf beside a million devices), the same sums
        few = few[few != site]
        up = self.core_id[self.parent[few]]
        reached = np.zeros(len(self.core), bool)
        reached[settled] = True
        ok = reached[up]
        few, v = few[ok], dist[up[ok]] + self.leaf_rtt[few[ok]]
        few, v = few[v <= limit], v[v <= limit]
        if not few.size:
            return sites, rtt
        sites, rtt = np.concatenate([sites, few]), np.concatenate([rtt, v])
        order = np.argsort(sites, kind="stable")
        return sites[order], rtt[order]

    def _kept_leaves(self, keep: np.ndarray) -> np.ndarray | None:
        """int64: the leaves ``keep`` marks, when it marks some and they are
        few (at most ``FEW_LEAVES``) and ``keep`` is read-only; None
        otherwise. Kept with ``_keeps_leaves``' answer."""
        if keep.flags.writeable or not self._keeps_leaves(keep):
            return None
        hit = self._keeps[id(keep)]
        if len(hit) < 4:
            marked = np.flatnonzero(keep & self.leaf)
            hit = self._keeps[id(keep)] = (*hit, marked if marked.size <= FEW_LEAVES else None)
        return hit[3]

    def _keeps_leaves(self, keep: np.ndarray) -> bool:
        """Whether ``keep`` marks any leaf (when it marks none, a neighbourhood
        need not walk the leaves of the core sites it reaches: a million
        devices a big request could never use); kept per read-only mask until
        the set of leaves changes."""
        if keep.flags.writeable:  # it may change in place: not kept
            return bool(keep[self.leaf].any())
        hit = self._keeps.get(id(keep))
        if hit is None or hit[0] is not keep or hit[1] != self._leaf_set:
            if len(self._keeps) >= 64:
                self._keeps.clear()
            hit = self._keeps[id(keep)] = (keep, self._leaf_set, bool(keep[self.leaf].any()))
        return hit[2]

    def hubs(self) -> np.ndarray:
        """int64: the core sites with leaves hung on them, ascending."""
        return self.core[self._kid_head[self.core] >= 0]

    def core_distance(self, sites: np.ndarray) -> np.ndarray:
        """float64[core]: for every core site, by its ``core_id``, the rtt over
        the core links up now to the nearest core site of ``sites``, a leaf
        of them counting as its parent (0 there; inf where none is
        reachable). A leaf's figure is its parent's (read it at
        ``core_id[parent]``): a path from a leaf to any of ``sites`` other
        than itself is at least its link's rtt plus this. One Dijkstra from a
        point joined to all of them at rtt 0; a float a core site, not one a
        site (a million devices' 8 bytes each, for every cached column)."""
        sites = np.asarray(sites, np.int64)
        anchors = np.unique(np.where(self.leaf[sites], self.parent[sites], sites))
        anchors = anchors[anchors >= 0]
        m = len(self.core)
        if not anchors.size:
            return np.full(m, np.inf)
        ea, eb, er, ew = self._core_edges()
        a = np.concatenate([ea, np.full(anchors.size, m, np.int64)])
        b = np.concatenate([eb, self.core_id[anchors]])
        rtt = np.concatenate([er, np.zeros(anchors.size)])
        bw = np.concatenate([ew, np.full(anchors.size, np.inf)])
        # (every site relaying: a lower bound whatever relays nothing)
        dist, _, _ = _dijkstra(*_csr(m + 1, a, b, rtt, bw), np.zeros(m + 1, np.bool_), m, 0.0, np.inf, np.inf,
                               _NO_SKIP)
        return dist[:m].copy()

    def alone(self, site, max_rtt_ms):
        """Whether ``within(site, max_rtt_ms)`` is exactly ``site`` itself (a
        leaf whose link's rtt, or whose link being down, puts everything else
        beyond the bound, and whose intra-site rtt is within it); elementwise
        for arrays."""
        out = self.leaf[site] & (self.leaf_rtt[site] > max_rtt_ms) & (self.intra_rtt_ms[site] <= max_rtt_ms)
        return bool(out) if np.ndim(out) == 0 else out

    def alone_anywhere(self, site: np.ndarray, max_rtt_ms: np.ndarray) -> np.ndarray:
        """``alone`` for sites of the core too (a device on two edges): every
        link of the site, up or down, and every leaf's link to it, longer
        than the bound; elementwise."""
        nearest = np.full(self.n, np.inf)
        live = self._calive
        np.minimum.at(nearest, self._ca[live], self._cr[live])
        np.minimum.at(nearest, self._cb[live], self._cr[live])
        kids = np.flatnonzero(self.leaf)
        np.minimum.at(nearest, self.parent[kids], self._link_rtt[kids])
        core = ~self.leaf[site] & (nearest[site] > max_rtt_ms) & (self.intra_rtt_ms[site] <= max_rtt_ms)
        return self.alone(site, max_rtt_ms) | core

    # ------------------------------------------------------------ pairs

    def rtt(self, a, b):
        """The rtt between sites ``a`` and ``b``: scalars, or ``a`` an array with one ``b``."""
        return self._pair(0, a, b)

    def bandwidth(self, a, b):
        """The bottleneck bandwidth between ``a`` and ``b``, as ``rtt``."""
        return self._pair(1, a, b)

    def reachable(self, a, b):
        """Whether ``a`` and ``b`` are connected, elementwise."""
        out = self.component[a] == self.component[b]
        return bool(out) if np.ndim(out) == 0 else out

    PAIRS_KEPT = 1 << 12  # pairs' values kept between changes (a task's path to its device, asked at each placement)

    def _one_pair(self, which: int, a: int, b: int) -> float:
        """``_pair`` of two sites, kept until a path between them may change:
        the same value ``_at`` gives, without a walk over the core each time
        the same pair is asked (a device's short tasks, each checked against
        its bound where it lands). The core changed: all go; a leaf handed
        over or its link up or down (``_patch_leaf``): the pairs with it."""
        pairs = self._pairs
        stamp = (self.core_version, self.n)
        noted = self._patched + len(self._patches)
        if self._pairs_stamp != stamp or len(pairs) >= self.PAIRS_KEPT or self._pairs_read < self._patched:
            pairs = self._pairs = {}
            self._pairs_of = {}
            self._pairs_stamp, self._pairs_read = stamp, noted
        elif self._pairs_read < noted:
            for leaf in set(self._patches[self._pairs_read - self._patched:]):
                for key in self._pairs_of.pop(leaf, ()):
                    pairs.pop(key, None)
            self._pairs_read = noted
        key = (which, a, b)
        got = pairs.get(key)
        if got is None:
            got = pairs[key] = float(self._at(b, np.array([a], np.int64))[which][0])
            for site in (a, b) if a != b else (a,):
                if self.leaf[site]:
                    self._pairs_of.setdefault(site, []).append(key)
        return got

    _pairs: dict = {}
    _pairs_of: dict = {}  # leaf site -> its pairs' keys
    _pairs_stamp: tuple = ()
    _pairs_read = 0  # the leaf patches (``_patches``) seen so far

    def _pair(self, which: int, a, b):
        """Values for pairs (0: rtt, 1: bandwidth) from the columns of the
        distinct ``b``s, each read where it is cached, else walked (``_at``)."""
        if np.ndim(b) == 0:
            if np.ndim(a) == 0:
                return self._one_pair(which, int(a), int(b))
            out = self._at(int(b), np.atleast_1d(np.asarray(a, np.int64)))[which]
            return out.reshape(np.shape(a))
        a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b))
        out = np.empty(a.shape)
        for s in np.unique(b):  # one walk per distinct destination, not per pair
            sel = b == s
            out[sel] = self._at(int(s), a[sel])[which]
        return out
