"""The names a client, a worker and Temporal's history agree on: changing one breaks running sagas."""

from __future__ import annotations

from typing import Final

WORKFLOW_NAME: Final = "aegis_nb.saga"
EXECUTE_ACTIVITY: Final = "aegis_nb.execute"
COMPENSATE_ACTIVITY: Final = "aegis_nb.compensate"
EVENTS_QUERY: Final = "aegis_nb.events"
OUTCOME_MEMO: Final = "aegis_nb.outcome"
"""Memo key of a cancelled run's events (a cancelled workflow has no result to carry them)."""
