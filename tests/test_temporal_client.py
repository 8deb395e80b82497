"""The Temporal runner as a client: what it makes of a failing events query and of a server it cannot reach.

A failing events query neither cancels the saga nor fails the caller (its sinks catch up from the
outcome); no server at the address, or one gone or not resolvable, is one `ServerUnreachable` line
naming the address; any other failure to start a workflow propagates as itself. Asyncio only, against
the session's real Temporal dev server, like tests/test_temporal.py.
"""

from __future__ import annotations

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
)
from temporalio.service import RPCError, RPCStatusCode

from aegis_nb import AegisContext, ServerUnreachable, step
from aegis_nb.temporal import TemporalSagaRunner
from aegis_nb.testing import EventCapture
from tests.servers.launch import free_port
from tests.steps import Calls, Recorded
from tests.temporal_support import anyio_backend, client, running, temporal_address, trail

__all__ = ["anyio_backend", "client", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio


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


# Regression guard: a failing events query neither cancels the saga nor fails its caller.
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


@step(name="Book")
async def book(ctx: AegisContext) -> None:
    return None


@book.compensation
async def unbook(ctx: AegisContext) -> None:
    return None


# Regression guard: no server at the address is one ServerUnreachable line naming it.
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


# Regression guard: a server gone or not resolvable is the same one line, the cause kept.
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


# Regression guard: other failures to start are not taken for an unreachable server.
async def test_other_failures_to_start_are_not_taken_for_an_unreachable_server(temporal_address: str) -> None:
    error = RPCError("namespace not found", RPCStatusCode.NOT_FOUND, b"")
    runner_client = await Client.connect(temporal_address, interceptors=[Unavailable(error)])
    with pytest.raises(RPCError) as caught:
        await TemporalSagaRunner(runner_client, "trips").execute_saga([book])
    assert caught.value is error
