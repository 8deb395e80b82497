"""`SagaHandles` specifies agent sagas reached by handle: each a run of the engine, owned by its own task.

A handle's saga takes steps one call at a time, commits or rolls back when asked, rolls back when idle
past its TTL or past its deadline, and on the first error only when asked to; a step that fails leaves
it open. An unknown, forged or foreign handle gets one refusal that says nothing; a finished saga
answers with its final state. Leaving the registry rolls back every saga still open.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolError
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent, SagaRolledBackEvent
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.saga_handles import (
    REFUSAL,
    HandleRefused,
    NotOpen,
    Phase,
    SagaHandles,
    StepState,
    StepView,
    UndoNotBound,
)
from aegis_nb.testing import EventCapture

pytestmark = pytest.mark.anyio


class FakeClock:
    """A clock the test moves by hand: idleness and deadlines are judged against it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Book:
    """Books `what` under the step's idempotency key; its undo cancels exactly that booking."""

    def __init__(self, ledger: dict[str, str], what: str, *, fails: bool = False) -> None:
        self.ledger, self.what, self.fails, self.name = ledger, what, fails, what

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.fails:
            raise ToolError(self.what, "Card Declined!")
        assert ctx.idempotency_key is not None
        self.ledger[ctx.idempotency_key] = self.what
        return ctx

    async def compensate(self, ctx: AegisContext) -> None:
        assert ctx.idempotency_key is not None
        del self.ledger[ctx.idempotency_key]


UNRESOLVED = "undo cancel_flight not called: /result/booking_id did not resolve"


class Unbound:
    """A step whose undo cannot be called: a value it needs never resolved."""

    name = "Unbound"

    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        raise UndoNotBound(UNRESOLVED)


def engine(capture: EventCapture | None = None) -> WorkflowEngine:
    return WorkflowEngine(compensation_retry=RetryPolicy.never(), sinks=() if capture is None else (capture,))


async def test_steps_then_commit_keep_every_effect_and_the_run_is_an_ordinary_run() -> None:
    ledger: dict[str, str] = {}
    capture = EventCapture()
    clock = FakeClock()
    async with SagaHandles(engine(capture), ttl=60, timeout=600, clock=clock) as handles:
        ticket = await handles.begin(name="agent")
        assert (ticket.ttl, ticket.deadline_left) == (60.0, 600.0)
        first = await handles.step(ticket.handle, Book(ledger, "flight"))
        second = await handles.step(ticket.handle, Book(ledger, "hotel"))
        assert (first.index, second.index) == (0, 1)
        clock.now += 5
        assert (await handles.status(ticket.handle)).to_json() == {
            "status": "open",
            "run_id": ticket.run_id,
            "name": "agent",
            "steps": [
                {"index": 0, "name": "flight", "state": "live"},
                {"index": 1, "name": "hotel", "state": "live"},
            ],
            "ttl_seconds": 60.0,
            "idle_seconds_left": 60.0,  # asking for the status counts as activity
            "deadline_seconds_left": 595.0,
            "reason": None,
            "summary": None,
        }
        final = await handles.commit(ticket.handle)
    assert final.phase is Phase.COMMITTED
    assert ledger == {f"{ticket.run_id}/0": "flight", f"{ticket.run_id}/1": "hotel"}
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepSucceeded", "hotel"),
        ("SagaCommitted",),
    ]


async def test_a_failed_step_leaves_the_saga_open_and_rollback_undoes_what_stands() -> None:
    ledger: dict[str, str] = {}
    async with SagaHandles(engine(), clock=FakeClock()) as handles:
        ticket = await handles.begin()
        await handles.step(ticket.handle, Book(ledger, "flight"))
        with pytest.raises(ToolError, match=r"^Card Declined!$"):
            await handles.step(ticket.handle, Book(ledger, "charge", fails=True))
        assert (await handles.status(ticket.handle)).phase is Phase.OPEN
        await handles.step(ticket.handle, Book(ledger, "hotel"))
        final = await handles.rollback(ticket.handle, "the agent changed its mind")
    assert ledger == {}
    assert final.phase is Phase.ROLLED_BACK
    assert final.reason == "the agent changed its mind"
    assert final.steps == (
        StepView(0, "flight", StepState.UNDONE),
        StepView(1, "charge", StepState.FAILED, "ToolError: Card Declined!"),
        StepView(2, "hotel", StepState.UNDONE),
    )


async def test_rollback_on_error_ends_the_saga_at_the_first_failed_step() -> None:
    ledger: dict[str, str] = {}
    async with SagaHandles(engine(), clock=FakeClock()) as handles:
        ticket = await handles.begin(rollback_on_error=True)
        await handles.step(ticket.handle, Book(ledger, "flight"))
        with pytest.raises(ToolError):
            await handles.step(ticket.handle, Book(ledger, "charge", fails=True))
        final = await handles.status(ticket.handle)
        with pytest.raises(NotOpen) as ended:
            await handles.step(ticket.handle, Book(ledger, "hotel"))
    assert ledger == {}
    assert (final.phase, final.reason) == (
        Phase.ROLLED_BACK,
        "a step failed and the saga rolls back on error",
    )
    assert ended.value.state == final


async def test_idle_past_the_ttl_or_past_the_deadline_is_rolled_back() -> None:
    ledger: dict[str, str] = {}
    clock = FakeClock()
    async with SagaHandles(engine(), ttl=60, timeout=100, clock=clock) as handles:
        idle = await handles.begin()
        busy = await handles.begin()
        await handles.step(idle.handle, Book(ledger, "flight"))
        await handles.step(busy.handle, Book(ledger, "hotel"))
        clock.now += 59
        assert await handles.expire() == ()
        await handles.step(busy.handle, Book(ledger, "car"))
        clock.now += 1
        (expired,) = await handles.expire()
        assert (expired.run_id, expired.phase, expired.reason) == (
            idle.run_id,
            Phase.ROLLED_BACK,
            "idle past its TTL",
        )
        assert sorted(ledger.values()) == ["car", "hotel"]
        clock.now += 40  # 100 s since begin: past the deadline, though used 41 s ago
        (overdue,) = await handles.expire()
        assert (overdue.run_id, overdue.reason) == (busy.run_id, "past its deadline")
        assert ledger == {}


async def test_the_reaper_rolls_an_abandoned_saga_back_on_its_own() -> None:
    ledger: dict[str, str] = {}
    rolled_back = anyio.Event()

    def watch(event: SagaEvent) -> None:
        if isinstance(event, SagaRolledBackEvent):
            rolled_back.set()

    async with SagaHandles(engine(), ttl=0.05, sinks=[watch]) as handles:
        ticket = await handles.begin()
        await handles.step(ticket.handle, Book(ledger, "flight"))
        with anyio.fail_after(5):
            await rolled_back.wait()
        final = await handles.status(ticket.handle)
    assert (final.phase, final.reason, ledger) == (Phase.ROLLED_BACK, "idle past its TTL", {})


async def ask(handles: SagaHandles, action: str, handle: Any, owner: str | None, step: Book) -> object:
    if action == "step":
        return await handles.step(handle, step, owner=owner)
    if action == "status":
        return await handles.status(handle, owner=owner)
    if action == "commit":
        return await handles.commit(handle, owner=owner)
    return await handles.rollback(handle, "mine now", owner=owner)


@pytest.mark.parametrize("action", ["step", "status", "commit", "rollback"])
async def test_unknown_forged_and_foreign_handles_get_one_refusal_that_says_nothing(action: str) -> None:
    ledger: dict[str, str] = {}
    async with SagaHandles(engine(), clock=FakeClock()) as handles:
        mine = await handles.begin(owner="client-a")
        await handles.step(mine.handle, Book(ledger, "flight"), owner="client-a")
        attempts: list[tuple[Any, str | None]] = [
            ("no-such-handle", None),
            (mine.handle[:-1] + ("A" if mine.handle[-1] != "A" else "B"), "client-a"),
            (mine.handle, "client-b"),
            (mine.handle, None),
            (None, None),
        ]
        for handle, owner in attempts:
            with pytest.raises(HandleRefused) as refused:
                await ask(handles, action, handle, owner, Book(ledger, "hotel"))
            assert str(refused.value) == REFUSAL
        assert (await handles.status(mine.handle, owner="client-a")).phase is Phase.OPEN
        assert list(ledger.values()) == ["flight"]


async def test_a_finished_saga_answers_with_its_final_state() -> None:
    ledger: dict[str, str] = {}
    async with SagaHandles(engine(), clock=FakeClock()) as handles:
        ticket = await handles.begin()
        await handles.step(ticket.handle, Book(ledger, "flight"))
        committed = await handles.commit(ticket.handle)
        assert await handles.commit(ticket.handle) == committed
        assert await handles.rollback(ticket.handle, "too late") == committed
        assert await handles.status(ticket.handle) == committed
    assert list(ledger.values()) == ["flight"]


async def test_leaving_the_registry_rolls_back_every_saga_still_open() -> None:
    ledger: dict[str, str] = {}
    async with SagaHandles(engine(), clock=FakeClock()) as handles:
        ticket = await handles.begin()
        await handles.step(ticket.handle, Book(ledger, "flight"))
    final = await handles.status(ticket.handle)
    assert (final.phase, final.reason, ledger) == (Phase.ROLLED_BACK, "the server stopped", {})


async def test_an_undo_that_cannot_be_called_leaves_its_step_orphaned() -> None:
    ledger: dict[str, str] = {}
    async with SagaHandles(engine(), clock=FakeClock()) as handles:
        ticket = await handles.begin()
        await handles.step(ticket.handle, Book(ledger, "hotel"))
        await handles.step(ticket.handle, Unbound())
        final = await handles.rollback(ticket.handle, "declined")
    assert final.phase is Phase.STUCK
    assert final.steps == (
        StepView(0, "hotel", StepState.UNDONE),
        StepView(
            1,
            "Unbound",
            StepState.ORPHANED,
            "undo cancel_flight not called: /result/booking_id did not resolve",
        ),
    )
    assert ledger == {}
