"""`aegis-nb gateway --transport http` serves the agency's tools and the saga tools at /mcp, behind the
same checks as `aegis-nb serve` (a foreign Origin gets 403, a missing bearer token 401), and an agent's
saga through it rolls back to an empty ledger."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client

from aegis_nb.mock import DECLINED_TEST_CARD
from tests.servers.launch import http_server
from tests.test_gateway_policy_errors import SHIPPED

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def policy_file(tmp_path: Path) -> Path:
    """The shipped policy, its upstream started by this Python (``aegis-nb`` may not be on PATH)."""
    text = SHIPPED.read_text().replace(
        'command = "aegis-nb"\nargs = ["mock"]',
        f'command = "{sys.executable}"\nargs = ["-m", "aegis_nb.cli", "mock"]',
    )
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_agent_saga_over_http_rolls_back_and_the_serving_checks_hold(tmp_path: Path) -> None:
    async with http_server("gateway", str(policy_file(tmp_path))) as server:
        async with Client(server.url) as agent:
            begun = await agent.call_tool("saga_begin", {})
            saga = (begun.structured_content or {})["saga"]
            await agent.call_tool("book_flight", {"destination": "Nice", "saga": saga})
            await agent.call_tool("reserve_hotel", {"city": "Nice", "nights": 1, "saga": saga})
            declined = await agent.call_tool(
                "charge_card", {"amount_cents": 100, "card_number": DECLINED_TEST_CARD, "saga": saga}
            )
            rolled = await agent.call_tool("saga_rollback", {"saga": saga, "reason": "declined"})
            bookings = await agent.call_tool("list_bookings", {})
        async with httpx2.AsyncClient() as http:
            evil = await http.post(
                server.url, json=INITIALIZE, headers={**HEADERS, "origin": "http://evil.example"}
            )
    assert declined.is_error is True
    assert [(s["name"], s["state"]) for s in (rolled.structured_content or {})["steps"]] == [
        ("book_flight", "undone"),
        ("reserve_hotel", "undone"),
        ("charge_card", "failed"),
    ]
    ledger = bookings.structured_content or {}
    assert (ledger["flights"], ledger["hotels"], ledger["cancellations"]) == ([], [], 2)
    assert (evil.status_code, evil.text) == (403, "Invalid Origin header")


@pytest.mark.slow
@pytest.mark.anyio
async def test_with_a_token_the_gateway_answers_401_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AEGIS_NB_TOKEN", "gateway-token-123")
    async with http_server("gateway", str(policy_file(tmp_path))) as server, httpx2.AsyncClient() as http:
        bare = await http.post(server.url, json=INITIALIZE, headers=HEADERS)
        good = await http.post(
            server.url, json=INITIALIZE, headers={**HEADERS, "authorization": "Bearer gateway-token-123"}
        )
    assert (bare.status_code, bare.headers["www-authenticate"], good.status_code) == (401, "Bearer", 200)
