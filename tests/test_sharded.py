"""A pass split between shards and a global part (``scheduling.sharded``)
places what one process places, byte for byte.

Random worlds of the batch suite (a population of cars, services bound to
each car, often another tenant's on the same cars, often a wider bound that
reaches past the car, devices of several rows; and the property suite's
applications, tenants with weights, quotas and priority ceilings, explicit
VCs) are scheduled in one process and split over one to three shards; the
NDJSON must be the same bytes. Not vacuous: shards decided units in many
worlds, the global part decided units of several tenants in those worlds
too, and a shard's answers that do not stand (a unit not placed) send the
world to one process.

The Ray actors that carry the parts are checked by ``test_sharded_ray.py``.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, note
from hypothesis import strategies as st

from test_batch import home_worlds
from test_properties import SETTINGS, doc, load
from suanli.output import outcome_text_lines
from suanli.scheduling import sharded
from suanli.scheduling.static import schedule

TALLY: Counter = Counter()


def text(outcome) -> str:
    return "".join(outcome_text_lines(outcome))


@st.composite
def cases(draw):
    docs, seed = draw(home_worlds())
    fleet = docs[0]["spec"]
    keep_off = draw(st.integers(0, 2))  # 0: other work may go to the cars; 1: private cars; 2: work kept off them
    if keep_off == 1:
        fleet["populations"][0]["private"] = True
    if draw(st.integers(0, 2)):  # most often one network (in pieces, a default VC's reach ties its units)
        linked = {frozenset(link["between"]) for link in fleet.get("links", [])}
        names = [site["name"] for site in fleet["sites"]]
        for a, b in zip(names, names[1:]):
            if frozenset((a, b)) not in linked:
                fleet.setdefault("links", []).append({"between": [a, b], "rttMs": 5, "bandwidth": "10Gbps"})
    home = next(d for d in docs if d["metadata"]["name"] == "home")
    if draw(st.integers(0, 2)):  # most often a car of one node, whose services stay on it
        for group in fleet["populations"][0]["nodeGroups"]:
            group["count"] = 1
        for c in home["spec"]["components"]:
            c["near"]["maxRttMs"] = 0.2
    if draw(st.integers(0, 2)):  # most often without a quota (a quota ties its tenant's units together)
        for d in docs:
            if d["kind"] == "Tenant" and d["metadata"]["name"] == home["metadata"]["tenant"]:
                d["spec"].pop("quota", None)
    tenants = [d["metadata"]["name"] for d in docs if d["kind"] == "Tenant"]
    others = [t for t in tenants if t != home["metadata"]["tenant"]]
    if others and draw(st.booleans()):  # another tenant's work off the cars: its turns interleave with the cars'
        jobs = {"name": "j", "lifetime": "job", "duration": "10m", "replicas": draw(st.integers(1, 6)),
                "resources": {"cpu": draw(st.sampled_from(["250m", "500m", 1])), "memory": "256Mi"},
                "sites": {"tier": ["cloud", "edge"]}}
        docs.append(doc("Application", "jobs", {"components": [jobs]}, tenant=draw(st.sampled_from(others))))
    for d in docs:
        if d["kind"] != "Application":
            continue
        for c in d["spec"]["components"]:
            if keep_off == 2 and "{site}" not in str(c.get("near")) and "sites" not in c and draw(st.booleans()):
                c["sites"] = {"tier": ["cloud", "edge"]}
        if draw(st.integers(0, 2)) == 0:  # priorities out of the order written: a queue not in its units' order
            for c in d["spec"]["components"]:
                c["priority"] = draw(st.sampled_from([0, 10, 100]))
    return docs, seed, draw(st.integers(1, 3))


@SETTINGS
@given(cases())
def _same_outcome(case):
    docs, seed, shards = case
    world = load(docs)
    one = text(schedule(world, seed))
    world = load(docs)
    parts = [sharded.decide_shard(world, k, shards) for k in range(shards)]
    done = sharded.global_pass(world, shards, seed)
    decided = len(done.outcome.state.placements) + len(done.outcome.unscheduled)
    outcome, fallback = sharded.finish(world, done, parts, seed)
    assert text(outcome) == one
    free = sum(p.units for p in parts)
    tenants = {p.tenant for p in done.outcome.state.placements.values()} if not fallback else set()
    TALLY["cases"] += 1
    TALLY["split"] += bool(free) and not fallback
    TALLY["order-free units"] += free if not fallback else 0
    TALLY["both"] += bool(free) and decided > 0 and not fallback
    TALLY["several tenants"] += bool(free) and len(tenants) > 1 and not fallback
    TALLY["fallback"] += bool(fallback)
    note(f"shards {shards}, order-free {free}, global {decided}, fallback {fallback!r}")


def test_a_split_pass_places_what_one_process_places():
    """Rounds of random worlds (at most four) until the worlds so far have
    shown every kind of split."""
    TALLY.clear()

    def shown() -> bool:
        return (TALLY["split"] >= TALLY["cases"] // 10 and TALLY["both"] > 0 and TALLY["several tenants"] > 0
                and TALLY["order-free units"] > TALLY["cases"])

    for _ in range(4):
        _same_outcome()
        if shown():
            break
    assert shown(), TALLY
