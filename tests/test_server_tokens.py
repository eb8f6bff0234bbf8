"""Tokens and their lifecycle: made with an id, a name and an expiry; listed and
revoked by admins; keyed digests with a secret kept outside the database;
revocation and expiry effective within a second in every process; the admin
token of SUANLI_ADMIN_TOKEN checked for strength and rotated; databases from
before tokens had a lifecycle upgraded with their tokens still valid.

The API runs in process (its controller not started: tokens do not involve
the scheduler), except for the checks of ``suanli serve`` itself at the end.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import subprocess
import sys
import time
from datetime import datetime

import httpx
import pytest
from fastapi.testclient import TestClient

import serving
from serving import FLEET, Server, free_port, pages
from test_server_api import A, B, bearer, db_url, postgres  # noqa: F401  (fixtures: both databases)
from test_server_cli import suanli

from suanli.server.api import create_api
from suanli.server.controller import Controller
from suanli.server.store import (PRINCIPAL_CACHE_S, SecretError, Store, TokenRefused, admin_token_problem,
                                 default_secret_file, digest, load_secret, migrate, sqlite_url)
from suanli.spec.build import load_world
from conftest import EXAMPLES

SECRET = b"k" * 16 + b"0123456789abcdef"  # 32 bytes
STRONG = "sl_admin-4Fh8Kq2Lm9Xv3Rz7Tp"


@pytest.fixture(scope="module")
def world():
    return load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])


class Api:
    """An API over a store, with an admin's and two tenants' headers."""

    def __init__(self, world, store: Store) -> None:
        self.store = store
        self.client = TestClient(create_api(world, store, Controller(world, store), start_controller=False))
        self.admin = bearer(store.ensure_admin(None))
        self.a, self.b = bearer(store.mint(A)), bearer(store.mint(B))

    def status(self, headers: dict) -> int:
        return self.client.get("/v1/applications", headers=headers).status_code

    def listing(self) -> dict[str, dict]:
        r = self.client.get("/v1/tokens", headers=self.admin)
        assert r.status_code == 200, r.text
        return {t["id"]: t for t in r.json()}


@pytest.fixture
def api(world, tmp_path):
    store = Store(sqlite_url(tmp_path / "s.db"), secret=SECRET)
    yield Api(world, store)
    store.close()


def mint(api: Api, **body) -> dict:
    r = api.client.post("/v1/tokens", json=body, headers=api.admin)
    assert r.status_code == 201, r.text
    return r.json()


# ------------------------------------------------------------------ made, listed, expired


def test_a_minted_token_has_an_id_a_name_and_an_expiry_and_is_listed_without_its_secret(api):
    before = time.time()
    made = mint(api, tenant=A, ttl="30d", name="ci deploys")
    assert re.fullmatch(r"tok_[a-z0-9]{8}", made["id"])
    assert made["token"].startswith(f"sl_{made['id'][4:]}_")  # who finds a token can tell which to revoke
    assert (made["tenant"], made["name"]) == (A, "ci deploys")
    expires = datetime.fromisoformat(made["expires_at"].replace("Z", "+00:00")).timestamp()
    assert abs(expires - (before + 30 * 86400)) < 5
    assert api.status(bearer(made["token"])) == 200
    r = api.client.get("/v1/tokens", headers=api.admin)
    listed = {t["id"]: t for t in r.json()}[made["id"]]
    assert listed == {"id": made["id"], "tenant": A, "name": "ci deploys", "role": "member", "source": "minted",
                      "scheme": "hmac-sha256", "state": "active", "created_at": listed["created_at"],
                      "expires_at": made["expires_at"], "revoked_at": None, "scope": None,
                      "minted_by": "tok_" + api.admin["Authorization"].split("_")[1]}  # the admin token that minted it
    secret_part = made["token"].split("_", 2)[2]
    assert secret_part not in r.text and secret_part[:8] not in r.text
    assert len(r.json()) == 4  # the admin's, A's and B's of the fixture, and this one


def test_the_token_listing_comes_in_pages(api):
    made = {mint(api, tenant=A)["id"] for _ in range(5)}
    got = pages(api.client, "/v1/tokens", api.admin, limit=3)
    seen = [t["id"] for page in got for t in page]
    assert len(got) == 3 and len(seen) == len(set(seen)) == 8 and made <= set(seen)  # 3 of the fixture's, 5 here


def test_without_a_ttl_a_token_lasts_until_revoked(api):
    made = mint(api, tenant=B)
    assert made["expires_at"] is None and made["name"] is None
    assert api.listing()[made["id"]]["state"] == "active"


@pytest.mark.parametrize("ttl, words", [
    ("soon", "is not a duration"), ("0s", "above 0"), ("-1h", "is not a duration"),
    ("3651d", "at most 3650d"), ("5000d", "at most 3650d"),
])
def test_a_bad_ttl_answers_422_naming_the_field(api, ttl, words):
    r = api.client.post("/v1/tokens", json={"tenant": A, "ttl": ttl}, headers=api.admin)
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert [e["path"] for e in r.json()["errors"]] == ["ttl"]
    assert words in r.json()["errors"][0]["message"]


def test_an_expired_token_answers_401_like_an_unknown_one_and_is_listed_as_expired(api):
    ttl = 0.4
    while True:  # a life long enough for its first request on this machine now (doubled until it is)
        asked = time.monotonic()
        token, row = api.store.issue(A, ttl_s=ttl, name=f"short-{ttl:g}")
        issued = time.monotonic()  # (it expires by issued + ttl)
        status = api.status(bearer(token))  # looked up, and remembered
        if time.monotonic() - asked < ttl:
            break
        ttl *= 2
    assert status == 200
    time.sleep(max(0.0, issued + ttl + 0.05 - time.monotonic()))
    expired = api.client.get("/v1/applications", headers=bearer(token))
    unknown = api.client.get("/v1/applications", headers=bearer("sl_aaaaaaaa_not-a-token"))
    assert expired.status_code == unknown.status_code == 401
    assert expired.json()["detail"] == unknown.json()["detail"] == \
        "the token is not valid (unknown, expired or revoked)"
    assert api.listing()[row.public_id]["state"] == "expired"


# ------------------------------------------------------------------ revocation


def test_revoking_answers_204_then_404_for_an_unknown_id_and_keeps_the_first_time(api):
    made = mint(api, tenant=A)
    assert api.client.delete(f"/v1/tokens/{made['id']}", headers=api.admin).status_code == 204
    first = api.listing()[made["id"]]
    assert first["state"] == "revoked" and first["revoked_at"]
    assert api.client.delete(f"/v1/tokens/{made['id']}", headers=api.admin).status_code == 204
    assert api.listing()[made["id"]]["revoked_at"] == first["revoked_at"]
    r = api.client.delete("/v1/tokens/tok_nothing0", headers=api.admin)
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"


def test_tenants_get_403_on_listing_and_revoking(api):
    own = api.store.tokens()[-1].public_id  # B's
    assert api.client.get("/v1/tokens", headers=api.b).status_code == 403
    assert api.client.delete(f"/v1/tokens/{own}", headers=api.b).status_code == 403
    assert api.status(api.b) == 200


def test_a_revoked_token_is_refused_at_once_here_and_within_a_second_by_another_process(world, db_url):
    store, other = Store(db_url, secret=SECRET), Store(db_url, secret=SECRET, upgrade=False)
    try:
        api = Api(world, store)
        token, row = store.issue(A)
        assert api.status(bearer(token)) == 200  # remembered by the API's store
        assert (other.remembered(token) or other.principal(token)) is not None  # and by the other's
        assert other.remembered(token) is not None
        assert api.client.delete(f"/v1/tokens/{row.public_id}", headers=api.admin).status_code == 204
        revoked_at = time.monotonic()
        assert api.status(bearer(token)) == 401  # the first call after revoking
        while (other.remembered(token) or other.principal(token)) is not None:  # as the API asks
            assert time.monotonic() - revoked_at < PRINCIPAL_CACHE_S + 0.1, "the other store still believes it"
            time.sleep(0.01)
        assert api.status(api.a) == 200  # other tokens are as they were
    finally:
        store.close()
        other.close()


# ------------------------------------------------------------------ keyed digests and the secret


def test_digests_are_keyed_and_a_store_with_another_secret_accepts_none(tmp_path):
    url = sqlite_url(tmp_path / "s.db")
    store = Store(url, secret=SECRET)
    token = store.mint(A)
    row = store.tokens()[0]
    assert row.scheme == "hmac-sha256"
    assert row.digest != hashlib.sha256(token.encode()).hexdigest()
    assert row.digest == hmac.new(SECRET, token.encode(), hashlib.sha256).hexdigest()
    assert Store(url, secret=b"another secret, also 32 bytes!!!").principal(token) is None
    assert Store(url, secret=SECRET).principal(token).tenant == A
    store.close()


def test_the_secret_file_is_made_once_for_the_owner_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("SUANLI_SECRET", raising=False)
    url = sqlite_url(tmp_path / "s.db")
    path = default_secret_file(url)
    assert path == tmp_path / "s.db.secret"
    first = load_secret(url)
    assert first.created and first.source == str(path) and len(first.key) == 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = load_secret(url)
    assert (again.key, again.created) == (first.key, False)
    assert default_secret_file("postgresql+psycopg://u@h/db").name == "suanli.secret"
    chosen = load_secret(url, tmp_path / "elsewhere.secret")
    assert chosen.created and chosen.key != first.key


@pytest.mark.parametrize("make, where, words", [
    (lambda p: (p.write_bytes(b"x" * 40), p.chmod(0o644)), "--secret-file", "chmod 600"),
    (lambda p: (p.write_bytes(b"short"), p.chmod(0o600)), "--secret-file", "holds 5 bytes"),
    (lambda p: (p.mkdir(), p.chmod(0o700)), "--secret-file", "cannot read"),
])
def test_a_secret_file_not_fit_for_use_is_refused(tmp_path, monkeypatch, make, where, words):
    monkeypatch.delenv("SUANLI_SECRET", raising=False)
    path = tmp_path / "s.secret"
    make(path)
    with pytest.raises(SecretError) as caught:
        load_secret(sqlite_url(tmp_path / "s.db"), path)
    assert caught.value.where == where and words in caught.value.message


def test_suanli_secret_is_used_instead_of_a_file_when_set(tmp_path, monkeypatch):
    monkeypatch.setenv("SUANLI_SECRET", "z" * 40)
    got = load_secret(sqlite_url(tmp_path / "s.db"))
    assert (got.key, got.source, got.created) == (b"z" * 40, "SUANLI_SECRET", False)
    assert not (tmp_path / "s.db.secret").exists()
    monkeypatch.setenv("SUANLI_SECRET", "short")
    with pytest.raises(SecretError, match="at least 32"):
        load_secret(sqlite_url(tmp_path / "s.db"))


# ------------------------------------------------------------------ the admin token of the environment


@pytest.mark.parametrize("token, words", [
    ("sl_test-admin-token", "19 characters long"),
    ("ab" * 15, "only 2 different characters"),
    ("sl_admin token with spaces 123", "without spaces"),
])
def test_a_weak_admin_token_is_named_as_such(token, words):
    assert words in admin_token_problem(token)


def test_strong_admin_tokens_pass():
    assert admin_token_problem(STRONG) is None
    assert admin_token_problem(serving.ADMIN) is None


def test_rotating_the_env_admin_token_revokes_the_one_before_and_nothing_else(tmp_path):
    store = Store(sqlite_url(tmp_path / "s.db"), secret=SECRET)
    x, y = STRONG + "-x", STRONG + "-y"
    minted_admin, tenant = store.mint(None), store.mint(A)
    assert store.adopt_env_admin(x) == []
    assert store.adopt_env_admin(x) == []  # a restart with the same value
    env_x = [r for r in store.tokens() if r.source == "env"]
    assert [(r.tenant, r.name) for r in env_x] == [(None, "SUANLI_ADMIN_TOKEN")]
    assert store.principal(x).admin
    assert [r.public_id for r in store.adopt_env_admin(y)] == [env_x[0].public_id]
    assert store.principal(x) is None and store.remembered(x) is None and store.principal(y).admin
    assert store.principal(minted_admin).admin and store.principal(tenant).tenant == A
    assert store.ensure_admin(None) is None  # unset: an admin token is valid, nothing is made or revoked
    assert store.principal(y).admin and store.principal(minted_admin).admin
    with pytest.raises(TokenRefused, match="revoked"):
        store.adopt_env_admin(x)  # a value once revoked does not come back
    with pytest.raises(TokenRefused, match="tenant 'acme-ai'"):
        store.adopt_env_admin(tenant)
    store.close()


def test_without_a_valid_admin_token_one_is_made_at_start(tmp_path):
    store = Store(sqlite_url(tmp_path / "s.db"), secret=SECRET)
    first = store.ensure_admin(None)
    assert first and store.ensure_admin(None) is None
    store.revoke(store.tokens()[0].public_id)
    second = store.ensure_admin(None)
    assert second and store.principal(second).admin and store.principal(first) is None
    store.close()


# ------------------------------------------------------------------ databases from before


def old_database(db_url: str, tokens: dict[str, str | None]) -> None:
    """A database of the first schema, with these tokens (token -> tenant) as it kept them."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    from suanli.server.store import MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", db_url)
    command.upgrade(cfg, "0001")
    engine = create_engine(db_url)
    with engine.begin() as conn:
        for token, tenant in tokens.items():
            conn.execute(text("INSERT INTO tokens (digest, tenant, created_at) VALUES (:d, :t, :c)"),
                         {"d": digest(token), "t": tenant, "c": time.time()})
    engine.dispose()


OLD_ADMIN, OLD_TENANT = "sl_test-admin-token", "sl_old-tenant-token"  # the old admin: weak, as tests had it


def test_an_old_database_upgrades_and_its_tokens_stay_valid(db_url):
    old_database(db_url, {OLD_ADMIN: None, OLD_TENANT: A})
    migrate(db_url)
    store = Store(db_url, secret=SECRET)
    rows = {r.tenant: r for r in store.tokens()}
    assert {(r.scheme, r.source) for r in rows.values()} == {("sha256", "minted")}
    assert all(re.fullmatch(r"tok_[a-z0-9]{8}", r.public_id) for r in rows.values())
    assert len({r.public_id for r in rows.values()}) == 2
    assert store.principal(OLD_TENANT).tenant == A and store.principal(OLD_ADMIN).admin
    assert store.adopt_env_admin(OLD_ADMIN) == []  # the old admin value, given as SUANLI_ADMIN_TOKEN again
    env = {r.tenant: r for r in store.tokens()}[None]
    assert (env.public_id, env.source, env.scheme) == (rows[None].public_id, "env", "hmac-sha256")
    assert env.digest != digest(OLD_ADMIN) and store.principal(OLD_ADMIN).admin
    store.close()


def test_a_new_admin_value_on_an_old_database_revokes_its_old_admin_tokens(tmp_path):
    """Which old admin row was SUANLI_ADMIN_TOKEN is not known: a new value revokes them
    all (once), so a weak old value does not outlive the upgrade. Tenants' tokens stay."""
    url = sqlite_url(tmp_path / "s.db")
    old_database(url, {OLD_ADMIN: None, OLD_TENANT: A})
    store = Store(url, secret=SECRET)
    old_id = {r.tenant: r.public_id for r in store.tokens()}[None]
    assert [r.public_id for r in store.adopt_env_admin(STRONG)] == [old_id]
    assert store.principal(OLD_ADMIN) is None and store.principal(OLD_TENANT).tenant == A
    minted = store.mint(None)
    assert store.adopt_env_admin(STRONG + "-2")[0].source == "env"  # from now on only the env row is replaced
    assert store.principal(minted).admin
    store.close()


# ------------------------------------------------------------------ suanli serve and the client


def test_serve_refuses_a_weak_admin_token_with_exit_2(tmp_path):
    env = {**os.environ, "SUANLI_ADMIN_TOKEN": "sl_test-admin-token"}
    r = subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", "serve", *map(str, FLEET),
                        "--db", sqlite_url(tmp_path / "s.db"), "--port", str(free_port())],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "SUANLI_ADMIN_TOKEN: is 19 characters long; an admin token has at least 24" in r.stderr.replace("\n", " ")
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "s.db.secret").exists()


def test_serve_rotates_the_admin_token_and_the_client_lists_and_revokes(tmp_path, monkeypatch):
    db = sqlite_url(tmp_path / "s.db")
    x, y = STRONG + "-x", STRONG + "-y"
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(db, free_port(), log)
        monkeypatch.setattr(serving, "ADMIN", x)
        server.start()
        try:
            r = suanli("token", "create", "--tenant", A, "--ttl", "30d", "--name", "ci", token=x, server=server.url)
            assert r.returncode == 0, r.stderr
            tenant_token = r.stdout.strip()
            token_id = re.search(r"(tok_[a-z0-9]{8}) for acme-ai, expires 20", r.stderr).group(1)
        finally:
            server.kill()  # a stop waits for the controller's process; the kill is as good for a restart
        assert stat.S_IMODE(os.stat(tmp_path / "s.db.secret").st_mode) == 0o600
        monkeypatch.setattr(serving, "ADMIN", y)
        server.start()
        try:
            assert httpx.get(server.url + "/v1/tokens", headers=bearer(x)).status_code == 401
            listed = json.loads(suanli("token", "list", "-o", "json", token=y, server=server.url).stdout)
            states = {(t["source"], t["state"]) for t in listed if t["tenant"] is None}
            assert states == {("env", "revoked"), ("env", "active")}
            table = suanli("token", "list", token=y, server=server.url).stdout
            assert table.split()[:8] == ["ID", "TENANT", "NAME", "SOURCE", "STATE", "CREATED", "EXPIRES", "REVOKED"]
            assert token_id in table and "(admin)" in table
            assert httpx.get(server.url + "/v1/applications", headers=bearer(tenant_token)).status_code == 200
            r = suanli("token", "revoke", token_id, token=y, server=server.url)
            assert r.returncode == 0 and r.stdout.strip() == f"token/{token_id} revoked"
            r = suanli("get", "apps", token=tenant_token, server=server.url)
            assert r.returncode == 2 and "Unauthorized (401)" in r.stderr
            r = suanli("token", "revoke", "tok_nothing0", token=y, server=server.url)
            assert r.returncode == 2 and "no token 'tok_nothing0'" in r.stderr
        finally:
            server.kill()
    assert "SUANLI_ADMIN_TOKEN has a new value" in (tmp_path / "server.log").read_text()
