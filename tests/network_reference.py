"""The all-pairs Floyd–Warshall the network model used to store: the reference
the on-demand paths are checked against (dense S×S, so for small worlds only)."""

from __future__ import annotations

import numpy as np


def all_pairs(sites, links, down=frozenset(), wider=True):
    """(rtt[S, S], bandwidth[S, S], component[S]) by vectorized Floyd–Warshall
    over the links that are up: lowest rtt, the wider bottleneck on a tie
    (with ``wider=False`` the narrower: only to tell whether ties occurred)."""
    sign = 1.0 if wider else -1.0
    sites = list(sites)
    s = len(sites)
    rtt = np.full((s, s), np.inf)
    bw = np.zeros((s, s))
    np.fill_diagonal(rtt, 0.0)
    np.fill_diagonal(bw, np.inf)
    for ln in links:
        if frozenset((ln.a, ln.b)) in down:
            continue
        for a, b in ((ln.a, ln.b), (ln.b, ln.a)):
            # parallel links: keep the lower rtt, and the wider on a tie
            if ln.rtt_ms < rtt[a, b] or (ln.rtt_ms == rtt[a, b] and sign * ln.bandwidth_mbps > sign * bw[a, b]):
                rtt[a, b], bw[a, b] = ln.rtt_ms, ln.bandwidth_mbps
    for k in range(s):
        via_rtt = rtt[:, k, None] + rtt[None, k, :]
        via_bw = np.minimum(bw[:, k, None], bw[None, k, :])
        better = (via_rtt < rtt) | ((via_rtt == rtt) & (sign * via_bw > sign * bw) & np.isfinite(via_rtt))
        rtt = np.where(better, via_rtt, rtt)
        bw = np.where(better, via_bw, bw)
    intra = np.array([site.intra_site_rtt_ms for site in sites], dtype=float)
    rtt[np.arange(s), np.arange(s)] = intra
    component = np.full(s, -1, dtype=np.int32)
    label = 0
    for i in range(s):
        if component[i] < 0:
            component[np.isfinite(rtt[i])] = label
            label += 1
    return rtt, bw, component


def matrices(net):
    """The network's rtt and bandwidth as S×S matrices, [a, b] from a to b, column by column."""
    s = len(net.component)
    rtt = np.stack([net.rtt_to(b) for b in range(s)], axis=1) if s else np.zeros((0, 0))
    bw = np.stack([net.bandwidth_to(b) for b in range(s)], axis=1) if s else np.zeros((0, 0))
    return rtt, bw
