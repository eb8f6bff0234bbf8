"""``suanli logs``: a task's log, streamed to standard output as it comes
(never held whole), its tail, its rotated part, and following it.

Following asks for what came after the bytes printed (``?after=``) every
half second. The server names the file it read (``X-Log-File``): when that
changes, the log rotated meanwhile, so the rest of the file that was
followed is read from the rotated part, then the new file from its start.
It stops once the task has ended and its log has nothing more.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

ENDED = ("finished", "failed", "omitted", "withdrawn")
FOLLOW_EVERY_S = 0.5


def show(client: Any, task: str, params: dict[str, str], tail: int | None, rotated: bool, follow: bool) -> None:
    """Print the log (its last ``tail`` bytes), then, with ``follow``, what comes."""
    path = f"/v1/logs/{task}"
    if rotated:
        params = {**params, "rotated": "true"}
    headers = {"Range": f"bytes=-{tail}"} if tail is not None else {}
    try:
        got = _copy(client, path, params, headers, missing_ok=follow)
        if follow:
            _follow(client, task, params, *(got if got is not None else (0, None)))
    except client._httpx.TransportError as exc:
        from suanli.server.commands import _fail

        _fail(f"the log from {client.server} ended: {exc}", 1)
    except KeyboardInterrupt:
        pass


def _follow(client: Any, task: str, params: dict[str, str], offset: int, file_id: str | None) -> None:
    path = f"/v1/logs/{task}"
    while True:
        ended = _ended(client, task, params)
        got = _copy(client, path, {**params, "after": str(offset)}, {}, missing_ok=True, only_file=file_id)
        if got is None:  # no log yet (it has not run), or it rotated meanwhile
            now = _file_of(client, path, params)
            if now is not None and file_id is not None and now != file_id:
                _copy(client, path, {**params, "rotated": "true", "after": str(offset)}, {}, missing_ok=True,
                      only_file=file_id)  # the rest of the file followed so far
                offset, file_id = 0, now
                continue
            printed = 0
        else:
            printed = got[0] - offset
            offset = got[0]
        if ended and not printed:
            return
        if not printed:
            time.sleep(FOLLOW_EVERY_S)


def _ended(client: Any, task: str, params: dict[str, str]) -> bool:
    """The task has ended (or its application is gone meanwhile)."""
    r = client.http.get(f"/v1/tasks/{task}", params={k: v for k, v in params.items() if k == "tenant"})
    if r.status_code == 404:
        return True
    if r.status_code >= 400:
        client._problem(r, "")
    return r.json()["status"] in ENDED


def _file_of(client: Any, path: str, params: dict[str, str]) -> str | None:
    """The log file the server reads now (None: no log)."""
    with client.http.stream("GET", path, params=params, headers={"Range": "bytes=0-0"}) as r:
        return r.headers.get("x-log-file") if r.status_code in (206, 416) else None


def _copy(client: Any, path: str, params: dict[str, str], headers: dict[str, str], missing_ok: bool = False,
          only_file: str | None = None) -> tuple[int, str | None] | None:
    """Write the part of the log asked for to standard output as it comes; the
    offset just past it and the file's id. None: no log (``missing_ok``), or
    another file than ``only_file``."""
    with client.http.stream("GET", path, params=params, headers=headers) as r:
        if r.status_code == 404 and missing_ok:
            return None
        if r.status_code == 416:  # a tail of an empty log
            return _size(r.headers.get("content-range")), r.headers.get("x-log-file")
        if r.status_code >= 400:
            r.read()
            if r.status_code >= 500:
                from suanli.server.commands import _fail

                _fail(f"the server failed ({r.status_code}): {r.text[:500]}", 1)
            client._problem(r, "")
        file_id = r.headers.get("x-log-file")
        if only_file is not None and file_id != only_file:
            return None
        out = sys.stdout.buffer
        for chunk in r.iter_bytes():
            out.write(chunk)
        out.flush()
        if r.status_code == 206:
            return _size(r.headers.get("content-range")), file_id
        return int(params.get("after", 0)) + int(r.headers.get("content-length", 0)), file_id


def _size(content_range: str | None) -> int:
    """The file's size from ``bytes A-B/SIZE`` or ``bytes */SIZE``."""
    m = re.search(r"/(\d+)$", content_range or "")
    return int(m.group(1)) if m else 0
