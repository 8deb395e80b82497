"""Sagas on Temporal when a worker dies: a worker process SIGKILLed mid-step, and a new one started.

The steps act on the mock agency's SQLite ledger by idempotency key, so the test sees every effect
made by either worker. Asyncio only, like `test_temporal` (temporalio runs on asyncio alone).
"""

from __future__ import annotations

import signal
import uuid
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

from temporalio.client import Client

from aegis_nb import AegisContext, RetryPolicy, SagaRolledBack
from aegis_nb.mock import Ledger
from aegis_nb.temporal import TemporalSagaRunner
from aegis_nb.testing import outline
from tests.temporal_support import (
    LedgerCard,
    LedgerFlight,
    LedgerHotel,
    anyio_backend,
    calls,
    client,
    read_until,
    temporal_address,
    worker_process,
)

__all__ = ["anyio_backend", "client", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("declined", [False, True], ids=["commits", "rolls-back"])
async def test_a_worker_killed_mid_step_is_replaced_and_the_saga_ends_exactly_once(
    client: Client, temporal_address: str, tmp_path: Path, declined: bool
) -> None:
    ledger = str(tmp_path / "ledger.db")
    Ledger(ledger).close()  # creates the schema before two processes race to
    queue = f"kill-{uuid.uuid4().hex}"
    runner = TemporalSagaRunner(client, queue, heartbeat_timeout=1.0, compensation_retry=RetryPolicy.never())
    steps = [LedgerFlight(ledger), LedgerHotel(ledger), LedgerCard(ledger, declined=declined)]
    with anyio.fail_after(60):
        async with worker_process(temporal_address, queue, hang=True) as first:
            handle = await runner.start_saga(steps, AegisContext({"traveller": "ada"}), name="trip")
            await read_until(first, "blocked")  # the hotel is booked, and its worker hangs
            first.send_signal(signal.SIGKILL)
            await first.wait()
        async with worker_process(temporal_address, queue, hang=False):
            run = await handle.result()

    # The hotel step ran twice (once per worker), its effect landed once, under one key.
    assert calls(ledger)[:3] == ["execute BookFlight", "execute ReserveHotel", "execute ReserveHotel"]
    with closing(Ledger(ledger)) as books:
        state = books.state()
    if not declined:
        assert [outline(event) for event in run.events] == [
            ("SagaStarted",),
            ("StepStarted", "BookFlight"),
            ("StepSucceeded", "BookFlight"),
            ("StepStarted", "ReserveHotel"),
            ("StepSucceeded", "ReserveHotel"),
            ("StepStarted", "ChargeCard"),
            ("StepSucceeded", "ChargeCard"),
            ("SagaCommitted",),
        ]
        assert (len(state.flights), len(state.hotels), len(state.charges)) == (1, 1, 1)
        assert state.cancellations == 0
        assert [b.idempotency_key for b in (*state.flights, *state.hotels)] == [
            f"{run.run_id}/0",
            f"{run.run_id}/1",
        ]
        assert dict(run.unwrap().metadata) == {
            "traveller": "ada",
            "flight_id": "FL-0001",
            "hotel_id": "HT-0001",
            "charge_id": "CH-0001",
        }
    else:
        assert [outline(event) for event in run.events][5:] == [
            ("StepStarted", "ChargeCard"),
            ("StepFailed", "ChargeCard"),
            ("CompensationStarted", "ReserveHotel"),
            ("CompensationSucceeded", "ReserveHotel"),
            ("CompensationStarted", "BookFlight"),
            ("CompensationSucceeded", "BookFlight"),
            ("SagaRolledBackEvent",),
        ]
        assert isinstance(run.error, SagaRolledBack)
        assert state.is_empty
        assert state.cancellations == 2  # one flight, one hotel: nothing booked twice, nothing left
