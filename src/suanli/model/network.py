"""Paths between sites: lowest-rtt routes and their bottleneck bandwidth.

``Network.build`` runs a vectorized Floyd–Warshall over the site graph of the
links that are up. ``rtt_ms[a, b]`` is the summed rtt of the lowest-rtt path
(inf when unreachable; a site's own intra-site rtt on the diagonal);
``bandwidth_mbps[a, b]`` is the narrowest link on that path (inf within a
site: the node fabric decides). ``component[s]`` labels mutually reachable sites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

if TYPE_CHECKING:
    from suanli.model.fleet import Link, Site


@dataclass(frozen=True, slots=True)
class Network:
    rtt_ms: np.ndarray  # [S, S] float64
    bandwidth_mbps: np.ndarray  # [S, S] float64
    component: np.ndarray  # [S] int32

    @property
    def reachable(self) -> np.ndarray:
        return np.isfinite(self.rtt_ms)

    @staticmethod
    def build(sites: "Iterable[Site]", links: "Iterable[Link]", down: frozenset = frozenset()) -> "Network":
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
                if ln.rtt_ms < rtt[a, b] or (ln.rtt_ms == rtt[a, b] and ln.bandwidth_mbps > bw[a, b]):
                    rtt[a, b], bw[a, b] = ln.rtt_ms, ln.bandwidth_mbps
        for k in range(s):  # loop over sites (not candidates); each step is vectorized
            via_rtt = rtt[:, k, None] + rtt[None, k, :]
            via_bw = np.minimum(bw[:, k, None], bw[None, k, :])
            better = (via_rtt < rtt) | ((via_rtt == rtt) & (via_bw > bw) & np.isfinite(via_rtt))
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
        return Network(rtt, bw, component)
