"""The binding constraint of an unscheduled task: the reason listed first,
whose relaxation alone lets the task fit, with its figures.

Random small worlds (nodes of a few shapes, some already filled by a
higher-priority tenant, a tenant with allowed sites and a quota) and one task
that asks for cpu, maybe GPUs of a model, maybe an arch. Whenever the task is
not placed and a binding constraint is named, the documents are changed in
that one respect (the request lowered to what the best node has free, the
model or arch dropped, the sites or quota opened) and the task must then be
placed.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings, strategies as st

from builders import app, component, gpu, node_group, site, tenant, world
from conftest import schedule_json

TALLY: Counter = Counter()


@st.composite
def worlds(draw):
    sites = []
    for i in range(draw(st.integers(1, 3))):
        groups = []
        for j in range(draw(st.integers(1, 2))):
            accels = [gpu(draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from(["A100", "H100"])), shareable=False)] \
                if draw(st.booleans()) else []
            groups.append(node_group(f"g{j}", count=draw(st.integers(1, 3)), cpu=draw(st.sampled_from([4, 8, 16, 32])),
                                     arch=draw(st.sampled_from(["x86_64", "aarch64"])), accelerators=accels))
        sites.append(site(f"s{i}", groups=groups))
    fill = draw(st.lists(st.sampled_from([2, 4, 8]), max_size=4))
    names = [s["name"] for s in sites]
    allowed = draw(st.sampled_from([None, names[:1], names[1:] or None]))
    has_gpus = any(g.get("accelerators") for s in sites for g in s["nodeGroups"])
    quota = draw(st.sampled_from([None, {"cpu": 4}, {"cpu": 12}, {"cpu": 64}, *([{"gpu": 2}] if has_gpus else [])]))
    task = {"cpu": draw(st.sampled_from([2, 4, 8, 16, 24]))}
    if draw(st.booleans()):
        task["gpus"] = draw(st.sampled_from([1, 2, 4]))
        task["model"] = draw(st.sampled_from([None, "A100", "H100", "V100"]))
    task["arch"] = draw(st.sampled_from([None, "aarch64", "x86_64"]))
    return sites, fill, allowed, quota, task


def docs(sites, fill, allowed, quota, task, tmp_path):
    spec = {}
    if allowed is not None:
        spec["allowedSites"] = allowed
    if quota is not None:
        spec["quota"] = quota
    tenants = [tenant("t", **spec), tenant("f")]
    fillers = [app(f"fill{k}", tenant="f", priority=100, preemptible=False, components=[component(cpu=c)])
               for k, c in enumerate(fill)]
    extra = {}
    if task.get("arch"):
        extra["platform"] = {"arch": [task["arch"]]}
    accels = []
    if task.get("gpus"):
        accels = [{"kind": "gpu", "count": task["gpus"], **({"model": task["model"]} if task.get("model") else {})}]
    comp = component("w", cpu=task["cpu"], accelerators=accels, **extra)
    return world(tmp_path, sites=sites, tenants=tenants, apps=[*fillers, app("task", tenant="t", components=[comp])])


def relaxed(binding: dict, allowed, quota, task):
    """The one change that the binding constraint says would let the task fit."""
    allowed, quota, task = allowed, dict(quota or {}) or None, dict(task)
    code, resource = binding["code"], binding.get("resource")
    if code == "capacity" and resource == "cpu":
        task["cpu"] = binding["free"] / 1000
    elif code == "capacity" and resource == "gpu":
        task["gpus"] = binding["free"] // 1000
    elif code == "model":
        task["model"] = None
    elif code == "arch":
        task["arch"] = None
    elif code == "site":
        allowed = None
    elif code == "quota":
        quota = None
    else:
        raise AssertionError(f"a binding constraint with no known relaxation: {binding}")
    return allowed, quota, task


@given(worlds())
@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_first_reason_is_one_whose_relaxation_lets_the_task_fit(tmp_path_factory, case):
    sites, fill, allowed, quota, task = case
    tmp = tmp_path_factory.mktemp("w")
    r = schedule_json(docs(sites, fill, allowed, quota, task, tmp))
    left = [u for u in r["unscheduled"] if u["task"] == "task/w/0"]
    if not left:
        TALLY["placed at once"] += 1
        return
    why = left[0]["why"]
    assert sum(w["count"] for w in why) == sum(left[0]["reasons"].values())  # the same counts, reordered
    first = why[0]
    if not first["binding"]:
        TALLY["no single obstacle"] += 1
        return
    assert all(not w["binding"] for w in why[1:])
    if first.get("requested") is not None:  # a capacity check's figures (free), or a quota's (allowed)
        assert first["gap"] == first["requested"] - first.get("free", first.get("allowed")) > 0, first
    TALLY[f"binding: {first['code']}" + (f" {first['resource']}" if first["code"] == "capacity" else "")] += 1
    again = tmp_path_factory.mktemp("w")
    r2 = schedule_json(docs(sites, fill, *relaxed(first, allowed, quota, task), again))
    assert any(p["task"] == "task/w/0" for p in r2["placements"]), (first, r2["unscheduled"])


def test_the_generated_cases_name_binding_constraints_of_several_kinds():
    kinds = [k for k in TALLY if k.startswith("binding: ")]
    assert TALLY["placed at once"] > 0 and sum(TALLY[k] for k in kinds) >= 20 and len(kinds) >= 5, TALLY
    assert TALLY["binding: quota"] > 0 and TALLY["binding: capacity cpu"] > 0, TALLY


WAITING_WORLD = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
    - {name: cloud, tier: cloud, nodeGroups: [{name: g, count: 1, arch: x86_64, cpu: 64, memory: 256Gi,
                                                accelerators: [{kind: gpu, model: A100, count: 8}]}]}
    - {name: edge, tier: edge, nodeGroups: [{name: n, count: 1, arch: x86_64, cpu: 16, memory: 64Gi}]}
    - {name: edge2, tier: edge, nodeGroups: [{name: n, count: 1, arch: x86_64, cpu: 4, memory: 8Gi}]}
  links:
    - {between: [edge, cloud], rttMs: 10, bandwidth: 10Gbps}
  populations:
    - name: drones
      count: 20
      sites: drone-##
      nodeGroups: [{name: soc, count: 1, arch: aarch64, cpu: 4, memory: 8Gi}]
      attach: {to: {tier: edge}, rttMs: 20, bandwidth: 100Mbps}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: fly}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: ml}
spec: {quota: {cpu: 64, memory: 256Gi, gpu: 1}}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: see, tenant: fly}
spec:
  each: drones
  components:
    - {name: s, lifetime: service, resources: {cpu: 8, memory: 1Gi}, near: {site: "{site}", maxRttMs: 25}}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: train, tenant: ml}
spec:
  components:
    - {name: t, lifetime: job, duration: 1h, replicas: 5,
       resources: {cpu: 1, memory: 1Gi, accelerators: [{kind: gpu, count: 1}]}}
"""


def test_why_tasks_wait_counts_each_task_once_by_what_binds_and_folds_the_devices(tmp_path):
    """Four GPU jobs wait for their tenant's quota, though nodes without a GPU
    are mentioned as often; drones' services wait, each near its own drone.
    The summary ranks by what holds each task back (its first reason), each
    task once, and a bound near each drone is one line, not one a drone."""
    import json

    from typer.testing import CliRunner

    from suanli.cli import app
    from suanli.phrases import OWN_DEVICE

    path = tmp_path / "w.yaml"
    path.write_text(WAITING_WORLD)
    runner = CliRunner()
    out = json.loads(runner.invoke(app, ["schedule", str(path), "-o", "json"]).stdout)
    m = out["metrics"]
    first = m["unscheduled_by_first_reason"]
    assert first["tenant ml quota for gpu: 1 more needed"] == 4 and "no gpu" not in first, first
    assert first[OWN_DEVICE] > 0 and not [k for k in first if k.startswith("beyond 25 ms of drone-")], first
    assert sum(first.values()) == m["tasks"]["unscheduled"] == len(out["unscheduled"])
    mentions = m["unscheduled_reasons"]  # (every reason each mentions: the devices one by one, no gpu as often)
    assert mentions["no gpu"] == 4 and len([k for k in mentions if k.startswith("beyond 25 ms of drone-")]) > 1
    table = runner.invoke(app, ["schedule", str(path), "-o", "summary"], terminal_width=200).stdout
    rows = table.split("Why tasks wait")[1]
    assert OWN_DEVICE in rows and "tenant ml quota for gpu" in rows and "no gpu" not in rows, rows
    assert "drone-0" not in rows, rows
    path.write_text(WAITING_WORLD + "---\napiVersion: suanli/v1\nkind: Scenario\nmetadata: {name: s}\n"
                                    "spec: {until: 1m}\n")
    assert runner.invoke(app, ["simulate", str(path), "--out", str(tmp_path / "out")]).exit_code == 0
    metrics = json.loads((tmp_path / "out" / "result.json").read_text())["metrics"]
    pending = metrics["pending_by_first_reason"]  # the same in a simulation's results and its report
    assert pending["tenant ml quota for gpu: 1 more needed"] == 4 and OWN_DEVICE in pending, pending
    assert sum(pending.values()) == metrics["tasks"]["pending"]
    report = (tmp_path / "out" / "report.html").read_text()
    assert f'<span class="chip">{OWN_DEVICE} <b>' in report and "beyond 25 ms of drone-00 <b>" not in report


def test_a_task_larger_than_any_node_reads_that_it_can_never_fit_there(tmp_path):
    """8 GPUs asked on nodes of 4: the binding entry carries the most those
    nodes hold even empty (``capacity``), and its line says it can never fit
    there, not how many more are needed; a task that only waits for room
    carries no capacity."""
    import json

    from typer.testing import CliRunner

    from suanli.cli import app
    from suanli.phrases import binding_line

    path = tmp_path / "w.yaml"
    path.write_text("""\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
    - {name: cloud, tier: cloud, nodeGroups: [{name: g, count: 4, arch: x86_64, cpu: 64, memory: 256Gi,
                                                accelerators: [{kind: gpu, model: A100, count: 4}]}]}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: a, tenant: t}
spec:
  components:
    - {name: eight, lifetime: job, duration: 1h, resources: {cpu: 8, memory: 8Gi, accelerators: [{kind: gpu, count: 8}]}}
    - {name: four, lifetime: job, duration: 1h, replicas: 5,
       resources: {cpu: 8, memory: 8Gi, accelerators: [{kind: gpu, count: 4}]}}
""")
    out = json.loads(CliRunner().invoke(app, ["schedule", str(path), "-o", "json"]).stdout)
    why = {u["task"]: u["why"][0] for u in out["unscheduled"]}
    first = why["a/eight/0"]
    assert first["binding"] and first["resource"] == "gpu" and first["capacity"] == 4000 and first["requested"] == 8000
    assert binding_line(first) == ("insufficient gpu: 8 requested, and the most any of those 4 nodes holds even empty "
                                   "is 4: it can never fit there"), binding_line(first)
    waits = [w for task, w in why.items() if task.startswith("a/four/")]  # one of five waits for a node of 4
    assert waits and all(w["binding"] and "capacity" not in w and w["gap"] > 0 for w in waits), waits
