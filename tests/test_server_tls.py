"""``suanli serve --tls-cert --tls-key``: the control plane over https, with a
certificate authority and a server certificate this test makes (openssl),
and the client trusting it with ``--ca``."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time

import httpx
import pytest

from serving import ADMIN, FLEET, free_port


def openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A certificate authority and a certificate for 127.0.0.1 that it signed."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test's certificates") if os.environ.get("CI") else \
            pytest.skip("no openssl here")
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=suanli test CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    return d


def suanli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from suanli.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def https(pki, tmp_path_factory):
    port = free_port()
    db = tmp_path_factory.mktemp("db") / "suanli.db"
    log = open(db.parent / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", "from suanli.cli import main; main()", "serve", *map(str, FLEET),
                             "--db", f"sqlite:///{db}", "--port", str(port), "--tls-cert", str(pki / "server.pem"),
                             "--tls-key", str(pki / "server.key")],
                            env={**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN}, stdout=log, stderr=log)
    url = f"https://127.0.0.1:{port}"
    trust = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    end = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", verify=trust, timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < end, (db.parent / "serve.log").read_text()
        time.sleep(0.1)
    yield url, port
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def test_the_client_speaks_https_to_a_server_it_trusts_with_ca(https, pki):
    url, _ = https
    r = suanli("get", "tenants", "--server", url, "--ca", str(pki / "ca.pem"), "--token", ADMIN, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert "acme-ai" in r.stdout
    env = {"SUANLI_CA": str(pki / "ca.pem"), "SUANLI_TOKEN": ADMIN, "SUANLI_SERVER": url}
    assert suanli("get", "tasks", "-o", "json", env=env).returncode == 0  # the same from the environment


def test_a_server_not_trusted_is_refused_with_a_way_out(https):
    url, _ = https
    r = suanli("get", "tenants", "--server", url, "--token", ADMIN)
    assert r.returncode == 1 and "cannot trust the server" in r.stderr and "--ca" in r.stderr, r.stderr


def test_plain_http_gets_no_answer_from_the_https_port(https):
    _, port = https
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_a_console_session_over_https_is_a_secure_cookie(https, pki):
    url, _ = https
    with httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=str(pki / "ca.pem"))) as c:
        r = c.post("/login", data={"token": ADMIN, "next": "/"}, headers={"origin": url})
        assert r.status_code == 303 and "Secure" in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]


@pytest.mark.parametrize("cert, key, field", [
    ("server.pem", None, "--tls-key"),
    (None, "server.key", "--tls-cert"),
    ("server.key", "server.key", "--tls-cert"),  # a key is no certificate
    ("nothing.pem", "server.key", "--tls-cert"),
    ("server.pem", "ca.key", "--tls-cert"),  # another certificate's key
])
def test_a_half_or_broken_tls_setup_is_a_problem_of_its_field(pki, cert, key, field):
    from suanli.server.commands import _tls_problems

    (problem,) = _tls_problems(cert and pki / cert, key and pki / key)
    assert problem.file == field, problem
    assert not _tls_problems(pki / "server.pem", pki / "server.key") and not _tls_problems(None, None)


def test_serve_refuses_a_broken_tls_setup_with_exit_2(pki, tmp_path):
    r = suanli("serve", *map(str, FLEET), "--db", f"sqlite:///{tmp_path / 'x.db'}", "--port", str(free_port()),
               "--tls-cert", str(pki / "server.pem"))
    assert r.returncode == 2 and "--tls-key" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_ca_file_that_is_not_one_is_said_so(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    r = suanli("get", "tenants", "--server", "https://127.0.0.1:9", "--ca", str(bad), "--token", ADMIN)
    assert r.returncode == 2 and "--ca" in r.stderr and "Traceback" not in r.stderr, r.stderr
