"""Task logs: each task's output in ``logs/TASK.log``, kept under a cap.

A task's stdout and stderr are one pipe to its executor, not the log file
itself: one thread of the executor (``LogPump``) waits on every task's pipe
at once (``selectors``) and appends what comes, up to 64 KiB a read, to the
task's ``RotatingLog``. A task that writes faster than that waits on its
full pipe; the others do not wait for it. Past the cap (``--max-log``,
64 MiB by default) ``TASK.log`` becomes ``TASK.log.1`` (the one before is
dropped) and a new ``TASK.log`` starts with a line saying so: at most twice
the cap is on disk per task, whatever it writes. The task is told its cap
(``SUANLI_LOG_MAX_BYTES``), and its log's first rotation is an event
(``logRotated``). An application's logs go with it (``LogFolder.remove``);
those of applications deleted while no executor ran go at the next start
(``LogFolder.sweep``).
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Collection
from urllib.parse import unquote

from suanli.executors.tasks import safe

DEFAULT_MAX_LOG = 64 << 20  # bytes of a task's log before it rotates
MIN_LOG = 4096  # a cap must hold the line that says the log rotated, and more
CHUNK = 64 << 10  # bytes read from a pipe at once: a fast writer costs a read per 64 KiB
DRAIN_S = 1.0  # how long the end of a task waits for the rest of its output to be written
ROTATED = ".1"
HEADER = b"--- suanli: "  # how the executor's own lines in a log begin (a run's header, a rotation)
log = logging.getLogger("suanli.logs")


def shown(n: int) -> str:
    """A size as people read it: ``1 MiB``, ``64 MiB``, ``1.5 GiB``, ``5000 bytes``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % (size // 1024 or 1) == 0:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def max_log_bytes(text: str) -> int:
    """``--max-log``: a size with a unit (``64Mi``), at least ``1Mi``, as bytes."""
    from suanli.model.quantities import QuantityError, parse_mem_mib

    mib = parse_mem_mib(text)
    if mib < 1:
        raise QuantityError(f"{text!r} is below 1Mi: a log's cap must hold its lines")
    return mib << 20


def app_of(task: str) -> str:
    """``APP/COMPONENT/INDEX`` -> ``APP``."""
    return task.partition("/")[0]


def _open(path: Path, private: bool) -> int:
    """``path`` opened to append, and to read its last byte (created 0600 when ``private``; never through
    a link)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600 if private else 0o666)
    if private:
        os.fchmod(fd, 0o600)
    return fd


class RotatingLog:
    """A task's log file, appended to and kept under ``max_bytes``: the write
    that would pass the cap fills the file to it, the file becomes
    ``TASK.log.1`` and a new ``TASK.log`` goes on, after a line saying so."""

    def __init__(self, path: Path, max_bytes: int, private: bool) -> None:
        if max_bytes < MIN_LOG:
            raise ValueError(f"a log's cap must be at least {MIN_LOG} bytes, got {max_bytes}")
        self.path, self.max_bytes, self.private = path, max_bytes, private
        self.fd = _open(path, private)
        self.size = os.fstat(self.fd).st_size
        self.written = self.size  # the log's bytes as found, and the task's since
        self.writer: object = None  # whose output was written last, where several write it (a server's nodes)

    def write(self, data: bytes) -> bool:
        """Append ``data``; True when that took the log over its cap for the
        first time (it had no rotated part before)."""
        first = False
        view = memoryview(data)
        while view:
            if self.size >= self.max_bytes:
                first |= self._rotate()
            n = os.write(self.fd, view[: self.max_bytes - self.size])
            self.size += n
            self.written += n
            view = view[n:]
        return first

    def line(self, text: bytes) -> bool:
        """Append a line of the executor's own (a run's header), on a line of
        its own: after a new line when the log ends inside one (a task killed
        mid-line); as ``write``."""
        return self.write(self._break() + text)

    def end_line(self) -> bool:
        """End the line the log ends inside, if it does (what comes next is
        another run's, or another node's); as ``write``."""
        brk = self._break()
        return self.write(brk) if brk else False

    def shipped(self, data: bytes, writer: object) -> bool:
        """Append output that ``writer`` sent (a node's agent, to its server):
        a run's header, or another writer's output, starts a line of its own
        (a run killed on one node may leave its last line open, and the bytes
        that would close it are never sent); as ``write``."""
        first = self.end_line() if data.startswith(HEADER) or writer != self.writer else False
        self.writer = writer
        return self.write(data) or first

    def _break(self) -> bytes:
        return b"\n" if self.size and os.pread(self.fd, 1, self.size - 1) != b"\n" else b""

    def _rotate(self) -> bool:
        rotated = self.path.with_name(self.path.name + ROTATED)
        first = not rotated.exists()
        os.close(self.fd)
        self.fd = -1
        os.replace(self.path, rotated)
        self.fd = _open(self.path, self.private)
        self.size = os.fstat(self.fd).st_size
        cap = shown(self.max_bytes)
        line = (f"--- suanli: log over its cap of {cap}: the output before this line is the rotated part; "
                f"the oldest is dropped when it goes over again ({self.written} bytes written)\n" if first else
                f"--- suanli: log over its cap of {cap}: the oldest output was dropped; the {cap} before this "
                f"line are the rotated part ({self.written} bytes written)\n")
        os.write(self.fd, line.encode())
        self.size += len(line)
        return first

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class TaskPipe:
    """The executor's end of a task's output: give it as the process's
    ``stdout`` (``fileno``); ``write`` puts a line in the log before the
    process starts (the run's header). ``release`` closes this process's copy
    of the write end once the task's process has its own; ``close`` also
    waits (up to ``DRAIN_S``) until what the task wrote is in its log."""

    def __init__(self, key: str, path: Path, read_fd: int, write_fd: int) -> None:
        self.key, self.path, self.read_fd = key, path, read_fd
        self._write_fd = write_fd
        self._lock = threading.Lock()
        self.drained = threading.Event()  # its pipe reached its end, and every byte is written
        self.began = False  # something of it is in its log (its first bytes start a line of their own)

    def fileno(self) -> int:
        return self._write_fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._write_fd, view):]

    def flush(self) -> None:
        """Nothing is buffered here."""

    def release(self) -> None:
        with self._lock:
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1

    def close(self) -> None:
        self.release()
        self.drained.wait(DRAIN_S)


class LogPump:
    """One thread writing the output of every task of an executor to its log
    (see the module's docstring). Other threads ask it for things through a
    queue (``_ask``), so that the pipes, files and removals of logs are
    touched by its thread alone, in the order asked."""

    def __init__(self, max_bytes: int, private: bool,
                 on_rotate: Callable[[str, int, int], None] | None = None) -> None:
        """``on_rotate(key, bytes written, cap)``: a log's first rotation."""
        if max_bytes < MIN_LOG:
            raise ValueError(f"a log's cap must be at least {MIN_LOG} bytes, got {max_bytes}")
        self.max_bytes, self.private, self.on_rotate = max_bytes, private, on_rotate
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._asked: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._logs: dict[str, RotatingLog] = {}  # key -> its log, while a pipe of it is open
        self._pipes: dict[str, int] = {}  # key -> its pipes open
        self._closing: float | None = None  # time.monotonic() past which pipes still open are left
        self._thread = threading.Thread(target=self._run, name="suanli-logs", daemon=True)
        self._thread.start()

    def open(self, key: str, path: Path) -> TaskPipe:
        """A new pipe to the log ``path`` (``key``: the task; its runs' pipes share one log)."""
        read_fd, write_fd = os.pipe()
        pipe = TaskPipe(key, path, read_fd, write_fd)
        self._ask(lambda: self._add(pipe))
        return pipe

    def drop(self, match: Callable[[str], bool], then: Callable[[], None]) -> None:
        """Close the pipes and logs of the keys that ``match`` (what still comes
        through them is not written), then ``then()``, in this pump's order."""
        self._ask(lambda: self._drop(match, then))

    def close(self, timeout_s: float = DRAIN_S) -> None:
        """Write what the pipes still hold (up to ``timeout_s``), then stop."""
        self._ask(lambda: setattr(self, "_closing", time.monotonic() + timeout_s))
        self._thread.join(timeout_s + 1.0)

    # ------------------------------------------------------------ its thread

    def _ask(self, what: Callable[[], None]) -> None:
        with self._lock:
            self._asked.append(what)
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:  # woken already
            pass

    def _run(self) -> None:
        try:
            while self._closing is None or (self._pipes and time.monotonic() < self._closing):
                timeout = None if self._closing is None else max(self._closing - time.monotonic(), 0.0)
                for key, _ in self._selector.select(timeout):
                    try:
                        self._ready(key.data)
                    except Exception:  # noqa: BLE001 - one log's trouble must not stop the others'
                        log.exception("task log %s", getattr(key.data, "key", "(asked)"))
        finally:
            for pipe in [k.data for k in self._selector.get_map().values() if k.data is not None]:
                self._end(pipe)
            self._selector.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _ready(self, pipe: TaskPipe | None) -> None:
        if pipe is None:  # asked for something
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            while True:
                with self._lock:
                    if not self._asked:
                        return
                    what = self._asked.popleft()
                try:
                    what()
                except Exception:  # noqa: BLE001 - what was asked after it is still done
                    log.exception("task logs")
            return
        try:
            data = os.read(pipe.read_fd, CHUNK)
        except OSError:
            data = b""
        if not data:
            self._end(pipe)
            return
        out = self._logs.get(pipe.key)
        if out is None:
            return  # its log could not be opened: what comes is dropped
        try:
            first = out.write(data) if pipe.began else out.line(data)
            pipe.began = True
        except OSError as exc:  # no room on the disk, say: this output is lost, the task goes on
            log.warning("task log %s: %s", pipe.path, exc.strerror or exc)
            return
        if first and self.on_rotate is not None:
            self.on_rotate(pipe.key, out.written, self.max_bytes)

    def _add(self, pipe: TaskPipe) -> None:
        self._selector.register(pipe.read_fd, selectors.EVENT_READ, pipe)
        self._pipes[pipe.key] = self._pipes.get(pipe.key, 0) + 1
        if pipe.key not in self._logs:
            try:
                self._logs[pipe.key] = RotatingLog(pipe.path, self.max_bytes, self.private)
            except OSError as exc:
                log.warning("task log %s: %s", pipe.path, exc.strerror or exc)

    def _end(self, pipe: TaskPipe) -> None:
        self._selector.unregister(pipe.read_fd)
        os.close(pipe.read_fd)
        left = self._pipes.pop(pipe.key) - 1
        if left:
            self._pipes[pipe.key] = left
        else:
            out = self._logs.pop(pipe.key, None)
            if out is not None:
                out.close()
        pipe.drained.set()

    def _drop(self, match: Callable[[str], bool], then: Callable[[], None]) -> None:
        for pipe in [k.data for k in self._selector.get_map().values() if k.data is not None and match(k.data.key)]:
            self._end(pipe)
        then()


class LogFolder:
    """An executor's ``logs`` folder: where each task's log is, and which
    tasks have one, by application (so that an application's logs are
    removed without listing the folder)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._by_app: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def path(self, task: str) -> Path:
        return self.folder / f"{safe(task)}.log"

    def note(self, task: str) -> Path:
        """The log of ``task``, which is about to be written."""
        with self._lock:
            self._by_app.setdefault(app_of(task), set()).add(task)
        return self.path(task)

    def take(self, app: str) -> set[str]:
        """The tasks of the application ``app`` that have logs, forgotten here
        (a task of an application made again under its name is noted anew)."""
        with self._lock:
            return self._by_app.pop(app, set())

    def remove(self, tasks: Collection[str]) -> None:
        """The logs (and rotated parts) of ``tasks``."""
        for task in tasks:
            for path in (self.path(task), self.path(task).with_name(self.path(task).name + ROTATED)):
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("cannot remove %s: %s", path, exc.strerror or exc)

    def sweep(self, tasks: Collection[str]) -> int:
        """Remove the logs of tasks not among ``tasks`` (their applications
        were deleted while no executor ran); the others are noted. How many
        files went."""
        keep = set(tasks)
        gone = 0
        try:
            entries = list(os.scandir(self.folder))
        except FileNotFoundError:
            return 0
        for entry in entries:
            stem = entry.name[:-len(".log")] if entry.name.endswith(".log") else \
                entry.name[:-len(".log" + ROTATED)] if entry.name.endswith(".log" + ROTATED) else None
            if stem is None or not entry.is_file(follow_symlinks=False):
                continue
            task = unquote(stem)
            if task in keep:
                self.note(task)
                continue
            try:
                os.unlink(entry.path)
                gone += 1
            except OSError as exc:
                log.warning("cannot remove %s: %s", entry.path, exc.strerror or exc)
        return gone
