"""A saga handle answers only the caller that began its saga: another client holding it is refused.

Over real streamable HTTP (protocol sessions, 2025-11-25), on `AegisMCP`'s compensable tools and on
the gateway: client B with client A's handle gets the one refusal an unknown handle gets, for a step,
the status, a commit and a rollback, and A's saga is untouched (still open, its step live, then
committed by A). In process, each connection is a caller of its own; the SDK auth's principal, when
there is one, is the caller whatever the session. (Protocol 2026-07-28 over HTTP has no sessions:
there, without the SDK's auth, the handle alone is the key; see aegis_nb.server.callers.)
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.types import CallToolResult, TextContent

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.mock import TravelAgency
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.callers import Callers
from aegis_nb.server.saga_handles import REFUSAL
from tests.servers.launch import http_server
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio

REFUSED = {"aegis-nb/refused": True}


def answer(result: CallToolResult) -> tuple[bool, str, dict[str, Any] | None]:
    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    meta = {k: v for k, v in (result.meta or {}).items() if k != "io.modelcontextprotocol/serverInfo"}
    return result.is_error, text, meta or None


def policy_file(tmp_path: Path) -> Path:
    """The shipped policy, its upstream started by this Python (``aegis-nb`` may not be on PATH)."""
    text = SHIPPED.read_text().replace(
        'command = "aegis-nb"\nargs = ["mock"]',
        f'command = "{sys.executable}"\nargs = ["-m", "aegis_nb.cli", "mock"]',
    )
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


async def begin_and_book(alice: Client) -> str:
    ticket = (await alice.call_tool("saga_begin", {})).structured_content or {}
    booked = await alice.call_tool("book_flight", {"destination": "Nice", "saga": ticket["saga"]})
    assert not booked.is_error, booked.content
    handle: str = ticket["saga"]
    return handle


async def tried_by(bob: Client, handle: str) -> list[tuple[bool, str, dict[str, Any] | None]]:
    """Bob, holding Alice's handle, asks for a step, the status, a commit and a rollback."""
    return [
        answer(await bob.call_tool("book_flight", {"destination": "Rome", "saga": handle})),
        answer(await bob.call_tool("saga_status", {"saga": handle})),
        answer(await bob.call_tool("saga_commit", {"saga": handle})),
        answer(await bob.call_tool("saga_rollback", {"saga": handle, "reason": "mine now"})),
    ]


async def untouched(alice: Client, handle: str) -> tuple[list[tuple[str, str]], str, str]:
    """What Alice sees of her saga after Bob's tries, and how her commit ends it."""
    status = (await alice.call_tool("saga_status", {"saga": handle})).structured_content or {}
    committed = (await alice.call_tool("saga_commit", {"saga": handle})).structured_content or {}
    return [(s["name"], s["state"]) for s in status["steps"]], status["status"], committed["status"]


@asynccontextmanager
async def two_sessions(url: str) -> AsyncIterator[tuple[Client, Client]]:
    """Two clients of one server, each in its own protocol session."""
    async with Client(url, mode="legacy") as alice, Client(url, mode="legacy") as bob:
        yield alice, bob


@pytest.mark.slow
async def test_over_http_another_session_with_the_handle_is_refused_by_compensable_tools() -> None:
    async with (
        http_server("serve", "tests.servers.compensable_agency:app") as server,
        two_sessions(server.url) as (alice, bob),
    ):
        handle = await begin_and_book(alice)
        tries = await tried_by(bob, handle)
        async with Client(server.url) as sessionless:  # 2026-07-28: no session, no identity
            status = answer(await sessionless.call_tool("saga_status", {"saga": handle}))
        kept = await untouched(alice, handle)
    assert tries == [(True, REFUSAL, REFUSED)] * 4
    assert status == (True, REFUSAL, REFUSED)
    assert kept == ([("book_flight", "live")], "open", "committed")


@pytest.mark.slow
async def test_over_http_another_session_with_the_handle_is_refused_by_the_gateway(tmp_path: Path) -> None:
    async with (
        http_server("gateway", str(policy_file(tmp_path))) as server,
        two_sessions(server.url) as (alice, bob),
    ):
        handle = await begin_and_book(alice)
        tries = await tried_by(bob, handle)
        kept = await untouched(alice, handle)
    assert tries == [
        (True, f"book_flight was not called: {REFUSAL}", REFUSED),
        (True, REFUSAL, REFUSED),
        (True, REFUSAL, REFUSED),
        (True, REFUSAL, REFUSED),
    ]
    assert kept == ([("book_flight", "live")], "open", "committed")


async def test_in_process_each_connection_is_a_caller_of_its_own() -> None:
    agency = TravelAgency()
    gateway = Gateway(parse_policy(SHIPPED.read_text(), "policy.toml"), upstreams={"agency": agency.server})
    async with gateway, Client(gateway) as alice, Client(gateway) as bob:
        handle = await begin_and_book(alice)
        tries = await tried_by(bob, handle)
        kept = await untouched(alice, handle)
    assert tries == [
        (True, f"book_flight was not called: {REFUSAL}", REFUSED),
        (True, REFUSAL, REFUSED),
        (True, REFUSAL, REFUSED),
        (True, REFUSAL, REFUSED),
    ]
    assert kept == ([("book_flight", "live")], "open", "committed")
    flights: list[dict[str, Any]] = agency.state().to_json()["flights"]  # type: ignore[assignment]
    assert [flight["place"] for flight in flights] == ["Nice"]


def test_the_sdk_auths_principal_is_the_caller_whatever_else_is_known() -> None:
    callers = Callers()
    assert callers.of(None) is None  # in process, outside any request: no one
    token = AccessToken(token="t", client_id="agent-7", scopes=[], subject="ada")
    bound = auth_context_var.set(AuthenticatedUser(token))
    try:
        assert callers.of(None) == 'principal:["agent-7", null, "ada"]'
    finally:
        auth_context_var.reset(bound)


def desk(ledger: dict[str, str]) -> AegisMCP:
    """An `AegisMCP` app whose one booking tool is compensable, on `ledger`."""
    app = AegisMCP("desk")

    async def cancel(arguments: object, result: object, key: str) -> None:
        del ledger[key]

    @app.tool(compensate=cancel)
    async def book_flight(destination: str, idempotency_key: str = "") -> str:
        """Book a flight."""
        ledger[idempotency_key] = destination
        return destination

    return app


async def test_two_in_process_clients_of_one_server_each_reach_their_own_sagas_only() -> None:
    ledger: dict[str, str] = {}
    app = desk(ledger)
    async with Client(app) as alice:
        handle = await begin_and_book(alice)
        async with Client(app) as bob:
            tries = await tried_by(bob, handle)
            theirs = await begin_and_book(bob)
            mine = answer(await alice.call_tool("saga_status", {"saga": handle}))
        kept = await untouched(alice, handle)  # after Bob left, whose sagas rolled back with him
        gone = answer(await alice.call_tool("saga_status", {"saga": theirs}))
    assert tries == [(True, REFUSAL, REFUSED)] * 4
    assert mine[0] is False
    assert kept == ([("book_flight", "live")], "open", "committed")
    assert gone == (True, REFUSAL, REFUSED)
    assert sorted(ledger.values()) == ["Nice"]
