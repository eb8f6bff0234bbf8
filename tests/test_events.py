"""The event log: batch encoding, the streamed file and its writer process."""

from __future__ import annotations

import gc
import json

import pytest

from suanli.sim import events
from suanli.sim.events import EventLog, encode, lines
from suanli.sim.results import write_outputs
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world


def _events(n: int) -> list[dict]:
    return [{"t": i / 3, "kind": ("submitted", "migrated", "preempted")[i % 3], "task": f"a/b/{i}",
             **({"cause": "return", "bytes": i, "downtime_s": i / 7} if i % 3 else {})} for i in range(n)]


@pytest.fixture
def writer_soon(monkeypatch):
    """Streamed logs start their writer at once and hand on a few events at a time."""
    monkeypatch.setattr(events, "WRITER_AFTER", 1)
    monkeypatch.setattr(events, "BATCH", 4)


@pytest.mark.parametrize("batch", [
    [],
    [{}],
    [{"t": 0.0, "kind": "placed"}, {}, {"t": -0.0, "kind": "x"}],
    [{"kind": "a", "reason": "},{"}, {"kind": "b"}],  # a boundary's text inside a string
    [{"kind": "a", "between": [{"x": 1}, {"y": 2}]}, {"kind": "b"}],  # ... and inside a nested value
    [{"kind": "a", "reason": "}\n{"}, {"kind": "b", "s": "é\u2028\"\\"}],
    [{"t": float("nan"), "n": None, "b": True, "i": 10**30, "f": 1e-7, "l": [1, (2, 3)], 1: "k"}],
], ids=["empty", "one-empty", "zeros", "boundary-in-string", "boundary-nested", "escapes", "values"])
def test_lines_are_the_events_encoded_one_by_one(batch):
    assert lines(batch) == "".join(map(encode, batch))


@pytest.mark.parametrize("streamed_writer", [False, True], ids=["in-process", "writer"])
def test_a_streamed_log_writes_what_a_log_in_memory_keeps(tmp_path, monkeypatch, streamed_writer):
    if streamed_writer:
        monkeypatch.setattr(events, "WRITER_AFTER", 1)
    monkeypatch.setattr(events, "BATCH", 5)
    evs = _events(23)
    memory, streamed = EventLog(), EventLog(tmp_path / "events.jsonl")
    for e in evs:
        memory.append(e)
        streamed.append(e)
    assert (streamed._stream._writer is not None) == streamed_writer
    streamed.close()
    assert (tmp_path / "events.jsonl").read_text() == "".join(map(encode, evs))
    assert list(streamed) == list(memory) == json.loads(json.dumps(evs))
    for figure in ("kinds", "causes", "migrated_bytes", "migrated_downtime_s", "notable"):
        assert getattr(streamed, figure) == getattr(memory, figure)
    assert len(streamed) == len(memory) == 23


def test_reading_a_streamed_log_midway_sees_every_event_and_the_log_goes_on(tmp_path, writer_soon):
    log = EventLog(tmp_path / "events.jsonl")
    evs = _events(30)
    for e in evs[:10]:
        log.append(e)
    assert [e["task"] for e in log] == [e["task"] for e in evs[:10]]  # ends the writer: all is in the file
    assert log._stream._writer is None
    for e in evs[10:]:
        log.append(e)
    assert log._stream._writer is not None  # a new one, appending
    log.close()
    assert (tmp_path / "events.jsonl").read_text() == "".join(map(encode, evs))


def test_an_error_in_the_writer_is_raised_here(tmp_path, writer_soon):
    log = EventLog(tmp_path / "events.jsonl")
    for e in _events(8):
        log.append(e)
    writer = log._stream._writer
    log.append({"kind": "x", "raw": b"\x00"})  # marshal carries bytes; JSON does not
    with pytest.raises(RuntimeError, match="not JSON serializable"):
        log.close()
    assert writer.poll() is not None


def test_values_marshal_cannot_carry_are_encoded_here(tmp_path, writer_soon):
    class Millis(int):
        pass

    evs = [{"kind": "x", "n": Millis(3)}, {"kind": "y", "f": 1.5}] * 5
    log = EventLog(tmp_path / "events.jsonl")
    for e in evs:
        log.append(e)
    log.close()
    assert (tmp_path / "events.jsonl").read_text() == "".join(map(encode, evs))


def test_a_streamed_log_dropped_unclosed_ends_its_file_and_writer(tmp_path, writer_soon):
    log = EventLog(tmp_path / "events.jsonl")
    evs = _events(10)
    for e in evs:
        log.append(e)
    writer = log._stream._writer
    del log
    gc.collect()
    assert writer.poll() is not None
    assert (tmp_path / "events.jsonl").read_text() == "".join(map(encode, evs))


def test_a_run_streamed_through_the_writer_gives_the_same_outputs(examples, tmp_path, writer_soon):
    files = []
    for name in ("memory", "streamed"):
        out = tmp_path / name
        out.mkdir()
        sim = Simulation(load_world([examples / "autodrive.yaml"]),
                         events_to=out / "events.jsonl.part" if name == "streamed" else None)
        paths = write_outputs(sim, sim.run(), out)
        files.append({k: p.read_bytes() for k, p in paths.items()})
    assert files[0] == files[1]


@pytest.mark.parametrize("block", [7, 64, 300, 1 << 20])
def test_a_streamed_log_read_in_blocks_finds_what_the_memory_log_holds(tmp_path, monkeypatch, block):
    """``metrics.events_of`` reads a streamed file a block at a time, lines cut
    across blocks (and lines longer than a block) included: it yields the
    events the in-memory log yields for the same tasks, in the same order."""
    from suanli.sim import metrics

    monkeypatch.setattr(metrics, "SCAN_BLOCK", block)
    made = []
    for i in range(400):
        kind = metrics.STORY_KINDS[i % len(metrics.STORY_KINDS)] if i % 4 else "submitted"
        made.append({"t": i / 3, "kind": kind, "task": f"app/c\"{i % 37}/{i % 5}",
                     **({"reason": "x" * (i % 97)} if i % 2 else {}), **({"kind2": "omitted"} if i % 11 == 0 else {})})
    made += [{"t": 200.0, "kind": "omitted", "task": "gone/0", "reason": "y" * 500}]
    streamed, memory = EventLog(tmp_path / "e.jsonl"), EventLog()
    for e in made:
        streamed.append(dict(e))
        memory.append(dict(e))
    wanted = {f"app/c\"{k}/{r}" for k in range(0, 37, 3) for r in range(5)}
    got = list(metrics.events_of(streamed, wanted, omitted=True))
    want = list(metrics.events_of(memory, wanted, omitted=True))
    assert got == want
    assert len(got) > 40 and any(e["kind"] == "omitted" for e in got)  # (the cases reach both kinds)
    streamed.close()
