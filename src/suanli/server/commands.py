"""The commands of the live control plane: ``serve``, and the client commands
(``apply``, ``get``, ``describe``, ``delete``, ``events``, ``token create``,
``token list``, ``token revoke``) that talk to it over its REST API.

The client finds the server in ``--server`` or ``SUANLI_SERVER`` and speaks
with ``--token`` or ``SUANLI_TOKEN``. A request the server refuses for its
content (a bad document, an unknown name) exits with status 2 and the
server's problems, one per line with its field path; a server that cannot be
reached or fails exits with status 1.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from suanli.executors import ExecutorName, make
from suanli.executors.logs import max_log_bytes
from suanli.model.quantities import QuantityError, parse_duration_s
from suanli.render import OutputFormat as Output
from suanli.spec.problems import Problem, SpecError

DEFAULT_SERVER = "http://127.0.0.1:8080"
CONFIG_PATHS = {"Tenant": "tenants", "VirtualCluster": "vcs", "Fleet": "fleets"}
SERVER = typer.Option(None, "--server", envvar="SUANLI_SERVER", help=f"The server's URL (default {DEFAULT_SERVER}).")
TOKEN = typer.Option(None, "--token", envvar="SUANLI_TOKEN", help="A bearer token (suanli token create).")
CA = typer.Option(None, "--ca", envvar="SUANLI_CA", help="A PEM file of the certificate authority that signed an "
                  "https server's certificate (default: the system's).")
ADMIN_TENANT = typer.Option(None, "--tenant", help="With an admin token: the tenant whose object it is.")
err = Console(stderr=True, highlight=False)


class Kind(str, Enum):
    apps = "apps"
    tasks = "tasks"
    vcs = "vcs"
    nodes = "nodes"
    tenants = "tenants"
    agents = "agents"


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error[/red]: {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


class Client:
    """The REST API over HTTP, with retries on a connection lost (creates carry an idempotency key)."""

    def __init__(self, server: str | None, token: str | None, ca: Path | None = None) -> None:
        import ssl

        import httpx

        self.server = (server or DEFAULT_SERVER).rstrip("/")
        if token:
            _may_send_token(self.server)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify: Any = True
        if ca is not None:
            try:
                verify = ssl.create_default_context(cafile=str(ca))
            except (OSError, ssl.SSLError) as exc:
                _fail(f"--ca {ca}: not a readable PEM certificate file: {exc}", 2)
        self.http = httpx.Client(base_url=self.server, headers=headers, timeout=30.0, verify=verify)
        self._httpx = httpx

    def request(self, method: str, path: str, *, where: str = "", patient: bool = False, **kw: Any):
        """``patient``: too many requests (429) is waited out, as ``Retry-After`` says, and sent again."""
        attempt = 0
        while True:
            try:
                r = self.http.request(method, path, **kw)
            except self._httpx.TransportError as exc:
                if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                    _fail(f"cannot trust the server at {self.server}: its certificate is not signed by a known "
                          f"authority ({exc}); give the authority's certificate with --ca", 1)
                attempt += 1
                if attempt == 3:
                    _fail(f"cannot reach the server at {self.server}: {exc}", 1)
                continue
            if not (patient and r.status_code == 429):
                break
            import time

            time.sleep(float(r.headers.get("retry-after") or 1))  # waited out, however long it lasts
            attempt = 0
        if r.status_code >= 500:
            _fail(f"the server failed ({r.status_code}): {r.text[:500]}", 1)
        if r.status_code >= 400:
            self._problem(r, where)
        return r

    def since(self, path: str, params: dict | None = None, page: int = 1000):
        """The items of a listing paged by id (``after``), oldest first, a page at a time."""
        after = 0
        while True:
            items = self.request("GET", path, params={**(params or {}), "after": after, "limit": page}).json()
            yield from items
            if len(items) < page:
                return
            after = items[-1]["id"]

    def every(self, path: str, params: dict | None = None) -> list:
        """All items of a listing, following its pages (``X-Next-Cursor``)."""
        items, params = [], dict(params or {})
        while True:
            r = self.request("GET", path, params=params)
            items += r.json()
            cursor = r.headers.get("x-next-cursor")
            if not cursor:
                return items
            params["cursor"] = cursor

    def _problem(self, r, where: str) -> None:
        try:
            body = r.json()
        except ValueError:
            body = {"title": r.reason_phrase, "detail": r.text}
        lines = [f"{where}{e.get('path') + ': ' if e.get('path') else ''}{e.get('message')}"
                 for e in body.get("errors") or []]
        head = f"{body.get('title', r.reason_phrase)} ({r.status_code}): {body.get('detail', '')}".rstrip(": ")
        for line in lines or [head]:
            err.print(f"[red]error[/red]: {escape(line)}", soft_wrap=True)
        if lines:
            err.print(escape(head), soft_wrap=True)
        raise typer.Exit(2)


def _may_send_token(server: str) -> None:
    """Refuse (exit 1) to send a token to a server this client cannot authenticate:
    https is checked by its certificate; plain http only to a loopback address
    whose listening process is of this user or root (docs/serve.md, "Security"),
    or anywhere with SUANLI_PLAIN_HTTP=1, on a network one trusts."""
    from urllib.parse import urlsplit

    from suanli.server.holders import listener_problem, loopback

    url = urlsplit(server)
    if url.scheme != "http" or os.environ.get("SUANLI_PLAIN_HTTP") == "1":
        return
    host, port = url.hostname or "", url.port or 80
    if not loopback(host):
        _fail(f"not sending a token over plain http to {host}: anyone on the way could read it; serve https "
              "(suanli serve --tls-cert ... --tls-key ...), or set SUANLI_PLAIN_HTTP=1 on a network you trust", 1)
    why = listener_problem(host, port)
    if why is not None:
        _fail(why, 1)


def _print_log_file(task: str, work_dir: Path, tenant: str | None, tail: int | None, rotated: bool) -> None:
    import shutil
    from urllib.parse import unquote

    from suanli.executors.logs import ROTATED
    from suanli.executors.tasks import safe

    logs = work_dir / "logs"
    name = f"{tenant}:{task}" if tenant else task  # a control plane's tasks are kept under their tenant
    path = logs / (f"{safe(name)}.log" + (ROTATED if rotated else ""))
    if not path.is_file():
        known = sorted(unquote(p.name[:-4]) for p in logs.glob("*.log")) if logs.is_dir() else []
        hint = f"; tasks with logs: {', '.join(known[:10])}" if known else ""
        _fail(f"TASK: no {'rotated ' if rotated else ''}log for {task!r} in {work_dir}{hint}")
    with open(path, "rb") as f:
        if tail is not None:
            f.seek(max(os.fstat(f.fileno()).st_size - tail, 0))
        shutil.copyfileobj(f, sys.stdout.buffer, 1 << 16)  # a chunk at a time, whatever the log's size


def _forward_verify():
    """How a standby checks the active server's certificate: SUANLI_CA's authority, else the system's."""
    ca = os.environ.get("SUANLI_CA")
    if not ca:
        return True
    import ssl

    return ssl.create_default_context(cafile=ca)


def _tls_problems(cert: Path | None, key: Path | None) -> list[Problem]:
    """--tls-cert and --tls-key: both or neither, a certificate and its key that load together."""
    if cert is None and key is None:
        return []
    if cert is None or key is None:
        return [Problem("--tls-cert" if cert is None else "--tls-key", "https needs both --tls-cert and --tls-key")]
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert), str(key))
    except FileNotFoundError as exc:
        return [Problem("--tls-cert" if not cert.is_file() else "--tls-key", f"no such file: {exc.filename}")]
    except (OSError, ssl.SSLError) as exc:
        return [Problem("--tls-cert", f"{cert} and {key} are not a PEM certificate and its private key: {exc}")]
    return []


def register(app: typer.Typer) -> None:
    """Add the control plane's commands to the command line."""

    @app.command()
    def serve(
        files: Optional[List[Path]] = typer.Argument(None, help="Fleet, Tenant and VirtualCluster documents, "
                                                     "applied at start over those the store has (none: what it has)."),
        db: str = typer.Option("sqlite:///suanli.db", "--db", help="Database URL: a SQLite file, or "
                               "postgresql+psycopg://USER:PASSWORD@HOST/DB."),
        host: str = typer.Option("127.0.0.1", "--host"),
        port: int = typer.Option(8080, "--port"),
        executor: ExecutorName = typer.Option(ExecutorName.sim, "--executor", help="Who runs the tasks: sim "
                                              "(the digital twin's executor, on the wall clock), local "
                                              "(processes on this machine), podman (containers on this machine), "
                                              "ray (a Ray cluster) or agents (on the nodes that agents register: "
                                              "suanli agent --runtime)."),
        work_dir: Path = typer.Option(Path("suanli-work"), "--work-dir", help="local, podman, ray and agents "
                                      "executors: the tasks' logs, state and checkpoints."),
        max_pids: int = typer.Option(1024, "--max-pids", help="local and podman executors: processes (and "
                                     "threads) one task may have at once."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="ray executor: the cluster "
                                                  "(default: RAY_ADDRESS, else the one on this machine)."),
        speed: float = typer.Option(1.0, "--speed", help="Scheduler seconds per wall second."),
        max_rate: float = typer.Option(500.0, "--max-rate", help="Requests per second per token, on average."),
        max_body: int = typer.Option(1 << 20, "--max-body", help="Largest request body, in bytes."),
        tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="Serve https: the server's certificate "
                                                "(PEM, with its chain), with --tls-key."),
        tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="The private key of --tls-cert (PEM)."),
        keep_events: str = typer.Option("7d", "--keep-events", help="Events are kept this long (0: forever)."),
        keep_events_count: int = typer.Option(10_000_000, "--keep-events-count", help="At most this many events "
                                              "are kept, the newest (0: no bound)."),
        keep_ended: str = typer.Option("1d", "--keep-ended", help="An application whose every task ended is kept "
                                       "this long, then deleted with its tasks and events (0: forever)."),
        prune_every: str = typer.Option("1m", "--prune-every", help="How often the store is pruned."),
        access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="A JSON line per request on "
                                        "standard error: request id, method, path, route, status, ms, token id."),
        advertise: Optional[str] = typer.Option(None, "--advertise", help="The URL other servers of this database "
                                                "reach this one at, to ask its scheduler while it is the active one "
                                                "(default: scheme://HOST:PORT)."),
        name: Optional[str] = typer.Option(None, "--name", help="This server among those sharing its database "
                                           "(default HOST:PORT): one of their controllers is active, under a "
                                           "lease; the others stand by and take over when it lapses."),
        secret_file: Optional[Path] = typer.Option(None, "--secret-file", help="The key of token digests, made "
                                                   "at first start (default: DB.secret beside a SQLite database, "
                                                   "else ./suanli.secret); SUANLI_SECRET, when set, is used instead."),
        max_log: str = typer.Option("64Mi", "--max-log", help="local and ray executors: a task's log is rotated "
                                    "past this size (at most twice it is kept); at least 1Mi."),
    ) -> None:
        """Run the control plane: the scheduler on wall-clock time behind a REST API (docs at /docs)."""
        import uvicorn

        from suanli.server.api import Limits, create_api
        from suanli.server.config import seed
        from suanli.server.controller import load_config, set_aside_broken
        from suanli.server.remote import RemoteController
        from suanli.server.store import Store, admin_token_problem
        from suanli.spec.loader import Documents, load_documents

        problems = []
        running = {"name": executor, "work_dir": work_dir.resolve(), "ray_address": ray_address,
                   "isolate_tenants": True,  # tenants' tasks: each in its own folder, as its tenant's user
                   "max_pids": max_pids, **({"db": db} if executor is ExecutorName.agents else {})}
        if not 1 <= max_pids <= 1 << 22:
            problems.append(Problem("--max-pids", f"must be from 1 to {1 << 22}, got {max_pids}"))
        try:
            running["log_max_bytes"] = max_log_bytes(max_log)
        except QuantityError as exc:
            problems.append(Problem("--max-log", str(exc)))
        if executor is not ExecutorName.sim:
            try:
                make(**running)  # the work folder can be made, Ray is there and answers
            except SpecError as exc:
                problems += exc.problems
            if executor is ExecutorName.ray and not problems:
                import ray

                ray.shutdown()  # the controller's process connects for itself
        if speed <= 0:
            problems.append(Problem("--speed", f"must be above 0, got {speed:g}"))
        problems += _tls_problems(tls_cert, tls_key)
        keep: dict[str, float | None] = {}
        for flag, text in (("--keep-events", keep_events), ("--keep-ended", keep_ended), ("--prune-every", prune_every)):
            try:
                seconds = parse_duration_s(text)
                keep[flag] = None if seconds == 0 else seconds
            except QuantityError as exc:
                problems.append(Problem(flag, str(exc)))
        if keep_events_count < 0:
            problems.append(Problem("--keep-events-count", f"must be 0 or more, got {keep_events_count}"))
        if problems:
            _fail_problems(problems)
        try:
            docs = load_documents(files) if files else Documents()
            extra = [(d.src, d.doc.kind) for d in [*docs.applications, *docs.scenarios]]
            if extra:
                raise SpecError([Problem(src.file, f"a {kind} document: serve takes Fleet, Tenant and "
                                         "VirtualCluster documents; submit applications with suanli apply",
                                         document=src.index, label=src.label) for src, kind in extra])
        except SpecError as exc:
            _fail_problems(exc.problems)
        supplied = os.environ.get("SUANLI_ADMIN_TOKEN") or None
        weak = admin_token_problem(supplied) if supplied is not None else None
        if weak is not None:
            _fail_problems([Problem("SUANLI_ADMIN_TOKEN", weak)])
        from suanli.server.holders import port_problem, store_problems

        held = port_problem(host, port)
        if held is not None:
            _fail_problems([Problem("--port", held)])
        leftovers, orphans = store_problems(_sqlite_path(db))
        if leftovers:
            _fail_problems([Problem("--db", why) for why in leftovers])
        ended = _end_orphans(orphans)
        try:
            store = Store(db)
        except Exception as exc:  # a bad URL, a database that is not there
            _fail_problems([Problem("--db", f"cannot open the database: {exc}".splitlines()[0])])
        for kind, name, why in set_aside_broken(store):  # no stored document keeps the server from starting
            err.print(f"warning: the stored {kind} {escape(name)} is set aside, not run: {escape(why)} "
                      f"(apply it again, corrected)", soft_wrap=True)
        from suanli.server.holders import lease_orphan
        from suanli.server.remote import LEASE

        lease = store.lease(LEASE)
        if lease is not None:
            ended |= _end_orphans([p] if (p := lease_orphan(lease.pid, lease.host)) is not None else [])
            if lease.pid in ended:  # its lease is free now: this server's controller takes it at once
                store.renew_lease(LEASE, lease.holder, lease.epoch, -1.0)
        seeded = seed(store, docs)
        if seeded:
            _fail_problems(seeded)
        import socket

        scheme = "https" if tls_cert is not None else "http"
        reach = host if host not in ("0.0.0.0", "::", "") else socket.gethostname()
        controller = RemoteController(db, speed=speed, holder=name or f"{socket.gethostname()}:{port}",
                                      address=advertise or f"{scheme}://{reach}:{port}",
                                      executor=running if executor is not ExecutorName.sim else None)
        controller.launch()  # it imports, takes the lease and rebuilds while this process readies the API
        try:
            world = load_config(store).world
        except ValueError as exc:
            _fail_problems([Problem("--db", str(exc))])
        if not len(world.fleet.site_table):
            _fail_problems([Problem(", ".join(docs.files) or "(no files)", "no Fleet document among the files "
                                    "or in the store")])
        _tokens_at_start(store, db, secret_file, supplied)
        api = create_api(world, store, controller, Limits(max_body_bytes=max_body, rate=max_rate,
                                                          burst=max(1, int(2 * max_rate)),
                                                          keep_events_s=keep["--keep-events"],
                                                          keep_events=keep_events_count or None,
                                                          keep_ended_s=keep["--keep-ended"],
                                                          prune_every_s=keep["--prune-every"] or 60.0),
                         logs_dir=work_dir.resolve() / "logs" if executor is not ExecutorName.sim else None,
                         forward_verify=_forward_verify(),
                         agent_work=work_dir.resolve() if executor is ExecutorName.agents else None,
                         log_max_bytes=running.get("log_max_bytes"))
        err.print(f"suanli serving {world.fleet.n_nodes} nodes on {scheme}://{host}:{port} (docs at /docs, "
                  "the console at /)")
        # What start-up built (modules, the fleet) lives as long as the process: frozen,
        # the collector no longer walks it, and a full collection takes a few milliseconds
        # instead of stopping every request for 50 to 150.
        gc.collect()
        gc.freeze()
        tls = {"ssl_certfile": str(tls_cert), "ssl_keyfile": str(tls_key)} if tls_cert is not None else {}
        if access_log:
            import logging

            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            log = logging.getLogger("suanli.access")
            log.addHandler(handler)
            log.setLevel(logging.INFO)
            log.propagate = False
        uvicorn.run(api, host=host, port=port, log_level="warning", **tls)

    @app.command()
    def logs(
        task: str = typer.Argument(..., help="The task (APP/COMPONENT/INDEX)."),
        work_dir: Optional[Path] = typer.Option(None, "--work-dir", help="Read the log from this folder (as given "
                                                "to run or serve) instead of asking the server."),
        tail: Optional[int] = typer.Option(None, "--tail", min=1, help="Only the last this many bytes."),
        follow: bool = typer.Option(False, "--follow", "-f", help="Then print what comes, until the task has ended "
                                    "(not with --work-dir)."),
        rotated: bool = typer.Option(False, "--rotated", help="The rotated part: the output before the log last "
                                     "went over its cap (--max-log)."),
        tenant: Optional[str] = ADMIN_TENANT,
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Print a task's log: the output of every run it had, each after a header line."""
        if work_dir is not None:
            if follow:
                _fail("--follow asks the server; not with --work-dir")
            _print_log_file(task, work_dir, tenant, tail, rotated)
            return
        from suanli.server.log_client import show

        show(Client(server, token, ca), task, _tenant(tenant), tail, rotated, follow)

    @app.command()
    def apply(
        file: Path = typer.Option(..., "-f", "--file", help="A YAML file of Application, Tenant, VirtualCluster "
                                  "or Fleet documents."),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Submit the applications of a file (the same document again is left as it is),
        and apply its Tenant, VirtualCluster and Fleet documents (made, or changed as
        they say; needs an admin token, or a tenant-admin's for its virtual clusters).
        Each document is applied on its own: one refused is reported, the others go on."""
        import yaml

        try:
            docs = [d for d in yaml.safe_load_all(file.read_text(encoding="utf-8")) if d is not None]
        except OSError as exc:
            _fail(f"{file}: cannot read file: {exc.strerror or exc}")
        except yaml.YAMLError as exc:
            _fail(f"{file}: malformed YAML: {exc}")
        kinds = ("Application", *CONFIG_PATHS)
        bad = [i for i, d in enumerate(docs) if not isinstance(d, dict) or d.get("kind") not in kinds]
        if bad or not docs:
            _fail(f"{file}: document {bad[0] if bad else 0}: apply takes {', '.join(kinds)} documents"
                  if bad else f"{file}: no documents")
        client = Client(server, token, ca)
        out = Console(highlight=False, soft_wrap=True)
        refused = 0
        for i, doc in enumerate(docs):
            try:
                _apply_one(client, out, file, i, doc)
            except typer.Exit as exc:  # this document refused (its error printed): the others still go
                if exc.exit_code != 2:
                    raise  # the server failed or cannot be reached: nothing more can go
                refused += 1
        if refused:
            _fail(f"{file}: {refused} of {len(docs)} document{'s' if len(docs) != 1 else ''} refused "
                  f"(above); the other {len(docs) - refused} applied")

    @app.command()
    def get(
        kind: Kind = typer.Argument(..., help="apps, tasks, vcs, nodes, tenants or agents"),
        output: Output = typer.Option(Output.table, "-o", "--output", help="table or json"),
        app_name: Optional[str] = typer.Option(None, "--app", help="tasks: of this application only"),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """List objects: apps, tasks, vcs, nodes, tenants or agents."""
        client = Client(server, token, ca)
        path = {"apps": "/v1/applications", "tasks": "/v1/tasks", "vcs": "/v1/vcs", "nodes": "/v1/nodes",
                "tenants": "/v1/tenants", "agents": "/v1/agents"}[kind.value]
        params = {"app": app_name} if app_name and kind is Kind.tasks else {}
        items = client.every(path, params)
        if output is Output.json:
            sys.stdout.write(json.dumps(items, separators=(",", ":")) + "\n")
            return
        columns = {
            "apps": [("NAME", "name"), ("TENANT", "tenant"), ("PENDING", "tasks.pending"),
                     ("RUNNING", "tasks.running"), ("FINISHED", "tasks.finished"), ("FAILED", "tasks.failed"),
                     ("OMITTED", "tasks.omitted"), ("WITHDRAWN", "tasks.withdrawn"), ("CREATED", "created_at")],
            "tasks": [("TASK", "task"), ("TENANT", "tenant"), ("STATUS", "status"), ("ADMISSION", "admission"),
                      ("READY", "ready"), ("NODE", "node"), ("SITE", "site"), ("PLACEMENTS", "placements")],
            "vcs": [("NAME", "name"), ("TENANT", "tenant"), ("DEFAULT", "default"), ("HOSTS", "hosts#")],
            "nodes": [("NODE", "node"), ("SITE", "site"), ("TIER", "tier"), ("STATE", "state"), ("TASKS", "tasks"),
                      ("FREE CPU", "free.cpu_milli"), ("FREE MEM MiB", "free.mem_mib")],
            "tenants": [("NAME", "name"), ("WEIGHT", "weight"), ("ALLOWED SITES", "allowed_sites")],
            "agents": [("NAME", "name"), ("SITE", "site"), ("STATE", "state"), ("LEASE s", "lease_s"),
                       ("TOKEN", "token_id")],
        }[kind.value]
        table = Table(box=None, pad_edge=False, header_style="bold")
        for head, _ in columns:
            table.add_column(head)
        first = columns[0][1]
        for item in sorted(items, key=lambda it: natural_key(_cell(it, first))):  # solve/2 before solve/10
            table.add_row(*(escape(_cell(item, key)) for _, key in columns))
        Console(highlight=False, width=200 if not sys.stdout.isatty() else None).print(table)

    @app.command()
    def describe(
        kind: str = typer.Argument(..., help="task"),
        name: str = typer.Argument(..., help="APP/COMPONENT/INDEX"),
        tenant: Optional[str] = ADMIN_TENANT,
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """A task in full: status, placement, why it waits, and its history."""
        if kind != "task":
            _fail(f"describe takes 'task', got {kind!r}")
        client = Client(server, token, ca)
        t = client.request("GET", f"/v1/tasks/{name}", params=_tenant(tenant)).json()
        out = Console(highlight=False, soft_wrap=True)
        for key in ("task", "tenant", "status", "admission", "ready", "node", "site", "vc", "host", "placements",
                    "submitted_at", "started_at", "ended_at"):
            if t.get(key) is not None:
                out.print(f"{key + ':':14}{escape(str(t[key]))}")
        if t.get("reasons"):
            from suanli.render import why_text

            out.print("waiting:      " + escape(why_text(t.get("why"), t["reasons"])))
        out.print("history:")
        for e in t["history"]:
            rest = {k: v for k, v in e.items() if k not in ("t", "kind", "task", "tenant")}
            out.print(f"  {_when(e['t'])}  {e['kind']:10} " + escape(" ".join(f"{k}={v}" for k, v in rest.items())))

    @app.command()
    def delete(
        kind: str = typer.Argument(..., help="app, tenant, vc, fleet or agent"),
        name: str = typer.Argument(...),
        tenant: Optional[str] = ADMIN_TENANT,
        cascade: bool = typer.Option(False, "--cascade", help="tenant, vc: their applications go too (without "
                                     "it, one that has applications is refused)"),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Delete an application (its running tasks stop), a tenant (its virtual
        clusters go and its tokens are revoked), a virtual cluster, a Fleet
        document (its sites' nodes are removed) or an agent (its node is removed)."""
        paths = {"app": "applications", "apps": "applications", "application": "applications",
                 "tenant": "tenants", "vc": "vcs", "fleet": "fleets", "agent": "agents"}
        if kind not in paths:
            _fail(f"delete takes app, tenant, vc, fleet or agent, got {kind!r}")
        params = {**_tenant(tenant), **({"cascade": "true"} if cascade else {})}
        Client(server, token, ca).request("DELETE", f"/v1/{paths[kind]}/{name}", params=params)
        Console(highlight=False, soft_wrap=True).print(f"{paths[kind].rstrip('s').replace('applications', 'application')}"
                                                       f"/{name} deleted")

    @app.command()
    def audit(
        tenant: Optional[str] = typer.Option(None, "--tenant", help="Only the requests of this tenant's tokens."),
        output: Output = typer.Option(Output.table, "-o", "--output", help="table or json (one object per line)"),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Who changed what (admin): every request that asked for a change, oldest first."""
        rows = list(Client(server, token, ca).since("/v1/audit", {"tenant": tenant} if tenant else {}))
        if output is Output.json:
            for r in rows:
                sys.stdout.write(json.dumps(r, separators=(",", ":")) + "\n")
            return
        table = Table(box=None, pad_edge=False, header_style="bold")
        for head in ("AT", "TOKEN", "TENANT", "ACTION", "OBJECT", "STATUS", "REQUEST"):
            table.add_column(head)
        for r in rows:
            who = r["tenant"] or ("admin" if r["admin"] else "-")
            table.add_row(r["at"], r["token_id"] or "-", who, r["action"], r["object"], str(r["status"]),
                          r["request_id"])
        Console(highlight=False).print(table)

    @app.command()
    def events(
        follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing events as they come."),
        output: Output = typer.Option(Output.table, "-o", "--output", help="table or json (one object per line)"),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """The scheduler's events (your tenant's; all of them with an admin token)."""
        client = Client(server, token, ca)
        show = _event_printer(output)
        after = 0
        for e in client.since("/v1/events"):  # the recorded ones, a page at a time
            show(e["body"])
            after = e["id"]
        if not follow:
            return
        try:
            with client.http.stream("GET", "/v1/events/stream", params={"after": after}, timeout=None) as r:
                if r.status_code >= 400:
                    r.read()
                    client._problem(r, "")
                data = None
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        data = json.loads(line[6:])
                    elif line == "" and data is not None:
                        show(data)
                        data = None
        except client._httpx.TransportError as exc:
            _fail(f"the event stream from {client.server} ended: {exc}", 1)
        except KeyboardInterrupt:
            pass

    @app.command()
    def agent(
        site: str = typer.Option(..., "--site", help="The site this node is at; a population's site for a device."),
        name: Optional[str] = typer.Option(None, "--name", help="The node's name at its site (it is SITE/NAME); "
                                           "none for a population's device."),
        cpu: Optional[str] = typer.Option(None, "--cpu", help="Cores it offers: 8, 500m."),
        memory: Optional[str] = typer.Option(None, "--memory", help="Memory it offers: 16Gi."),
        arch: str = typer.Option("x86_64", "--arch", help="x86_64, aarch64, ... (as fleets name them)"),
        accelerator: List[str] = typer.Option([], "--accelerator", help="KIND:MODEL:COUNT[:shareable][:cdi=V/C], "
                                              "e.g. gpu:A100:8, npu:Orin:2:shareable (tasks may take a share of one "
                                              "device), gpu:A100:8:cdi=nvidia.com/gpu (containers get device i as "
                                              "nvidia.com/gpu=i); again for another kind."),
        label: List[str] = typer.Option([], "--label", help="KEY=VALUE (again for another)."),
        lease: str = typer.Option("10s", "--lease", help="The node is lost when no renewal comes for this long; "
                                  "renewed three times per lease."),
        runtime: str = typer.Option("none", "--runtime", help="What runs the node's tasks: process, podman "
                                    "(containers), or none (the node's lease is kept, and its work runs elsewhere: "
                                    "the server's own executor)."),
        work_dir: Path = typer.Option(Path("suanli-agent-work"), "--work-dir", help="--runtime process and podman: "
                                      "the tasks' folders and logs here."),
        max_pids: int = typer.Option(1024, "--max-pids", help="--runtime process and podman: processes (and "
                                     "threads) one task may have at once."),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Register this node (or a population's device) with the server, and keep
        its lease until stopped: stopped (SIGTERM, Ctrl-C), the node leaves the
        fleet; killed, it is lost when its lease runs out, and found again when
        the agent registers again. Needs an agent token whose scope covers the
        node (token create --role agent --sites ...)."""
        import signal
        import threading

        if runtime not in ("none", "process", "podman"):
            _fail_problems([Problem("--runtime", f"{runtime!r} is not a runtime: process, podman or none")])
        if not 1 <= max_pids <= 1 << 22:
            _fail_problems([Problem("--max-pids", f"must be from 1 to {1 << 22}, got {max_pids}")])
        if runtime == "podman":
            from suanli.executors.podman import podman_problem

            why = podman_problem()
            if why is not None:
                _fail_problems([Problem("--runtime", f"podman runs containers here, and {why}")])
        if runtime != "none":
            from suanli.executors import _reachable_by_tenants

            try:
                work_dir.mkdir(parents=True, exist_ok=True)
                _reachable_by_tenants(work_dir.resolve())
            except OSError as exc:
                _fail_problems([Problem("--work-dir", f"cannot make {work_dir}: {exc.strerror or exc}")])
            except SpecError as exc:
                _fail_problems(exc.problems)
        body: dict[str, Any] = {"site": site, "lease": lease}
        if name is not None or cpu is not None or memory is not None:
            if name is None or cpu is None or memory is None:
                _fail("a node registers with --name, --cpu and --memory (a device of a population with --site alone)")
            accels = [accelerator_spec(a) for a in accelerator]
            labels = {}
            for lb in label:
                key, eq, value = lb.partition("=")
                if not eq or not key:
                    _fail(f"--label {lb!r}: expected KEY=VALUE")
                labels[key] = value
            body.update(name=name, node={"cpu": cpu, "memory": memory, "arch": arch, "accelerators": accels,
                                         "labels": labels})
        client = Client(server, token, ca)
        got = client.request("POST", "/v1/agents", json=body, where="agent: ", patient=True).json()
        node, every = got["name"], max(0.2, got["lease_s"] / 3)
        err.print(f"agent {escape(node)} registered (was {got.get('was')}); lease {got['lease_s']:g}s", soft_wrap=True)
        if runtime != "none":
            from suanli.executors.agent import Agent

            def again() -> None:
                r = client.http.post("/v1/agents", json=body)
                if r.status_code >= 400:
                    raise RuntimeError(f"{r.status_code}: {r.text[:300]}")

            try:
                worker = Agent(client.http, node, got["lease_s"], runtime, work_dir, say=lambda m: err.print(
                    escape(m), soft_wrap=True), register=again, max_pids=max_pids)
            except (OSError, RuntimeError) as exc:
                client.request("DELETE", f"/v1/agents/{node}")
                _fail_problems([Problem("--work-dir" if isinstance(exc, OSError) else "--runtime", str(exc))])
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: worker.stop.set())
            err.print(f"agent {escape(node)} runs its tasks ({runtime}) in {work_dir}", soft_wrap=True)
            worker.run(every)
            err.print(f"agent {escape(node)} left", soft_wrap=True)
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(every):
            try:
                r = client.http.put(f"/v1/agents/{node}/lease")
            except client._httpx.TransportError as exc:  # the server is away: keep trying, the lease may hold
                err.print(f"agent {escape(node)}: cannot renew: {escape(str(exc))}", soft_wrap=True)
                continue
            if r.status_code in (404, 409):  # lost meanwhile (or forgotten): register again
                client.request("POST", "/v1/agents", json=body, where="agent: ", patient=True)
                err.print(f"agent {escape(node)} registered again", soft_wrap=True)
            elif r.status_code >= 400:
                err.print(f"agent {escape(node)}: renewal refused ({r.status_code}): {escape(r.text[:300])}",
                          soft_wrap=True)
        client.request("DELETE", f"/v1/agents/{node}")
        err.print(f"agent {escape(node)} left", soft_wrap=True)

    rollout_app = typer.Typer(no_args_is_help=True, help="Updates of a running application, rolled out in place.")
    app.add_typer(rollout_app, name="rollout")

    @rollout_app.command("status")
    def rollout_status(
        name: str = typer.Argument(..., help="The application."),
        watch: bool = typer.Option(False, "--watch", "-w", help="Follow it until it is done."),
        timeout: float = typer.Option(600.0, "--timeout", help="With --watch: give up after this many seconds "
                                      "(exit 1)."),
        tenant: Optional[str] = ADMIN_TENANT,
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """How far an application's last change has rolled out, per component."""
        import time

        client = Client(server, token, ca)
        out = Console(highlight=False, soft_wrap=True)
        deadline = time.monotonic() + timeout
        last = None
        while True:
            r = client.request("GET", f"/v1/applications/{name}/rollout", params=_tenant(tenant)).json()
            parts = ", ".join(f"{c}: {v['updated']} of {v['replicas']} updated, {v['ready']} ready"
                              for c, v in r["components"].items())
            line = (f"application/{name} revision {r['revision']}: "
                    + ("rolled out" if r["done"] else "rolling out") + (f" ({parts})" if parts else ""))
            if line != last:
                out.print(escape(line))
                last = line
            if r["done"] or not watch:
                return
            if time.monotonic() > deadline:
                _fail(f"application/{name}: not rolled out within {timeout:g}s", 1)
            time.sleep(0.5)

    @rollout_app.command("undo")
    def rollout_undo(
        name: str = typer.Argument(..., help="The application."),
        tenant: Optional[str] = ADMIN_TENANT,
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Go back to the application's document before its last change (rolled out as a new revision)."""
        client = Client(server, token, ca)
        r = client.request("POST", f"/v1/applications/{name}/rollout/undo", params=_tenant(tenant)).json()
        Console(highlight=False).print(f"application/{escape(name)} rolled back (revision {r['revision']})")

    @app.command()
    def scale(
        name: str = typer.Argument(..., help="The application."),
        replicas: int = typer.Option(..., "--replicas", min=0, help="How many replicas."),
        component: Optional[str] = typer.Option(None, "--component", help="Which component (default: the only "
                                                "one with replicas)."),
        tenant: Optional[str] = ADMIN_TENANT,
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Set a component's replicas: those added start, those past the count stop."""
        client = Client(server, token, ca)
        body = {"replicas": replicas, **({"component": component} if component else {})}
        r = client.request("POST", f"/v1/applications/{name}/scale", json=body, params=_tenant(tenant)).json()
        Console(highlight=False).print(f"application/{escape(name)} scaled (revision {r['revision']})")

    token_app = typer.Typer(no_args_is_help=True, help="Tokens for the control plane's API.")
    app.add_typer(token_app, name="token")

    @token_app.command("create")
    def token_create(
        tenant: Optional[str] = typer.Option(None, "--tenant", help="The tenant it speaks for; none: an admin token."),
        ttl: Optional[str] = typer.Option(None, "--ttl", help="How long it is valid: 30d, 12h, 90m (at most "
                                          "3650d); default: until revoked."),
        name: Optional[str] = typer.Option(None, "--name", help="A note: whom or what it is for."),
        role: Optional[str] = typer.Option(None, "--role", help="With --tenant: tenant-admin, member (default) or "
                                           "viewer; without: admin (default) or agent."),
        sites: List[str] = typer.Option([], "--sites", help="An agent token's (required): globs of the sites where "
                                        "it may register nodes, 'edge-*' (comma-separated, or again for more)."),
        names: List[str] = typer.Option([], "--names", help="An agent token's: globs of the node names it may "
                                        "register, 'gw-*' (default: any)."),
        max_nodes: Optional[int] = typer.Option(None, "--max-nodes", help="An agent token's: how many nodes it "
                                                "may have at once (default 1)."),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Mint a token (needs an admin token, or a tenant-admin's for its own
        tenant); it is printed once.

        The token goes to standard output, its id and expiry to standard error."""
        body = {"tenant": tenant, "ttl": ttl, "name": name, "role": role}
        for key, given in (("sites", sites), ("names", names)):
            if given:
                body[key] = [glob for g in given for glob in g.split(",") if glob]
        if max_nodes is not None:
            body["nodes"] = max_nodes
        body = Client(server, token, ca).request("POST", "/v1/tokens", json=body).json()
        sys.stdout.write(body["token"] + "\n")
        until = f"expires {body['expires_at']}" if body.get("expires_at") else "valid until revoked"
        who = body.get("tenant") or ("an admin" if body.get("role", "admin") == "admin" else "an agent")
        scope = body.get("scope")
        scoped = f"; sites {scope['sites']}, names {scope['names']}, at most {scope['nodes']} nodes" if scope else ""
        err.print(f"{body['id']} for {escape(who)}, {until}; role {body.get('role')}{escape(scoped)}", soft_wrap=True)

    @token_app.command("list")
    def token_list(
        output: Output = typer.Option(Output.table, "-o", "--output", help="table or json"),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """List every token and its state (needs an admin token).

        Each with its id, tenant, name, source, state and times; the tokens
        themselves are not kept, so they are never shown."""
        items = Client(server, token, ca).every("/v1/tokens")
        if output is Output.json:
            sys.stdout.write(json.dumps(items, separators=(",", ":")) + "\n")
            return
        _print_tokens(items)

    @token_app.command("revoke")
    def token_revoke(
        token_id: str = typer.Argument(..., metavar="ID", help="The token's id: tok_..., as token list shows it."),
        server: Optional[str] = SERVER,
        ca: Optional[Path] = CA,
        token: Optional[str] = TOKEN,
    ) -> None:
        """Revoke a token (needs an admin token): it answers 401 from now on."""
        from urllib.parse import quote

        Client(server, token, ca).request("DELETE", f"/v1/tokens/{quote(token_id, safe='')}")
        Console(highlight=False, soft_wrap=True).print(f"token/{escape(token_id)} revoked")


def _sqlite_path(db: str) -> str | None:
    from suanli.server.store import _sqlite_file

    return _sqlite_file(db)


def _end_orphans(orphans) -> set[int]:
    """Earlier servers' controllers that outlived their server: said, and ended; their pids."""
    from suanli.server.holders import end

    for p in orphans:
        err.print(f"warning: {escape(str(p))} is the controller of an earlier server of this store, which is gone; "
                  "ending it", soft_wrap=True)
        if not end(p.pid):
            _fail_problems([Problem("--db", f"{p} still runs on this store and cannot be ended; end it and start "
                                    "again")])
    return {p.pid for p in orphans}


def _tokens_at_start(store, db: str, secret_file: Path | None, supplied: str | None) -> None:
    """The server's secret, then the admin token: SUANLI_ADMIN_TOKEN (``supplied``)
    made the env one, the one it replaced revoked; or, without it, one made and
    shown once when no admin token is valid; then tenants' tokens bound to their
    tenant (``Store.bind_tokens``). What changed is said on standard error."""
    import time

    from suanli.server.store import KEYED, PLAIN, SecretError, TokenRefused, load_secret, token_state

    try:
        secret = load_secret(db, secret_file)
    except SecretError as exc:
        store.close()
        _fail_problems([Problem(exc.where, exc.message)])
    store.secret = secret.key
    if secret.created and any(r.scheme == KEYED and token_state(r, time.time()) == "active" for r in store.tokens()):
        err.print(f"warning: a new secret was made in {escape(secret.source)}, but tokens were made with another "
                  "one: they no longer match (restore the old secret, or mint new tokens)", soft_wrap=True)
    if supplied is None:
        made = store.ensure_admin(None)
        if made is not None:
            err.print(f"admin token (shown once): {made}", soft_wrap=True)
    else:
        try:
            revoked = store.adopt_env_admin(supplied)
        except TokenRefused as exc:
            store.close()
            _fail_problems([Problem("SUANLI_ADMIN_TOKEN", str(exc))])
        for row in revoked:
            err.print(f"SUANLI_ADMIN_TOKEN has a new value: the admin token it had before ({row.public_id}) is revoked"
                      if row.source == "env" else
                      f"SUANLI_ADMIN_TOKEN has a value this database did not hold: the admin token {row.public_id}, "
                      "from before token sources were recorded and perhaps the old value, is revoked", soft_wrap=True)
    old = [r.public_id for r in store.tokens()
           if r.tenant is None and r.scheme == PLAIN and token_state(r, time.time()) == "active"]
    if old:
        err.print(f"warning: admin tokens from before tokens were keyed are valid ({', '.join(old)}); one may be an "
                  "old SUANLI_ADMIN_TOKEN: revoke those not in use (suanli token revoke ID)", soft_wrap=True)
    bound, gone = store.bind_tokens()  # once: tokens from before they recorded their tenant's incarnation
    if bound or gone:
        err.print(f"{len(bound)} tenant token(s) bound to their tenant as it is now (a tenant deleted and made "
                  "again will not honour them)" + (f"; revoked, their tenant being gone: {', '.join(gone)}"
                                                   if gone else ""), soft_wrap=True)


def _print_tokens(items: list[dict]) -> None:
    """The token listing as a table (an admin token's tenant shown as '(admin)')."""
    columns = [("ID", "id"), ("TENANT", "tenant"), ("NAME", "name"), ("SOURCE", "source"), ("STATE", "state"),
               ("CREATED", "created_at"), ("EXPIRES", "expires_at"), ("REVOKED", "revoked_at"),
               ("MINTED BY", "minted_by"), ("SCOPE", "scope")]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for head, _ in columns:
        table.add_column(head)
    for item in items:
        scope = item.get("scope")
        item = {**item, "tenant": item.get("tenant") or ("(agent)" if item.get("role") == "agent" else "(admin)"),
                "scope": f"sites {','.join(scope['sites'])} names {','.join(scope['names'])} nodes {scope['nodes']}"
                if scope else ""}
        table.add_row(*(escape(_cell(item, key)) for _, key in columns))
    Console(highlight=False, width=200 if not sys.stdout.isatty() else None).print(table)


def _fail_problems(problems: list[Problem]) -> None:
    for p in problems:
        err.print(f"[red]error[/red]: {escape(str(p))}", soft_wrap=True)
    n = len(problems)
    err.print(f"{n} problem{'s' if n != 1 else ''} found; nothing was served.")
    raise typer.Exit(2)


def _tenant(tenant: str | None) -> dict[str, str]:
    return {"tenant": tenant} if tenant else {}


def _apply_one(client: "Client", out: Console, file: Path, i: int, doc: dict) -> None:
    """Document ``i`` of ``file`` applied, and what came of it printed; exits 2 when refused."""
    kind = doc["kind"]
    if kind != "Application":
        name = str((doc.get("metadata") or {}).get("name", ""))
        if not name:
            _fail(f"{file}: document {i}: metadata.name: required")
        r = client.request("PUT", f"/v1/{CONFIG_PATHS[kind]}/{name}", json=doc, where=f"{file}: document {i}: ")
        out.print(f"{kind.lower()}/{name} {'created' if r.status_code == 201 else 'configured'} "
                  f"(configuration version {r.json()['version']})")
        return
    name = (doc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        _fail(f"{file}: document {i}: metadata.name: required")
    r = client.request("PUT", f"/v1/applications/{name}", json=doc, where=f"{file}: document {i}: ")
    got = r.json()
    change = got.get("change") or ("created" if r.status_code == 201 else "unchanged")
    out.print(f"application/{got['name']} {change}" + (f" (revision {got['revision']}: rolling out)"
                                                       if change == "configured" else ""))


def accelerator_spec(text: str) -> dict[str, Any]:
    """``--accelerator KIND:MODEL:COUNT[:shareable][:cdi=VENDOR/CLASS]`` as a
    node group's accelerator entry; exits 2 saying what is expected."""
    parts = text.split(":")
    extra = {}
    for part in parts[3:]:
        if part == "shareable" and "shareable" not in extra:
            extra["shareable"] = True
        elif part.startswith("cdi=") and "cdi" not in extra:
            extra["cdi"] = part[4:]
        else:
            extra["bad"] = True
    if len(parts) < 3 or "bad" in extra or not parts[0] or not parts[1] or not parts[2].isdigit():
        _fail(f"--accelerator {text!r}: expected KIND:MODEL:COUNT[:shareable][:cdi=VENDOR/CLASS], e.g. gpu:A100:8, "
              "npu:Orin:2:shareable or gpu:A100:8:cdi=nvidia.com/gpu")
    return {"kind": parts[0], "model": parts[1], "count": int(parts[2]), **extra}


def natural_key(text: str) -> tuple:
    """A name's sort key with its numbers as numbers: solve/2 before solve/10,
    car-9 before car-10."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text))


def _cell(item: dict, key: str) -> str:
    if key.endswith("#"):
        return str(len(item.get(key[:-1]) or ()))
    value: Any = item
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _when(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _event_printer(output: Output):
    out = Console(highlight=False, soft_wrap=True)

    def show(e: dict) -> None:
        if output is Output.json:
            sys.stdout.write(json.dumps(e, separators=(",", ":")) + "\n")
            sys.stdout.flush()
            return
        rest = {k: v for k, v in e.items() if k not in ("t", "kind")}
        out.print(f"{_when(e['t'])}  {e['kind']:11} " + escape(" ".join(f"{k}={v}" for k, v in rest.items())))

    return show
