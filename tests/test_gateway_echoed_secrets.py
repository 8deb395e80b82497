"""A secret argument an upstream echoes back, in an error or in a result, is scrubbed from everything the
gateway keeps or says: the call's answer, ``saga_status``, every event, the journal file, ``aegis-nb
runs``, the spans and the logs. So is a secret of an earlier call of the saga that the upstream quotes
later (in another call's error, or in an undo's)."""

from __future__ import annotations

import json
import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from aegis_nb.cli import main
from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.trace import describe
from aegis_nb.tracing import SagaTracer
from tests.tracing_support import Spans, spans_json

pytestmark = pytest.mark.anyio

CARD = "4111111111111111"
OTHER_CARD = "5500005555555559"

POLICY = """\
[upstreams.payments]
command = "unused-in-process"

[tools.charge]
kind = "compensable"
undo = "refund"
undo_args = { charge_id = "/result/charge_id" }
secret = ["card_number"]
"""


def hostile_payments() -> MCPServer[Any]:
    """An upstream that repeats every card it was sent: in its results, its errors and its undo's.

    Its errors are answered, not raised, so that the SDK serving it logs nothing of its own: the
    logs the test reads are the gateway's.
    """
    server: MCPServer[Any] = MCPServer("payments")
    seen: list[str] = []

    def error(message: str) -> CallToolResult:
        return CallToolResult(
            is_error=True,
            content=[TextContent(type="text", text=message)],
            structured_content={"message": message, "cards": [int(card) for card in seen]},
        )

    @server.tool()
    async def charge(amount_cents: int, card_number: str) -> Any:
        """Charge a card; a zero amount is declined."""
        seen.append(card_number)
        if amount_cents == 0:
            return error(f"card {card_number} declined (cards on file: {', '.join(seen)})")
        charged = {
            "charge_id": f"CH-{len(seen)}",
            "note": f"charged {amount_cents} to {card_number}",
            "card": {"number": int(card_number), card_number: "as a key too"},
        }
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(charged))], structured_content=charged
        )

    @server.tool()
    async def refund(charge_id: str) -> Any:
        """Refund a charge (this one never can)."""
        return error(f"cannot refund {charge_id}: card {seen[0]} is closed")

    return server


def journal_bytes(folder: Path) -> bytes:
    """The journal's raw bytes: its file and any -wal or -shm beside it."""
    return b"".join(path.read_bytes() for path in sorted(folder.iterdir()) if path.name.startswith("j.db"))


def text(result: CallToolResult) -> str:
    return result.model_dump_json()


async def test_a_card_an_upstream_echoes_reaches_no_answer_status_event_journal_run_span_or_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="aegis_nb")
    spans = Spans()
    events: list[SagaEvent] = []
    engine = WorkflowEngine(
        compensation_retry=RetryPolicy(attempts=2, initial_delay=0.0), sinks=[events.append]
    )
    gateway = Gateway(
        parse_policy(POLICY, "payments.toml"),
        upstreams={"payments": hostile_payments()},
        engine=engine,
        journal=tmp_path / "j.db",
        tracing=SagaTracer(spans.provider),
    )
    async with Client(gateway) as client:
        ticket = (await client.call_tool("saga_begin", {})).structured_content
        assert ticket is not None
        saga = ticket["saga"]
        charged = await client.call_tool("charge", {"amount_cents": 500, "card_number": CARD, "saga": saga})
        declined = await client.call_tool(
            "charge", {"amount_cents": 0, "card_number": OTHER_CARD, "saga": saga}
        )
        status = await client.call_tool("saga_status", {"saga": saga})
        rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "declined"})
    run_id = ticket["run_id"]
    assert main(["runs", "--journal", str(tmp_path / "j.db"), "--run", run_id]) == 0
    assert main(["runs", "--journal", str(tmp_path / "j.db")]) == 0
    printed = capsys.readouterr()

    # What happened is still told, in words without the cards.
    assert charged.is_error is False
    assert charged.structured_content == {
        "charge_id": "CH-1",
        "note": "charged 500 to ***",
        "card": {"number": "***", "***": "as a key too"},
    }
    assert (declined.is_error, declined.content[0].text) == (  # type: ignore[union-attr]
        True,
        "card *** declined (cards on file: ***, ***)",
    )
    assert declined.structured_content == {
        "message": "card *** declined (cards on file: ***, ***)",
        "cards": ["***", "***"],
    }
    assert status.structured_content is not None
    assert status.structured_content["steps"] == [
        {"index": 0, "name": "charge", "state": "live"},
        {
            "index": 1,
            "name": "charge#2",
            "state": "failed",
            "detail": "ToolError: card *** declined (cards on file: ***, ***)",
        },
    ]
    assert rolled.structured_content is not None
    assert [(s["name"], s["state"]) for s in rolled.structured_content["steps"]] == [
        ("charge", "stuck"),
        ("charge#2", "orphaned"),
    ]
    assert "cannot refund CH-1: card *** is closed" in rolled.structured_content["steps"][0]["detail"]

    journal = journal_bytes(tmp_path)
    seen = {
        "answers": "".join(map(text, (charged, declined, status, rolled))),
        "events": "".join(
            [repr(e) + describe(e) + "".join(repr(getattr(e, f.name)) for f in fields(e)) for e in events]
        ),
        "runs": printed.out + printed.err,
        "spans": spans_json(spans.finished()),
        "logs": caplog.text + "".join(repr(record.args) for record in caplog.records),
    }
    assert run_id in seen["runs"]
    assert "CH-1" in seen["spans"] + seen["events"]
    for card in (CARD, OTHER_CARD):
        assert {where: card in found for where, found in seen.items()} == dict.fromkeys(seen, False)
        assert card.encode() not in journal
