"""``suanli schedule --workers N``: shard actors and a global actor on a real
Ray cluster (one, started for this file on loopback, stopped after it),
run as a user runs it: the output is the one process's, byte for byte, in
every format; bad input and a missing cluster are one clear message and
exit status 2."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raycluster import LocalRayCluster

pytestmark = pytest.mark.long(40)

if os.environ.get("CI"):
    import ray  # noqa: F401  (CI installs the ray extra: its absence is a failure, not a skip)
else:
    pytest.importorskip("ray", reason="the ray extra is not installed")

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"
SUANLI = [sys.executable, "-m", "suanli.cli"]

# cars whose own services only they can take (order-free: the shards'), vans that other
# vans' assistants may reach (the global part's), batch jobs of weighted tenants on the clouds
WORLD = """
apiVersion: suanli/v1
kind: Fleet
metadata: {name: fleet}
spec:
  sites:
    - {name: cloud-0, tier: cloud, nodeGroups: [{name: c, count: 3, arch: x86_64, cpu: 32, memory: 64Gi}]}
    - {name: cloud-1, tier: cloud, nodeGroups: [{name: c, count: 3, arch: x86_64, cpu: 32, memory: 64Gi}]}
    - {name: edge-0, tier: edge, nodeGroups: [{name: e, count: 2, arch: x86_64, cpu: 16, memory: 32Gi}]}
    - {name: edge-1, tier: edge, nodeGroups: [{name: e, count: 2, arch: x86_64, cpu: 16, memory: 32Gi}]}
  links:
    - {between: [cloud-0, cloud-1], rttMs: 10, bandwidth: 100Gbps}
    - {between: [edge-0, cloud-0], rttMs: 5, bandwidth: 10Gbps}
    - {between: [edge-1, cloud-1], rttMs: 5, bandwidth: 10Gbps}
  populations:
    - name: cars
      count: 60
      sites: car-##
      nodeGroups: [{name: soc, count: 1, arch: aarch64, cpu: 4, memory: 8Gi}]
      attach: {to: {tier: edge}, rttMs: 2, bandwidth: 1Gbps}
    - name: vans
      count: 12
      sites: van-##
      nodeGroups: [{name: box, count: 1, arch: x86_64, cpu: 24, memory: 32Gi}]
      attach: {to: {tier: edge}, rttMs: 2, bandwidth: 1Gbps}
---
{apiVersion: suanli/v1, kind: Tenant, metadata: {name: fleet-op}, spec: {}}
---
{apiVersion: suanli/v1, kind: Tenant, metadata: {name: lab}, spec: {weight: 2}}
---
{apiVersion: suanli/v1, kind: Tenant, metadata: {name: shop}, spec: {}}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: car, tenant: fleet-op}
spec:
  each: cars
  components:
    - {name: camera, lifetime: service, resources: {cpu: 1, memory: 1Gi}, near: {site: "{site}", maxRttMs: 0.2}}
    - {name: planner, lifetime: service, priority: 10, resources: {cpu: 1, memory: 2Gi},
       near: {site: "{site}", maxRttMs: 0.2}}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: van, tenant: fleet-op}
spec:
  each: vans
  components:
    - {name: camera, lifetime: service, resources: {cpu: 2, memory: 2Gi}, near: {site: "{site}", maxRttMs: 0.2}}
    - {name: assist, lifetime: service, resources: {cpu: 16, memory: 8Gi}, near: {site: "{site}", maxRttMs: 30}}
""" + "".join(f"""---
apiVersion: suanli/v1
kind: Application
metadata: {{name: {tenant}-jobs, tenant: {tenant}}}
spec:
  components:
    - {{name: j, lifetime: job, duration: 10m, replicas: 40, resources: {{cpu: 2, memory: 1Gi}},
       sites: {{tier: [cloud]}}}}
""" for tenant in ("lab", "shop"))


@pytest.fixture(scope="module")
def cluster():
    c = LocalRayCluster(["head"]).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sharded") / "world.yaml"
    path.write_text(WORLD)
    return path


def run(*args: str, timeout: float = 300, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_ADDRESS": ""}
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run([*SUANLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_shards_on_ray_give_the_one_process_outcome(cluster, world, tmp_path):
    """On the cluster (``--ray``), and on a local Ray started for the run
    (the static example's JSON): that one authenticates with a token of the
    run's own and leaves none in the user's home."""
    static = [str(EXAMPLES / f) for f in ("city-fleet.yaml", "tenants.yaml", "static-heterogeneous.yaml")]
    for files, fmt in (([str(world)], "ndjson"), ([str(world)], "summary"), (static, "json")):
        one = run("schedule", *files, "-o", fmt, "--seed", "5")
        where = ["--ray", cluster.address] if files != static else []
        two = run("schedule", *files, "-o", fmt, "--seed", "5", "--workers", "2", *where, home=tmp_path)
        assert one.returncode == 0, one.stderr
        assert two.returncode == 0, two.stderr
        assert two.stdout == one.stdout, fmt
        assert "did not stand" not in two.stderr  # the shards' answers were used
        if files == [str(world)]:  # the cars' services went to the shards, the rest to the global actor
            split = re.search(r"split: 2 shard\(s\) placed (\d+) task\(s\) alone .*the global actor decided (\d+)",
                              two.stderr)
            assert split and int(split[1]) == 120 and int(split[2]) == 12 * 2 + 80, two.stderr
        if fmt == "ndjson":
            assert one.stdout.count('"kind":"placement"') > 200
    assert not (tmp_path / ".ray" / "auth_token").exists()


def test_a_split_run_explains_bad_input_and_a_missing_cluster(cluster, world, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORLD.replace("cpu: 32, memory: 64Gi", "cpu: 32, memory: 64XB", 1))
    out = run("schedule", str(bad), "--workers", "2", "--ray", cluster.address)
    assert out.returncode == 2, out.stderr
    assert "bad.yaml:" in out.stderr and "memory" in out.stderr and "Traceback" not in out.stderr
    out = run("schedule", str(world), "--ray", cluster.address)
    assert out.returncode == 2 and "--workers" in out.stderr and "Traceback" not in out.stderr
    out = run("schedule", str(world), "--workers", "2", "--ray", "127.0.0.1:1", timeout=60)
    assert out.returncode == 2 and "no Ray cluster at 127.0.0.1:1" in out.stderr and "Traceback" not in out.stderr
    out = run("schedule", str(world), "--workers", "0")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_a_shard_killed_is_started_anew_and_the_outcome_stands(cluster, world):
    """A shard's process killed (SIGKILL) once it ran and before it was sent
    its slice: Ray starts the actor anew, and the new process is sent the
    slice and decides; the outcome is one process's, and the killed
    process's part never arrives (the part that does comes from the new
    process)."""
    import ray

    from suanli.output import metrics_json, outcome_text_lines
    from suanli.scheduling.actors import schedule_sharded
    from suanli.scheduling.static import schedule
    from suanli.spec.build import load_world

    killed: list[int] = []

    def kill_one(pids: list[int]) -> None:
        os.kill(pids[0], signal.SIGKILL)
        killed.append(pids[0])
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pids[0]}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # (a zombie until its raylet reaps it: gone from /proc once reaped)

    one = load_world([world])
    expected = "".join(outcome_text_lines(schedule(one, 5)))
    ray.init(address=cluster.address, namespace="suanli-test", log_to_driver=False)
    try:
        run = schedule_sharded(ray, [str(world)], None, False, 5, None, 2, started=kill_one)
        assert killed and run.report["pids"][0] != killed[0] and run.report["pids"][1] == run.report["started_pids"][1]
        assert not run.report["fallback"] and run.report["shards"][0] > 0
        assert "".join(run.lines()) == expected
        assert run.summary() == metrics_json(schedule(load_world([world]), 5))
    finally:
        ray.shutdown()
