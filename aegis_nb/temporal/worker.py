"""`saga_worker`: a `temporalio.worker.Worker` that runs `SagaWorkflow` and the step activities."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from aegis_nb.saga.durable.locator import StepResolver
from aegis_nb.temporal.activities import SagaActivities
from aegis_nb.temporal.workflow import SagaWorkflow

PASSED_THROUGH = ("aegis_nb", "anyio", "sniffio")
"""Modules the workflow sandbox shares instead of re-importing per run: deterministic, immutable values,
no global mutable state, and re-importing them for every workflow would cost more than the saga."""


def saga_worker(
    client: Client,
    task_queue: str,
    *,
    steps: Iterable[object] | Mapping[str, object] = (),
    main_module: str | None = None,
    **worker_options: Any,
) -> Worker:
    """A worker for sagas started by `TemporalSagaRunner` on `task_queue`; run it with ``async with``.

    `steps` registers step objects by name (for steps holding clients or connections, which cannot
    be rebuilt from JSON); the runner must register the same names. Two different objects of one
    name need a mapping, each under a key of its own (a list of them raises `ValueError`). Other
    steps are rebuilt from their import path. `worker_options` go to `temporalio.worker.Worker` as they are.
    """
    # Any module, though only to steps (checked before anything is called): a worker does not
    # declare its modules yet, and its plans come from the Temporal server, not from a file.
    resolver = StepResolver(steps, main_module=main_module, allow_modules=None)
    activities = SagaActivities(resolver)
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    worker_options.setdefault("workflow_runner", SandboxedWorkflowRunner(restrictions=restrictions))
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[SagaWorkflow],
        activities=[activities.execute, activities.compensate],
        **worker_options,
    )
    activities.worker = worker  # its core takes the activities' heartbeats from their own thread
    return worker
