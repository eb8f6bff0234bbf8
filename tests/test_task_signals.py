"""A stop or a checkpoint asked of a task as it starts reaches it: with a pid
namespace per task, ``unshare`` forks the task's command a moment after the
executor's start returns, and a signal sent before that reached nobody. The
task then ran on through its grace and was killed with what it had not saved
(a game moved right after its start came back to an older checkpoint)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from suanli.executors.tasks import CHECKPOINT_MARK, ask_task, await_checkpoint, pid_namespace, signal_task, task_command

UNSHARE = pid_namespace()[0]
pytestmark = pytest.mark.skipif(UNSHARE is None, reason="no pid namespace per task here")

# traps first: before them the shell dies of the signal, having done nothing
KEEPER = ("trap 'echo saved; exit 0' TERM; trap 'touch \"$STATE/%s\"' USR1; echo up; "
          "while :; do sleep 0.01; done" % CHECKPOINT_MARK)
TRIES = 12


def start(state: Path | None = None) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", "STATE": str(state or "/nonexistent")}
    return subprocess.Popen(task_command(("sh", "-c", KEEPER), [], None, UNSHARE), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)


def ended_by_itself(p: subprocess.Popen) -> str | None:
    """Its output once it ended; None if it was still running long after (then killed)."""
    try:
        return p.communicate(timeout=30)[0].decode()
    except subprocess.TimeoutExpired:
        signal_task(p.pid, signal.SIGKILL, True)
        p.communicate()
        return None


def test_a_stop_asked_as_the_task_starts_reaches_it():
    outcomes = []
    for _ in range(TRIES):
        p = start()
        assert ask_task(p.pid, signal.SIGTERM, True, lambda: p.poll() is not None, 30) or p.poll() is not None
        out = ended_by_itself(p)
        # it ended of the stop: it saved, or it died before it had run (never ran on unstopped)
        assert out is not None, "the stop reached nobody: the task ran on"
        assert "saved" in out or "up" not in out, out
        outcomes.append("saved" in out)
    # and once it runs, a stop is a stop it handles
    p = start()
    assert p.stdout.readline() == b"up\n"
    assert ask_task(p.pid, signal.SIGTERM, True, lambda: p.poll() is not None, 30)
    assert ended_by_itself(p) == "saved\n"


def test_a_checkpoint_asked_as_the_task_starts_reaches_it(tmp_path):
    marked = 0
    for i in range(TRIES):
        state = tmp_path / str(i)
        state.mkdir()
        p = start(state)
        try:
            done = await_checkpoint(state, lambda: signal_task(p.pid, signal.SIGUSR1, True),
                                    lambda: p.poll() is not None, 30)
            # marked, or it died of the signal before its trap (and then it had done nothing)
            assert done or p.wait(30) is not None
            marked += done
        finally:
            signal_task(p.pid, signal.SIGKILL, True)
            p.communicate()
    assert marked  # the checkpoint does happen (the case is not vacuous)
