"""Property tests of the engine's invariants over random sagas, on asyncio and trio.

Random sagas of up to 30 steps; one step may fail, time out or be cancelled; compensations may fail
(some until they give up); steps may opt in as in-doubt. Whatever happens: the compensated steps are
exactly the succeeded ones (plus an in-doubt failed step), newest first, each with its own snapshot;
nothing executes twice; the outcome matches; the event sequence is well-formed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aegis_nb import (
    AegisContext,
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    FailureKind,
    RetryPolicy,
    SagaCommitted,
    SagaCompensationFailed,
    SagaFailed,
    SagaRolledBack,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
    ToolTimeoutError,
    WorkflowEngine,
)
from aegis_nb.saga import fold_report
from aegis_nb.testing import EventCapture
from tests.steps import Boom, Calls, Recorded

ATTEMPTS = 2


class Fate(enum.Enum):
    FAIL = "fail"
    TIME_OUT = "time out"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Plan:
    steps: int
    breaking_step: int | None  # the first step that does not succeed
    fate: Fate
    in_doubt: frozenset[int]
    compensation_failures: tuple[int, ...]  # per step; >= ATTEMPTS means it gives up


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    n = draw(st.integers(1, 30))
    return Plan(
        steps=n,
        breaking_step=draw(st.none() | st.integers(0, n - 1)),
        fate=draw(st.sampled_from(Fate)),
        in_doubt=frozenset(draw(st.sets(st.integers(0, n - 1)))),
        compensation_failures=tuple(
            draw(st.lists(st.sampled_from([0, 0, 0, 1, ATTEMPTS]), min_size=n, max_size=n))
        ),
    )


def metadata_after(step: int) -> dict[str, str]:
    """What the context holds once steps 0..step have succeeded."""
    return {f"s{i}_id": f"S{i}-{i}" for i in range(step + 1)}


async def run_plan(plan: Plan) -> tuple[Calls, EventCapture, BaseException | None, bool]:
    calls, capture = Calls(), EventCapture()
    outcome: BaseException | None = None
    with anyio.CancelScope() as scope:
        steps = [
            Recorded(
                f"s{i}",
                calls,
                fail="boom" if i == plan.breaking_step and plan.fate is Fate.FAIL else None,
                hang=i == plan.breaking_step and plan.fate is not Fate.FAIL,
                timeout=0.001 if i == plan.breaking_step and plan.fate is Fate.TIME_OUT else None,
                on_execute=scope.cancel if i == plan.breaking_step and plan.fate is Fate.CANCEL else None,
                in_doubt=i in plan.in_doubt,
                compensation_failures=plan.compensation_failures[i],
            )
            for i in range(plan.steps)
        ]
        engine = WorkflowEngine(compensation_retry=RetryPolicy(attempts=ATTEMPTS, initial_delay=0))
        try:
            await engine.execute_saga(steps, AegisContext(), sinks=[capture])
        except SagaFailed as exc:
            outcome = exc
    return calls, capture, outcome, scope.cancelled_caught


def check(
    plan: Plan, calls: Calls, capture: EventCapture, outcome: BaseException | None, cancelled: bool
) -> None:
    k = plan.steps if plan.breaking_step is None else plan.breaking_step
    # Forward: steps 0..k ran once each, in order, each with the previous step's context.
    executed = [name for what, name in calls.trail() if what == "execute"]
    assert executed == [f"s{i}" for i in range(min(k + 1, plan.steps))]
    for i in range(len(executed)):
        (ctx,) = calls.contexts("execute", f"s{i}")
        assert ctx.to_json() == metadata_after(i - 1)

    # Rollback: exactly the succeeded steps (plus an in-doubt failed one), newest first.
    owed = ([k] if k < plan.steps and k in plan.in_doubt else []) + list(range(k - 1, -1, -1))
    compensations = [name for what, name in calls.trail() if what == "compensate"]
    expected_calls = []
    for i in owed if k < plan.steps else []:
        expected_calls += [f"s{i}"] * min(plan.compensation_failures[i] + 1, ATTEMPTS)
    assert compensations == expected_calls
    for i in owed if k < plan.steps else []:
        for ctx in calls.contexts("compensate", f"s{i}"):
            expected = metadata_after(i - 1) if i == k else metadata_after(i)
            assert ctx.to_json() == expected
            assert ctx.idempotency_key == calls.contexts("execute", f"s{i}")[0].idempotency_key
    assert calls.trail().index(("execute", executed[-1])) < len(executed)  # no execute after a compensation

    # Outcome.
    stuck = [i for i in owed if plan.compensation_failures[i] >= ATTEMPTS] if k < plan.steps else []
    final = capture.events[-1]
    if k == plan.steps:
        assert outcome is None
        assert not cancelled
        assert isinstance(final, SagaCommitted)
    elif plan.fate is Fate.CANCEL:
        assert outcome is None
        assert cancelled
        assert isinstance(final, SagaStuck if stuck else SagaRolledBackEvent)
        assert final.report.failure_kind is FailureKind.CANCELLED
    else:
        assert isinstance(outcome, SagaCompensationFailed if stuck else SagaRolledBack)
        assert isinstance(outcome.__cause__, ToolTimeoutError if plan.fate is Fate.TIME_OUT else Boom)
        assert outcome.report == fold_report(capture.events)
        position = outcome.report.steps.index
        assert [position(name) for name in outcome.report.left_standing] == stuck
        assert [position(name) for name in outcome.report.compensated] == [i for i in owed if i not in stuck]

    # Events: numbered 0..n-1, one start, one final, and each transition in a legal order.
    events = capture.events
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[0], SagaStarted)
    assert sum(isinstance(e, SagaCommitted | SagaRolledBackEvent | SagaStuck) for e in events) == 1
    expected_kinds: list[tuple[type, int]] = []
    for i in range(len(executed)):
        expected_kinds.append((StepStarted, i))
        if i < k:
            expected_kinds.append((StepSucceeded, i))
        else:
            expected_kinds.append((StepTimedOut if plan.fate is Fate.TIME_OUT else StepFailed, i))
    for i in owed if k < plan.steps else []:
        tries = min(plan.compensation_failures[i] + 1, ATTEMPTS)
        for attempt in range(1, tries + 1):
            expected_kinds.append((CompensationStarted, i))
            failed = attempt <= plan.compensation_failures[i]
            expected_kinds.append((CompensationFailed if failed else CompensationSucceeded, i))
    middle = events[1:-1]
    assert [(type(e), e.index) for e in middle] == expected_kinds  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=60, deadline=None)
@given(plan=plans())
def test_engine_invariants_hold_for_random_sagas(backend: str, plan: Plan) -> None:
    calls, capture, outcome, cancelled = anyio.run(run_plan, plan, backend=backend)
    check(plan, calls, capture, outcome, cancelled)
