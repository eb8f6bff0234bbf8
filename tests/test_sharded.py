"""A pass split between shards and a global part (``scheduling.sharded``)
places what one process places, byte for byte.

Random worlds of the batch suite (a population of cars, services bound to
each car, often another tenant's on the same cars, often a wider bound that
reaches past the car, devices of several rows; and the property suite's
applications, tenants with weights, quotas and priority ceilings, explicit
VCs) are scheduled in one process and split over one to three shards, each
shard given its slice of the world as another process gets it (pickled);
the NDJSON must be the same bytes, explanations included. Not vacuous:
shards decided units in many worlds, of several tenants' passes, on
devices that hang from two edges too, from applications made per car and
written out; the global part decided units too (some on their own
contested device without a compiled request); and a shard's answers that
do not stand (a unit not placed) send the world to one process.

The Ray actors that carry the parts are checked by ``test_sharded_ray.py``.
"""

from __future__ import annotations

import pickle
from collections import Counter

from hypothesis import given, note
from hypothesis import strategies as st

from test_batch import home_worlds
from test_properties import SETTINGS, doc, load, rounds_until
from suanli.output import outcome_text_lines
from suanli.scheduling import sharded
from suanli.scheduling.static import schedule
from suanli.spec.build import load_world

TALLY: Counter = Counter()


def text(outcome) -> str:
    return "".join(outcome_text_lines(outcome))


def sent(piece):
    """``piece`` as another process gets it (pickled and read back)."""
    return pickle.loads(pickle.dumps(piece, protocol=5))


def split(world, shards: int, seed: int):
    """``world`` scheduled split, each shard sent its slice and the fleet as
    another process gets them: (outcome, the fallback's reason or "", the
    shards' parts, their slices, the global part's pass, how many tasks it
    decided itself)."""
    prepared = sharded.prepare_global(world, shards, seed)
    fleet = sent(world.fleet)
    pieces = [sent(sharded.slice_for(world, prepared.split, k)) for k in range(shards)]
    parts = [sharded.decide_slice(piece, fleet, k, shards) for k, piece in enumerate(pieces)]
    done = sharded.global_pass(world, shards, seed, None, prepared)
    decided = len(done.outcome.state.placements) + len(done.outcome.unscheduled)
    outcome, fallback = sharded.finish(world, done, parts, seed)
    return outcome, fallback, parts, pieces, done, decided


def cars_world(cloud: str, car: str, cars: int, rtt: float) -> str:
    """A cloud node ``cloud`` and ``cars`` private cars of node ``car``
    linked at ``rtt`` ms; tenants t and u."""
    return f"""
apiVersion: suanli/v1
kind: Fleet
metadata: {{name: fleet}}
spec:
  sites:
    - name: cloud-0
      tier: cloud
      nodeGroups: [{{name: g, count: 1, arch: x86_64, {cloud}}}]
  populations:
    - name: cars
      count: {cars}
      sites: car-#
      private: true
      nodeGroups: [{{name: soc, count: 1, {car}}}]
      attach: {{to: {{}}, rttMs: {rtt}, bandwidth: 1Gbps}}
---
{{apiVersion: suanli/v1, kind: Tenant, metadata: {{name: t}}, spec: {{}}}}
---
{{apiVersion: suanli/v1, kind: Tenant, metadata: {{name: u}}, spec: {{}}}}
"""


@st.composite
def cases(draw):
    """A world of ``home_worlds``; two times in three made so that its cars'
    own services are order-free (one network, cars of one node, services
    bound within their link, no quota, nothing else bound near a car, the
    other work kept off the cars), else left as drawn (cars other work may
    reach: the global part's); often another tenant's jobs; priorities
    often out of the order written (a queue not in its units' order)."""
    docs, seed = draw(home_worlds())
    fleet = docs[0]["spec"]
    home = next(d for d in docs if d["metadata"]["name"] == "home")
    if draw(st.integers(0, 2)):
        linked = {frozenset(link["between"]) for link in fleet.get("links", [])}
        names = [site["name"] for site in fleet["sites"]]
        for a, b in zip(names, names[1:]):
            if frozenset((a, b)) not in linked:
                fleet.setdefault("links", []).append({"between": [a, b], "rttMs": 5, "bandwidth": "10Gbps"})
        pop = fleet["populations"][0]
        pop["nodeGroups"] = [{**pop["nodeGroups"][0], "count": 1}]
        pop["attach"]["homes"] = draw(st.sampled_from([1, 2])) if len(names) > 1 else 1  # two: in the core
        pop["attach"]["rttMs"] = max(pop["attach"]["rttMs"], 0.5)
        for c in home["spec"]["components"]:
            c["near"]["maxRttMs"] = 0.2
        for d in docs:
            if d["kind"] == "Tenant" and d["metadata"]["name"] == home["metadata"]["tenant"]:
                d["spec"].pop("quota", None)
        docs = [d for d in docs if d["metadata"]["name"] not in ("other", "wide")]
        private = draw(st.booleans())
        pop["private"] = private
        for d in docs:
            if d["kind"] == "Application" and d is not home:
                for c in d["spec"]["components"]:
                    if "car-" in str(c.get("near")):
                        c["near"]["site"] = fleet["sites"][0]["name"]
                    if not private and "near" not in c:
                        c["sites"] = {"tier": ["cloud", "edge"]}
        if draw(st.booleans()):  # a car's service written out, not made per car: a shard is sent it whole
            car = f"car-{draw(st.integers(0, pop['count'] - 1)):02d}"
            pinned = {"name": "p", "lifetime": "service", "resources": {"cpu": "100m", "memory": "128Mi"},
                      "near": {"site": car, "maxRttMs": 0.2}}
            docs.insert(draw(st.integers(1, len(docs))),
                        doc("Application", "pinned", {"components": [pinned]}, tenant=home["metadata"]["tenant"]))
    tenants = [d["metadata"]["name"] for d in docs if d["kind"] == "Tenant"]
    others = [t for t in tenants if t != home["metadata"]["tenant"]]
    if others and draw(st.integers(0, 3)):  # another tenant's work off the cars: its turns interleave with the cars'
        jobs = {"name": "j", "lifetime": "job", "duration": "10m", "replicas": draw(st.integers(1, 6)),
                "resources": {"cpu": draw(st.sampled_from(["250m", "500m", 1])), "memory": "256Mi"},
                "sites": {"tier": ["cloud", "edge"]}}
        docs.append(doc("Application", "jobs", {"components": [jobs]}, tenant=draw(st.sampled_from(others))))
    for d in docs:
        if d["kind"] == "Application" and draw(st.integers(0, 2)) == 0:
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
    outcome, fallback, parts, pieces, done, decided = split(world, shards, seed)
    assert text(outcome) == one
    free = sum(p.units for p in parts)
    tenants = {p.tenant for p in outcome.state.placements.values()} if not fallback else set()  # (both parts')
    TALLY["cases"] += 1
    TALLY["split"] += bool(free) and not fallback
    TALLY["order-free units"] += free if not fallback else 0
    TALLY["both"] += bool(free) and decided > 0 and not fallback
    TALLY["several tenants"] += bool(free) and len(tenants) > 1 and not fallback
    TALLY["fallback"] += bool(fallback)
    TALLY["homed"] += done.homed
    TALLY["sent per site"] += sum(int((piece.made >= 0).sum()) for piece in pieces)
    TALLY["sent whole"] += sum(len(piece.apps) for piece in pieces)
    core = ~world.fleet.network.leaf[world.fleet.node_site[sum((p.rows.tolist() for p in parts), [])]]
    TALLY["on two edges"] += int(core.sum()) if not fallback else 0
    note(f"shards {shards}, order-free {free}, global {decided}, fallback {fallback!r}")


def test_a_split_pass_places_what_one_process_places():
    """Rounds of random worlds (at most eight: a round is fast, and a rare
    kind of split, a device on two edges, can take more than four) until the
    worlds so far have shown every kind of split."""
    TALLY.clear()

    def shown() -> bool:
        return (TALLY["split"] >= TALLY["cases"] // 20 and TALLY["both"] > 0 and TALLY["several tenants"] > 0
                and TALLY["order-free units"] > TALLY["cases"] and TALLY["homed"] > 0
                and TALLY["sent whole"] > 0 and TALLY["sent per site"] > 0 and TALLY["on two edges"] > 0)

    rounds_until(_same_outcome, shown, rounds=8)
    assert shown(), TALLY


RUNNING_MAXIMUM = cars_world("cpu: 8, memory: 64Gi, accelerators: [{kind: gpu, model: A100, count: 2, memory: 80Gi}]",
                             "arch: aarch64, cpu: 4, memory: 8Gi", 3, 2) + "".join(
    f"---\n{{apiVersion: suanli/v1, kind: Application, metadata: {{name: {name}, tenant: {name[0]}}}, spec: {{components: "
    f"[{{name: c, lifetime: {life}, {extra}resources: {{cpu: {cpu}, memory: 1Gi{gpu}}}}}]}}}}\n"
    for name, life, extra, cpu, gpu in (  # in this order: numbered so
        ("t-late", "job", "duration: 10m, sites: {tier: [cloud]}, ", 2, ""),
        ("u-late", "job", "duration: 10m, sites: {tier: [cloud]}, ", 2, ""),
        ("t-gpu", "service", "priority: 10, ", 3, ", accelerators: [{kind: gpu, count: 1}]"),
        ("u-gpu", "service", "priority: 10, ", 3, ", accelerators: [{kind: gpu, count: 1}]"))) + """---
apiVersion: suanli/v1
kind: Application
metadata: {name: t-cars, tenant: t}
spec:
  each: cars
  components: [{name: s, lifetime: service, priority: 10, resources: {cpu: 100m, memory: 128Mi},
                near: {site: "{site}", maxRttMs: 0.2}}]
"""


def test_a_tenant_waits_behind_its_order_free_units_as_in_one_process(tmp_path):
    """t's queue: its GPU service, its cars' services (order-free: the
    shards'), then its late job, numbered before u's. Each GPU service makes
    its tenant's dominant share 0.5 (one of two GPUs), which the cars'
    small services do not move; so after its cars t's late job keys at
    (0.5, its number) below u's late job, yet in one process it waits
    behind its cars' larger numbers, and u's late job takes the node's last
    two cores. The global part, passing over the cars in one step, must
    key t's late job by the largest key so far (its last car's), not by its
    own; keyed by its own, t's job would take the cores."""
    path = tmp_path / "world.yaml"
    path.write_text(RUNNING_MAXIMUM)
    one = schedule(load_world([path]), 0)
    assert {u.task for u in one.unscheduled} == {"t-late/c/0"}  # u's late job went first
    outcome, fallback, parts, *_ = split(load_world([path]), 2, 0)
    assert sum(p.units for p in parts) == 3  # the cars' services: the shards'
    assert not fallback and text(outcome) == text(one)


PART_OF_A_RUN = cars_world("cpu: 2, memory: 2Gi", "arch: x86_64, cpu: 4, memory: 2Gi", 4, 0.5) + """---
apiVersion: suanli/v1
kind: Application
metadata: {name: u-small, tenant: u}
spec:
  components: [{name: c, lifetime: service, replicas: 2, resources: {cpu: 250m, memory: 256Mi}}]
---
apiVersion: suanli/v1
kind: Application
metadata: {name: t-small, tenant: t}
spec:
  components: [{name: c, lifetime: service, resources: {cpu: 250m, memory: 256Mi}}]
---
apiVersion: suanli/v1
kind: Application
metadata: {name: u-big, tenant: u}
spec:
  components: [{name: c, lifetime: service, resources: {cpu: 4, memory: 256Mi}}]
---
apiVersion: suanli/v1
kind: Application
metadata: {name: t-cars, tenant: t}
spec:
  each: cars
  components: [{name: s, lifetime: service, resources: {cpu: 100m, memory: 256Mi}, near: {site: "{site}", maxRttMs: 0.2}}]
"""


def test_an_explanation_reads_the_devices_one_process_has_filled_by_then(tmp_path):
    """u's big service fits nowhere; its explanation counts the cars it would
    fit on but for their being other devices' sites. In one process, t's
    cars' services (the shards') interleave with u's units: when u's big
    service is decided, one car holds a service, and three cars could take
    it. The global part passes over t's cars in one step; before the
    explanation reads the rows it must take off the cars what one process
    has placed by then (one car), not nothing (four) and not all (none:
    then too little cpu would bind instead)."""
    path = tmp_path / "world.yaml"
    path.write_text(PART_OF_A_RUN)
    one = schedule(load_world([path]), 0)
    assert len(one.unscheduled) == 1
    outcome, fallback, parts, *_ = split(load_world([path]), 2, 0)
    assert sum(p.units for p in parts) == 4
    assert not fallback and text(outcome) == text(one)
    assert '"nodes":3,"binding":true' in text(one)
