"""Steps for engine tests: `aegis_nb.testing`'s recording step and call log, under the suite's names.

`Recorded` is `RecordingStep` raising `Boom`; `Calls` is `CallLog`. Also the flight, hotel and card
saga with its rolled-back trail, and `CheckpointingJournal`, an in-memory journal whose writes await
as a real one's do.
"""

from __future__ import annotations

import anyio
import pytest

from aegis_nb import InMemoryJournal, RetryPolicy, SagaEvent
from aegis_nb.testing import CallLog, InjectedFailure, RecordingStep

Calls = CallLog


ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""For tests of asyncio's own machinery (`Task.cancel()`, `asyncio.timeout`): asyncio only."""

NO_WAIT = RetryPolicy(attempts=3, initial_delay=0)
"""Three attempts with no backoff: retries without waiting."""


class Boom(InjectedFailure):
    """The failure test steps raise."""


class Recorded(RecordingStep):
    """`RecordingStep` failing with `Boom` (see `aegis_nb.testing.RecordingStep` for its options)."""

    failure = Boom


def travel(calls: Calls, **card: object) -> list[Recorded]:
    """The flight, hotel and card saga; `card` holds the card step's options (``fail=...``)."""
    return [Recorded("flight", calls), Recorded("hotel", calls), Recorded("card", calls, **card)]  # type: ignore[arg-type]


ROLLED_BACK_TRAIL = [
    ("SagaStarted",),
    ("StepStarted", "flight"),
    ("StepSucceeded", "flight"),
    ("StepStarted", "hotel"),
    ("StepSucceeded", "hotel"),
    ("StepStarted", "card"),
    ("StepFailed", "card"),
    ("CompensationStarted", "hotel"),
    ("CompensationSucceeded", "hotel"),
    ("CompensationStarted", "flight"),
    ("CompensationSucceeded", "flight"),
    ("SagaRolledBackEvent",),
]
"""The events of the flight, hotel, failing card saga, rolled back in full (`EventCapture.trail`)."""


class CheckpointingJournal(InMemoryJournal):
    """Awaits before each write, as a real journal does: a cancellation would land there."""

    async def append(self, event: SagaEvent) -> None:
        await anyio.lowlevel.checkpoint()
        await super().append(event)
