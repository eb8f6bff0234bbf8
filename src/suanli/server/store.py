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
import hmac
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from sqlalchemy import (JSON, Boolean, Float, ForeignKey, Index, Integer, String, UniqueConstraint, bindparam,
                        create_engine, delete, event, func, insert, literal, or_, select, tuple_, update)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
TOKEN_PREFIX = "sl_"  # tokens are recognisable in logs and secret scanners
T = TypeVar("T")


class Base(DeclarativeBase):
    pass


class TokenRow(Base):
    """A token, by its digest; the token itself is never stored (nor any part of its secret)."""

    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    public_id: Mapped[str] = mapped_column(String(16))  # tok_XXXXXXXX: what listings show and revoke takes
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    scheme: Mapped[str] = mapped_column(String(16), server_default="sha256")  # how ``digest`` was made
    tenant: Mapped[str | None] = mapped_column(String(128))  # None: an admin token
    name: Mapped[str | None] = mapped_column(String(200))  # a note: whom or what it is for
    source: Mapped[str] = mapped_column(String(8), server_default="minted")  # minted | env (SUANLI_ADMIN_TOKEN)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float)  # None: never
    revoked_at: Mapped[float | None] = mapped_column(Float)
    role: Mapped[str] = mapped_column(String(16), server_default="member")  # ROLES
    minted_by: Mapped[str | None] = mapped_column(String(16), index=True)  # the minter's public id
    tenant_since: Mapped[int | None] = mapped_column(Integer)  # the configuration version its tenant was made at
    scope: Mapped[dict | None] = mapped_column(JSON)  # an agent token's: sites, names, nodes
    __table_args__ = (UniqueConstraint("public_id", name="uq_tokens_public_id"),)


class AppRow(Base):
    __tablename__ = "applications"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128))
    document: Mapped[dict] = mapped_column(JSON)  # as accepted: the spec code reads it back on restart
    idempotency_key: Mapped[str | None] = mapped_column(String(256))
    created_at: Mapped[float] = mapped_column(Float)
    revision: Mapped[int] = mapped_column(Integer, default=1, server_default="1")  # each change applied: one more
    previous: Mapped[dict | None] = mapped_column(JSON)  # the document before the last change (rollout undo)
    __table_args__ = (UniqueConstraint("tenant", "name", name="uq_app_name"),
                      UniqueConstraint("tenant", "idempotency_key", name="uq_app_idempotency"),
                      {"sqlite_autoincrement": True})  # an id is never given again


class TaskRow(Base):
    __tablename__ = "tasks"
    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(400), primary_key=True)  # APP/COMPONENT/INDEX
    app_id: Mapped[int] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16))  # pending | running | finished | failed | omitted | withdrawn
    vc: Mapped[str | None] = mapped_column(String(300))
    host: Mapped[str | None] = mapped_column(String(300))
    node: Mapped[str | None] = mapped_column(String(300))
    site: Mapped[str | None] = mapped_column(String(128))
    reasons: Mapped[dict | None] = mapped_column(JSON)  # why it waits: filter -> nodes it removed
    why: Mapped[list | None] = mapped_column(JSON)  # the same in reading order, the binding constraint first
    reason_code: Mapped[str | None] = mapped_column(String(32))  # the first of ``why``: its code
    reason: Mapped[str | None] = mapped_column(String(400))  # and its text
    placements: Mapped[int] = mapped_column(Integer, default=0)  # times it was placed
    # running with a readiness probe: whether it passes (not ready: it runs but does not serve); else null
    ready: Mapped[bool | None] = mapped_column(Boolean)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    __table_args__ = (Index("ix_tasks_status_reason", "status", "reason_code"),)


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)  # wall time, seconds since the epoch
    kind: Mapped[str] = mapped_column(String(32))
    tenant: Mapped[str | None] = mapped_column(String(128))  # None: seen by admins only
    task: Mapped[str | None] = mapped_column(String(400))
    app_id: Mapped[int | None] = mapped_column(Integer)  # the store's application it belongs to (None: none)
    body: Mapped[dict] = mapped_column(JSON)
    __table_args__ = (Index("ix_events_tenant_id", "tenant", "id"), Index("ix_events_task", "tenant", "task"),
                      Index("ix_events_kind_id", "kind", "id"), Index("ix_events_app_id", "app_id"))


class AuditRow(Base):
    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    token_id: Mapped[str | None] = mapped_column(String(32))  # the token's public id (None: none was valid)
    tenant: Mapped[str | None] = mapped_column(String(128))
    admin: Mapped[bool] = mapped_column(Boolean)
    action: Mapped[str] = mapped_column(String(200))  # METHOD /route/{template}
    object: Mapped[str] = mapped_column(String(1000))  # the path asked for
    status: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str] = mapped_column(String(64))
    address: Mapped[str | None] = mapped_column(String(64))
    __table_args__ = (Index("ix_audit_tenant_id", "tenant", "id"),)


class ObjectRow(Base):
    """A Fleet, Tenant or VirtualCluster document the server runs, as last applied."""

    __tablename__ = "objects"
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(300), primary_key=True)
    tenant: Mapped[str | None] = mapped_column(String(128))  # a VirtualCluster's tenant; a Tenant's own name
    document: Mapped[dict] = mapped_column(JSON)
    version: Mapped[int] = mapped_column(Integer, index=True)  # the configuration's version it was written at
    updated_at: Mapped[float] = mapped_column(Float)
    failed: Mapped[str | None] = mapped_column(String(1000))  # why it is set aside, not applied (None: applied)


class ConfigVersionRow(Base):
    __tablename__ = "config_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    __table_args__ = ({"sqlite_autoincrement": True},)


class AgentRow(Base):
    """A node that registered itself (``suanli agent``), and its lease."""

    __tablename__ = "agents"
    name: Mapped[str] = mapped_column(String(300), primary_key=True)  # SITE/NAME, or a device's site
    site: Mapped[str] = mapped_column(String(128))
    spec: Mapped[dict] = mapped_column(JSON)  # its node as registered ({} for a population's device)
    lease_s: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(8))  # ready | lost | left
    token_id: Mapped[str | None] = mapped_column(String(32))
    registered_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    changed: Mapped[int] = mapped_column(Integer, index=True)  # bumps on registration, loss and leave
    __table_args__ = (Index("ix_agents_state_expires", "state", "expires_at"),)


class AssignmentRow(Base):
    """A task an agent's node is to run, or to stop, as the active controller
    last said (``executors/agents.py``); an agent reads its node's whole set."""

    __tablename__ = "assignments"
    node: Mapped[str] = mapped_column(String(300), primary_key=True)
    task: Mapped[str] = mapped_column(String(600), primary_key=True)  # the scheduler's name (TENANT:APP/C/I)
    run_id: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)  # one more for each start again in place (a restart policy's)
    want: Mapped[str] = mapped_column(String(8))  # run | stop (keep its state) | end (it is over)
    held: Mapped[bool] = mapped_column(Boolean)  # run, once its last node has let it go
    adopt: Mapped[bool] = mapped_column(Boolean)  # a restarted control plane placed it where it ran: keep it
    launch: Mapped[dict] = mapped_column(JSON)  # how it starts (``tasks.Launch``)
    state: Mapped[str] = mapped_column(String(8))  # none | server: its state folder is the server's to give
    changed: Mapped[int] = mapped_column(Integer, index=True)


class AssignmentMarkRow(Base):
    """The last mark given to an assignment written (one row): marks only rise,
    whatever rows are removed meanwhile."""

    __tablename__ = "assignment_marks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(Integer)


class AgentReportRow(Base):
    """What an agent said of its node's tasks (an exit, a stop, a note), for the
    active controller to take in id order."""

    __tablename__ = "agent_reports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    node: Mapped[str] = mapped_column(String(300))
    task: Mapped[str] = mapped_column(String(600))
    run_id: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # exited | stopped | ended | note
    body: Mapped[dict] = mapped_column(JSON)
    __table_args__ = ({"sqlite_autoincrement": True},)


class CommandRow(Base):
    """A change the API accepted, for the active controller to take (in id order)."""

    __tablename__ = "commands"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16))  # submit | update | delete | node
    tenant: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(300))
    app_id: Mapped[int | None] = mapped_column(Integer)
    action: Mapped[str | None] = mapped_column(String(16))
    __table_args__ = ({"sqlite_autoincrement": True},)


class LeaseRow(Base):
    """Who holds a lease (the active controller's), until when."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    address: Mapped[str | None] = mapped_column(String(300))
    epoch: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[float] = mapped_column(Float)
    pid: Mapped[int | None] = mapped_column(Integer)  # the holding process, on ``host``
    host: Mapped[str | None] = mapped_column(String(255))


class LeaseLost(RuntimeError):
    """This process no longer holds the lease it writes under: another took it."""


class NodeStateRow(Base):
    __tablename__ = "node_states"
    node: Mapped[str] = mapped_column(String(300), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # cordoned | drained
    at: Mapped[float] = mapped_column(Float)


# How a row's digest was made: unkeyed SHA-256 (rows from before tokens had a
# lifecycle; still accepted), or HMAC-SHA256 with the server's secret (all new rows:
# a copy of the database alone does not let anyone test guesses of a token).
PLAIN, KEYED = "sha256", "hmac-sha256"
TOKEN_ID_PREFIX = "tok_"
TOKEN_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
TOKEN_ID_LENGTH = 8
PRINCIPAL_CACHE_S = 1.0
COMMANDS_KEPT_S = 600.0  # commands are pruned after this long (a controller that starts reads the store)  # a token looked up is believed this long, then looked up again
REMEMBERED_AT_MOST = 10_000  # tokens remembered at once
SECRET_ENV = "SUANLI_SECRET"
SECRET_BYTES = 32  # a secret file made at first start holds this many random bytes; a given one at least this many
ADMIN_TOKEN_MIN_LENGTH = 24  # SUANLI_ADMIN_TOKEN: at least this long
ADMIN_TOKEN_MIN_DISTINCT = 10  # and with at least this many different characters


def digest(token: str) -> str:
    """The unkeyed SHA-256 of a token: the digest of rows of scheme 'sha256' (and a
    key for per-token state in memory, never stored)."""
    return hashlib.sha256(token.encode()).hexdigest()


def keyed_digest(key: bytes, token: str) -> str:
    """HMAC-SHA256 of a token with the server's secret: the digest of rows of scheme 'hmac-sha256'."""
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()


def new_token() -> tuple[str, str]:
    """A new token and its public id: ``sl_XXXXXXXX_SECRET`` and ``tok_XXXXXXXX``.

    The id is part of the token, so that whoever finds a token (in a log, a
    leaked file) can tell which one to revoke; the secret after it, 32
    random bytes, is what is hashed and checked."""
    short = "".join(secrets.choice(TOKEN_ID_ALPHABET) for _ in range(TOKEN_ID_LENGTH))
    return f"{TOKEN_PREFIX}{short}_{secrets.token_urlsafe(32)}", TOKEN_ID_PREFIX + short


def admin_token_problem(token: str) -> str | None:
    """What makes a supplied admin token (SUANLI_ADMIN_TOKEN) too weak to accept, or None.

    Minted tokens are random; a supplied one is whatever someone typed, and it
    opens everything, so it must at least be long and not trivially repetitive."""
    how = "make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if len(token) < ADMIN_TOKEN_MIN_LENGTH:
        return f"is {len(token)} characters long; an admin token has at least {ADMIN_TOKEN_MIN_LENGTH} ({how})"
    if any(not "!" <= c <= "~" for c in token):
        return f"must be printable ASCII without spaces ({how})"
    distinct = len(set(token))
    if distinct < ADMIN_TOKEN_MIN_DISTINCT:
        return (f"has only {distinct} different characters; an admin token has at least "
                f"{ADMIN_TOKEN_MIN_DISTINCT} ({how})")
    return None


def token_state(row: TokenRow, now: float) -> str:
    """'active', 'expired' or 'revoked' (a revoked token that has also expired: 'revoked')."""
    if row.revoked_at is not None:
        return "revoked"
    if row.expires_at is not None and row.expires_at <= now:
        return "expired"
    return "active"


class TokenRefused(ValueError):
    """SUANLI_ADMIN_TOKEN names a token that cannot be the admin token (revoked, a tenant's)."""


class MintRefused(ValueError):
    """A token that cannot be minted: ``path`` names the field of the request at
    fault (None: the minter is no longer valid)."""

    def __init__(self, path: str | None, message: str) -> None:
        super().__init__(message)
        self.path, self.message = path, message


class SecretError(ValueError):
    """The server's secret cannot be had: ``where`` is SUANLI_SECRET or --secret-file."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where, self.message = where, message


@dataclass(frozen=True, slots=True)
class Secret:
    """The key of token digests, where it came from, and whether it was made just now."""

    key: bytes
    source: str  # SUANLI_SECRET, or the file's path
    created: bool


def default_secret_file(url: str) -> Path:
    """Beside a SQLite database (``DB.secret``), else ``suanli.secret`` in the working directory."""
    database = _sqlite_file(url)
    return Path(database + ".secret") if database else Path("suanli.secret")


def load_secret(url: str, path: Path | None = None) -> Secret:
    """The server's secret: ``SUANLI_SECRET`` when set, else the file ``path``
    (default: ``default_secret_file(url)``), made with 32 random bytes (mode 0600)
    when it is not there. Kept out of the database: a copy of the database alone
    does not let anyone test guesses of a token."""
    given = os.environ.get(SECRET_ENV)
    if given:
        if len(given) < SECRET_BYTES:
            raise SecretError(SECRET_ENV, f"is {len(given)} characters long; a secret has at least {SECRET_BYTES}")
        return Secret(given.encode(), SECRET_ENV, False)
    path = Path(path) if path is not None else default_secret_file(url)
    created = _make_secret_file(path)
    return Secret(_read_secret_file(path), str(path), created)


def _make_secret_file(path: Path) -> bool:
    """Make the secret file unless it is there; whether it was made here.

    Written to a file of its own, then linked into place: a process starting
    at the same moment (another API process on the database) finds either no
    file or the whole secret, never a part of it, and only one secret wins."""
    if path.exists():
        return False
    part = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(part, path)
        except FileExistsError:
            return False
        return True
    except OSError as exc:
        raise SecretError("--secret-file", f"cannot make {path}: {exc.strerror or exc}") from None
    finally:
        try:
            os.unlink(part)
        except OSError:
            pass


def _read_secret_file(path: Path) -> bytes:
    try:
        mode = os.stat(path).st_mode
        if mode & 0o077:
            raise SecretError("--secret-file", f"{path} can be read or changed by other users (mode "
                              f"{mode & 0o777:04o}); make it the owner's alone: chmod 600 {path}")
        key = path.read_bytes()
    except OSError as exc:
        raise SecretError("--secret-file", f"cannot read {path}: {exc.strerror or exc}") from None
    if len(key) < SECRET_BYTES:
        raise SecretError("--secret-file", f"{path} holds {len(key)} bytes; a secret has at least {SECRET_BYTES}")
    return key


class _Remembered:
    """A token looked up: who it speaks for, until when that is believed."""

    __slots__ = ("who", "token_id", "fresh_until", "expires_at")

    def __init__(self, who: "Principal", token_id: str, fresh_until: float, expires_at: float | None) -> None:
        self.who, self.token_id, self.fresh_until, self.expires_at = who, token_id, fresh_until, expires_at


# What a token may do. admin: everything. Of one tenant: tenant-admin (its
# applications, virtual clusters and tokens), member (its applications),
# viewer (reads only). agent: registers nodes and renews their leases, nothing else.
ROLES = ("admin", "tenant-admin", "member", "viewer", "agent")
TENANT_ROLES = ("tenant-admin", "member", "viewer")


@dataclass(frozen=True, slots=True)
class AgentScope:
    """What an agent token may register: nodes at sites matching ``sites``, named
    (at their site) as ``names`` match, at most ``nodes`` of them not departed."""

    sites: tuple[str, ...]
    names: tuple[str, ...] = ("*",)
    nodes: int = 1

    @classmethod
    def of(cls, stored: dict | None) -> "AgentScope | None":
        if not stored:
            return None
        return cls(tuple(stored["sites"]), tuple(stored.get("names") or ("*",)), int(stored.get("nodes") or 1))

    def as_json(self) -> dict[str, Any]:
        return {"sites": list(self.sites), "names": list(self.names), "nodes": self.nodes}

    def __str__(self) -> str:
        return f"sites {list(self.sites)}, names {list(self.names)}, at most {self.nodes} nodes"


class AgentRefused(Exception):
    """A registration refused in its transaction: ``status`` and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request speaks for: a tenant (with a role in it), an admin or an agent."""

    tenant: str | None
    token_id: str | None = None  # the token's public id (tok_...), for the audit log
    role: str = "admin"
    scope: AgentScope | None = None  # an agent token's (None: one made before scopes, which registers nothing new)

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def writes(self) -> bool:
        """May change its tenant's applications."""
        return self.role in ("admin", "tenant-admin", "member")


class Conflict(Exception):
    """An application of that name exists (under another idempotency key)."""


@dataclass(frozen=True, slots=True)
class Removed:
    """What ``Store.remove_objects`` did: the configuration's new version, the
    applications deleted (tenant, name, id) and the tokens revoked (public ids)."""

    version: int
    apps: list[tuple[str, str, int]]
    revoked: list[str]


class KeyReused(Exception):
    """An idempotency key came again with another document than the one it made."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name  # the application the key made


# The statements of the busiest writes (a submission, an instant of the scheduler),
# built once and run on the connection: the ORM's unit of work and per-call statement
# building cost more than the database does here.
INSERT_APP = insert(AppRow.__table__)
INSERT_TASKS = insert(TaskRow.__table__)
INSERT_EVENTS = insert(EventRow.__table__)
INSERT_COMMAND = insert(CommandRow.__table__)


@lru_cache(maxsize=64)
def task_update(fields: tuple[str, ...]):
    """UPDATE of one task's ``fields`` (``placements``: a count to add), for many tasks at once."""
    t = TaskRow.__table__
    values = {f: t.c.placements + bindparam("add_placements") if f == "placements" else bindparam(f"v_{f}")
              for f in fields}
    return update(t).where(t.c.tenant == bindparam("k_tenant"), t.c.name == bindparam("k_name")).values(values)


ENDED_STATUSES = ("finished", "failed", "omitted", "withdrawn")


def _of_app(app_id: int):
    """Events of the application ``app_id``, or of none (rows from before events named their application)."""
    return or_(EventRow.app_id == app_id, EventRow.app_id.is_(None))


def _like_prefix(text: str) -> str:
    """``text`` for a LIKE pattern, its own wildcards escaped."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


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


def _private_file(path: str) -> None:
    """The database file readable by its owner alone (its journals take its mode)."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o600)


class Store:
    on_commit: Callable[[float], None] | None = None  # told each commit's seconds (for /metrics)
    fence: tuple[str, str, int] | None = None  # (lease, holder, epoch): record() writes only while it is held
    def __init__(self, url: str, *, upgrade: bool = True, secret: bytes | None = None) -> None:
        """``secret``: the key of token digests (``self.secret``, which may also be set
        before the first token is made or checked); None: ``load_secret(url)`` at
        that moment (a store that never does, as the controller's, never reads it)."""
        if (database := _sqlite_file(url)) is not None:
            _private_file(database)
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
        self.secret = secret
        self._principals: dict[str, _Remembered] = {}  # digest(token) -> who, believed for a second
        self._revocations = 0  # revocations made here: a lookup that overlapped one is not remembered

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
                started = time.perf_counter()
                self._commit(batch)
                if self.on_commit is not None:
                    self.on_commit(time.perf_counter() - started)
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

    def writable(self) -> str | None:
        """None if the store takes a write now (one is made and rolled back), else why not."""
        try:
            with self._write_lock, self.engine.connect() as conn:
                tx = conn.begin()
                try:
                    conn.execute(insert(NodeStateRow.__table__), {"node": "~probe~", "state": "probe", "at": 0.0})
                finally:
                    tx.rollback()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return None

    # ------------------------------------------------------------ tokens

    def _key(self) -> bytes:
        """The key of token digests: the one given, else the default secret (read once)."""
        if self.secret is None:
            self.secret = load_secret(self.url).key
        return self.secret

    def _find(self, s: Session, token: str) -> TokenRow | None:
        """The row of a token, in any state: by its keyed digest, or by its plain one
        for a row from before tokens were keyed. The row's digest is compared again,
        in constant time, with the one its scheme makes."""
        keyed, plain = keyed_digest(self._key(), token), digest(token)
        for row in s.scalars(select(TokenRow).where(TokenRow.digest.in_((keyed, plain)))):
            expected = {KEYED: keyed, PLAIN: plain}.get(row.scheme)
            if expected is not None and hmac.compare_digest(row.digest, expected):
                return row
        return None

    def _new_row(self, tenant: str | None, *, source: str = "minted", name: str | None = None,
                 ttl_s: float | None = None, token: str | None = None, role: str | None = None,
                 scope: AgentScope | None = None) -> tuple[str, TokenRow]:
        """A token and its row (not yet added): a new token, or ``token`` as given
        (SUANLI_ADMIN_TOKEN), with a new public id."""
        made, public_id = new_token()
        token = made if token is None else token
        now = time.time()
        return token, TokenRow(public_id=public_id, digest=keyed_digest(self._key(), token), scheme=KEYED,
                               tenant=tenant, name=name, source=source, created_at=now,
                               expires_at=None if ttl_s is None else now + ttl_s,
                               role=role or ("admin" if tenant is None else "member"),
                               scope=None if scope is None else scope.as_json())

    @staticmethod
    def _retried(work: Callable[[], T]) -> T:
        """``work()``, once more should it collide with a unique key (a public id
        drawn twice, or another process adding the same row at the same moment)."""
        try:
            return work()
        except IntegrityError:
            return work()

    def ensure_admin(self, token: str | None) -> str | None:
        """An admin token at start: ``token`` (SUANLI_ADMIN_TOKEN) when given, made
        the env one (``adopt_env_admin``); else, when no admin token is valid, one
        made now. Returns a token made now (to be shown once), else None."""
        if token is not None:
            self.adopt_env_admin(token)
            return None

        def work() -> str | None:
            with self._writing() as s:
                now = time.time()
                valid = select(TokenRow.id).where(TokenRow.tenant.is_(None), TokenRow.revoked_at.is_(None),
                                                  (TokenRow.expires_at.is_(None)) | (TokenRow.expires_at > now))
                if s.scalar(valid.limit(1)) is not None:
                    return None
                made, row = self._new_row(None, name="made at start: no admin token was valid")
                s.add(row)
                return made

        return self._retried(work)

    def adopt_env_admin(self, token: str) -> list[TokenRow]:
        """Make ``token`` the admin token from the environment: the one row of source
        'env'. Returns the rows revoked for it: the env row of another value (the
        variable was rotated) or, the first time a database from before sources were
        recorded meets a value it does not hold, its unkeyed admin rows (one of them
        was the old value, and which is not known). An admin row of this value becomes
        the env row, rehashed with the key. Raises ``TokenRefused`` when the value is
        revoked, expired or a tenant's."""
        def work() -> list[TokenRow]:
            with self._writing() as s:
                now = time.time()
                row = self._find(s, token)
                replaced = TokenRow.source == "env"
                if row is None:
                    if s.scalar(select(TokenRow.id).where(replaced).limit(1)) is None:  # never an env row
                        replaced = replaced | (TokenRow.tenant.is_(None) & (TokenRow.scheme == PLAIN))
                    _, row = self._new_row(None, source="env", name="SUANLI_ADMIN_TOKEN", token=token)
                    s.add(row)
                    s.flush()
                else:
                    self._refuse_as_admin(row, now)
                    row.source, row.digest, row.scheme = "env", keyed_digest(self._key(), token), KEYED
                old = list(s.scalars(select(TokenRow).where(replaced, TokenRow.id != row.id,
                                                            TokenRow.revoked_at.is_(None))))
                for o in old:
                    o.revoked_at = now
                return old

        revoked = self._retried(work)
        self._forget(r.public_id for r in revoked)
        return revoked

    @staticmethod
    def _refuse_as_admin(row: TokenRow, now: float) -> None:
        """Why an existing row cannot be the env admin token, raised; nothing when it can."""
        if row.tenant is not None:
            raise TokenRefused(f"is the token {row.public_id} of tenant {row.tenant!r}, not an admin token; "
                               "set a new value")
        state = token_state(row, now)
        if state != "active":
            raise TokenRefused(f"is the token {row.public_id}, which is {state}: a token once revoked or "
                               "expired is not made valid again; set a new value")

    def issue(self, tenant: str | None, *, ttl_s: float | None = None, name: str | None = None,
              role: str | None = None, scope: AgentScope | None = None,
              minter: str | None = None) -> tuple[str, TokenRow]:
        """A new token for ``tenant`` (None: an admin, or an agent with that
        ``role`` and ``scope``), valid for ``ttl_s`` seconds (None: until
        revoked): the token, to be shown once, and its row.

        ``minter``: the public id of the token that mints it (``minted_by``). A
        token minted by a non-admin never outlives its minter: without a ttl it
        expires with it, and a ttl past it raises ``MintRefused`` (``ttl``), as
        does a minter revoked or expired meanwhile (no path). A tenant's token
        is bound to the incarnation of its tenant now (``tenant_since``); a
        tenant the store no longer has raises ``MintRefused`` (``tenant``)."""
        def work() -> tuple[str, TokenRow]:
            made, row = self._new_row(tenant, name=name, ttl_s=ttl_s, role=role, scope=scope)
            with self._writing() as s:
                row.minted_by, row.tenant_since = minter, self._incarnation(s, tenant)
                if minter is not None:
                    row.expires_at = self._within_minter(s, minter, row.expires_at)
                s.add(row)
            return made, row

        return self._retried(work)

    @staticmethod
    def _incarnation(s: Session, tenant: str | None) -> int | None:
        """The version the store's Tenant object ``tenant`` was first written at (None:
        an admin's token, or a store that keeps no Tenant documents)."""
        if tenant is None:
            return None
        version = s.scalar(select(ObjectRow.version).where(ObjectRow.kind == "Tenant", ObjectRow.name == tenant))
        if version is None and s.scalar(select(ObjectRow.name).where(ObjectRow.kind == "Tenant").limit(1)):
            raise MintRefused("tenant", f"no tenant {tenant!r} (it was deleted meanwhile)")
        return version

    @staticmethod
    def _within_minter(s: Session, minter: str, expires_at: float | None) -> float | None:
        """``expires_at`` of a token minted by ``minter``: a non-admin minter's
        own expiry at the latest. Its row stays locked to the commit (PostgreSQL),
        so that a revocation of it waits, then finds this token among its children."""
        row = s.scalar(select(TokenRow).where(TokenRow.public_id == minter).with_for_update())
        if row is None or token_state(row, time.time()) != "active":
            raise MintRefused(None, "the token minting it is no longer valid")
        if row.role == "admin" or row.expires_at is None:
            return expires_at
        if expires_at is None:
            return row.expires_at
        if expires_at > row.expires_at:
            raise MintRefused("ttl", f"past the expiry of the token minting it ({row.public_id}, "
                              f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(row.expires_at))}): a token "
                              "never outlives the one that minted it; give a shorter ttl, or none")
        return expires_at

    def mint(self, tenant: str | None, *, ttl_s: float | None = None, name: str | None = None) -> str:
        """A new token for ``tenant`` (None: an admin), to be shown once."""
        return self.issue(tenant, ttl_s=ttl_s, name=name)[0]

    def tokens(self, after: int | None = None, limit: int | None = None) -> list[TokenRow]:
        """Tokens' rows, oldest first, in any state (revoked and expired ones too);
        ``after``: past that row id, ``limit``: at most that many."""
        q = select(TokenRow).order_by(TokenRow.id)
        if after is not None:
            q = q.where(TokenRow.id > after)
        if limit is not None:
            q = q.limit(limit)
        with self.session() as s:
            return list(s.scalars(q))

    def revoke(self, token_id: str) -> bool:
        """Revoke a token by its public id (once: revoking again keeps the first
        time); False when there is none. A token of a non-admin (a tenant-admin)
        takes with it every token it minted, and theirs, in the same transaction
        (an admin's mints are roots of trust: rotating SUANLI_ADMIN_TOKEN revokes
        no tenant's token). This process stops believing them at once; other
        processes within ``PRINCIPAL_CACHE_S``."""
        with self._writing() as s:
            row = s.scalar(select(TokenRow).where(TokenRow.public_id == token_id))
            if row is None:
                return False
            now, gone, level = time.time(), [token_id], [row]
            while level:  # a generation at a time, each locked before its children are read
                for r in level:
                    if r.revoked_at is None:
                        r.revoked_at = now
                s.flush()
                minters = [r.public_id for r in level if r.role != "admin"]
                level = list(s.scalars(select(TokenRow).where(TokenRow.minted_by.in_(minters)))) if minters else []
                gone += [r.public_id for r in level]
        self._forget(gone)
        return True

    def bind_tokens(self) -> tuple[list[str], list[str]]:
        """At start, once: tenants' tokens from before tokens recorded their tenant's
        incarnation are bound to the one there is now; those whose tenant the
        store no longer has are revoked (a tenant made later under that name is
        another). The ids bound, and revoked."""
        with self._writing() as s:
            now, bound, revoked = time.time(), [], []
            tenants = select(ObjectRow.name, ObjectRow.version).where(ObjectRow.kind == "Tenant")
            versions = dict(s.execute(tenants).all())
            unbound = select(TokenRow).where(TokenRow.tenant.is_not(None), TokenRow.tenant_since.is_(None))
            for row in s.scalars(unbound):
                if row.tenant in versions:
                    row.tenant_since = versions[row.tenant]
                    bound.append(row.public_id)
                elif row.revoked_at is None:
                    row.revoked_at = now
                    revoked.append(row.public_id)
        self._forget(revoked)
        return bound, revoked

    def _forget(self, token_ids: Iterable[str]) -> None:
        """Stop believing these tokens in this process (a lookup running now is not remembered)."""
        ids = set(token_ids)
        if not ids:
            return
        self._revocations += 1
        for key, entry in list(self._principals.items()):
            if entry.token_id in ids:
                self._principals.pop(key, None)

    def remembered(self, token: str) -> Principal | None:
        """Who a token speaks for, if it was found valid within the last
        ``PRINCIPAL_CACHE_S`` and has not expired since (no database access)."""
        entry = self._principals.get(digest(token))
        if entry is None or time.monotonic() >= entry.fresh_until:
            return None
        if entry.expires_at is not None and time.time() >= entry.expires_at:
            return None
        return entry.who

    def principal(self, token: str) -> Principal | None:
        """Who a token speaks for, looked up in the database: None when it is
        unknown, revoked or expired, or of another incarnation of its tenant than
        the store's now (or of a tenant it no longer has). A valid one is remembered
        for ``PRINCIPAL_CACHE_S``, so that a revocation made by another process (or
        with another store) counts within that time."""
        revocations = self._revocations
        with self.session() as s:
            row = self._find(s, token)
            bound = row is not None and row.tenant is not None and row.tenant_since is not None
            since = s.scalar(select(ObjectRow.version).where(ObjectRow.kind == "Tenant",
                                                             ObjectRow.name == row.tenant)) if bound else None
        key = digest(token)
        if row is None or token_state(row, time.time()) != "active" or (bound and since != row.tenant_since):
            self._principals.pop(key, None)
            return None
        role = row.role or ("admin" if row.tenant is None else "member")
        who = Principal(row.tenant, row.public_id, role, AgentScope.of(row.scope) if role == "agent" else None)
        if revocations == self._revocations:
            self._remember(key, _Remembered(who, row.public_id, time.monotonic() + PRINCIPAL_CACHE_S,
                                            row.expires_at))
        return who

    def _remember(self, key: str, entry: _Remembered) -> None:
        if len(self._principals) >= REMEMBERED_AT_MOST:  # drop those no longer believed; if none, all
            now = time.monotonic()
            stale = [k for k, e in list(self._principals.items()) if e.fresh_until <= now]
            for k in stale or list(self._principals):
                self._principals.pop(k, None)
        self._principals[key] = entry

    # ------------------------------------------------------------ applications

    def create_app(self, tenant: str, name: str, document: dict, tasks: Sequence[str],
                   key: str | None) -> tuple[AppRow, bool]:
        """Record an accepted application and its tasks (pending); returns the row
        and whether it is new. A repeated idempotency key with the same
        document returns the first row, with another document raises
        ``KeyReused``; a name taken under another key raises ``Conflict``.

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
            conn.execute(INSERT_COMMAND, dict(at=now, kind="submit", tenant=tenant, name=name, app_id=app_id,
                                              action=None))
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
            if same.document != document:
                raise KeyReused(same.name) from None
            return same, False
        return AppRow(id=app_id, **fields), True

    def update_app(self, tenant: str, name: str, document: dict, tasks: Sequence[str]) -> tuple[AppRow, bool] | None:
        """A changed document of an application (its next revision): the one
        before kept for an undo, tasks no longer in it gone, new ones pending,
        and the controller told (a command ``update``), in one transaction.
        Returns the row and whether it changed (the same document: no new
        revision); None: no such application."""
        now = time.time()
        with self._writing() as s:
            row = s.scalar(select(AppRow).where(AppRow.tenant == tenant, AppRow.name == name))
            if row is None:
                return None
            if row.document == document:
                s.expunge(row)
                return row, False
            row.previous, row.document, row.revision = row.document, document, (row.revision or 1) + 1
            have = set(s.scalars(select(TaskRow.name).where(TaskRow.app_id == row.id)))
            wanted = set(tasks)
            gone = have - wanted
            if gone:
                s.execute(delete(TaskRow).where(TaskRow.app_id == row.id, TaskRow.name.in_(gone)))
            new = [t for t in tasks if t not in have]
            if new:
                s.execute(INSERT_TASKS, [dict(tenant=tenant, name=t, app_id=row.id, status="pending", placements=0,
                                              submitted_at=now, updated_at=now) for t in new])
            s.add(CommandRow(at=now, kind="update", tenant=tenant, name=name, app_id=row.id,
                             action=str(row.revision)))
            s.flush()
            s.expunge(row)
        return row, True

    def extra_tasks(self, app_id: int, tenant: str, add: Sequence[str] = (), drop: Sequence[str] = ()) -> None:
        """Tasks of an application beyond its document's (a rollout's extra
        replicas): ``add`` made pending, ``drop`` removed (fenced as ``record``)."""
        now, fence = time.time(), self.fence

        def write(conn: Connection) -> None:
            self._fenced(conn, fence)
            if drop:
                conn.execute(delete(TaskRow).where(TaskRow.app_id == app_id, TaskRow.name.in_(list(drop))))
            have = set(conn.scalars(select(TaskRow.name).where(TaskRow.app_id == app_id,
                                                                TaskRow.name.in_(list(add))))) if add else set()
            new = [t for t in add if t not in have]
            if new:
                conn.execute(INSERT_TASKS, [dict(tenant=tenant, name=t, app_id=app_id, status="pending", placements=0,
                                                 submitted_at=now, updated_at=now) for t in new])

        if add or drop:
            self._write(write)

    def delete_app(self, tenant: str, name: str) -> int | None:
        """Delete an application and its tasks; its id, or None if there was none."""
        with self._writing() as s:
            row = s.scalar(select(AppRow).where(AppRow.tenant == tenant, AppRow.name == name))
            if row is None:
                return None
            app_id = row.id
            s.execute(delete(TaskRow).where(TaskRow.app_id == row.id))
            s.delete(row)
            s.add(CommandRow(at=time.time(), kind="delete", tenant=tenant, name=name, app_id=app_id))
        return app_id

    def apps(self, tenant: str | None = None, after: int | None = None, limit: int | None = None) -> list[AppRow]:
        """Applications in the order they came; ``after``: past that id, ``limit``: at most that many."""
        q = select(AppRow).order_by(AppRow.id)
        if after is not None:
            q = q.where(AppRow.id > after)
        if limit is not None:
            q = q.limit(limit)
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

    def app_by_id(self, app_id: int) -> AppRow | None:
        with self.session() as s:
            return s.get(AppRow, app_id)

    # ------------------------------------------------------------ tasks

    def tasks(self, tenant: str | None = None, app: str | None = None, status: str | None = None,
              after: tuple[str, int, str] | None = None, limit: int | None = None,
              inadmissible: bool | None = None) -> list[TaskRow]:
        """Tasks in (tenant, application, name) order; ``after``: only those past
        that key (a page's last), ``limit``: at most that many; ``inadmissible``:
        only those whose binding reason is (True) or is not (False)."""
        q = select(TaskRow).order_by(TaskRow.tenant, TaskRow.app_id, TaskRow.name)
        if after is not None:
            q = q.where(tuple_(TaskRow.tenant, TaskRow.app_id, TaskRow.name) > tuple_(*after))
        if limit is not None:
            q = q.limit(limit)
        if tenant is not None:
            q = q.where(TaskRow.tenant == tenant)
        if app is not None:
            q = q.join(AppRow, AppRow.id == TaskRow.app_id).where(AppRow.name == app)
        if status is not None:
            q = q.where(TaskRow.status == status)
        if inadmissible is not None:
            code = TaskRow.reason_code == "inadmissible"
            q = q.where(code if inadmissible else or_(TaskRow.reason_code.is_(None), ~code))
        with self.session() as s:
            return list(s.scalars(q))

    def requeue_running(self, now: float, reason: str, except_apps: Sequence[int] = ()) -> int:
        """Every running task (of applications but ``except_apps``) made pending again,
        each with a ``requeued`` event saying ``reason``: what a controller that
        starts does with the work its executor no longer runs. Two statements,
        however many tasks (the events' bodies made by the database); fenced as
        ``record`` is. The number requeued."""
        t, e = TaskRow.__table__, EventRow.__table__
        build = func.json_build_object if self.engine.dialect.name == "postgresql" else func.json_object
        body = build("t", now, "kind", "requeued", "task", t.c.name, "tenant", t.c.tenant, "reason", reason)
        which = (t.c.status == "running") & ~t.c.app_id.in_(list(except_apps)) if except_apps else \
            t.c.status == "running"
        fence = self.fence

        def write(conn: Connection) -> int:
            self._fenced(conn, fence)
            conn.execute(insert(e).from_select(
                ["at", "kind", "tenant", "task", "app_id", "body"],
                select(literal(now), literal("requeued"), t.c.tenant, t.c.name, t.c.app_id, body)
                .where(which).order_by(t.c.tenant, t.c.app_id, t.c.name)))
            return conn.execute(update(t).where(which).values(status="pending", node=None, site=None, host=None,
                                                              updated_at=now)).rowcount

        return self._write(write)

    @staticmethod
    def _fenced(conn: Connection, fence: tuple[str, str, int] | None) -> None:
        """Write on only while the lease is ours (its row stays locked to the commit):
        its epoch unchanged, for a taker always bumps it."""
        if fence is None:
            return
        t = LeaseRow.__table__
        name, holder, epoch = fence
        held = conn.execute(update(t).where(t.c.name == name, t.c.holder == holder, t.c.epoch == epoch)
                            .values(epoch=epoch))
        if not held.rowcount:
            raise LeaseLost(f"the lease {name!r} of epoch {epoch} is no longer {holder}'s")

    def task_states(self) -> list[Any]:
        """Every task's (tenant, name, app_id, status), as plain rows: what a
        rebuild needs of 100,000 tasks, without an object each."""
        t = TaskRow.__table__
        with self.engine.connect() as conn:
            return list(conn.execute(select(t.c.tenant, t.c.name, t.c.app_id, t.c.status)))

    def task_page(self, tenant: str | None, *, app: str | None = None, status: str | None = None,
                  sites: Sequence[str] | None = None, site_prefixes: Sequence[str] = (), reason_code: str | None = None,
                  text: str | None = None, offset: int = 0, limit: int = 50) -> tuple[int, list[tuple[TaskRow, str]]]:
        """The console's task table: tasks that match every filter given, how
        many in all, and a page of them (with their application's name) in a
        stable order (tenant, application, name). ``sites`` and
        ``site_prefixes``: a task at one of those sites, or at a site whose
        name starts with one of the prefixes followed by digits (a device)."""
        cond = []
        if tenant is not None:
            cond.append(TaskRow.tenant == tenant)
        if app is not None:
            cond.append(AppRow.name == app)
        if status is not None:
            cond.append(TaskRow.status == status)
        if sites is not None or site_prefixes:
            where = [TaskRow.site.in_(list(sites or ()))]
            where += [TaskRow.site.like(_like_prefix(p) + "%", escape="\\") for p in site_prefixes]
            cond.append(or_(*where))
        if reason_code is not None:
            cond.append(TaskRow.reason_code == reason_code)
        if text:
            cond.append(TaskRow.name.like("%" + _like_prefix(text) + "%", escape="\\"))
        joined = select(TaskRow, AppRow.name).join(AppRow, AppRow.id == TaskRow.app_id).where(*cond)
        count = select(func.count()).select_from(TaskRow).join(AppRow, AppRow.id == TaskRow.app_id).where(*cond)
        page = joined.order_by(TaskRow.tenant, TaskRow.app_id, TaskRow.name).offset(offset).limit(limit)
        with self.session() as s:
            return int(s.scalar(count) or 0), [(row, name) for row, name in s.execute(page)]

    def counts_by(self, column: str, tenant: str | None, status: str | None = None, most: int = 20) -> list[tuple[str, int]]:
        """Tasks counted by ``site`` or ``reason`` (of one status, of one tenant or all), the most first."""
        col = {"site": TaskRow.site, "reason": TaskRow.reason, "status": TaskRow.status}[column]
        q = select(col, func.count()).where(col.is_not(None)).group_by(col).order_by(func.count().desc(), col).limit(most)
        if tenant is not None:
            q = q.where(TaskRow.tenant == tenant)
        if status is not None:
            q = q.where(TaskRow.status == status)
        with self.session() as s:
            return [(k, int(n)) for k, n in s.execute(q)]

    def recent_events(self, tenant: str | None, kinds: Sequence[str] = (), task: str | None = None,
                      limit: int = 100, count: bool = True, app_id: int | None = None) -> tuple[int | None, list[EventRow]]:
        """Events of these kinds (all: none given), the latest first, and (``count``) how many in all."""
        cond = []
        if app_id is not None:
            cond.append(_of_app(app_id))
        if tenant is not None:
            cond.append(EventRow.tenant == tenant)
        if kinds:
            cond.append(EventRow.kind.in_(list(kinds)))
        if task is not None:
            cond.append(EventRow.task == task)
        with self.session() as s:
            total = int(s.scalar(select(func.count()).select_from(EventRow).where(*cond)) or 0) if count else None
            rows = list(s.scalars(select(EventRow).where(*cond).order_by(EventRow.id.desc()).limit(limit)))
        return total, rows

    def event_counts(self, tenant: str | None, kinds: Sequence[str], start: float, end: float,
                     buckets: int) -> dict[str, list[int]]:
        """Events of each of ``kinds`` from ``start`` to ``end`` (wall time), counted per bucket."""
        width = max((end - start) / buckets, 1e-9)
        bucket = func.floor((EventRow.at - start) / width)
        q = (select(EventRow.kind, bucket, func.count())
             .where(EventRow.kind.in_(list(kinds)), EventRow.at >= start, EventRow.at <= end)
             .group_by(EventRow.kind, bucket))
        if tenant is not None:
            q = q.where(EventRow.tenant == tenant)
        out: dict[str, list[int]] = {}
        with self.session() as s:
            for kind, b, n in s.execute(q):
                i = min(max(int(b), 0), buckets - 1)
                out.setdefault(kind, [0] * buckets)[i] += int(n)
        return out

    def audit_add(self, rows: Sequence[dict[str, Any]]) -> None:
        """Record requests that asked for a change (``AuditRow``'s fields)."""
        if rows:
            self._write(lambda conn: conn.execute(insert(AuditRow.__table__), list(rows)))

    def audit(self, after: int = 0, limit: int = 1000, tenant: str | None = None) -> list[AuditRow]:
        """The audit log after id ``after``, oldest first (of one tenant's tokens, or all)."""
        q = select(AuditRow).where(AuditRow.id > after).order_by(AuditRow.id).limit(limit)
        if tenant is not None:
            q = q.where(AuditRow.tenant == tenant)
        with self.session() as s:
            return list(s.scalars(q))

    def prune(self, now: float, keep_events_s: float | None, keep_events: int | None,
              keep_ended_s: float | None) -> dict[str, Any]:
        """Retention: the events (and audit rows) older than ``keep_events_s``, those
        past the newest ``keep_events``, and the events of deleted applications; and the applications
        whose every task ended more than ``keep_ended_s`` ago (with their tasks and
        events). Returns what went: counts, and the applications (tenant, name, id)
        for the scheduler to forget."""
        out: dict[str, Any] = {"events": 0, "apps": []}

        def work(conn: Connection) -> None:
            e = EventRow.__table__
            gone = conn.execute(delete(e).where(e.c.app_id.is_not(None),
                                                e.c.app_id.not_in(select(AppRow.__table__.c.id)))).rowcount or 0
            def expire(table) -> int:  # rows older than kept, or past the newest kept
                n = 0
                if keep_events_s is not None:
                    n += conn.execute(delete(table).where(table.c.at < now - keep_events_s)).rowcount or 0
                if keep_events is not None:
                    newest = conn.execute(select(func.max(table.c.id))).scalar() or 0
                    n += conn.execute(delete(table).where(table.c.id <= newest - keep_events)).rowcount or 0
                return n

            gone += expire(e)
            expire(AuditRow.__table__)  # the audit log is kept as the events are
            if keep_ended_s is not None:
                t, a = TaskRow.__table__, AppRow.__table__
                live = select(t.c.app_id).where(or_(t.c.status.not_in(ENDED_STATUSES), t.c.ended_at.is_(None),
                                                    t.c.ended_at >= now - keep_ended_s))
                old = conn.execute(select(a.c.id, a.c.tenant, a.c.name).where(
                    a.c.id.not_in(live), a.c.created_at < now - keep_ended_s)).all()
                if old:
                    ids = [r.id for r in old]
                    conn.execute(delete(t).where(t.c.app_id.in_(ids)))
                    gone += conn.execute(delete(e).where(e.c.app_id.in_(ids))).rowcount or 0
                    conn.execute(delete(a).where(a.c.id.in_(ids)))
                    out["apps"] = [(r.tenant, r.name, r.id) for r in old]
                    conn.execute(INSERT_COMMAND, [dict(at=now, kind="delete", tenant=r.tenant, name=r.name,
                                                       app_id=r.id, action=None) for r in old])
            c = CommandRow.__table__  # a controller that starts reads the store; commands are for the running one
            conn.execute(delete(c).where(c.c.at < now - COMMANDS_KEPT_S))
            out["events"] = gone

        self._write(work)
        return out

    def counts(self) -> dict[str, int]:
        """Rows kept: applications, tasks, events, audit rows (for retention's checks and benchmarks)."""
        with self.session() as s:
            return {name: int(s.scalar(select(func.count()).select_from(row)) or 0)
                    for name, row in (("applications", AppRow), ("tasks", TaskRow), ("events", EventRow),
                                      ("audit", AuditRow))}

    def form_key(self, token: str) -> str:
        """The key a console form carries for the session of ``token`` (not the token; made with the secret)."""
        return keyed_digest(self._key(), "console-form:" + token)

    def task_counts(self, app_id: int | None = None) -> dict[str, int]:
        """Tasks by status: of one application, or of all."""
        q = select(TaskRow.status, func.count()).group_by(TaskRow.status)
        if app_id is not None:
            q = q.where(TaskRow.app_id == app_id)
        with self.session() as s:
            return {status: n for status, n in s.execute(q)}

    def task_counts_of(self, app_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """Tasks by status of each of these applications, in one query."""
        if not app_ids:
            return {}
        q = select(TaskRow.app_id, TaskRow.status, func.count()).where(TaskRow.app_id.in_(app_ids)) \
            .group_by(TaskRow.app_id, TaskRow.status)
        out: dict[int, dict[str, int]] = {}
        with self.session() as s:
            for app_id, status, n in s.execute(q):
                out.setdefault(app_id, {})[status] = n
        return out

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
        rows_of_events = [{"tenant": None, "task": None, "app_id": None, **e} for e in events]

        fence = self.fence

        def write(conn: Connection) -> None:
            self._fenced(conn, fence)
            for fields, rows in by_fields.items():
                conn.execute(task_update(fields), rows)
            if rows_of_events:
                conn.execute(INSERT_EVENTS, rows_of_events)

        self._write(write)

    # ------------------------------------------------------------ events

    def events(self, tenant: str | None, after: int = 0, limit: int = 1000, task: str | None = None,
               app_id: int | None = None) -> list[EventRow]:
        """Events after id ``after``, oldest first: a tenant's own, or all for an admin
        (``task`` and ``app_id``: of that task of that application, not of an earlier
        application of the same name)."""
        q = select(EventRow).where(EventRow.id > after).order_by(EventRow.id).limit(limit)
        if tenant is not None:
            q = q.where(EventRow.tenant == tenant)
        if task is not None:
            q = q.where(EventRow.task == task)
        if app_id is not None:
            q = q.where(_of_app(app_id))
        with self.session() as s:
            return list(s.scalars(q))

    def last_event_id(self) -> int:
        with self.session() as s:
            return s.scalar(select(EventRow.id).order_by(EventRow.id.desc()).limit(1)) or 0

    # ------------------------------------------------------------ nodes

    # ------------------------------------------------------------ commands and the controller's lease

    def commands(self, after: int, limit: int = 10_000) -> list[CommandRow]:
        """Commands past id ``after``, in id order."""
        with self.session() as s:
            return list(s.scalars(select(CommandRow).where(CommandRow.id > after).order_by(CommandRow.id)
                                  .limit(limit)))

    def commands_in(self, ids: Sequence[int]) -> list[CommandRow]:
        with self.session() as s:
            return list(s.scalars(select(CommandRow).where(CommandRow.id.in_(list(ids))).order_by(CommandRow.id)))

    def last_command(self) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.max(CommandRow.id))) or 0)

    def take_lease(self, name: str, holder: str, ttl_s: float, address: str | None = None,
                   pid: int | None = None, host: str | None = None) -> int | None:
        """Take the lease ``name`` if it is free, expired or ``holder``'s: its new
        epoch, or None while another holds it. The epoch grows at every take, so
        that whoever held it before (another server, or an earlier process of the
        same one) writes nothing more (``record``'s fence). ``pid`` and ``host``:
        the taking process, for a server that starts beside it to find it."""
        def write(conn: Connection) -> int | None:
            now = time.time()
            t = LeaseRow.__table__
            row = conn.execute(select(t.c.holder, t.c.epoch, t.c.expires_at).where(t.c.name == name)).first()
            if row is None:
                conn.execute(insert(t).values(name=name, holder=holder, address=address, epoch=1,
                                              expires_at=now + ttl_s, pid=pid, host=host))
                return 1
            if row.holder != holder and row.expires_at > now:
                return None
            done = conn.execute(update(t).where(t.c.name == name, t.c.epoch == row.epoch)
                                .values(holder=holder, address=address, epoch=row.epoch + 1, expires_at=now + ttl_s,
                                        pid=pid, host=host))
            return row.epoch + 1 if done.rowcount else None

        return self._write(write)

    def renew_lease(self, name: str, holder: str, epoch: int, ttl_s: float) -> bool:
        """Extend a lease of ``epoch``; False when it was lost: another took it
        since. One that ran out and that no one took is still its holder's: a
        server alone on its store never loses it to a slow turn or a pause."""
        def write(conn: Connection) -> bool:
            now = time.time()
            t = LeaseRow.__table__
            done = conn.execute(update(t).where(t.c.name == name, t.c.holder == holder, t.c.epoch == epoch)
                                .values(expires_at=now + ttl_s))
            return bool(done.rowcount)

        return self._write(write)

    def lease(self, name: str) -> LeaseRow | None:
        with self.session() as s:
            return s.get(LeaseRow, name)

    # ------------------------------------------------------------ what the server runs

    def objects(self, set_aside: bool = False) -> list[ObjectRow]:
        """The Fleet, Tenant and VirtualCluster documents the server runs, in the order
        they were first written (``set_aside``: those it does not run too, ``failed`` saying why)."""
        q = select(ObjectRow).order_by(ObjectRow.version, ObjectRow.kind, ObjectRow.name)
        with self.session() as s:
            return list(s.scalars(q if set_aside else q.where(ObjectRow.failed.is_(None))))

    def set_aside(self, objects: Sequence[tuple[str, str, str]]) -> None:
        """Stored documents (kind, name, why) that cannot be run: kept, with the reason,
        and left out of what the server runs until they are applied again."""
        def write(conn: Connection) -> None:
            for kind, name, why in objects:
                conn.execute(update(ObjectRow).where(ObjectRow.kind == kind, ObjectRow.name == name)
                             .values(failed=why[:1000]))
            conn.execute(insert(ConfigVersionRow).values(at=time.time()))

        if objects:
            self._write(write)

    def config_version(self) -> int:
        """The configuration's version: it grows with every change of the objects."""
        with self.session() as s:
            return int(s.scalar(select(func.max(ConfigVersionRow.id))) or 0)

    def put_objects(self, put: Sequence[tuple[str, str, str | None, dict]], remove: Sequence[tuple[str, str]] = (),
                    expect: int | None = None) -> int | None:
        """Write documents (kind, name, tenant, document) and delete others, as one
        change; its version. ``expect``: only if the configuration is still at that
        version (None back otherwise: someone changed it meanwhile)."""
        def write(conn: Connection) -> int | None:
            if expect is not None and int(conn.scalar(select(func.max(ConfigVersionRow.id))) or 0) != expect:
                return None
            now = time.time()
            version = conn.execute(insert(ConfigVersionRow).values(at=now)).inserted_primary_key[0]
            for kind, name in remove:
                conn.execute(delete(ObjectRow).where(ObjectRow.kind == kind, ObjectRow.name == name))
            for kind, name, tenant, document in put:
                done = conn.execute(update(ObjectRow).where(ObjectRow.kind == kind, ObjectRow.name == name)
                                    .values(document=document, tenant=tenant, updated_at=now, failed=None))
                if not done.rowcount:
                    conn.execute(insert(ObjectRow).values(kind=kind, name=name, tenant=tenant, document=document,
                                                          version=version, updated_at=now))
            return int(version)

        return self._write(write)

    def remove_objects(self, remove: Sequence[tuple[str, str]], expect: int, *, apps: Sequence[int] = (),
                       tenant: str | None = None) -> "Removed | None":
        """Delete documents (kind, name) as one change, and what goes with them, in
        one transaction, so that a crash leaves all of it or none: the
        applications ``apps`` (ids) with their tasks or, with ``tenant`` (its
        Tenant removed), every application of that tenant, and the revocation of
        its tokens. A command is queued for each application deleted. ``expect``:
        only if the configuration is still at that version (None back otherwise:
        someone changed it meanwhile)."""
        def write(conn: Connection) -> Removed | None:
            if int(conn.scalar(select(func.max(ConfigVersionRow.id))) or 0) != expect:
                return None
            now = time.time()
            a, t, k = AppRow.__table__, TaskRow.__table__, TokenRow.__table__
            which = select(a.c.id).where(a.c.tenant == tenant if tenant is not None else a.c.id.in_(list(apps)))
            gone = conn.execute(select(a.c.id, a.c.tenant, a.c.name).where(a.c.id.in_(which))).all()
            if gone:
                conn.execute(delete(t).where(t.c.app_id.in_(which)))
                conn.execute(delete(a).where(a.c.id.in_([r.id for r in gone])))
                conn.execute(INSERT_COMMAND, [dict(at=now, kind="delete", tenant=r.tenant, name=r.name, app_id=r.id,
                                                   action=None) for r in gone])
            revoked: list[str] = []
            if tenant is not None:
                live = (k.c.tenant == tenant) & k.c.revoked_at.is_(None)
                revoked = list(conn.scalars(select(k.c.public_id).where(live)))
                conn.execute(update(k).where(live).values(revoked_at=now))
            version = conn.execute(insert(ConfigVersionRow).values(at=now)).inserted_primary_key[0]
            for kind, name in remove:
                conn.execute(delete(ObjectRow).where(ObjectRow.kind == kind, ObjectRow.name == name))
            return Removed(int(version), [(r.tenant, r.name, r.id) for r in gone], revoked)

        got = self._write(write)
        if got is not None:
            self._forget(got.revoked)
        return got

    def agents(self, changed_after: int = 0) -> list[AgentRow]:
        """Agents (every state) whose registration, loss or leave came after ``changed_after``."""
        with self.session() as s:
            return list(s.scalars(select(AgentRow).where(AgentRow.changed > changed_after).order_by(AgentRow.changed)))

    def agent(self, name: str) -> AgentRow | None:
        with self.session() as s:
            return s.get(AgentRow, name)

    def _agent_change(self, conn: Connection) -> int:
        return int(conn.scalar(select(func.max(AgentRow.changed))) or 0) + 1

    def register_agent(self, name: str, site: str, spec: dict, lease_s: float, token_id: str | None, *,
                       scope: AgentScope | None = None, site_nodes: int | None = None) -> str:
        """A node registers (or again, after a loss or a leave): ready, with a lease of
        ``lease_s``. Returns its state before (``new`` if it was never seen).

        With ``scope`` (an agent token's registration), checked in the same
        transaction, so that registrations racing each other cannot pass a bound
        together: the node is not another valid token's (one that left is no
        one's), the token has fewer than ``scope.nodes`` nodes that have not left,
        and the site fewer than ``site_nodes``. Raises ``AgentRefused``."""
        def write(conn: Connection) -> str | AgentRefused:
            now = time.time()
            row = conn.execute(select(AgentRow.state, AgentRow.token_id).where(AgentRow.name == name)).first()
            if scope is not None:
                refused = self._agent_refused(conn, name, site, token_id, scope, site_nodes, row, now)
                if refused is not None:
                    return refused
            values = dict(site=site, spec=spec, lease_s=lease_s, state="ready", token_id=token_id,
                          registered_at=now, expires_at=now + lease_s, changed=self._agent_change(conn))
            if row is None:
                conn.execute(insert(AgentRow).values(name=name, **values))
                return "new"
            conn.execute(update(AgentRow).where(AgentRow.name == name).values(**values))
            return row[0]

        got = self._write(write)
        if isinstance(got, AgentRefused):
            raise got
        return got

    @staticmethod
    def _agent_refused(conn: Connection, name: str, site: str, token_id: str | None, scope: AgentScope,
                       site_nodes: int | None, row, now: float) -> AgentRefused | None:
        """Why an agent token may not register node ``name`` now (None: it may)."""
        if row is not None and row.state != "left" and row.token_id != token_id:
            owner = conn.execute(select(TokenRow.revoked_at, TokenRow.expires_at)
                                 .where(TokenRow.public_id == row.token_id)).first()
            if owner is None or owner.revoked_at is None and (owner.expires_at is None or owner.expires_at > now):
                return AgentRefused(403, f"node {name!r} was registered by another agent token")
        # the token's row locked to the commit (PostgreSQL): its registrations are counted one at a time
        conn.execute(select(TokenRow.id).where(TokenRow.public_id == token_id).with_for_update())
        live = select(func.count()).select_from(AgentRow).where(AgentRow.state != "left", AgentRow.name != name)
        if conn.scalar(live.where(AgentRow.token_id == token_id)) >= scope.nodes:
            return AgentRefused(403, f"agent token {token_id} has at most {scope.nodes} nodes at once "
                                f"(registered, or lost and not departed; its scope: {scope}): a node that "
                                "leaves makes room")
        if site_nodes is not None and conn.scalar(live.where(AgentRow.site == site)) >= site_nodes:
            return AgentRefused(409, f"site {site!r} takes at most {site_nodes} agent nodes, and has them "
                                "(the Fleet document's agents.nodes)")
        return None

    def renew_agent(self, name: str) -> str | None:
        """A heartbeat: the lease of a ready agent runs again from now. Its state
        (None: unknown); a lost or departed one must register again."""
        def write(conn: Connection) -> str | None:
            row = conn.execute(select(AgentRow.state, AgentRow.lease_s).where(AgentRow.name == name)).first()
            if row is None:
                return None
            if row[0] == "ready":
                conn.execute(update(AgentRow).where(AgentRow.name == name)
                             .values(expires_at=time.time() + row[1]))
            return row[0]

        return self._write(write)

    def end_agents(self, names: Sequence[str], state: str, only_if_expired: bool = False) -> list[str]:
        """Agents that are ready become ``state`` (lost: the lease ran out; left:
        it said goodbye); the names that did."""
        def write(conn: Connection) -> list[str]:
            q = select(AgentRow.name).where(AgentRow.name.in_(list(names)), AgentRow.state == "ready")
            if only_if_expired:
                q = q.where(AgentRow.expires_at < time.time())
            ended = [r[0] for r in conn.execute(q)]
            change = self._agent_change(conn)
            for i, name in enumerate(ended):
                conn.execute(update(AgentRow).where(AgentRow.name == name).values(state=state, changed=change + i))
            return ended

        return self._write(write) if names else []

    def expired_agents(self, now: float, limit: int = 10_000) -> list[str]:
        """Ready agents whose lease ran out."""
        with self.session() as s:
            return list(s.scalars(select(AgentRow.name).where(AgentRow.state == "ready", AgentRow.expires_at < now)
                                  .limit(limit)))

    # ------------------------------------------------------------ agents' assignments

    def assign(self, rows: Sequence[dict[str, Any]], gone: Sequence[tuple[str, str]] = ()) -> None:
        """Assignments written whole (each a dict of ``AssignmentRow``'s columns
        but ``changed``), and those of ``gone`` ((node, task)) removed, in one
        transaction; each written row is marked after every row written
        before (removed ones too)."""
        def write(conn: Connection) -> None:
            last = conn.scalar(select(AssignmentMarkRow.value).where(AssignmentMarkRow.id == 1).with_for_update())
            change = int(last or 0) + 1
            if rows:
                if last is None:
                    conn.execute(insert(AssignmentMarkRow).values(id=1, value=change + len(rows) - 1))
                else:
                    conn.execute(update(AssignmentMarkRow).where(AssignmentMarkRow.id == 1)
                                 .values(value=change + len(rows) - 1))
            for node, task in gone:
                conn.execute(delete(AssignmentRow).where(AssignmentRow.node == node, AssignmentRow.task == task))
            for i, row in enumerate(rows):
                conn.execute(delete(AssignmentRow).where(AssignmentRow.node == row["node"],
                                                         AssignmentRow.task == row["task"]))
                conn.execute(insert(AssignmentRow).values(**row, changed=change + i))

        if rows or gone:
            self._write(write)

    def assignments(self, node: str | None = None) -> list[AssignmentRow]:
        """A node's assignments (None: every node's)."""
        with self.session() as s:
            q = select(AssignmentRow)
            if node is not None:
                q = q.where(AssignmentRow.node == node)
            return list(s.scalars(q.order_by(AssignmentRow.task)))

    def assignment(self, node: str, task: str) -> AssignmentRow | None:
        with self.session() as s:
            return s.get(AssignmentRow, (node, task))

    def assignments_changed(self) -> int:
        """The last mark given to an assignment written (0: none yet)."""
        with self.session() as s:
            return int(s.scalar(select(AssignmentMarkRow.value).where(AssignmentMarkRow.id == 1)) or 0)

    def assigned_after(self, mark: int, limit: int = 100_000) -> tuple[set[str], int]:
        """The nodes whose assignments were written after ``mark``, and the newest mark among them."""
        with self.session() as s:
            rows = s.execute(select(AssignmentRow.node, AssignmentRow.changed).where(AssignmentRow.changed > mark)
                             .order_by(AssignmentRow.changed).limit(limit)).all()
        return {r[0] for r in rows}, (rows[-1][1] if rows else mark)

    def report(self, node: str, items: Sequence[dict[str, Any]]) -> None:
        """An agent's reports of its node's tasks (task, run_id, kind, body), for the controller."""
        now = time.time()
        if items:
            self._write(lambda conn: conn.execute(insert(AgentReportRow), [
                {"at": now, "node": node, "task": i["task"], "run_id": int(i["run_id"]), "kind": i["kind"],
                 "body": i.get("body") or {}} for i in items]))

    def reports(self, after: int, limit: int = 10_000) -> list[AgentReportRow]:
        with self.session() as s:
            return list(s.scalars(select(AgentReportRow).where(AgentReportRow.id > after)
                                  .order_by(AgentReportRow.id).limit(limit)))

    def last_report(self) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.max(AgentReportRow.id))) or 0)

    def drop_reports(self, upto: int) -> None:
        """Reports up to ``upto`` were taken: they go."""
        self._write(lambda conn: conn.execute(delete(AgentReportRow).where(AgentReportRow.id <= upto)))

    def set_node_state(self, node: str, state: str | None, action: str | None = None) -> None:
        """A node's state kept (None: back in service), and ``action`` queued for the controller."""
        with self._writing() as s:
            if action is not None:
                s.add(CommandRow(at=time.time(), kind="node", name=node, action=action))
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
