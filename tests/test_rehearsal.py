"""Rehearsal: each way the saga can fail, one at a time, on fresh mock agencies; whole matrices checked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("IPython")

from IPython.core.interactiveshell import InteractiveShell

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.notebook.rehearsal import Mark, Rehearsal, ScenarioKind
from tests.ipython_support import loaded_shell

SETUP = """
from aegis_nb.mock import ToolFaults
from aegis_nb.mock.travel import travel_steps, trip_context
BookFlight, ReserveHotel, ChargeCard = travel_steps(travel)
trip = trip_context("4242424242424242")
"""

TRIP = """
BookFlight(destination="Lisbon")
ReserveHotel(city="Lisbon", nights=3)
ChargeCard
"""

# A flight step that is not in doubt: a timeout after booking leaves the seat booked.
FLIGHT = """%%aegis_step Flight
async def execute(ctx):
    key = ctx.idempotency_key
    booked = await travel.call_tool("book_flight", {"destination": "Lisbon", "idempotency_key": key})
    return ctx.with_metadata({"flight": booked})

async def compensate(ctx):
    await travel.call_tool("cancel_flight", {"booking_id": ctx.metadata["flight"]["booking_id"]})
"""

# A hotel step whose compensation "succeeds" without cancelling anything.
LAZY_HOTEL = """%%aegis_step LazyHotel --in-doubt
async def execute(ctx):
    reserved = await travel.call_tool(
        "reserve_hotel", {"city": "Lisbon", "nights": 2, "idempotency_key": ctx.idempotency_key}
    )
    return ctx.with_metadata({"hotel": reserved})

async def compensate(ctx):
    await travel.call_tool("list_bookings")
"""


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell("%aegis_mock travel", SETUP) as ip:
        yield ip


def rehearse(shell: InteractiveShell, line: str, body: str = "") -> Rehearsal:
    cell = f"%%aegis_rehearse {line} -o rehearsal\n{body}" if body else f"%aegis_rehearse {line} -o rehearsal"
    result = shell.run_cell(cell)
    assert result.success, result.error_in_exec
    rehearsal = shell.user_ns["rehearsal"]
    assert isinstance(rehearsal, Rehearsal)
    assert result.result is rehearsal
    # `is` against IPython's unannotated run_cell() result widens `rehearsal` back to Any.
    return rehearsal  # type: ignore[no-any-return]


def marks(rehearsal: Rehearsal) -> list[tuple[str, list[str], str]]:
    return [
        (row.scenario.label, [outcome.text for outcome in row.steps], row.status.value)
        for row in rehearsal.results
    ]


def test_the_in_doubt_travel_saga_is_safe_in_every_scenario(shell: InteractiveShell) -> None:
    rehearsal = rehearse(shell, "--mock travel --context trip --name trip", TRIP)
    assert rehearsal.safe
    assert [row.scenario.kind for row in rehearsal.results] == [ScenarioKind.CLEAN] + [
        ScenarioKind.FAILS
    ] * 3 + [ScenarioKind.TIMES_OUT] * 3
    assert marks(rehearsal) == [
        ("all steps succeed", ["done", "done", "done"], "committed"),
        ("BookFlight fails", ["undone", "not run", "not run"], "rolled_back"),
        ("ReserveHotel fails", ["undone", "undone", "not run"], "rolled_back"),
        ("ChargeCard fails", ["undone", "undone", "undone"], "rolled_back"),
        ("BookFlight times out after acting", ["undone", "not run", "not run"], "rolled_back"),
        ("ReserveHotel times out after acting", ["undone", "undone", "not run"], "rolled_back"),
        ("ChargeCard times out after acting", ["undone", "undone", "undone"], "rolled_back"),
    ]
    assert [row.leftovers for row in rehearsal.results] == [()] * 7
    assert repr(rehearsal) == (
        "rehearsal of trip: ✓ safe: in all 7 scenarios the ledger ends clean\n"
        "\n"
        "scenario                             BookFlight  ReserveHotel  ChargeCard  "
        "outcome      ledger after\n"
        "───────────────────────────────────  ──────────  ────────────  ──────────  ───────────  "
        "──────────────────────────────────────────\n"
        "all steps succeed                    ✓ done      ✓ done        ✓ done      committed    "
        "1 flight, 1 hotel, 1 charge (€555.00 held)\n"
        "BookFlight fails                     ↶ undone    · not run     · not run   rolled back  clean\n"
        "ReserveHotel fails                   ↶ undone    ↶ undone      · not run   rolled back  clean\n"
        "ChargeCard fails                     ↶ undone    ↶ undone      ↶ undone    rolled back  clean\n"
        "BookFlight times out after acting    ↶ undone    · not run     · not run   rolled back  clean\n"
        "ReserveHotel times out after acting  ↶ undone    ↶ undone      · not run   rolled back  clean\n"
        "ChargeCard times out after acting    ↶ undone    ↶ undone      ↶ undone    rolled back  clean\n"
    )
    # Each scenario started from a fresh ledger: the shell's own agency saw none of it.
    assert shell.user_ns["travel"].agency.state().is_empty


def test_a_lying_compensation_and_a_step_not_in_doubt_show_up_red(shell: InteractiveShell) -> None:
    assert shell.run_cell(FLIGHT).success
    assert shell.run_cell(LAZY_HOTEL).success
    rehearsal = rehearse(shell, "Flight LazyHotel --mock travel --name lazy")
    assert not rehearsal.safe
    assert marks(rehearsal) == [
        ("all steps succeed", ["done", "done"], "committed"),
        ("Flight fails", ["failed", "not run"], "rolled_back"),
        # LazyHotel is in doubt, so it is "undone" although its execute never ran: nothing to undo.
        ("LazyHotel fails", ["undone", "undone"], "rolled_back"),
        ("Flight times out after acting", ["left live: FL-0001", "not run"], "rolled_back"),
        ("LazyHotel times out after acting", ["undone", "undone, but still live: HT-0001"], "rolled_back"),
    ]
    assert [row.safe for row in rehearsal.results] == [True, True, True, False, False]
    assert [[o.mark.bad for o in row.steps] for row in rehearsal.results] == [
        [False, False],
        [False, False],
        [False, False],
        [True, False],
        [False, True],
    ]
    assert rehearsal.problems() == [
        "Flight times out after acting: Flight acted (FL-0001) but was never compensated — mark it "
        "--in-doubt and let its compensation undo by idempotency key.",
        "LazyHotel times out after acting: LazyHotel.compensate() returned, but HT-0001 is still live — "
        "the compensation does not undo what execute did.",
    ]
    assert repr(rehearsal) == (
        "rehearsal of lazy: ✗ unsafe: 2 of 5 scenarios leave the world in a state nobody wanted\n"
        "\n"
        "scenario                          Flight                 LazyHotel                           "
        "outcome      ledger after\n"
        "────────────────────────────────  ─────────────────────  ──────────────────────────────────  "
        "───────────  ──────────────────\n"
        "all steps succeed                 ✓ done                 ✓ done                              "
        "committed    1 flight, 1 hotel\n"
        "Flight fails                      ✗ failed               · not run                           "
        "rolled back  clean\n"
        "LazyHotel fails                   ↶ undone               ↶ undone                            "
        "rolled back  clean\n"
        "Flight times out after acting     !! left live: FL-0001  · not run                           "
        "rolled back  LEFT LIVE: FL-0001\n"
        "LazyHotel times out after acting  ↶ undone               ↶! undone, but still live: HT-0001  "
        "rolled back  LEFT LIVE: HT-0001\n"
        "\n"
        "to fix:\n"
        "  - " + rehearsal.problems()[0] + "\n"
        "  - " + rehearsal.problems()[1] + "\n"
    )
    html = rehearsal._repr_mimebundle_()["text/html"]
    assert "✗ unsafe: 2 of 5 scenarios" in html
    assert "#b91c1c" in html


def test_a_compensation_that_keeps_failing_leaves_the_saga_stuck(shell: InteractiveShell) -> None:
    setup = (
        "retry = RetryPolicy(2, 0.0)\n"
        "BookFlight, ReserveHotel, ChargeCard = travel_steps(travel, compensation_retry=retry)\n"
        "travel.agency.set_tool_faults('cancel_hotel', ToolFaults(fail_next=100))"
    )
    assert shell.run_cell(f"from aegis_nb import RetryPolicy\n{setup}").success
    rehearsal = rehearse(shell, "--mock travel --context trip", TRIP)
    stuck = [row for row in rehearsal.results if row.status is SagaStatus.STUCK]
    assert [row.scenario.label for row in stuck] == [
        "ReserveHotel fails",
        "ChargeCard fails",
        "ReserveHotel times out after acting",
        "ChargeCard times out after acting",
    ]
    fails = rehearsal.results[3]
    assert [(o.mark, o.attempts) for o in fails.steps] == [
        (Mark.UNDONE, 1),
        (Mark.UNDO_FAILED, 2),
        (Mark.UNDONE, 1),
    ]
    assert fails.leftovers == ("HT-0001",)


@pytest.mark.anyio
async def test_the_function_behind_the_magic_rehearses_a_plain_saga_list() -> None:
    from aegis_nb.mock.travel import travel_saga, trip_context
    from aegis_nb.notebook.mocktools import MockTools
    from aegis_nb.notebook.rehearsal import rehearse_saga

    tools = MockTools()
    rehearsal = await rehearse_saga(
        travel_saga(tools, "Lisbon", 2), tools=tools, context=trip_context("4242424242424242"), name="trip"
    )
    assert rehearsal.safe
    assert (rehearsal.saga, rehearsal.steps, rehearsal.with_ledger) == (
        "trip",
        ("BookFlight", "ReserveHotel", "ChargeCard"),
        True,
    )
    assert [row.status.value for row in rehearsal.results] == ["committed"] + ["rolled_back"] * 6
    assert tools.agency.state().is_empty  # every scenario ran on an agency of its own
