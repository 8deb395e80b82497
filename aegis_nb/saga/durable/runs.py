"""What a journal holds about one run, decoded: its steps (for recovery) and its events (for replay)."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aegis_nb.kernel.printable import printable_line
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.kernel.text import counted
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.durable.codec import SCHEMA_VERSION, RecordError, decode_event, dumps, loads
from aegis_nb.saga.durable.errors import JournalCorrupt, JournalTooNew
from aegis_nb.saga.durable.locator import StepLocator
from aegis_nb.saga.durable.steprecord import StepRecord
from aegis_nb.saga.durable.store import Pruned, RunInfo, StoredRun, reading
from aegis_nb.saga.events import SagaEvent


@dataclass(frozen=True, slots=True)
class JournaledRun:
    """One run as the journal holds it: saga name, last status, step records and events, in order."""

    run_id: str
    saga: str
    status: SagaStatus
    steps: tuple[StepRecord, ...]
    events: tuple[SagaEvent, ...]


def encode_steps(specs: tuple[StepSpec, ...], locators: tuple[StepLocator, ...]) -> str:
    """The run row's step column: versioned JSON of every step's record (locator, arguments, options)."""
    steps = [StepRecord.of(spec, locator).to_json() for spec, locator in zip(specs, locators, strict=True)]
    return dumps({"v": SCHEMA_VERSION, "steps": steps})


def steps_text(records: Sequence[str]) -> str:
    """The step column from each record's JSON text (`StepRecord.to_json`, `dumps`), as `encode_steps`
    writes it: a dynamic saga keeps its records' texts and joins them again as steps are added."""
    return f'{{"v":{SCHEMA_VERSION},"steps":[{",".join(records)}]}}'


def decode_run(path: Path, stored: StoredRun) -> JournaledRun:
    """Decode a stored run, checking each record; errors name the file, the run and the record."""
    steps = _decode_steps(path, stored.run_id, stored.steps)
    events = []
    for expected, (seq, body) in enumerate(stored.events):
        where = f"run {stored.run_id} event {seq}"
        try:
            event = decode_event(body)
        except RecordError as exc:
            error = JournalTooNew if exc.too_new else JournalCorrupt
            raise error(path, str(exc), record=where) from None
        if seq != expected or event.seq != seq or event.run_id != stored.run_id:
            raise JournalCorrupt(
                path,
                f"out of sequence: expected run {stored.run_id} event {expected}, "
                f"found run {event.run_id} event {event.seq}",
                record=where,
            )
        events.append(event)
    return JournaledRun(stored.run_id, stored.saga, stored.status, steps, tuple(events))


def _decode_steps(path: Path, run_id: str, text: str) -> tuple[StepRecord, ...]:
    where = f"run {run_id} steps"
    try:
        data = loads(text)
        raw = data.get("steps")
        if not isinstance(raw, list):
            raise RecordError("no list of steps")
        return tuple(StepRecord.from_json(item, position) for position, item in enumerate(raw))
    except RecordError as exc:
        error = JournalTooNew if exc.too_new else JournalCorrupt
        raise error(path, str(exc), record=where) from None


def runs_table(runs: Sequence[RunInfo]) -> list[str]:
    """``aegis-nb runs``' listing: columns as wide as their widest value (run ids are the caller's
    and names are not cut short), one line per run, then a count of the runs by status."""
    rows = [
        (
            _flat(run.run_id),
            _flat(run.saga),
            run.status.value,
            str(run.events),
            f"{run.recoveries}x" if run.recoveries else "-",
            _utc(run.updated),
        )
        for run in runs
    ]
    header = ("run", "saga", "status", "events", "recovered", "updated (UTC)")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(_aligned(row, widths)).rstrip() for row in (header, *rows)]
    counts = Counter(run.status for run in runs)
    by_status = ", ".join(f"{counts[status]} {status.value}" for status in SagaStatus if counts[status])
    unfinished = sum(n for status, n in counts.items() if not status.is_final)
    advice = (
        f"; {unfinished} unfinished: running now, or left by a crash (aegis-nb recover rolls those back)"
        if unfinished
        else ""
    )
    lines.append(f"{counted(len(runs), 'run')}" + (f": {by_status}" if runs else "") + advice)
    return lines


def prune_lines(pruned: Pruned) -> list[str]:
    """``aegis-nb runs --prune``'s report: the runs removed, listed as ``aegis-nb runs`` lists them,
    then what is left (a dry run says what it would do)."""
    when = f"{_utc(pruned.before)} UTC"
    verb, leave = ("would remove", "would leave") if pruned.dry_run else ("removed", "left")
    removed = pruned.removed
    if removed:
        lines = [f"{verb} {counted(len(removed), 'finished run')} last updated before {when}:"]
        lines += runs_table(removed)[:-1]
    else:
        lines = [f"{verb} no runs: none finished and last updated before {when}"]
    left = pruned.left
    by_status = ", ".join(f"{left[status]} {status.value}" for status in SagaStatus if status in left)
    unfinished = sum(n for status, n in left.items() if not status.is_final)
    never = f" ({counted(unfinished, 'unfinished run')} never pruned)" if unfinished else ""
    total = sum(left.values())
    lines.append(f"{leave} {counted(total, 'run')}" + (f": {by_status}" if total else "") + never)
    return lines


def parse_instant(text: str) -> float:
    """An ISO date (midnight UTC) or date and time (UTC unless it has an offset), as wall-clock seconds.

    `ValueError` saying what is expected, for a command line to show.
    """
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"expected an ISO date or date and time, such as 2026-11-30, 2026-11-30T18:00 (UTC) "
            f"or 2026-11-30T18:00+01:00, got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _aligned(row: tuple[str, ...], widths: list[int]) -> list[str]:
    """Names and status left-aligned, the two counts right-aligned, the time as it is."""
    return [
        cell.rjust(w) if i in (3, 4) else cell.ljust(w)
        for i, (cell, w) in enumerate(zip(row, widths, strict=True))
    ]


def _flat(text: str) -> str:
    """A name on one printable line: a newline would break the table, a lone surrogate the print, an
    escape sequence (the journal's, so anyone's who could write it) the terminal."""
    return printable_line(text)


def read_runs(path: Path | str) -> tuple[RunInfo, ...]:
    """Every run in the journal at `path` with its status, oldest first (read-only; safe while live)."""
    with reading(path) as file:
        return file.runs()


def read_run(path: Path | str, run_id: str) -> JournaledRun:
    """One run, decoded; `KeyError` if the journal has no such run."""
    with reading(path) as file:
        return decode_run(file.path, file.run(run_id))


def read_events(path: Path | str, run_id: str) -> tuple[SagaEvent, ...]:
    """A run's events in order, recovery events included: what a live view replays."""
    return read_run(path, run_id).events
