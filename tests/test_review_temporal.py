"""Sagas on Temporal: a failing events query, undecodable error text, deadline budgets, bad plans.

Asyncio only, against the session's real Temporal dev server, like tests/test_temporal.py.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from typing import Any

import anyio
import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    StartWorkflowInput,
    WorkflowFailureError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from aegis_nb import AegisContext, ServerUnreachable, WorkflowEngine, step
from aegis_nb.kernel.report import ErrorInfo
from aegis_nb.saga.durable.codec import SCHEMA_VERSION
from aegis_nb.saga.events import StepTimedOut
from aegis_nb.temporal import WORKFLOW_NAME, TemporalSagaRunner, saga_worker
from aegis_nb.testing import EventCapture
from tests.servers.launch import free_port
from tests.steps import Boom, Calls, Recorded
from tests.temporal_support import anyio_backend, client, temporal_address
from tests.test_temporal import FAST_RETRY, running, trail

__all__ = ["anyio_backend", "client", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio


# -- a failing events query --------------------------------------------------------------------


class FailingQueries(Interceptor):
    """Every workflow query fails as it does when no worker answers within the server's timeout."""

    def __init__(self) -> None:
        self.failed = anyio.Event()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _FailingQueries(next, self.failed)


class _FailingQueries(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, failed: anyio.Event) -> None:
        super().__init__(next)
        self._failed = failed

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._failed.set()
        raise RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")


class WaitsForAFailedQuery(Recorded):
    """Completes only once the caller's events query has failed at least once."""

    def __init__(self, name: str, calls: Calls, failed: anyio.Event) -> None:
        super().__init__(name, calls)
        self.failed = failed

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await self.failed.wait()
        return await super().execute(ctx)


async def test_a_failing_events_query_neither_cancels_the_saga_nor_fails_the_caller(
    client: Client, temporal_address: str
) -> None:
    queries = FailingQueries()
    calls = Calls()
    steps = [Recorded("flight", calls), WaitsForAFailedQuery("hotel", calls, queries.failed)]
    capture = EventCapture()
    runner_client = await Client.connect(temporal_address, interceptors=[queries])
    async with running(client, *steps, runner_client=runner_client) as runner:
        run = await runner.run_saga(steps, AegisContext(), name="trip", sinks=[capture])
    expected = [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepSucceeded", "hotel"),
        ("SagaCommitted",),
    ]
    assert (trail(run), capture.trail()) == (expected, expected)  # sinks caught up from the outcome
    assert run.error is None
    assert calls.trail() == [("execute", "flight"), ("execute", "hotel")]


# -- error text that is not valid UTF-8 ----------------------------------------------------------

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


async def test_an_error_naming_an_undecodable_file_is_reported_once_and_exactly_as_in_the_engine(
    client: Client,
) -> None:
    def saga(calls: Calls) -> list[Recorded]:
        return [
            FailsOnAFileName("flight", calls, undo_fails=True),
            FailsOnAFileName("card", calls, fails=True),
        ]

    local_calls, remote_calls = Calls(), Calls()
    local = await WorkflowEngine(compensation_retry=FAST_RETRY).run_saga(
        saga(local_calls), AegisContext(), name="trip"
    )
    steps = saga(remote_calls)
    async with running(client, *steps) as runner:
        remote = await runner.run_saga(steps, AegisContext(), name="trip")
    # Each call ran once: the failure was not retried by Temporal as one it could not report.
    assert (
        remote_calls.trail()
        == local_calls.trail()
        == [
            ("execute", "flight"),
            ("execute", "card"),
            ("compensate", "flight"),
            ("compensate", "flight"),
        ]
    )
    assert trail(remote) == trail(local)
    assert remote.report == replace(local.report, run_id=remote.run_id)
    assert remote.report.cause == ErrorInfo("Boom", "cannot read caf\udce9.json")
    failed_undo = remote.events[6]
    assert getattr(failed_undo, "error", None) == ErrorInfo("Boom", "cannot delete caf\udce9.json")


# -- the budget of a step cut at its deadline ----------------------------------------------------


async def test_a_step_cut_at_its_own_timeout_reports_the_budget_it_was_given_as_in_the_engine(
    client: Client,
) -> None:
    def saga(calls: Calls) -> list[Recorded]:
        return [Recorded("flight", calls), Recorded("hotel", calls, hang=True, timeout=0.5)]

    local = await WorkflowEngine(compensation_retry=FAST_RETRY).run_saga(
        saga(Calls()), AegisContext(), name="trip"
    )
    steps = saga(Calls())
    async with running(client, *steps) as runner:
        remote = await runner.run_saga(steps, AegisContext(), name="trip")
    assert trail(remote) == trail(local)
    # Not the time left when the activity began on the worker: the step's half second.
    assert remote.report == replace(local.report, run_id=remote.run_id)
    assert remote.report.cause == ErrorInfo(
        "ToolTimeoutError", "step 'hotel' exceeded its deadline (budget 500.0 ms)"
    )
    timed_out = remote.events[4]
    assert isinstance(timed_out, StepTimedOut)
    assert timed_out.budget == pytest.approx(0.5)


# -- a workflow input that is no saga plan -------------------------------------------------------


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


# -- no Temporal server at the address ------------------------------------------------------------


@step(name="Book")
async def book(ctx: AegisContext) -> None:
    return None


@book.compensation
async def unbook(ctx: AegisContext) -> None:
    return None


async def test_no_server_at_the_address_is_one_line_naming_it() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    lazy = await Client.connect(address, lazy=True)  # connects on first use: in start_saga
    with pytest.raises(ServerUnreachable) as caught:
        await TemporalSagaRunner(lazy, "trips").execute_saga([book])
    assert str(caught.value) == f"no Temporal server reachable at {address}: Connection refused"


class Unavailable(Interceptor):
    """Starting a workflow fails with `error`, as it does when the client finds no server."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Unavailable(next, self.error)


class _Unavailable(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, error: Exception) -> None:
        super().__init__(next)
        self._error = error

    async def start_workflow(self, input: StartWorkflowInput) -> Any:
        raise self._error


DNS_FAILURE = (  # temporalio 1.35's words, on one line, when a lazy client's host does not resolve
    "Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError("
    'ConnectError("dns error", Custom { kind: Uncategorized, error: "failed to lookup address '
    'information: Name or service not known" })))'
)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        # After the client's retries (about ten seconds) found no server where it connected before.
        (RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b""), "tcp connect error"),
        (RuntimeError(DNS_FAILURE), "failed to lookup address information: Name or service not known"),
    ],
    ids=["server-gone", "no-such-host"],
)
async def test_a_server_that_cannot_be_reached_is_one_line_naming_it(
    temporal_address: str, error: Exception, reason: str
) -> None:
    runner_client = await Client.connect(temporal_address, interceptors=[Unavailable(error)])
    with pytest.raises(ServerUnreachable) as caught:
        await TemporalSagaRunner(runner_client, "trips").execute_saga([book])
    assert str(caught.value) == f"no Temporal server reachable at {temporal_address}: {reason}"
    assert caught.value.__cause__ is error


async def test_other_failures_to_start_are_not_taken_for_an_unreachable_server(temporal_address: str) -> None:
    error = RPCError("namespace not found", RPCStatusCode.NOT_FOUND, b"")
    runner_client = await Client.connect(temporal_address, interceptors=[Unavailable(error)])
    with pytest.raises(RPCError) as caught:
        await TemporalSagaRunner(runner_client, "trips").execute_saga([book])
    assert caught.value is error
