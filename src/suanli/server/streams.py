"""Event streams of one API process: one poller for all of them.

Each open stream used to look at the store ten times a second on a worker
thread of its own asking, so a hundred idle streams took the threads that
submissions need. Now one task on the event loop (``EventHub``) asks the
store for new events, once per look for all streams, only while some are
open, and hands each stream the events its principal may see; an idle
stream holds no thread, only a queue.

A stream that resumes from an older event reads its own backlog first, a
page at a time, up to the event the hub had reached when it joined; from
there the hub's events follow, so none is missed or given twice.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from suanli.server.store import Store

LOOK_S = 0.1  # the hub looks for new events this often while streams are open
KEEP_ALIVE_S = 1.0  # a stream with nothing to say says it is alive this often
QUEUE_MAX = 10_000  # events waiting for a slow reader; past this its stream ends (it resumes by Last-Event-ID)


class StreamsFull(Exception):
    def __init__(self, detail: str, per_token: bool) -> None:
        super().__init__(detail)
        self.detail, self.per_token = detail, per_token


@dataclass(eq=False)
class _Subscriber:
    tenant: str | None  # None: an admin, who sees every event
    after: int  # what it has been given so far
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE_MAX))
    overflowed: bool = False


class EventHub:
    def __init__(self, store: Store, page: int, per_token: int, total: int) -> None:
        self.store, self.page, self.per_token, self.total = store, page, per_token, total
        self._subs: dict[int, _Subscriber] = {}
        self._by_token: Counter = Counter()
        self._ids = itertools.count()
        self._last: int | None = None  # the newest event the hub has handed on
        self._poller: asyncio.Task | None = None

    @property
    def open(self) -> int:
        return len(self._subs)

    def reserve(self, token: str) -> None:
        """Count a stream for ``token``, or refuse it (``StreamsFull``)."""
        if self._by_token[token] >= self.per_token:
            raise StreamsFull(f"at most {self.per_token} event streams open at once per token", True)
        if sum(self._by_token.values()) >= self.total:
            raise StreamsFull(f"at most {self.total} event streams open at once on this server", False)
        self._by_token[token] += 1

    def release(self, token: str) -> None:
        self._by_token[token] -= 1
        if self._by_token[token] <= 0:
            del self._by_token[token]

    async def follow(self, tenant: str | None, after: int | None) -> AsyncIterator[Any]:
        """The events ``tenant`` may see after id ``after`` (None: from now), as
        they are recorded; ``None`` items are pauses (time for a keep-alive)."""
        if self._last is None:
            last = await asyncio.to_thread(self.store.last_event_id)
            if self._last is None:  # another stream did not set it meanwhile
                self._last = last
        joined_at = self._last
        sub = _Subscriber(tenant, joined_at if after is None else after)
        key = next(self._ids)
        self._subs[key] = sub
        self._ensure_poller()
        try:
            while sub.after < joined_at:  # the backlog, read by this stream alone
                rows = await asyncio.to_thread(self.store.events, tenant, sub.after, self.page)
                rows = [e for e in rows if e.id <= joined_at]
                if not rows:
                    break
                for e in rows:
                    yield e
                sub.after = max(sub.after, rows[-1].id)
                if len(rows) < self.page:
                    break
            sub.after = max(sub.after, joined_at)
            while not sub.overflowed:
                try:
                    e = await asyncio.wait_for(sub.queue.get(), KEEP_ALIVE_S)
                except asyncio.TimeoutError:
                    yield None
                    continue
                if e.id > sub.after:
                    sub.after = e.id
                    yield e
        finally:
            del self._subs[key]

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """While streams are open: new events, in one store read per look, handed on."""
        while self._subs:
            rows = await asyncio.to_thread(self.store.events, None, self._last or 0, self.page)
            for e in rows:
                for sub in list(self._subs.values()):
                    if sub.tenant is not None and e.tenant != sub.tenant:
                        continue
                    try:
                        sub.queue.put_nowait(e)
                    except asyncio.QueueFull:
                        sub.overflowed = True
                self._last = e.id
            if len(rows) < self.page:
                await asyncio.sleep(LOOK_S)
