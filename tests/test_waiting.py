"""Units parked while the device they are bound near is offline, or until
room appears within their bound: not tried again at every instant, yet the
run is the one that tries them."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given, settings, strategies as st

from suanli.scheduling.reasons import Why
from suanli.sim import room as room_wait, waiting
from suanli.sim.simulation import Simulation
from suanli.sim.waiting import WaitQueue
from suanli.spec.build import load_world

CITY = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"


@given(st.lists(st.tuples(st.sampled_from("aadpwW"), st.integers(0, 7), st.integers(0, 2)), max_size=60))
@settings(max_examples=200, deadline=None)
def test_the_queue_keeps_its_order_through_parks_and_wakes(ops):
    """Against a plain ordered dict and a set of parked units: ``ready`` is
    the waiting units not parked, in the order they were queued."""
    q, order, parked = WaitQueue(), {}, {}
    for op, uid, key in ops:
        if op == "a":
            q.add(uid)
            order.setdefault(uid, None)
        elif op == "d":
            q.discard(uid)
            order.pop(uid, None)
            parked.pop(uid, None)
        elif op == "p" and uid in order and uid not in parked:
            q.park(uid, key)
            parked[uid] = key
        elif op == "w":
            assert q.wake(key) == sum(k == key for k in parked.values())
            parked = {u: k for u, k in parked.items() if k != key}
        elif op == "W":
            q.wake_all()
            parked = {}
        assert list(q) == list(order)
        assert q.ready() == [u for u in order if u not in parked]
        assert q.parked_count == len(parked) and len(q) == len(order)


@contextmanager
def parking(enabled: bool):
    """Parking on or off while the block runs; yields how many units were parked."""
    seen = {"parked": 0, "for room": 0}
    real, before = WaitQueue.park, waiting.ENABLED

    def counted(self, uid, key):
        seen["parked"] += 1
        seen["for room"] += isinstance(key, tuple) and key[0] == "room"
        real(self, uid, key)

    waiting.ENABLED, WaitQueue.park = enabled, counted
    try:
        yield seen
    finally:
        waiting.ENABLED, WaitQueue.park = before, real


def test_parked_units_run_as_if_tried_at_every_instant(tmp_path):
    """The city (600 cars for an hour: a few go offline, their services wait)
    and the moving-cars scenario of the metrics tests (its edges too small
    for every car's assist service: they wait for room), with and without
    rescheduling: the same events with parking and without, and units were
    parked, for their device and for room. A task waiting for its offline
    car says so. Parked units were reached when rows gained room (in one
    tenant's order, and woken together when a second tenant waits too), and
    walks stopped at rows that could no longer hold their watchers."""
    from test_metrics import MOVING

    cases = [(CITY, {"cars": "600"}, 3600.0)]
    for resched in ("true", "false"):
        moving = tmp_path / f"moving-{resched}.yaml"
        moving.write_text(MOVING % resched)
        cases.append((moving, None, 3 * 3600.0))
    two = tmp_path / "moving-two-tenants.yaml"  # a second tenant's services near the same cars
    up = "    - {at: 80m, kind: linkUp, between: [edge-1, cloud-0]}\n"
    two.write_text(MOVING.replace(up, up + NODE_DOWN_UP) % "false" + SECOND_TENANT)
    cases.append((two, None, 3 * 3600.0))
    room_wait.COUNTS.clear()
    named = room = 0
    for path, sizes, until in cases:
        runs = []
        for enabled in (False, True):
            with parking(enabled) as seen:
                sim = Simulation(load_world([path], sizes), seed=5, until=until)
                sim.run()
            pending = {r.task: dict(r.reasons) for r in sim.view.tasks.values() if r.status == "pending"}
            runs.append((json.dumps(sim.events.take(), sort_keys=True), seen["parked"], pending, sim))
            room += seen["for room"]
        (alone, none, before, _), (parked, used, after, sim) = runs
        assert none == 0 and used > 0, (path.name, used)
        assert parked == alone, path.name
        assert before.keys() == after.keys()
        offline = {sim.world.fleet.sites[s].name for s in sim.offline}
        waits = {t: r for t, r in after.items() if any(k.code == "offline" for k in r)}
        for task, reasons in waits.items():  # each names its car, offline at the end
            (why,) = reasons
            assert why == Why("offline", site=task.split('/')[0].split('.')[1]), why
            assert why.arg("site") in offline
        assert all(sim.pending.parked(sim.view.tasks[t].unit) for t in waits)
        named += len(waits)
    assert named > 0 and room > 0, (named, room)
    counts = room_wait.COUNTS
    assert counts["reached"] > 0 and counts["stopped"] > 0 and counts["together"] > 0, counts


NODE_DOWN_UP = """    - {at: 100m, kind: nodeDown, node: edge-0/n-0}
    - {at: 130m, kind: nodeUp, node: edge-0/n-0}
"""
SECOND_TENANT = """---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: u}
spec: {}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: media, tenant: u}
spec:
  each: cars
  components:
    - {name: m, lifetime: service, resources: {cpu: 6, memory: 2Gi}, near: {site: "{site}", maxRttMs: 8}}
"""


def test_return_plans_look_only_where_answers_may_change(tmp_path):
    """Tasks away from home set aside until a row they could move to changes
    (``returns.ReturnWatch``): the city (800 cars, an hour: autopilot sends
    infotainment to the edges and back) and the moving-cars scenario (links
    down, handovers) give the same events with the watch and without, and
    the watch did set tasks aside."""
    from test_metrics import MOVING

    from suanli.sim import returns

    moving = tmp_path / "moving.yaml"
    moving.write_text(MOVING % "true")
    for path, sizes, until in ((CITY, {"cars": "800"}, 3600.0), (moving, None, 3 * 3600.0)):
        runs = []
        for enabled in (False, True):
            before, returns.ENABLED = returns.ENABLED, enabled
            try:
                sim = Simulation(load_world([path], sizes), seed=7, until=until)
                sim.run()
            finally:
                returns.ENABLED = before
            events = sim.events.take()
            moves = sum(1 for e in events if e.get("kind") == "migrated")
            runs.append((json.dumps(events, sort_keys=True), sim.returns.skipped, moves))
        (alone, none, moves), (watched, skipped, _) = runs
        assert none == 0 and skipped > 0 and moves > 0, (path.name, skipped, moves)
        assert watched == alone, path.name


def test_a_deleted_application_leaves_no_unit_parked(tmp_path):
    """The moving-cars scenario with its assist services deleted while some
    wait for room on the edges: the run goes on (rows freed later wake no
    unit that is gone), with the same events with parking and without."""
    from test_metrics import MOVING

    path = tmp_path / "moving.yaml"
    marker = "  events:\n"
    path.write_text((MOVING % "true").replace(marker, marker + "    - {at: 100m, kind: delete, app: assist}\n"))
    runs = []
    for enabled in (False, True):
        with parking(enabled) as seen:
            sim = Simulation(load_world([path]), seed=5, until=3 * 3600.0)
            sim.run()
        runs.append((json.dumps(sim.events.take(), sort_keys=True), seen["for room"], sim))
    (alone, _, _), (parked, room, sim) = runs
    assert room > 0 and parked == alone
    assert not sim.pending and not len(sim._room) and not sim._room_site


def test_a_queue_of_a_first_instant_placed_a_few_at_a_time_ends_small():
    """A first instant queues many units and places them one by one: the
    queue is made anew at each eighth, not once, so at the end its dicts are
    sized for the few left (one copy would keep an eighth of the peak)."""
    q = WaitQueue()
    big = waiting.SHRINK_FROM * 64
    for uid in range(big):
        q.add(uid)
    for uid in range(big - 10):
        q.discard(uid)
    assert len(q) == 10 and list(q) == list(range(big - 10, big))
    assert q._peak < waiting.SHRINK_FROM, q._peak  # an eighth of the peak would be 32,768


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "discard", "park", "wake"]), st.integers(0, 9999)),
                min_size=1, max_size=400), st.integers(0, 2**32 - 1))
def test_a_queue_that_shrinks_keeps_its_order(ops, seed):
    """A queue that held thousands of units and then few is made anew (its
    dicts would otherwise keep their largest tables): it keeps its order,
    its parked units and its tickets."""
    import random

    rng = random.Random(seed)
    q, model, parked = WaitQueue(), {}, {}
    big = waiting.SHRINK_FROM + 500
    for uid in range(big):  # a first instant's queue, placed almost whole
        q.add(uid)
        model[uid] = uid
    keep = set(rng.sample(range(big), 40))
    for uid in range(big):
        if uid not in keep:
            q.discard(uid)
            del model[uid]
    assert q._peak < waiting.SHRINK_FROM  # it was made anew (the case is not vacuous)
    nxt = big
    for op, k in ops:
        uids = sorted(model)
        if op == "add":
            if k not in model:
                model[k] = nxt
                nxt += 1
            q.add(k)
        elif op == "discard" and uids:
            uid = uids[k % len(uids)]
            q.discard(uid)
            del model[uid]
            parked.pop(uid, None)
        elif op == "park":
            ready = [u for u in uids if u not in parked]
            if ready:
                uid = ready[k % len(ready)]
                q.park(uid, k % 3)
                parked[uid] = k % 3
        elif op == "wake":
            for uid in [u for u, key in parked.items() if key == k % 3]:
                del parked[uid]
            q.wake(k % 3)
        assert list(q) == sorted(model, key=model.__getitem__)
        assert q.ready() == sorted((u for u in model if u not in parked), key=model.__getitem__)
        assert {u for u in model if q.parked(u)} == set(parked)


WATCHED: Counter = Counter()  # what the cases below exercised


def test_the_watch_on_rows_is_what_its_array_formulation_is():
    """The compiled loops of a room watch (``kernels.room_*``) against the
    array calls they stand for, on a random table whose rows gain and lose
    room: what each watched row had free (``seen``: the least seen while
    watched, what it has now when first watched or remembered), which
    watched rows rose and their sites, the slots rows give up, and whether a
    site's watched rows could hold a request of cpu and memory."""
    WATCHED.clear()
    _watched_like_arrays()
    # not vacuous: rows rose and did not, slots were given up, sites could hold a request and could not
    assert all(WATCHED[k] > 0 for k in ("rose", "none rose", "gave up", "fits", "does not fit")), WATCHED


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2), st.integers(0, 2**32 - 1),
       st.lists(st.tuples(st.sampled_from(["watch", "unwatch", "change", "risen", "remember", "fits"]),
                          st.integers(0, 2**16)), min_size=1, max_size=60))
def _watched_like_arrays(n, n_dev, seed, ops):
    import numpy as np

    from suanli.scheduling import kernels

    rng = np.random.default_rng(seed)
    free = rng.integers(0, 4, (2, n)).astype(np.int64)
    dev_free = rng.integers(0, 1001, (n_dev, n)).astype(np.int16)
    enabled = rng.random(n) < 0.8
    site = np.sort(rng.integers(0, 3, n)).astype(np.int32)
    width = 2 + n_dev + 1
    order = np.argsort(site, kind="stable").astype(np.int64)
    start = np.zeros(5, np.int32)
    start[1:] = np.cumsum(np.bincount(site, minlength=4))

    def now(rows):
        return np.hstack([free[:, rows].T, dev_free[:, rows].T, enabled[rows][:, None]]).astype(np.float64)

    slot, count, seen = np.full(n, -1, np.int64), np.zeros(n, np.int32), np.zeros((n, width))
    ref_seen, ref_count = seen.copy(), count.copy()
    for op, k in ops:
        rows = np.flatnonzero(rng.random(n) < 0.5)
        if op == "watch":
            slot[rows[slot[rows] < 0]] = rows[slot[rows] < 0]  # (a slot per row: its own number)
            fresh = ref_count[rows] == 0
            ref_seen[rows] = np.where(fresh[:, None], now(rows), np.minimum(ref_seen[rows], now(rows)))
            ref_count[rows] += 1
            kernels.room_watch(rows, slot, count, seen, free, dev_free, enabled)
        elif op == "unwatch":
            rows = rows[count[rows] > 0]
            ref_count[rows] -= 1
            want = slot[rows[ref_count[rows] == 0]].tolist()
            assert kernels.room_unwatch(rows, slot, count).tolist() == want
            WATCHED["gave up"] += len(want)
            assert (slot[rows[count[rows] == 0]] == -1).all()
        elif op == "change":
            free[:, rows] = rng.integers(0, 4, (2, rows.size))
            dev_free[:, rows] = rng.integers(0, 1001, (n_dev, rows.size))
            enabled[rows] = rng.random(rows.size) < 0.8
        elif op == "remember":
            at = rows[slot[rows] >= 0]
            ref_seen[slot[at]] = now(at)
            kernels.room_remember(rows, slot, seen, free, dev_free, enabled)
        elif op == "risen":
            logged = np.concatenate([rows, rows[: k % (rows.size + 1)]])  # a log repeats rows
            rows = np.unique(logged)
            rows = rows[ref_count[rows] > 0]
            up = (now(rows) > ref_seen[slot[rows]]).any(axis=1)
            ref_seen[slot[rows[~up]]] = now(rows[~up])
            got = kernels.room_risen(logged, count, slot, seen, free, dev_free, enabled, site).tolist()
            assert got == np.unique(site[rows[up]]).tolist()
            WATCHED["rose" if got else "none rose"] += 1
        elif op == "fits":
            s, v0, v1 = k % 3, k % 4, (k // 4) % 4
            rows = order[start[s]:start[s + 1]]
            rows = rows[count[rows] > 0]
            want = bool(rows.size) and bool((enabled[rows] & ~((v0 > 0) & (free[0, rows] < v0))
                                             & ~((v1 > 0) & (free[1, rows] < v1))).any())
            assert kernels.room_fits(order, int(start[s]), int(start[s + 1]), count, enabled, free, v0, v1) == want
            WATCHED["fits" if want else "does not fit"] += 1
        assert (count == ref_count).all()
        watched = slot[count > 0]
        assert np.array_equal(seen[watched], ref_seen[watched])
