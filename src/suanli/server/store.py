"""The control plane's durable state, through SQLAlchemy 2.

Tables: tokens (hashed, never stored in the clear), applications (the
accepted document, keyed by tenant and name, with an optional idempotency
key), tasks (one row per task from the moment its application is accepted,
then its status and placement as the scheduler reports them), events (the
scheduler's log, numbered) and node states (cordoned or drained nodes).

Every write is one transaction, committed before the caller answers. The
schema is created and upgraded by the migrations in ``migrations/``
(Alembic), run at open; a SQLite file is the default, PostgreSQL is reached
with a ``postgresql+psycopg://`` URL.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from sqlalchemy import (JSON, Float, ForeignKey, Index, Integer, String, UniqueConstraint, bindparam,
                        create_engine, delete, event, func, insert, select, update)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
TOKEN_PREFIX = "sl_"  # tokens are recognisable in logs and secret scanners
T = TypeVar("T")


class Base(DeclarativeBase):
    pass


class TokenRow(Base):
    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str | None] = mapped_column(String(128))  # None: an admin token
    created_at: Mapped[float] = mapped_column(Float)


class AppRow(Base):
    __tablename__ = "applications"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128))
    document: Mapped[dict] = mapped_column(JSON)  # as accepted: the spec code reads it back on restart
    idempotency_key: Mapped[str | None] = mapped_column(String(256))
    created_at: Mapped[float] = mapped_column(Float)
    __table_args__ = (UniqueConstraint("tenant", "name", name="uq_app_name"),
                      UniqueConstraint("tenant", "idempotency_key", name="uq_app_idempotency"))


class TaskRow(Base):
    __tablename__ = "tasks"
    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(400), primary_key=True)  # APP/COMPONENT/INDEX
    app_id: Mapped[int] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16))  # pending | running | finished | failed
    vc: Mapped[str | None] = mapped_column(String(300))
    host: Mapped[str | None] = mapped_column(String(300))
    node: Mapped[str | None] = mapped_column(String(300))
    site: Mapped[str | None] = mapped_column(String(128))
    reasons: Mapped[dict | None] = mapped_column(JSON)  # why it waits: filter -> nodes it removed
    placements: Mapped[int] = mapped_column(Integer, default=0)  # times it was placed
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)  # wall time, seconds since the epoch
    kind: Mapped[str] = mapped_column(String(32))
    tenant: Mapped[str | None] = mapped_column(String(128))  # None: seen by admins only
    task: Mapped[str | None] = mapped_column(String(400))
    body: Mapped[dict] = mapped_column(JSON)
    __table_args__ = (Index("ix_events_tenant_id", "tenant", "id"), Index("ix_events_task", "tenant", "task"))


class NodeStateRow(Base):
    __tablename__ = "node_states"
    node: Mapped[str] = mapped_column(String(300), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # cordoned | drained
    at: Mapped[float] = mapped_column(Float)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request speaks for: a tenant, or an admin (``tenant`` None)."""

    tenant: str | None

    @property
    def admin(self) -> bool:
        return self.tenant is None


class Conflict(Exception):
    """An application of that name exists (under another idempotency key)."""


# The statements of the busiest writes (a submission, an instant of the scheduler),
# built once and run on the connection: the ORM's unit of work and per-call statement
# building cost more than the database does here.
INSERT_APP = insert(AppRow.__table__)
INSERT_TASKS = insert(TaskRow.__table__)
INSERT_EVENTS = insert(EventRow.__table__)


@lru_cache(maxsize=64)
def task_update(fields: tuple[str, ...]):
    """UPDATE of one task's ``fields`` (``placements``: a count to add), for many tasks at once."""
    t = TaskRow.__table__
    values = {f: t.c.placements + bindparam("add_placements") if f == "placements" else bindparam(f"v_{f}")
              for f in fields}
    return update(t).where(t.c.tenant == bindparam("k_tenant"), t.c.name == bindparam("k_name")).values(values)


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):  # durable commits; readers do not wait for the writer
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)


def migrate(url: str) -> None:
    """Bring the database's schema to the newest migration."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "head")


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite database URL (None: not SQLite, or in memory)."""
    if not url.startswith("sqlite"):
        return None
    path = url.split(":///", 1)[1].split("?", 1)[0] if ":///" in url else ""
    return None if path in ("", ":memory:") else path


class WriterLock:
    """A lock for this process's threads and, given a file, for other processes too."""

    def __init__(self, database: str | None) -> None:
        self._threads = threading.Lock()
        self._fd = os.open(database + "-writer.lock", os.O_RDWR | os.O_CREAT, 0o600) if database else None

    def __enter__(self) -> "WriterLock":
        self._threads.acquire()
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._threads.release()
                raise
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _Write:
    """A write waiting for the next group commit."""

    __slots__ = ("work", "done", "result", "error")

    def __init__(self, work: Callable[[Connection], Any]) -> None:
        self.work = work
        self.done = False
        self.result: Any = None
        self.error: Exception | None = None


class Store:
    def __init__(self, url: str, *, upgrade: bool = True) -> None:
        if upgrade:
            migrate(url)
        self.url = url
        self.engine = make_engine(url)
        self.session = sessionmaker(self.engine, expire_on_commit=False)
        # Writers take turns on a lock: SQLite has one writer at a time, and one that
        # finds the file locked polls it with sleeps of 1 to 100 ms; the busiest writes
        # also share commits (``_write``), on either database. With SQLite the lock is
        # also held on a file beside the database, for the writers of other processes
        # (the API's and the controller's), whom the kernel wakes as soon as it is free.
        self._write_lock = WriterLock(_sqlite_file(url))
        self._queued: list[_Write] = []  # writes waiting for the lock, to be committed together
        self._queued_lock = threading.Lock()
        self._principals: dict[str, Principal] = {}  # token digest -> who (tokens are never changed)

    def close(self) -> None:
        self.engine.dispose()
        self._write_lock.close()

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """A write transaction of its own, committed on leaving."""
        with self._write_lock, self.session.begin() as s:
            yield s

    def _write(self, work: Callable[[Connection], T]) -> T:
        """``work(connection)`` in a write transaction, committed before this returns.

        Writes that arrive while another commits wait for it; then the first of
        them to get the lock commits all that are waiting in one transaction (a
        group commit: one sync to disk for them all, not one each). Should that
        transaction fail, each of its writes runs again on its own, so that one
        write's failure (a name taken) is that write's alone."""
        w = _Write(work)
        with self._queued_lock:
            self._queued.append(w)
        with self._write_lock:  # every holder commits what is queued: ``w`` too, by now or here
            with self._queued_lock:
                batch, self._queued = self._queued, []
            if batch:
                self._commit(batch)
        if not w.done:
            raise RuntimeError("the write was not committed: the thread committing it stopped")
        if w.error is not None:
            raise w.error
        return w.result

    def _commit(self, batch: list[_Write]) -> None:
        """One transaction for the batch; should it fail, one for each of its writes."""
        try:
            with self.engine.begin() as conn:
                results = [w.work(conn) for w in batch]
        except Exception as exc:
            if len(batch) > 1:
                for w in batch:
                    self._commit([w])
            else:
                batch[0].error, batch[0].done = exc, True
            return
        for w, result in zip(batch, results):
            w.result, w.done = result, True

    # ------------------------------------------------------------ tokens

    def ensure_admin(self, token: str | None) -> str | None:
        """An admin token: ``token`` when given (kept), else one made now when
        none exists. Returns a token made now (to be shown once), else None."""
        with self._writing() as s:
            if token is not None:
                if s.scalar(select(TokenRow).where(TokenRow.digest == digest(token))) is None:
                    s.add(TokenRow(digest=digest(token), tenant=None, created_at=time.time()))
                return None
            if s.scalar(select(TokenRow.id).where(TokenRow.tenant.is_(None)).limit(1)) is not None:
                return None
            made = new_token()
            s.add(TokenRow(digest=digest(made), tenant=None, created_at=time.time()))
            return made

    def mint(self, tenant: str | None) -> str:
        made = new_token()
        with self._writing() as s:
            s.add(TokenRow(digest=digest(made), tenant=tenant, created_at=time.time()))
        return made

    def remembered(self, token: str) -> Principal | None:
        """Who a token speaks for, if it was looked up before (no database access)."""
        return self._principals.get(digest(token))

    def principal(self, token: str) -> Principal | None:
        key = digest(token)
        who = self._principals.get(key)
        if who is None:
            with self.session() as s:
                row = s.scalar(select(TokenRow).where(TokenRow.digest == key))
            if row is None:
                return None  # not remembered: a token minted later is found then
            who = self._principals[key] = Principal(row.tenant)
        return who

    # ------------------------------------------------------------ applications

    def create_app(self, tenant: str, name: str, document: dict, tasks: Sequence[str],
                   key: str | None) -> tuple[AppRow, bool]:
        """Record an accepted application and its tasks (pending); returns the row
        and whether it is new. A repeated idempotency key returns the first
        row; a name taken under another key raises ``Conflict``.

        The insert comes first, in one transaction with the tasks' rows: a new
        application (the usual case) costs one round of writes; the unique
        constraints on name and key tell a repeat, looked up only then."""
        now = time.time()
        fields = dict(tenant=tenant, name=name, document=document, idempotency_key=key, created_at=now)

        def write(conn: Connection) -> int:
            app_id = conn.execute(INSERT_APP, fields).inserted_primary_key[0]
            if tasks:
                conn.execute(INSERT_TASKS, [dict(tenant=tenant, name=t, app_id=app_id, status="pending",
                                                 placements=0, submitted_at=now, updated_at=now) for t in tasks])
            return app_id

        try:
            app_id = self._write(write)
        except IntegrityError:
            same = None
            if key is not None:
                with self.session() as s:
                    same = s.scalar(select(AppRow).where(AppRow.tenant == tenant, AppRow.idempotency_key == key))
            if same is None:
                raise Conflict(name) from None
            return same, False
        return AppRow(id=app_id, **fields), True

    def delete_app(self, tenant: str, name: str) -> bool:
        with self._writing() as s:
            row = s.scalar(select(AppRow).where(AppRow.tenant == tenant, AppRow.name == name))
            if row is None:
                return False
            s.execute(delete(TaskRow).where(TaskRow.app_id == row.id))
            s.delete(row)
        return True

    def apps(self, tenant: str | None = None) -> list[AppRow]:
        q = select(AppRow).order_by(AppRow.id)
        if tenant is not None:
            q = q.where(AppRow.tenant == tenant)
        with self.session() as s:
            return list(s.scalars(q))

    def app_count(self) -> int:
        with self.session() as s:
            return s.scalar(select(func.count()).select_from(AppRow))

    def app(self, tenant: str, name: str) -> AppRow | None:
        with self.session() as s:
            return s.scalar(select(AppRow).where(AppRow.tenant == tenant, AppRow.name == name))

    # ------------------------------------------------------------ tasks

    def tasks(self, tenant: str | None = None, app: str | None = None, status: str | None = None) -> list[TaskRow]:
        q = select(TaskRow).order_by(TaskRow.tenant, TaskRow.app_id, TaskRow.name)
        if tenant is not None:
            q = q.where(TaskRow.tenant == tenant)
        if app is not None:
            q = q.join(AppRow, AppRow.id == TaskRow.app_id).where(AppRow.name == app)
        if status is not None:
            q = q.where(TaskRow.status == status)
        with self.session() as s:
            return list(s.scalars(q))

    def task_counts(self, app_id: int | None = None) -> dict[str, int]:
        """Tasks by status: of one application, or of all."""
        q = select(TaskRow.status, func.count()).group_by(TaskRow.status)
        if app_id is not None:
            q = q.where(TaskRow.app_id == app_id)
        with self.session() as s:
            return {status: n for status, n in s.execute(q)}

    def task(self, tenant: str, name: str) -> TaskRow | None:
        with self.session() as s:
            return s.get(TaskRow, (tenant, name))

    def record(self, changes: Iterable[tuple[str, str, dict[str, Any]]], events: Sequence[dict[str, Any]]) -> None:
        """One instant of the scheduler: task fields changed (tenant, task,
        fields; ``placements`` is the number of new placements, added to the
        count) and the events, in one transaction. A task whose application
        was deleted meanwhile is skipped."""
        by_fields: dict[tuple[str, ...], list[dict[str, Any]]] = {}  # one UPDATE per set of fields, many rows
        for tenant, task, fields in changes:
            params = {"add_placements" if f == "placements" else f"v_{f}": v for f, v in fields.items()}
            by_fields.setdefault(tuple(sorted(fields)), []).append({"k_tenant": tenant, "k_name": task, **params})
        rows_of_events = [{"tenant": None, "task": None, **e} for e in events]

        def write(conn: Connection) -> None:
            for fields, rows in by_fields.items():
                conn.execute(task_update(fields), rows)
            if rows_of_events:
                conn.execute(INSERT_EVENTS, rows_of_events)

        self._write(write)

    # ------------------------------------------------------------ events

    def events(self, tenant: str | None, after: int = 0, limit: int = 1000, task: str | None = None) -> list[EventRow]:
        """Events after id ``after``, oldest first: a tenant's own, or all for an admin."""
        q = select(EventRow).where(EventRow.id > after).order_by(EventRow.id).limit(limit)
        if tenant is not None:
            q = q.where(EventRow.tenant == tenant)
        if task is not None:
            q = q.where(EventRow.task == task)
        with self.session() as s:
            return list(s.scalars(q))

    def last_event_id(self) -> int:
        with self.session() as s:
            return s.scalar(select(EventRow.id).order_by(EventRow.id.desc()).limit(1)) or 0

    # ------------------------------------------------------------ nodes

    def set_node_state(self, node: str, state: str | None) -> None:
        with self._writing() as s:
            row = s.get(NodeStateRow, node)
            if state is None:
                if row is not None:
                    s.delete(row)
            elif row is None:
                s.add(NodeStateRow(node=node, state=state, at=time.time()))
            else:
                row.state, row.at = state, time.time()

    def node_states(self) -> dict[str, str]:
        with self.session() as s:
            return {r.node: r.state for r in s.scalars(select(NodeStateRow))}
