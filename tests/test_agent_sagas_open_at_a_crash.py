"""An agent saga open when the server dies is rolled back when it starts again, and recorded so.

The server journals each agent saga as any run; the process dies (a `CrashingJournal`) while a saga is
open, its agent's later calls gone. Started again on the same journal, the server rolls the saga back
before serving, through its compensable tools' undos (found by name: each tool registers its step),
and the journal lists the run as rolled back. A secret argument was never written; the undo sees it
as ``***``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.kernel.values import Secret
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.saga.durable.runs import read_run
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.journal import Journal
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.compensable import UndoTool
from aegis_nb.testing import Crash, CrashingJournal, outline

pytestmark = pytest.mark.anyio

CARD = "4242424242424242"


def agency(journal: Journal, ledger: dict[str, str], undone: list[tuple[str, Any]]) -> AegisMCP:
    """The agency's server; a `CrashingJournal` goes to the engine alone (nothing to recover yet)."""
    if isinstance(journal, CrashingJournal):
        app = AegisMCP("agency", engine=WorkflowEngine(journal=journal))
    else:
        app = AegisMCP("agency", journal=journal)

    @app.tool()
    async def cancel_flight(booking_id: str) -> dict[str, Any]:
        undone.append(("cancel_flight", booking_id))
        del ledger[booking_id]
        return {}

    @app.tool(
        compensate=UndoTool.of("cancel_flight", {"booking_id": "/result/booking_id"}, key_argument=None)
    )
    async def book_flight(destination: str, idempotency_key: str = "") -> dict[str, Any]:
        ledger[f"F-{idempotency_key}"] = destination
        return {"booking_id": f"F-{idempotency_key}"}

    async def refund(arguments: Mapping[str, Any], result: Mapping[str, Any] | None, key: str) -> None:
        undone.append(("refund", (arguments["card"], result, key)))
        del ledger[key]

    @app.tool(compensate=refund, secret="card")
    async def charge_card(card: str, amount_cents: int, idempotency_key: str = "") -> dict[str, Any]:
        ledger[idempotency_key] = f"charged {amount_cents} to {card[-4:]}"
        return {"charged": amount_cents}

    return app


async def book_then_die(app: AegisMCP, ledger: dict[str, str]) -> None:
    """An agent's saga: a flight and a charge stand when the server dies, as the third call starts."""
    async with Client(app) as client:
        begun = await client.call_tool("saga_begin", {})
        assert begun.structured_content is not None
        handle = begun.structured_content["saga"]
        await client.call_tool("book_flight", {"destination": "LIS", "saga": handle})
        await client.call_tool("charge_card", {"card": CARD, "amount_cents": 900, "saga": handle})
        await client.call_tool("book_flight", {"destination": "OPO", "saga": handle})


def crashed(group: BaseException) -> bool:
    """Whether `group` is, or holds, the simulated process death."""
    if isinstance(group, Crash):
        return True
    return isinstance(group, BaseExceptionGroup) and any(crashed(e) for e in group.exceptions)


async def test_an_agent_saga_open_at_a_crash_is_rolled_back_on_start_up(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    ledger: dict[str, str] = {}
    undone: list[tuple[str, Any]] = []
    # Events: SagaStarted 0, StepStarted 1, StepSucceeded 2, StepStarted 3, StepSucceeded 4; the
    # process dies as the third call starts, the first two standing.
    dying = agency(CrashingJournal(SqliteJournal(path), crash_at=5), ledger, undone)
    with pytest.raises(BaseException) as death:  # noqa: PT011  # the death comes through task groups
        await book_then_die(dying, ledger)
    assert crashed(death.value)
    (run_id,) = {key.removeprefix("F-").split("/")[0] for key in ledger}
    assert ledger == {f"F-{run_id}/0": "LIS", f"{run_id}/1": "charged 900 to 4242"}

    restarted = agency(SqliteJournal(path), ledger, undone)
    async with Client(restarted) as client:
        await client.list_tools()  # served only once recovery is over
    assert ledger == {}
    assert undone == [
        ("refund", (Secret("***"), {"charged": 900}, f"{run_id}/1")),
        ("cancel_flight", f"F-{run_id}/0"),
    ]
    run = read_run(path, run_id)
    assert run.status is SagaStatus.ROLLED_BACK
    assert [outline(e) for e in run.events] == [
        ("SagaStarted",),
        ("StepStarted", "book_flight"),
        ("StepSucceeded", "book_flight"),
        ("StepStarted", "charge_card"),
        ("StepSucceeded", "charge_card"),
        ("CompensationStarted", "charge_card"),
        ("CompensationSucceeded", "charge_card"),
        ("CompensationStarted", "book_flight"),
        ("CompensationSucceeded", "book_flight"),
        ("SagaRolledBackEvent",),
    ]
    assert CARD not in path.read_bytes().decode("utf-8", "replace")
