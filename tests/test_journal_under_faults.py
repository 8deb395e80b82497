"""The durable journal keeps its promises under faults: concurrent trips, cancelled callers, failing undos.

Specifies, for many concurrent sagas on one `SqliteJournal` whose callers are cancelled at every
await point (inside steps and compensations, around journal writes, from sinks; by anyio scopes and,
on asyncio, by native ``asyncio.timeout``), whose steps and undos fail, and then recovered by a
fresh journal on the same file (`tests/journal_faults.py` draws the faults and lists the invariants):
a committed run is never compensated; every run ends committed, rolled back or stuck, its events
contiguous; a call that ended left its run finished in the journal; what the caller saw is what the
journal holds; the mock agency's ledger holds exactly the committed runs' effects; recovery always
opens the journal; and one run's failed write never breaks another run's batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.journal_faults import CancelPoint, Outcome, Scenario, Tally, run_scenario

SEEDS = range(20261201, 20261217)
WAVES = 6
PER_WAVE = 12
SHOWN = 5
"""Violations quoted in a failure message (each with its seed and the run's events); the rest are counted."""


def failure_message(tally: Tally) -> str:
    shown = "\n".join(tally.violations[:SHOWN])
    more = len(tally.violations) - SHOWN
    return "\n".join(tally.lines()) + f"\n{shown}" + (f"\n... and {more} more" if more > 0 else "")


@pytest.mark.anyio
async def test_concurrent_cancelled_sagas_keep_every_invariant_through_recovery(tmp_path: Path) -> None:
    tally = Tally()
    for seed in SEEDS:
        tally.add(await run_scenario(Scenario(seed, waves=WAVES, per_wave=PER_WAVE), tmp_path))
    assert tally.violations == [], failure_message(tally)
    # The faults did fire: every cancellation point was drawn, and every kind of outcome was seen.
    assert tally.sagas == len(SEEDS) * WAVES * PER_WAVE
    assert all(tally.cancellations[point.name] > 0 for point in CancelPoint), tally.lines()
    assert all(tally.outcomes[o.name] > 0 for o in (Outcome.COMMITTED, Outcome.ROLLED_BACK, Outcome.STUCK))
    assert tally.outcomes[Outcome.CANCELLED.name] > 0
    assert tally.step_failures > 0
    assert tally.compensation_failures > 0


@pytest.mark.anyio
async def test_one_runs_failed_write_never_breaks_another_runs_batch(tmp_path: Path) -> None:
    tally = Tally()
    for seed in SEEDS[:6]:
        tally.add(
            await run_scenario(Scenario(seed, waves=3, per_wave=PER_WAVE, write_failure=True), tmp_path)
        )
    assert tally.violations == [], failure_message(tally)
    assert tally.write_failures == 6
    assert tally.outcomes[Outcome.JOURNAL_ERROR.name] == 6  # the poisoned runs' callers, and nobody else
