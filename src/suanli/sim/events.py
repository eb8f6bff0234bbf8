"""The event log of a simulated run (``events.jsonl``), in time order.

A short run keeps its log in memory, as a list of dicts. A long one streams
it to a file as it grows: a million tasks make several million events, more
than memory should hold. Either way the log keeps, as events are appended,
what the figures and the report need from it: counts by kind and by cause,
the state bytes and downtime of migrations, and the events the report draws
one by one (moves and incidents, ``NOTABLE``).

A streamed log encodes its events in batches: the JSON encoder costs less
per event over a list than called once per event. Once a log has proved long
(``WRITER_AFTER`` events), its batches go, as marshal dumps (cheaper still to
make), to a writer process that encodes and writes them, on another core,
while the simulation goes on. This module is that process's program too:
run as a script, it appends the batches on its standard input to a file.
"""

from __future__ import annotations

import json
import marshal
import os
import struct
import subprocess
import sys
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

MOVE_KINDS = ("nodeDown", "nodeUp", "nodeDrain", "nodeCordon", "linkDown", "linkUp", "lost", "requeued", "preempted", "migrated")
INCIDENT_KINDS = ("nodeDown", "nodeUp", "nodeDrain", "nodeCordon", "linkDown", "linkUp", "deviceBusy")
NOTABLE = frozenset(MOVE_KINDS + INCIDENT_KINDS)

# Events a streamed log holds before it encodes them or hands them on. Few: the
# garbage collector runs once so many objects are made and not yet freed, and
# a thousand events held make it run some 70% more often in a long replay.
BATCH = 128
WRITER_AFTER = 20_000  # events before a streamed log starts its writer: fewer cost less to encode here
PIPE_BUFFER = 1 << 20  # bytes gathered before a write to the writer's pipe: fewer system calls

_ENCODER = json.JSONEncoder(separators=(",", ":"))  # made once: json.dumps would make one per call
_SIZE = struct.Struct("<Q")  # the length before each batch on the writer's pipe


def encode(event: dict[str, Any]) -> str:
    """One line of ``events.jsonl`` (what ``json.dumps(event, separators=(",", ":"))`` gives)."""
    return _ENCODER.encode(event) + "\n"


def lines(events: list[dict[str, Any]]) -> str:
    """``"".join(map(encode, events))``, with one call to the encoder.

    A list of dicts encodes as ``[{...},{...},...]``: each event as it would
    alone, and ``},{`` between each two. Occurrences of ``},{`` cannot
    overlap, so where the text holds exactly ``len(events) - 1`` of them no
    string or nested value holds one: they are the boundaries, and the list
    is cut there. Otherwise each event is encoded on its own.
    """
    if not events:
        return ""
    text = _ENCODER.encode(events)
    if text.count("},{") == len(events) - 1:
        return text[1:-1].replace("},{", "}\n{") + "\n"
    return "".join(map(encode, events))


class EventLog:
    """Append-only; with ``to``, events are written there in batches and only
    the running figures and ``notable`` events stay in memory."""

    def __init__(self, to: Path | None = None) -> None:
        self.kinds: Counter = Counter()
        self.causes: Counter = Counter()  # why work was disturbed: each preemption and move once
        self.migrated_bytes = 0
        self.migrated_downtime_s = 0.0
        self.notable: list[dict[str, Any]] = []
        self.path = to
        self._events: list[dict[str, Any]] = []  # in memory: the whole log; streamed: those not yet written
        self._n = 0
        self._stream = _Stream(to) if to is not None else None
        if self._stream is not None:  # a log dropped unclosed (the run raised) still ends its file and writer
            weakref.finalize(self, self._stream.close, self._events)

    def append(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        self._n += 1
        self.kinds[kind] += 1
        if "cause" in event:
            self.causes[event["cause"]] += 1
        if kind in NOTABLE:
            self.notable.append(event)
            if kind == "migrated":
                self.migrated_bytes += int(event.get("bytes", 0))
                self.migrated_downtime_s += float(event.get("downtime_s", 0.0))
        events = self._events
        events.append(event)
        if self._stream is not None and len(events) >= BATCH:
            self._stream.write(events)
            events.clear()

    def __len__(self) -> int:
        return self._n

    def take(self) -> list[dict[str, Any]]:
        """The events of an in-memory log appended since the last take, which it
        then forgets: a live control plane hands them on and keeps none."""
        if self._stream is not None:
            raise TypeError("a streamed log writes its events to its file")
        events, self._events = self._events, []
        return events

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._stream is None:
            return iter(self._events)
        return self._read()

    def __getitem__(self, i):
        if self._stream is not None:
            raise TypeError("a streamed event log is read by iterating over it")
        return self._events[i]

    def _read(self) -> Iterator[dict[str, Any]]:
        self._stream.write(self._events)
        self._events.clear()
        self._stream.sync()
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)

    def close(self) -> None:
        """Finish a streamed log's file: every event written, the writer
        process ended (nothing to do for a log in memory)."""
        if self._stream is not None:
            self._stream.close(self._events)
            self._events.clear()


class _Stream:
    """The file of a streamed log, and its writer process once it has one.

    The writer reads batches from a pipe, so they are written in the order
    handed on. An error in it (a full disk) surfaces here as a ``RuntimeError``,
    at a later batch or at ``sync``/``close``. It runs in a process group of
    its own, so an interrupt meant for the simulation does not cut the log
    short; if this process dies, its pipe closes and the writer ends.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "w", encoding="utf-8")  # closed while a writer has the file
        self._writer: subprocess.Popen | None = None
        self._written = 0
        self._closed = False

    def write(self, batch: list[dict[str, Any]]) -> None:
        """Write the events of ``batch``, or give them to the writer."""
        if not batch:
            return
        self._written += len(batch)
        if self._writer is None and self._written >= WRITER_AFTER:
            self._start()
        if self._writer is None:
            self._file.write(lines(batch))
            return
        try:
            dump = marshal.dumps(batch)
        except ValueError:  # a value marshal cannot carry (a subclass of int, a NumPy number): encoded here
            dump = marshal.dumps(lines(batch))
        self._send(dump)

    def sync(self) -> None:
        """Everything written so far is in the file (a writer is ended)."""
        if self._closed:
            return
        if self._writer is not None:
            self._finish()
            self._file = open(self.path, "a", encoding="utf-8")
        self._file.flush()

    def close(self, last: list[dict[str, Any]] = ()) -> None:
        """Write ``last`` (what a log dropped unclosed still held), end the
        writer and close the file."""
        if self._closed:
            return
        self._closed = True
        try:
            self.write(last)
        finally:
            if self._writer is not None:
                self._finish()
            self._file.close()

    def _start(self) -> None:
        self._file.flush()  # the writer appends after what is written here
        self._writer = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), os.path.abspath(self.path)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, process_group=0,
            bufsize=PIPE_BUFFER)
        self._file.close()

    def _send(self, dump: bytes) -> None:
        pipe = self._writer.stdin
        try:
            pipe.write(_SIZE.pack(len(dump)))
            pipe.write(dump)
        except BrokenPipeError:  # the writer has ended: say why
            self._finish()
            raise RuntimeError(f"the writer of {self.path} ended early") from None

    def _finish(self) -> None:
        """Close the writer's pipe and wait for it to end; raise if it failed."""
        writer, self._writer = self._writer, None
        try:
            writer.stdin.close()
        except BrokenPipeError:
            pass  # what was left in the pipe's buffer: the writer has failed, and says why below
        error = writer.stderr.read().decode(errors="replace").strip()
        writer.stderr.close()
        if writer.wait() != 0:
            raise RuntimeError(f"the writer of {self.path} failed: {error or f'exit status {writer.returncode}'}")


def _write(path: str) -> None:
    """The writer: append each batch on standard input to ``path``, until
    the pipe closes. A batch is its length and a marshal dump of a list of
    events or of lines already encoded."""
    pipe = sys.stdin.buffer
    with open(path, "a", encoding="utf-8") as f:
        while size := pipe.read(_SIZE.size):
            batch = marshal.loads(pipe.read(_SIZE.unpack(size)[0]))
            f.write(batch if isinstance(batch, str) else lines(batch))


if __name__ == "__main__":
    _write(sys.argv[1])
