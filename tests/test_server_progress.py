"""A workflow call prepares progress notifications only when its client sent a progress token.

Without a token the call starts no progress task and does no per-event work (`progress_sender`
returns None). The in-process dispatcher hides the token inside its dispatch context, so these
tests pin the SDK internals `progress_sender` reads: should they change, a call would fall back to
the slower path that sends nothing, and this test says so.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from mcp import Client
from mcp.server.mcpserver import Context

from aegis_nb.server.app import AegisMCP
from aegis_nb.server.progress import progress_sender

pytestmark = pytest.mark.anyio


def probe_server() -> AegisMCP:
    app = AegisMCP("probe")

    @app.tool()
    async def wants_progress(request: Context[Any, Any]) -> dict[str, bool]:
        return {"wants_progress": progress_sender(request.request_context) is not None}

    return app


async def ignore(progress: float, total: float | None, message: str | None) -> None:
    return None


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # in-process direct dispatch, and JSON-RPC
async def test_progress_is_prepared_only_for_a_client_that_sent_a_progress_token(
    mode: Literal["auto", "legacy"],
) -> None:
    async with Client(probe_server(), mode=mode) as client:
        without = await client.call_tool("wants_progress", {})
        with_token = await client.call_tool("wants_progress", {}, progress_callback=ignore)
    assert (without.structured_content, with_token.structured_content) == (
        {"wants_progress": False},
        {"wants_progress": True},
    )
