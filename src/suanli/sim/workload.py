"""Work over time from a Scenario: arrivals, seeded generators and traces.

A generator submits copies of its template at Poisson times (exponential gaps
with mean ``1/rate``) from ``start`` until ``until``; copy N is the
application ``NAME-N`` (tasks ``NAME-N/COMPONENT/I``) and its jobs' duration
or work is drawn from ``jitter``. Each generator has its own random stream
derived from the scenario seed, so adding one does not change the others.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from suanli.model.quantities import DURATION, MEMBERS, Distribution
from suanli.model.fleet import Fleet
from suanli.model.work import (COMPONENT_FIELDS, AcceleratorRequest, Application, Component, Near, Resources,
                               default_vc_name)
from suanli.spec.build import build_application
from suanli.spec.schema import GeneratorSpec, TraceSpec


@dataclass(frozen=True, slots=True)
class Arrival:
    """One application arriving at ``at`` (leaving at ``leave_at`` when a trace
    says so), or a trace record that cannot become work (``app`` None), which is
    still counted: ``skipped`` names it and ``reason`` says why."""

    at: float
    app: Application | None
    leave_at: float | None = None
    skipped: str | None = None
    reason: str | None = None
    tenant: str | None = None


def draw(dist: Distribution, rng: np.random.Generator) -> float:
    """One value of ``dist``, within the duration limit (a lognormal's tail
    would otherwise give a job that never ends)."""
    return min(_draw(dist, rng), DURATION.most)


def _draw(dist: Distribution, rng: np.random.Generator) -> float:
    if dist.name == "lognormal":
        median, sigma = dist.params
        return float(median * math.exp(sigma * rng.standard_normal()))
    if dist.name == "exponential":
        return float(rng.exponential(dist.params[0]))
    low, high = dist.params
    return float(rng.uniform(low, high))


def generated(spec: GeneratorSpec, index: int, seed: int, until_s: float) -> Iterator[Arrival]:
    """(arrival time, application) of one generator, in time order."""
    rng = np.random.default_rng([seed, 1 + index])
    end = until_s if spec.until is None else min(spec.until, until_s)
    t = spec.start
    n = 0
    made = None  # the template's application, renamed for each arrival
    gaps: list[float] = []
    block = 1 if spec.jitter else 16
    while True:
        if not gaps:  # gaps drawn a block at a time: the same values as one at a time (the rng is this one's)
            gaps = rng.exponential(1.0 / spec.rate, size=block).tolist()[::-1]
            if not spec.jitter:  # (with jitter, its draws come between: one gap at a time)
                block = min(block * 2, 4096)
        t += gaps.pop()
        if t > end:
            return
        if made is None:
            made = _Renamed(build_application(f"{spec.name}-{n}", spec.tenant, spec.template))
        app = made(f"{spec.name}-{n}")
        yield Arrival(t, _jittered(app, spec, rng))
        n += 1


assert COMPONENT_FIELDS[0] == "app"  # (a copy is made with its application's name first)


class _Renamed:
    """Copies of an application under other names: what ``build_application``
    makes of the same document under each name (only the names differ), made
    without reading the document again (a generator's arrivals by the
    hundred thousand). The copies share the first one's parts (resources,
    bounds, selectors), which are frozen."""

    __slots__ = ("app", "rest")

    def __init__(self, app: Application) -> None:
        self.app = app
        self.rest = [tuple(getattr(c, f) for f in COMPONENT_FIELDS[1:]) for c in app.components]

    def __call__(self, name: str) -> Application:
        a = self.app
        if name == a.name:
            return a
        return Application(name, a.tenant, a.vc, a.priority, a.preemptible,
                           tuple(Component(name, *rest) for rest in self.rest), a.template)


def _jittered(app: Application, spec: GeneratorSpec, rng: np.random.Generator) -> Application:
    if not spec.jitter:
        return app
    drawn = {key: draw(dist, rng) for key, dist in sorted(spec.jitter.items())}
    comps = []
    for c in app.components:
        if "duration" in drawn and c.duration_s is not None:
            c = replace(c, duration_s=drawn["duration"])
        if "work" in drawn and c.work_s is not None:
            c = replace(c, work_s=drawn["work"])
        comps.append(c)
    return replace(app, components=tuple(comps))


def _single(name: str, tenant: str, comp: str, res: Resources, lifetime: str, size: int = 1,
            duration_s: float | None = None, near: Near | None = None, time_limit_s: float | None = None) -> Application:
    c = Component(app=name, name=comp, lifetime=lifetime, size=size, resources=res, priority=0,
                  preemptible=True, gang=size > 1, duration_s=duration_s, near=near, time_limit_s=time_limit_s)
    return Application(name, tenant, default_vc_name(tenant), 0, True, (c,))


def _on_site(fleet: Fleet, name: str) -> Near:
    """A bound that only the site itself meets: its own intra-site rtt."""
    site = fleet.sites[fleet.site_index[name]]
    return Near(site.name, site.intra_site_rtt_ms)


def openb_arrivals(tr: TraceSpec, base_dir: str, fleet: Fleet) -> Iterator[Arrival]:
    """Alibaba GPU-2023 pods: each arrives at ``creation_time`` as a one-task
    service on the trace's site and leaves at ``deletion_time``. A pod asking a
    share of one GPU (``gpu_milli`` < 1000) gets that share of one device; a
    pod asking whole GPUs gets ``num_gpu`` whole devices of an allowed model."""
    from suanli.sim.traces import load_openb_pods

    pods = load_openb_pods(os.path.join(base_dir, tr.pods))
    near = _on_site(fleet, tr.site or "openb") if (tr.site or "openb") in fleet.site_index else None
    shapes: dict[tuple, Resources] = {}  # pods repeat a few shapes; Resources are frozen, so they share one
    for pod in pods.arrivals():
        key = (pod.cpu_milli, pod.mem_mib, pod.num_gpu, pod.gpu_milli, pod.models)
        res = shapes.get(key)
        if res is None:
            res = shapes[key] = _openb_resources(*key)
        yield Arrival(pod.at_s, _single(pod.name, tr.tenant, "pod", res, "service", near=near), pod.leave_at_s)


def _openb_resources(cpu_milli: int, mem_mib: int, num_gpu: int, gpu_milli: int,
                     models: tuple[str, ...]) -> Resources:
    """A share of one GPU for one GPU asked in part; otherwise ``num_gpu`` whole GPUs."""
    if not num_gpu:
        return Resources(cpu_milli, mem_mib, ())
    milli = gpu_milli if num_gpu == 1 and gpu_milli < 1000 else 1000 * num_gpu
    return Resources(cpu_milli, mem_mib, (AcceleratorRequest("gpu", models or None, milli),))


def swf_arrivals(tr: TraceSpec, base_dir: str, fleet: Fleet) -> Iterator[Arrival]:
    """Standard Workload Format jobs: a gang of ``processors`` one-cpu tasks on
    the trace's site, running the recorded run time, with the requested time
    as its time limit (what backfill plans with); a zero run time finishes
    at once. Jobs with no processors are counted as failed."""
    from suanli.sim.traces import iter_swf

    near = _on_site(fleet, tr.site)
    res = Resources(1000, 0)
    for job in iter_swf(os.path.join(base_dir, tr.path)):
        name = f"swf-{job.job_id}"
        if not job.usable:
            yield Arrival(job.submit_s, None, skipped=f"{name}/rank/0", reason="the trace gives no processor count",
                          tenant=tr.tenant)
            continue
        if job.processors > MEMBERS.most:
            yield Arrival(job.submit_s, None, skipped=f"{name}/rank/0", tenant=tr.tenant,
                          reason=f"{job.processors} processors; a gang has at most {MEMBERS.shown} members")
            continue
        yield Arrival(job.submit_s, _single(name, tr.tenant, "rank", res, "job", job.processors,
                                            duration_s=float(job.run_s), near=near,
                                            time_limit_s=job.requested_time_s))
