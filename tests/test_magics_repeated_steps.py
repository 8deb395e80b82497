"""A step used more than once in one ``%aegis_saga``: each use is one of its own, by its diagram name.

A rehearsal fails and hangs each use in turn; ``--fail`` and ``--latency`` pick one use by its name in
the diagram (``Fly#2``), a bare name still means every use and a label wins over it, a reference that
picks nothing lists the names to use, and the explorer has a control per use.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("IPython")
pytest.importorskip("ipywidgets")


from IPython.core.interactiveshell import InteractiveShell

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
def agency_shell() -> Iterator[InteractiveShell]:
    """A shell with the mock travel agency connected, and the steps Fly and Pay defined."""
    with loaded_shell("%aegis_mock travel", FLY, PAY) as ip:
        yield ip


# Regression guard: a repeated step's second use is rehearsed too.
def test_a_rehearsal_fails_and_hangs_each_use_of_a_repeated_step(agency_shell: InteractiveShell) -> None:
    ok(agency_shell, f"%%aegis_rehearse --mock travel --name hop -o rehearsal\n{HOP}")
    rehearsal = agency_shell.user_ns["rehearsal"]
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


# Regression guard: --fail picks one use of a repeated step by its diagram name.
def test_fail_picks_one_use_of_a_repeated_step_by_its_diagram_name(
    agency_shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(agency_shell, f'%%aegis_saga --mock travel --name hop --fail Fly#2="no seats to Porto" -o run\n{HOP}')
    report = agency_shell.user_ns["run"].report
    assert (report.steps, report.succeeded, report.failed_step, report.compensated) == (
        ("Fly#1", "Fly#2"),
        ("Fly#1",),
        "Fly#2",
        ("Fly#1",),
    )
    assert capsys.readouterr().out.endswith(
        "no seats to Porto — rolled back: Fly#1 · SagaRolledBack in aegis_last_error\n"
    )
    # The line form too, with a latency on the first use only and the deadline between the two.
    ok(agency_shell, "%aegis_saga Pay Pay --latency Pay#1=0 --latency Pay#2=5 --deadline 0.05 -o slow")
    report = agency_shell.user_ns["slow"].report
    assert (report.failed_step, report.failure_kind.value, report.compensated) == (
        "Pay#2",
        "timeout",
        ("Pay#1",),
    )


# Regression guard: a bare name still means every use, and a label wins over it.
def test_a_bare_name_still_means_every_use_and_a_label_wins_over_it(agency_shell: InteractiveShell) -> None:
    expected = {
        "Pay#1": Fault(fail=True, message="any", latency=0.5),
        "Pay#2": Fault(fail=True, message="second", latency=0.5),
    }
    for line in (
        "Pay Pay --fail Pay=any --fail Pay#2=second --latency Pay=0.5",
        "Pay Pay --fail Pay#2=second --fail Pay=any --latency Pay=0.5",  # the label wins in either order
    ):
        options = parse_saga_options(line)
        plan = parse_plan(options.steps, "", {}, agency_shell.user_ns)
        assert RunSettings.from_options(options, plan, agency_shell.user_ns).faults == expected


# Regression guard: a reference that picks no use lists the names to use.
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
    agency_shell: InteractiveShell, line: str, message: str
) -> None:
    assert usage_error(agency_shell, line) == message


# Regression guard: the explorer has a control per use of a repeated step.
def test_the_explorer_has_a_control_per_use_of_a_repeated_step(agency_shell: InteractiveShell) -> None:
    view: object = ok(agency_shell, "%aegis_saga Pay Pay --interactive --fail Pay#2").result
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
