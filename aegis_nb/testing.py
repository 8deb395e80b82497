"""Test kit: capture a run's events and compare them as plain, readable tuples."""

from __future__ import annotations

from collections.abc import Iterator

from aegis_nb.saga.events import EventBase, SagaEvent, StepEvent


class EventCapture:
    """A sink that keeps every event it is given, in order."""

    def __init__(self) -> None:
        self.events: list[SagaEvent] = []

    def __call__(self, event: SagaEvent) -> None:
        self.events.append(event)

    def __iter__(self) -> Iterator[SagaEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def of_run(self, run_id: str) -> list[SagaEvent]:
        return [e for e in self.events if e.run_id == run_id]

    def trail(self) -> list[tuple[str, ...]]:
        """Events as ``(EventName,)`` or ``(EventName, step)`` tuples: whole sequences, easy to assert."""
        return [outline(e) for e in self.events]


def outline(event: EventBase) -> tuple[str, ...]:
    """``("StepFailed", "ChargeCard")``-style summary of one event."""
    if isinstance(event, StepEvent):
        return (type(event).__name__, event.step)
    return (type(event).__name__,)
