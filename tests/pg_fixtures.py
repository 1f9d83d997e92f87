"""PostgreSQL for the tests, as a plugin (`pytest_plugins = ["tests.pg_fixtures"]`): the server
.ci/run started, or one of the tests' own. Without PostgreSQL binaries the tests that need it are
skipped - unless SPILLGUARD_REQUIRE_POSTGRES=1, when they fail."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pgserver import REQUIRE, Server, database, required, usable


@pytest.fixture(scope="session")
def postgres() -> Iterator[Server]:
    """The server .ci/run started, or one of the tests' own (skipped without the binaries)."""
    found = Server.find()
    if found is not None:
        yield found
        return
    yield from _fresh_server("no PostgreSQL server or binaries were found")


@pytest.fixture
def own_postgres() -> Iterator[Server]:
    """A server of this test's own, to stop and restart."""
    yield from _fresh_server("no PostgreSQL binaries were found")


def _fresh_server(missing: str) -> Iterator[Server]:
    """A new server in a temporary directory, removed afterwards; skipped without the binaries,
    or failed when they are required."""
    if not usable():
        if required():
            pytest.fail(f"{REQUIRE}=1, and {missing}")
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl)")
    server = Server.create()
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_url(postgres: Server) -> Iterator[str]:
    yield from database(postgres)
