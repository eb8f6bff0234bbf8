"""What a server runs, changed while it runs, against a real ``suanli serve``
driven by the CLI as an operator drives it: a tenant applied, its token
minted, its work placed, its quota lowered; nodes registered by ``suanli
agent``, one killed and lost with its work moved, found again when it comes
back; a tenant deleted with its applications. No restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from live import suanli
from serving import ADMIN, Server, free_port, wait

from suanli.server.store import sqlite_url

pytestmark = pytest.mark.long(50)

FLEET = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: small}
spec:
  sites:
    - name: dc
      tier: cloud
      nodeGroups:
        - {name: cpu, count: 1, arch: x86_64, cpu: "4", memory: 16Gi}
    - name: edge
      tier: edge
      nodeGroups: []
  links:
    - {between: [dc, edge], rttMs: 10, bandwidth: 1Gbps}
"""
TENANTS = """\
apiVersion: suanli/v1
kind: Tenant
metadata: {name: alpha}
spec: {weight: 1}
"""
GAMMA = """\
apiVersion: suanli/v1
kind: Tenant
metadata: {{name: gamma}}
spec:
  weight: 2
  quota: {{cpu: "{cpu}"}}
"""


def app(name: str, replicas: int, cpu: str) -> str:
    return f"""\
apiVersion: suanli/v1
kind: Application
metadata: {{name: {name}}}
spec:
  components:
    - name: c
      lifetime: service
      replicas: {replicas}
      resources: {{cpu: "{cpu}", memory: 1Gi}}
"""


@pytest.fixture
def runtime(tmp_path):
    (tmp_path / "fleet.yaml").write_text(FLEET)
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    log = open(tmp_path / "server.log", "ab")
    server = Server(sqlite_url(tmp_path / "s.db"), free_port(), log, speed=1,
                    files=(tmp_path / "fleet.yaml", tmp_path / "tenants.yaml"))
    server.start()
    agents: list[subprocess.Popen] = []
    yield server, tmp_path, agents
    for a in agents:
        if a.poll() is None:
            a.kill()
            a.wait()
    server.stop()
    log.close()


def cli(server: Server, token: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    got = suanli(*args, env={"SUANLI_SERVER": server.url, "SUANLI_TOKEN": token})
    if ok:
        assert got.returncode == 0, got.stdout + got.stderr
    return got


def start_agent(server: Server, token: str, agents: list, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "from suanli.cli import main; main()", "agent", *args],
                            env={**os.environ, "SUANLI_SERVER": server.url, "SUANLI_TOKEN": token},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    agents.append(proc)
    return proc


def test_tenants_and_nodes_change_while_the_server_runs(runtime):
    server, tmp, agents = runtime
    pid = server.proc.pid
    http = httpx.Client(base_url=server.url, timeout=10)
    admin = {"Authorization": f"Bearer {ADMIN}"}

    def tasks(token: str, app_name: str) -> list[dict]:
        return http.get("/v1/tasks", params={"app": app_name}, headers={"Authorization": f"Bearer {token}"}).json()

    def node_state(name: str) -> str | None:
        r = http.get(f"/v1/nodes/{name}", headers=admin)
        return r.json()["state"] if r.status_code == 200 else None

    # a new tenant, applied; its token minted by the admin; its work placed
    (tmp / "gamma.yaml").write_text(GAMMA.format(cpu=100))
    out = cli(server, ADMIN, "apply", "-f", tmp / "gamma.yaml").stdout
    assert "tenant/gamma created" in out, out
    gamma = cli(server, ADMIN, "token", "create", "--tenant", "gamma").stdout.strip()
    (tmp / "w.yaml").write_text(app("w", 2, "3"))
    cli(server, gamma, "apply", "-f", tmp / "w.yaml")
    wait(lambda: sorted(t["status"] for t in tasks(gamma, "w")) == ["pending", "running"], what="one of w placed")
    waiting = next(t for t in tasks(gamma, "w") if t["status"] == "pending")

    # nodes register themselves: the waiting replica lands on one
    agent_token = cli(server, ADMIN, "token", "create", "--role", "agent", "--name", "edge agents", "--sites", "edge",
                      "--max-nodes", "2").stdout.strip()
    viewer = cli(server, ADMIN, "token", "create", "--tenant", "gamma", "--role", "viewer").stdout.strip()
    refused = cli(server, viewer, "apply", "-f", tmp / "w.yaml", ok=False)
    assert refused.returncode == 2 and "reads only" in refused.stderr, refused.stderr
    a1 = start_agent(server, agent_token, agents, "--site", "edge", "--name", "a1", "--cpu", "4",
                     "--memory", "8Gi", "--arch", "arm64", "--lease", "2s")
    wait(lambda: node_state("edge/a1") == "ready", what="edge/a1 registered")
    wait(lambda: all(t["status"] == "running" for t in tasks(gamma, "w")), what="w's second replica placed")
    moved = next(t for t in tasks(gamma, "w") if t["task"] == waiting["task"])
    assert moved["node"] == "edge/a1", moved
    start_agent(server, agent_token, agents, "--site", "edge", "--name", "a2", "--cpu", "4", "--memory", "8Gi",
                "--lease", "2s")
    wait(lambda: node_state("edge/a2") == "ready", what="edge/a2 registered")

    # the agent is killed: its lease runs out, the node is lost, its work moves to the other
    a1.send_signal(signal.SIGKILL)
    a1.wait()
    killed_at = time.monotonic()
    wait(lambda: node_state("edge/a1") == "down", timeout=15, what="edge/a1 lost")
    lost_after = time.monotonic() - killed_at
    print(f"node lost {lost_after:.2f} s after its agent was killed (lease 2 s)")
    assert lost_after < 2 + 2, lost_after  # the lease, and at most a look at the store's agents
    wait(lambda: next(t for t in tasks(gamma, "w") if t["task"] == waiting["task"]).get("node") == "edge/a2",
         what="the replica moved to edge/a2")
    events = http.get("/v1/events", headers=admin, params={"limit": 1000}).json()
    lost = [e for e in events if e["kind"] == "nodeLost"]
    assert lost and "lease of 2s ran out" in lost[-1]["body"]["reason"], lost
    # it comes back: found again, under its name
    start_agent(server, agent_token, agents, "--site", "edge", "--name", "a1", "--cpu", "4", "--memory", "8Gi",
                "--arch", "arm64", "--lease", "2s")
    wait(lambda: node_state("edge/a1") == "ready", what="edge/a1 found again")

    # the quota lowered: what runs stays, new work above it waits, with the quota first
    (tmp / "gamma.yaml").write_text(GAMMA.format(cpu=6))
    assert "tenant/gamma configured" in cli(server, ADMIN, "apply", "-f", tmp / "gamma.yaml").stdout
    (tmp / "more.yaml").write_text(app("more", 1, "1"))
    cli(server, gamma, "apply", "-f", tmp / "more.yaml")
    more = wait(lambda: (t := tasks(gamma, "more")) and t[0].get("why") and t[0], what="more's reason")
    first = more["why"][0]
    assert more["status"] == "pending" and first["code"] == "quota", more
    assert first["resource"] == "cpu" and "1 more needed" in first["reason"], first
    assert all(t["status"] == "running" for t in tasks(gamma, "w"))

    # an agent that leaves: its node is removed from the fleet
    agents[1].send_signal(signal.SIGTERM)
    agents[1].wait(10)
    wait(lambda: node_state("edge/a2") is None, what="edge/a2 removed")

    # a tenant with applications is deleted only with its applications
    refused = cli(server, ADMIN, "delete", "tenant", "gamma", ok=False)
    assert refused.returncode == 2 and "--cascade" not in refused.stderr and "cascade" in refused.stderr
    cli(server, ADMIN, "delete", "tenant", "gamma", "--cascade")
    assert http.get("/v1/applications", headers={"Authorization": f"Bearer {gamma}"}).status_code == 401
    assert "gamma" not in [t["name"] for t in http.get("/v1/tenants", headers=admin).json()]

    # all without a restart; and every change is in the audit log
    assert server.proc.pid == pid and server.proc.poll() is None
    assert http.get("/healthz").json()["restarts"] == 0
    audit = cli(server, ADMIN, "audit", "-o", "json").stdout
    for action in ("PUT /v1/tenants/{name}", "POST /v1/agents", "DELETE /v1/tenants/{name}"):
        assert action in audit, action


def test_runtime_changes_are_checked_as_files_are(runtime):
    server, tmp, _ = runtime
    http = httpx.Client(base_url=server.url, timeout=10)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    bad = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"},
           "spec": {"allowedSites": ["nowhere-*"]}}
    r = http.put("/v1/tenants/t", json=bad, headers=admin)
    assert r.status_code == 422 and "allowedSites[0]" in r.text, r.text
    vc = {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": {"name": "v", "tenant": "nobody"},
          "spec": {"hostGroups": [{"name": "g", "count": 1, "resources": {"cpu": "1", "memory": "1Gi"}}]}}
    r = http.put("/v1/vcs/v", json=vc, headers=admin)
    assert r.status_code == 422 and "metadata.tenant" in r.text, r.text
    # a new accelerator kind on a running server needs a restart: refused, saying so
    fleet = FLEET.replace('cpu: "4", memory: 16Gi}', 'cpu: "4", memory: 16Gi, accelerators: '
                          '[{kind: npu, model: x1, count: 1}]}')
    (tmp / "fleet2.yaml").write_text(fleet)
    got = cli(server, ADMIN, "apply", "-f", tmp / "fleet2.yaml", ok=False)
    assert got.returncode == 2 and "new to the server" in got.stderr, got.stderr
    # a fleet grown: a node group at the edge, and a node more in the cloud
    grown = FLEET.replace("count: 1,", "count: 2,").replace(
        "nodeGroups: []", "nodeGroups:\n        - {name: gw, count: 1, arch: arm64, cpu: \"2\", memory: 4Gi}")
    (tmp / "fleet3.yaml").write_text(grown)
    assert "fleet/small configured" in cli(server, ADMIN, "apply", "-f", tmp / "fleet3.yaml").stdout
    names = wait(lambda: (n := {x["node"] for x in http.get("/v1/nodes", headers=admin).json()}) >= {
        "dc/cpu-0", "dc/cpu-1", "edge/gw-0"} and n, what="the grown fleet")
    assert len(names) == 3
    # and shrunk back: the nodes go
    (tmp / "fleet4.yaml").write_text(FLEET)
    cli(server, ADMIN, "apply", "-f", tmp / "fleet4.yaml")
    wait(lambda: {x["node"] for x in http.get("/v1/nodes", headers=admin).json()} == {"dc/cpu-0"},
         what="the fleet as it was")


def test_a_tenant_admin_manages_its_virtual_clusters_and_tokens(runtime):
    server, tmp, _ = runtime
    http = httpx.Client(base_url=server.url, timeout=10)
    boss = cli(server, ADMIN, "token", "create", "--tenant", "alpha", "--role", "tenant-admin").stdout.strip()
    auth = {"Authorization": f"Bearer {boss}"}

    def vc(count: int, tenant: str = "alpha") -> dict:
        return {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": {"name": "pool", "tenant": tenant},
                "spec": {"hostGroups": [{"name": "g", "count": count, "resources": {"cpu": "1", "memory": "1Gi"}}]}}

    def hosts() -> list:
        r = http.get("/v1/vcs/pool", headers=auth)
        return r.json()["hosts"] if r.status_code == 200 else []

    assert http.put("/v1/vcs/pool", json=vc(1, "gamma"), headers=auth).status_code == 403  # not its tenant
    tenant = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "alpha"}, "spec": {"weight": 5}}
    assert http.put("/v1/tenants/alpha", json=tenant, headers=auth).status_code == 403  # its weight is the admin's
    assert http.put("/v1/vcs/pool", json=vc(1), headers=auth).status_code == 201
    wait(lambda: len(hosts()) == 1, what="the VC's first host")
    assert http.put("/v1/vcs/pool", json=vc(3), headers=auth).status_code == 200
    wait(lambda: len(hosts()) == 3, what="the VC grown to 3 hosts")
    doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "in-pool"},
           "spec": {"virtualCluster": "pool", "components": [{"name": "c", "lifetime": "service", "replicas": 1,
                                                               "resources": {"cpu": "1", "memory": "1Gi"}}]}}
    assert http.post("/v1/applications", json=doc, headers=auth).status_code == 201
    wait(lambda: (t := http.get("/v1/tasks", headers=auth).json()) and t[0]["status"] == "running",
         what="in-pool running")
    assert http.put("/v1/vcs/pool", json=vc(1), headers=auth).status_code == 200  # the idle hosts go
    wait(lambda: len(hosts()) == 1, what="the VC shrunk to the host in use")
    reshaped = vc(1)
    reshaped["spec"]["hostGroups"][0]["resources"]["cpu"] = "2"
    r = http.put("/v1/vcs/pool", json=reshaped, headers=auth)
    assert r.status_code == 409 and "has applications" in r.json()["detail"], r.text
    assert http.delete("/v1/vcs/pool", headers=auth).status_code == 409
    # its own tenant's tokens: minted, listed, revoked; never another tenant's
    made = http.post("/v1/tokens", json={"role": "viewer"}, headers=auth).json()
    assert made["tenant"] == "alpha" and made["role"] == "viewer"
    assert http.post("/v1/tokens", json={"tenant": "gamma"}, headers=auth).status_code == 403
    assert {t["tenant"] for t in http.get("/v1/tokens", headers=auth).json()} == {"alpha"}
    assert http.delete(f"/v1/tokens/{made['id']}", headers=auth).status_code == 204
    assert http.delete("/v1/vcs/pool?cascade=true", headers=auth).status_code == 204
    wait(lambda: http.get("/v1/vcs/pool", headers=auth).status_code == 404, what="the VC gone")
    assert http.get("/v1/applications/in-pool", headers=auth).status_code == 404


DEVICES = FLEET.replace("  links:", """  populations:
    - name: cars
      sites: car-##
      count: 8
      tier: device
      attach: {to: {names: [edge]}, rttMs: 20, bandwidth: 100Mbps}
      nodeGroups:
        - {name: soc, count: 1, arch: arm64, cpu: "2", memory: 4Gi}
  links:""")


def test_a_device_of_a_population_comes_and_goes_with_its_agent(runtime):
    """A device registers by its site alone; without renewals it goes offline when
    its lease runs out, and comes online again when it registers again."""
    server, tmp, _ = runtime
    (tmp / "fleet.yaml").write_text(DEVICES)
    server.stop()
    server.start()
    http = httpx.Client(base_url=server.url, timeout=10)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    agent = {"Authorization": "Bearer " + cli(server, ADMIN, "token", "create", "--role", "agent",
                                              "--sites", "car-*").stdout.strip()}

    def state() -> str:
        return http.get("/v1/nodes/car-03/soc-0", headers=admin).json()["state"]

    r = http.post("/v1/agents", json={"site": "car-03", "name": "x", "node": {}}, headers=agent)
    assert r.status_code == 422 and "population 'cars'" in r.json()["detail"], r.text
    r = http.post("/v1/agents", json={"site": "car-03", "lease": "1s"}, headers=agent)
    assert r.status_code == 201 and r.json()["name"] == "car-03", r.text
    assert state() == "ready"
    wait(lambda: state() == "down", timeout=10, what="car-03 offline once its lease ran out")
    kinds = [e["kind"] for e in http.get("/v1/events", headers=admin, params={"limit": 1000}).json()]
    assert "deviceOffline" in kinds
    assert http.put("/v1/agents/car-03/lease", headers=agent).status_code == 409  # lost: register again
    assert http.post("/v1/agents", json={"site": "car-03", "lease": "10s"}, headers=agent).status_code == 201
    wait(lambda: state() == "ready", what="car-03 online again")
    assert [a["state"] for a in http.get("/v1/agents", headers=admin).json()] == ["ready"]
