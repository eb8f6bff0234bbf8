"""What ``/metrics`` tells an operator's tools, through ``prometheus_client``.

The API's process measures its requests (count and latency per route) and
its store commits. The controller's process measures its turns (an instant
handled and written), its commits, and how long each task waited from
submission to its first placement, per tenant; it keeps those as bucket
counts (``Buckets``, plain data that crosses the pipe) and hands them over
with its stats, and the API's collector shows them as Prometheus histograms.
Gauges (tasks by status, nodes by state, applications, streams) are read
when scraped.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

# seconds: from a fraction of a millisecond (a request, a commit) to minutes (a wait to be placed)
BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
          300.0, 1800.0)


class Buckets:
    """A histogram as plain data: counts per bound (and above the last), the sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS) + 1)
        self.total = 0.0

    def observe(self, seconds: float, times: int = 1) -> None:
        """``times`` observations of ``seconds`` each."""
        self.counts[bisect.bisect_left(BOUNDS, seconds)] += times
        self.total += seconds * times

    def snapshot(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.total}


def _family(name: str, doc: str, labels: tuple[str, ...] = ()) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=list(labels))


def _add(family: HistogramMetricFamily, snap: dict[str, Any], labels: tuple[str, ...] = ()) -> None:
    cumulative, buckets = 0, []
    for bound, n in zip((*BOUNDS, float("inf")), snap["counts"]):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    family.add_metric(list(labels), buckets, snap["sum"])


class Observed:
    """The API process's registry: its own request and commit histograms, and
    a collector for what is read when scraped (``gauges()``) and what the
    controller measured (``controller()``: its stats, or {} when away)."""

    def __init__(self, gauges: Callable[[], Iterable[Any]], controller: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("suanli_http_requests", "HTTP requests answered.", ("method", "route", "status"),
                                registry=self.registry)
        self.latency = Histogram("suanli_http_request_seconds", "Time to answer a request, per route.",
                                 ("method", "route"), buckets=BOUNDS, registry=self.registry)
        self.commits = Histogram("suanli_store_commit_seconds", "Store commits of the API's process.",
                                 buckets=BOUNDS, registry=self.registry)
        self._gauges, self._controller = gauges, controller
        self.registry.register(self)

    def collect(self):
        yield from self._gauges()
        stats = self._controller()
        histograms = stats.get("histograms") or {}
        if "turn_seconds" in histograms:
            f = _family("suanli_controller_turn_seconds", "A turn of the scheduler: the instants due, handled "
                        "and written.")
            _add(f, histograms["turn_seconds"])
            yield f
        if "decision_seconds" in histograms:
            f = _family("suanli_scheduling_decision_seconds", "Time the scheduler took to decide a unit (a task, "
                        "or a gang whole): each pass's time shared among the units it tried.")
            _add(f, histograms["decision_seconds"])
            yield f
        if "commit_seconds" in histograms:
            f = _family("suanli_controller_commit_seconds", "Store commits of the controller's process.")
            _add(f, histograms["commit_seconds"])
            yield f
        waits = histograms.get("placement_seconds") or {}
        f = _family("suanli_submission_to_placement_seconds", "From a task's submission to its first "
                    "placement, per tenant.", ("tenant",))
        for tenant, snap in sorted(waits.items()):
            _add(f, snap, (tenant,))
        yield f
        for name, doc, key in (("suanli_scheduler_instants", "Instants the scheduler handled and recorded.",
                                "instants"),
                               ("suanli_scheduler_errors", "Commands or turns of the scheduler that failed.", "errors"),
                               ("suanli_events", "Events recorded.", "published")):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], stats.get(key, 0))
            yield c


def gauge(name: str, doc: str, values: dict[tuple[str, ...], float] | float, labels: tuple[str, ...] = ()):
    g = GaugeMetricFamily(name, doc, labels=list(labels))
    if isinstance(values, dict):
        for key, v in values.items():
            g.add_metric(list(key), v)
    else:
        g.add_metric([], values)
    return g
