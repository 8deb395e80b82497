"""The same sagas on Temporal, when one machine is not enough.

A client starts a saga with `TemporalSagaRunner`; any number of processes run `saga_worker`. The
workflow (`SagaWorkflow`) keeps the engine's rules: steps forward in order, each execute an
activity; on a failure, a timeout or a cancellation, completed steps compensated newest first with
their own snapshots, retried per `RetryPolicy`; the same events and the same `SagaReport`. A worker
that dies mid-step is replaced: Temporal runs the attempt again on another worker, with the same
idempotency key (``workflow_id/position``).

Steps cross into another process by name or import path (``saga.durable.locator``) with JSON
arguments, and contexts cross as codec JSON: `Secret` values arrive as ``Secret("***")`` and never
enter Temporal's history. Deadlines travel as the time left (see `plan`).

Nothing here is imported by ``aegis_nb``: ``import aegis_nb.temporal`` needs the `temporal` extra.
"""

from aegis_nb.kernel.extras import needs_extra

with needs_extra("temporal", "aegis_nb.temporal (sagas on Temporal)"):
    from aegis_nb.temporal.client import (
        DEFAULT_HEARTBEAT_TIMEOUT,
        SagaCancelled,
        TemporalSagaHandle,
        TemporalSagaRunner,
    )
    from aegis_nb.temporal.devserver import start_dev_server, temporal_binary
    from aegis_nb.temporal.names import (
        COMPENSATE_ACTIVITY,
        EVENTS_QUERY,
        EXECUTE_ACTIVITY,
        OUTCOME_MEMO,
        WORKFLOW_NAME,
    )
    from aegis_nb.temporal.tracing import connect, tracing_interceptors
    from aegis_nb.temporal.worker import PASSED_THROUGH, saga_worker
    from aegis_nb.temporal.workflow import SagaWorkflow


__all__ = [
    "COMPENSATE_ACTIVITY",
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "EVENTS_QUERY",
    "EXECUTE_ACTIVITY",
    "OUTCOME_MEMO",
    "PASSED_THROUGH",
    "WORKFLOW_NAME",
    "SagaCancelled",
    "SagaWorkflow",
    "TemporalSagaHandle",
    "TemporalSagaRunner",
    "connect",
    "saga_worker",
    "start_dev_server",
    "temporal_binary",
    "tracing_interceptors",
]
