"""The REST API of ``suanli serve`` against its own OpenAPI document.

Every operation the document lists is called with data generated from it
(valid requests and invalid ones), each request once with a tenant's token
and once with an admin's. Each answer must not be a server error, must have
a status code the document declares for the operation, the content type
declared for it, and a body valid against the declared schema; a method the
path does not have must answer 405 with the path's methods in ``Allow``.

Generated names rarely name anything, so as often a node, tenant, virtual
cluster, site, application or task that exists is asked for instead, and as
often the body submitted is a valid application: answers with objects are
checked too, not only 404s and 422s.

The API runs in process on the city fleet and its tenants, with one SQLite
database for the module. Each operation gets a new API over that database,
its lifespan (and so the controller running the scheduler) started by the
operation's first request and ended with its test.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from conftest import EXAMPLES

from suanli.server.api import create_api
from suanli.server.controller import Controller
from suanli.server.store import Store, sqlite_url
from suanli.spec.build import load_world

WORLD = load_world([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"])
TENANT = "acme-ai"


def application(name: str, **metadata) -> dict:
    component = {"name": "c", "lifetime": "service", "replicas": 2,
                 "resources": {"cpu": 1, "memory": "1Gi"}}
    return {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name, **metadata},
            "spec": {"components": [component]}}


# An application of the tenant, there when each operation starts (a DELETE may take it).
WEB = application("web")

# Values that exist, by parameter (path, query or body field) name; ``name`` by collection.
KNOWN = {
    "node": [WORLD.fleet.node_name(n) for n in range(WORLD.fleet.n_nodes)],
    "site": [s.name for s in WORLD.fleet.sites],
    "tenant": list(WORLD.tenants),
    "app": ["web"],
    "task": ["web/c/0", "web/c/1"],
    "tenants": list(WORLD.tenants),
    "vcs": list(WORLD.vcs),
    "applications": ["web", "batch"],
}


def serve(store: Store):
    return create_api(WORLD, store, Controller(WORLD, store, speed=100.0))


def document() -> dict:
    """The OpenAPI document, which depends on neither the database nor the scheduler's state."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(sqlite_url(Path(tmp) / "document.db"))
        try:
            return serve(store).openapi()
        finally:
            store.close()


class Current:
    """The ASGI application of the running test: a new API for each operation (see ``tokens``),
    because schemathesis ends an application's lifespan when a test ends and a controller
    does not start twice."""

    api = None

    async def __call__(self, scope, receive, send):
        await self.api(scope, receive, send)


# The default checks, with two deliberate changes:
# - Schema-violating requests need not be rejected (the check is off): the API ignores query
#   parameters it does not know, as HTTP APIs do, and the generator's "unknown query parameter"
#   is such a violation. Such requests are still sent, and their answers checked as any other.
# - A schema-valid request may answer 422: the document gives shapes (an Application's ``spec`` is
#   an object), and the API answers 422 with field paths for what is valid in shape but not in
#   meaning: an unknown tenant, an invalid application, an admin not naming the tenant.
# Every request carries a valid token (given in the test), so none is generated.
CONFIG = schemathesis.Config.from_dict({
    "checks": {"negative_data_rejection": {"enabled": False},
               "positive_data_acceptance": {"expected-statuses": ["2xx", "3xx", "401", "403", "404",
                                                                 "409", "422", "429", "5xx"]}},
    "generation": {"with-security-parameters": False},
})
CURRENT = Current()
schema = schemathesis.openapi.from_dict(document(), config=CONFIG)
schema.app = CURRENT
schema = schema.exclude(
    # An endless server-sent event stream: a call would never end.
    # tests/test_server_api.py reads it.
    method="GET", path="/v1/events/stream",
)


def known(strategy, path: str):
    """Each value of a parameter with KNOWN values as generated, or as often one that exists."""
    def values(name: str) -> list[str] | None:
        return KNOWN.get(path.split("/")[2] if name == "name" else name)

    def mix(generated):
        if not isinstance(generated, dict):
            return st.just(generated)
        return st.fixed_dictionaries({k: st.one_of(st.sampled_from(values(k)), st.just(v)) if values(k)
                                      else st.just(v) for k, v in generated.items()})
    return strategy.flatmap(mix)


@schema.hook("before_generate_path_parameters")
def _path(context, strategy):
    return known(strategy, context.operation.path)


@schema.hook("before_generate_query")
def _query(context, strategy):
    return known(strategy, context.operation.path)


@schema.hook("before_generate_body")
def _body(context, strategy):
    if context.operation.path == "/v1/applications":  # an admin names the tenant
        return st.one_of(st.sampled_from([application("batch"), application("batch", tenant=TENANT)]),
                         strategy)
    return known(strategy, context.operation.path)


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    store = Store(sqlite_url(tmp_path_factory.mktemp("schema") / "suanli.db"))
    tokens = {"admin": store.ensure_admin(None), "tenant": store.mint(TENANT)}
    yield store, {who: {"Authorization": f"Bearer {token}"} for who, token in tokens.items()}
    store.close()


@pytest.fixture
def tokens(database):
    """A new API over the module's database, with WEB in it, and the tokens to call it."""
    store, tokens = database
    if store.app(TENANT, "web") is None:
        with TestClient(serve(store)) as client:
            r = client.post("/v1/applications", json=WEB, headers=tokens["tenant"])
            assert r.status_code == 201, r.text
    CURRENT.api = serve(store)
    yield tokens
    CURRENT.api = None


@schema.parametrize()
# The API is meant to be shared by the examples of an operation: it is the server they all call.
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_operation_conforms_to_the_document(case, tokens):
    for headers in tokens.values():
        case.call_and_validate(headers=headers)
