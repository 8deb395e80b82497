"""Compensable tools on `AegisMCP`: with a saga handle a call is a step of that saga, undone on rollback.

Specified through a real MCP client (in process): the saga tools served beside compensable tools, an
undo tool whose arguments are bound by JSON Pointer or SEP-3172 expression, an undo function, an
undo whose binding does not resolve (orphaned: never called), the handle passed in ``_meta``, a plain
call without a handle, a tool error that leaves the saga open, refusals that say nothing, secrets
that never reach events, status or errors, and declarations refused when the tool is registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pytest
from mcp import Client
from mcp.types import CallToolResult, RequestParamsMeta, TextContent, ToolAnnotations

from aegis_nb.kernel.errors import SagaDefinitionError, ToolError
from aegis_nb.kernel.values import Secret
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.compensable import UndoTool
from aegis_nb.server.results import REFUSED_META_KEY
from aegis_nb.server.saga_handles import REFUSAL
from aegis_nb.testing import EventCapture

pytestmark = pytest.mark.anyio

CARD = "4242424242424242"


class Agency:
    """A ledger of bookings and the server whose compensable tools make and undo them."""

    def __init__(self, *, hotel_binding: str = "/result/reservation") -> None:
        self.ledger: dict[str, str] = {}
        self.undo_calls: list[tuple[str, dict[str, Any]]] = []
        self.events = EventCapture()
        engine = WorkflowEngine(compensation_retry=RetryPolicy.never(), sinks=[self.events])
        app = self.app = AegisMCP("agency", engine=engine)

        @app.tool()
        async def cancel_flight(booking_id: str, idempotency_key: str = "") -> dict[str, Any]:
            """Cancel a flight booking."""
            self.undo_calls.append(("cancel_flight", {"booking_id": booking_id, "key": idempotency_key}))
            return {"changed": self.ledger.pop(booking_id, None) is not None}

        @app.tool()
        async def cancel_hotel(reservation: str, guest: str) -> dict[str, Any]:
            """Cancel a hotel reservation."""
            self.undo_calls.append(("cancel_hotel", {"reservation": reservation, "guest": guest}))
            self.ledger.pop(reservation)
            return {}

        flight_undo = UndoTool.of("cancel_flight", {"booking_id": "/result/booking_id"})

        @app.tool(compensate=flight_undo, secret="card")
        async def book_flight(destination: str, card: str = "", idempotency_key: str = "") -> dict[str, Any]:
            """Book a flight."""
            if card == "0000000000000000":
                raise ToolError("book_flight", f"card {card} declined")
            booking = f"F-{destination}-{idempotency_key or 'plain'}"
            self.ledger[booking] = destination
            return {"booking_id": booking}

        hotel_undo = UndoTool.of(
            "cancel_hotel",
            {
                "reservation": f"$response.body#{hotel_binding.removeprefix('/result')}",
                "guest": "/arguments/guest",
            },
            key_argument=None,
        )

        @app.tool(compensate=hotel_undo)
        async def reserve_hotel(guest: str, nights: int) -> dict[str, Any]:
            """Reserve a hotel."""
            reservation = f"H-{guest}-{nights}"
            self.ledger[reservation] = guest
            return {"reservation": reservation}

        async def refund(arguments: Mapping[str, Any], result: Mapping[str, Any] | None, key: str) -> None:
            # A secret is used once, by the call: the undo sees where it was, never its value.
            self.undo_calls.append(("refund", {"card": arguments["card"], "result": result, "key": key}))
            assert result is not None
            del self.ledger[result["charge_id"]]

        @app.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def list_bookings() -> dict[str, Any]:
            """What the ledger holds."""
            return {"bookings": sorted(self.ledger)}

        @app.tool(compensate=refund, secret=["card"])
        async def charge_card(card: str, amount_cents: int, idempotency_key: str = "") -> dict[str, Any]:
            """Charge a card."""
            charge = f"C-{amount_cents}"
            self.ledger[charge] = card[-4:]
            return {"charge_id": charge}


async def call(
    client: Client, tool: str, meta: dict[str, Any] | None = None, **arguments: Any
) -> CallToolResult:
    return await client.call_tool(
        tool, arguments, meta=None if meta is None else cast(RequestParamsMeta, meta)
    )


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def status_of(result: CallToolResult) -> dict[str, Any]:
    """The structured status with the clock readings replaced by whether they were given."""
    assert result.structured_content is not None
    found = dict(result.structured_content)
    for field in ("idle_seconds_left", "deadline_seconds_left"):
        found[field] = None if found[field] is None else "given"
    return found


async def test_saga_tools_are_served_and_each_compensable_tool_takes_a_saga_handle() -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        listing = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(listing) == [
        "book_flight",
        "cancel_flight",
        "cancel_hotel",
        "charge_card",
        "list_bookings",
        "reserve_hotel",
        "saga_begin",
        "saga_commit",
        "saga_rollback",
        "saga_status",
    ]
    assert listing["reserve_hotel"].input_schema["properties"]["saga"] == {
        "default": "",
        "description": "A handle from saga_begin: the call becomes a step of that saga, undone on rollback.",
        "title": "Saga",
        "type": "string",
    }
    assert "saga" not in listing["cancel_flight"].input_schema["properties"]


async def test_a_rollback_undoes_each_step_newest_first_with_arguments_bound_from_the_call() -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin")
        assert begun.structured_content is not None
        handle, run_id = begun.structured_content["saga"], begun.structured_content["run_id"]
        flight = await call(client, "book_flight", destination="LIS", card=CARD, saga=handle)
        assert flight.structured_content == {"booking_id": f"F-LIS-{run_id}/0"}
        assert flight.meta is not None
        assert flight.meta["aegis-nb/step"] == {"index": 0, "idempotency_key": f"{run_id}/0"}
        await call(client, "reserve_hotel", guest="Ada", nights=3, saga=handle)
        await call(client, "charge_card", card=CARD, amount_cents=900, saga=handle)
        assert sorted(agency.ledger) == ["C-900", f"F-LIS-{run_id}/0", "H-Ada-3"]
        rolled_back = await call(client, "saga_rollback", saga=handle, reason="the agent changed its mind")
    assert agency.ledger == {}
    assert agency.undo_calls == [
        ("refund", {"card": Secret("***"), "result": {"charge_id": "C-900"}, "key": f"{run_id}/2"}),
        ("cancel_hotel", {"reservation": "H-Ada-3", "guest": "Ada"}),
        ("cancel_flight", {"booking_id": f"F-LIS-{run_id}/0", "key": f"{run_id}/0"}),
    ]
    assert not rolled_back.is_error
    assert status_of(rolled_back) == {
        "status": "rolled_back",
        "run_id": run_id,
        "name": "agent_saga",
        "steps": [
            {"index": 0, "name": "book_flight", "state": "undone"},
            {"index": 1, "name": "reserve_hotel", "state": "undone"},
            {"index": 2, "name": "charge_card", "state": "undone"},
        ],
        "ttl_seconds": 600.0,
        "idle_seconds_left": None,
        "deadline_seconds_left": None,
        "reason": "the agent changed its mind",
        "summary": "the agent changed its mind — rolled back: charge_card, reserve_hotel, book_flight",
    }
    assert agency.events.trail() == [
        ("SagaStarted",),
        ("StepStarted", "book_flight"),
        ("StepSucceeded", "book_flight"),
        ("StepStarted", "reserve_hotel"),
        ("StepSucceeded", "reserve_hotel"),
        ("StepStarted", "charge_card"),
        ("StepSucceeded", "charge_card"),
        ("CompensationStarted", "charge_card"),
        ("CompensationSucceeded", "charge_card"),
        ("CompensationStarted", "reserve_hotel"),
        ("CompensationSucceeded", "reserve_hotel"),
        ("CompensationStarted", "book_flight"),
        ("CompensationSucceeded", "book_flight"),
        ("SagaRolledBackEvent",),
    ]
    assert CARD not in repr(agency.events)


async def test_commit_keeps_the_steps_and_the_handle_then_answers_with_the_final_status() -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin", ttl_seconds=30)
        assert begun.structured_content is not None
        handle = begun.structured_content["saga"]
        assert begun.structured_content["ttl_seconds"] == 30.0
        await call(client, "reserve_hotel", guest="Ada", nights=2, saga=handle)
        committed = await call(client, "saga_commit", saga=handle)
        again = await call(client, "saga_rollback", saga=handle, reason="too late")
        late_step = await call(client, "reserve_hotel", guest="Bob", nights=1, saga=handle)
    assert agency.ledger == {"H-Ada-2": "Ada"}
    assert status_of(committed)["status"] == "committed"
    assert again.structured_content == committed.structured_content
    assert late_step.is_error
    assert late_step.meta is not None
    assert late_step.meta.get(REFUSED_META_KEY) is True
    assert text(late_step) == "the saga has ended: committed; nothing was done"


async def test_without_a_handle_a_compensable_tool_is_a_plain_tool() -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        plain = await call(client, "book_flight", destination="OPO")
    assert plain.structured_content == {"booking_id": "F-OPO-plain"}
    assert agency.ledger == {"F-OPO-plain": "OPO"}
    assert agency.events.trail() == []


async def test_the_handle_may_come_in_the_request_meta() -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin")
        assert begun.structured_content is not None
        handle = begun.structured_content["saga"]
        await call(client, "reserve_hotel", meta={"aegis-nb/saga": handle}, guest="Ada", nights=1)
        await call(client, "saga_rollback", saga=handle)
    assert agency.ledger == {}
    assert agency.undo_calls == [("cancel_hotel", {"reservation": "H-Ada-1", "guest": "Ada"})]


async def test_an_undo_binding_that_does_not_resolve_leaves_the_step_orphaned_and_the_undo_uncalled() -> None:
    agency = Agency(hotel_binding="/result/no_such_field")
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin")
        assert begun.structured_content is not None
        handle = begun.structured_content["saga"]
        await call(client, "book_flight", destination="LIS", saga=handle)
        await call(client, "reserve_hotel", guest="Ada", nights=3, saga=handle)
        ended = await call(client, "saga_rollback", saga=handle, reason="declined")
    assert agency.ledger == {"H-Ada-3": "Ada"}  # left standing, and said so
    assert [name for name, _ in agency.undo_calls] == ["cancel_flight"]
    assert status_of(ended)["status"] == "stuck"
    assert status_of(ended)["steps"] == [
        {"index": 0, "name": "book_flight", "state": "undone"},
        {
            "index": 1,
            "name": "reserve_hotel",
            "state": "orphaned",
            "detail": "orphaned: undo 'cancel_hotel' not called, unresolved: "
            "reservation ($response.body#/no_such_field)",
        },
    ]


async def test_a_tool_error_inside_a_saga_leaves_it_open_and_never_shows_the_secret() -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin")
        assert begun.structured_content is not None
        handle = begun.structured_content["saga"]
        await call(client, "reserve_hotel", guest="Ada", nights=3, saga=handle)
        declined = await call(client, "book_flight", destination="LIS", card="0000000000000000", saga=handle)
        status = await call(client, "saga_status", saga=handle)
        await call(client, "book_flight", destination="LIS", card=CARD, saga=handle)
        await call(client, "saga_commit", saga=handle)
    assert declined.is_error
    assert text(declined) == "card *** declined"
    assert declined.meta is not None
    assert declined.meta.get(REFUSED_META_KEY) is True
    assert status_of(status)["steps"] == [
        {"index": 0, "name": "reserve_hotel", "state": "live"},
        {"index": 1, "name": "book_flight", "state": "failed", "detail": "ToolError: card *** declined"},
    ]
    assert "0000000000000000" not in repr(agency.events)
    assert sorted(agency.ledger.values()) == ["Ada", "LIS"]


async def test_rollback_on_error_rolls_the_saga_back_at_the_first_failed_step() -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin", rollback_on_error=True)
        assert begun.structured_content is not None
        handle = begun.structured_content["saga"]
        await call(client, "reserve_hotel", guest="Ada", nights=3, saga=handle)
        await call(client, "book_flight", destination="LIS", card="0000000000000000", saga=handle)
        status = await call(client, "saga_status", saga=handle)
    assert agency.ledger == {}
    assert (status_of(status)["status"], status_of(status)["reason"]) == (
        "rolled_back",
        "a step failed and the saga rolls back on error",
    )


@pytest.mark.parametrize("tool", ["saga_status", "saga_commit", "saga_rollback", "reserve_hotel"])
async def test_a_forged_or_unknown_handle_is_refused_in_words_that_say_nothing(tool: str) -> None:
    agency = Agency()
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin")
        assert begun.structured_content is not None
        real = begun.structured_content["saga"]
        arguments: dict[str, Any] = {"guest": "Eve", "nights": 1} if tool == "reserve_hotel" else {}
        for forged in ("guess", real[:-2], real + "x"):
            refused = await call(client, tool, saga=forged, **arguments)
            assert (refused.is_error, text(refused), refused.structured_content) == (True, REFUSAL, None)
            assert refused.meta is not None
            assert refused.meta.get(REFUSED_META_KEY) is True
        status = await call(client, "saga_status", saga=real)
    assert agency.ledger == {}
    assert status_of(status)["status"] == "open"


def test_declarations_are_checked_when_the_tool_is_registered() -> None:
    app = AegisMCP("bad")

    async def undo(arguments: Mapping[str, Any], result: Mapping[str, Any] | None, key: str) -> None:
        return None

    with pytest.raises(
        SagaDefinitionError, match=r"^compensable tool 'sync' must be an `async def` function$"
    ):
        app.add_tool(lambda: None, "sync", compensate=undo)

    async def secretive(card: str) -> None:
        return None

    with pytest.raises(
        SagaDefinitionError, match=r"^tool 'secretive': secret names no parameter of it: pin$"
    ):
        app.add_tool(secretive, compensate=undo, secret="pin")
    with pytest.raises(
        SagaDefinitionError, match=r"^undo 'refund', argument 'id': '/response/id' must point into"
    ):
        UndoTool.of("refund", {"id": "/response/id"})

    async def takes_saga(saga: str) -> None:
        return None

    with pytest.raises(SagaDefinitionError, match=r"its parameter 'saga' is the saga handle's name$"):
        app.add_tool(takes_saga, compensate=undo)
    with pytest.raises(SagaDefinitionError, match=r"^compensate= takes an `async def undo"):
        app.add_tool(secretive, compensate=42)  # type: ignore[arg-type]


async def test_a_handle_on_a_tool_that_is_not_compensable_is_refused_and_a_read_only_tool_ignores_it() -> (
    None
):
    agency = Agency()
    async with Client(agency.app) as client:
        begun = await call(client, "saga_begin")
        assert begun.structured_content is not None
        handle = begun.structured_content["saga"]
        await call(client, "reserve_hotel", guest="Ada", nights=1, saga=handle)
        by_argument = await call(client, "cancel_hotel", reservation="H-Ada-1", guest="Ada", saga=handle)
        by_meta = await call(
            client, "cancel_hotel", meta={"aegis-nb/saga": handle}, reservation="H-Ada-1", guest="Ada"
        )
        listed = await call(client, "list_bookings", saga=handle)
        await call(client, "saga_commit", saga=handle)
    expected = (
        "cancel_hotel is not compensable: it cannot be a step of a saga, and nothing was done; "
        "call it without the saga handle to run it outside the saga"
    )
    for refused in (by_argument, by_meta):
        assert (refused.is_error, text(refused)) == (True, expected)
        assert refused.meta is not None
        assert refused.meta.get(REFUSED_META_KEY) is True
    assert (agency.undo_calls, agency.ledger) == ([], {"H-Ada-1": "Ada"})
    assert listed.structured_content == {"bookings": ["H-Ada-1"]}
