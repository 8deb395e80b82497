"""Sagas on Temporal keep the engine's rules where a Temporal mechanism could bend them.

The rules themselves are one pure module both drivers call (`saga.rules`, tested in
`test_saga_rules`); what is left here is Temporal's own: a cancellation reaching an activity as a
native `Task.cancel()`; a step that blocks its event loop or whose worker is lost; two step objects
of one name; a `ToolError`'s refusal, a tool's own timeout, error text that is not valid UTF-8 and
the budget of a step cut at its own timeout crossing the activity boundary; a workflow input that
is no saga plan. Each test runs against the real dev server, like `test_temporal`, and checks the
whole outline and report, most of them against the same saga run in process (`both_ways`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import timedelta

import anyio
import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

import os

from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from aegis_nb import AegisContext, ToolError, WorkflowEngine
from aegis_nb.diagram import fold, render_mermaid
from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaReport, SagaStatus
from aegis_nb.saga.durable import StepNotRecoverable
from aegis_nb.saga.durable.codec import SCHEMA_VERSION
from aegis_nb.saga.durable.locator import StepResolver
from aegis_nb.saga.events import StepFailed, StepTimedOut
from aegis_nb.temporal import (
    PASSED_THROUGH,
    WORKFLOW_NAME,
    SagaCancelled,
    SagaWorkflow,
    TemporalSagaRunner,
    saga_worker,
)
from aegis_nb.temporal import activities as temporal_activities
from aegis_nb.temporal import workflow as temporal_workflow
from aegis_nb.temporal.activities import SagaActivities
from tests.steps import Boom, Calls, Recorded
from tests.temporal_support import (
    FAST_RETRY,
    Refusing,
    anyio_backend,
    both_ways,
    client,
    running,
    temporal_address,
    trail,
)

__all__ = ["anyio_backend", "client", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio


# -- a cancellation reaching a running step -------------------------------------------------------


class ShieldedCharge(Recorded):
    """Sends a charge, then waits in a shield until its activity has been told to cancel, and confirms.

    The shielded section is still running when the cancellation arrives, whatever the timing.
    """

    def __init__(self, name: str, calls: Calls) -> None:
        super().__init__(name, calls)
        self.started = anyio.Event()
        self.section: list[str] = []

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        self.started.set()
        self.section.append("charge sent")
        with anyio.CancelScope(shield=True):  # the charge is on its way: this must not be cut
            await activity.wait_for_cancelled()
            self.section.append("charge confirmed")
        return ctx.with_metadata({"charge_id": "CH-1"})


async def test_a_cancelled_step_finishes_its_shielded_section_and_is_then_compensated(client: Client) -> None:
    calls = Calls()
    charge = ShieldedCharge("charge", calls)
    steps = [Recorded("flight", calls), charge, Recorded("hotel", calls)]
    async with running(client, *steps) as runner:
        handle = await runner.start_saga(steps, AegisContext(), name="trip")
        await charge.started.wait()
        await handle.cancel()
        run = await handle.result()
    assert charge.section == ["charge sent", "charge confirmed"]
    # The charge completed in its shield, as under the engine: it succeeded, is compensated with its
    # own snapshot, and the hotel after it never starts.
    assert trail(run) == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "charge"),
        ("StepSucceeded", "charge"),
        ("CompensationStarted", "charge"),
        ("CompensationSucceeded", "charge"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "charge"),
        ("compensate", "charge"),
        ("compensate", "flight"),
    ]
    (charge_ctx,) = calls.contexts("compensate", "charge")
    assert dict(charge_ctx.metadata) == {"flight_id": "FLIGHT-0", "charge_id": "CH-1"}
    assert isinstance(run.error, SagaCancelled)
    assert run.report == SagaReport(
        run_id=run.run_id,
        saga="trip",
        status=SagaStatus.ROLLED_BACK,
        steps=("flight", "charge", "hotel"),
        succeeded=("flight", "charge"),
        failed_step=None,
        failure_kind=FailureKind.CANCELLED,
        cause=ErrorInfo("CancelledError", "the workflow was cancelled"),
        compensated=("charge", "flight"),
    )


class Gate(Recorded):
    """Says it started, then waits to be let through."""

    def __init__(self, name: str, calls: Calls) -> None:
        super().__init__(name, calls)
        self.started = anyio.Event()
        self.let_through = anyio.Event()

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.started.set()
        await self.let_through.wait()
        return await super().execute(ctx)


async def test_a_cancellation_between_steps_starts_no_further_step(client: Client) -> None:
    calls = Calls()
    flight = Gate("flight", calls)
    steps = [flight, Recorded("hotel", calls, in_doubt=True)]
    # A long heartbeat timeout: the flight's activity hears of the cancellation only after it is done.
    async with running(client, *steps, heartbeat_timeout=30.0) as runner:
        handle = await runner.start_saga(steps, AegisContext(), name="trip")
        await flight.started.wait()
        await handle.cancel()
        # Let the flight finish only once the workflow has acted on the cancellation (it asked the
        # activity to cancel), so that the flight's result arrives after it, between the steps.
        async for event in handle.handle.fetch_history_events(wait_new_event=True):
            if event.HasField("activity_task_cancel_requested_event_attributes"):
                break
        flight.let_through.set()
        run = await handle.result()
    assert trail(run) == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]  # nothing of the hotel's
    assert (run.report.failed_step, run.report.failure_kind) == (None, FailureKind.CANCELLED)
    assert isinstance(run.error, SagaCancelled)


def workflows_only(client: Client, queue: str) -> Worker:
    """A worker that runs the saga workflow and no activity, keeping no workflow in its cache."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    return Worker(
        client,
        task_queue=queue,
        workflows=[SagaWorkflow],
        max_cached_workflows=0,
        workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
    )


async def test_a_step_completing_in_the_workflow_task_of_the_cancellation_counts_as_done(
    client: Client,
) -> None:
    calls = Calls()
    flight = Gate("flight", calls)
    steps = [flight, Recorded("hotel", calls)]
    queue = f"test-{uuid.uuid4().hex}"
    activities = SagaActivities(StepResolver(steps))
    runner = TemporalSagaRunner(client, queue, steps=steps, compensation_retry=FAST_RETRY)
    async with Worker(client, task_queue=queue, activities=[activities.execute, activities.compensate]):
        async with workflows_only(client, queue):
            handle = await runner.start_saga(steps, AegisContext(), name="trip")
            await flight.started.wait()
        # No workflow worker: the flight's completion and the cancellation wait for the next one,
        # which gets both in one workflow task.
        flight.let_through.set()
        async for event in handle.handle.fetch_history_events(wait_new_event=True):
            if event.HasField("activity_task_completed_event_attributes"):
                break
        await handle.cancel()
        async with workflows_only(client, queue):
            run = await handle.result()
        history = await handle.handle.fetch_history()
    # The flight was booked: it succeeded, and the rollback undoes it.
    assert trail(run) == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]
    (flight_ctx,) = calls.contexts("compensate", "flight")
    assert dict(flight_ctx.metadata) == {"flight_id": "FLIGHT-0"}
    assert isinstance(run.error, SagaCancelled)
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    replayer = Replayer(workflows=[SagaWorkflow], workflow_runner=SandboxedWorkflowRunner(restrictions))
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


# -- a step that blocks its event loop, and workers that are lost ----------------------------------


class BlocksTheLoop(Recorded):
    """A synchronous call in an async step (``requests.post`` to a slow API): the loop stands still."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        time.sleep(1.6)  # noqa: ASYNC251 -- the point: blocks longer than the heartbeat timeout
        return ctx.with_metadata({"booking": "B-1"})


async def test_a_step_blocking_its_event_loop_is_busy_not_lost_and_runs_once(client: Client) -> None:
    calls = Calls()
    steps = [BlocksTheLoop("book", calls)]
    async with running(client, *steps, heartbeat_timeout=1.0) as runner:
        # A deadline, so that a step run again and again still ends the test.
        run = await runner.run_saga(steps, AegisContext().with_timeout(10), name="trip")
    assert calls.trail() == [("execute", "book")]
    assert trail(run) == [
        ("SagaStarted",),
        ("StepStarted", "book"),
        ("StepSucceeded", "book"),
        ("SagaCommitted",),
    ]
    assert dict(run.unwrap().metadata) == {"booking": "B-1"}


@pytest.fixture
def lost_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that never heartbeat, so Temporal takes every attempt still running at the heartbeat
    timeout for lost; and at most two attempts per activity, soon after each other."""
    monkeypatch.setattr(temporal_activities.SagaActivities, "_heartbeat", lambda self: None)
    policy = TemporalRetryPolicy(initial_interval=timedelta(milliseconds=10), maximum_attempts=2)
    monkeypatch.setattr(temporal_workflow, "_WORKER_LOSS_RETRY", policy)


class HangsFirst(Recorded):
    """Hangs on its first execute (its worker looks lost), then refuses: "no rooms left"."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        if len(self.calls.contexts("execute", self.name)) == 1:
            await anyio.sleep_forever()
        raise ToolError(self.name, "no rooms left")


LOST_ROLLBACK = [
    ("SagaStarted",),
    ("StepStarted", "flight"),
    ("StepSucceeded", "flight"),
    ("StepStarted", "hotel"),
    ("StepFailed", "hotel"),
    ("CompensationStarted", "hotel"),
    ("CompensationSucceeded", "hotel"),
    ("CompensationStarted", "flight"),
    ("CompensationSucceeded", "flight"),
    ("SagaRolledBackEvent",),
]


@pytest.mark.usefixtures("lost_workers")
async def test_a_step_run_again_after_a_lost_attempt_is_compensated_even_if_it_then_refuses(
    client: Client,
) -> None:
    calls = Calls()
    steps = [Recorded("flight", calls), HangsFirst("hotel", calls)]  # not in doubt
    async with running(client, *steps, heartbeat_timeout=0.5) as runner:
        run = await runner.run_saga(steps, AegisContext(), name="trip")
    # The lost first attempt may have booked: its key is undone, whatever the second one said.
    assert trail(run) == LOST_ROLLBACK
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("execute", "hotel"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    first, second = calls.contexts("execute", "hotel")
    (undo,) = calls.contexts("compensate", "hotel")
    assert first.idempotency_key == second.idempotency_key == undo.idempotency_key == f"{run.run_id}/1"
    assert run.report.cause == ErrorInfo("ToolError", "no rooms left", refused=True)
    assert (run.report.failed_step, run.report.compensated) == ("hotel", ("hotel", "flight"))


@pytest.mark.usefixtures("lost_workers")
async def test_a_step_whose_worker_is_lost_at_every_attempt_is_given_up_and_compensated(
    client: Client,
) -> None:
    calls = Calls()
    steps = [Recorded("flight", calls), Recorded("hotel", calls, hang=True)]  # not in doubt
    async with running(client, *steps, heartbeat_timeout=0.5) as runner:
        run = await runner.run_saga(steps, AegisContext(), name="trip")
    assert trail(run) == LOST_ROLLBACK
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("execute", "hotel"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    failed = run.events[4]
    assert isinstance(failed, StepFailed)
    assert failed.kind is FailureKind.ERROR
    assert failed.error == ErrorInfo(
        "WorkerLost", "step 'hotel': its worker stopped answering, 2 attempts in a row"
    )
    assert run.report.summary() == (
        "step 'hotel': its worker stopped answering, 2 attempts in a row — rolled back: hotel, flight"
    )


# -- two step objects of one name ------------------------------------------------------------------


def test_two_steps_of_one_name_cannot_be_registered_in_a_list() -> None:
    calls = Calls()
    outbound, inbound = Recorded("flight", calls), Recorded("flight", calls, fail="sold out")
    with pytest.raises(ValueError, match="two different steps") as caught:
        StepResolver([outbound, inbound])
    assert str(caught.value) == (
        "two different steps are registered under the name 'flight': a listed step is found again by "
        "its name, so only one of them could be; register them under keys of their own instead: "
        "steps={'flight': ..., 'another key': ...}"
    )
    # One object listed twice is one step: nothing is ambiguous.
    assert StepResolver([outbound, outbound]).registry == {"flight": outbound}


def test_two_objects_one_registered_name_would_locate_are_refused_before_anything_starts() -> None:
    calls = Calls()
    outbound, inbound = Recorded("flight", calls), Recorded("flight", calls, fail="sold out")
    runner = TemporalSagaRunner(client=None, task_queue="never", steps={"flight": outbound})  # type: ignore[arg-type]
    with pytest.raises(StepNotRecoverable) as caught:
        anyio.run(runner.start_saga, [outbound, inbound])
    assert str(caught.value) == (
        "saga 'saga': steps 'flight#1' and 'flight#2' are two objects that a Temporal worker would both "
        "rebuild as the step registered as 'flight'; register each under a key of its own: "
        "saga_worker(..., steps={'flight': ..., 'another key': ...}) and TemporalSagaRunner(..., "
        "steps=the same)"
    )
    assert calls.log == []


async def test_two_steps_of_one_name_registered_under_keys_of_their_own_run_as_in_the_engine(
    client: Client,
) -> None:
    def saga(calls: Calls) -> list[Recorded]:
        return [Recorded("flight", calls), Recorded("flight", calls, fail="return flight sold out")]

    local_calls, remote_calls = Calls(), Calls()
    local = await WorkflowEngine(compensation_retry=FAST_RETRY).run_saga(
        saga(local_calls), AegisContext(), name="trip"
    )
    outbound, inbound = steps = saga(remote_calls)
    registered = {"outbound": outbound, "return": inbound}
    queue = f"test-{uuid.uuid4().hex}"
    async with saga_worker(client, queue, steps=registered):
        runner = TemporalSagaRunner(client, queue, steps=registered, compensation_retry=FAST_RETRY)
        remote = await runner.run_saga(steps, AegisContext(), name="trip")
    assert (
        trail(remote)
        == trail(local)
        == [
            ("SagaStarted",),
            ("StepStarted", "flight#1"),
            ("StepSucceeded", "flight#1"),
            ("StepStarted", "flight#2"),
            ("StepFailed", "flight#2"),
            ("CompensationStarted", "flight#1"),
            ("CompensationSucceeded", "flight#1"),
            ("SagaRolledBackEvent",),
        ]
    )
    assert remote.report == replace(local.report, run_id=remote.run_id)
    assert remote.report.summary() == "return flight sold out — rolled back: flight#1"
    assert remote_calls.trail() == local_calls.trail()


# -- what crosses the activity boundary ------------------------------------------------------------


async def test_a_tool_error_keeps_its_refusal_and_the_report_is_the_engines(client: Client) -> None:
    _, remote = await both_ways(
        client, lambda calls: [Recorded("flight", calls), Refusing("hotel", calls, in_doubt=True)]
    )
    assert remote.report.cause == ErrorInfo("ToolError", "hotel: no rooms left", refused=True)
    failed = remote.events[4]
    assert isinstance(failed, StepFailed)
    assert failed.error == remote.report.cause


class SlowTool(Recorded):
    """Its tool call's own 250 ms budget ran out (no saga deadline at all)."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        raise ToolTimeoutError("search_hotels", 0.25)


async def test_a_tools_own_timeout_is_reported_with_its_budget(client: Client) -> None:
    local, remote = await both_ways(
        client, lambda calls: [Recorded("flight", calls), SlowTool("hotel", calls)]
    )
    timed_out = remote.events[4]
    assert isinstance(timed_out, StepTimedOut)
    assert timed_out.budget == 0.25
    assert render_mermaid(fold(remote.events)) == render_mermaid(fold(local.events))


# -- error text, budgets and plans the workflow could have mangled ---------------------------------


UNDECODABLE = os.fsdecode(b"caf\xe9.json")  # a file name read with surrogateescape: 'caf\udce9.json'


class FailsOnAFileName(Recorded):
    """Execute fails, and (with `undo_fails`) compensation fails once, naming an undecodable file."""

    def __init__(self, name: str, calls: Calls, *, fails: bool = False, undo_fails: bool = False) -> None:
        super().__init__(name, calls)
        self.fails = fails
        self.undo_fails = undo_fails

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.fails:
            self.calls.log.append(("execute", self.name, ctx))
            raise Boom(f"cannot read {UNDECODABLE}")
        return await super().execute(ctx)

    async def compensate(self, ctx: AegisContext) -> None:
        self.calls.log.append(("compensate", self.name, ctx))
        if self.undo_fails:
            self.undo_fails = False
            raise Boom(f"cannot delete {UNDECODABLE}")


# Regression guard: error text that is not valid UTF-8 is reported once, exactly as the engine reports it.
async def test_an_error_naming_an_undecodable_file_is_reported_once_and_exactly_as_in_the_engine(
    client: Client,
) -> None:
    calls = Calls()

    def saga(calls_here: Calls) -> list[Recorded]:
        nonlocal calls
        calls = calls_here
        return [
            FailsOnAFileName("flight", calls, undo_fails=True),
            FailsOnAFileName("card", calls, fails=True),
        ]

    _, remote = await both_ways(client, saga)
    # Each call ran once: the failure was not retried by Temporal as one it could not report.
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "card"),
        ("compensate", "flight"),
        ("compensate", "flight"),
    ]
    assert remote.report.cause == ErrorInfo("Boom", "cannot read caf\udce9.json")
    failed_undo = remote.events[6]
    assert getattr(failed_undo, "error", None) == ErrorInfo("Boom", "cannot delete caf\udce9.json")


# Regression guard: a step cut at its own timeout reports the budget it was given, as in the engine.
async def test_a_step_cut_at_its_own_timeout_reports_the_budget_it_was_given_as_in_the_engine(
    client: Client,
) -> None:
    _, remote = await both_ways(
        client, lambda calls: [Recorded("flight", calls), Recorded("hotel", calls, hang=True, timeout=0.5)]
    )
    # Not the time left when the activity began on the worker: the step's half second.
    assert remote.report.cause == ErrorInfo(
        "ToolTimeoutError", "step 'hotel' exceeded its deadline (budget 500.0 ms)"
    )
    timed_out = remote.events[4]
    assert isinstance(timed_out, StepTimedOut)
    assert timed_out.budget == pytest.approx(0.5)


# Regression guard: a workflow input that is no saga plan fails the workflow at once, not its task forever.
@pytest.mark.parametrize(
    "plan",
    [
        ["not", "a", "plan"],
        {
            "v": SCHEMA_VERSION,
            "saga": "trip",
            "steps": [],
            "context": {"metadata": 5},
            "timeout": None,
            "compensation_budget": 1.0,
            "compensation_retry": {"attempts": 1, "initial_delay": 0, "multiplier": 1, "max_delay": 0},
            "heartbeat_timeout": 1.0,
        },
    ],
    ids=["not-an-object", "bad-context"],
)
async def test_a_workflow_input_that_is_no_saga_plan_fails_the_workflow_at_once(
    client: Client, plan: object
) -> None:
    queue = f"test-{uuid.uuid4().hex}"
    async with saga_worker(client, queue):
        handle = await client.start_workflow(WORKFLOW_NAME, plan, id=uuid.uuid4().hex, task_queue=queue)
        # Not a workflow task failing (and retried) forever: the workflow itself fails.
        with anyio.fail_after(20), pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.non_retryable
    assert cause.message.startswith("not a saga plan this worker reads: RecordError(")
