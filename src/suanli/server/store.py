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

import hashlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from sqlalchemy import (JSON, Float, ForeignKey, Index, Integer, String, UniqueConstraint, create_engine,
                        delete, event, select, update)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
TOKEN_PREFIX = "sl_"  # tokens are recognisable in logs and secret scanners


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


class Store:
    def __init__(self, url: str, *, upgrade: bool = True) -> None:
        if upgrade:
            migrate(url)
        self.url = url
        self.engine = make_engine(url)
        self.session = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------ tokens

    def ensure_admin(self, token: str | None) -> str | None:
        """An admin token: ``token`` when given (kept), else one made now when
        none exists. Returns a token made now (to be shown once), else None."""
        with self.session.begin() as s:
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
        with self.session.begin() as s:
            s.add(TokenRow(digest=digest(made), tenant=tenant, created_at=time.time()))
        return made

    def principal(self, token: str) -> Principal | None:
        with self.session() as s:
            row = s.scalar(select(TokenRow).where(TokenRow.digest == digest(token)))
        return None if row is None else Principal(row.tenant)

    # ------------------------------------------------------------ applications

    def create_app(self, tenant: str, name: str, document: dict, tasks: Sequence[str],
                   key: str | None) -> tuple[AppRow, bool]:
        """Record an accepted application and its tasks (pending); returns the row
        and whether it is new. A repeated idempotency key returns the first
        row; a name taken under another key raises ``Conflict``."""
        now = time.time()
        for attempt in range(2):
            if key is not None:
                with self.session() as s:
                    row = s.scalar(select(AppRow).where(AppRow.tenant == tenant, AppRow.idempotency_key == key))
                if row is not None:
                    return row, False
            try:
                with self.session.begin() as s:
                    row = AppRow(tenant=tenant, name=name, document=document, idempotency_key=key, created_at=now)
                    s.add(row)
                    s.flush()
                    s.add_all(TaskRow(tenant=tenant, name=t, app_id=row.id, status="pending", placements=0,
                                      submitted_at=now, updated_at=now) for t in tasks)
                return row, True
            except IntegrityError:
                if key is None or attempt:
                    with self.session() as s:
                        same = s.scalar(select(AppRow).where(AppRow.tenant == tenant, AppRow.idempotency_key == key)) \
                            if key is not None else None
                    if same is not None:
                        return same, False
                    raise Conflict(name) from None
        raise AssertionError("unreachable")

    def delete_app(self, tenant: str, name: str) -> bool:
        with self.session.begin() as s:
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

    def task(self, tenant: str, name: str) -> TaskRow | None:
        with self.session() as s:
            return s.get(TaskRow, (tenant, name))

    def record(self, changes: Iterable[tuple[str, str, dict[str, Any]]], events: Sequence[dict[str, Any]]) -> None:
        """One instant of the scheduler: task fields changed (tenant, task,
        fields) and the events, in one transaction. A task whose application
        was deleted meanwhile is skipped."""
        with self.session.begin() as s:
            for tenant, task, fields in changes:
                s.execute(update(TaskRow).where(TaskRow.tenant == tenant, TaskRow.name == task).values(**fields))
            if events:
                s.add_all(EventRow(**e) for e in events)

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
        with self.session.begin() as s:
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
