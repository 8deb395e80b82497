"""`make soak`: the journal's fault-injection harness for minutes, then its counts.

Runs `tests.journal_faults` scenarios (concurrent trips with cancelled callers and failing steps and
undos, on asyncio and trio in turn; every sixth with a real write failure) and, every sixth, a kill
run of `tests.kill_faults_child` (the same trips in a child SIGKILLed at random), each followed by
recovery and the invariant check, until ``AEGIS_SOAK_SECONDS`` (default 180) have passed. Seeds start
at ``AEGIS_SOAK_SEED`` (default 1), so a failing seed can be replayed. Prints the counts and the
first violations; exits 1 if any invariant was violated. Run as ``python -m tests.soak``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

from tests.journal_faults import Scenario, Tally, run_scenario
from tests.kill_faults_child import KillRun

KILLS_PER_RUN = 20
SHOWN = 10


def soak(seconds: float, first_seed: int) -> Tally:
    """Scenarios and kill runs with consecutive seeds until `seconds` have passed."""
    total = Tally()
    deadline = time.monotonic() + seconds
    number = 0
    with tempfile.TemporaryDirectory(prefix="aegis-soak-") as folder:
        while time.monotonic() < deadline:
            seed = first_seed + number
            where = Path(folder) / str(number)
            where.mkdir()
            if number % 6 == 5:
                total.add(KillRun(where, seed).run(KILLS_PER_RUN))
            else:
                scenario = Scenario(seed, waves=8, write_failure=number % 6 == 4)
                backend = "trio" if number % 2 else "asyncio"
                total.add(anyio.run(run_scenario, scenario, where, backend=backend))
            shutil.rmtree(where)
            number += 1
    return total


def main() -> int:
    seconds = float(os.environ.get("AEGIS_SOAK_SECONDS", "180"))
    first_seed = int(os.environ.get("AEGIS_SOAK_SEED", "1"))
    started = time.monotonic()
    total = soak(seconds, first_seed)
    print(f"soak: {time.monotonic() - started:.0f} s from seed {first_seed}")
    print("\n".join(total.lines()))
    for violation in total.violations[:SHOWN]:
        print(violation)
    if len(total.violations) > SHOWN:
        print(f"... and {len(total.violations) - SHOWN} more")
    return 1 if total.violations else 0


if __name__ == "__main__":
    sys.exit(main())
