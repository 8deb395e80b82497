"""Events as the journal stores them: `event_to_json`, written as compact JSON text.

The text is part of the journal's format: 0.1.0 wrote exactly this, and journals on users' disks
hold it (tests/test_journal_codec.py pins every event type's text).
"""

from __future__ import annotations

from aegis_nb.saga.durable.codec import dumps, event_to_json
from aegis_nb.saga.events import SagaEvent


def encode_event(event: SagaEvent) -> str:
    """`event` as the journal's text: ``{"v":1,"type":"StepSucceeded",...fields}``, no spaces."""
    return dumps(event_to_json(event))
