"""What the agent tests share: the gateway's policy over a file-ledger mock agency, the ledger's
expected states, the trip agents they play, and each client's tool call as the trip policy sees it."""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pytest
from mcp.types import CallToolResult

from aegis_nb.mock import DECLINED_TEST_CARD, Ledger
from aegis_nb.notebook.trip_agent import DEFAULT_CARD, Seen, TripAgent
from tests.test_gateway_policy_errors import SHIPPED

CARD: Final = DEFAULT_CARD

DECLINED_AGENT: Final = TripAgent(destination="Lisbon", nights=2, cards=(DECLINED_TEST_CARD,))
"""Books a flight and a hotel, is declined, rolls back."""

RETRYING_AGENT: Final = TripAgent(destination="Rome", nights=1, cards=(DECLINED_TEST_CARD, CARD))
"""Is declined, retries the charge with its second card inside the same saga, commits."""

INIT_TIMEOUT: Final = 60.0
"""Seconds a framework may wait for a server to start: the gateway starts its upstream first, and a
loaded machine starts Python slowly (fastmcp's default, 30 s, was not always enough)."""

EMPTY_AFTER_TWO_CANCELLATIONS: Final = {
    "flights": [],
    "hotels": [],
    "charges": [],
    "cancellations": 2,
    "refunds": 0,
    "balance_cents": 0,
}
"""The ledger after a flight and a hotel were booked and both undone: nothing stands, nothing is owed."""

DECLINED_ANSWER: Final = (
    "I booked nothing: the saga was rolled back "
    "(charge_card failed: Card Declined! — rolled back: reserve_hotel, book_flight)."
)
"""The declined agent's final answer: it quotes the rollback's own summary."""

DECLINED_STEPS: Final = [
    {"index": 0, "name": "book_flight", "state": "undone"},
    {"index": 1, "name": "reserve_hotel", "state": "undone"},
    {"index": 2, "name": "charge_card", "state": "failed", "detail": "ToolError: Card Declined!"},
]


def policy_file(directory: Path, ledger: Path) -> Path:
    """The shipped policy, its upstream the mock agency started by this Python with a file `ledger`
    (``aegis-nb`` may not be on PATH; the file lets the test read the ledger of a child's child)."""
    text = SHIPPED.read_text()
    shipped = 'command = "aegis-nb"\nargs = ["mock"]'
    assert shipped in text
    here = f'command = "{sys.executable}"\nargs = ["-m", "aegis_nb.cli", "mock", "--ledger", "{ledger}"]'
    path = directory / "policy.toml"
    path.write_text(text.replace(shipped, here))
    return path


class Served(enum.Enum):
    """What the agent talks to: the gateway in front of the mock agency (a stdio upstream of its own),
    or an `AegisMCP` app whose own tools are compensable (tests/servers/compensable_agency.py)."""

    GATEWAY = "gateway"
    AEGISMCP = "aegismcp"


LEDGER_VARIABLE: Final = "AEGIS_AGENT_LEDGER"
"""Where tests/servers/compensable_agency.py keeps its ledger."""


def serve_arguments(
    served: Served, directory: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The ``aegis-nb`` arguments that serve `served` with its ledger in the file `ledger` (the app
    finds it in `LEDGER_VARIABLE`, set here for the children this test starts)."""
    if served is Served.GATEWAY:
        return ["gateway", str(policy_file(directory, ledger))]
    monkeypatch.setenv(LEDGER_VARIABLE, str(ledger))
    return ["serve", "tests.servers.compensable_agency:app"]


def child_environment() -> dict[str, str]:
    """Ours, whole, for a stdio child (the SDK's default keeps only a few variables)."""
    return dict(os.environ)


def stdio_command(arguments: list[str]) -> tuple[str, list[str]]:
    """The command that serves ``aegis-nb ARGUMENTS`` over stdio, as a client spawns it (from the
    repository root, run with `ROOT` as its working directory, so `tests.servers` imports)."""
    return sys.executable, ["-m", "aegis_nb.cli", *arguments]


ROOT: Final = Path(__file__).resolve().parent.parent


def ledger_of(path: Path) -> dict[str, Any]:
    """What a file ledger holds now, as JSON (read from this process; the agency writes it from its own)."""
    ledger = Ledger(path)
    try:
        return dict(ledger.state().to_json())
    finally:
        ledger.close()


def committed_trip(flight: str, hotel: str, charge: str) -> dict[str, Any]:
    """The shape of a committed trip's ledger, its prices left to the agency: ids and statuses."""
    return {"flights": [(flight, "live")], "hotels": [(hotel, "live")], "charges": [(charge, "live")]}


def trip_in(ledger: Mapping[str, Any]) -> dict[str, Any]:
    """A ledger's bookings and charges as (id, status) pairs, to compare with `committed_trip`."""
    return {
        "flights": [(f["booking_id"], f["status"]) for f in ledger["flights"]],
        "hotels": [(h["booking_id"], h["status"]) for h in ledger["hotels"]],
        "charges": [(c["charge_id"], c["status"]) for c in ledger["charges"]],
    }


def seen_from_result(tool: str, result: CallToolResult) -> Seen:
    """An MCP SDK result (the official SDK's, or the OpenAI Agents SDK's, which returns the same type)
    as the trip policy reads it: the structured content if any, else the text."""
    content: Any = result.structured_content
    if content is None:
        content = "\n".join(getattr(block, "text", "") for block in result.content)
    return Seen(tool, not result.is_error, content)


def status_steps(seen: tuple[Seen, ...], tool: str) -> list[dict[str, Any]]:
    """The steps the last `tool` answer (saga_rollback, saga_commit) reports."""
    found = [s for s in seen if s.tool == tool]
    assert found, f"the agent never called {tool}"
    steps: list[dict[str, Any]] = found[-1].content["steps"]
    return steps


def moves(seen: tuple[Seen, ...]) -> list[tuple[str, bool]]:
    """The agent's calls in order, each with whether it succeeded."""
    return [(s.tool, s.ok) for s in seen]


DECLINED_MOVES: Final = [
    ("saga_begin", True),
    ("book_flight", True),
    ("reserve_hotel", True),
    ("charge_card", False),
    ("saga_rollback", True),
]

RETRIED_MOVES: Final = [
    ("saga_begin", True),
    ("book_flight", True),
    ("reserve_hotel", True),
    ("charge_card", False),
    ("charge_card", True),
    ("saga_commit", True),
]

RETRIED_STEPS: Final = [
    {"index": 0, "name": "book_flight", "state": "live"},
    {"index": 1, "name": "reserve_hotel", "state": "live"},
    {"index": 2, "name": "charge_card", "state": "failed", "detail": "ToolError: Card Declined!"},
    {"index": 3, "name": "charge_card#2", "state": "live"},  # the engine labels a repeated step
]
