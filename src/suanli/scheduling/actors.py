"""The sharded static pass on Ray: business shards and one global actor.

``schedule --workers N`` starts N shard actors and one global actor (on a
local Ray started for the run and stopped after it, or on the cluster at
``--ray ADDRESS``). The global actor loads the world from the files, finds
the split, and sends the shards the fleet and each its slice of the world
(``sharded.Slice``: the tenancy, and the applications with the shard's
order-free units, those made per site as a prototype's number and a site). The shards
decide their order-free units while the global actor decides the rest in
the single process's order (``sharded``); then the global actor takes the
shards' columns, checks them against what it presumed, and answers for the
outcome: a summary, the JSON document, or NDJSON lines in chunks.

Messages, in order: ``load`` to the global actor (the files' paths);
``split``, then ``fleet`` once and ``slice`` once per shard (each goes to
the shards as an object reference: the store moves it, the driver never
fetches it, and the shards read the one fleet's arrays in place);
``decide`` to each shard with its slice and the fleet, and ``plan`` to the
global actor, at once; ``finish`` to the global actor with the shards' answers (their object
references: columns of about 35 bytes a task, moved once); then the outcome
asked for.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from suanli.spec.problems import Problem, SpecError

CHUNK = 20_000  # NDJSON lines per answer of the global actor


class ShardActor:
    """A business shard: its slice of the world, its order-free units decided.
    It keeps nothing: when its process is killed, Ray starts it anew
    (``RESTARTS``) and runs the call it was in again, with the same slice
    (an object in Ray's store, kept while the run holds its reference). Its
    part is the same (a shard draws nothing), and only the part the global
    actor receives is put in: no task is placed twice."""

    def pid(self) -> int:
        return os.getpid()

    def decide(self, k: int, shards: int, policy: str | None, piece, fleet):
        from suanli.scheduling.sharded import decide_slice

        part = decide_slice(piece, fleet, k, shards, policy)
        part.peak_bytes = _peak_bytes()
        part.pid = os.getpid()
        return part


class GlobalActor:
    """The global layer and the units the shards do not decide; then the whole outcome."""

    def __init__(self) -> None:
        self.world = None
        self.prepared = None
        self.done = None
        self.outcome = None
        self._lines: Iterator[str] | None = None

    def load(self, files: list[str], sizes: dict[str, str] | None, strict: bool) -> list[str]:
        from suanli.spec.build import load_world

        self.world = load_world(files, sizes, strict)
        return list(self.world.warnings)

    def split(self, shards: int, seed: int | None, policy: str | None) -> None:
        """Place the VCs' fixed hosts and find which units are order-free and whose."""
        from suanli.scheduling.sharded import prepare_global

        self.prepared = prepare_global(self.world, shards, seed, policy)

    def fleet(self):
        """The world's fleet (one object in Ray's store, read by every shard)."""
        return self.world.fleet

    def slice(self, k: int):
        """Shard ``k``'s slice of the world (``sharded.Slice``)."""
        from suanli.scheduling.sharded import slice_for

        return slice_for(self.world, self.prepared.split, k, self.prepared.layer.state.task_ids.starts)

    def plan(self, shards: int, seed: int | None, policy: str | None) -> int:
        from suanli.scheduling.sharded import global_pass

        self.done = global_pass(self.world, shards, seed, policy, self.prepared)
        self.prepared = None
        return self.done.presumed

    def finish(self, seed: int | None, policy: str | None, *parts) -> dict[str, Any]:
        from suanli.scheduling.sharded import finish

        mine = self.done.outcome
        decided = len(mine.state.placements) + len(mine.unscheduled)  # (tasks: before the shards' are put in)
        self.outcome, fallback = finish(self.world, self.done, list(parts), seed, policy)
        self.done = None
        return {"fallback": fallback, "global": decided, "shards": [p.units for p in parts],
                "pids": [p.pid for p in parts],
                "peak_bytes": [_peak_bytes(), *(p.peak_bytes for p in parts)]}

    def summary(self) -> dict[str, Any]:
        from suanli.output import metrics_json

        return metrics_json(self.outcome)

    def json(self) -> dict[str, Any]:
        from suanli.output import outcome_json

        return outcome_json(self.outcome)

    def lines(self) -> str:
        """The next chunk of NDJSON lines ("" once all were given)."""
        from itertools import islice

        from suanli.output import outcome_text_lines

        if self._lines is None:
            self._lines = outcome_text_lines(self.outcome)
        return "".join(islice(self._lines, CHUNK))


@dataclass
class Sharded:
    """A sharded run's handle: the global actor holds the outcome; ``report``
    says how the work split."""

    ray: Any
    global_actor: Any
    warnings: list[str]
    report: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return self.ray.get(self.global_actor.summary.remote())

    def json(self) -> dict[str, Any]:
        return self.ray.get(self.global_actor.json.remote())

    def lines(self) -> Iterator[str]:
        while True:
            chunk = self.ray.get(self.global_actor.lines.remote())
            if not chunk:
                return
            yield chunk


def start_ray(address: str | None, cpus: int):
    """Ray connected: to the cluster at ``address``, else a local one started
    now (the caller stops it: ``ray.shutdown()``). ``SpecError`` naming
    ``--ray`` when Ray or the cluster is missing."""
    if not address:
        _own_token()  # (before Ray is imported: it reads its settings then)
    try:
        import ray
    except ImportError:
        raise SpecError([Problem("--workers", "a sharded run needs Ray: pip install 'suanli[ray]'")]) from None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    quiet = dict(namespace="suanli", log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
    if address:
        host, _, port = address.rpartition(":")
        if not (host and port.isdigit()):
            raise SpecError([Problem("--ray", f"{address!r} is not HOST:PORT of a Ray cluster's head")])
        from suanli.executors.ray import unreachable

        why = unreachable(address)
        if why is not None:
            raise SpecError([Problem("--ray", f"no Ray cluster at {address}: {why}")])
        ray.init(address=address, **quiet)
    else:
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, **quiet)
    return ray


def _own_token() -> None:
    """A local Ray started for one run authenticates with a token of its own,
    in a file of this run's (removed when the process ends), not one left in
    the user's home for every later cluster to meet: unless the user chose
    a token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``)."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    import atexit
    import secrets
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="suanli-ray-token-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "auth_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE") or "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = path


RESTARTS = 3  # a shard's process killed: started anew, its call run again, this many times


def actors(ray, workers: int):
    """The global actor and ``workers`` shard actors (restartable)."""
    shard_cls = ray.remote(num_cpus=0, max_restarts=RESTARTS, max_task_retries=RESTARTS)(ShardActor)
    global_cls = ray.remote(num_cpus=0)(GlobalActor)
    return global_cls.remote(), [shard_cls.remote() for _ in range(workers)]


def schedule_sharded(ray, files: list[str], sizes: dict[str, str] | None, strict: bool, seed: int | None,
                     policy: str | None, workers: int, started: Callable[[list[int]], None] | None = None) -> Sharded:
    """Schedule the world of ``files`` with ``workers`` shard actors and a
    global actor on ``ray``. ``started``: called with the shards' process
    ids once they run and the world is loaded, before they are sent a slice."""
    files = [os.path.abspath(f) for f in files]
    glob, shards = actors(ray, workers)
    clock = time.perf_counter()
    pids = [s.pid.remote() for s in shards]
    warnings = _get(ray, glob.load.remote(files, sizes, strict))
    pids = _get(ray, pids)
    seconds = {"load": time.perf_counter() - clock}
    if started is not None:
        started(pids)
    clock = time.perf_counter()
    glob.split.remote(workers, seed, policy)
    fleet = glob.fleet.remote()
    slices = [glob.slice.remote(k) for k in range(workers)]  # (an actor's calls run in the order sent)
    decided = [s.decide.remote(k, workers, policy, piece, fleet) for k, (s, piece) in enumerate(zip(shards, slices))]
    planned = glob.plan.remote(workers, seed, policy)
    _get(ray, planned)
    seconds["global"] = time.perf_counter() - clock
    ray.wait(decided, num_returns=len(decided), fetch_local=False)  # (done: their parts stay in the store)
    seconds["shards"] = time.perf_counter() - clock
    clock = time.perf_counter()
    report = _get(ray, glob.finish.remote(seed, policy, *decided))
    seconds["finish"] = time.perf_counter() - clock
    report["seconds"] = seconds
    report["started_pids"] = pids
    del slices, fleet
    for s in shards:
        ray.kill(s)
    return Sharded(ray, glob, warnings, report)


def _peak_bytes() -> int:
    """This process's peak resident memory so far."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _get(ray, refs):
    """``ray.get``, with a world's problems raised as they are (not wrapped)."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, SpecError):
            raise cause from None
        raise
