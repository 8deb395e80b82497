"""Temporal histories an earlier worker wrote still replay on this one (golden/temporal-histories.json).

A workflow still running when a cluster's workers are upgraded is replayed by the new worker from
its history: any change in the commands the workflow issues (activities, timers, in their order)
is a non-determinism error, and the run is stuck. The histories were written by the workflow as it
was before the saga rules became one module (`tests/golden/write_temporal_histories.py`); replaying
them checks that the rules' move changed no command. Asyncio only (temporalio runs on asyncio alone).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from aegis_nb.temporal import PASSED_THROUGH, SagaWorkflow
from tests.golden.write_temporal_histories import SAGAS
from tests.temporal_support import anyio_backend

__all__ = ["anyio_backend"]  # the fixture, imported so pytest finds it here

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "temporal-histories.json"


def histories() -> dict[str, Any]:
    return dict(json.loads(GOLDEN.read_text()))


def test_the_golden_file_holds_one_history_per_saga() -> None:
    assert sorted(histories()) == sorted(SAGAS)


@pytest.mark.parametrize("saga", SAGAS)
async def test_a_history_written_before_the_rules_moved_replays_without_non_determinism(saga: str) -> None:
    stored = histories()[saga]
    history = WorkflowHistory.from_json(stored["workflow_id"], stored["history"])
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    replayer = Replayer(workflows=[SagaWorkflow], workflow_runner=SandboxedWorkflowRunner(restrictions))
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
