"""Parallel groups and dynamic sagas in every view: the model, Mermaid, SVG, DOT, text and the trace.

The four cases of issue 18 (a group that commits, a member failing while others run, a group undone
concurrently and in reverse start order, a dynamic saga rolled back by ``saga.rollback``) run
through the real engine on a virtual clock (`tests.diagram_runs`) and are compared whole with their
snapshots. To accept a deliberate change, regenerate and review the diff::

    AEGIS_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/test_diagram_parallel_groups.py

The other tests pin what the pictures rest on: lanes learned as a dynamic saga's steps start, the
group's first failure staying the cause, a caught failure that is no rollback, a requested rollback
that is no error, untrusted member names escaped, and ``aegis-nb runs --run`` naming each member.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from aegis_nb import WorkflowEngine, parallel
from aegis_nb.cli import main
from aegis_nb.diagram import (
    Group,
    LaneState,
    SequenceModel,
    fold,
    labels,
    render_dot,
    render_mermaid,
    render_svg,
    render_text,
)
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaStatus
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.parallel import ParallelGroup
from aegis_nb.saga.trace import describe
from tests.diagram_runs import (
    GROUP_SCENARIOS,
    RUN_ID,
    Booking,
    dynamic_saga_rolled_back,
    member_fails_while_others_run,
    run_on_virtual_clock,
)
from tests.test_diagram_snapshots import check_snapshot
from tests.test_journal_sqlite import Hold, Note

RENDERERS: dict[str, Callable[[SequenceModel], str]] = {
    "svg": render_svg,
    "mmd": render_mermaid,
    "txt": render_text,
    "dot": render_dot,
}


def trace(events: tuple[SagaEvent, ...]) -> str:
    return "".join(describe(event) + "\n" for event in events)


@pytest.mark.parametrize("extension", sorted(RENDERERS))
@pytest.mark.parametrize("scenario", sorted(GROUP_SCENARIOS))
def test_every_view_of_a_group_matches_its_snapshot(scenario: str, extension: str) -> None:
    model = fold(GROUP_SCENARIOS[scenario]())
    check_snapshot(f"groups/{scenario}.{extension}", RENDERERS[extension](model))


@pytest.mark.parametrize("scenario", sorted(GROUP_SCENARIOS))
def test_the_trace_of_a_group_matches_its_snapshot(scenario: str) -> None:
    check_snapshot(f"groups/{scenario}.trace", trace(GROUP_SCENARIOS[scenario]()))


def test_the_virtual_clock_gives_the_same_events_every_time() -> None:
    """The snapshots rest on it: times, order and ids are those of the run, not of the machine."""
    assert member_fails_while_others_run() == member_fails_while_others_run()


def test_a_dynamic_saga_grows_a_lane_as_each_step_starts() -> None:
    """Its `SagaStarted` names no steps; a live view folding the events learns them one by one."""
    events = dynamic_saga_rolled_back()
    assert events[0].steps == ()  # type: ignore[union-attr]
    grown = [fold(events[: n + 1]).steps for n in range(5)]
    assert grown == [
        (),
        ("BookFlight",),
        ("BookFlight",),
        ("BookFlight", "ReserveHotel"),
        ("BookFlight", "ReserveHotel", "RentCar"),
    ]
    running = fold(events[:5])
    assert running.dynamic
    assert running.groups == (Group(1, 2),)
    assert running.lanes == (LaneState.SUCCEEDED, LaneState.RUNNING, LaneState.RUNNING)
    # A dynamic saga has no "of N": how many steps it will have is not known.
    assert labels.summary(running) == "running steps 2–3 (parallel): ReserveHotel, RentCar"
    assert render_text(running).splitlines()[0] == (
        "trip — RUNNING · 3 steps, 1 parallel group · 10.0 ms · run 5ca1ab1e"
    )


def test_a_requested_rollback_is_stated_not_drawn_as_an_error() -> None:
    model = fold(dynamic_saga_rolled_back())
    assert (model.status, model.failure, model.cause, model.failed_step) == (
        SagaStatus.ROLLED_BACK,
        FailureKind.REQUESTED,
        ErrorInfo("RollbackRequested", "too expensive"),
        None,
    )
    assert labels.cause_line(model) is None
    assert labels.requested_line(model) == "rolled back: too expensive"
    svg = render_svg(model)
    assert "✗" not in svg
    assert ">⟲ rolled back: too expensive</text>" in svg
    # While it compensates, the reason is not known yet (the final event carries it).
    undoing = fold(dynamic_saga_rolled_back()[:9])
    assert (undoing.status, labels.summary(undoing)) == (SagaStatus.COMPENSATING, "rolling back")


def test_the_first_failure_of_a_group_stays_the_cause_when_it_cancels_the_others() -> None:
    events = member_fails_while_others_run()
    settled = fold(events[:9])  # both failures in, no compensation yet
    assert [type(event).__name__ for event in events[7:10]] == [
        "StepFailed",
        "StepFailed",
        "CompensationStarted",
    ]
    assert (settled.failed_step, settled.failure, settled.status) == (
        2,
        FailureKind.ERROR,
        SagaStatus.COMPENSATING,
    )
    assert settled.lanes[3] is LaneState.FAILED
    # The rollback box opens at the first compensation: the cancelled member's reply is forward.
    assert settled.rollback_at is None
    assert fold(events[:10]).rollback_at == 8


def caught_failure_then_commit() -> tuple[SagaEvent, ...]:
    """A dynamic saga whose code catches the hotel's failure, books a car instead, and commits."""
    events: list[SagaEvent] = []

    async def body() -> None:
        engine = WorkflowEngine(sinks=[events.append])
        async with engine.saga(name="trip", run_id=RUN_ID) as saga:
            await saga.step(Booking("BookFlight", 10))
            with pytest.raises(ValueError, match="Hotel full"):
                await saga.step(Booking("ReserveHotel", 10, fail="Hotel full"))
            await saga.step(Booking("RentCar", 10))

    run_on_virtual_clock(body)
    return tuple(events)


def test_a_caught_failure_is_no_rollback() -> None:
    events = caught_failure_then_commit()
    failed = fold(events[:5])
    assert (failed.status, failed.failed_step) == (SagaStatus.COMPENSATING, 1)
    going_on = fold(events[:6])  # the car starts: the code went on
    assert (going_on.status, going_on.failed_step, going_on.cause, going_on.rollback_at) == (
        SagaStatus.RUNNING,
        None,
        None,
        None,
    )
    model = fold(events)
    assert model.status is SagaStatus.COMMITTED
    assert model.lanes == (LaneState.SUCCEEDED, LaneState.FAILED, LaneState.SUCCEEDED)
    assert model.report is not None
    assert model.report.succeeded == ("BookFlight", "RentCar")
    assert render_mermaid(model) == (
        "sequenceDiagram\n"
        "    participant E as Workflow Engine\n"
        "    participant S1 as Step 1 (BookFlight)\n"
        "    participant S2 as Step 2 (ReserveHotel)\n"
        "    participant S3 as Step 3 (RentCar)\n"
        "\n"
        "    E->>S1: execute()\n"
        "    S1-->>E: Success\n"
        "    E->>S2: execute()\n"
        "    S2-->>E: Fails (Hotel full)\n"
        "    E->>S3: execute()\n"
        "    S3-->>E: Success\n"
    )


def test_member_names_are_escaped_in_the_par_block_and_the_trace() -> None:
    """A member's name is untrusted: Mermaid's ``%%{`` directives and ``;`` stay text."""
    events: list[SagaEvent] = []

    async def body() -> None:
        engine = WorkflowEngine(sinks=[events.append])
        group = parallel(Booking("a%%{init}%%;b", 10), Booking("c\x1b[2Jd", 20))
        await engine.run_saga([group], name="trip", run_id=RUN_ID)

    run_on_virtual_clock(body)
    mermaid = render_mermaid(fold(events))
    assert "    par Step 1 (a#37;#37;{init}#37;#37;#59;b)\n" in mermaid
    assert "    and Step 2 (c\\x1b[2Jd)\n" in mermaid
    assert "%" not in mermaid.replace("#37;", "")
    assert "\x1b" not in trace(tuple(events))
    assert "  -> [parallel 1.2] c\\x1b[2Jd.execute()" in trace(tuple(events))


def test_runs_replays_a_journaled_group_naming_each_member(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, logfile = tmp_path / "j.db", str(tmp_path / "log")

    async def body() -> None:
        saga: list[SagaEntry | ParallelGroup] = [
            (Note(), (logfile,), {}),
            parallel((Hold(1), (logfile,), {}), (Hold(2), (logfile,), {})),
        ]
        async with SqliteJournal(path) as journal:
            await WorkflowEngine(journal=journal).run_saga(saga, name="trip", run_id="grouped")

    run_on_virtual_clock(body)
    assert main(["runs", "--journal", str(path), "--run", "grouped"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in out] == [
        "saga trip started: Note -> Hold#1 -> Hold#2",
        "  -> Note.execute()",
        "  <- Note ok",
        "  -> [parallel 2.1] Hold#1.execute()",
        "  -> [parallel 2.2] Hold#2.execute()",
        "  <- [parallel 2.1] Hold#1 ok",
        "  <- [parallel 2.2] Hold#2 ok",
        "saga trip committed in 0.0 ms",
    ]


def test_a_context_is_untouched_by_drawing() -> None:
    """Drawing reads names and timings only: metadata never reaches a view."""
    events: list[SagaEvent] = []

    async def body() -> None:
        engine = WorkflowEngine(sinks=[events.append])
        ctx = AegisContext({"secret_note": "do-not-show"})
        await engine.run_saga([parallel(Booking("A", 1), Booking("B", 2))], ctx, run_id=RUN_ID)

    run_on_virtual_clock(body)
    model = fold(events)
    for render in RENDERERS.values():
        assert "do-not-show" not in render(model)


def test_a_group_too_big_to_draw_whole_folds_inside_its_frame() -> None:
    """100 members: the folded members' rows stay in the group's one frame per phase."""
    members = [Booking(f"m{i:03d}", 1 + i % 7) for i in range(100)]
    events: list[SagaEvent] = []

    async def body() -> None:
        saga = [Booking("first", 1), parallel(*members), Booking("card", 1, fail="Card Declined!")]
        await WorkflowEngine(sinks=[events.append]).run_saga(saga, run_id=RUN_ID)

    run_on_virtual_clock(body)
    model = fold(events)
    text = render_text(model)
    assert [line for line in text.splitlines() if "╓" in line or "╙" in line] == [
        "  ╓ ∥ parallel · steps 2–101",
        "  ╙",
        "│ ╓ ∥ parallel · steps 2–101",
        "│ ╙",
    ]
    assert "  Engine ⇢ 4–92 (folded)  ⋯ 89 arrows folded: 89 execute()" in text
    assert render_svg(model).count('<g class="aegis-par"') == 2
    mermaid = render_mermaid(model)
    assert (mermaid.count("    par Step 2 (m000)\n"), mermaid.count("    and Step ")) == (2, 2 * 99)
