"""Task logs kept under a cap (``executors/logs.py``): the rotating file, the
one thread that moves every task's output to its log, and removals."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.executors.logs import MIN_LOG, LogFolder, LogPump, RotatingLog, max_log_bytes, shown
from suanli.model.quantities import QuantityError

ROTATION = re.compile(rb"--- suanli: log over its cap[^\n]*\n")


@settings(max_examples=60, deadline=None)
@given(cap=st.integers(MIN_LOG, 3 * MIN_LOG), sizes=st.lists(st.integers(1, 5 * MIN_LOG), max_size=20))
def test_a_rotating_log_keeps_the_newest_output_within_its_cap(tmp_path_factory, cap, sizes):
    path = tmp_path_factory.mktemp("log") / "t.log"
    stream = b"".join(bytes([65 + i % 26]) * n + b"\n" for i, n in enumerate(sizes))
    log = RotatingLog(path, cap, private=True)
    firsts, at = [], 0
    for n in sizes:
        firsts.append(log.write(stream[at:at + n + 1]))
        at += n + 1
    log.close()
    rotated = path.with_name("t.log.1")
    current = path.read_bytes()
    assert len(current) <= cap and (not rotated.exists() or len(rotated.read_bytes()) <= cap)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    kept = ROTATION.sub(b"", (rotated.read_bytes() if rotated.exists() else b"") + current)
    assert stream.endswith(kept)  # a suffix of what was written, nothing out of order
    assert len(kept) >= min(len(stream), cap - 300)  # at least the last cap's worth, less its line
    assert firsts.count(True) == (1 if rotated.exists() else 0)


def test_a_log_says_once_that_it_first_went_over_its_cap(tmp_path):
    log = RotatingLog(tmp_path / "t.log", MIN_LOG, private=False)
    assert [log.write(b"x" * 3000) for _ in range(6)] == [False, True, False, False, False, False]
    log.close()
    assert (tmp_path / "t.log").read_bytes().startswith(b"--- suanli: log over its cap of 4 KiB: the oldest output "
                                                        b"was dropped; the 4 KiB before this line are the rotated part")
    with pytest.raises(ValueError):
        RotatingLog(tmp_path / "u.log", MIN_LOG - 1, private=False)


@pytest.mark.parametrize("text,cap,said", [("64Mi", 64 << 20, "64 MiB"), ("1Mi", 1 << 20, "1 MiB"),
                                           ("1.5Gi", 1536 << 20, "1.5 GiB")])
def test_the_cap_is_a_size_with_a_unit(text, cap, said):
    assert max_log_bytes(text) == cap and shown(cap) == said


@pytest.mark.parametrize("text", ["0", "12 gigs", "100Ki", "-1Mi"])
def test_a_cap_below_1mi_or_not_a_size_is_refused(text):
    with pytest.raises(QuantityError):
        max_log_bytes(text)


def test_one_thread_moves_every_tasks_output_and_a_fast_writer_holds_up_no_other(tmp_path):
    rotations: list[tuple[str, int, int]] = []
    before = threading.active_count()
    pump = LogPump(1 << 20, private=True, on_rotate=lambda *r: rotations.append(r))
    try:
        loud, quiet = pump.open("a/loud/0", tmp_path / "loud.log"), pump.open("a/quiet/0", tmp_path / "quiet.log")
        loud.write(b"--- header\n")
        procs = [subprocess.Popen(["head", "-c", str(40 << 20), "/dev/zero"], stdout=loud),
                 subprocess.Popen(["sh", "-c", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.1; done"],
                                  stdout=quiet)]
        assert threading.active_count() == before + 1  # the pump's thread, whatever the pipes
        began = time.monotonic()
        procs[1].wait()
        quiet.close()  # waits until what it wrote is in its log
        assert (tmp_path / "quiet.log").read_bytes() == b"".join(b"tick %d\n" % i for i in range(1, 6))
        assert time.monotonic() - began < 5  # not behind the 40 MB of the other
        procs[0].wait()
        loud.close()
        assert (tmp_path / "loud.log").stat().st_size <= 1 << 20
        assert (tmp_path / "loud.log.1").stat().st_size <= 1 << 20
        assert [(task, cap) for task, _, cap in rotations] == [("a/loud/0", 1 << 20)]  # once, at the first rotation
        assert 1 << 20 <= rotations[0][1] <= (1 << 20) + (64 << 10)  # what it had written then
    finally:
        pump.close()
    assert threading.active_count() == before


def test_an_applications_logs_are_dropped_and_removed_and_a_sweep_keeps_only_the_known(tmp_path):
    folder = LogFolder(tmp_path)
    pump = LogPump(MIN_LOG, private=True)
    try:
        pipe = pump.open("t:app/c/0", folder.note("t:app/c/0"))
        other = pump.open("t:app2/c/0", folder.note("t:app2/c/0"))
        for p in (pipe, other):
            p.write(b"y" * (2 * MIN_LOG))
        other.close()  # all of it in its log
        done = threading.Event()
        tasks = folder.take("t:app")
        assert tasks == {"t:app/c/0"}
        pump.drop(tasks.__contains__, lambda: (folder.remove(tasks), done.set()))
        assert done.wait(5)
        assert sorted(os.listdir(tmp_path)) == ["t%3Aapp2%2Fc%2F0.log", "t%3Aapp2%2Fc%2F0.log.1"]
        with pytest.raises(BrokenPipeError):  # what still comes finds no reader
            pipe.write(b"after its application went\n")
        pipe.close()
        assert sorted(os.listdir(tmp_path)) == ["t%3Aapp2%2Fc%2F0.log", "t%3Aapp2%2Fc%2F0.log.1"]
    finally:
        pump.close()
    (tmp_path / "t%3Aold%2Fc%2F0.log").write_text("of a deleted application\n")
    (tmp_path / "notes.txt").write_text("not a log\n")
    assert LogFolder(tmp_path).sweep(["t:app2/c/0"]) == 1
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "t%3Aapp2%2Fc%2F0.log", "t%3Aapp2%2Fc%2F0.log.1"]


def test_a_header_after_a_line_cut_short_starts_a_line_of_its_own(tmp_path):
    """A task killed mid-line leaves its log inside a line: the next run's
    header starts on a new line, so every line is the run's or ours."""
    path = tmp_path / "t.log"
    log = RotatingLog(path, 1 << 20, True)
    log.line(b"--- suanli: run 1\n")
    log.write(b"tick 1\ntick 15")  # killed here
    log.line(b"--- suanli: run 2\n")
    log.line(b"--- suanli: run 3\n")  # (after a whole line: no empty one)
    log.close()
    assert path.read_bytes().split(b"\n") == [b"--- suanli: run 1", b"tick 1", b"tick 15", b"--- suanli: run 2",
                                             b"--- suanli: run 3", b""]


def test_a_runs_output_through_the_pump_starts_on_a_line_of_its_own(tmp_path):
    """The local executor writes a run's header through the run's pipe: when
    the run before was killed mid-line, its first bytes still begin a line."""
    path = tmp_path / "t.log"
    pump = LogPump(1 << 20, private=True)
    try:
        first = pump.open("a/g/0", path)
        first.write(b"--- suanli: run 1\ntick 1\ntick 2")  # killed inside its line
        first.close()
        second = pump.open("a/g/0", path)
        second.write(b"--- suanli: run 2\ntick 3\n")
        second.close()
    finally:
        pump.close()
    assert path.read_bytes().split(b"\n") == [b"--- suanli: run 1", b"tick 1", b"tick 2", b"--- suanli: run 2",
                                             b"tick 3", b""]


def test_output_shipped_from_another_node_or_a_new_run_starts_a_line_of_its_own(tmp_path):
    """A server appends what agents ship: a run killed on one node may leave
    its line open (the rest is never sent once the task is another node's);
    the next node's output, or a new run's header, begins a line."""
    path = tmp_path / "t.log"
    log = RotatingLog(path, 1 << 20, True)
    log.shipped(b"--- suanli: run 1 on a1\ntick 1\ntick", "a1")
    log.shipped(b" 2\ntick 3", "a1")  # the same node's line goes on
    log.shipped(b"--- suanli: run 2 on a2\ntick 4", "a2")
    log.shipped(b"tick 5\n", "a1")  # a late chunk of the node before
    log.shipped(b"--- suanli: run 3 on a1\n", "a1")
    log.close()
    again = RotatingLog(path, 1 << 20, True)  # reopened: who wrote last is not known, and a header still breaks
    again.shipped(b"tick 6", "a1")
    again.shipped(b"--- suanli: run 4 on a1\n", "a1")
    again.close()
    assert path.read_bytes().split(b"\n") == [
        b"--- suanli: run 1 on a1", b"tick 1", b"tick 2", b"tick 3", b"--- suanli: run 2 on a2", b"tick 4",
        b"tick 5", b"--- suanli: run 3 on a1", b"tick 6", b"--- suanli: run 4 on a1", b""]
