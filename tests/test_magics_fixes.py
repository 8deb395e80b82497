"""Regressions in the magics: repeated steps, ``--interactive`` in a kernel and its options, the rewrite.

Each test here failed before its fix: a repeated step's second use was never rehearsed (nor could
``--fail`` pick it), ``x = %aegis_saga ... --interactive`` was refused while a loop ran, the explorer
dropped the ``--fail`` message and clamped ``--deadline``/``--latency`` to its sliders, and the blocking
transformer rewrote ``%aegis_saga`` lines inside strings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("IPython")
pytest.importorskip("ipywidgets")

from IPython.core.interactiveshell import ExecutionResult, InteractiveShell

from aegis_nb.notebook.blocking import HOOK, blocking_transformer
from aegis_nb.notebook.explorer import SagaExplorer
from aegis_nb.notebook.injection import Fault
from aegis_nb.notebook.options import parse_saga_options
from aegis_nb.notebook.plan import parse_plan
from aegis_nb.notebook.rehearsal import Rehearsal
from aegis_nb.notebook.runner import RunSettings
from tests.ipython_support import loaded_shell, ok, usage_error

# A flight step that is not in doubt, used twice in one saga: one booking per city.
FLY = """%%aegis_step Fly
async def execute(ctx, city):
    key = ctx.idempotency_key
    booked = await travel.call_tool("book_flight", {"destination": city, "idempotency_key": key})
    return ctx.with_metadata({f"flight_{city}": booked})

async def compensate(ctx, city):
    await travel.call_tool("cancel_flight", {"booking_id": ctx.metadata[f"flight_{city}"]["booking_id"]})
"""

PAY = "%%aegis_step Pay\nasync def execute(ctx):\n    return None\nasync def compensate(ctx):\n    pass\n"
HOP = 'Fly("Lisbon")\nFly("Porto")\n'


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell("%aegis_mock travel", FLY, PAY) as ip:
        yield ip


# -- a step used twice ---------------------------------------------------------------------------


def test_a_rehearsal_fails_and_hangs_each_use_of_a_repeated_step(shell: InteractiveShell) -> None:
    ok(shell, f"%%aegis_rehearse --mock travel --name hop -o rehearsal\n{HOP}")
    rehearsal = shell.user_ns["rehearsal"]
    assert isinstance(rehearsal, Rehearsal)
    assert rehearsal.steps == ("Fly#1", "Fly#2")
    # The second flight timing out after Lisbon was booked is its own scenario, and it is unsafe:
    # Porto's seat is left booked (Fly is not in doubt), while Lisbon's is cancelled.
    assert repr(rehearsal).splitlines() == [
        "rehearsal of hop: ✗ unsafe: 2 of 5 scenarios leave the world in a state nobody wanted",
        "",
        "scenario                      Fly#1                  Fly#2                  outcome      "
        "ledger after",
        "────────────────────────────  ─────────────────────  ─────────────────────  ───────────  "
        "──────────────────",
        "all steps succeed             ✓ done                 ✓ done                 committed    2 flights",
        "Fly#1 fails                   ✗ failed               · not run              rolled back  clean",
        "Fly#2 fails                   ↶ undone               ✗ failed               rolled back  clean",
        "Fly#1 times out after acting  !! left live: FL-0001  · not run              rolled back  "
        "LEFT LIVE: FL-0001",
        "Fly#2 times out after acting  ↶ undone               !! left live: FL-0002  rolled back  "
        "LEFT LIVE: FL-0002",
        "",
        "to fix:",
        "  - Fly#1 times out after acting: Fly#1 acted (FL-0001) but was never compensated — mark it "
        "--in-doubt and let its compensation undo by idempotency key.",
        "  - Fly#2 times out after acting: Fly#2 acted (FL-0002) but was never compensated — mark it "
        "--in-doubt and let its compensation undo by idempotency key.",
    ]
    failed = [(row.run.report.failed_step, row.run.report.compensated) for row in rehearsal.results]
    assert failed == [
        (None, ()),
        ("Fly#1", ()),
        ("Fly#2", ("Fly#1",)),
        ("Fly#1", ()),
        ("Fly#2", ("Fly#1",)),
    ]


def test_fail_picks_one_use_of_a_repeated_step_by_its_diagram_name(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(shell, f'%%aegis_saga --mock travel --name hop --fail Fly#2="no seats to Porto" -o run\n{HOP}')
    report = shell.user_ns["run"].report
    assert (report.steps, report.succeeded, report.failed_step, report.compensated) == (
        ("Fly#1", "Fly#2"),
        ("Fly#1",),
        "Fly#2",
        ("Fly#1",),
    )
    assert capsys.readouterr().err == "SagaRolledBack: saga 'hop': no seats to Porto — rolled back: Fly#1\n"
    # The line form too, with a latency on the first use only and the deadline between the two.
    ok(shell, "%aegis_saga Pay Pay --latency Pay#1=0 --latency Pay#2=5 --deadline 0.05 -o slow")
    report = shell.user_ns["slow"].report
    assert (report.failed_step, report.failure_kind.value, report.compensated) == (
        "Pay#2",
        "timeout",
        ("Pay#1",),
    )


def test_a_bare_name_still_means_every_use_and_a_label_wins_over_it(shell: InteractiveShell) -> None:
    expected = {
        "Pay#1": Fault(fail=True, message="any", latency=0.5),
        "Pay#2": Fault(fail=True, message="second", latency=0.5),
    }
    for line in (
        "Pay Pay --fail Pay=any --fail Pay#2=second --latency Pay=0.5",
        "Pay Pay --fail Pay#2=second --fail Pay=any --latency Pay=0.5",  # the label wins in either order
    ):
        options = parse_saga_options(line)
        plan = parse_plan(options.steps, "", {}, shell.user_ns)
        assert RunSettings.from_options(options, plan, shell.user_ns).faults == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "%aegis_saga Pay Pay --fail Pay#3",
            "--fail names 'Pay#3', which is not a step of this saga (did you mean Pay#2?); its steps are: "
            "Pay#1, Pay#2",
        ),
        (
            "%aegis_saga Pay --latency Pay#1=1",
            "--latency names 'Pay#1', which is not a step of this saga (did you mean Pay?); its steps "
            "are: Pay",
        ),
        (
            "%aegis_saga Pay Pay --fail Pay#0",
            "--fail STEP[=MESSAGE]: 'Pay#0' is not a step name (a Python name, or NAME#N for the N-th use of "
            "a repeated step, as the diagram shows it)",
        ),
        (
            "%aegis_saga Pay Pay --latency Pay#=1",
            "--latency STEP=SECONDS: 'Pay#' is not a step name (a Python name, or NAME#N for the N-th use of "
            "a repeated step, as the diagram shows it)",
        ),
    ],
)
def test_a_step_reference_that_picks_nothing_lists_the_names_to_use(
    shell: InteractiveShell, line: str, message: str
) -> None:
    assert usage_error(shell, line) == message


def test_the_explorer_has_a_control_per_use_of_a_repeated_step(shell: InteractiveShell) -> None:
    view: object = ok(shell, "%aegis_saga Pay Pay --interactive --fail Pay#2").result
    assert isinstance(view, SagaExplorer)
    assert [(name, toggle.value) for name, toggle in view.failing.items()] == [
        ("Pay#1", False),
        ("Pay#2", True),
    ]
    assert list(view.latency) == ["Pay#1", "Pay#2"]
    view.run_button.click()
    (trial,) = view.trials
    assert (trial.failing, trial.run.report.failed_step, trial.run.report.compensated) == (
        ("Pay#2",),
        "Pay#2",
        ("Pay#1",),
    )


# -- --interactive -------------------------------------------------------------------------------


def test_interactive_as_an_expression_works_while_the_kernels_loop_runs(shell: InteractiveShell) -> None:
    async def kernel_cell(source: str) -> ExecutionResult:
        # What ipykernel does: the cell runs on the kernel's loop, which is running.
        return await shell.run_cell_async(source, transformed_cell=shell.transform_cell(source))

    result = asyncio.run(kernel_cell("explorer = %aegis_saga Pay --interactive --name pay"))
    assert result.error_in_exec is None
    explorer = shell.user_ns["explorer"]
    assert isinstance(explorer, SagaExplorer)
    assert explorer._repr_mimebundle_()["text/plain"] == (
        "saga explorer for pay (Pay): set the sliders and toggles, then press Run"
    )


def test_interactive_keeps_the_fail_message_it_was_given(shell: InteractiveShell) -> None:
    view: object = ok(shell, '%aegis_saga Pay --interactive --fail "Pay=Card Declined!"').result
    assert isinstance(view, SagaExplorer)
    assert view.settings().faults == {"Pay": Fault(fail=True, message="Card Declined!")}
    view.run_button.click()  # no loop runs here: the press runs the saga to the end
    assert str(view.trials[0].run.report.cause) == "Card Declined!"
    # Off and on again: the message comes back with the toggle.
    view.failing["Pay"].value = False
    assert view.settings().faults == {}
    view.failing["Pay"].value = True
    assert view.settings().faults == {"Pay": Fault(fail=True, message="Card Declined!")}


def test_interactive_widens_its_sliders_to_hold_the_values_it_was_given(shell: InteractiveShell) -> None:
    view: object = ok(shell, "%aegis_saga Pay --interactive --deadline 0.01 --latency Pay=3").result
    assert isinstance(view, SagaExplorer)
    deadline, latency = view.deadline, view.latency["Pay"]
    assert (deadline.value, deadline.min, deadline.step, deadline.max) == (0.01, 0.01, 0.01, 5.0)
    assert (latency.value, latency.min, latency.max) == (3.0, 0.0, 3.0)
    settings = view.settings()
    assert (settings.deadline, settings.faults) == (0.01, {"Pay": Fault(latency=3.0)})
    # A tiny deadline still reads as itself, not as 0.00.
    tiny: object = ok(shell, "%aegis_saga Pay --interactive --deadline 0.005").result
    assert isinstance(tiny, SagaExplorer)
    assert (tiny.deadline.value, tiny.deadline.readout_format) == (0.005, ".2g")
    # The usual ranges are kept when the values fit them.
    usual: object = ok(shell, "%aegis_saga Pay --interactive --deadline 0.3 --latency Pay=0.5").result
    assert isinstance(usual, SagaExplorer)
    assert (usual.deadline.min, usual.deadline.step, usual.deadline.readout_format) == (0.05, 0.05, ".2f")
    assert usual.latency["Pay"].max == 2.0


# -- the blocking transformer --------------------------------------------------------------------


def awaited(line: str) -> str:
    return f"await {HOOK}('aegis_saga', {line!r}, None)\n"


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


def test_a_bracket_left_open_in_a_magics_text_does_not_hide_the_next_magic() -> None:
    cell = ["%aegis_saga Pay --fail Pay=down:(\n", "%aegis_saga Pay\n"]
    assert blocking_transformer(cell) == [awaited(" Pay --fail Pay=down:("), awaited(" Pay")]


def test_another_cell_magics_body_and_a_badly_indented_cell_are_left_alone() -> None:
    bash = ["%%bash\n", "%aegis_saga A\n"]
    assert blocking_transformer(bash) == bash
    # IPython's own transforms report the indentation error next, in their own words.
    broken = ["if x:\n", "        a\n", "    b\n", "%aegis_saga A\n"]
    assert blocking_transformer(broken) == broken


def test_a_magic_line_inside_a_string_stays_text(shell: InteractiveShell) -> None:
    ok(shell, 'usage = """\n%aegis_saga Pay\n%timeit x\n"""\n')
    assert shell.user_ns["usage"] == "\n%aegis_saga Pay\n%timeit x\n"


# -- %aegis_watch --------------------------------------------------------------------------------


def test_watch_names_a_missing_variable(shell: InteractiveShell) -> None:
    assert usage_error(shell, "%aegis_watch engine") == "%aegis_watch engine: there is no variable engine"
    ok(shell, "engine = None")
    assert usage_error(shell, "%aegis_watch engine") == (
        "%aegis_watch engine: expected a WorkflowEngine or an AegisMCP app, got NoneType"
    )
