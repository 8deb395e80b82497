"""`SagaRun`: a finished run as a value: status, report, final context, events and the error to raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaFailed
from aegis_nb.kernel.printable import printable_line
from aegis_nb.kernel.report import SagaReport, SagaStatus
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.history import fold_report


@dataclass(frozen=True)
class SagaRun:
    """The outcome of one run. `unwrap()` gives the final context or raises the saga error."""

    events: tuple[SagaEvent, ...]
    context: AegisContext | None
    error: SagaFailed | None
    known_report: SagaReport | None = field(default=None, repr=False)

    @cached_property
    def report(self) -> SagaReport:
        """What happened; folded from the events on first use when the run committed."""
        if self.known_report is not None:
            return self.known_report
        return fold_report(self.events)

    @property
    def run_id(self) -> str:
        return self.report.run_id

    @property
    def saga(self) -> str:
        return self.report.saga

    @property
    def status(self) -> SagaStatus:
        return self.report.status

    @property
    def ok(self) -> bool:
        return self.report.status is SagaStatus.COMMITTED

    def unwrap(self) -> AegisContext:
        """The final context of a committed run; otherwise raise its `SagaFailed` error."""
        if self.error is not None:
            try:
                raise self.error
            finally:
                # The error's traceback holds this frame: without `self` in it, there is no
                # cycle, and a failed run's events are freed as soon as the error is (not at
                # the next garbage collection).
                del self
        assert self.context is not None
        return self.context

    def __repr__(self) -> str:
        saga, run_id = printable_line(self.saga), printable_line(self.run_id)  # names are shown, not obeyed
        return f"<SagaRun {saga} {run_id} {self.status.value}: {self.report.summary()}>"
