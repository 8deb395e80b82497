"""The aegis magics driven through IPython's `InteractiveShell`, as a notebook drives them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("IPython")

from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from aegis_nb.diagram import fold
from aegis_nb.notebook import static_bundle
from aegis_nb.notebook.background import BackgroundRun
from aegis_nb.notebook.blocking import HOOK, blocking_transformer
from aegis_nb.notebook.cellsurface import WIDGET_MIME
from aegis_nb.notebook.magics import AegisMagics
from aegis_nb.saga.functional import FunctionStep
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.testing import EventCapture, outline
from tests.ipython_support import loaded_shell, ok, usage_error
from tests.test_magics_repeated_steps import agency_shell

__all__ = ["agency_shell"]  # the fixture, imported so pytest finds it here

BOOK_FLIGHT = """%%aegis_step BookFlight
import json
async def execute(ctx, destination="Lisbon"):
    print(f"Booking flight to {destination}...")
    return ctx.with_metadata({"flight_id": json.dumps(destination)})

async def compensate(ctx, destination="Lisbon"):
    print(f"Canceling flight {ctx.metadata['flight_id']}...")
"""

CHARGE_CARD = """%%aegis_step ChargeCard
async def execute(ctx):
    print(f"Charging card for {ctx.metadata['flight_id']}...")
    return ctx.with_metadata({"charge_id": "CH-1"})

async def compensate(ctx):
    print("Refunding...")
"""


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell() as ip:
        yield ip


def displays(shell: InteractiveShell) -> list[dict[str, Any]]:
    publisher = shell.display_pub
    assert isinstance(publisher, CapturingDisplayPublisher)
    return list(publisher.outputs)


def without_timings(text: str) -> str:
    """`text` with its durations made TIME (they vary from run to run), its lines kept."""
    text = re.sub(r" +\+\d+(\.\d+)? (ms|s)\b", " +TIME", text)
    return re.sub(r"\b\d+(\.\d+)? (ms|s)\b", "TIME", text)


def magics(shell: InteractiveShell) -> AegisMagics:
    instance = shell.magics_manager.registry["AegisMagics"]
    assert isinstance(instance, AegisMagics)
    return instance


# -- %%aegis_step --------------------------------------------------------------------------------


def test_a_step_cell_registers_the_step_and_binds_it_to_its_name(shell: InteractiveShell) -> None:
    ok(shell, "previous_execute = 'kept'\nexecute = previous_execute")
    ok(shell, BOOK_FLIGHT)
    step = shell.user_ns["BookFlight"]
    assert isinstance(step, FunctionStep)
    assert magics(shell).steps == {"BookFlight": step}
    assert (step.name, step.timeout, step.in_doubt, step.compensation_retry) == (
        "BookFlight",
        None,
        False,
        None,
    )
    # The cell's import stays visible to its functions; its execute/compensate do not leak.
    assert "json" in shell.user_ns
    assert shell.user_ns["execute"] == "kept"
    assert "compensate" not in shell.user_ns


def test_step_options_reach_the_step(shell: InteractiveShell) -> None:
    ok(
        shell,
        BOOK_FLIGHT.replace("BookFlight", "BookFlight --timeout 2.5 --retries 4 --retry-delay 0 --in-doubt"),
    )
    step = shell.user_ns["BookFlight"]
    assert (step.timeout, step.in_doubt) == (2.5, True)
    assert (step.compensation_retry.attempts, step.compensation_retry.initial_delay) == (5, 0.0)


def test_a_read_only_step_needs_no_compensation(shell: InteractiveShell) -> None:
    ok(shell, "%%aegis_step SearchFlights --read-only\nasync def execute(ctx):\n    return None\n")
    assert shell.user_ns["SearchFlights"].is_complete


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (
            "%%aegis_step Broken\nasync def execute(ctx)\n    pass\n",
            "step Broken: syntax error on line 1 of the cell: expected ':'\n"
            "    async def execute(ctx)\n                          ^",
        ),
        (
            "%%aegis_step Empty\nasync def compensate(ctx):\n    pass\n",
            "step Empty: the cell defines no execute; write `async def execute(ctx, ...):` returning a new "
            "context (ctx.with_metadata({...})) or None",
        ),
        (
            "%%aegis_step Sync\ndef execute(ctx):\n    pass\nasync def compensate(ctx):\n    pass\n",
            "step Sync: execute must be `async def execute(ctx, ...)`, not `def` (a sync function cannot "
            "be cancelled at its deadline)",
        ),
        (
            "%%aegis_step SyncUndo\nasync def execute(ctx):\n    pass\ndef compensate(ctx):\n    pass\n",
            "step SyncUndo: compensate must be `async def compensate(ctx, ...)`, not `def` (a sync function "
            "cannot be cancelled at its deadline)",
        ),
        (
            "%%aegis_step NoUndo\nasync def execute(ctx):\n    pass\n",
            "step NoUndo: the cell defines no compensate; write `async def compensate(ctx, ...):` to undo "
            "what execute did, or pass --read-only if the step changes nothing",
        ),
        (
            "%%aegis_step Typo\nimport no_such_module_here\nasync def execute(ctx):\n    pass\n"
            "async def compensate(ctx):\n    pass\n",
            "step Typo was not defined: the cell raised ModuleNotFoundError: No module named "
            "'no_such_module_here' (line 1: 'import no_such_module_here')",
        ),
        (
            "%%aegis_step 2fast\nasync def execute(ctx):\n    pass\n",
            "%%aegis_step NAME: '2fast' is not a valid Python name (letters, digits and _, not a keyword)",
        ),
        (
            "%%aegis_step Slow --timeout soon\nasync def execute(ctx):\n    pass\n",
            "%%aegis_step: --timeout takes a positive number of seconds, e.g. 2.5; got 'soon'",
        ),
    ],
)
def test_a_bad_step_cell_gets_one_clear_line(shell: InteractiveShell, cell: str, message: str) -> None:
    assert usage_error(shell, cell) == message
    assert magics(shell).steps == {}


# -- %aegis_saga: blocking -----------------------------------------------------------------------


def test_the_line_form_is_rewritten_into_an_await_so_the_cell_blocks() -> None:
    lines = ["x = 1\n", "%aegis_saga A B --deadline 2 -o run\n", "print(run)\n"]
    assert blocking_transformer(lines) == [
        "x = 1\n",
        "await get_ipython().magics_manager.registry['AegisMagics'].run_async("
        "'aegis_saga', ' A B --deadline 2 -o run', None)\n",
        "print(run)\n",
    ]
    cell = ["%%aegis_saga --name trip\n", "A('x')\n", "B\n"]
    assert blocking_transformer(cell) == [
        "await get_ipython().magics_manager.registry['AegisMagics'].run_async("
        "'aegis_saga', ' --name trip', \"A('x')\\nB\\n\")\n"
    ]
    untouched = ["def f():\n", "    %aegis_saga A\n", "%aegis_saga?\n", "%aegis_sagas A\n"]
    assert blocking_transformer(untouched) == untouched


def test_a_saga_runs_to_the_end_before_the_next_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, CHARGE_CARD)
    ok(shell, "%aegis_saga BookFlight ChargeCard --name trip -o run\nprint('after:', run.status.value)")
    run = shell.user_ns["run"]
    assert isinstance(run, SagaRun)
    assert run.ok
    assert run.context is not None
    assert run.context.to_json() == {"flight_id": '"Lisbon"', "charge_id": "CH-1"}
    out, err = capsys.readouterr()
    assert out == 'Booking flight to Lisbon...\nCharging card for "Lisbon"...\nafter: committed\n'
    assert err == ""


def test_a_rollback_shows_one_line_and_the_diagram_not_a_traceback(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, CHARGE_CARD)
    capsys.readouterr()
    result = ok(
        shell, '%aegis_saga BookFlight ChargeCard --fail ChargeCard="Card Declined!" --name trip -o run'
    )
    assert result.result is None
    out, err = capsys.readouterr()
    assert err == ""  # a rollback the notebook asked for is not a crash: no stderr, no traceback
    assert out == (
        'Booking flight to Lisbon...\nCanceling flight "Lisbon"...\n'  # the failed charge never ran
        "Card Declined! — rolled back: BookFlight · SagaRolledBack in aegis_last_error\n"
    )
    assert shell.user_ns["aegis_last_error"] is shell.user_ns["run"].error
    run = shell.user_ns["run"]
    assert [outline(event) for event in run.events] == [
        ("SagaStarted",),
        ("StepStarted", "BookFlight"),
        ("StepSucceeded", "BookFlight"),
        ("StepStarted", "ChargeCard"),
        ("StepFailed", "ChargeCard"),
        ("CompensationStarted", "BookFlight"),
        ("CompensationSucceeded", "BookFlight"),
        ("SagaRolledBackEvent",),
    ]
    # The live widget (blank as text) and its fallback (blank: the run was over before the first
    # redraw), both blanked at the end, then the static diagram.
    shown = displays(shell)
    assert [(sorted(d["data"]), d["update"]) for d in shown] == [
        ([WIDGET_MIME, "text/plain"], False),
        (["text/plain"], False),
        (["text/plain"], True),
        (["text/plain"], True),
        (["text/html", "text/plain"], False),
    ]
    assert [d["data"]["text/plain"] for d in shown[:4]] == ["", "", "", ""]
    static = shown[4]["data"]
    assert static == static_bundle(fold(run.events))
    assert 'alt="trip: rolled back — Card Declined! — rolled back: BookFlight"' in static["text/html"]
    assert without_timings(static["text/plain"]) == (
        f"trip — ROLLED BACK · 2 steps · TIME · run {run.run_id[:8]}\n"
        "✗ ChargeCard: InjectedFailure: Card Declined!\n"
        "\n"
        " +TIME  Engine → 1 BookFlight  execute()\n"
        " +TIME  Engine ← 1 BookFlight  ok · TIME\n"
        " +TIME  Engine → 2 ChargeCard  execute()\n"
        " +TIME  Engine ← 2 ChargeCard  ✗ InjectedFailure: Card Declined! · TIME\n"
        "┌─ ⟲ Rollback triggered\n"
        "│ +TIME  Engine → 1 BookFlight  compensate()\n"
        "│ +TIME  Engine ← 1 BookFlight  undone · TIME\n"
        "└─\n"
        "Card Declined! — rolled back: BookFlight\n"
    )


def test_injected_faults_wrap_the_run_and_leave_the_users_step_alone(shell: InteractiveShell) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, CHARGE_CARD)
    step = shell.user_ns["BookFlight"]
    ok(shell, "%aegis_saga BookFlight ChargeCard --latency ChargeCard=5 --deadline 0.05 -o run")
    run = shell.user_ns["run"]
    assert run.report.failed_step == "ChargeCard"
    assert run.report.failure_kind.value == "timeout"
    assert list(run.report.compensated) == ["BookFlight"]
    assert shell.user_ns["BookFlight"] is step is magics(shell).steps["BookFlight"]
    ok(shell, "%aegis_saga BookFlight ChargeCard -o again")
    assert shell.user_ns["again"].ok


def test_the_cell_form_takes_one_step_per_line_with_arguments(shell: InteractiveShell) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, CHARGE_CARD)
    ok(shell, "city = 'Porto'")
    ok(
        shell,
        "%%aegis_saga --name trip -o run\n"
        "# a comment, then a blank line\n\n"
        "BookFlight(destination=city)  # evaluated in the user's namespace\n"
        "ChargeCard\n",
    )
    run = shell.user_ns["run"]
    assert run.context.to_json() == {"flight_id": '"Porto"', "charge_id": "CH-1"}
    assert run.report.steps == ("BookFlight", "ChargeCard")


def test_steps_can_be_plain_objects_and_classes_from_the_namespace(shell: InteractiveShell) -> None:
    ok(
        shell,
        "class Noop:\n"
        "    async def execute(self, ctx):\n        return None\n"
        "    async def compensate(self, ctx):\n        return None\n"
        "noop = Noop()\n",
    )
    ok(shell, "%aegis_saga Noop noop -o run")
    assert shell.user_ns["run"].report.steps == ("Noop#1", "Noop#2")


# -- %aegis_saga: usage errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "%aegis_saga BookFlight --dedline 3",
            "%aegis_saga: unknown option --dedline (did you mean --deadline?). Usage: %aegis_saga STEP "
            "[STEP ...] [--deadline SECONDS] [--fail STEP[=MESSAGE]] [--latency STEP=SECONDS] "
            "[--mock travel] [--name NAME] [-o VAR] [--context VAR] [--background | --interactive]",
        ),
        (
            "%aegis_saga BookFlight --deadline -1",
            "%aegis_saga: --deadline takes a positive number of seconds, e.g. 2.5; got '-1'",
        ),
        (
            "%aegis_saga BookFlight --deadline 0",
            "%aegis_saga: --deadline takes a positive number of seconds, e.g. 2.5; got '0'",
        ),
        (
            "%aegis_saga BookFlight --deadline soon",
            "%aegis_saga: --deadline takes a positive number of seconds, e.g. 2.5; got 'soon'",
        ),
        (
            "%aegis_saga BookFlight --deadline inf",
            "%aegis_saga: --deadline takes a positive number of seconds, e.g. 2.5; got 'inf'",
        ),
        (
            "%aegis_saga BookFlght",
            "unknown step 'BookFlght' (did you mean BookFlight?): define it with %%aegis_step BookFlght, or "
            "bind a step object to the variable BookFlght; known steps: BookFlight",
        ),
        (
            "%aegis_saga BookFlight --fail ChargeCard",
            "--fail names 'ChargeCard', which is not a step of this saga; its steps are: BookFlight",
        ),
        (
            "%aegis_saga BookFlight --latency BookFlight",
            "%aegis_saga: --latency takes STEP=SECONDS, e.g. --latency BookFlight=0.5",
        ),
        (
            "%aegis_saga BookFlight --latency BookFlight=slow",
            "%aegis_saga: --latency BookFlight= takes a non-negative number of seconds, e.g. 2.5; got 'slow'",
        ),
        (
            "%aegis_saga BookFlight --mock bank",
            "%aegis_saga: --mock 'bank' is not a mock we have; use one of: travel",
        ),
        (
            "%aegis_saga BookFlight --background --interactive",
            "%aegis_saga: choose one of --background and --interactive",
        ),
        (
            "%aegis_saga",
            "the saga has no steps: list them after the magic (%aegis_saga BookFlight "
            "ChargeCard) or one per line in the cell (%%aegis_saga)",
        ),
        (
            "%aegis_saga json",
            "json is a module, not a step: a step has async execute(ctx, ...) and "
            "compensate(ctx, ...); define one with %%aegis_step",
        ),
        ("%aegis_saga BookFlight --context nothing", "--context nothing: there is no variable nothing"),
    ],
)
def test_bad_saga_options_raise_a_usage_error_with_the_fix(
    shell: InteractiveShell, line: str, message: str
) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, "import json")
    assert usage_error(shell, line) == message


def test_a_bad_line_in_the_cell_form_names_the_line(shell: InteractiveShell) -> None:
    ok(shell, BOOK_FLIGHT)
    assert usage_error(shell, "%%aegis_saga\nBookFlight(\n") == (
        "line 1 of the saga ('BookFlight('): '(' was never closed; write STEP or STEP(arg, key=value), "
        "or STEP & STEP for steps that run together"
    )
    assert usage_error(shell, "%%aegis_saga\nBookFlight(undefined_city)\n") == (
        "line 1 of the saga ('BookFlight(undefined_city)'): evaluating the arguments raised NameError: "
        "name 'undefined_city' is not defined"
    )


def test_a_nested_call_explains_how_to_run_it(shell: InteractiveShell) -> None:
    ok(shell, BOOK_FLIGHT)
    message = usage_error(
        shell, "async def go():\n    get_ipython().run_line_magic('aegis_saga', 'BookFlight')\nawait go()"
    )
    assert message == (
        "%aegis_saga blocks its cell only as a line of its own at the top level of a cell (or as the cell "
        "magic); here it is nested in other code. Move it to its own line, or use --background and await "
        "the result."
    )


# -- %aegis_saga --background --------------------------------------------------------------------


def test_background_without_a_running_loop_says_why_not(shell: InteractiveShell) -> None:
    ok(shell, BOOK_FLIGHT)
    # `x = %magic` is plain Python calling the magic; a terminal shell runs no loop between cells.
    assert usage_error(shell, "job = %aegis_saga BookFlight --background") == (
        "--background needs an event loop that keeps running after the cell (a Jupyter kernel's); here, "
        "run the saga without --background"
    )


def test_background_as_a_line_returns_a_run_to_await(shell: InteractiveShell) -> None:
    ok(shell, "import asyncio\nrelease = asyncio.Event()")
    ok(
        shell,
        "%%aegis_step Hold\nasync def execute(ctx):\n    await release.wait()\n"
        "async def compensate(ctx):\n    pass\n",
    )
    result = ok(shell, "%aegis_saga Hold --background --name trip -o run")
    job: object = result.result
    assert isinstance(job, BackgroundRun)
    assert repr(job) == "<saga trip running in the background: `await` this for its SagaRun>"
    assert "run" not in shell.user_ns
    ok(shell, "release.set()\nfinished = await _")
    run = shell.user_ns["finished"]
    assert run is shell.user_ns["run"]
    assert run.ok
    assert re.fullmatch(
        r"<saga trip finished: <SagaRun trip [0-9a-f]{32} committed: committed: Hold>>", repr(job)
    )


# -- --mock travel -------------------------------------------------------------------------------


def test_mock_travel_binds_the_tools_and_reports_the_ledger(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(shell, "%aegis_mock travel")
    ok(
        shell,
        "from aegis_nb.mock.travel import travel_steps, trip_context\n"
        "BookFlight, ReserveHotel, ChargeCard = travel_steps(travel)\n"
        "trip = trip_context('4242424242424242')\n",
    )
    capsys.readouterr()
    ok(
        shell,
        "%%aegis_saga --mock travel --context trip --name trip -o booked\n"
        "BookFlight(destination='Lisbon')\nReserveHotel(city='Lisbon', nights=3)\nChargeCard\n",
    )
    out, err = capsys.readouterr()
    assert err == ""
    assert out == "travel ledger: empty → 1 flight, 1 hotel, 1 charge (€555.00 held)\n"
    assert shell.user_ns["booked"].ok
    ok(
        shell,
        "%%aegis_saga --mock travel --context trip --name trip --fail ChargeCard='Card Declined!' "
        "-o declined\n"
        "BookFlight(destination='Porto')\nReserveHotel(city='Porto', nights=2)\nChargeCard\n",
    )
    out, err = capsys.readouterr()
    assert out == (
        "travel ledger unchanged: 1 flight, 1 hotel, 1 charge (€555.00 held)\n"
        # The travel steps are in doubt and an injected failure is not the tool's own refusal,
        # so the failed ChargeCard's undo runs too (by its idempotency key), and finds nothing.
        "Card Declined! — rolled back: ReserveHotel, BookFlight; nothing to undo: ChargeCard"
        " · SagaRolledBack in aegis_last_error\n"
    )
    assert err == ""
    ledger = shell.user_ns["travel"].ledger()
    assert (len(ledger.state.flights), ledger.state.cancellations) == (1, 2)


def test_unloading_stops_the_rewrite_and_loading_twice_registers_once(shell: InteractiveShell) -> None:
    first = magics(shell)
    ok(shell, "%reload_ext aegis_nb")
    assert magics(shell) is first
    assert shell.input_transformers_cleanup.count(blocking_transformer) == 1
    ok(shell, "%unload_ext aegis_nb")
    assert blocking_transformer not in shell.input_transformers_cleanup
    assert shell.display_formatter is not None
    assert shell.display_formatter.mimebundle_formatter.type_printers.get(SagaRun) is None


def test_watch_draws_every_saga_of_an_engine_in_the_running_cell(shell: InteractiveShell) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, "from aegis_nb import WorkflowEngine\nengine = WorkflowEngine()")
    ok(shell, "%aegis_watch engine")
    ok(shell, "await engine.run_saga([(BookFlight, ('Oslo',), {})], name='watched')")
    shown = displays(shell)
    assert [sorted(d["data"]) for d in shown] == [
        [WIDGET_MIME, "text/plain"],
        ["text/plain"],  # the fallback, then its blanking and the widget's
        ["text/plain"],
        ["text/plain"],
        ["text/html", "text/plain"],
    ]
    assert shown[4]["data"]["text/plain"].startswith("watched — COMMITTED")
    # Each cell's end settles the watched views: a saga that ended in the cell is drawn in it.
    assert shell.events.callbacks["post_run_cell"].count(magics(shell)._settle_watched) == 1
    ok(shell, "%aegis_watch --stop engine")
    ok(shell, "await engine.run_saga([(BookFlight, ('Oslo',), {})], name='unwatched')")
    assert len(displays(shell)) == 5  # nothing more
    ok(shell, "%unload_ext aegis_nb")
    assert magics(shell)._settle_watched not in shell.events.callbacks["post_run_cell"]
    ok(shell, "%load_ext aegis_nb")
    assert usage_error(shell, "%aegis_watch BookFlight") == (
        "%aegis_watch BookFlight: expected a WorkflowEngine or an AegisMCP app, got FunctionStep"
    )


def test_cancelling_a_background_saga_still_rolls_back_what_it_did(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, "import asyncio\nreached, never = asyncio.Event(), asyncio.Event()")
    ok(
        shell,
        "%%aegis_step Wait\nasync def execute(ctx):\n    reached.set()\n    await never.wait()\n"
        "async def compensate(ctx):\n    pass\n",
    )
    capsys.readouterr()
    job: object = ok(shell, "%aegis_saga BookFlight Wait --background --name trip -o run").result
    assert isinstance(job, BackgroundRun)
    shell.user_ns["job"] = job
    ok(shell, "_ = await asyncio.wait_for(reached.wait(), 30)")  # in Wait, BookFlight done: cancel there
    assert not job.task.done()
    job.cancel()
    ok(shell, "done, _ = await asyncio.wait([job.task])")
    assert repr(job) == "<saga trip: cancelled>"
    assert capsys.readouterr().out == (
        "Out[5]: <saga trip running in the background: `await` this for its SagaRun>\n"  # the cell's value
        "Booking flight to Lisbon...\n"
        'Canceling flight "Lisbon"...\n'
    )
    assert "run" not in shell.user_ns  # a cancelled saga has no outcome to bind


def test_a_magic_called_as_an_expression_without_a_loop_runs_to_the_end(shell: InteractiveShell) -> None:
    ok(shell, BOOK_FLIGHT)
    ok(shell, "result = %aegis_saga BookFlight -o run")
    assert shell.user_ns["result"] is None
    assert shell.user_ns["run"].ok


def test_a_tool_error_outside_a_run_arrives_as_a_tool_error(shell: InteractiveShell) -> None:
    ok(shell, "%aegis_mock travel")
    ok(
        shell,
        "from aegis_nb import ToolError\n"
        "try:\n"
        "    await travel.call_tool('cancel_hotel', {'booking_id': 'HT-9999'})\n"
        "except ToolError as error:\n"
        "    caught = (error.tool, str(error))\n",
    )
    assert shell.user_ns["caught"] == ("cancel_hotel", "no booking 'HT-9999'")


def test_each_task_talks_to_its_own_agency(shell: InteractiveShell) -> None:
    ok(shell, "%aegis_mock travel")
    ok(
        shell,
        "import asyncio\n"
        "from aegis_nb.mock import TravelAgency\n"
        "other = TravelAgency()\n"
        "async def book(agency, city):\n"
        "    if agency is None:\n"
        "        return await travel.call_tool('reserve_hotel', {'city': city, 'nights': 1})\n"
        "    async with travel.connected(agency):\n"
        "        await asyncio.sleep(0)\n"
        "        return await travel.call_tool('reserve_hotel', {'city': city, 'nights': 1})\n"
        "await asyncio.gather(book(other, 'Rome'), book(None, 'Oslo'))\n",
    )
    assert [b.place for b in shell.user_ns["other"].state().hotels] == ["Rome"]
    assert [b.place for b in shell.user_ns["travel"].agency.state().hotels] == ["Oslo"]


# -- the blocking transformer's edges, and %aegis_watch's errors -----------------------------------


def awaited(line: str) -> str:
    return f"await {HOOK}('aegis_saga', {line!r}, None)\n"


# Regression guard: only %aegis_saga lines that start a statement are rewritten.
def test_only_lines_that_start_a_statement_are_rewritten() -> None:
    cell = [
        'usage = """\n',
        "%aegis_saga A\n",  # inside a string
        '"""\n',
        "pair = (1,\n",
        "%aegis_saga B\n",  # inside brackets
        ")\n",
        "total = 1 + \\\n",
        "%aegis_saga C\n",  # a continued line
        "# a comment\n",
        "\n",
        "%aegis_saga D\n",
    ]
    assert blocking_transformer(cell) == [*cell[:-1], awaited(" D")]


# Regression guard: a bracket left open in a magic's text does not hide the next magic.
def test_a_bracket_left_open_in_a_magics_text_does_not_hide_the_next_magic() -> None:
    cell = ["%aegis_saga Pay --fail Pay=down:(\n", "%aegis_saga Pay\n"]
    assert blocking_transformer(cell) == [awaited(" Pay --fail Pay=down:("), awaited(" Pay")]


# Regression guard: another cell magic's body and a badly indented cell are left alone.
def test_another_cell_magics_body_and_a_badly_indented_cell_are_left_alone() -> None:
    bash = ["%%bash\n", "%aegis_saga A\n"]
    assert blocking_transformer(bash) == bash
    # IPython's own transforms report the indentation error next, in their own words.
    broken = ["if x:\n", "        a\n", "    b\n", "%aegis_saga A\n"]
    assert blocking_transformer(broken) == broken


# Regression guard: a magic line inside a string stays text.
def test_a_magic_line_inside_a_string_stays_text(agency_shell: InteractiveShell) -> None:
    ok(agency_shell, 'usage = """\n%aegis_saga Pay\n%timeit x\n"""\n')
    assert agency_shell.user_ns["usage"] == "\n%aegis_saga Pay\n%timeit x\n"


# Regression guard: %aegis_watch names a missing variable, and what it got instead.
def test_watch_names_a_missing_variable(agency_shell: InteractiveShell) -> None:
    assert (
        usage_error(agency_shell, "%aegis_watch engine") == "%aegis_watch engine: there is no variable engine"
    )
    ok(agency_shell, "engine = None")
    assert usage_error(agency_shell, "%aegis_watch engine") == (
        "%aegis_watch engine: expected a WorkflowEngine or an AegisMCP app, got NoneType"
    )


# -- a run interrupted mid-rollback, and background runs that overlap ------------------------------


# Regression guard: a saga interrupted mid-rollback ends its cell with the static diagram, not a live view.
def test_a_saga_interrupted_mid_rollback_ends_its_cell_with_the_static_diagram(
    shell: InteractiveShell,
) -> None:
    ok(shell, "class Interrupted(BaseException):\n    pass")  # a kernel interrupt, without stopping pytest
    ok(
        shell,
        "%%aegis_step Book\nasync def execute(ctx):\n    return None\n"
        "async def compensate(ctx):\n    raise Interrupted\n",
    )
    ok(shell, "%%aegis_step Charge --read-only\nasync def execute(ctx):\n    raise RuntimeError('declined')")
    capture = EventCapture()
    magics(shell).engine.subscribe(capture)
    result = shell.run_cell("%aegis_saga Book Charge")
    assert type(result.error_in_exec).__name__ == "Interrupted"
    # The interrupt is recorded as the attempt's failure, still owed; no final event follows.
    assert [type(event).__name__ for event in capture][-2:] == ["CompensationStarted", "CompensationFailed"]
    shown = displays(shell)
    assert sorted(shown[0]["data"]) == [WIDGET_MIME, "text/plain"]
    # The fallback (blank, and blanked), the widget blanked, then the static diagram.
    blank = {"text/plain": ""}
    assert [output["data"] for output in shown[1:]] == [blank, blank, blank, static_bundle(fold(capture))]


# Regression guard: a background run that ends late does not overwrite the -o variable of the newer run.
def test_a_background_run_that_ends_late_does_not_overwrite_the_newer_runs_variable(
    shell: InteractiveShell,
) -> None:
    ok(shell, "import asyncio\ngates = {'first': asyncio.Event(), 'second': asyncio.Event()}")
    ok(
        shell,
        "%%aegis_step Hold\nasync def execute(ctx, gate):\n    await gates[gate].wait()\n"
        "async def compensate(ctx, gate):\n    pass\n",
    )
    # The same cell run twice while its first run still goes on.
    ok(shell, "%%aegis_saga --background --name first -o run\nHold('first')")
    ok(shell, "first = _")
    ok(shell, "%%aegis_saga --background --name second -o run\nHold('second')")
    ok(shell, "second = _")
    ok(shell, "gates['second'].set()\nsecond_run = await second")
    ok(shell, "gates['first'].set()\nfirst_run = await first")
    namespace = shell.user_ns
    assert (namespace["first_run"].saga, namespace["second_run"].saga) == ("first", "second")
    assert namespace["run"] is namespace["second_run"]


# -- a continued magic line, and syntax errors only the compiler sees ------------------------------


def define(shell: InteractiveShell, name: str, body: str = "return None") -> None:
    cell = f"%%aegis_step {name}\nasync def execute(ctx):\n    {body}\nasync def compensate(ctx):\n    pass\n"
    result = shell.run_cell(cell)
    assert result.success, result.error_in_exec


# Regression guard: a %aegis_saga line continued with a backslash is one magic.
def test_a_saga_magic_line_continued_with_a_backslash_is_one_magic(shell: InteractiveShell) -> None:
    lines = ["%aegis_saga BookFlight \\\n", "    ChargeCard -o run\n", "print('after')\n"]
    assert blocking_transformer(lines) == [
        f"await {HOOK}('aegis_saga', ' BookFlight      ChargeCard -o run', None)\n",
        "print('after')\n",
    ]
    define(shell, "BookFlight")
    define(shell, "ChargeCard")
    result = shell.run_cell("%aegis_saga BookFlight \\\n    ChargeCard -o run\n")
    assert result.success, result.error_before_exec or result.error_in_exec
    run = shell.user_ns["run"]
    assert isinstance(run, SagaRun)
    assert run.report.summary() == "committed: BookFlight, ChargeCard"


# Regression guard: a syntax error only the compiler sees is one line naming the step.
@pytest.mark.parametrize(
    ("code", "report"),
    [
        (
            "token = await fetch()\n",
            "syntax error on line 1 of the cell: 'await' outside function\n    token = await fetch()\n"
            "            ^",
        ),
        (
            "if True:\n    return 1\n",
            "syntax error on line 2 of the cell: 'return' outside function\n        return 1\n        ^",
        ),
        (
            "if True:\n    break\n",
            "syntax error on line 2 of the cell: 'break' outside loop\n        break\n        ^",
        ),
    ],
    ids=["await", "return", "break"],
)
def test_a_syntax_error_only_the_compiler_sees_is_one_line_naming_the_step(
    shell: InteractiveShell, code: str, report: str
) -> None:
    functions = "async def execute(ctx):\n    return None\nasync def compensate(ctx):\n    pass\n"
    cell = f"%%aegis_step Book\n{code}{functions}"
    error = shell.run_cell(cell).error_in_exec
    assert isinstance(error, UsageError)
    assert str(error) == f"step Book: {report}"
    assert "Book" not in shell.user_ns
