"""Work over time from a Scenario: arrivals and seeded generators.

A generator submits copies of its template at Poisson times (exponential gaps
with mean ``1/rate``) from ``start`` until ``until``; copy N is the
application ``NAME-N`` (tasks ``NAME-N/COMPONENT/I``) and its jobs' duration
or work is drawn from ``jitter``. Each generator has its own random stream
derived from the scenario seed, so adding one does not change the others.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterator

import numpy as np

from suanli.model.quantities import Distribution
from suanli.model.work import Application
from suanli.spec.build import build_application
from suanli.spec.schema import GeneratorSpec


def draw(dist: Distribution, rng: np.random.Generator) -> float:
    if dist.name == "lognormal":
        median, sigma = dist.params
        return float(median * math.exp(sigma * rng.standard_normal()))
    if dist.name == "exponential":
        return float(rng.exponential(dist.params[0]))
    low, high = dist.params
    return float(rng.uniform(low, high))


def generated(spec: GeneratorSpec, index: int, seed: int, until_s: float) -> Iterator[tuple[float, Application]]:
    """(arrival time, application) of one generator, in time order."""
    rng = np.random.default_rng([seed, 1 + index])
    end = until_s if spec.until is None else min(spec.until, until_s)
    t = spec.start
    n = 0
    while True:
        t += float(rng.exponential(1.0 / spec.rate))
        if t > end:
            return
        app = build_application(f"{spec.name}-{n}", spec.tenant, spec.template)
        yield t, _jittered(app, spec, rng)
        n += 1


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
