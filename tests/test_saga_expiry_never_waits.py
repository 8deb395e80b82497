"""An agent saga's TTL and deadline are kept whatever another saga's call is doing, and whatever its own is.

Expiries are independent: a saga whose call will not stop never holds up another's rollback. A saga
the clock ends mid-call has that call cancelled instead of waited for: the step is then in doubt,
compensated as an in-doubt step is, and its caller is told the saga ended while the call ran.
Checked on a ledger of real effects, with events and a fake clock, never sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from aegis_nb.saga.events import SagaEvent, SagaRolledBackEvent
from aegis_nb.server.saga_handles import NotOpen, Phase, SagaHandles, StepState, StepView
from aegis_nb.testing import EventCapture
from tests.saga_handles_support import Booking, FakeClock, HeldBooking, engine

pytestmark = pytest.mark.anyio

WAIT = 30.0
"""Seconds to wait for what must happen promptly: generous, for a loaded machine; never reached."""

HOUR = 3600.0
"""A TTL in fake seconds: the reaper's own timer (real seconds) never fires while a test runs."""


async def call(handles: SagaHandles, handle: str, step: object, told: list[NotOpen]) -> None:
    """A caller whose step the saga's end cuts off: it is told so, as `NotOpen`."""
    try:
        await handles.step(handle, step)
    except NotOpen as exc:
        told.append(exc)


@asynccontextmanager
async def released_at_the_end(held: HeldBooking) -> AsyncIterator[None]:
    """Let `held`'s call go when the block is left, however: a failed test ends instead of hanging."""
    try:
        yield
    finally:
        held.release.set()


async def test_a_call_that_will_not_stop_holds_up_no_other_sagas_rollback() -> None:
    ledger: dict[str, str] = {}
    rolled_back: dict[str, anyio.Event] = {}

    def watch(event: SagaEvent) -> None:
        if isinstance(event, SagaRolledBackEvent):
            rolled_back.setdefault(event.run_id, anyio.Event()).set()

    # The reaper on its own, as a server runs it, on a fake clock: it wakes when a saga begins,
    # and times out only after as many real seconds as the fake ones it waits for (never, here).
    clock = FakeClock()
    stuck_call = HeldBooking(ledger, "flight", shielded=True)
    async with (
        SagaHandles(engine(), ttl=HOUR, timeout=None, sinks=[watch], clock=clock) as handles,
        anyio.create_task_group() as tasks,
        released_at_the_end(stuck_call),
    ):
        busy = await handles.begin()
        tasks.start_soon(call, handles, busy.handle, stuck_call, [])
        await stuck_call.started.wait()
        clock.now += HOUR
        idle = await handles.begin()  # wakes the reaper, which finds the busy saga due
        with anyio.fail_after(WAIT):
            await stuck_call.cancelled.wait()  # the reaper has ended the busy saga: its call was told
        await handles.step(idle.handle, Booking(ledger, "hotel"))
        clock.now += HOUR
        await handles.begin()  # wakes the reaper again: now the idle saga is due
        with anyio.fail_after(WAIT):
            await rolled_back.setdefault(idle.run_id, anyio.Event()).wait()
        assert (await handles.status(idle.handle)).phase is Phase.ROLLED_BACK
        assert not stuck_call.release.is_set()  # the busy saga's call still holds on
        assert (await handles.status(busy.handle)).phase is Phase.OPEN
        assert sorted(ledger.values()) == ["flight"]
    assert (await handles.status(busy.handle)).phase is Phase.ROLLED_BACK
    assert ledger == {}


async def test_expire_returns_every_due_saga_at_once_though_one_call_never_stops() -> None:
    ledger: dict[str, str] = {}
    clock = FakeClock()
    stuck_call = HeldBooking(ledger, "flight", shielded=True)
    async with (
        SagaHandles(engine(), ttl=2 * HOUR, timeout=None, clock=clock) as handles,
        anyio.create_task_group() as tasks,
        released_at_the_end(stuck_call),
    ):
        busy = await handles.begin(ttl=HOUR)
        tasks.start_soon(call, handles, busy.handle, stuck_call, [])
        await stuck_call.started.wait()
        idle = await handles.begin(ttl=2 * HOUR)
        await handles.step(idle.handle, Booking(ledger, "hotel"))
        clock.now += HOUR
        # The busy saga is due: this expiry (or the reaper, whichever runs first) ends it, and
        # waits for its call, which does not stop when cancelled.
        tasks.start_soon(handles.expire)
        with anyio.fail_after(WAIT):
            await stuck_call.cancelled.wait()
        clock.now += HOUR  # now the idle one is due too, while the busy one's ending still waits
        with anyio.fail_after(WAIT):
            (idle_state,) = await handles.expire()
        assert (idle_state.run_id, idle_state.phase, idle_state.reason) == (
            idle.run_id,
            Phase.ROLLED_BACK,
            "idle past its TTL",
        )
        assert (await handles.status(busy.handle)).phase is Phase.OPEN  # its call still holds on
    final = await handles.status(busy.handle)
    assert (final.phase, final.reason) == (Phase.ROLLED_BACK, "idle past its TTL")
    assert ledger == {}


@pytest.mark.parametrize(
    ("ttl", "saga_timeout", "reason"),
    [(HOUR, 10 * HOUR, "idle past its TTL"), (10 * HOUR, HOUR, "past its deadline")],
)
async def test_a_saga_due_mid_call_has_the_call_cancelled_and_its_in_doubt_step_undone(
    ttl: float, saga_timeout: float, reason: str
) -> None:
    ledger: dict[str, str] = {}
    clock = FakeClock()
    capture = EventCapture()
    blocked = HeldBooking(ledger, "charge")  # blocks until released: never, here
    answer: list[NotOpen] = []
    async with SagaHandles(engine(capture), ttl=ttl, timeout=saga_timeout, clock=clock) as handles:
        ticket = await handles.begin()
        await handles.step(ticket.handle, Booking(ledger, "flight"))
        async with anyio.create_task_group() as tasks, released_at_the_end(blocked):
            tasks.start_soon(call, handles, ticket.handle, blocked, answer)
            await blocked.started.wait()
            assert sorted(ledger.values()) == ["charge", "flight"]
            clock.now += min(ttl, saga_timeout)
            with anyio.fail_after(WAIT):
                (final,) = await handles.expire()
    assert ledger == {}
    assert (final.phase, final.reason) == (Phase.ROLLED_BACK, reason)
    assert final.steps == (
        StepView(0, "flight", StepState.UNDONE),
        StepView(1, "charge", StepState.UNDONE),
    )
    (told,) = answer
    assert (str(told), told.cut_off, told.state) == (
        "the saga ended while the call ran: rolled_back",
        True,
        final,
    )
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "charge"),
        ("StepFailed", "charge"),
        ("CompensationStarted", "charge"),
        ("CompensationSucceeded", "charge"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]


async def test_a_server_that_stops_cancels_a_call_that_would_hold_it_forever() -> None:
    ledger: dict[str, str] = {}
    blocked = HeldBooking(ledger, "charge")  # blocks until released: never, here
    answer: list[NotOpen] = []
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tasks, released_at_the_end(blocked):
            async with SagaHandles(engine(), clock=FakeClock()) as handles:
                ticket = await handles.begin()
                await handles.step(ticket.handle, Booking(ledger, "flight"))
                tasks.start_soon(call, handles, ticket.handle, blocked, answer)
                await blocked.started.wait()
            assert blocked.cancelled.is_set()
            assert not blocked.release.is_set()
    (told,) = answer
    assert (told.cut_off, told.state.phase, told.state.reason) == (
        True,
        Phase.ROLLED_BACK,
        "the server stopped",
    )
    assert ledger == {}
