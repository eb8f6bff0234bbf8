"""The Ray executor on a real Ray cluster of three labelled nodes on this
machine (car-1, edge-1, cloud-north), started by the test: tasks land on the
nodes the scheduler chose, killing the edge node's raylet re-places its
tasks and restores the game from its last checkpoint in the object store,
and a new Ray node with the edge's label makes the edge usable again."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from live import (GAME, GANG_COUNTER, GANG_GROWS, GANG_POLICY, LIVE, check_gang_grew, events, hello_ran, log_text,
                  one_site, placements, ran_as_a_tenant, runs_of, simulated, suanli)

from raycluster import LocalRayCluster

pytestmark = pytest.mark.long(160)

if os.environ.get("CI"):
    import ray  # noqa: F401  (CI installs the ray extra: its absence is a failure, not a skip)
else:
    pytest.importorskip("ray", reason="the ray extra is not installed")

NODES = ["cloud-north", "car-1", "edge-1"]  # the first is the head, where the driver's objects live
AUTOPILOT_ENDS = 28  # s: the game stays on the edge until then


@pytest.fixture(scope="module")
def cluster():
    c = LocalRayCluster(NODES).start()
    try:
        yield c
    finally:
        pids = c.pids()
        c.stop()
        assert pids and c.pids() == [], "processes of the test's Ray cluster are left"


def landed(log: str) -> list[str]:
    """The label of the Ray node each run of a task's process ran on, as its actor saw it."""
    return re.findall(r"^suanli: on Ray node \w+ labelled suanli\.node=(\S+)$", log, re.M)


def read_log(work, task: str) -> str:
    path = work / "logs" / (task.replace("/", "%2F") + ".log")
    return path.read_text() if path.exists() else ""


def edge_checkpointed(work) -> bool:
    log = read_log(work, GAME)
    return bool(re.search(r"labelled suanli\.node=edge-1\n(.*\n)*tick \d+", log))


def shipped(work, task: str) -> bool:
    return "suanli: on Ray node" in read_log(work, task)


def scenario(tmp_path: Path, extra_events: list[dict] = ()) -> Path:
    """The live autodrive example with autopilot running until ``AUTOPILOT_ENDS``
    rather than 18s: room for a Ray worker's start (seconds on a busy machine)
    and a node's death to be noticed while the game is on the edge."""
    with open(LIVE) as f:
        docs = list(yaml.safe_load_all(f))
    spec = docs[-1]["spec"]
    spec["until"] = f"{AUTOPILOT_ENDS + 8}s"
    spec["events"] = [{"at": f"{AUTOPILOT_ENDS}s", "kind": "delete", "app": "autopilot"}, *extra_events]
    folder = tmp_path / "live"
    shutil.copytree(LIVE.parent, folder)
    path = folder / "autodrive.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_tasks_land_on_the_labelled_nodes_and_a_lost_edge_is_replaced(cluster, tmp_path):
    work = tmp_path / "w"
    path = scenario(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from suanli.cli import main; main()", "run", str(path), "--executor", "ray",
         "--ray-address", cluster.address, "--work-dir", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # kill the edge once the game has checkpointed there (its edge output was shipped
        # with the checkpoint) and the map-update job on the edge has ended (its log came back)
        deadline = time.monotonic() + 60
        while not (edge_checkpointed(work) and shipped(work, "autopilot/map-update/0")):
            assert time.monotonic() < deadline and proc.poll() is None, "the game never checkpointed on the edge"
            time.sleep(0.05)
        cluster.kill_raylet("edge-1")
        cluster.join("edge-1")  # the machine comes back: a new Ray node with the same label
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    live = events(work / "out")

    lost = [e for e in live if e["kind"] == "nodeLost"]
    assert [e["node"] for e in lost] == ["edge-1/cpu-0"] and "died" in lost[0]["reason"]
    assert [e["task"] for e in live if e["kind"] == "lost"] == [GAME]

    # the decisions are the twin's, given the node down when the executor saw it die
    found = [e for e in live if e["kind"] == "nodeFound"]
    assert [e["node"] for e in found] == ["edge-1/cpu-0"] and found[0]["t"] > lost[0]["t"]
    assert [e["t"] for e in live if e["kind"] == "nodeUp"] == [found[0]["t"]]  # usable again

    twin = scenario(tmp_path / "twin", [{"at": lost[0]["t"], "kind": "nodeDown", "node": "edge-1/cpu-0"},
                                        {"at": found[0]["t"], "kind": "nodeUp", "node": "edge-1/cpu-0"}])
    assert placements(live) == placements(simulated(twin, tmp_path))

    # car -> edge (autopilot starts) -> cloud (the edge is lost) -> edge (it is back, and nearer
    # the car than the cloud) -> car (autopilot ends)
    # (when the edge is back before autopilot ends, as it is unless the machine is very slow)
    back = ["edge-1"] if found[0]["t"] < AUTOPILOT_ENDS else []
    game_sites = [e["site"] for e in live if e["kind"] == "placed" and e["task"] == GAME]
    assert game_sites == ["car-1", "edge-1", "cloud-north", *back, "car-1"]
    log = log_text(work, GAME)
    assert landed(log) == game_sites  # where the actors really ran
    assert landed(log_text(work, "autopilot/control/0")) == ["car-1"]

    # restored from the last checkpoint: after the loss it resumes at or before the edge's last tick
    # (what the edge printed after its last log shipment went with it), and never from zero;
    # every planned move resumes exactly where the task stopped
    # (a run stopped again at once may end before the program printed anything: that is
    # allowed, and its state goes on unchanged)
    runs = runs_of(log)
    assert len(runs) == len(game_sites)
    assert runs[0][0] == 0 and runs[1][0] == runs[0][1][-1]
    after_loss = [r for r, _ in runs[2:] if r is not None]
    assert runs[1][0] < after_loss[0] <= runs[1][1][-1]
    printed = [ticks for _, ticks in runs[2:]]
    for i in range(3, len(runs)):
        if runs[i][0] is not None:
            before = [t for ticks in printed[:i - 2] for t in ticks] or [after_loss[0]]
            assert runs[i][0] == before[-1]
    assert any(e["kind"] == "checkpointed" and e["node"] == "edge-1/cpu-0" for e in live)
    assert any(e["kind"] == "stateRestored" and e["node"] == "cloud-north/cpu-0" for e in live)


def test_an_elastic_gang_grows_on_ray_and_its_new_member_starts_with_the_gangs_state(cluster, tmp_path):
    """A gang of 1 grown to 2 on the head's Ray node (its site named so): its
    members' actors are stopped, what they saved is merged in the object
    store, and both members of the new width start with it."""
    # (the turn at 4 s: a Ray worker's start takes seconds on a busy machine, and the first run must count)
    path = one_site(tmp_path, GANG_GROWS % f"{{command: [sh, -c, {json.dumps(GANG_COUNTER)}]}}", until="8s",
                    extra=GANG_POLICY.replace("every: 2s", "every: 4s"))
    path.write_text(path.read_text().replace("- name: here\n", f"- name: {NODES[0]}\n"))
    work = tmp_path / "w"
    r = suanli("run", path, "--executor", "ray", "--ray-address", cluster.address, "--work-dir", work)
    assert r.returncode == 0, r.stderr
    evs = events(work / "out")
    assert {e["site"] for e in evs if e["kind"] == "placed"} == {NODES[0]}
    assert [e["to"] for e in evs if e["kind"] == "gangStateSaved"] == ["object store"]
    check_gang_grew(evs, lambda task: read_log(work, task))


def test_serve_runs_tasks_on_the_ray_executor_and_ray_nodes_that_join_register(cluster, tmp_path):
    """``suanli serve --executor ray`` runs a tenant's task on the Ray node the
    scheduler chose. Then a Ray node labelled with a site of the fleet
    (suanli.site) and a name it does not have (suanli.node) becomes a node of
    the fleet (as an agent's, with Ray's count of its CPUs) without a file
    edit; its raylet killed, the node is lost as the executor sees it die."""
    import httpx

    from serving import ADMIN, Server, free_port, wait

    from suanli.server.store import sqlite_url

    fleet = tmp_path / "fleet.yaml"
    with open(LIVE) as f:
        fleet.write_text(yaml.safe_dump_all([d for d in yaml.safe_load_all(f) if d["kind"] in ("Fleet", "Tenant")]))
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(sqlite_url(tmp_path / "s.db"), free_port(), log, "--executor", "ray",
                        "--ray-address", cluster.address, "--work-dir", str(tmp_path / "w"), speed=1,
                        files=(fleet,))
        server.start()
        admin = {"Authorization": f"Bearer {ADMIN}"}

        def node() -> dict | None:
            r = httpx.get(server.url + "/v1/nodes/edge-1/ray-7", headers=admin, timeout=10)
            return r.json() if r.status_code == 200 else None

        try:
            env = {"SUANLI_SERVER": server.url, "SUANLI_TOKEN": ADMIN}
            mine = {**env, "SUANLI_TOKEN": suanli("token", "create", "--tenant", "car-1-owner", env=env).stdout.strip()}
            r = hello_ran(tmp_path, mine, timeout=60, extra="near: {site: edge-1},")
            assert r.returncode == 0, r.stderr
            assert "hello from edge-1/cpu-0" in r.stdout and landed(r.stdout) == ["edge-1"]
            assert ran_as_a_tenant(r.stdout), r.stdout  # the actor's task: no server secret, a tenant's uid

            # what a task leaves behind on its Ray node (a daemon, a double fork) ends with it
            from test_server_containment import sleeping

            marker = f"96{os.getpid() % 1000:03d}"
            esc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "esc"},
                   "spec": {"components": [{"name": "c", "lifetime": "service", "near": {"site": "edge-1"},
                                            "resources": {"cpu": "100m", "memory": "32Mi"},
                                            "run": {"command": ["sh", "-c", f"setsid -f sleep {marker}1; "
                                                                f"(sleep {marker}2 &); sleep {marker}3"]}}]}}
            tenant = {"Authorization": f"Bearer {mine['SUANLI_TOKEN']}"}
            assert httpx.post(server.url + "/v1/applications", json=esc, headers=tenant).status_code == 201
            wait(lambda: len(sleeping(marker)) == 3, timeout=60, what="the service and its daemons")
            assert httpx.delete(server.url + "/v1/applications/esc", headers=tenant).status_code == 204
            wait(lambda: not sleeping(marker), timeout=30, what="the deleted service's daemons to end")

            assert node() is None
            cluster.join("ray-7", site="edge-1")
            got = wait(lambda: (n := node()) and n["state"] == "ready" and n, timeout=60, what="edge-1/ray-7 joined")
            assert got["capacity"]["cpu_milli"] == 1000 * cluster.cpus, got
            agents = httpx.get(server.url + "/v1/agents", headers=admin).json()
            assert [(a["name"], a["state"]) for a in agents] == [("edge-1/ray-7", "ready")]
            cluster.kill_raylet("ray-7")
            wait(lambda: node()["state"] == "down", timeout=20, what="edge-1/ray-7 lost")
            events = httpx.get(server.url + "/v1/events", headers=admin, params={"limit": 1000}).json()
            lost = [e["body"]["reason"] for e in events if e["kind"] == "nodeLost"]
            assert lost and "died" in lost[-1], lost  # the executor saw it die (not its lease running out)
        finally:
            server.stop()
