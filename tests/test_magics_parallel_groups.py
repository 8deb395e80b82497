"""Parallel groups in the saga magics: ``A(...) & B(...)`` on one line of ``%%aegis_saga`` runs its steps
together, a variable bound to ``parallel(...)`` does too (with its compensation order), and a bad group
is refused naming its line before anything runs. ``%aegis_rehearse`` fails and times out each member
in turn while its siblings run, credits each booking to the member whose key it carries, marks a
sibling the engine cancelled, and says which rehearsals end clean.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("IPython")

from IPython.core.interactiveshell import InteractiveShell

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.notebook.rehearsal import Rehearsal
from aegis_nb.notebook.rehearsal_view import render_html
from aegis_nb.saga.events import StepEvent, StepStarted
from aegis_nb.saga.outcome import SagaRun
from tests.ipython_support import loaded_shell, ok, usage_error

SETUP = """
from aegis_nb import parallel
from aegis_nb.mock.travel import travel_steps, trip_context
BookFlight, ReserveHotel, ChargeCard = travel_steps(travel)
trip = trip_context("4242424242424242")
"""

TRIP = 'BookFlight(destination="Lisbon") & ReserveHotel(city="Lisbon", nights=3)\nChargeCard\n'

# Not in doubt, and slow to start: a failing sibling cancels it before it books, and a timeout after it
# booked leaves the seat booked.
FLIGHT = """%%aegis_step Flight
import anyio
async def execute(ctx):
    await anyio.sleep(0.01)
    key = ctx.idempotency_key
    booked = await travel.call_tool("book_flight", {"destination": "Lisbon", "idempotency_key": key})
    return ctx.with_metadata({"flight": booked})

async def compensate(ctx):
    await travel.call_tool("cancel_flight", {"booking_id": ctx.metadata["flight"]["booking_id"]})
"""

# In doubt, undoing by its key: safe whatever its siblings do.
HOTEL = """%%aegis_step Hotel --in-doubt
async def execute(ctx):
    key = ctx.idempotency_key
    booked = await travel.call_tool("reserve_hotel", {"city": "Lisbon", "nights": 2, "idempotency_key": key})
    return ctx.with_metadata({"hotel": booked})

async def compensate(ctx):
    await travel.call_tool("cancel_hotel", {"idempotency_key": ctx.idempotency_key})
"""


QUOTE = "%%aegis_step Quote\nasync def execute(ctx):\n    return None\nasync def compensate(ctx):\n    pass\n"


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell("%aegis_mock travel", SETUP, QUOTE) as ip:
        yield ip


def run_of(shell: InteractiveShell, name: str = "run") -> SagaRun:
    run = shell.user_ns[name]
    assert isinstance(run, SagaRun)
    return run


def test_steps_joined_by_an_ampersand_run_as_one_group(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(shell, f"%%aegis_saga --mock travel --context trip --name trip -o run\nQuote\n{TRIP}")
    run = run_of(shell)
    assert capsys.readouterr().out == "travel ledger: empty → 1 flight, 1 hotel, 1 charge (€555.00 held)\n"
    assert (run.status, run.report.steps) == (
        SagaStatus.COMMITTED,
        ("Quote", "BookFlight", "ReserveHotel", "ChargeCard"),
    )
    # Both members start on the same context, as members 0 and 1 of the group at position 1.
    starts = [
        (event.step, event.index, event.group) for event in run.events if isinstance(event, StepStarted)
    ]
    assert starts[0] == ("Quote", 0, None)
    assert sorted(starts[1:3]) == [("BookFlight", 1, 1), ("ReserveHotel", 2, 1)]
    assert starts[3:] == [("ChargeCard", 3, None)]
    assert run.context is not None
    assert {key: run.context.metadata[key]["booking_id"] for key in ("flight", "hotel")} == {
        "flight": "FL-0001",
        "hotel": "HT-0001",
    }


def test_fail_picks_a_member_and_the_group_is_undone_with_the_steps_before_it(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(
        shell,
        "%%aegis_saga --mock travel --context trip --name trip --fail ChargeCard=declined -o run\n" + TRIP,
    )
    report = run_of(shell).report
    assert (report.failed_step, report.status) == ("ChargeCard", SagaStatus.ROLLED_BACK)
    # ChargeCard is in doubt, so undone first; then the group's members, concurrently by default, so
    # in whichever order they finish.
    assert (report.compensated[0], sorted(report.compensated[1:])) == (
        "ChargeCard",
        ["BookFlight", "ReserveHotel"],
    )
    ledger, outcome = capsys.readouterr().out.splitlines()
    assert ledger == "travel ledger unchanged: empty"
    undone = ", ".join(report.compensated[1:])
    assert outcome == (
        f"declined — rolled back: {undone}; nothing to undo: ChargeCard · SagaRolledBack in aegis_last_error"
    )


def test_a_variable_bound_to_a_parallel_group_runs_as_one_with_its_compensation_order(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(
        shell,
        'both = parallel((BookFlight, (), {"destination": "Lisbon"}), '
        '(ReserveHotel, (), {"city": "Lisbon", "nights": 3}), compensation="reverse_start")',
    )
    ok(
        shell,
        "%%aegis_saga --mock travel --context trip --name trip --fail ChargeCard -o run\nboth\nChargeCard\n",
    )
    run = run_of(shell)
    groups = [(event.step, event.group) for event in run.events if isinstance(event, StepStarted)]
    assert sorted(groups) == [("BookFlight", 0), ("ChargeCard", None), ("ReserveHotel", 0)]
    # Newest start first: the hotel (started second) is undone before the flight.
    assert run.report.compensated == ("ChargeCard", "ReserveHotel", "BookFlight")
    assert capsys.readouterr().out == (
        "travel ledger unchanged: empty\n"
        "ChargeCard failed (injected by --fail) — rolled back: ReserveHotel, BookFlight; "
        "nothing to undo: ChargeCard · SagaRolledBack in aegis_last_error\n"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "BookFlight &\nChargeCard",
            "line 1 of the saga ('BookFlight &'): & joins steps that run together and needs a step on each "
            "side, e.g. BookFlight & ReserveHotel",
        ),
        (
            "ChargeCard\n& ReserveHotel",
            "line 2 of the saga ('& ReserveHotel'): & joins steps that run together and needs a step on "
            "each side, e.g. BookFlight & ReserveHotel",
        ),
        (
            "BookFlight & & ReserveHotel",
            "line 1 of the saga ('BookFlight & & ReserveHotel'): invalid syntax; write STEP or "
            "STEP(arg, key=value), or STEP & STEP for steps that run together",
        ),
        (
            "BookFlight & (ReserveHotel & ChargeCard)",
            "line 1 of the saga ('BookFlight & (ReserveHotel & ChargeCard)'): a group inside a group "
            "(ReserveHotel & ChargeCard); groups do not nest: write every member in one group, A & B & C",
        ),
        (
            '(BookFlight("Lisbon") & ReserveHotel) & ChargeCard',
            "line 1 of the saga ('(BookFlight(\"Lisbon\") & ReserveHotel) & ChargeCard'): a group inside a "
            "group (BookFlight('Lisbon') & ReserveHotel); groups do not nest: write every member in one "
            "group, A & B & C",
        ),
        (
            "ChargeCard\nboth & ChargeCard",
            "line 2 of the saga ('both & ChargeCard'): both is a parallel group, and groups do not nest: "
            "list its members in this group instead",
        ),
        (
            "both(1)",
            "line 1 of the saga ('both(1)'): both is a parallel group, which takes no arguments",
        ),
        (
            "ChargeCard & ChargeCard",
            "line 1 of the saga ('ChargeCard & ChargeCard'): parallel members 0 and 1 are the same step "
            "object; members run at once, each with its own key, so give each its own step",
        ),
        (
            "ChargeCard & budget",
            "budget is a int, not a step: a step has async execute(ctx, ...) and compensate(ctx, ...); "
            "define one with %%aegis_step",
        ),
    ],
)
def test_a_bad_group_is_refused_naming_its_line_and_nothing_runs(
    shell: InteractiveShell, body: str, message: str
) -> None:
    ok(shell, "both = parallel(BookFlight, ReserveHotel)\nbudget = 3")
    assert usage_error(shell, f"%%aegis_saga --mock travel --context trip -o run\n{body}\n") == message
    assert "run" not in shell.user_ns
    assert shell.user_ns["travel"].agency.state().is_empty


def test_the_line_form_points_a_group_to_the_cell_form(shell: InteractiveShell) -> None:
    assert usage_error(shell, "%aegis_saga BookFlight & ReserveHotel") == (
        "%aegis_saga: steps that run together (A & B) are written in the cell form: %%aegis_saga (with the "
        "options) on the first line, then one line per step or group, e.g. BookFlight & ReserveHotel"
    )


def rehearse(shell: InteractiveShell, line: str, body: str) -> Rehearsal:
    ok(shell, f"%%aegis_rehearse {line} -o rehearsal\n{body}")
    rehearsal = shell.user_ns["rehearsal"]
    assert isinstance(rehearsal, Rehearsal)
    return rehearsal


def test_a_rehearsal_fails_and_times_out_each_member_in_turn(shell: InteractiveShell) -> None:
    rehearsal = rehearse(shell, "--mock travel --context trip --name trip", TRIP)
    assert repr(rehearsal).splitlines() == [
        "rehearsal of trip: ✓ safe: in all 7 scenarios the ledger ends clean",
        "run together: BookFlight & ReserveHotel",
        "",
        "scenario                             BookFlight  ReserveHotel  ChargeCard  outcome      "
        "ledger after",
        "───────────────────────────────────  ──────────  ────────────  ──────────  ───────────  "
        "──────────────────────────────────────────",
        "all steps succeed                    ✓ done      ✓ done        ✓ done      committed    "
        "1 flight, 1 hotel, 1 charge (€555.00 held)",
        # A member failing before its sibling began: the sibling never starts. One failing or hanging
        # once its sibling is on its way still lets it act: both are in doubt, so both are undone.
        "BookFlight fails                     ↶ undone    · not run     · not run   rolled back  clean",
        "ReserveHotel fails                   ↶ undone    ↶ undone      · not run   rolled back  clean",
        "ChargeCard fails                     ↶ undone    ↶ undone      ↶ undone    rolled back  clean",
        "BookFlight times out after acting    ↶ undone    ↶ undone      · not run   rolled back  clean",
        "ReserveHotel times out after acting  ↶ undone    ↶ undone      · not run   rolled back  clean",
        "ChargeCard times out after acting    ↶ undone    ↶ undone      ↶ undone    rolled back  clean",
    ]
    assert "run together: BookFlight &amp; ReserveHotel" in render_html(rehearsal)
    assert "⊘ cancelled (a step of its group failed)" in render_html(rehearsal)


def test_a_rehearsal_credits_each_booking_to_its_member_and_marks_a_cancelled_sibling(
    shell: InteractiveShell,
) -> None:
    ok(shell, FLIGHT)
    ok(shell, HOTEL)
    rehearsal = rehearse(shell, "--mock travel --name pair", "Flight & Hotel\n")
    assert repr(rehearsal).splitlines() == [
        "rehearsal of pair: ✗ unsafe: 1 of 5 scenarios leave the world in a state nobody wanted",
        "run together: Flight & Hotel",
        "",
        "scenario                       Flight                 Hotel      outcome      ledger after",
        "─────────────────────────────  ─────────────────────  ─────────  ───────────  ──────────────────",
        "all steps succeed              ✓ done                 ✓ done     committed    1 flight, 1 hotel",
        # The flight failed before the hotel's task began: the hotel never started.
        "Flight fails                   ✗ failed               · not run  rolled back  clean",
        # The hotel failed at once, while the flight was still on its way: the engine cancelled it.
        "Hotel fails                    ⊘ cancelled            ↶ undone   rolled back  clean",
        # The flight booked, then hung: not in doubt, it is never undone; the hotel is.
        "Flight times out after acting  !! left live: FL-0001  ↶ undone   rolled back  LEFT LIVE: FL-0001",
        "Hotel times out after acting   ↶ undone               ↶ undone   rolled back  clean",
        "",
        "to fix:",
        "  - Flight times out after acting: Flight acted (FL-0001) but was never compensated — mark it "
        "--in-doubt and let its compensation undo by idempotency key.",
    ]
    hotel_fails = rehearsal.results[2].run
    assert [
        (type(event).__name__, event.step) for event in hotel_fails.events if isinstance(event, StepEvent)
    ] == [
        ("StepStarted", "Flight"),
        ("StepStarted", "Hotel"),
        ("StepFailed", "Hotel"),
        ("StepFailed", "Flight"),
        ("CompensationStarted", "Hotel"),
        ("CompensationSucceeded", "Hotel"),
    ]


def test_the_explorer_has_a_control_per_member_and_runs_the_group(shell: InteractiveShell) -> None:
    pytest.importorskip("ipywidgets")
    from aegis_nb.notebook.explorer import SagaExplorer

    cell = f"%%aegis_saga --interactive --mock travel --context trip --name trip --fail ReserveHotel\n{TRIP}"
    view: object = ok(shell, cell).result
    assert isinstance(view, SagaExplorer)
    assert [(name, toggle.value) for name, toggle in view.failing.items()] == [
        ("BookFlight", False),
        ("ReserveHotel", True),
        ("ChargeCard", False),
    ]
    view.run_button.click()
    (trial,) = view.trials
    report = trial.run.report
    assert (report.failed_step, sorted(report.compensated)) == (
        "ReserveHotel",
        ["BookFlight", "ReserveHotel"],
    )
    # Outside the magics, from a saga list with a group in it.
    ok(shell, "from aegis_nb.notebook.explorer import SagaExplorer")
    listed: object = ok(shell, "SagaExplorer.of([parallel(BookFlight, ReserveHotel), ChargeCard])").result
    assert isinstance(listed, SagaExplorer)
    assert list(listed.latency) == ["BookFlight", "ReserveHotel", "ChargeCard"]


# Keyless: its booking cannot be told from its sibling's by key.
KEYLESS = """%%aegis_step Keyless
async def execute(ctx):
    booked = await travel.call_tool("reserve_hotel", {"city": "Lisbon", "nights": 2})
    return ctx.with_metadata({"hotel": booked})

async def compensate(ctx):
    await travel.call_tool("cancel_hotel", {"booking_id": ctx.metadata["hotel"]["booking_id"]})
"""


def test_a_keyless_booking_made_while_members_ran_is_left_live_not_blamed_on_a_sibling(
    shell: InteractiveShell,
) -> None:
    ok(shell, FLIGHT)
    ok(shell, KEYLESS)
    rehearsal = rehearse(shell, "--mock travel --name pair", "Flight & Keyless\n")
    # The hotel booked while the flight was running too: the flight, whose own booking was undone, is
    # not said to have left it live; the booking is reported as nobody's.
    assert repr(rehearsal).splitlines()[-5:] == [
        "Keyless times out after acting  ↶ undone               ◷ timed out  rolled back  LEFT LIVE: HT-0001",
        "",
        "to fix:",
        "  - Flight times out after acting: Flight acted (FL-0001) but was never compensated — mark it "
        "--in-doubt and let its compensation undo by idempotency key.",
        "  - Keyless times out after acting: HT-0001 left live after the rollback.",
    ]
