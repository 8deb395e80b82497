"""Which activities heartbeat on Temporal: only one that may run longer than `heartbeat_after` (its
time left, its own timeout, or no limit at all; a compensation's budget), since every heartbeat costs
a round trip; a shorter one is watched by its start-to-close timeout, its limit plus a second. Read
from the activities' scheduling in the workflow's history. Asyncio only (temporalio runs on asyncio).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from aegis_nb import AegisContext, RetryPolicy
from aegis_nb.temporal import TemporalSagaRunner, saga_worker
from tests.steps import Calls, Recorded
from tests.temporal_support import anyio_backend, client, temporal_address

__all__ = ["anyio_backend", "client", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio


async def scheduled(client: Client, workflow_id: str) -> list[tuple[str, float, float]]:
    """Each scheduled activity: its type, heartbeat timeout and start-to-close timeout, in seconds."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    found = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            found.append(
                (
                    attributes.activity_type.name,
                    attributes.heartbeat_timeout.ToTimedelta().total_seconds(),
                    attributes.start_to_close_timeout.ToTimedelta().total_seconds(),
                )
            )
    return found


async def test_only_activities_that_may_run_longer_than_heartbeat_after_heartbeat(client: Client) -> None:
    calls = Calls()
    quick, unbounded = Recorded("quick", calls, timeout=2.0), Recorded("unbounded", calls)
    card = Recorded("card", calls, fail="declined")
    queue = f"beats-{uuid.uuid4().hex}"
    steps = [quick, unbounded, card]
    runner = TemporalSagaRunner(
        client,
        queue,
        steps=steps,
        heartbeat_timeout=1.0,
        heartbeat_after=10.0,
        compensation_budget=5.0,
        compensation_retry=RetryPolicy.never(),
    )
    async with saga_worker(client, queue, steps=steps):
        run = await runner.run_saga(steps, AegisContext(), name="trip")
    assert await scheduled(client, run.run_id) == [
        # A 2 s step timeout: no heartbeat, cut off 1 s past its limit.
        ("aegis_nb.execute", 0.0, 3.0),
        # No limit: heartbeats, a day per attempt.
        ("aegis_nb.execute", 1.0, timedelta(days=1).total_seconds()),
        ("aegis_nb.execute", 1.0, timedelta(days=1).total_seconds()),
        # Compensations with a 5 s budget: no heartbeat, 6 s per attempt.
        ("aegis_nb.compensate", 0.0, 6.0),
        ("aegis_nb.compensate", 0.0, 6.0),
    ]
