"""Errors of the durable journal: `StepNotRecoverable` (a `SagaDefinitionError`) and the `JournalError`s.

Their place in the one error tree is drawn in `aegis_nb.kernel.errors`.

A journal error never leads to the file being rewritten or repaired: the file stays as it was, for a
person (or a newer aegis_nb) to look at.
"""

from __future__ import annotations

import os
from pathlib import Path

from aegis_nb.kernel.errors import AegisError, SagaDefinitionError


class StepNotRecoverable(SagaDefinitionError):
    """A step's identity or arguments could not be written so that recovery can rebuild it, or
    recovery refused to rebuild one: `run_id` and `locator` say which, when it was recovery."""

    def __init__(
        self, problem: str, *, run_id: str | None = None, step: str | None = None, locator: str | None = None
    ) -> None:
        self.problem = problem
        self.run_id = run_id
        self.step = step
        self.locator = locator
        if step is not None:
            where = f"step {step!r} ({locator}): " if locator else f"step {step!r}: "
        else:
            where = f"{locator}: " if locator else ""
        self.detail = where + problem
        """The message without the run: what recovery lists under the run's id."""
        super().__init__(self.detail if run_id is None else f"run {run_id}: {self.detail}")


class JournalError(AegisError):
    """The journal at `path` cannot be used as asked; `record` names the offending record, if any."""

    def __init__(self, path: Path | str, problem: str, *, record: str | None = None) -> None:
        self.path = Path(path)
        self.problem = problem
        self.record = record
        # Named as given: Path("") is ".", which would name the current folder for an empty path.
        where = f"journal {os.fspath(path)!r}" + (f", record {record}" if record else "")
        super().__init__(f"{where}: {problem}")

    def again(self) -> JournalError:
        """A fresh copy, for raising the same failure in several tasks (tracebacks stay separate)."""
        return type(self)(self.path, self.problem, record=self.record)


class JournalUnavailable(JournalError):
    """The journal cannot be created, opened or written (missing directory, read-only, disk full)."""


class JournalUntrusted(JournalError):
    """Others than this user could write the journal (its mode, its owner, or its folder's): what it
    says could be theirs, and recovery acts on it, so it is refused, read-only use included."""


class JournalInUse(JournalError):
    """Another process has the journal open: recovering under it would undo its live runs."""


class JournalCorrupt(JournalError):
    """The file is not an aegis_nb journal, is damaged or truncated, or a record does not decode."""


class JournalTooNew(JournalError):
    """The journal (or one record) was written by a newer schema than this version can read."""


class JournalTooOld(JournalError):
    """The journal file was written with an older table layout, which this version does not read."""
