"""`SagaWorkflow`: the engine's forward phase and rollback as a deterministic Temporal workflow.

Each step's execute and each compensation attempt is one activity (`activities.py`); the workflow
keeps the order, the snapshots, the deadlines and the events, on workflow time (Unix seconds, from
history, so a replay after a worker crash rebuilds exactly the same run). Every decision the engine
makes is made here by the same functions (`saga.rules`): admission under the deadline, a group's
member start, accepting a result, the failure event, what is owed and in what order, the retry
schedule. What is Temporal's own stays here:

- compensation retries run *here*, one activity per attempt, so each attempt has its own
  `CompensationStarted`/`CompensationFailed` events and the step's `RetryPolicy` backoff is a
  durable workflow timer. Temporal's own activity retries are kept for what is not the step's
  fault: a worker that died or stopped heartbeating (the attempt runs again elsewhere, with the same
  idempotency key), at most `WORKER_LOSS_ATTEMPTS` times. A step whose attempt was lost may have
  acted, so it is owed its compensation when it finally fails, in doubt or not;
- a workflow cancelled between steps starts no further step (refused, as one with no time left);
- a workflow cancellation reaches the running step (a step that completes all the same counts as
  succeeded, and is compensated), the rollback runs shielded from it, and the workflow then ends
  cancelled, the outcome left in its memo (a cancelled workflow has no result).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from functools import partial
from typing import Any, TypeAlias

from temporalio import workflow
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from aegis_nb.kernel.context import AegisContext
    from aegis_nb.kernel.report import ErrorInfo, FailureKind
    from aegis_nb.saga.durable.codec import SCHEMA_VERSION, RecordError, context_from_json, event_to_json
    from aegis_nb.saga.durable.steprecord import StepRecord
    from aegis_nb.saga.events import (
        CompensationFailed,
        CompensationStarted,
        CompensationSucceeded,
        SagaCommitted,
        SagaStarted,
        StepStarted,
        StepSucceeded,
    )
    from aegis_nb.saga.parallel import StepGroup, merge_outputs
    from aegis_nb.saga.recorder import RunRecorder
    from aegis_nb.saga.rollback import conclude_rollback
    from aegis_nb.saga.rules import (
        OwedGroup,
        accept,
        admit,
        backoff,
        failure_event,
        member_starts,
        owed_group,
        owes_compensation,
        retry_policy,
        rollback_order,
        sibling_cancelled,
    )
    from aegis_nb.temporal.failures import StepError, describe, step_error
    from aegis_nb.temporal.names import (
        COMPENSATE_ACTIVITY,
        EVENTS_QUERY,
        EXECUTE_ACTIVITY,
        OUTCOME_MEMO,
        WORKFLOW_NAME,
    )
    from aegis_nb.temporal.plan import SagaPlan, StepCall, restamp

BACKSTOP_GRACE = 1.0
"""Seconds past a call's limit before the server gives up on its worker (the worker cuts it at the limit)."""

NO_DEADLINE_ATTEMPT = timedelta(days=1)
"""How long one attempt of a step without any deadline may run (Temporal needs some timeout)."""

WORKER_LOSS_ATTEMPTS = 5
"""Attempts of one activity when its workers keep getting lost (a step that crashes its process every
time, say): past that, the step fails, and is compensated, since each lost attempt may have acted."""

# Only a lost worker (heartbeat or start-to-close timeout) is retried by Temporal: every error the
# step raises comes back non-retryable, because failing the step is the saga's decision.
_WORKER_LOSS_RETRY = TemporalRetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=WORKER_LOSS_ATTEMPTS,
)


@workflow.defn(name=WORKFLOW_NAME)
class SagaWorkflow:
    """One saga run; its id is the run id, so idempotency keys are ``workflow_id/position``."""

    def __init__(self) -> None:
        self._recorder: RunRecorder | None = None

    @workflow.query(name=EVENTS_QUERY)
    def events(self, after: int = 0) -> list[dict[str, Any]]:
        """The run's events so far as codec JSON, from sequence number `after` on."""
        if self._recorder is None:
            return []
        return [event_to_json(event) for event in self._recorder.events[after:]]

    @workflow.run
    async def run(self, plan_json: Any) -> dict[str, Any]:
        # Typed Any: a payload that is no JSON object must reach the check below, not fail decoding.
        info = workflow.info()
        # The deadline counts from when the client started the workflow, queueing included.
        started = info.start_time.timestamp()
        try:
            plan = SagaPlan.from_json(plan_json)
            deadline = math.inf if plan.timeout is None else started + plan.timeout
            initial = context_from_json({**plan.context, "deadline": _finite(deadline)})
        except (KeyError, TypeError, ValueError) as exc:
            # Fail the workflow, rather than its task: a task failure is retried forever.
            raise ApplicationError(
                f"not a saga plan this worker reads: {exc!r}", non_retryable=True
            ) from None
        recorder = self._recorder = RunRecorder(info.workflow_id, workflow.time, None, ())
        return await _Run(plan, recorder, started).run(initial)


OwedStep: TypeAlias = "tuple[StepRecord, AegisContext]"
"""One step to undo, with the context its compensation gets."""

Owed: TypeAlias = "OwedStep | OwedGroup[OwedStep]"
"""What the rollback undoes: one step, or a group's members."""


class _Failed(Exception):
    """A step or a parallel group failed, its events recorded and its debts noted.

    `error`: the saga's failure.
    """

    def __init__(self, error: StepError) -> None:
        super().__init__(str(error))
        self.error = error


class _Run:
    """The forward phase, then commit or rollback (the engine's `Execution`, on workflow time)."""

    def __init__(self, plan: SagaPlan, recorder: RunRecorder, started: float) -> None:
        self.plan = plan
        self.recorder = recorder
        self.started = started
        self.owed: list[Owed] = []  # oldest first
        self.cancel_seen = False

    async def run(self, current: AegisContext) -> dict[str, Any]:
        recorder, plan = self.recorder, self.plan
        names = tuple(s.name for s in plan.steps)
        await recorder.record(
            SagaStarted(
                *recorder.header(), saga=plan.saga, steps=names, deadline=current.deadline, context=current
            )
        )
        try:
            for entry in _entries(plan.steps):
                if entry[0].group is not None:
                    current = await self._run_group(entry, current)
                else:
                    (step,) = entry
                    step_input = restamp(current, current.deadline, recorder.run_id, step.index)
                    current = await self._step(step, step_input, self.owed.append)
        except (Exception, asyncio.CancelledError) as exc:
            return await self._fail(exc)
        duration = workflow.time() - self.started
        await recorder.record(
            SagaCommitted(*recorder.header(), saga=plan.saga, duration=duration, context=current)
        )
        return _outcome(recorder)

    async def _step(
        self,
        step: StepRecord,
        step_input: AegisContext,
        owe: Callable[[OwedStep], object],
        settle: Callable[[StepError], StepError] = lambda error: error,
        on_start: Callable[[workflow.ActivityHandle[Any]], object] | None = None,
    ) -> AegisContext:
        """Run `step` on `step_input` as the engine's `Execution._execute` does: admitted, recorded,
        executed, its result accepted and recorded, what it owes noted; its output.

        A failure once it began is recorded as `settle` names it (a group's member may have been
        cut off by a sibling), noted as owed if it may have acted, and raised as `_Failed`.
        """
        recorder = self.recorder
        started = workflow.time()
        limit = self._limit(step, step_input, started)
        group = None if step.group is None else step.group.start
        await recorder.record(StepStarted(*recorder.header(), index=step.index, step=step.name, group=group))
        try:
            result = await self._execute(step, step_input, limit, started, on_start)
            output = accept(step.name, step_input, result)
        except (Exception, asyncio.CancelledError) as exc:
            error = settle(describe(exc))
            if owes_compensation(step.in_doubt, error.info, lost=error.lost):
                owe((step, step_input))
            await self._record_failure(step, started, error, group)
            raise _Failed(error) from None
        owe((step, output))
        duration = workflow.time() - started
        await recorder.record(
            StepSucceeded(
                *recorder.header(),
                index=step.index,
                step=step.name,
                duration=duration,
                context=output,
                group=group,
            )
        )
        return output

    def _limit(self, step: StepRecord, step_input: AegisContext, step_started: float) -> float:
        """When `step`, starting now, is cut off; a step refused before it starts raises (`admit`),
        and so does one whose workflow was cancelled before it started."""
        limit = admit(step.name, step_input.deadline, step.timeout, step_started)
        if workflow.cancellation_reason() is not None:
            raise asyncio.CancelledError  # requested between steps: the next one is not run
        return limit

    async def _run_group(self, members: tuple[StepRecord, ...], start: AegisContext) -> AegisContext:
        """A parallel group's members as concurrent activities on `start`; the merged output.

        As the engine's `Execution.run_group`: the first member to fail cancels the others and the
        group waits for them to settle; each member is recorded as it settles; the group owes the
        members that succeeded and the in-doubt ones that failed (in start order), then the first
        failure is the saga's. Two members writing one key differently fail the group.
        """
        run_id = self.recorder.run_id
        group = members[0].group
        assert group is not None
        owed: list[OwedStep] = []
        outputs: dict[int, AegisContext] = {}
        failed: list[StepError] = []
        handles: dict[int, workflow.ActivityHandle[Any]] = {}

        async def member(step: StepRecord) -> None:
            if not member_starts(failed):  # a sibling failed before this member's turn came
                return

            def settle(error: StepError) -> StepError:
                handles.pop(step.index, None)
                if error.kind is FailureKind.CANCELLED and failed and workflow.cancellation_reason() is None:
                    # Cut off by a sibling's failure: named so, and not the saga's failure.
                    return StepError(sibling_cancelled(failed[0].info.type), FailureKind.CANCELLED)
                failed.append(error)
                for handle in handles.values():  # the group's failure: cancel the others
                    if not handle.done():
                        handle.cancel()
                return error

            step_input = restamp(start, start.deadline, run_id, step.index)
            try:
                outputs[step.index] = await self._step(
                    step, step_input, owed.append, settle, partial(handles.__setitem__, step.index)
                )
            except _Failed:
                pass  # recorded, owed and settled
            except (Exception, asyncio.CancelledError) as exc:  # refused before it began: not recorded
                settle(describe(exc))
            handles.pop(step.index, None)

        try:
            await asyncio.gather(*(member(step) for step in members))
        finally:
            if (settled := owed_group(owed, _index, group.compensation)) is not None:
                self.owed.append(settled)
        if failed:
            raise _Failed(failed[0])
        ordered = [outputs[step.index] for step in members]
        try:
            return merge_outputs(start, ordered, [step.name for step in members])
        except Exception as exc:
            raise _Failed(describe(exc)) from None

    async def _execute(
        self,
        step: StepRecord,
        ctx: AegisContext,
        limit: float,
        step_started: float,
        on_start: Callable[[workflow.ActivityHandle[Any]], object] | None = None,
    ) -> AegisContext:
        call = StepCall(step.name, step.locator, step.args, step.kwargs, ctx, _finite(limit))
        # Without a deadline an attempt gets a day; with one, the server's backstop is the limit plus
        # a grace (the worker itself cuts the call at the limit), for each attempt and for them all:
        # without heartbeats, that is when a lost worker is noticed.
        bound = limit - workflow.time()
        per_attempt = overall = None
        if limit == math.inf:
            per_attempt = NO_DEADLINE_ATTEMPT
        else:
            per_attempt = overall = timedelta(seconds=max(bound, 0.0) + BACKSTOP_GRACE)
        handle = workflow.start_activity(
            EXECUTE_ACTIVITY,
            call.to_json(),
            heartbeat_timeout=self._heartbeat_timeout(bound),
            retry_policy=_WORKER_LOSS_RETRY,
            # The rollback must not start while the step may still be acting.
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            start_to_close_timeout=per_attempt,
            schedule_to_close_timeout=overall,
        )
        if on_start is not None:
            on_start(handle)
        try:
            result = await self._cancelling(handle)
        except ActivityError as exc:
            raise self._step_error(exc, step.name, limit - step_started) from None
        try:
            return context_from_json(result)
        except (RecordError, TypeError, KeyError) as exc:
            info = ErrorInfo("StepResultError", f"step {step.name!r}: {exc}")
            raise StepError(info, FailureKind.ERROR) from None

    async def _fail(self, exc: BaseException) -> dict[str, Any]:
        """Roll back what is owed after `exc` stopped the forward phase; the outcome, or the
        cancellation the workflow ends in."""
        recorder, plan = self.recorder, self.plan
        # Recorded and owed already, unless refused (or cancelled) before it began.
        error = exc.error if isinstance(exc, _Failed) else describe(exc)
        kind, cause = error.kind, error.info
        if kind is FailureKind.CANCELLED:
            self.cancel_seen = True
        await self._roll_back(reversed(self.owed))
        await conclude_rollback(recorder, plan.saga, self.started, kind, cause)
        outcome = _outcome(recorder)
        if self.cancel_seen or workflow.cancellation_reason() is not None:
            # A cancelled workflow carries no result: the memo keeps the events for the client.
            workflow.upsert_memo({OUTCOME_MEMO: outcome})
            raise CancelledError("the saga was cancelled; its completed steps were rolled back")
        return outcome

    async def _record_failure(
        self, step: StepRecord, step_started: float, error: StepError, group: int | None
    ) -> None:
        """Record how `step`'s execute failed: timed out, or failed (`group`: its group's first index)."""
        recorder = self.recorder
        duration = workflow.time() - step_started
        await recorder.record(
            failure_event(
                recorder.header(),
                step.index,
                step.name,
                group,
                duration,
                error.kind,
                error.info,
                error.budget,
            )
        )

    async def _roll_back(self, owed: Iterable[Owed]) -> None:
        """Compensate `owed` (newest first) in the rollback's order: a concurrent group's members
        together, each with its own retries; any other step alone."""
        for item in rollback_order(owed):
            if not isinstance(item, OwedGroup):
                step, snapshot = item
                await self._compensate_step(step, snapshot, step.group)
            else:
                await asyncio.gather(
                    *(self._compensate_step(step, snapshot, step.group) for step, snapshot in item.members)
                )

    async def _compensate_step(
        self, step: StepRecord, snapshot: AegisContext, placed: StepGroup | None
    ) -> None:
        """Compensate one step, each attempt an activity, retried per its policy."""
        recorder, budget = self.recorder, self.plan.compensation_budget
        group = None if placed is None else placed.start
        policy = retry_policy(step.retry, self.plan.compensation_retry)
        attempt = 1
        while True:
            now = workflow.time()
            ctx = restamp(snapshot, now + budget, snapshot.run_id, snapshot.step_index)
            await recorder.record(
                CompensationStarted(
                    *recorder.header(), index=step.index, step=step.name, attempt=attempt, group=group
                )
            )
            try:
                result = await self._shielded(partial(self._compensate, step, ctx, budget))
            except ActivityError as exc:
                error = self._step_error(exc, step.name, budget).info
                delay = backoff(policy, attempt)
                await recorder.record(
                    CompensationFailed(
                        *recorder.header(),
                        index=step.index,
                        step=step.name,
                        attempt=attempt,
                        duration=workflow.time() - now,
                        error=error,
                        will_retry=delay is not None,
                        group=group,
                    )
                )
                if delay is None:
                    return
                if delay > 0:  # a durable timer, so a backoff survives a worker restart
                    await self._shielded(partial(workflow.sleep, delay))
                attempt += 1
                continue
            await recorder.record(
                CompensationSucceeded(
                    *recorder.header(),
                    index=step.index,
                    step=step.name,
                    attempt=attempt,
                    duration=workflow.time() - now,
                    # An older worker's activity returns None: undone, as it always meant.
                    nothing_to_undo=isinstance(result, dict) and result.get("nothing_to_undo") is True,
                    group=group,
                )
            )
            return

    def _step_error(self, exc: ActivityError, name: str, budget: float) -> StepError:
        """What the failed activity of step `name`, given `budget` seconds, means for the saga."""
        # Read here, at call time: tests shorten the worker-loss retries by patching this module.
        return step_error(exc, name, budget, attempts=_WORKER_LOSS_RETRY.maximum_attempts)

    def _compensate(self, step: StepRecord, ctx: AegisContext, budget: float) -> Awaitable[Any]:
        call = StepCall(step.name, step.locator, step.args, step.kwargs, ctx, ctx.deadline)
        return workflow.start_activity(
            COMPENSATE_ACTIVITY,
            call.to_json(),
            start_to_close_timeout=timedelta(seconds=budget + BACKSTOP_GRACE),
            heartbeat_timeout=self._heartbeat_timeout(budget),
            retry_policy=_WORKER_LOSS_RETRY,
        )

    def _heartbeat_timeout(self, bound: float) -> timedelta | None:
        """The heartbeat timeout of an activity that may run `bound` seconds; None: it sends none.

        A heartbeat costs a round trip to the server; it buys a lost worker noticed, and a
        cancellation delivered, within a heartbeat timeout rather than at the attempt's end.
        """
        if not self.plan.heartbeats(bound):
            return None
        return timedelta(seconds=self.plan.heartbeat_timeout)

    async def _cancelling(self, handle: workflow.ActivityHandle[Any]) -> Any:
        """The step activity's outcome; a workflow cancellation meanwhile is passed on to it, then awaited.

        Awaited directly, the SDK drops an outcome that arrives in the same workflow task as the
        cancellation and raises `CancelledError` instead: a step that completed would count as cut
        off mid-flight and go uncompensated. So the activity is shielded, and told to cancel only if
        it is still running once all that came with the cancellation has landed (conditions are
        checked only when nothing else is ready to run).
        """
        while True:
            try:
                return await asyncio.shield(handle)
            except asyncio.CancelledError:
                if handle.cancelled():  # cancelled before it was scheduled: it never ran
                    raise
                self.cancel_seen = True
                await workflow.wait_condition(lambda: True)
                if not handle.done():
                    handle.cancel()

    async def _shielded(self, start: Callable[[], Awaitable[Any]]) -> Any:
        """Await what `start` begins, even if the workflow is cancelled meanwhile: a rollback finishes."""
        task = asyncio.ensure_future(start())
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.cancelled():
                    raise
                self.cancel_seen = True


def _entries(steps: tuple[StepRecord, ...]) -> list[tuple[StepRecord, ...]]:
    """The plan's flat steps as its entries: a step alone, or a parallel group's members."""
    entries: list[tuple[StepRecord, ...]] = []
    position = 0
    while position < len(steps):
        group = steps[position].group
        size = 1 if group is None else group.size
        entries.append(steps[position : position + size])
        position += size
    return entries


def _index(owed: OwedStep) -> int:
    return owed[0].index


def _finite(value: float) -> float | None:
    return None if value == math.inf else value


def _outcome(recorder: RunRecorder) -> dict[str, Any]:
    return {"v": SCHEMA_VERSION, "events": [event_to_json(event) for event in recorder.events]}
