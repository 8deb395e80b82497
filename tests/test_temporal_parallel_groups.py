"""Parallel groups on Temporal: the list form with `parallel(...)` entries runs on `TemporalSagaRunner`
with the in-process engine's semantics and events (members as concurrent activities): a group that
commits, a member failing while its sibling runs (the sibling cancelled, waited for, compensated in
doubt, then the earlier steps), and a group rolled back concurrently and in reverse start order.
Each saga runs both ways and the event sequences must match, times and run ids aside; outcomes of
members that settle at once (two successes in a row) are a race in either run, so such a run of
events is compared in index order.
Asyncio only (temporalio runs on asyncio alone).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

from temporalio.client import Client

from aegis_nb import AegisContext, RetryPolicy, SagaDefinitionError, WorkflowEngine, parallel
from aegis_nb.saga.events import SagaEvent, SagaRolledBackEvent, SagaStuck
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.temporal import TemporalSagaRunner, saga_worker
from aegis_nb.testing import outline
from tests.steps import Calls, Recorded
from tests.temporal_support import anyio_backend, client, temporal_address

__all__ = ["anyio_backend", "client", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio

NEVER = RetryPolicy.never()


def shape(event: SagaEvent) -> dict[str, Any]:
    """The event without what differs between two runs of one saga: times, run ids, contexts' clocks."""
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    for varying in ("time", "run_id", "seq", "duration", "deadline", "budget"):
        fields.pop(varying, None)
    if "context" in fields:
        fields["context"] = fields["context"].to_json()
    if isinstance(event, SagaRolledBackEvent | SagaStuck):
        report = event.report.to_json()
        report.pop("run_id")
        fields["report"] = report
    return {"event": type(event).__name__, **fields}


def settled(events: tuple[SagaEvent, ...]) -> list[dict[str, Any]]:
    """`shape` of each event, consecutive same-kind outcomes of one group's members in index order."""
    shapes = [shape(event) for event in events]
    ordered: list[dict[str, Any]] = []
    for item in shapes:
        last = ordered[-1] if ordered else None
        racing = (
            last is not None
            and item["event"] in ("StepSucceeded", "CompensationSucceeded")
            and (item["event"], item.get("group")) == (last["event"], last.get("group"))
            and item.get("group") is not None
        )
        ordered.append(item)
        if racing:
            run = len(ordered) - 1
            while run > 0 and (ordered[run - 1]["event"], ordered[run - 1].get("group")) == (
                item["event"],
                item.get("group"),
            ):
                run -= 1
            ordered[run:] = sorted(ordered[run:], key=lambda e: e["index"])
    return ordered


@asynccontextmanager
async def on_temporal(client: Client, steps: list[object]) -> AsyncIterator[TemporalSagaRunner]:
    queue = f"groups-{uuid.uuid4().hex}"
    async with saga_worker(client, queue, steps=steps):
        yield TemporalSagaRunner(client, queue, steps=steps, heartbeat_timeout=1.0, compensation_retry=NEVER)


async def both_ways(client: Client, build: Any) -> tuple[SagaRun, SagaRun]:
    """`build()`'s saga (entries, steps to register) run in-process and on Temporal, on fresh steps."""
    entries, _ = build()
    local = await WorkflowEngine(compensation_retry=NEVER).run_saga(
        entries, AegisContext({"who": "ada"}), name="trip"
    )
    entries, steps = build()
    async with on_temporal(client, steps) as runner:
        remote = await runner.run_saga(entries, AegisContext({"who": "ada"}), name="trip")
    return local, remote


def flat(*steps: object) -> list[object]:
    return list(steps)


async def test_a_group_that_commits_merges_its_members_outputs_as_in_the_engine(client: Client) -> None:
    def build() -> tuple[list[object], list[object]]:
        calls = Calls()
        flight, hotel, car, card = (Recorded(name, calls) for name in ("flight", "hotel", "car", "card"))
        return [flight, parallel(hotel, car), card], flat(flight, hotel, car, card)

    local, remote = await both_ways(client, build)
    assert settled(remote.events) == settled(local.events)
    assert [(e["event"], e.get("step")) for e in settled(remote.events)] == [
        ("SagaStarted", None),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepStarted", "car"),
        ("StepSucceeded", "hotel"),
        ("StepSucceeded", "car"),
        ("StepStarted", "card"),
        ("StepSucceeded", "card"),
        ("SagaCommitted", None),
    ]
    assert [getattr(e, "group", None) for e in remote.events] == [
        None,
        None,
        None,
        1,
        1,
        1,
        1,
        None,
        None,
        None,
    ]
    assert dict(remote.unwrap().metadata) == {
        "who": "ada",
        "flight_id": "FLIGHT-0",
        "hotel_id": "HOTEL-1",
        "car_id": "CAR-2",
        "card_id": "CARD-3",
    }


async def test_a_member_failing_cancels_its_running_sibling_which_is_undone_in_doubt_then_the_earlier_steps(
    client: Client,
) -> None:
    def build() -> tuple[list[object], list[object]]:
        calls = Calls()
        flight = Recorded("flight", calls)
        hotel = Recorded("hotel", calls, hang=True, in_doubt=True)
        car = Recorded("car", calls, fail="no cars left")
        card = Recorded("card", calls)
        return [flight, parallel(hotel, car), card], flat(flight, hotel, car, card)

    with anyio.fail_after(30):
        local, remote = await both_ways(client, build)
    assert settled(remote.events) == settled(local.events)
    assert [outline(e) for e in remote.events] == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepStarted", "car"),
        ("StepFailed", "car"),
        ("StepFailed", "hotel"),
        ("CompensationStarted", "hotel"),
        ("CompensationSucceeded", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    hotel_failed = remote.events[6]
    assert shape(hotel_failed)["error"].message == (
        "cancelled: another member of its parallel group failed (Boom)"
    )


@pytest.mark.parametrize("order", ["concurrent", "reverse_start"])
async def test_a_group_is_rolled_back_concurrently_or_in_reverse_start_order_as_in_the_engine(
    client: Client, order: str
) -> None:
    def build() -> tuple[list[object], list[object]]:
        calls = Calls()
        flight, hotel, car = Recorded("flight", calls), Recorded("hotel", calls), Recorded("car", calls)
        card = Recorded("card", calls, fail="declined")
        return [flight, parallel(hotel, car, compensation=order), card], flat(flight, hotel, car, card)

    with anyio.fail_after(30):
        local, remote = await both_ways(client, build)
    assert settled(remote.events) == settled(local.events)
    undo = {
        "concurrent": [
            ("CompensationStarted", "hotel"),
            ("CompensationStarted", "car"),
            ("CompensationSucceeded", "hotel"),
            ("CompensationSucceeded", "car"),
        ],
        "reverse_start": [
            ("CompensationStarted", "car"),
            ("CompensationSucceeded", "car"),
            ("CompensationStarted", "hotel"),
            ("CompensationSucceeded", "hotel"),
        ],
    }[order]
    assert [(e["event"], e.get("step")) for e in settled(remote.events)][7:] == [
        ("StepStarted", "card"),
        ("StepFailed", "card"),
        *undo,
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent", None),
    ]


async def test_a_dynamic_saga_is_refused_by_the_runner_with_the_reason(client: Client) -> None:
    with pytest.raises(SagaDefinitionError) as caught:
        TemporalSagaRunner(client, "never-polled").saga(AegisContext())
    assert str(caught.value) == (
        "a dynamic saga cannot run on Temporal: a Temporal workflow is code the worker replays, "
        "and a dynamic saga's steps are decided by the caller's code as it runs; run a list saga "
        "(with parallel groups if need be), or the dynamic saga on a WorkflowEngine"
    )


class UsesUpTheTime(Recorded):
    """Succeeds, but hands on a context with no time left."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        result = await super().execute(ctx)
        return result.with_timeout(0)


async def test_a_member_whose_sibling_failed_before_it_began_never_starts_as_in_the_engine(
    client: Client,
) -> None:
    # The card is refused (no time left) when its turn comes: the group has failed before the
    # hotel's turn, so the hotel never starts, in doubt or not. Both drivers ask `rules.member_starts`.
    def build() -> tuple[list[object], list[object]]:
        calls = Calls()
        flight = UsesUpTheTime("flight", calls)
        card = Recorded("card", calls, in_doubt=True)
        hotel = Recorded("hotel", calls, in_doubt=True)
        return [flight, parallel(card, hotel)], flat(flight, card, hotel)

    with anyio.fail_after(30):
        local, remote = await both_ways(client, build)
    outcome = remote.report.cause
    assert outcome is not None
    assert outcome.message.startswith("step 'card' had no time left: the deadline passed ")
    assert outcome.message.endswith(" ms before it started; it was not run")
    # How late the card was is all that differs (workflow time is coarser than the loop clock).
    assert settled(remote.events)[:-1] == settled(local.events)[:-1]
    assert remote.report == dataclasses.replace(local.report, run_id=remote.run_id, cause=outcome)
    assert [outline(e) for e in remote.events] == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
