"""``suanli serve`` as a child process on a free loopback port, for the tests
that need a real server: killed, started again, talked to by the CLI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from conftest import EXAMPLES

ADMIN = "sl_test-admin-7Hq2vKx9Rm4WbZ8pLc3N"  # strong enough for serve: 24+ characters, 10+ distinct
FLEET = (EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``suanli serve`` as a child process, started again after each kill."""

    def __init__(self, db: str, port: int, log, *extra: str, speed: float = 20, files=FLEET) -> None:
        self.db, self.port, self.log, self.extra, self.speed, self.files = db, port, log, extra, speed, files
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.kills = 0

    def start(self) -> None:
        env = {**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from suanli.cli import main; main()", "serve",
             *map(str, self.files),
             "--db", self.db, "--port", str(self.port), "--speed", str(self.speed), "--max-rate", "100000",
             *self.extra],
            env=env, stdout=self.log, stderr=self.log)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError("the server did not come up within 60 s")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def pages(http, path: str, headers: dict | None = None, **params) -> list[list]:
    """The pages of a listing, following ``X-Next-Cursor`` (each page but the
    last also links the next one); ``http``: an HTTP client or a test client."""
    out: list[list] = []
    while True:
        r = http.get(path, params=params, headers=headers or {})
        assert r.status_code == 200, r.text
        out.append(r.json())
        cursor = r.headers.get("x-next-cursor")
        if not cursor:
            return out
        assert 'rel="next"' in r.headers["link"]
        params = {**params, "cursor": cursor}


def every(http, path: str, **params) -> list:
    """All items of a listing, page after page."""
    return [item for page in pages(http, path, **params) for item in page]


def wait(pred, timeout: float = 30.0, what: str = "the condition", every: float = 0.02):
    """``pred()``'s first true value, asked every ``every`` seconds; fails after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
