"""The MCP Inspector CLI (a third-party Node client) lists an AegisMCP server's tools and calls a workflow."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.clients import BIN, CLIENTS, client_env, installed
from tests.conftest import require

pytestmark = pytest.mark.slow

SERVER = [sys.executable, "-m", "aegis_nb.cli", "serve", "aegis_nb.mock.travel:travel_agent"]


def inspector(*args: str) -> tuple[int, Any, str]:
    """Run ``mcp-inspector --cli`` against the travel agent over stdio: (exit code, JSON output, stderr)."""
    require(installed("mcp-inspector"), "the MCP Inspector (make clients)")
    done = subprocess.run(
        [str(BIN / "mcp-inspector"), "--cli", *SERVER, *args],
        cwd=CLIENTS,
        env=client_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def test_the_inspector_lists_the_tools() -> None:
    code, listing, _ = inspector("--method", "tools/list")
    assert code == 0
    assert [tool["name"] for tool in listing["tools"]] == ["book_trip", "list_bookings"]
    (book_trip,) = [tool for tool in listing["tools"] if tool["name"] == "book_trip"]
    assert book_trip["inputSchema"]["required"] == ["destination", "nights", "card_number"]
    assert book_trip["outputSchema"]["required"] == ["status", "run_id", "metadata", "steps", "duration_ms"]


def call(card: str) -> tuple[int, Any, str]:
    return inspector(
        "--method",
        "tools/call",
        "--tool-name",
        "book_trip",
        "--tool-arg",
        "destination=Lisbon",
        "nights=3",
        # Quoted JSON: the Inspector would otherwise send the digits as a number.
        f'card_number="{card}"',
    )


def test_the_inspector_calls_a_workflow_that_commits() -> None:
    code, result, _ = call("4242424242424242")
    assert code == 0
    assert result["isError"] is False
    content = result["structuredContent"]
    assert (content["status"], "summary" in content, "report" in content) == ("committed", False, False)
    assert [step["name"] for step in content["steps"]] == ["BookFlight", "ReserveHotel", "ChargeCard"]
    assert content["metadata"]["card"] == "***"
    assert content["metadata"]["charge"]["card_last4"] == "4242"
    assert "4242424242424242" not in json.dumps(result)


def test_the_inspector_sees_a_rollback_as_a_tool_error() -> None:
    code, result, stderr = call("4000000000000002")
    # Inspector 2.x exits 5 when the tool returns isError.
    assert code == 5
    assert json.loads(stderr.strip().splitlines()[-1]) == {
        "error": {"code": "tool_is_error", "message": "Tool 'book_trip' returned isError:true."}
    }
    summary = "Card Declined! — rolled back: ReserveHotel, BookFlight"
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": summary}]
    content = result["structuredContent"]
    report = content["report"]
    assert (content["status"], content["summary"], report["left_standing"]) == ("rolled_back", summary, [])
    assert report["cause"] == {"type": "ToolError", "message": "Card Declined!"}
    assert [s["name"] for s in report["compensated"]] == ["ReserveHotel", "BookFlight"]
