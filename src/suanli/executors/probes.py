"""Health probes of a running task, as Kubernetes has them.

A task's ``run.readiness`` and ``run.liveness`` (``model.work.Probe``) are
run by its executor in a thread of the task's own, from its start until it
ends: first after ``initial_delay_s``, then every ``period_s``, each within
``timeout_s`` (a check that takes longer failed).

- **readiness**: the task starts not ready; ``success_threshold`` passes in
  a row make it ready (event ``ready``), ``failure_threshold`` failures in a
  row make it not ready again (event ``notReady``, with the last failure).
  A task that is not ready runs but does not serve: its page says so, and
  an update in place waits for it.
- **liveness**: ``failure_threshold`` failures in a row and the task is
  killed (event ``livenessFailed``); it ends with that reason, and its
  restart policy applies.

The checks: ``exec`` runs a command as the task (its user, environment and
folder; in its container for the podman executor) and passes on exit 0;
``http`` is a GET on this machine's loopback at the port and path, passed by
a status of 200 to 399; ``tcp`` passes when the port accepts a connection.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import threading
import time
from typing import Callable

from suanli.model.work import Probe

Check = Callable[[Probe], tuple[bool, str]]  # a probe -> (passed, what was seen)


def network_check(probe: Probe, host: str = "127.0.0.1") -> tuple[bool, str]:
    """An http or tcp probe of a task on this machine."""
    try:
        if probe.kind == "tcp":
            with socket.create_connection((host, probe.port), timeout=probe.timeout_s):
                return True, f"port {probe.port} accepts"
        conn = http.client.HTTPConnection(host, probe.port, timeout=probe.timeout_s)
        try:
            conn.request("GET", probe.path, headers={"User-Agent": "suanli-probe"})
            status = conn.getresponse().status
        finally:
            conn.close()
        return 200 <= status < 400, f"HTTP {status}"
    except (OSError, http.client.HTTPException) as exc:
        return False, _said(exc)


def command_check(argv: list[str], probe: Probe, **popen) -> tuple[bool, str]:
    """An exec probe: ``argv`` (the probe's command as the task runs it) exits 0 within its timeout."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=probe.timeout_s, **popen)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {probe.timeout_s:g}s"
    except OSError as exc:
        return False, _said(exc)
    last = done.stdout.decode(errors="replace").strip().splitlines()[-1:] if done.stdout else []
    return done.returncode == 0, f"exit status {done.returncode}" + (f": {last[0][:200]}" if last else "")


def _said(exc: BaseException) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "no answer in time"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class Prober:
    """The probes of one run of one task, each in a thread of its own until ``ended`` is set."""

    def __init__(self, readiness: Probe | None, liveness: Probe | None, check: Check, ended: threading.Event,
                 post: Callable[..., None], failed: Callable[[str], None], name: str) -> None:
        """``post(kind, **fields)`` says a change (``ready``, ``notReady``,
        ``livenessFailed``); ``failed(reason)`` kills the task when its
        liveness fails."""
        self.readiness, self.liveness, self.check, self.ended = readiness, liveness, check, ended
        self.post, self.failed = post, failed
        self.ready = False
        self.threads = [threading.Thread(target=self._run, args=(p,), name=f"suanli-probe-{name}", daemon=True)
                        for p in (readiness, liveness) if p is not None]

    def start(self) -> "Prober":
        for t in self.threads:
            t.start()
        return self

    def _run(self, probe: Probe) -> None:
        due = time.monotonic() + probe.initial_delay_s
        ok = bad = 0  # passes, failures in a row
        while not self.ended.wait(max(0.0, due - time.monotonic())):
            passed, seen = self.check(probe)
            if self.ended.is_set():
                return
            due = max(due + probe.period_s, time.monotonic())
            ok, bad = (ok + 1, 0) if passed else (0, bad + 1)
            if probe is self.readiness:
                if not self.ready and ok >= probe.success_threshold:
                    self.ready = True
                    self.post("ready", probe=probe.target)
                elif self.ready and bad >= probe.failure_threshold:
                    self.ready = False
                    self.post("notReady", probe=probe.target,
                              reason=f"readiness probe failed {bad} times in a row ({seen})")
            elif bad >= probe.failure_threshold:
                reason = f"liveness probe failed {bad} times in a row ({seen})"
                self.post("livenessFailed", probe=probe.target, reason=reason)
                self.failed(reason)
                return
