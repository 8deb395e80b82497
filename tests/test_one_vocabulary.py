"""One vocabulary: every view words a run from `aegis_nb.kernel.phrases`, and only from there.

A phrase (``undone``, ``rolled back``, ``will retry``) is spelled once, in the table; the trace,
the MCP progress messages, the diagrams and `SagaReport.summary` read it from there at call time.
So renaming one is one edit, and a run drawn after the edit says the new word everywhere. The
final events are defined once too: each says the status it leaves its run in, and those are
exactly the statuses `SagaStatus.is_final` calls final.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import aegis_nb
from aegis_nb.diagram import fold, render_dot, render_mermaid, render_svg, render_text
from aegis_nb.kernel import phrases
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.events import EVENT_TYPES, FINAL_EVENT_TYPES, SagaEvent, is_final
from aegis_nb.saga.history import fold_report
from aegis_nb.saga.trace import describe
from aegis_nb.server.progress import progress_message
from tests.test_diagram_scenarios import compensation_fails, failure_at, success, timeout

PACKAGE = Path(aegis_nb.__file__).parent

# The modules that word a run's events and outcomes.
VIEWS = (
    "saga/trace.py",
    "server/progress.py",
    "kernel/report.py",
    *(f"diagram/{path.name}" for path in sorted((PACKAGE / "diagram").glob("*.py"))),
)

# Words a view may still spell, each for a reason: they are not the run's words.
OWN_WORDS = {
    ("diagram/graph.py", phrases.FAILED): "graphviz's own failure, in the note of its fallback",
    ("server/progress.py", phrases.FAILED): "a log line about a notification, not about the run",
    ("diagram/mermaid.py", phrases.ROLLBACK_TRIGGERED): "the documentation page's note, word for word",
    ("diagram/mermaid.py", phrases.ROLLBACK): "the same note of the page",
}

TABLE = {name: value for name, value in vars(phrases).items() if name.isupper() and isinstance(value, str)}


def literals(path: Path) -> list[str]:
    """The string literals of `path`, f-string pieces included; docstrings and enum values left out
    (an enum's value is data, a journal's or a CSS class's, not words)."""
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skipped.add(id(body[0].value))
            for statement in body[1:]:  # attribute docstrings
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    skipped.add(id(statement.value))
        if isinstance(node, ast.ClassDef) and any(
            isinstance(base, ast.Attribute | ast.Name) and ast.unparse(base).endswith("Enum")
            for base in node.bases
        ):
            skipped.update(id(inner) for inner in ast.walk(node))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    ]


def spelled(phrase: str, text: str) -> bool:
    """Whether `text` says `phrase` as words (``data-step`` and ``failed_step`` do not say ``step``)."""
    return re.search(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text, re.IGNORECASE) is not None


def test_the_table_is_the_only_place_a_view_finds_its_words() -> None:
    assert len(TABLE) > 30  # the scan below scans for something
    spelt = sorted(
        (view, phrase, literal)
        for view in VIEWS
        for literal in literals(PACKAGE / view)
        for phrase in TABLE.values()
        if spelled(phrase, literal) and (view, phrase) not in OWN_WORDS
    )
    assert spelt == []


def test_the_scan_finds_a_phrase_spelled_in_a_view(tmp_path: Path) -> None:
    """The scan above would see a view that spelled one itself (and leaves docstrings alone)."""
    view = tmp_path / "view.py"
    view.write_text(
        '"""Says undone in its docstring."""\n'
        "import enum\n"
        "class Kind(enum.Enum):\n"
        '    FAILED = "compensation failed"\n'
        "def label(step: str, ms: str) -> str:\n"
        '    """Not this one: undone."""\n'
        '    return f"{step} undone ({ms})" + "data-step"\n'
    )
    assert sorted(literals(view)) == [" undone (", ")", "data-step"]
    assert [spelled(phrase, " undone (") for phrase in ("undone", "not undone", "done")] == [
        True,
        False,
        False,
    ]


def renderings(events: tuple[SagaEvent, ...]) -> dict[str, str]:
    """Every way the run is worded: the trace, progress messages, diagrams and the report."""
    model = fold(events)
    total = len(model.steps)
    return {
        "trace": "\n".join(describe(event) for event in events),
        "progress": "\n".join(progress_message(event, total) for event in events),
        "text": render_text(model),
        "svg": render_svg(model),
        "mermaid": render_mermaid(model),
        "dot": render_dot(model),
        "summary": fold_report(events).summary(),
    }


SAID = {
    # phrase: which renderings of a rolled-back run (third step failed) say it
    "UNDONE": {"trace", "progress", "text", "svg", "dot"},
    "ROLLED_BACK": {"trace", "progress", "text", "svg", "dot", "summary"},
    "COMPENSATE": {"trace", "text", "svg", "mermaid"},
    "FAILED": {"progress", "svg", "dot"},
    "ROLLBACK_TRIGGERED": {"text", "svg"},
}


@pytest.mark.parametrize("name", sorted(SAID))
def test_a_phrase_renamed_in_the_table_is_renamed_in_every_view(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renamed at run time, the phrase changes in each rendering that says it, and nothing else does.

    The new word is the old one backwards: as wide in the SVG, so nothing there moves but the word.
    """
    events = failure_at(2)
    before = renderings(events)
    old: str = getattr(phrases, name)
    new = old[::-1]
    monkeypatch.setattr(phrases, name, new)
    after = renderings(events)
    assert {view for view in before if after[view] != before[view]} == SAID[name]

    def renamed(found: re.Match[str]) -> str:
        return new.upper() if found.group().isupper() else new

    # As words, and not the SVG's data-state attribute (a `LaneState` name, not a word).
    words = re.compile(rf'(?<![\w-])(?<!data-state="){re.escape(old)}(?![\w-])', re.IGNORECASE)
    assert {view: after[view] for view in SAID[name]} == {
        view: words.sub(renamed, before[view]) for view in SAID[name]
    }


def test_undone_renamed_shows_in_the_trace_progress_text_and_svg_caption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(phrases, "UNDONE", "reverted")
    events = failure_at(2)
    said = renderings(events)
    assert [line for line in said["trace"].splitlines() if "~>" in line] == [
        "  ~> ReserveHotel reverted (5.0 ms)",
        "  ~> BookFlight reverted (5.0 ms)",
    ]
    assert [line for line in said["progress"].splitlines() if line.endswith("reverted")] == [
        "ReserveHotel reverted",
        "BookFlight reverted",
    ]
    assert [line.split("  ")[-1] for line in said["text"].splitlines() if "reverted" in line] == [
        "reverted · 5.0 ms",
        "reverted · 5.0 ms",
    ]
    assert said["svg"].count("↩ reverted</text>") == 2  # the lane heads' captions
    assert "undone" not in " ".join(said.values())


def test_each_final_event_says_the_status_it_leaves_and_those_are_the_final_statuses() -> None:
    assert [cls.status for cls in FINAL_EVENT_TYPES] == [
        SagaStatus.COMMITTED,
        SagaStatus.ROLLED_BACK,
        SagaStatus.STUCK,
    ]
    assert {cls.status for cls in FINAL_EVENT_TYPES} == {s for s in SagaStatus if s.is_final}
    assert [cls for cls in EVENT_TYPES if cls in FINAL_EVENT_TYPES] == list(FINAL_EVENT_TYPES)


@pytest.mark.parametrize("scenario", [success, lambda: failure_at(1), timeout, compensation_fails])
def test_a_run_ends_with_its_one_final_event_and_its_report_has_that_status(scenario: object) -> None:
    assert callable(scenario)
    events: tuple[SagaEvent, ...] = scenario()
    assert [is_final(event) for event in events] == [False] * (len(events) - 1) + [True]
    last = events[-1]
    assert is_final(last)
    assert fold_report(events).status is last.status is fold(events).status


def test_a_diagram_summary_is_the_reports_summary_shortened() -> None:
    """`labels.summary` words a finished run with `SagaReport.summary`, never a copy of its own."""
    for events in (success(), failure_at(2), compensation_fails(), timeout()):
        report = fold_report(events)
        assert render_text(fold(events)).splitlines()[-1] == report.summary(at_most=8) == report.summary()
