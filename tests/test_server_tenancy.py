"""Tenants as the real ``suanli serve`` keeps them apart: tokens bound to one
incarnation of their tenant and to the token that minted them, a tenant's
deletion all at once (a kill -9 in the middle leaves it whole or gone),
virtual cluster names of each tenant's own, a virtual cluster kept within its
tenant's allowed sites, and the console's sign-in and pages bounded as the
API is.

One server for the module (on a small fleet, ``--max-rate 40``: a client
address may send 160 requests a second, bursts of 320); the last test kills
and starts it again. The tests poll at most ten times a second, well within
the rate of a tenant (40 a second, bursts of 80).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select, update

from serving import ADMIN, Server, free_port, wait

from suanli.server.store import ObjectRow, Store, TokenRow, sqlite_url

FLEET = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: small}
spec:
  sites:
    - name: dc
      tier: cloud
      region: r
      nodeGroups:
        - {name: n, count: 2, arch: x86_64, cpu: 8, memory: 32Gi}
    - name: edge-1
      tier: edge
      region: r
      nodeGroups:
        - {name: e, count: 1, arch: x86_64, cpu: 4, memory: 8Gi}
  links:
    - {between: [dc, edge-1], rttMs: 10, bandwidth: 1Gbps}
"""
TENANTS = """\
apiVersion: suanli/v1
kind: Tenant
metadata: {name: alpha}
spec: {allowedSites: [dc]}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: beta}
spec: {}
"""
RATE = 40  # --max-rate: per client address 4 x (bursts of 8 x); per tenant 1 x (bursts of 2 x)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


ADMIN_H = bearer(ADMIN)


def until(pred, timeout: float = 20.0, what: str = "the condition"):
    """``pred()``'s first true value, asked every 0.1 s (within a tenant's rate)."""
    return wait(pred, timeout, what, every=0.1)


def tenant_doc(name: str, **spec) -> dict:
    return {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}


def vc_doc(name: str, tenant: str | None = None, count: int = 1, sites: list[str] | None = None) -> dict:
    group = {"name": "g", "count": count, "resources": {"cpu": 1, "memory": "1Gi"}}
    if sites is not None:
        group["sites"] = {"names": sites}
    meta = {"name": name, **({"tenant": tenant} if tenant else {})}
    return {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": meta, "spec": {"hostGroups": [group]}}


def app_doc(name: str, vc: str | None = None, cpu: float = 1) -> dict:
    spec = {"components": [{"name": "c", "lifetime": "service", "replicas": 1,
                            "resources": {"cpu": cpu, "memory": "256Mi"}}]}
    if vc is not None:
        spec["virtualCluster"] = vc
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name}, "spec": spec}


class Served:
    """The module's server, its database, a client and tenant-admin tokens of alpha and beta."""

    def __init__(self, server: Server, db: str) -> None:
        self.server, self.db = server, db
        self.http = httpx.Client(base_url=server.url, timeout=30)
        self.alpha = bearer(self.mint(tenant="alpha", role="tenant-admin")["token"])
        self.beta = bearer(self.mint(tenant="beta", role="tenant-admin")["token"])

    def mint(self, who: dict = ADMIN_H, **body) -> dict:
        r = self.http.post("/v1/tokens", json=body, headers=who)
        assert r.status_code == 201, r.text
        return r.json()

    def status(self, token: str) -> int:
        return self.http.get("/v1/applications", headers=bearer(token)).status_code

    def tokens(self) -> dict[str, dict]:
        r = self.http.get("/v1/tokens", headers=ADMIN_H)
        assert r.status_code == 200, r.text
        return {t["id"]: t for t in r.json()}

    def store(self) -> Store:
        return Store(self.db, upgrade=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    where = tmp_path_factory.mktemp("tenancy")
    (where / "fleet.yaml").write_text(FLEET)
    (where / "tenants.yaml").write_text(TENANTS)
    db = sqlite_url(where / "s.db")
    with open(where / "server.log", "ab") as log:
        server = Server(db, free_port(), log, "--max-rate", str(RATE),
                        files=(where / "fleet.yaml", where / "tenants.yaml"))
        try:
            server.start()
            s = Served(server, db)
            yield s
            s.http.close()
        finally:
            server.stop()


# ------------------------------------------------------------------ virtual clusters of each tenant's own


def test_two_tenants_each_have_a_virtual_cluster_of_one_name(served):
    http = served.http
    assert http.put("/v1/vcs/train", json=vc_doc("train"), headers=served.beta).status_code == 201
    assert http.put("/v1/vcs/beta-only", json=vc_doc("beta-only"), headers=served.beta).status_code == 201
    r = http.put("/v1/vcs/train", json=vc_doc("train"), headers=served.alpha)  # a name beta has: alpha's own
    assert r.status_code == 201, r.text
    assert r.json()["tenant"] == "alpha" and r.json()["name"] == "train" and "beta" not in r.text
    for who, tenant in ((served.alpha, "alpha"), (served.beta, "beta")):
        got = until(lambda: (v := http.get("/v1/vcs/train", headers=who).json()).get("hosts") and v,
                    what=f"{tenant}'s train to have its host")
        assert (got["name"], got["tenant"]) == ("train", tenant), got
    # another tenant's VC is as missing as none: read, deleted, or put (which makes the caller's own)
    for method in ("GET", "DELETE"):
        theirs = http.request(method, "/v1/vcs/beta-only", headers=served.alpha)
        none = http.request(method, "/v1/vcs/no-such-vc", headers=served.alpha)
        assert theirs.status_code == none.status_code == 404, (method, theirs.text)
        assert "beta" not in theirs.json()["detail"].replace("beta-only", "")
    r = http.put("/v1/vcs/beta-only", json=vc_doc("beta-only", count=2), headers=served.alpha)
    assert r.status_code == 201 and r.json()["tenant"] == "alpha", r.text
    assert http.get("/v1/vcs/beta-only", headers=served.beta).json()["tenant"] == "beta"
    assert [d["document"]["spec"]["hostGroups"][0]["count"] for d in
            http.get("/v1/config/vcs", headers=served.beta).json() if d["name"] == "beta-only"] == [1]
    # an application's virtualCluster is its own tenant's; what it is told names no other
    assert http.post("/v1/applications", json=app_doc("in-train", "train"), headers=served.alpha).status_code == 201
    task = until(lambda: (t := http.get("/v1/tasks/in-train/c/0", headers=served.alpha).json())["status"] == "running"
                 and t, what="alpha's task in its train to run")
    assert task["vc"] == "train" and task["site"] == "dc", task
    events = http.get("/v1/events", headers=served.alpha, params={"limit": 1000}).json()
    assert {e["body"]["vc"] for e in events if "vc" in e["body"]} <= {"train", "beta-only", "alpha/default"}, events
    assert "beta" not in str([e["body"] for e in events]).replace("beta-only", ""), events
    listed = http.get("/v1/config/vcs", headers=served.alpha).json()
    assert sorted(d["name"] for d in listed) == ["beta-only", "train"] and {d["tenant"] for d in listed} == {"alpha"}
    # an admin names the tenant of a name two tenants have
    r = http.get("/v1/vcs/train", headers=ADMIN_H)
    assert r.status_code == 422 and "?tenant=" in r.json()["detail"], r.text
    assert http.get("/v1/vcs/train", headers=ADMIN_H, params={"tenant": "beta"}).json()["tenant"] == "beta"
    names = sorted((v["tenant"], v["name"]) for v in http.get("/v1/vcs", headers=ADMIN_H).json() if "/" not in v["name"])
    assert names == [("alpha", "beta-only"), ("alpha", "train"), ("beta", "beta-only"), ("beta", "train")]
    # the console names them as their tenant does
    with httpx.Client(base_url=served.server.url, timeout=30) as browser:
        r = browser.post("/login", data={"token": served.alpha["Authorization"].split()[1]},
                         headers={"origin": served.server.url}, follow_redirects=False)
        assert r.status_code == 303, r.text
        page = until(lambda: "<td>train</td>" in (t := browser.get("/tenants").text) and t, what="the console's VCs")
        assert "alpha:" not in page and "beta" not in page.replace("beta-only", ""), page
    # deleted by name, each its own
    assert http.delete("/v1/vcs/beta-only", headers=served.alpha).status_code == 204
    assert http.get("/v1/vcs/beta-only", headers=served.beta).status_code == 200


def test_a_virtual_cluster_outside_its_tenants_allowed_sites_is_refused(served, tmp_path):
    for sites in (["edge-1"], ["edge-*"]):
        r = served.http.put("/v1/vcs/far", json=vc_doc("far", sites=sites), headers=served.alpha)
        assert r.status_code == 422, r.text
        errors = {e["path"].rsplit(": ", 1)[-1]: e["message"] for e in r.json()["errors"]}
        assert "spec.hostGroups[0].sites.names[0]" in errors, errors
        assert "dc" in errors["spec.hostGroups[0].sites.names[0]"], errors  # the sites it may use
    assert served.http.put("/v1/vcs/near", json=vc_doc("near", sites=["dc", "edge-1"]),
                           headers=served.alpha).status_code == 201  # one of them is allowed
    # the same in files given to serve: exit 2, naming the field
    (tmp_path / "fleet.yaml").write_text(FLEET)
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    (tmp_path / "vc.yaml").write_text(json.dumps(vc_doc("far", "alpha", sites=["edge-1"])))
    got = subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", "serve",
                          tmp_path / "fleet.yaml", tmp_path / "tenants.yaml", tmp_path / "vc.yaml",
                          "--db", sqlite_url(tmp_path / "s.db"), "--port", str(free_port())],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 2, got.stderr
    assert "hostGroups[0].sites.names[0]" in got.stderr and "allowedSites" in got.stderr, got.stderr


# ------------------------------------------------------------------ tokens: lineage and tenants


def test_a_minted_token_never_outlives_its_minter_and_goes_with_it(served):
    boss = served.mint(tenant="alpha", role="tenant-admin", ttl="1h")
    by_boss = bearer(boss["token"])
    member = served.mint(by_boss, role="member")
    assert member["expires_at"] == boss["expires_at"], (member, boss)
    r = served.http.post("/v1/tokens", json={"ttl": "2h"}, headers=by_boss)
    assert r.status_code == 422 and [e["path"] for e in r.json()["errors"]] == ["ttl"], r.text
    assert served.mint(by_boss, ttl="30m")["expires_at"] < boss["expires_at"]
    deputy = served.mint(by_boss, role="tenant-admin")
    viewer = served.mint(bearer(deputy["token"]), role="viewer")
    other_admin = served.mint(name="a second admin")
    root = served.mint(bearer(other_admin["token"]), tenant="alpha")  # an admin's: a root of trust
    listed = served.tokens()
    assert listed[member["id"]]["minted_by"] == boss["id"] and listed[viewer["id"]]["minted_by"] == deputy["id"]
    assert listed[boss["id"]]["minted_by"] is not None  # the admin token that minted it
    assert served.http.delete(f"/v1/tokens/{boss['id']}", headers=ADMIN_H).status_code == 204
    for made in (boss, member, deputy, viewer):
        assert served.status(made["token"]) == 401, made["id"]
        assert served.tokens()[made["id"]]["state"] == "revoked"
    assert served.http.delete(f"/v1/tokens/{other_admin['id']}", headers=ADMIN_H).status_code == 204
    assert served.status(root["token"]) == 200  # revoking an admin token leaves what it minted


def test_a_recreated_tenant_never_honours_an_old_token(served):
    """Tokens are bound to one incarnation of their tenant: a token that escaped
    its tenant's deletion (as a deletion half applied left one, revoked never)
    is not valid for a tenant made again under the same name."""
    assert served.http.put("/v1/tenants/delta", json=tenant_doc("delta"), headers=ADMIN_H).status_code == 201
    old = served.mint(tenant="delta")
    assert served.status(old["token"]) == 200
    assert served.http.delete("/v1/tenants/delta", headers=ADMIN_H).status_code == 204
    assert served.status(old["token"]) == 401
    store = served.store()
    try:
        with store.engine.begin() as conn:  # its revocation lost, as a kill between two writes lost it
            conn.execute(update(TokenRow).where(TokenRow.public_id == old["id"]).values(revoked_at=None))
    finally:
        store.close()
    assert served.status(old["token"]) == 401
    assert served.http.put("/v1/tenants/delta", json=tenant_doc("delta"), headers=ADMIN_H).status_code == 201
    assert served.status(old["token"]) == 401
    assert served.status(served.mint(tenant="delta")["token"]) == 200


# ------------------------------------------------------------------ the console


def test_failed_sign_ins_cost_the_address_what_unknown_tokens_cost(served):
    """From an address of its own (127.0.0.2: its own bucket), 300 bad sign-ins
    from 8 threads while a ninth reads pages: the sign-ins get 429 (with
    Retry-After) long before the 300 a bucket of 320 would take at 1 apiece, and
    the pages share their bucket; another address's pages do not."""
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    origin = {"origin": served.server.url}
    with httpx.Client(base_url=served.server.url, transport=transport, timeout=30) as guesser:
        done, pages = threading.Event(), []

        def browse() -> None:
            while not done.is_set():
                for path in ("/login", "/tasks"):
                    pages.append(guesser.get(path, follow_redirects=False).status_code)

        reader = threading.Thread(target=browse)
        reader.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda i: guesser.post("/login", data={"token": f"sl_guess-{i}"},
                                                               headers=origin), range(300)))
        finally:
            done.set()
            reader.join()
        codes = [r.status_code for r in answers]
        assert set(codes) == {401, 429}, set(codes)
        assert codes.index(429) < 150, codes.index(429)  # 10 apiece: 32 from the burst, 16 a second more
        assert all(int(r.headers["retry-after"]) >= 1 for r in answers if r.status_code == 429)
        assert 429 in pages and set(pages) <= {200, 303, 429}, pages
    assert served.http.get("/login").status_code == 200  # another address


def test_an_absurd_page_number_is_clamped_and_the_connection_stays_usable(served):
    origin = {"origin": served.server.url}
    with httpx.Client(base_url=served.server.url, timeout=30) as browser:
        r = browser.post("/login", data={"token": ADMIN, "next": "/tasks"}, headers=origin, follow_redirects=False)
        assert r.status_code == 303, r.text
        for page in ("4611686018427387904", str(2**70), "-3", "x"):
            r = browser.get("/tasks", params={"page": page})
            assert r.status_code == 200, (page, r.text[:300])
            assert browser.get("/tasks").status_code == 200, page  # the same connection, still usable


# ------------------------------------------------------------------ a tenant's deletion, killed (last: restarts)


def test_a_cascading_delete_killed_anywhere_leaves_the_tenant_whole_or_gone(served):
    """A tenant with a virtual cluster, 30 applications and a token is deleted
    with cascade, and the server is killed (-9) at a random moment of it (twice); after
    a restart the tenant is whole (its applications, its VC, its token valid) or
    gone (none of them, its token 401), and a tenant made again under its name
    does not honour the old token. The first deletion is not killed: it says how
    long one takes. Also the upgrade step: a token from before tokens were
    bound to their tenant (none recorded) is bound at the restart and stays valid."""
    http, rng = served.http, random.Random()
    legacy = served.mint(tenant="alpha", role="viewer")
    store = served.store()
    try:
        with store.engine.begin() as conn:
            conn.execute(update(TokenRow).where(TokenRow.public_id == legacy["id"]).values(tenant_since=None))
    finally:
        store.close()

    def setup() -> str:
        r = http.put("/v1/tenants/gamma", json=tenant_doc("gamma"), headers=ADMIN_H)
        assert r.status_code in (200, 201), r.text
        assert http.put("/v1/vcs/pool", json=vc_doc("pool", "gamma"), headers=ADMIN_H).status_code in (200, 201)
        token = served.mint(tenant="gamma")["token"]
        for i in range(30):
            r = http.post("/v1/applications", json=app_doc(f"a{i}", cpu=0.01), headers=bearer(token))
            assert r.status_code == 201, r.text
        return token

    def delete() -> None:
        try:
            httpx.delete(served.server.url + "/v1/tenants/gamma", params={"cascade": "true"}, headers=ADMIN_H,
                         timeout=30)
        except httpx.TransportError:
            pass  # killed

    def whole_or_gone(token: str) -> None:
        there = http.get("/v1/tenants/gamma", headers=ADMIN_H).status_code == 200
        apps = [a for a in http.get("/v1/applications", headers=ADMIN_H, params={"limit": 10000}).json()
                if a["tenant"] == "gamma"]
        vcs = [d for d in http.get("/v1/config/vcs", headers=ADMIN_H).json() if d["tenant"] == "gamma"]
        if there:
            assert (len(apps), len(vcs), served.status(token)) == (30, 1, 200), (len(apps), len(vcs))
            assert http.delete("/v1/tenants/gamma", params={"cascade": "true"}, headers=ADMIN_H).status_code == 204
        else:
            assert (len(apps), len(vcs), served.status(token)) == (0, 0, 401), (len(apps), len(vcs))
        assert served.status(token) == 401
        assert http.put("/v1/tenants/gamma", json=tenant_doc("gamma"), headers=ADMIN_H).status_code == 201
        assert served.status(token) == 401  # the tenant made again is another

    token = setup()
    started = time.monotonic()
    delete()
    took = time.monotonic() - started
    whole_or_gone(token)
    for kill in range(2):  # a start each: the test's cost
        token = setup()
        deleting = threading.Thread(target=delete)
        deleting.start()
        time.sleep(rng.uniform(0, took))
        served.server.kill()
        deleting.join()
        served.server.start()
        if kill == 0:
            assert served.status(legacy["token"]) == 200
            store = served.store()
            try:
                with store.session() as s:
                    since = s.scalar(select(TokenRow.tenant_since).where(TokenRow.public_id == legacy["id"]))
                    version = s.scalar(select(ObjectRow.version).where(ObjectRow.kind == "Tenant",
                                                                       ObjectRow.name == "alpha"))
            finally:
                store.close()
            assert since == version is not None
        whole_or_gone(token)
