"""Every quantity is bounded where it is written: above its limit a value is a
located problem that names the limit; at the limit it is accepted; and no
value, however large, odd or long, makes validation raise anything but a
problem. Work that slips past validation anyway fails alone in the simulator."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from builders import app, component, node_group, scenario, site
from suanli.cli import app as cli
from suanli.model import quantities as q
from suanli.model.work import Resources
from suanli.scheduling.request import resource_vector
from suanli.scheduling.select import place_group
from suanli.scheduling.state import PlacementState
from suanli.sim.simulation import Simulation
from suanli.spec.build import build_application, load_world
from suanli.spec.loader import Loaded, validate_document
from suanli.spec.problems import Problem

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def doc(kind, spec, tenant=None):
    meta = {"name": "x"} if tenant is None else {"name": "x", "tenant": tenant}
    return {"apiVersion": "suanli/v1", "kind": kind, "metadata": meta, "spec": spec}


JOB = {"name": "c", "lifetime": "job", "duration": "1m", "resources": {"cpu": 1, "memory": "1Gi",
                                                                         "accelerators": [{"kind": "gpu", "count": 1}]},
       "state": {"kind": "stateful", "size": "1Gi", "checkpointEvery": "1m"}, "near": {"site": "s", "maxRttMs": 5},
       "scaling": {"efficiency": 0.9}, "run": {"command": ["x"], "maxRestarts": 1, "stopGrace": "5s"}}
GANG = {"name": "g", "lifetime": "job", "work": "1h", "gang": {"size": 2, "minSize": 1}}
APP = doc("Application", {"priority": 0, "components": [JOB, GANG]}, tenant="t")
TENANT = doc("Tenant", {"weight": 1, "maxPriority": 10, "quota": {"cpu": 10, "memory": "1Ti", "gpu": 8}})
FLEET = doc("Fleet", {"sites": [{"name": "s", "tier": "cloud", "intraSiteRttMs": 0.2, "nodeGroups": [
    {"name": "n", "count": 1, "arch": "x86_64", "cpu": 4, "memory": "8Gi", "costPerHour": 1,
     "accelerators": [{"kind": "gpu", "model": "m", "count": 1, "memory": "16Gi"}]}]},
    {"name": "r", "tier": "edge"}], "links": [{"between": ["s", "r"], "rttMs": 5, "bandwidth": "1Gbps"}]})
VC = doc("VirtualCluster", {"hostGroups": [{"name": "h", "min": 0, "max": 2, "resources": {"cpu": 1}},
                                           {"name": "f", "count": 1, "resources": {"cpu": 1}}],
                            "autoscale": {"scaleDownAfter": "5m"}}, tenant="t")
SCENARIO = doc("Scenario", {
    "seed": 1, "until": "1h", "arrivals": [{"at": "1m", "app": "a"}],
    "generators": [{"name": "g", "tenant": "t", "rate": "1/m", "start": 0, "until": "1h",
                    "template": {"components": [{"name": "c", "lifetime": "service"}]},
                    "jitter": {"duration": "lognormal(1m, 1)"}}],
    "events": [{"at": "1m", "kind": "deviceBusy", "site": "s", "duration": "1m", "resources": {"cpu": 1}}],
    "policy": {"rescheduling": {"hysteresis": "1m", "maxConcurrentMigrations": 8, "disruptionBudget": 2}}})

C0, G1 = ("spec", "components", 0), ("spec", "components", 1)
GROUP = ("spec", "sites", 0, "nodeGroups", 0)
POLICY = ("spec", "policy", "rescheduling")
YEARS = "36525d (100 years)"

# (document, field path, a value at the limit, one just past it, the limit as the message gives it)
BOUNDS = [
    (APP, C0 + ("resources", "cpu"), 1_000_000, 1_000_001, "at most 1000000 cores"),
    (APP, C0 + ("resources", "cpu"), "1000000000m", "1000000001m", "at most 1000000 cores"),
    (APP, C0 + ("resources", "memory"), "1Pi", "1025Ti", "at most 1Pi (1 PiB)"),
    (APP, C0 + ("resources", "accelerators", 0, "count"), 1_000_000, 1_000_001, "at most 1000000 devices"),
    (APP, C0 + ("state", "size"), "1024Ti", "1048577Gi", "at most 1Pi (1 PiB)"),
    (APP, C0 + ("state", "checkpointEvery"), "36525d", "36526d", "at most " + YEARS),
    (APP, C0 + ("state", "checkpointEvery"), "1s", "999ms", "at least 1s"),
    (APP, C0 + ("duration",), "36525d", "36525d1s", "at most " + YEARS),
    (APP, C0 + ("duration",), 3_155_760_000, 3_155_760_001, "at most " + YEARS),
    (APP, G1 + ("work",), "876600h", "876601h", "at most " + YEARS),
    (APP, C0 + ("near", "maxRttMs"), 1_000_000, 1_000_001, "at most 1000000 ms"),
    (APP, C0 + ("scaling", "efficiency"), 0.01, 0.0099, "at least 0.01"),
    (APP, C0 + ("run", "maxRestarts"), 10_000, 10_001, "at most 10000"),
    (APP, C0 + ("run", "stopGrace"), "1h", "3601s", "at most 1h"),
    (APP, C0 + ("replicas",), 100_000, 100_001, "at most 100000"),
    (APP, G1 + ("gang", "size"), 100_000, 100_001, "at most 100000"),
    (APP, G1 + ("gang", "minSize"), 1, 100_001, "at most 100000"),
    (APP, ("spec", "priority"), 10**9, 10**9 + 1, "at most 1000000000"),
    (APP, ("spec", "priority"), -(10**9), -(10**9) - 1, "at least -1000000000"),
    (APP, C0 + ("priority",), 10**9, 10**9 + 1, "at most 1000000000"),
    (TENANT, ("spec", "weight"), 1_000_000, 1_000_001, "at most 1000000"),
    (TENANT, ("spec", "weight"), 0.001, 0.0009, "at least 0.001"),
    (TENANT, ("spec", "maxPriority"), 10**9, 10**9 + 1, "at most 1000000000"),
    (TENANT, ("spec", "quota", "cpu"), 10**10, 10**10 + 1, "at most 10000000000 cores"),
    (TENANT, ("spec", "quota", "memory"), "1024Pi", "1025Pi", "at most 1024Pi (1 EiB)"),
    (TENANT, ("spec", "quota", "gpu"), 10**9, 10**9 + 1, "at most 1000000000 devices"),
    (FLEET, GROUP + ("count",), 1_000_000, 1_000_001, "at most 1000000"),
    (FLEET, GROUP + ("cpu",), 1_000_000, 1_000_001, "at most 1000000 cores"),
    (FLEET, GROUP + ("memory",), "1Pi", "1025Ti", "at most 1Pi (1 PiB)"),
    (FLEET, GROUP + ("costPerHour",), 10**9, 10**9 + 1, "at most 1000000000"),
    (FLEET, GROUP + ("accelerators", 0, "memory"), "1Pi", "1025Ti", "at most 1Pi (1 PiB)"),
    (FLEET, ("spec", "sites", 0, "intraSiteRttMs"), 1_000_000, 1_000_000.5, "at most 1000000 ms"),
    (FLEET, ("spec", "links", 0, "rttMs"), 1_000_000, 1_000_001, "at most 1000000 ms"),
    (FLEET, ("spec", "links", 0, "bandwidth"), "1000000Gbps", "1000001Gbps", "at most 1000000Gbps"),
    (FLEET, ("spec", "links", 0, "bandwidth"), "1Kbps", "0.5Kbps", "at least 1Kbps"),
    (VC, ("spec", "hostGroups", 0, "max"), 100_000, 100_001, "at most 100000"),
    (VC, ("spec", "hostGroups", 1, "count"), 100_000, 100_001, "at most 100000"),
    (VC, ("spec", "hostGroups", 0, "resources", "cpu"), 1_000_000, 1_000_001, "at most 1000000 cores"),
    (VC, ("spec", "autoscale", "scaleDownAfter"), "36525d", "36526d", "at most " + YEARS),
    (SCENARIO, ("spec", "seed"), 2**63 - 1, 2**63, "at most 9223372036854775807"),
    (SCENARIO, ("spec", "seed"), 0, -1, "at least 0"),
    (SCENARIO, ("spec", "until"), "36525d", "36526d", "at most " + YEARS),
    (SCENARIO, ("spec", "arrivals", 0, "at"), "36525d", "36526d", "at most " + YEARS),
    (SCENARIO, ("spec", "generators", 0, "rate"), "1000000/s", "1000001/s", "at most 1000000/s"),
    (SCENARIO, ("spec", "generators", 0, "rate"), "1/36525d", "1/36526d", "at least 1/36525d"),
    (SCENARIO, ("spec", "generators", 0, "jitter", "duration"), "lognormal(1m, 10)", "lognormal(1m, 10.5)",
     "at most 10"),
    (SCENARIO, ("spec", "generators", 0, "jitter", "duration"), "uniform(0, 36525d)", "uniform(0, 36526d)",
     "at most " + YEARS),
    (SCENARIO, ("spec", "generators", 0, "template", "priority"), 10**9, 10**9 + 1, "at most 1000000000"),
    (SCENARIO, ("spec", "events", 0, "resources", "cpu"), 1_000_000, 1_000_001, "at most 1000000 cores"),
    (SCENARIO, ("spec", "events", 0, "duration"), "36525d", "36526d", "at most " + YEARS),
    (SCENARIO, POLICY + ("maxConcurrentMigrations",), 100_000, 100_001, "at most 100000"),
    (SCENARIO, POLICY + ("disruptionBudget",), 100_000, 100_001, "at most 100000"),
    (SCENARIO, POLICY + ("hysteresis",), "36525d", "36526d", "at most " + YEARS),
]
IDS = [f"{d['kind']}:{'.'.join(map(str, path[1:]))}={over}" for d, path, _, over, _ in BOUNDS]


def with_value(base: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(base)
    cur = out
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value
    return out


def validate(d: dict) -> list:
    return validate_document("body", d)


def dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else ("." if text else "") + str(part)
    return text


def test_the_documents_the_bounds_are_tried_on_are_valid():
    for d in (APP, TENANT, FLEET, VC, SCENARIO):
        assert all(isinstance(x, Loaded) for x in validate(d)), validate(d)


@pytest.mark.parametrize("base, path, at, over, shown", BOUNDS, ids=IDS)
def test_a_value_past_its_limit_is_refused_at_its_field_naming_the_limit(base, path, at, over, shown):
    found = validate(with_value(base, path, over))
    assert [type(x) for x in found] == [Problem], found
    assert found[0].path == dotted(path) and shown in found[0].message, found[0]


@pytest.mark.parametrize("base, path, at, over, shown", BOUNDS, ids=IDS)
def test_a_value_at_its_limit_is_accepted(base, path, at, over, shown):
    found = validate(with_value(base, path, at))
    assert [type(x) for x in found] == [Loaded], found


# the limits given as whole numbers, with ``at`` the limit itself
NUMERIC = [(b, p, at, s) for b, p, at, over, s in BOUNDS if isinstance(at, int) and not isinstance(at, bool)
           and over == at + 1]


@FAST
@given(case=st.sampled_from(NUMERIC), excess=st.one_of(st.integers(1, 10**6), st.integers(1, 10**400)),
       as_float=st.booleans())
def test_anything_past_a_limit_is_refused_with_the_limit_named(case, excess, as_float):
    base, path, at, shown = case
    value = at + excess
    if as_float:
        value = float(value) if value < 10**308 else math.inf
        if value <= at:
            return  # the float rounded back onto the limit
    [p] = validate(with_value(base, path, value))
    assert isinstance(p, Problem) and p.path == dotted(path) and shown in p.message, p


WILD = st.one_of(
    st.integers(-(10**400), 10**400), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, 5e-324, 2**63, -(2**63), True, None]),
    st.text(max_size=20), st.sampled_from(["9" * 4000, "9" * 400 + "Pi", "1e999", "inf", "nan", "-0", "9" * 300 + "d",
                                           "1/" + "0" * 300 + "1ms", "9" * 400 + "/s", "lognormal(1m, 1e308)",
                                           "x" * 100_000]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def leaves(d, path=()):
    """Every field path of a document, down to its values."""
    items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
    out = [path] if path else []
    for k, v in items:
        out += leaves(v, path + (k,))
    return out


FIELDS = [(d, path) for d in (APP, TENANT, FLEET, VC, SCENARIO) for path in leaves(d)]


@FAST
@given(case=st.sampled_from(FIELDS), value=WILD)
def test_no_value_anywhere_makes_validation_raise(case, value):
    base, path = case
    found = validate(with_value(base, path, value))
    assert found and all(isinstance(x, (Loaded, Problem)) for x in found)
    if base is APP and isinstance(found[0], Loaded):  # what is accepted compiles into the int64 tables
        spec = found[0].doc.spec
        a = build_application("x", "t", spec)
        for comp in a.components:
            vec, _ = resource_vector(tiny_fleet(), comp.resources)
            assert vec.dtype == np.int64
            assert comp.size <= q.MEMBERS.most and abs(comp.priority) <= q.PRIORITY.most
            for s in (comp.duration_s, comp.work_s, comp.checkpoint_every_s):
                assert s is None or 0 <= s <= q.DURATION.most


@functools.cache
def tiny_fleet():
    """The fleet of ``FLEET``, built once: what accepted requests compile against."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "f.yaml")
        path.write_text(yaml.safe_dump_all([FLEET, {**TENANT, "metadata": {"name": "t"}}], sort_keys=False))
        return load_world([str(path)]).fleet


# ------------------------------------------------------------------ files: exit 2 with file, line and path


def run_cli(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stderr


def test_a_poison_value_in_a_file_exits_2_naming_file_line_and_field(tmp_path):
    path = tmp_path / "apps.yaml"
    path.write_text("apiVersion: suanli/v1\nkind: Application\nmetadata: {name: big, tenant: t}\nspec:\n"
                    "  components:\n    - name: c\n      lifetime: service\n"
                    "      resources: {cpu: 1.0e+300, memory: 100000000000000000000Ti}\n")
    code, err = run_cli("validate", path)
    assert code == 2 and "Traceback" not in err
    assert f"error: {path}:8: document 0 (Application big): spec.components[0].resources.cpu: " \
           "1e+300 is above the limit: at most 1000000 cores" in err
    assert "spec.components[0].resources.memory: '100000000000000000000Ti' is above the limit: at most 1Pi" in err


def test_a_number_of_thousands_of_digits_is_a_problem_not_a_traceback(tmp_path):
    path = tmp_path / "apps.yaml"
    path.write_text("apiVersion: suanli/v1\nkind: Application\nmetadata: {name: big, tenant: t}\nspec:\n"
                    f"  components:\n    - {{name: c, lifetime: service, replicas: {'9' * 5000}}}\n"
                    "---\napiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: t}\nspec: {weight: 0}\n")
    code, err = run_cli("validate", path)
    assert code == 2 and "Traceback" not in err
    assert f"{path}:6: document 0 (Application big): spec.components[0].replicas: a whole number of 5000 digits" in err
    assert "document 1 (Tenant t): spec.weight: expected a number > 0" in err  # the next document is read


def test_the_fleet_as_a_whole_is_bounded(tmp_path):
    groups = [node_group(f"g{i}", count=1_000_000) for i in range(11)]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
                                    "spec": {"sites": [site("s", groups=groups)]}}))
    code, err = run_cli("validate", path)
    assert code == 2
    assert "spec.sites[0].nodeGroups[10].count: the fleet reaches 11000000 nodes here; at most 10000000" in err


def test_an_application_as_a_whole_is_bounded():
    comps = [{"name": f"c{i}", "lifetime": "service", "replicas": 100_000} for i in range(11)]
    [p] = validate(doc("Application", {"components": comps}, tenant="t"))
    assert p.path == "spec.components" and "1100000 tasks together; an application has at most 1000000" in p.message


# ------------------------------------------------------------------ what slips past validation fails alone


def test_an_application_that_cannot_be_scheduled_fails_alone_and_the_rest_goes_on(tmp_path):
    fine = app("fine", components=[component(cpu=1)])
    later = app("later", components=[component(cpu=1)])
    path = scenario(tmp_path, [site("s", groups=[node_group(count=1, cpu=8)])], [fine, later],
                    arrivals=[{"at": 0, "app": "fine"}, {"at": "10m", "app": "later"}])
    world = load_world([str(path)])
    template = world.apps[0]
    poison = dataclasses.replace(template, name="poison", components=tuple(
        dataclasses.replace(c, app="poison", resources=Resources(10**30, 1)) for c in template.components))
    sim = Simulation(dataclasses.replace(world, apps=(poison, *world.apps)))
    sim.run()
    assert sim.view.tasks["poison/c/0"].status == "failed"
    [failed] = [e for e in sim.events if e["kind"] == "failed"]
    assert failed["task"] == "poison/c/0" and failed["reason"].startswith("cannot be scheduled: OverflowError")
    assert sim.view.tasks["fine/c/0"].status == "running"
    placed = {e["task"]: e["t"] for e in sim.events if e["kind"] == "placed"}
    assert placed == {"fine/c/0": 0, "later/c/0": 600}  # later instants were scheduled as usual


class _FailsOnSecond:
    """A placement policy that places one member and then raises."""

    repeatable = False

    def __init__(self):
        self.calls = 0

    def place(self, table, req, mask, network, rng):
        from suanli.scheduling.select import allocation

        self.calls += 1
        if self.calls > 1:
            raise OverflowError("cannot place this one")
        return allocation(table, req, int(np.flatnonzero(mask)[0]))


def test_a_group_whose_placement_raises_leaves_the_table_as_it_was(tmp_path):
    path = scenario(tmp_path, [site("s", groups=[node_group(count=2, cpu=8)])], [app()])
    world = load_world([str(path)])
    state = PlacementState(world)
    from suanli.scheduling.request import compile_request

    req = compile_request(world.fleet, Resources(1000, 1024))
    before = state.nodes.free.copy()
    with pytest.raises(OverflowError):
        place_group(state.nodes, [req, req], world.fleet.network, np.random.default_rng(0), policy=_FailsOnSecond())
    assert (state.nodes.free == before).all()
