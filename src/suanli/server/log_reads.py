"""Reading a task's log over HTTP (``GET /v1/logs/TASK``): a part of the file,
sent in chunks from a worker thread, so that a read holds a chunk whatever
the log's size and the event loop never waits on the disk (three reads of a
500 MB log, each read whole, took the API's process from 252 to 2,633 MiB,
and other requests waited behind them for seconds).

Which part: from ``after`` (what a follower read before), the last ``tail``
bytes, or one ``Range: bytes=...`` (RFC 9110), each up to the file's size
when the request came; the rotated part (``TASK.log.1``) the same way.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterator

CHUNK = 64 << 10  # bytes read and sent at once
RANGE = re.compile(r"bytes=\s*(\d*)\s*-\s*(\d*)\s*")
RANGE_FORMS = "bytes=START-END, bytes=START- or bytes=-LENGTH (one range, in bytes)"


class RangeRefused(Exception):
    """A ``Range`` header that is not one (``status`` 400) or asks for what
    the file does not have (416)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def byte_range(header: str, size: int) -> tuple[int, int]:
    """The bytes ``[start, end)`` of a file of ``size`` bytes that ``header`` asks for."""
    m = RANGE.fullmatch(header.strip())
    if m is None or not (m.group(1) or m.group(2)):
        raise RangeRefused(400, f"{header[:100]!r} is not {RANGE_FORMS}")
    first, last = m.group(1), m.group(2)
    if not first:  # the last LENGTH bytes
        length = int(last)
        if length == 0 or size == 0:
            raise RangeRefused(416, f"the log has {size} bytes: no last {length} of them to give")
        return max(size - length, 0), size
    start = int(first)
    end = size if not last else min(int(last) + 1, size)
    if last and int(last) < start:
        raise RangeRefused(400, f"{header[:100]!r}: the range ends before it starts")
    if start >= size:
        raise RangeRefused(416, f"the log has {size} bytes: nothing from byte {start}")
    return start, end


def chunks(f: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    """The bytes ``[start, end)`` of the open file ``f``, a chunk at a time; ``f`` is closed after."""
    try:
        f.seek(start)
        left = end - start
        while left > 0:
            data = f.read(min(CHUNK, left))
            if not data:
                return
            left -= len(data)
            yield data
    finally:
        f.close()
