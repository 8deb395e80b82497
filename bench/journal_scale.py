"""The durable journal at scale: what opening, listing, replaying one run and recovering cost at 1x and 10x.

Two journals are built, of 100,000 events (1x) and 1,000,000 (10x), each of committed runs of a saga
of STEPS trivial steps plus UNFINISHED runs a crash left with two steps done (1,000 at 1x, 10,000 at
10x), which recovery must roll back. They are built by the journal's own writer (`JournalFile.write`)
in big unsynced batches, from the rows of one real run with its run id replaced, not by running
sagas one by one. Then, on each, the same operations are timed (best of REPEAT where they do not
change the journal):

- open: a writer opening the file (`SqliteJournal.open`, which checks the file's integrity first) and
  a reader (`JournalFile.open_reader`, what ``aegis-nb runs`` does);
- list: ``aegis-nb runs``' listing (`read_runs` and `runs_table`);
- read one run: `read_run` of the newest run;
- prune: ``aegis-nb runs --prune`` of the finished runs older than the newest (a dry run, which finds
  them all but leaves the journal as it was);
- recover: `WorkflowEngine.recover` of every unfinished run.

Targets (issue 20): each 10x/1x ratio at most ~10 (cost grows no faster than the journal), and reading
one run does not grow at all (ratio ~1). Ratios are taken in this one run; machines here are noisy.

    python bench/journal_scale.py [--events 100000] [--unfinished 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.durable import SqliteJournal, read_run, read_runs
from aegis_nb.saga.durable.runs import runs_table
from aegis_nb.saga.durable.store import EventRow, JournalFile, NewRun, Row, prune_runs

STEPS = 5
DONE_BEFORE_CRASH = 2
TEMPLATE_ID = "run-template-000000"
BATCH = 50_000
"""Rows per transaction while building: big enough that building 1,000,000 events takes seconds."""


class Trivial:
    """A step that does nothing; registered with the journal, so recovery rebuilds it by name."""

    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


STEP = Trivial()


def run_id(number: int) -> str:
    """Run ids as long as the template's, so that each run's rows are the template's, renamed."""
    return f"run-{number:015d}"


@dataclass(frozen=True)
class Template:
    """One committed run's row and encoded events, as the journal wrote them."""

    saga: str
    steps: str
    bodies: tuple[str, ...]


async def _template(folder: Path) -> Template:
    path = folder / "template.db"
    async with SqliteJournal(path, steps=[STEP]) as journal:
        engine = WorkflowEngine(journal=journal)
        await engine.run_saga([STEP] * STEPS, name="scale", run_id=TEMPLATE_ID)
    file = JournalFile.open_reader(path)
    try:
        stored = file.run(TEMPLATE_ID)
    finally:
        file.close()
    return Template(stored.saga, stored.steps, tuple(body for _, body in stored.events))


def build(path: Path, template: Template, events: int, unfinished: int) -> tuple[int, int]:
    """Write a journal of about `events` events, `unfinished` of its runs unfinished; (runs, events)."""
    committed = template.bodies
    crashed = committed[: 1 + 2 * DONE_BEFORE_CRASH]  # started, then steps 0 and 1 started and succeeded
    finished = max(0, (events - unfinished * len(crashed)) // len(committed))
    # Unfinished runs spread through the journal, as crashes would leave them, not all at its end.
    every = max(1, (finished + unfinished) // max(1, unfinished))
    file = JournalFile.open_writer(path)
    total_runs = total_events = 0
    rows: list[Row] = []
    left = unfinished
    try:
        for number in range(finished + unfinished):
            name = run_id(number)
            crash = left > 0 and (number % every == every - 1 or finished + unfinished - number <= left)
            bodies = crashed if crash else committed
            left -= crash
            rows.append(NewRun(name, template.saga, template.steps))
            last = len(bodies) - 1
            for seq, body in enumerate(bodies):
                final = SagaStatus.COMMITTED if seq == last and not crash else None
                rows.append(EventRow(name, seq, body.replace(TEMPLATE_ID, name), final))
            total_runs += 1
            total_events += len(bodies)
            if len(rows) >= BATCH:
                file.write(rows, sync=False)
                rows = []
        file.write(rows, sync=True)
    finally:
        file.close()
    return total_runs, total_events


def best(repeat: int, action: Callable[[], object]) -> float:
    """The fastest of `repeat` runs of `action`, in seconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def open_writer(path: Path) -> None:
    async def go() -> None:
        journal = SqliteJournal(path, steps=[STEP])
        await journal.open()
        await journal.aclose()

    asyncio.run(go())


def open_reader(path: Path) -> None:
    JournalFile.open_reader(path).close()


def listing(path: Path) -> None:
    runs_table(read_runs(path))


def recover(path: Path) -> int:
    async def go() -> int:
        async with SqliteJournal(path, steps=[STEP]) as journal:
            return len(await WorkflowEngine(journal=journal).recover())

    return asyncio.run(go())


def measure(folder: Path, template: Template, events: int, unfinished: int, repeat: int) -> dict[str, float]:
    path = folder / f"journal-{events}.db"
    started = time.perf_counter()
    runs, written = build(path, template, events, unfinished)
    built = time.perf_counter() - started
    size = os.path.getsize(path) / 1e6
    print(f"  built {written:,} events in {runs:,} runs ({size:,.0f} MB) in {built:.1f} s")
    newest = run_id(runs - 1)
    cutoff = time.time() + 3600  # every finished run is older
    found = prune_runs(path, cutoff, dry_run=True)
    times = {
        "open (writer)": best(repeat, lambda: open_writer(path)),
        "open (reader)": best(repeat, lambda: open_reader(path)),
        "list runs": best(repeat, lambda: listing(path)),
        "read one run": best(repeat, lambda: read_run(path, newest)),
        "prune (dry run)": best(repeat, lambda: prune_runs(path, cutoff, dry_run=True)),
    }
    started = time.perf_counter()
    recovered = recover(path)
    times[f"recover {unfinished:,} runs"] = time.perf_counter() - started
    if recovered != unfinished or len(found.removed) != runs - unfinished:
        raise SystemExit(
            f"recovered {recovered} of {unfinished}; prune found {len(found.removed)} of {runs - unfinished}"
        )
    path.unlink()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, default=100_000, help="events at 1x (10x has ten times as many)"
    )
    parser.add_argument("--unfinished", type=int, default=1_000, help="unfinished runs at 1x")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="aegis-journal-scale-"))
    try:
        template = asyncio.run(_template(folder))
        results = []
        for scale in (1, 10):
            print(f"{scale}x: {args.events * scale:,} events, {args.unfinished * scale:,} unfinished runs")
            results.append(
                measure(folder, template, args.events * scale, args.unfinished * scale, args.repeat)
            )
        one, ten = results
        print(f"{'operation':<24}{'1x':>12}{'10x':>12}{'10x/1x':>9}")
        for (name, small), large in zip(one.items(), ten.values(), strict=True):
            print(f"{name:<24}{small * 1e3:>9.2f} ms{large * 1e3:>9.2f} ms{large / small:>8.1f}x")
        print("target: every ratio at most ~10 (linear); reading one run ~1 (flat)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
