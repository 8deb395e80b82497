"""The server's limits on agent sagas hold whatever a client asks.

A TTL or deadline longer than the server's is refused (not clamped), and so is one that is not a
finite number of seconds > 0; a server keeps at most ``saga_max_open`` sagas open, and one caller at
most ``saga_max_open_per_caller``. Each refusal is an ``is_error`` answer marked refused (nothing was
begun) saying which limit, through a real MCP client in memory; a saga ended frees its place.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from aegis_nb.server.app import AegisMCP
from aegis_nb.server.saga_handles import SagaHandles, SagaLimitReached
from tests.saga_handles_support import FakeClock, engine

pytestmark = pytest.mark.anyio

REFUSED = {"aegis-nb/refused": True}


def desk(**limits: Any) -> AegisMCP:
    """A server with one compensable tool (so it serves the saga tools), under `limits`."""
    app = AegisMCP("desk", **limits)

    async def undo(arguments: object, result: object, key: str) -> None:
        return None

    @app.tool(compensate=undo)
    async def book(what: str) -> str:
        """Book `what`."""
        return what

    return app


def answer(result: CallToolResult) -> tuple[bool, str, dict[str, Any] | None, dict[str, Any] | None]:
    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    meta = {k: v for k, v in (result.meta or {}).items() if k != "io.modelcontextprotocol/serverInfo"}
    return result.is_error, text, result.structured_content, meta or None


def refusal(text: str) -> tuple[bool, str, None, dict[str, Any]]:
    return True, f"no saga was begun: {text}", None, REFUSED


async def test_a_ttl_or_deadline_past_the_servers_or_not_a_positive_number_is_refused() -> None:
    async with Client(desk(saga_ttl=1, saga_timeout=60)) as client:
        asked: list[dict[str, Any]] = [
            {"ttl_seconds": 1e308},
            {"ttl_seconds": 1.5},
            {"deadline_seconds": 61},
            {"ttl_seconds": -1},
            {"deadline_seconds": 0},
        ]
        refused = [answer(await client.call_tool("saga_begin", arguments)) for arguments in asked]
        kept = await client.call_tool("saga_begin", {"ttl_seconds": 1, "deadline_seconds": 60})
        shorter = await client.call_tool("saga_begin", {"ttl_seconds": 0.5, "deadline_seconds": 30})
    assert refused == [
        refusal("ttl may be at most the server's 1 seconds, got 1e+308"),
        refusal("ttl may be at most the server's 1 seconds, got 1.5"),
        refusal("deadline may be at most the server's 60 seconds, got 61.0"),
        refusal("ttl must be a finite number of seconds > 0, got -1.0"),
        refusal("deadline must be a finite number of seconds > 0, got 0.0"),
    ]
    assert (kept.is_error, shorter.is_error) == (False, False)
    assert [(r.structured_content or {})["ttl_seconds"] for r in (kept, shorter)] == [1.0, 0.5]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -5, True, "600"])
async def test_the_registry_refuses_any_ttl_or_deadline_that_is_not_finite_seconds_above_zero(
    value: object,
) -> None:
    async with SagaHandles(engine(), ttl=600, timeout=None, clock=FakeClock()) as handles:
        with pytest.raises(ValueError, match=r"^ttl must be a finite number of seconds > 0, got "):
            await handles.begin(ttl=value)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^deadline must be a finite number of seconds > 0, got "):
            await handles.begin(deadline_after=value)  # type: ignore[arg-type]
        # With no deadline of its own, the server takes any finite one.
        assert (await handles.begin(deadline_after=1e9)).deadline_left == 1e9


async def test_one_caller_may_hold_only_so_many_sagas_open_and_an_ended_one_frees_its_place() -> None:
    async with Client(desk(saga_max_open_per_caller=2)) as client:
        first = await client.call_tool("saga_begin", {})
        second = await client.call_tool("saga_begin", {})
        third = await client.call_tool("saga_begin", {})
        ticket = first.structured_content or {}
        await client.call_tool("saga_commit", {"saga": ticket["saga"]})
        again = await client.call_tool("saga_begin", {})
    assert (first.is_error, second.is_error, again.is_error) == (False, False, False)
    assert answer(third) == refusal(
        "this client has 2 sagas open, as many as the server allows one client: commit or roll back one first"
    )


async def test_the_server_holds_only_so_many_sagas_open_in_all() -> None:
    async with Client(desk(saga_max_open=2)) as client:
        begun = [await client.call_tool("saga_begin", {}) for _ in range(3)]
    assert [r.is_error for r in begun[:2]] == [False, False]
    assert answer(begun[2]) == refusal(
        "the server has 2 sagas open, as many as it allows: commit or roll back one first, or try again later"
    )


async def test_a_full_caller_leaves_others_room_and_callers_with_no_identity_share_the_total() -> None:
    async with SagaHandles(engine(), clock=FakeClock(), max_open=5, max_open_per_caller=2) as handles:
        for _ in range(2):
            await handles.begin(owner="alice")
        with pytest.raises(SagaLimitReached, match=r"^this client has 2 sagas open"):
            await handles.begin(owner="alice")
        await handles.begin(owner="bob")
        await handles.begin()  # no identity: only the server's limit applies
        await handles.begin()
        with pytest.raises(SagaLimitReached, match=r"^the server has 5 sagas open"):
            await handles.begin(owner="carol")


@pytest.mark.parametrize("limits", [{"max_open": 0}, {"max_open_per_caller": -1}, {"max_open": 2.5}])
def test_limits_are_whole_numbers_of_at_least_one(limits: dict[str, Any]) -> None:
    ((name, value),) = limits.items()
    with pytest.raises(ValueError, match=rf"^{name} must be a whole number >= 1, got {value!r}$"):
        SagaHandles(engine(), **limits)
