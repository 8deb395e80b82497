"""Test kit: capture a run's events and compare them as plain, readable tuples."""

from __future__ import annotations

from aegis_nb.saga.events import EventBase, SagaEvent, StepEvent


class EventCapture(list[SagaEvent]):
    """A sink that keeps every event it is given, in order: a list you can call.

    Calling it is the list's own append, so capturing adds next to nothing to what a run costs.
    """

    __slots__ = ()
    __call__ = list.append

    @property
    def events(self) -> list[SagaEvent]:
        """The events so far (the capture itself)."""
        return self

    def trail(self) -> list[tuple[str, ...]]:
        """Events as ``(EventName,)`` or ``(EventName, step)`` tuples: whole sequences, easy to assert."""
        return [outline(e) for e in self.events]


def outline(event: EventBase) -> tuple[str, ...]:
    """``("StepFailed", "ChargeCard")``-style summary of one event."""
    if isinstance(event, StepEvent):
        return (type(event).__name__, event.step)
    return (type(event).__name__,)
