"""Our Temporal path against the saga a Temporal user writes by hand, in one run, on one dev server.

The travel saga (book a flight, reserve a hotel, charge the card; the card declined on the rollback
rows) two ways, doing the same work in each activity (`book`, `undo`: a booking in a dict):

- ``ours``: `TemporalSagaRunner` and `saga_worker`: one activity per step and per compensation
  attempt, events recorded in the workflow, the report folded from them, the outcome decoded back
  into a `SagaRun`;
- ``hand``: a workflow as Temporal's own saga samples write it: each compensation pushed on a list
  as its step books, the list run in reverse on `ActivityError` (the same activities as ours).

Both on the same worker process and dev server (started here, as the tests start theirs), both
unsandboxed (the sandbox's cost is the same for any workflow and not what is measured), each saga
awaited to its end before the next starts.
The saga has a 10 s deadline and the default 30 s compensation budget, so none of our activities
heartbeats (`heartbeat_after`, 30 s): a step that may run longer than that heartbeats, and a lost
worker is otherwise noticed by the activity's start-to-close timeout. Rounds of each way are
interleaved and the median per saga of each kept; the ratio ours/hand is printed (target: at most
1.05x, commit and rollback).

    python bench/temporal.py [--sagas 20] [--rounds 5] [--server-config KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from aegis_nb import AegisContext, SagaRolledBack, ToolError
from aegis_nb.temporal import TemporalSagaRunner, saga_worker

BOOKINGS: dict[str, str] = {}
"""The work every activity does, on either side: one entry made or removed (a stand-in for a tool)."""


async def book(key: str, kind: str, *, declined: bool = False) -> str:
    if declined:
        raise ToolError(kind, "Card Declined!")
    BOOKINGS[key] = kind
    return f"{kind}-{len(BOOKINGS)}"


async def undo(key: str) -> None:
    BOOKINGS.pop(key, None)


# -- ours: steps -------------------------------------------------------------------------------------


@dataclass
class Booking:
    """One of the three steps: books `kind` under the step's idempotency key, undoes by it."""

    name: str
    declined: bool = False

    async def execute(self, ctx: AegisContext) -> AegisContext:
        booked = await book(ctx.idempotency_key or "", self.name, declined=self.declined)
        return ctx.with_metadata({self.name: booked})

    async def compensate(self, ctx: AegisContext) -> None:
        await undo(ctx.idempotency_key or "")


# -- hand: activities and the workflow -------------------------------------------------------------

NO_RETRY = TemporalRetryPolicy(maximum_attempts=1)


@activity.defn(name="bench.book")
async def book_activity(key: str, kind: str, declined: bool) -> str:
    try:
        return await book(key, kind, declined=declined)
    except ToolError as exc:
        raise ApplicationError(str(exc), non_retryable=True) from None


@activity.defn(name="bench.undo")
async def undo_activity(key: str) -> None:
    await undo(key)


@workflow.defn(name="bench.hand_written_saga")
class HandWrittenSaga:
    """Temporal's saga sample: compensations pushed as it goes, run in reverse on `ActivityError`."""

    @workflow.run
    async def run(self, declined: bool) -> dict[str, Any]:
        run_id = workflow.info().workflow_id
        timeout = timedelta(seconds=10)
        compensations: list[str] = []
        booked: dict[str, str] = {}
        try:
            for index, kind in enumerate(("BookFlight", "ReserveHotel", "ChargeCard")):
                key = f"{run_id}/{index}"
                booked[kind] = await workflow.execute_activity(
                    book_activity,
                    args=[key, kind, declined and kind == "ChargeCard"],
                    start_to_close_timeout=timeout,
                    retry_policy=NO_RETRY,
                )
                # Pushed once booked (the samples push it before, and so undo the declined card too:
                # one activity more than ours, which does not compensate a step its tool refused).
                compensations.append(key)
        except ActivityError:
            for key in reversed(compensations):
                await workflow.execute_activity(
                    undo_activity, key, start_to_close_timeout=timedelta(seconds=30)
                )
            return {"rolled_back": True}
        return booked


# -- measuring -------------------------------------------------------------------------------------


async def measure(sagas: int, rounds: int, config: list[str]) -> dict[tuple[str, bool], list[float]]:
    binary = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(binary) if binary.exists() else None,
        ip="127.0.0.1",
        ui=False,
        dev_server_log_level="error",
        dev_server_extra_args=[arg for value in config for arg in ("--dynamic-config-value", value)],
    )
    client: Client = env.client
    ours_queue, hand_queue = f"ours-{uuid.uuid4().hex}", f"hand-{uuid.uuid4().hex}"
    steps = {
        "BookFlight": Booking("BookFlight"),
        "ReserveHotel": Booking("ReserveHotel"),
        "ChargeCard": Booking("ChargeCard"),
        "ChargeCardDeclined": Booking("ChargeCard", declined=True),
    }
    runner = TemporalSagaRunner(client, ours_queue, steps=steps)
    times: dict[tuple[str, bool], list[float]] = {}
    try:
        async with (
            saga_worker(client, ours_queue, steps=steps, workflow_runner=UnsandboxedWorkflowRunner()),
            Worker(
                client,
                task_queue=hand_queue,
                workflows=[HandWrittenSaga],
                activities=[book_activity, undo_activity],
                workflow_runner=UnsandboxedWorkflowRunner(),
            ),
        ):

            async def ours(declined: bool) -> None:
                card = steps["ChargeCardDeclined" if declined else "ChargeCard"]
                saga = [steps["BookFlight"], steps["ReserveHotel"], card]
                run = await runner.run_saga(saga, AegisContext().with_timeout(10), name="trip")
                assert isinstance(run.error, SagaRolledBack) if declined else run.error is None

            async def hand(declined: bool) -> None:
                result = await client.execute_workflow(
                    HandWrittenSaga.run, declined, id=f"hand-{uuid.uuid4().hex}", task_queue=hand_queue
                )
                assert ("rolled_back" in result) is declined

            ways = {"ours": ours, "hand": hand}
            for declined in (False, True):  # warm up: imports, first workflow tasks, connections
                for way in ways.values():
                    await way(declined)
            for _ in range(rounds):
                for declined in (False, True):
                    for name, way in ways.items():
                        started = time.perf_counter()
                        for _ in range(sagas):
                            await way(declined)
                        per_saga = (time.perf_counter() - started) / sagas
                        times.setdefault((name, declined), []).append(per_saga)
    finally:
        await env.shutdown()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sagas", type=int, default=20, help="sagas per round and way")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each way")
    parser.add_argument(
        "--server-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a dynamic config value for the dev server (repeatable), e.g. to raise its poll rates",
    )
    args = parser.parse_args()
    # The SDK logs every declined card as a warning: 100 of them would bury the result.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    times = asyncio.run(measure(args.sagas, args.rounds, args.server_config))
    print(f"travel saga on a Temporal dev server, {args.sagas} sagas x {args.rounds} rounds a way")
    for declined, label in ((False, "commit"), (True, "rollback")):
        ours = statistics.median(times[("ours", declined)])
        hand = statistics.median(times[("hand", declined)])
        print(
            f"  {label:8}  ours {ours * 1000:7.2f} ms/saga   hand-written {hand * 1000:7.2f} ms/saga   "
            f"ratio {ours / hand:.3f}x (+{(ours - hand) * 1000:.1f} ms; target <= 1.05x)"
        )


if __name__ == "__main__":
    main()
