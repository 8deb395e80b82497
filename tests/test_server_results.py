"""What a workflow call reports: the run it ended with, and no part of any secret."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaRolledBack
from aegis_nb.kernel.values import Secret
from aegis_nb.server.app import AegisMCP

pytestmark = pytest.mark.anyio


class Book:
    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({self.name: "booked"})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Fail:
    def __init__(self, name: str, message: str) -> None:
        self.name, self.message = name, message

    async def execute(self, ctx: AegisContext) -> None:
        raise ValueError(self.message)

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def steps_of(content: dict[str, Any]) -> list[tuple[int, str]]:
    return [(step["index"], step["name"]) for step in content["steps"]]


async def test_a_committed_result_describes_the_run_the_workflow_ended_with() -> None:
    app = AegisMCP("travel")
    runs: dict[str, str | None] = {}

    @app.workflow()
    async def book(ctx: AegisContext, upgrade: bool) -> Any:
        basic = await app.workflow_engine.execute_saga([Book("BookFlight"), Book("ReserveHotel")], ctx)
        runs["basic"] = basic.run_id
        if not upgrade:
            return None  # the last committed run's context stands
        try:
            return await app.workflow_engine.execute_saga([Book("UpgradeSeat"), Fail("Pay", "no")], basic)
        except SagaRolledBack as rolled_back:
            runs["upgrade"] = rolled_back.report.run_id
            return basic  # keep the basic trip: the upgrade was undone

    async with Client(app) as client:
        for upgrade in (True, False):
            result = await client.call_tool("book", {"upgrade": upgrade})
            content = result.structured_content
            assert content is not None
            assert (content["status"], content["run_id"], content["metadata"], steps_of(content)) == (
                "committed",
                runs["basic"],
                {"BookFlight": "booked", "ReserveHotel": "booked"},
                [(0, "BookFlight"), (1, "ReserveHotel")],
            )
    assert runs["upgrade"] not in (None, runs["basic"])


async def test_a_result_that_ends_with_a_fresh_context_reports_no_run_when_none_committed() -> None:
    app = AegisMCP("travel")

    @app.workflow()
    async def attempt(ctx: AegisContext) -> Any:
        try:
            await app.workflow_engine.execute_saga([Book("BookFlight"), Fail("Pay", "no")], ctx)
        except SagaRolledBack:
            return AegisContext({"outcome": "gave up"})

    async with Client(app) as client:
        result = await client.call_tool("attempt", {})
    content = result.structured_content
    assert content is not None
    assert (content["status"], content["run_id"], content["metadata"], content["steps"]) == (
        "committed",
        None,
        {"outcome": "gave up"},
        [],
    )


async def test_a_secret_inside_another_secret_is_hidden_whole() -> None:
    password = "hunter2"
    dsn = f"postgresql://booking_app:{password}@db-primary.internal:5432/bookings"
    app = AegisMCP("ledger")

    @app.workflow()
    async def connect(ctx: AegisContext) -> Any:
        ctx = ctx.with_metadata({"password": Secret(password), "dsn": Secret(dsn)})
        return await app.workflow_engine.execute_saga(
            [Book("OpenLedger"), Fail("Connect", f"could not connect to {dsn}")], ctx
        )

    async with Client(app) as client:
        result = await client.call_tool("connect", {})
    assert result.is_error is True
    assert result.content[0].text == "could not connect to *** — rolled back: OpenLedger"  # type: ignore[union-attr]
    assert "db-primary" not in str(result)
