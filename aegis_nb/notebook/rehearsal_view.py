"""The rehearsal matrix as HTML (colours a person reads at a glance) and as text (terminals, nbval, logs).

One row per scenario: in the HTML, its verdict first (the outcome and the ledger it left), then one
column per step, cells wrapping between words (never inside one: "outco|me" read as nonsense), the
table scrolling sideways in its output if it is still too wide, so what matters is never the part
cut off; the text keeps the run order, steps first. Green cells
are fine, grey cells did not run, red cells need a person: a booking left live, a compensation that
returned without undoing anything, a compensation that gave up. Above the table, one verdict line;
below it, each problem in a sentence with the likely fix. A saga with parallel groups names them
under the verdict (``run together: BookFlight & ReserveHotel``).
"""

from __future__ import annotations

from html import escape

from aegis_nb.diagram.labels import status_word
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.kernel.text import replace_surrogates
from aegis_nb.mock.ledger import LedgerState
from aegis_nb.mock.ledgertext import ledger_summary
from aegis_nb.notebook.rehearsal import Mark, Rehearsal, ScenarioResult

GREEN, RED, GREY, AMBER = "#15803d", "#b91c1c", "#64748b", "#b45309"
_BACKGROUND = {GREEN: "#f0fdf4", RED: "#fef2f2", GREY: "#f8fafc", AMBER: "#fffbeb"}
_SYMBOL = {
    Mark.NOT_RUN: "·",
    Mark.DONE: "✓",
    Mark.FAILED: "✗",
    Mark.TIMED_OUT: "◷",
    Mark.CANCELLED: "⊘",
    Mark.UNDONE: "↶",
    Mark.UNDONE_BUT_LIVE: "↶!",
    Mark.LEFT_LIVE: "!!",
    Mark.UNDO_FAILED: "↶✗",
}


def outcome_word(status: SagaStatus) -> str:
    """How a rehearsal's outcome column words a run's end: the diagrams' words, STUCK shouted."""
    word = status_word(status)
    return word.upper() if status is SagaStatus.STUCK else word


def ledger_words(status: SagaStatus | None, ledger: LedgerState, leftovers: tuple[str, ...]) -> str:
    """The ledger after a scenario: what a committed run holds, else ``clean`` or what it left live."""
    if status is SagaStatus.COMMITTED:
        return ledger_summary(ledger)
    return "clean" if not leftovers else f"LEFT LIVE: {', '.join(leftovers)}"


def verdict(rehearsal: Rehearsal) -> str:
    total = len(rehearsal.results)
    if rehearsal.safe:
        world = "the ledger ends clean" if rehearsal.with_ledger else "every rollback completes"
        return f"✓ safe: in all {total} scenarios {world}"
    bad = len(rehearsal.unsafe)
    return f"✗ unsafe: {bad} of {total} scenarios leave the world in a state nobody wanted"


def together(rehearsal: Rehearsal) -> list[str]:
    """One line per parallel group: which steps run together."""
    return [f"run together: {' & '.join(group)}" for group in rehearsal.groups]


def _mark_colour(mark: Mark) -> str:
    if mark.bad:
        return RED
    if mark is Mark.NOT_RUN:
        return GREY
    if mark in (Mark.FAILED, Mark.TIMED_OUT, Mark.CANCELLED):
        return AMBER
    return GREEN


def _ledger_text(result: ScenarioResult) -> str:
    if result.ledger is None:
        return "—"
    return ledger_words(result.status, result.ledger, result.leftovers)


def render_text(rehearsal: Rehearsal) -> str:
    """The matrix as aligned text, ending with a newline.

    Like every rendering, valid UTF-8: a lone surrogate (an undecodable byte in an error message a
    problem quotes) becomes U+FFFD, or the kernel could not send the output.
    """
    header = ["scenario", *rehearsal.steps, "outcome"]
    if rehearsal.with_ledger:
        header.append("ledger after")
    rows = [header]
    for result in rehearsal.results:
        row = [result.scenario.label]
        row += [f"{_SYMBOL[outcome.mark]} {outcome.text}" for outcome in result.steps]
        row.append(outcome_word(result.status))
        if rehearsal.with_ledger:
            row.append(_ledger_text(result))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"rehearsal of {rehearsal.saga}: {verdict(rehearsal)}", *together(rehearsal), ""]
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("─" * width for width in widths))
    problems = rehearsal.problems()
    if problems:
        lines += ["", "to fix:", *(f"  - {problem}" for problem in problems)]
    return replace_surrogates("\n".join(lines) + "\n")


# Cells wrap between words only; a heading (a step's name) and an outcome word not at all.
_WRAP = "overflow-wrap:normal;word-break:normal;vertical-align:top"
_NOWRAP = "white-space:nowrap;vertical-align:top"


def _cell(text: str, colour: str, *, bold: bool = False, wraps: bool = True) -> str:
    weight = "font-weight:600;" if bold else ""
    return (
        f'<td style="padding:4px 8px;border:1px solid #e2e8f0;text-align:left;color:{colour};'
        f'background:{_BACKGROUND[colour]};{weight}{_WRAP if wraps else _NOWRAP}">{escape(text)}</td>'
    )


def render_html(rehearsal: Rehearsal) -> str:
    """The matrix as a self-contained HTML table (no scripts, so it survives untrusted notebooks); UTF-8."""
    head_cells = [
        "scenario",
        "outcome",
        *(["ledger after"] if rehearsal.with_ledger else []),
        *rehearsal.steps,
    ]
    head = "".join(
        f'<th style="padding:4px 8px;border:1px solid #e2e8f0;text-align:left;{_NOWRAP}">{escape(cell)}</th>'
        for cell in head_cells
    )
    body = []
    for result in rehearsal.results:
        cells = [_cell(result.scenario.label, GREEN if result.safe else RED, bold=True)]
        status_colour = {SagaStatus.COMMITTED: GREEN, SagaStatus.ROLLED_BACK: GREEN}.get(result.status, RED)
        cells.append(_cell(outcome_word(result.status), status_colour, wraps=False))
        if rehearsal.with_ledger:
            cells.append(_cell(_ledger_text(result), RED if result.leftovers else GREEN))
        for outcome in result.steps:
            cells.append(_cell(f"{_SYMBOL[outcome.mark]} {outcome.text}", _mark_colour(outcome.mark)))
        body.append(f"<tr>{''.join(cells)}</tr>")
    colour = GREEN if rehearsal.safe else RED
    parts = [
        '<div class="aegis-rehearsal" style="font-size:13px">',
        f'<div style="font-weight:700;color:{colour};margin-bottom:6px">rehearsal of '
        f"{escape(rehearsal.saga)}: {escape(verdict(rehearsal))}</div>",
        *(
            f'<div style="color:{GREY};margin-bottom:6px">{escape(line)}</div>'
            for line in together(rehearsal)
        ),
        '<div style="overflow-x:auto"><table style="border-collapse:collapse">',
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>",
    ]
    problems = rehearsal.problems()
    if problems:
        items = "".join(f"<li>{escape(problem)}</li>" for problem in problems)
        parts.append(
            f'<div style="color:{RED};margin-top:6px">to fix:<ul style="margin:2px 0">{items}</ul></div>'
        )
    cancelled = ", ⊘ cancelled (a step of its group failed)" if rehearsal.groups else ""
    parts.append(
        f'<div style="color:{GREY};font-size:11.5px;margin-top:4px">✓ done, ↶ undone, ✗ failed, '
        f"◷ timed out (hung {rehearsal.timeout:g} s after acting){cancelled}, · not run; "
        "red: needs a person</div>"
    )
    parts.append("</div>")
    return replace_surrogates("".join(parts))
