"""Secrets: every secret a run has held is scrubbed from every failure it reports, notes included.

Not only the failing step's input: a step may swap the card for a token (the card is then no longer
in the context the next step gets), and a later step may add a key that an earlier step's undo then
quotes. Whatever a failure's text or note says, the card and the key appear in no report, event,
diagram, journal row, `aegis-nb runs` output or rendered traceback. Secrets passed as step arguments,
however nested, are scrubbed like those in the context.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, RetryPolicy, SagaDiagram, SagaFailed, Secret, WorkflowEngine
from aegis_nb.kernel.values import argument_secrets
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.saga.trace import describe
from aegis_nb.testing import EventCapture
from tests.servers.launch import aegis_nb

pytestmark = pytest.mark.anyio

CARD = "4111-1111-1111-1111"
KEY = "sk-live-7c1f0d9b"


class Tokenize:
    """Swaps the card in the context for a token, as a payment vault does."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"card": None, "token": "tok_1"})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class LeakyCharge:
    """Fails with an upstream error that echoes the card, which its own context no longer holds."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        raise ValueError(f"card {CARD} declined")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class LeakyUndo:
    """Books; its undo fails quoting the API key a later step added to the context."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"flight": "FL-1"})

    async def compensate(self, ctx: AegisContext) -> None:
        raise RuntimeError(f"cancel refused for key {KEY}")


class AddsKey:
    """Adds an API key to the context for the steps after it."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"api_key": Secret(KEY)})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Declined:
    """Fails plainly."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        raise ValueError("card declined")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class NotesTheCard:
    """Fails with a note (`add_note`) that reveals the card it was given."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        error = ValueError("card declined")
        error.add_note(f"while charging card {ctx.metadata['card'].reveal()}")
        raise error

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def journal_as_stored_and_listed(folder: Path, run_id: str) -> str:
    """The journal's files as bytes on disk, and what ``aegis-nb runs --run`` prints of the run."""
    listed = aegis_nb("runs", "--journal", str(folder / "runs.db"), "--run", run_id)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("saga started: ")  # the run's events, one line each
    raw = b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("runs.db"))
    return listed.stdout + listed.stderr + raw.decode("utf-8", "replace")


async def failed_run(tmp_path: Path, steps: list[object], ctx: AegisContext) -> tuple[SagaFailed, str]:
    """Run `steps` on a journal; return the saga error and every rendering of the run, joined."""
    capture = EventCapture()
    journal = SqliteJournal(tmp_path / "runs.db")
    async with journal:
        engine = WorkflowEngine(journal=journal, sinks=[capture], compensation_retry=RetryPolicy.never())
        run = await engine.run_saga(steps, ctx)
    assert isinstance(run.error, SagaFailed)
    assert run.report is not None
    diagram = SagaDiagram(capture.events)
    outside = await anyio.to_thread.run_sync(journal_as_stored_and_listed, tmp_path, run.run_id)
    renderings = [
        str(run.error),
        run.report.summary(),
        json.dumps(run.report.to_json()),
        repr(run.events),
        repr(run.report),
        diagram.text,
        diagram.mermaid,
        diagram.svg,
        diagram.dot,
        outside,
        "".join(traceback.format_exception(run.error)),
    ]
    return run.error, "\n".join(renderings)


async def test_a_card_swapped_for_a_token_is_scrubbed_from_the_next_steps_failure(tmp_path: Path) -> None:
    error, shown = await failed_run(
        tmp_path, [Tokenize(), LeakyCharge()], AegisContext({"card": Secret(CARD)})
    )
    assert CARD not in shown
    assert str(error) == "saga 'saga': card *** declined — rolled back: Tokenize"


async def test_a_key_added_by_a_later_step_is_scrubbed_from_an_earlier_steps_undo(tmp_path: Path) -> None:
    error, shown = await failed_run(tmp_path, [LeakyUndo(), AddsKey(), Declined()], AegisContext())
    assert KEY not in shown
    assert str(error) == (
        "saga 'saga': card declined — could not undo: LeakyUndo (cancel refused for key ***, after 1 attempt)"
        " — rolled back: AddsKey"
    )


async def test_a_note_that_reveals_a_secret_is_scrubbed_from_the_traceback(tmp_path: Path) -> None:
    error, shown = await failed_run(tmp_path, [NotesTheCard()], AegisContext({"card": Secret(CARD)}))
    assert CARD not in shown
    rendered = "".join(traceback.format_exception(error))
    assert "while charging card ***" in rendered
    assert error.__cause__ is not None
    assert error.__cause__.__notes__ == ["while charging card ***"]


# -- secrets passed as step arguments --------------------------------------------------------------


class ChargeCard:
    async def execute(self, ctx: AegisContext, card: Secret, *, billing: dict[str, list[Secret]]) -> None:
        raise ValueError(f"card {card.reveal()!r} declined, pin {billing['pin'][0].reveal()}")

    async def compensate(
        self, ctx: AegisContext, card: Secret, *, billing: dict[str, list[Secret]]
    ) -> None: ...


class HoldFunds:
    async def execute(self, ctx: AegisContext, card: Secret) -> None:
        return None

    async def compensate(self, ctx: AegisContext, card: Secret) -> None:
        raise RuntimeError(f"could not release the hold on {card.reveal()}")


# Regression guard: secrets passed as step arguments are scrubbed like those in the context.
async def test_secrets_passed_as_step_arguments_never_reach_events_reports_or_errors() -> None:
    # Letters no run id (hex) or timestamp can hold: digits alone turn up in those by chance.
    card, pin, capture = Secret("CARD 4242 'x'"), Secret("PIN1234"), EventCapture()
    saga = [
        (HoldFunds(), (card,), {}),
        (ChargeCard(), (card,), {"billing": {"pin": [pin]}}),
    ]
    run = await WorkflowEngine(sinks=[capture], compensation_retry=RetryPolicy.never()).run_saga(saga)
    assert str(run.error) == (
        "saga 'saga': card \"***\" declined, pin *** — could not undo: "
        "HoldFunds (could not release the hold on ***, after 1 attempt) — rolled back: nothing to undo"
    )
    shown = [repr(capture.events), json.dumps(run.report.to_json()), *map(describe, capture.events)]
    assert not [text for text in shown if "CARD" in text or "PIN1234" in text]


# Regression guard: the search for secrets in arguments ends on an argument that contains itself.
def test_argument_secrets_walks_nested_and_self_containing_arguments() -> None:
    looped: list[object] = [Secret("a")]
    looped.append(looped)
    found = argument_secrets((looped, (Secret("b"),)), {"k": {"x": {Secret("c")}}, "plain": "d"})
    assert sorted(found) == ["a", "b", "c"]
