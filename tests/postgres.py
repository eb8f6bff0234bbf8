"""A real PostgreSQL server for the tests, started on loopback and stopped after.

``SUANLI_TEST_POSTGRES`` (a ``postgresql+psycopg://`` URL) names one already
running. Otherwise the server binaries are looked for (``initdb`` on the PATH
or under /usr/lib/postgresql) and a private cluster is made in a temporary
directory of /tmp, on a free port, trusting local connections; as root it runs as the
``postgres`` user, since the server refuses to run as root. With neither,
the PostgreSQL half of the API suite is skipped, except under CI
(``CI=true``), where it fails: ``.ci/run`` installs the packages.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name))
    return Path(dirs[-1]) if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A PostgreSQL server for the session: ``SUANLI_TEST_POSTGRES``'s, or a
    cluster of one's own (``stop()`` ends it)."""

    def __init__(self) -> None:
        self._own = False
        self.url = os.environ.get("SUANLI_TEST_POSTGRES") or self._start()
        self._n = 0

    def _start(self) -> str:
        bin_dir = _bin_dir()
        if bin_dir is None:
            raise FileNotFoundError("no PostgreSQL server binaries (initdb) on this machine")
        self.bin = bin_dir
        # in /tmp itself: the server's user must reach it (a test's tmp_path is root's alone)
        self.where = where = Path(tempfile.mkdtemp(prefix="suanli-pg-"))
        self.data = where / "pgdata"
        port = _free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(where, "postgres")
            os.chmod(where, 0o700)
        self._run(self.bin / "initdb", "-D", self.data, "-U", "suanli", "--auth=trust", "-E", "UTF8")
        self._run(self.bin / "pg_ctl", "-D", self.data, "-l", where / "server.log", "-w", "-t", "60",
                  "-o", f"-h 127.0.0.1 -p {port} -k {where}", "start")
        self._own = True
        return f"postgresql+psycopg://suanli@127.0.0.1:{port}/postgres"

    def _run(self, *args) -> None:
        done = subprocess.run([*self.as_user, *map(str, args)], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{Path(str(args[0])).name} failed: {done.stderr.strip() or done.stdout.strip()}")

    def fresh_database(self) -> str:
        """A new empty database on the server: its URL."""
        import psycopg

        self._n += 1
        name = f"suanli_test_{os.getpid()}_{self._n}_{int(time.time() * 1000) % 10**6}"
        with psycopg.connect(self.url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        if self._own:
            subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                            "stop"], capture_output=True, timeout=120)
            shutil.rmtree(self.where, ignore_errors=True)
