"""The task ledger keeps its indexes together through every transition, and
what it hands out is read only."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from suanli.scheduling.business_layer import Unit
from suanli.sim.ledger import IN_UNIT, RUNNING, STATUSES
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"


def check(sim: Simulation, seen: Counter) -> None:
    """Every index of the ledger agrees with the records, and the records with the placements."""
    ledger, view = sim.ledger, sim.view
    tasks, units = ledger.tasks, ledger.units
    counts = Counter(r.status for r in tasks.values())
    assert view.counts() == {s: counts.get(s, 0) for s in STATUSES}
    assert sum(view.counts().values()) == len(view) == len(tasks)
    with_run = {uid for uid, us in units.items() if us.run is not None}
    assert set(ledger.running) == with_run
    assert {run_id: uid for run_id, uid in enumerate(ledger.runs) if uid >= 0} == \
        {units[uid].run.run_id: uid for uid in with_run}
    assert all(ledger.unit_of_run(units[uid].run.run_id) == uid for uid in with_run)
    order = [ledger.running_seq[uid] for uid in ledger.running]
    assert order == sorted(order)  # the running dict is in start order
    assert list(view.running()) == view.in_start_order(reversed(list(ledger.running)))
    on = {task for task, rec in tasks.items() if rec.status == RUNNING}
    assert on == set(sim.state.placements)
    by_node = Counter(p.host.node for p in sim.state.placements.values())
    on_ids, on_nodes = sim.state.tasks_on_node.columns()
    assert Counter(on_nodes.tolist()) == by_node  # each placed task once on its node's list, and nothing else
    assert len(set(on_ids.tolist())) == on_ids.size
    assert all(sim.state.tasks_on_node.count(node) == n for node, n in by_node.items())
    name = sim.state.task_ids.name
    assert all(sim.state.placements[name(i)].host.node == node for i, node in zip(on_ids.tolist(), on_nodes.tolist()))
    for app, uids in ledger.by_app.items():
        assert all(units[uid].unit.app.name == app for uid in uids)
        assert ledger.by_app.get(app) == uids  # (an application made per site: found from its name)
        seen["made per site"] += type(units[uids[0]].unit.app).__name__ == "Application" and \
            units[uids[0]].unit.app.template is not None
    assert {uid for uids in ledger.by_app.values() for uid in uids} == set(units)
    for uid, us in units.items():
        assert all(tasks[task].unit == uid for task in us.unit.tasks)
        if type(units.unit[uid]) is not Unit:  # kept as columns: its one task's record reads from it
            i = units.task[uid]
            assert tasks.component[i] is IN_UNIT and tasks.names[i] == us.unit.tasks[0]
            assert tasks[us.unit.tasks[0]].component == us.unit.components[0]
            seen["waiting as columns" if us.run is None else "running as columns"] += 1
        if us.run is not None:
            for comp in us.unit.components:
                if comp.near is not None:
                    assert uid in view.bound_near(comp.near.site)
    seen["instants"] += 1
    seen["running"] += counts["running"] > 0
    seen["pending"] += counts["pending"] > 0
    seen["units"] = max(seen["units"], len(units))
    seen["forgotten"] += len(units) < seen["units"]


def moving_with_churn(tmp_path: Path) -> Path:
    """The moving-cars scenario with a second tenant, an edge node down and
    up, and the assist services deleted while some wait for room."""
    from test_metrics import MOVING
    from test_waiting import NODE_DOWN_UP, SECOND_TENANT

    up = "    - {at: 80m, kind: linkUp, between: [edge-1, cloud-0]}\n"
    text = MOVING.replace(up, up + NODE_DOWN_UP) % "true" + SECOND_TENANT
    marker = "  events:\n"
    path = tmp_path / "churn.yaml"
    path.write_text(text.replace(marker, marker + "    - {at: 150m, kind: delete, app: assist}\n"))
    return path


CITY = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"


@pytest.mark.parametrize("case", ["ai-hpc-mix", "churn", "city"])
def test_the_ledger_keeps_its_indexes_together(case, tmp_path):
    """At every instant of a run with jobs that finish, gangs, tasks lost, preemptions,
    migrations, a node down and up, and a deleted application, the ledger's
    counts equal a count over its records, its running units are those with
    a run, in start order, running tasks are those placed, and units bound
    near a site are found from it. The city: applications made per site
    that arrive, hand over and leave."""
    if case == "city":
        world, until = load_world([CITY], {"cars": "150"}), 3600.0
    else:
        path = EXAMPLES / "ai-hpc-mix.yaml" if case == "ai-hpc-mix" else moving_with_churn(tmp_path)
        world, until = load_world([path]), None if case == "ai-hpc-mix" else 3 * 3600.0
    seen: Counter = Counter()
    sim = Simulation(world, seed=5, until=until, on_instant=lambda t: check(sim, seen))
    sim.run()
    kinds = sim.events.kinds
    assert seen["instants"] > 10 and seen["running"], seen
    if case == "city":
        assert seen["made per site"] > 0 and kinds["handover"] > 0 and seen["forgotten"] > 0, (seen, kinds)
        return
    assert seen["pending"] and seen["running as columns"], seen
    if case == "ai-hpc-mix":
        assert kinds["finished"] > 0 and kinds["lost"] > 0, kinds
    else:
        assert kinds["migrated"] > 0 and kinds["preempted"] > 0 and kinds["deleted"] > 0 and kinds["lost"] > 0, kinds
        assert seen["forgotten"] > 0  # the deleted application's units were dropped
        assert seen["waiting as columns"] > 0, seen  # units of one task wait as columns too


def test_what_the_ledger_hands_out_is_read_only():
    sim = Simulation(load_world([EXAMPLES / "ai-hpc-mix.yaml"]), seed=5, until=60.0)
    sim.run()
    view = sim.view
    assert len(view.tasks) > 0
    task = next(iter(view.tasks))
    with pytest.raises(TypeError):
        view.tasks[task] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        del view.units[next(iter(view.units))]  # type: ignore[attr-defined]
    assert not hasattr(view, "placed") and not hasattr(view, "start") and not hasattr(view, "ended")


@pytest.mark.parametrize("case", ["ai-hpc-mix", "churn"])
def test_waits_over_the_columns_are_those_record_by_record(case, tmp_path):
    """The summary's first waits and completion times, read over the ledger's
    columns, are those of a walk over its records (the walk that came before),
    value for value, by class and by tenant, censored counts too."""
    from collections import defaultdict

    from suanli.sim.metrics import _first_waits, _flat

    path = EXAMPLES / "ai-hpc-mix.yaml" if case == "ai-hpc-mix" else moving_with_churn(tmp_path)
    sim = Simulation(load_world([path]), seed=5, until=2 * 3600.0)
    sim.run()
    end = 2 * 3600.0
    ref = [defaultdict(list), defaultdict(list), Counter(), Counter(), defaultdict(list), defaultdict(list)]
    waits, tenant_waits, censored, tenant_censored, completion, tenant_completion = ref
    for rec in sim.view.tasks.values():
        if not rec.klass:
            continue
        got = None
        if rec.first_placed_at is not None:
            got = (rec.first_placed_at - rec.submitted_at, False)
        elif rec.status == "pending":
            got = (max(end, rec.submitted_at) - rec.submitted_at, True)
        elif rec.status == "failed":
            at = rec.ended_at if rec.ended_at is not None else end
            got = (max(at, rec.submitted_at) - rec.submitted_at, True)
        if got is not None:
            waits[rec.klass].append(got[0])
            tenant_waits[rec.tenant].append(got[0])
            censored[rec.klass] += got[1]
            tenant_censored[rec.tenant] += got[1]
        if rec.status == "finished" and rec.job and rec.ended_at is not None:
            completion[rec.klass].append(rec.ended_at - rec.submitted_at)
            tenant_completion[rec.tenant].append(rec.ended_at - rec.submitted_at)
    out = [defaultdict(list), defaultdict(list), Counter(), Counter(), defaultdict(list), defaultdict(list)]
    _first_waits(sim.view.columns(), end, *out)
    for mine, theirs in zip(out[:2] + out[4:], ref[:2] + ref[4:]):
        assert {k: sorted(_flat(v).tolist()) for k, v in mine.items()} == {k: sorted(v) for k, v in theirs.items()}
    assert +out[2] == +ref[2] and +out[3] == +ref[3]
    assert sum(map(len, ref[0].values())) > 10  # not vacuous
    # read seven records at a time (as ``summarize`` reads a city's millions, by blocks): the same
    # values in the same order, so the same percentiles to the last bit
    blocks = [defaultdict(list), defaultdict(list), Counter(), Counter(), defaultdict(list), defaultdict(list)]
    n = sim.view.id_count()
    for start in range(0, n, 7):
        _first_waits(sim.view.columns(start, min(start + 7, n)), end, *blocks)
    for mine, whole in zip(blocks[:2] + blocks[4:], out[:2] + out[4:]):
        assert {k: _flat(v).tolist() for k, v in mine.items()} == {k: _flat(v).tolist() for k, v in whole.items()}
    assert +blocks[2] == +out[2] and +blocks[3] == +out[3] and n > 7 * 10
    if case == "churn":
        assert sum(ref[2].values()) > 0  # censored waits (pending at the end, or failed) were compared too
    else:
        assert sum(map(len, ref[4].values())) > 0  # and completion times


@pytest.fixture(scope="module")
def city_hour():
    sim = Simulation(load_world([CITY], {"cars": "300"}), seed=3, until=3600.0)
    sim.run()
    return sim


@pytest.mark.parametrize("block, flags", [(None, None), (41, None), (41, 0)])
def test_the_fitted_hosts_summed_over_the_columns_are_those_host_by_host(city_hour, monkeypatch, block, flags):
    """What an output of every host reads (``Placements.fitted_allocs``,
    passes over the columns a block at a time) is what each default VC's
    fitted host adds up from its node's tasks alone: vectors, device slots and
    shares; hosts with one task that has device shares and hosts with several
    are both there. Also read in blocks of 41 ids, with hosts found by a flag
    per code and by sorting the codes."""
    import suanli.scheduling.state as state_module

    if block is not None:
        monkeypatch.setattr(state_module, "FITTED_BLOCK", block)
    if flags is not None:
        monkeypatch.setattr(state_module, "FLAG_CODES", flags)
    state = city_hour.state
    assert len(state.placements) > 10 * state_module.FITTED_BLOCK or block is None  # many blocks
    fitted = state.placements.fitted_allocs()
    seen = Counter()
    for vc in state.vcs.values():
        if not vc.default:
            continue
        for host in vc.hosts:
            mine = host.peek_alloc()  # (its own sum: its tasks on its node, host by host)
            theirs = fitted.get((vc.name, host.node))
            assert theirs is not None
            assert (theirs.row, theirs.vec.tolist(), theirs.slots, theirs.milli) == \
                (mine.row, mine.vec.tolist(), mine.slots, mine.milli)
            seen["hosts"] += 1
            seen["shared"] += bool(mine.slots)
            seen["several"] += bool(mine.slots) and int(fitted._one[np.searchsorted(
                fitted._hosts, state.placements._vc_at[vc.name] * fitted._span + host.node)]) < 0
    assert len(fitted) == seen["hosts"] > 100
    assert seen["shared"] > seen["several"] > 0  # both ways of keeping device shares are read
    assert fitted.get(("no-such-vc", 0)) is None


def _site_apps(n: int):
    """``n`` copies (one per site of a population, after a listed site) of an
    application of a one-replica and a two-replica component."""
    from suanli.model.sites import NamePattern, SiteNames
    from suanli.model.work import EACH_SITE, Application, Component, Near, Resources, app_for_site, \
        site_application

    names = SiteNames()
    names.add("edge-0")
    first = names.add_block(n, NamePattern.parse("car-##"))
    comps = tuple(Component("info", c, "service", size, Resources(100, 64), 0, True, near=Near(EACH_SITE, 5.0))
                  for c, size in (("music", 1), ("game", 2)))
    cls = site_application(Application("info", "t", "t/default", 0, True, comps, "info"), names)
    return [app_for_site(cls, first + k) for k in range(n)]


OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 11), st.sampled_from(["all", "part", "shuffled"])),
    st.tuples(st.just("plain"), st.integers(0, 5), st.none()),
    st.tuples(st.just("drop"), st.integers(0, 50), st.none()),
    st.tuples(st.just("settle"), st.integers(0, 50), st.none()),
    st.tuples(st.just("flush"), st.none(), st.none())), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, seed=st.integers(0, 2**16))
def test_a_growing_catalogue_gives_the_ids_and_names_of_one_that_keeps_every_name(ops, seed):
    """Task ids of applications made per site, added in their order, out of
    it, in part, between others, dropped, added again and let go of at an
    instant's end: the ids, names, lookups and order are those of
    ``TaskIds``, which keeps every name; most of the copies' names are made."""
    import random

    from suanli.scheduling.state import GrowingCatalogue, TaskIds

    apps = _site_apps(12)
    ref, cat = TaskIds(), GrowingCatalogue()
    gone: set[str] = set()
    rng = random.Random(seed)
    app_of: dict[str, object] = {}

    def covering(i: int):  # ``made_of`` without its cache: the run of made ids that covers ``i``
        runs = [(s, cat._classes[p], site) for s, p, site in zip(cat._starts, cat._proto, cat._site)]
        for n, (start, cls, site) in enumerate(runs):
            end = min(start + cat._made[cls][3], runs[n + 1][0] if n + 1 < len(runs) else 1 << 62)
            if start <= i < end:
                return cls, site
        return None

    for op, k, how in ops:
        if ref.names:  # (read between changes: its cache of the run read last agrees with a fresh look)
            i = rng.randrange(len(ref.names))
            assert cat.made_of(i) == covering(i), i
        if op == "submit":
            app = apps[k]
            tasks = [c.task_name(r) for c in app.components for r in range(c.size)]
            if how == "part":
                tasks = tasks[:rng.randint(1, 2)]
            elif how == "shuffled":
                rng.shuffle(tasks)
            for task in tasks:
                app_of[task] = app
                i = ref.ids.get(task)
                if i is None:
                    i = ref.add(task)
                    assert cat.find(task, app) is None
                    assert cat.add(task, app) == i
                else:
                    assert cat.find(task, app) == i
                gone.discard(task)
        elif op == "plain":
            task = f"job-{k}/main/0"
            if ref.ids.get(task) is None:
                assert cat.get(task) is None and cat.add(task) == ref.add(task)
        elif op in ("drop", "settle") and ref.ids:
            live = list(ref.ids)
            task = live[k % len(live)]
            if op == "drop":
                assert cat.pop(task) == ref.ids.pop(task)
                gone.add(task)
            else:
                cat.settle(task)
        elif op == "flush":
            cat.flush()
    cat.flush()
    assert [cat.name(i) for i in range(len(ref.names))] == ref.names
    assert list(cat) == list(ref.ids) and len(cat) == len(ref.ids)
    assert all(cat.get(task) == i and task in cat for task, i in ref.ids.items())
    assert all(cat.get(task) is None for task in gone if task not in ref.ids)
    for wrong in ("info.car-12/music/0", "info.car-01/music/1", "info.car-01/game/01", "info.car-1/game/0",
                  "info.edge-0/music/0", "other.car-01/music/0", "info.car-01/music", 7):
        assert cat.get(wrong) is None
    for i, name in enumerate(ref.names):  # a made name's id tells its copy (what a compact unit keeps)
        if cat._names[i] is None:
            app = app_of[name]
            assert cat.made_of(i) == (type(app), app.site), name
    order = list(range(len(ref.names)))
    rng.shuffle(order)
    assert [cat.made_of(i) for i in order] == [covering(i) for i in order]
    note(f"made {sum(n is None for n in cat._names)} of {len(ref.names)}")
    made_seen["made"] += sum(n is None for n in cat._names)
    made_seen["kept"] += sum(n is not None for n in cat._names)


made_seen: Counter = Counter()


def test_the_growing_catalogue_property_made_names_and_kept_both():
    """(Run after the property above, in this file's order: both ways of
    keeping a name were exercised.)"""
    if not made_seen:
        test_a_growing_catalogue_gives_the_ids_and_names_of_one_that_keeps_every_name()
    assert made_seen["made"] > 100 and made_seen["kept"] > 100, made_seen


NODE_OPS = st.lists(st.tuples(st.sampled_from(["add", "add", "discard", "leave"]), st.integers(0, 3),
                              st.integers(0, 12)),
                    min_size=20, max_size=200)


def test_tasks_on_a_node_as_columns_read_as_lists_in_the_order_they_came():
    """``NodeTasks`` against a dict of lists: each node's ids in the order
    they came, a task on one node at a time (added to another, it leaves the
    first), counts, and its columns taken back whole by another; the cases
    move tasks between nodes and take them out of the middle of lists."""
    from suanli.scheduling.state import NodeTasks

    seen = Counter()

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(ops=NODE_OPS)
    def check(ops):
        on, ref = NodeTasks(), {}
        for op, node, i in ops:
            where = next((n for n, ids in ref.items() if i in ids), None)
            if op == "add":
                if where is not None and where != node:
                    ref[where].remove(i)
                    seen["moved"] += 1
                if where != node:
                    ref.setdefault(node, []).append(i)
                on.add(node, i)
            else:
                if op == "leave" and where is not None:  # from the node it is on
                    node = where
                if where == node:
                    seen["from the middle"] += 0 < ref[node].index(i) < len(ref[node]) - 1
                    ref[node].remove(i)
                on.discard(node, i)
            seen["four or more on a node"] += max(map(len, ref.values()), default=0) >= 4
            for n in range(8):
                assert on.get(n) == (ref.get(n) or ())
                assert on.count(n) == len(ref.get(n, ()))
        again = NodeTasks()
        again.add_all(*on.columns())
        assert all(again.get(n) == on.get(n) for n in range(8))
        assert on.get(99) == () and on.count(99) == 0

    check()
    assert all(seen[k] >= 20 for k in ("moved", "from the middle", "four or more on a node")), seen


def test_units_bound_near_a_site_kept_by_its_number_read_as_by_its_name():
    """``BoundUnits`` against a dict by name of ``_add_unit``'s groups: units
    in order and out of it, again, on sites of a population and listed ones,
    on names no site has, and on a name that becomes a site's later."""
    from suanli.model.sites import NamePattern, SiteNames
    from suanli.sim.ledger import BoundUnits, _add_unit

    seen = Counter()
    names = ["cloud", "car-0", "car-1", "car-2", "nowhere", "late"]

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(ops=st.lists(st.tuples(st.sampled_from([1, 1, 1, 1, 0, 2, 3, 4, 5, 5, 5]),
                                  st.one_of(st.none(), st.integers(0, 30))), min_size=5, max_size=80),
           late_at=st.integers(0, 30))
    def check(ops, late_at):
        sites = SiteNames()
        sites.add("cloud")
        sites.add_block(3, NamePattern.parse("car-#"))
        bound, ref = BoundUnits(sites), {}
        for k, (n, uid) in enumerate(ops):
            uid = k if uid is None else uid  # (mostly in order)
            if k == late_at:
                sites.add("late")  # a site added while running
            name = names[n]
            known = sites.get(name) if name == "late" or (name == "car-1" and uid % 3 == 0) else -1  # (given)
            seen["a number given for a name kept by name"] += known >= 0 and name in bound._other
            bound.add(name, uid, known)
            _add_unit(ref, name, uid)
            for other in names:
                got = bound.get(other, ())
                assert list(got) == list(ref.get(other, ()))
        seen["kept as a range"] += any(type(bound.get(x)) is range and len(bound.get(x)) > 1 for x in names[:4])
        seen["out of order"] += any(type(bound.get(x)) in (list, set) for x in names[:4])
        seen["by name"] += "nowhere" in bound._other

    check()
    assert all(seen[k] >= 20 for k in ("kept as a range", "out of order", "by name")), seen
    assert seen["a number given for a name kept by name"] >= 5, seen


def test_fitted_hosts_as_columns_read_as_hosts_kept_in_the_order_made():
    """``FittedHosts`` against a list of hosts in the order made: a host made
    on a node's first task and named by a number never used again, counted,
    gone with its last task; read in that order, first ones first
    (``some``), by node, and named again in another order (a split pass's
    merge). The cases make hosts again on nodes that had one, and write the
    log again once its dead entries outnumber the live."""
    from suanli.scheduling.state import FittedHost, FittedHosts

    seen = Counter()

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(ops=st.lists(st.tuples(st.sampled_from(["hold", "hold", "release"]), st.integers(0, 7)),
                        min_size=10, max_size=120), dense_from=st.sampled_from([64, 1, 2]))
    def check(ops, dense_from):
        kind = type("Hosts", (FittedHosts,), {"__slots__": (), "DENSE_FROM": dense_from})  # (columns past it)
        hosts, ref, number = kind("t/default", 3), [], 0  # ref: [node, number, count] in order made
        made = set()
        for op, node in ops:
            mine = next((h for h in ref if h[0] == node), None)
            if op == "hold":
                if mine is None:
                    seen["made again on a node"] += node in made
                    made.add(node)
                    h = hosts.add(node, number)
                    assert isinstance(h, FittedHost) and h.name == f"auto-{number}" and h.count == 0
                    mine = [node, number, 0]
                    ref.append(mine)
                    number += 1
                hosts.at(node).hold()
                mine[2] += 1
            elif mine is not None:
                h = hosts.by_node[node]
                h.release()
                mine[2] -= 1
                if not h.count:
                    hosts.remove(h)
                    ref.remove(mine)
                    assert h not in hosts
            assert [(h.node, h.name, h.count) for h in hosts] == [(n, f"auto-{k}", c) for n, k, c in ref]
            assert [h.node for h in hosts.some(2)] == [n for n, _, _ in ref[:2]]
            assert len(hosts) == len(ref) and bool(hosts) == bool(ref)
            assert sorted(hosts.by_node) == sorted(n for n, _, _ in ref)
            assert all(hosts.by_node[n] == hosts.at(n) and hosts.at(n) in hosts for n, _, _ in ref)
            nodes, counts = hosts.columns()
            assert nodes.tolist() == [n for n, _, _ in ref] and counts.tolist() == [c for _, _, c in ref]
        seen["several hosts"] += len(ref) >= 3
        seen["as columns"] += hosts._few is None
        seen["in a dict"] += hosts._few is not None and len(ref) >= 2
        order = np.array([n for n, _, _ in ref][::-1], np.int64)
        hosts.renumber(order, np.arange(order.size) + 1)
        assert [(h.node, h.name, h.count) for h in hosts] == \
            [(int(n), f"auto-{k}", k + 1) for k, n in enumerate(order)]

    check()
    # the log written again when dead entries outnumber the live
    hosts = FittedHosts("t/default", 3)
    for k in range(3000):
        hosts.add(k % 5, k)
        if k % 5 != 4:
            hosts.remove(hosts.at(k % 5))
    assert len(hosts._log_node) < 2 * len(hosts) + 1025 and [h.name for h in hosts][-1] == "auto-2999"
    assert all(seen[k] >= 20 for k in ("made again on a node", "several hosts", "as columns", "in a dict")), seen
