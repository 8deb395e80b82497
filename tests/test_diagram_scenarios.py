"""Fixed event sequences for the diagram tests, built by hand so every time and id is known; and the
sequence model folded from them, checked whole.

The builders (`Script`, `SCENARIOS`) are shared with the snapshot, widget and browser tests.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from aegis_nb.diagram import EMPTY, LaneState, Message, MessageKind, SequenceBuilder, fold
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaStatus
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.history import fold_report

TRAVEL = ("BookFlight", "ReserveHotel", "ChargeCard")


class Script:
    """Writes one run's events with a hand-driven clock (milliseconds, starting at t = 100 s)."""

    def __init__(
        self,
        steps: tuple[str, ...] = TRAVEL,
        *,
        saga: str = "book_vacation",
        run_id: str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        deadline: float = math.inf,
    ) -> None:
        self.run_id = run_id
        self.saga = saga
        self.now = 100.0
        self.events: list[SagaEvent] = []
        self.started = self.now
        self.ctx = AegisContext({"traveller": "ada"})
        self._emit(SagaStarted, saga, steps, deadline, self.ctx)

    def _emit(self, kind: Callable[..., SagaEvent], *fields: object) -> None:
        self.events.append(kind(self.run_id, len(self.events), self.now, *fields))

    def wait(self, ms: float) -> Script:
        self.now += ms / 1000
        return self

    def step_ok(self, index: int, name: str, ms: float = 10.0) -> Script:
        self._emit(StepStarted, index, name)
        self.wait(ms)._emit(StepSucceeded, index, name, ms / 1000, self.ctx)
        return self

    def step_fails(
        self, index: int, name: str, message: str, ms: float = 10.0, kind: str = "ValueError"
    ) -> Script:
        self._emit(StepStarted, index, name)
        error = ErrorInfo(kind, message)
        self.wait(ms)._emit(StepFailed, index, name, ms / 1000, FailureKind.ERROR, error)
        return self

    def step_times_out(self, index: int, name: str, budget_ms: float) -> Script:
        self._emit(StepStarted, index, name)
        error = ErrorInfo(
            "ToolTimeoutError", f"step {name!r} exceeded its deadline (budget {budget_ms:.1f} ms)"
        )
        self.wait(budget_ms + 0.4)._emit(
            StepTimedOut, index, name, (budget_ms + 0.4) / 1000, budget_ms / 1000, error
        )
        return self

    def undo(self, index: int, name: str, ms: float = 5.0, attempt: int = 1) -> Script:
        self.wait(0.1)._emit(CompensationStarted, index, name, attempt)
        self.wait(ms)._emit(CompensationSucceeded, index, name, attempt, ms / 1000)
        return self

    def undo_fails(
        self, index: int, name: str, message: str, attempt: int, *, will_retry: bool, ms: float = 2.0
    ) -> Script:
        self.wait(0.1)._emit(CompensationStarted, index, name, attempt)
        error = ErrorInfo("RuntimeError", message)
        self.wait(ms)._emit(CompensationFailed, index, name, attempt, ms / 1000, error, will_retry)
        if will_retry:
            self.wait(100.0)  # the backoff
        return self

    def commit(self) -> tuple[SagaEvent, ...]:
        self._emit(SagaCommitted, self.saga, self.now - self.started, self.ctx)
        return tuple(self.events)

    def end_rollback(self) -> tuple[SagaEvent, ...]:
        report = fold_report(self.events)
        stuck = bool(report.compensation_failures)
        report = dataclasses.replace(report, status=SagaStatus.STUCK if stuck else SagaStatus.ROLLED_BACK)
        self._emit(SagaStuck if stuck else SagaRolledBackEvent, self.saga, self.now - self.started, report)
        return tuple(self.events)


def success() -> tuple[SagaEvent, ...]:
    script = Script()
    for i, name in enumerate(TRAVEL):
        script.step_ok(i, name)
    return script.commit()


def failure_at(position: int) -> tuple[SagaEvent, ...]:
    """The travel saga with step `position` (0-based) failing; the documentation case is 2."""
    script = Script()
    for i in range(position):
        script.step_ok(i, TRAVEL[i])
    reason = ["No seats left", "Hotel full", "Card Declined!"][position]
    script.step_fails(position, TRAVEL[position], reason)
    for i in reversed(range(position)):
        script.undo(i, TRAVEL[i])
    return script.end_rollback()


def timeout() -> tuple[SagaEvent, ...]:
    script = Script(deadline=100.1)
    script.step_ok(0, "BookFlight").step_times_out(1, "ReserveHotel", 90.0).undo(0, "BookFlight")
    return script.end_rollback()


def compensation_fails() -> tuple[SagaEvent, ...]:
    """The card fails; the hotel's undo fails twice then succeeds, the flight's undo never does."""
    script = Script()
    script.step_ok(0, "BookFlight").step_ok(1, "ReserveHotel").step_fails(2, "ChargeCard", "Card Declined!")
    script.undo_fails(1, "ReserveHotel", "hotel API 503", 1, will_retry=True)
    script.undo_fails(1, "ReserveHotel", "hotel API 503", 2, will_retry=True)
    script.undo(1, "ReserveHotel", attempt=3)
    for attempt in (1, 2, 3):
        script.undo_fails(0, "BookFlight", "airline unreachable", attempt, will_retry=attempt < 3)
    return script.end_rollback()


def many_steps(count: int, fail_at: int | None = None) -> tuple[SagaEvent, ...]:
    """`count` steps named ``step-001``...; the one at `fail_at` fails, the earlier ones are undone."""
    names = tuple(f"step-{i + 1:03d}" for i in range(count))
    script = Script(names, saga=f"long_saga_{count}", run_id=f"{count:032x}")
    last = count if fail_at is None else fail_at
    for i in range(last):
        script.step_ok(i, names[i], ms=1.0)
    if fail_at is None:
        return script.commit()
    script.step_fails(fail_at, names[fail_at], "quota exceeded", ms=1.0)
    for i in reversed(range(fail_at)):
        script.undo(i, names[i], ms=0.5)
    return script.end_rollback()


SCENARIOS: dict[str, Callable[[], tuple[SagaEvent, ...]]] = {
    "success": success,
    "fail_first": lambda: failure_at(0),
    "fail_second": lambda: failure_at(1),
    "fail_third": lambda: failure_at(2),
    "timeout": timeout,
    "compensation_fails": compensation_fails,
}


# -- crowded drawings: text longer than the room it has ----------------------------------------------


def injected_failure_of_two() -> tuple[SagaEvent, ...]:
    """The explorer's picture: two steps, so a narrow drawing, and a long injected failure."""
    script = Script(("BookFlight", "ChargeCard"), saga="trip", deadline=102.0)
    script.step_ok(0, "BookFlight", 301.1)
    message = "ChargeCard failed (injected by --fail)"
    script.step_fails(1, "ChargeCard", message, ms=0.15, kind="InjectedFailure")
    return script.undo(0, "BookFlight", 0.02).end_rollback()


LONG_NAMES = (
    "ReserveTheVeryExpensiveHotelRoomWithSeaView",
    "BookFlightToTheOtherSideOfTheWorld",
    "ChargeCustomerCreditCardForEverything",
)


def long_names() -> tuple[SagaEvent, ...]:
    """Names wider than their lane heads, a title wider than the room left of the status, a long error."""
    script = Script(LONG_NAMES, saga="a_saga_with_a_remarkably_long_name_that_goes_on_and_on_and_on_forever")
    script.step_ok(0, LONG_NAMES[0]).step_ok(1, LONG_NAMES[1])
    script.step_fails(2, LONG_NAMES[2], "Card Declined! " * 8)
    return script.undo(1, LONG_NAMES[1]).undo(0, LONG_NAMES[0]).end_rollback()


def long_title() -> tuple[SagaEvent, ...]:
    """A two-step drawing is narrow: its title must stop short of the status pill."""
    script = Script(("BookFlight", "ChargeCard"), saga="quarterly_offsite_travel_for_the_whole_platform_team")
    return script.step_ok(0, "BookFlight").step_ok(1, "ChargeCard").commit()


def stuck_with_long_errors() -> tuple[SagaEvent, ...]:
    """Retried compensations whose errors are longer than the drawing is wide, and a long summary."""
    script = Script(("BookFlight", "ChargeCard"), saga="trip")
    script.step_ok(0, "BookFlight").step_fails(1, "ChargeCard", "Card Declined!")
    error = "airline API unreachable: connection refused (errno 111) while cancelling PNR"
    for attempt in (1, 2, 3):
        script.undo_fails(0, "BookFlight", error, attempt, will_retry=attempt < 3)
    return script.end_rollback()


def one_step_long_failure() -> tuple[SagaEvent, ...]:
    """One step: the shortest arrow there is, under the longest failure."""
    script = Script(("Charge",), saga="pay")
    message = "Card declined by issuer: insufficient funds on account ending 4242"
    return script.step_fails(0, "Charge", message, kind="PaymentError").end_rollback()


CROWDED: dict[str, Callable[[], tuple[SagaEvent, ...]]] = {
    "injected_failure_of_two": injected_failure_of_two,
    "long_names": long_names,
    "long_title": long_title,
    "stuck_with_long_errors": stuck_with_long_errors,
    "one_step_long_failure": one_step_long_failure,
}


# -- the model ----------------------------------------------------------------------------------


def test_model_of_the_documentation_scenario() -> None:
    model = fold(failure_at(2))
    assert model.status is SagaStatus.ROLLED_BACK
    assert model.lanes == (LaneState.COMPENSATED, LaneState.COMPENSATED, LaneState.FAILED)
    assert [(m.kind, m.step) for m in model.messages] == [
        (MessageKind.EXECUTE, 0),
        (MessageKind.SUCCEEDED, 0),
        (MessageKind.EXECUTE, 1),
        (MessageKind.SUCCEEDED, 1),
        (MessageKind.EXECUTE, 2),
        (MessageKind.FAILED, 2),
        (MessageKind.COMPENSATE, 1),
        (MessageKind.COMPENSATED, 1),
        (MessageKind.COMPENSATE, 0),
        (MessageKind.COMPENSATED, 0),
    ]
    assert model.rollback_at == 6
    assert model.failed_step == 2
    assert model.cause == ErrorInfo("ValueError", "Card Declined!")
    assert model.event_count == 12
    assert model.elapsed == model.messages[-1].time - 100.0


def test_failed_message_carries_what_its_label_needs() -> None:
    failed = fold(failure_at(2)).messages[5]
    assert failed == Message(
        seq=6,
        time=failed.time,
        kind=MessageKind.FAILED,
        step=2,
        duration=0.01,
        error=ErrorInfo("ValueError", "Card Declined!"),
        failure=FailureKind.ERROR,
    )


def test_incremental_fold_equals_fold_of_each_prefix() -> None:
    events = compensation_fails()
    builder = SequenceBuilder()
    for n, event in enumerate(events, start=1):
        assert builder.feed(event)
        assert builder.snapshot() == fold(events[:n])


def test_builder_ignores_other_runs_and_a_second_start() -> None:
    events = failure_at(1)
    other = Script(run_id="another").events
    builder = SequenceBuilder()
    assert builder.snapshot() is EMPTY
    assert builder.feed(events[0])
    assert not builder.feed(other[0])
    assert not builder.feed(events[0])
    for event in events[1:]:
        builder.feed(event)
    assert builder.snapshot() == fold(events)


def test_snapshots_are_immutable_values() -> None:
    builder = SequenceBuilder()
    events = success()
    builder.feed(events[0])
    before = builder.snapshot()
    for event in events[1:]:
        builder.feed(event)
    assert before == fold(events[:1])
    assert before.messages == ()
    assert dataclasses.is_dataclass(before)
    try:
        before.saga = "changed"  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:  # pragma: no cover
        raise AssertionError("SequenceModel must be frozen")


def test_model_of_compensation_failure_marks_the_step_left_standing() -> None:
    model = fold(compensation_fails())
    assert model.status is SagaStatus.STUCK
    assert model.lanes == (LaneState.STUCK, LaneState.COMPENSATED, LaneState.FAILED)
    assert model.report is not None
    assert list(model.report.left_standing) == ["BookFlight"]


def test_model_while_rolling_back() -> None:
    events = failure_at(2)
    model = fold(events[:8])  # the hotel's compensation has started
    assert model.status is SagaStatus.COMPENSATING
    assert model.lanes == (LaneState.SUCCEEDED, LaneState.COMPENSATING, LaneState.FAILED)
    assert not model.finished
