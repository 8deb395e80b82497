r"""Untrusted text is shown, never obeyed: no rendering passes a control character through.

An upstream tool's error message, a step's, a saga's name or a caller's run id may hold escape
sequences (clear the screen, retitle the terminal, overwrite a line with a fake "all refunded"),
a newline that starts a fake line, bidi overrides ("Trojan Source"), or C0 characters that make an
SVG ill-formed XML. Every text output (the text diagram, ``summary()``, ``str`` and reprs, the
trace, MCP progress messages, ``aegis-nb runs`` and ``recover``) shows them as their escapes
(``\x1b``, ``\u202e``), with line breaks folded to a space in one-line fields; the SVG, Mermaid and
graphviz views hold none either, and parse as XML. The journal and the structured report keep the
original text. `printable` is specified by properties: nothing it returns is a control, it is
idempotent, and text without controls comes back unchanged. Markup in a name is drawn as written (a
Mermaid directive, a DOT entity), and a lone surrogate (an undecodable file name) is drawn as U+FFFD
in every rendering, which all stay valid UTF-8.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from xml.etree import ElementTree

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aegis_nb import AegisContext, ToolError
from aegis_nb.diagram import (
    GraphSource,
    fold,
    render_dot,
    render_graph,
    render_mermaid,
    render_svg,
    render_text,
)
from aegis_nb.kernel.printable import printable, printable_line
from aegis_nb.notebook import SagaDiagram, static_bundle
from aegis_nb.notebook.rehearsal import rehearse_saga
from aegis_nb.saga.durable import SqliteJournal, read_run
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent, StepFailed
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.trace import describe
from aegis_nb.server.progress import progress_message
from tests.conftest import require_executable
from tests.durable_support import Crash, CrashingJournal
from tests.servers.launch import aegis_nb
from tests.test_diagram_scenarios import Script

BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""The characters that reorder text, written out here rather than taken from the module under test."""

ERROR = (
    "Card declined\x1b[2J\x1b]0;pwned\x07\r\x1b[2Kall refunded\n[OK] refund done for card \u202e4242\u202c"
)
"""What a hostile tool answers: clear screen, retitle, overwrite the line, a fake line, bidi."""
SHOWN = r"Card declined\x1b[2J\x1b]0;pwned\x07 \x1b[2Kall refunded [OK] refund done for card \u202e4242\u202c"
"""`ERROR` as every one-line rendering shows it: escapes, the line breaks one space."""

SAGA, SAGA_SHOWN = "trip\x1b]0;pwned\x07", r"trip\x1b]0;pwned\x07"
RUN_ID, RUN_SHOWN = "r1\x1b[2J\u202e", r"r1\x1b[2J\u202e"
RESERVE, RESERVE_SHOWN = "Reserve\u2067Hotel\u2069", r"Reserve\u2067Hotel\u2069"
SUMMARY = f"{SHOWN} — rolled back: {RESERVE_SHOWN}"

RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029" + "".join(sorted(BIDI)) + "]")
"""A control character other than the newline that ends a line of a multi-line output."""


def no_raw_control(text: str, *, lines: bool = False) -> bool:
    """Whether `text` holds no control character (but line ends, when it is `lines` of output)."""
    return RAW.search(text) is None and (lines or "\n" not in text)


def masked(text: str) -> str:
    """`text` with its measured durations made ``_``: the rest is asserted whole."""
    return re.sub(r"\d+\.\d+ ms", "_ ms", re.sub(r" *\+\d+\.\d+ ms", " +_ ms", text))


class Reserve:
    """Succeeds; its name holds bidi isolates."""

    name = RESERVE

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"hotel": "H-1"})

    async def compensate(self, ctx: AegisContext) -> None:
        pass


class Charge:
    """Fails as a hostile upstream tool would, in its own words."""

    name = "Charge"

    async def execute(self, ctx: AegisContext) -> AegisContext:
        raise ToolError("charge_card", ERROR, refused=False)

    async def compensate(self, ctx: AegisContext) -> None:
        pass


async def hostile_run() -> SagaRun:
    return await WorkflowEngine().run_saga([Reserve(), Charge()], name=SAGA, run_id=RUN_ID)


# -- printable, by its properties --------------------------------------------------------------------


def is_control(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") or char in BIDI


CONTROLS = st.sampled_from(
    [chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7F, 0xA0)] + sorted(BIDI) + ["\u2028", "\u2029"]
)
TEXT = st.text(st.one_of(st.characters(), CONTROLS))


@given(TEXT)
def test_printable_text_holds_no_control_character(text: str) -> None:
    assert not any(is_control(char) for char in printable(text))
    line = printable_line(text)
    assert not any(is_control(char) for char in line)
    assert line == " ".join(line.split())  # one line, single spaces, nothing at its ends


@given(TEXT)
def test_printable_is_idempotent(text: str) -> None:
    assert printable(printable(text)) == printable(text)
    assert printable_line(printable_line(text)) == printable_line(text)


@given(st.text(st.characters().filter(lambda char: not is_control(char))))
def test_text_without_controls_is_unchanged(text: str) -> None:
    assert printable(text) == text


@given(CONTROLS)
def test_a_control_is_shown_as_its_repr_escape(char: str) -> None:
    assert printable(f"a{char}b") == f"a{repr(char)[1:-1]}b"


def test_a_lone_surrogate_is_the_replacement_character() -> None:
    assert printable("caf\udce9") == "caf\ufffd"


# -- a real saga that a hostile tool fails --------------------------------------------------------


@pytest.mark.anyio
async def test_the_summary_and_the_error_show_the_text_escaped_and_the_report_keeps_it() -> None:
    run = await hostile_run()
    report = run.report
    assert report.summary() == SUMMARY
    assert report.cause is not None
    assert str(report.cause) == SHOWN
    assert str(run.error) == f"saga {SAGA!r}: {SUMMARY}"
    # What is kept is what the tool said, for the journal, MCP clients and code.
    assert report.cause.message == ERROR
    assert report.to_json()["cause"] == {"type": "ToolError", "message": ERROR}
    assert (report.saga, report.run_id, report.steps) == (SAGA, RUN_ID, (RESERVE, "Charge"))


@pytest.mark.anyio
async def test_reprs_of_the_run_its_report_error_and_events_hold_no_control_character() -> None:
    run = await hostile_run()
    assert repr(run) == f"<SagaRun {SAGA_SHOWN} {RUN_SHOWN} rolled_back: {SUMMARY}>"
    shown = [repr(run.report), repr(run.report.cause), repr(run.error), *map(repr, run.events)]
    assert [text for text in shown if not no_raw_control(text)] == []
    assert repr(run.error) == f"SagaRolledBack({str(run.error)!r})"


@pytest.mark.anyio
async def test_the_text_diagram_shows_the_text_escaped() -> None:
    run = await hostile_run()
    text = SagaDiagram(run).text
    charge = f"{'2 Charge':<{len('1 ' + RESERVE_SHOWN)}}"
    # The failed arrow's label is cut at 120 characters, inside its duration.
    cut = re.sub(r" · [0-9.]+…$", " · _…", masked(text), flags=re.MULTILINE)
    assert cut == (
        f"{SAGA_SHOWN} — ROLLED BACK · 2 steps · _ ms · run {RUN_SHOWN}\n"
        f"✗ Charge: ToolError: {SHOWN}\n"
        "\n"
        f" +_ ms  Engine → 1 {RESERVE_SHOWN}  execute()\n"
        f" +_ ms  Engine ← 1 {RESERVE_SHOWN}  ok · _ ms\n"
        f" +_ ms  Engine → {charge}  execute()\n"
        f" +_ ms  Engine ← {charge}  ✗ ToolError: {SHOWN} · _…\n"
        "┌─ ⟲ Rollback triggered\n"
        f"│ +_ ms  Engine → 1 {RESERVE_SHOWN}  compensate()\n"
        f"│ +_ ms  Engine ← 1 {RESERVE_SHOWN}  undone · _ ms\n"
        "└─\n"
        f"{SUMMARY}\n"
    )
    assert repr(SagaDiagram(run)) == text


@pytest.mark.anyio
async def test_the_trace_and_progress_messages_show_the_text_escaped() -> None:
    run = await hostile_run()
    assert [masked(describe(event)) for event in run.events] == [
        f"saga {SAGA_SHOWN} started: {RESERVE_SHOWN} -> Charge (no deadline)",
        f"  -> {RESERVE_SHOWN}.execute()",
        f"  <- {RESERVE_SHOWN} ok (_ ms)",
        "  -> Charge.execute()",
        f"  x  Charge error: {SHOWN} (_ ms)",
        f"  <~ {RESERVE_SHOWN}.compensate()",
        f"  ~> {RESERVE_SHOWN} undone (_ ms)",
        f"saga {SAGA_SHOWN} rolled back in _ ms: {SUMMARY}",
    ]
    assert [progress_message(event, 2) for event in run.events] == [
        f"{SAGA_SHOWN} started: {RESERVE_SHOWN} -> Charge",
        f"step 1 of 2: executing {RESERVE_SHOWN}",
        f"step 1 of 2: {RESERVE_SHOWN} done",
        "step 2 of 2: executing Charge",
        f"step 2 of 2: Charge failed: {SHOWN}",
        f"compensating {RESERVE_SHOWN}",
        f"{RESERVE_SHOWN} undone",
        f"{SAGA_SHOWN} rolled back: {SUMMARY}",
    ]


@pytest.mark.anyio
async def test_the_svg_and_mermaid_views_hold_no_control_character() -> None:
    run = await hostile_run()
    model = fold(run.events)
    svg = render_svg(model)
    root = ElementTree.fromstring(svg)  # XML refuses C0 characters, even as &#27;
    assert no_raw_control(svg, lines=True)
    assert root.get("aria-label") == f"{SAGA_SHOWN}: rolled back — {SUMMARY}"
    assert f"✗ Charge: ToolError: {SHOWN}"[:40] in "".join(root.itertext())
    assert no_raw_control(render_mermaid(model), lines=True)


# -- graphviz: names that DOT and XML both have trouble with -----------------------------------------

NASTY = 'Pay "now" \\ <b>\x01\x7f\nnext\u202e'
NASTY_SHOWN = r'Pay "now" \ <b>\x01\x7f next\u202e'


class Nasty:
    """A step whose name holds quotes, a backslash, markup, C0, DEL, a newline and a bidi override."""

    name = NASTY

    async def execute(self, ctx: AegisContext) -> AegisContext:
        raise ValueError("nope\x00")

    async def compensate(self, ctx: AegisContext) -> None:
        pass


@pytest.mark.anyio
async def test_graphviz_draws_well_formed_svg_of_hostile_names_and_shows_them() -> None:
    require_executable("dot")
    run = await WorkflowEngine().run_saga([Reserve(), Nasty()], name=f"{SAGA}\nline 2")
    model = fold(run.events)
    rendering = render_graph(model)
    assert (rendering.source, rendering.note) == (GraphSource.GRAPHVIZ, None)
    root = ElementTree.fromstring(rendering.svg)  # well-formed: graphviz got no C0 character
    assert no_raw_control(render_dot(model), lines=True)
    texts = [text.strip() for text in root.itertext() if text.strip()]
    assert f"{SAGA_SHOWN} line 2 · rolled back" in texts
    assert f"1 · {RESERVE_SHOWN}" in texts
    assert f"2 · {NASTY_SHOWN}" in texts


# -- the command line, on a real journal, in a process of its own --------------------------------------


def journal_with_hostile_runs(path: Path) -> None:
    """The hostile run, rolled back; then one of the same steps left unfinished by a crash."""

    async def scenario() -> None:
        async with SqliteJournal(path) as journal:
            await WorkflowEngine(journal=journal).run_saga([Reserve(), Charge()], name=SAGA, run_id=RUN_ID)
        # 0 start, 1-2 Reserve, 3-4 Charge failed, 5 Reserve's compensation started, 6 it
        # succeeded: dies there, so recovery compensates Reserve again.
        engine = WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 6))
        with pytest.raises(Crash):
            await engine.run_saga([Reserve(), Charge()], name=SAGA, run_id=f"{RUN_ID}-half")

    anyio.run(scenario)


ENGINE = WorkflowEngine()
"""The "app" `aegis-nb recover` loads to rebuild this module's steps."""


def test_runs_replays_a_hostile_run_escaped_and_the_journal_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal_with_hostile_runs(path)
    child = aegis_nb("runs", "--journal", str(path), "--run", RUN_ID)
    assert (child.returncode, child.stderr) == (0, "")
    assert no_raw_control(child.stdout, lines=True)
    assert masked(child.stdout).splitlines() == [
        f"saga {SAGA_SHOWN} started: {RESERVE_SHOWN} -> Charge (no deadline)",
        f"  -> {RESERVE_SHOWN}.execute()",
        f"  <- {RESERVE_SHOWN} ok (_ ms)",
        "  -> Charge.execute()",
        f"  x  Charge error: {SHOWN} (_ ms)",
        f"  <~ {RESERVE_SHOWN}.compensate()",
        f"  ~> {RESERVE_SHOWN} undone (_ ms)",
        f"saga {SAGA_SHOWN} rolled back in _ ms: {SUMMARY}",
    ]
    failed = read_run(path, RUN_ID).events[4]
    assert isinstance(failed, StepFailed)
    assert failed.error.message == ERROR  # the journal keeps what the tool said

    listing = aegis_nb("runs", "--journal", str(path))
    assert (listing.returncode, listing.stderr) == (0, "")
    assert no_raw_control(listing.stdout, lines=True)
    assert [line.split()[:3] for line in listing.stdout.splitlines()[1:3]] == [
        [RUN_SHOWN, SAGA_SHOWN, "rolled_back"],
        [f"{RUN_SHOWN}-half", SAGA_SHOWN, "compensating"],
    ]


def test_recover_prints_the_hostile_run_escaped(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal_with_hostile_runs(path)
    child = aegis_nb("recover", "--journal", str(path), "tests.test_untrusted_text:ENGINE")
    assert (child.returncode, child.stderr) == (0, "")
    assert no_raw_control(child.stdout, lines=True)
    assert masked(child.stdout).splitlines() == [
        f"[{RUN_SHOWN}-half]   <~ {RESERVE_SHOWN}.compensate()",
        f"[{RUN_SHOWN}-half]   ~> {RESERVE_SHOWN} undone (_ ms)",
        f"[{RUN_SHOWN}-half] saga {SAGA_SHOWN} rolled back in _ ms: {SUMMARY}",
        "recovered 1 run(s): 1 rolled back, 0 stuck; 0 left unfinished",
    ]


# -- lone surrogates, and describe on one line -----------------------------------------------------


def upload_fails(name: str) -> tuple[SagaEvent, ...]:
    """A run whose error names the file `name`, in a saga named after it too."""
    script = Script(("Upload",), saga=f"upload {name}")
    return script.step_fails(0, "Upload", f"cannot upload {name}").end_rollback()


UNDECODABLE = os.fsdecode(b"report-\xff.pdf")  # how Python hands out an undecodable file name


REPLACED = "report-\ufffd.pdf"


# Regression guard: a lone surrogate (an undecodable file name) is drawn as U+FFFD in every view.
def test_a_lone_surrogate_is_drawn_as_the_replacement_character() -> None:
    events, expected = upload_fails(UNDECODABLE), upload_fails(REPLACED)
    assert UNDECODABLE != REPLACED
    svg = render_svg(fold(events))
    assert svg == render_svg(fold(expected))
    assert ElementTree.fromstring(svg.encode("utf-8")).get("aria-label") == (
        f"upload {REPLACED}: rolled back — cannot upload {REPLACED} — rolled back: nothing to undo"
    )
    diagram, same = SagaDiagram(events), SagaDiagram(expected)
    assert diagram._repr_mimebundle_() == static_bundle(fold(expected))
    assert diagram.graph(dot=None)._repr_mimebundle_() == same.graph(dot=None)._repr_mimebundle_()
    assert diagram.mermaid_view()._repr_mimebundle_() == same.mermaid_view()._repr_mimebundle_()
    assert repr(diagram) == repr(same)


# Regression guard: a lone surrogate in a run id still draws, with a stable diagram id.
def test_a_lone_surrogate_in_a_run_id_still_draws() -> None:
    events = Script(("Upload",), run_id="run-\udcff").step_fails(0, "Upload", "gone").end_rollback()
    svg = render_svg(fold(events))
    assert ElementTree.fromstring(svg.encode("utf-8")).get("id") == "aegis-376c351358-4"


# Regression guard: describe() puts multi-line names and errors on one line.
def test_describe_puts_multi_line_names_and_errors_on_one_line() -> None:
    stuck = (
        Script(("Reserve", "Validate\nStep"), saga="book\nvacation")
        .step_ok(0, "Reserve")
        .step_fails(1, "Validate\nStep", "2 validation errors for Booking\nnights\n  Input should be > 0")
        .undo_fails(0, "Reserve", "refund refused:\n  ledger locked", 1, will_retry=False)
        .end_rollback()
    )
    assert [describe(event) for event in stuck] == [
        "saga book vacation started: Reserve -> Validate Step (no deadline)",
        "  -> Reserve.execute()",
        "  <- Reserve ok (10.0 ms)",
        "  -> Validate Step.execute()",
        "  x  Validate Step error: 2 validation errors for Booking nights Input should be > 0 (10.0 ms)",
        "  <~ Reserve.compensate()",
        "  !! Reserve compensation failed: refund refused: ledger locked (giving up)",
        "saga book vacation STUCK after 22.1 ms: 2 validation errors for Booking nights Input should be > 0"
        " — could not undo: Reserve (refund refused: ledger locked, after 1 attempt)"
        " — rolled back: nothing to undo",
    ]
    rolled_back = (
        Script(("Reserve", "Validate"), saga="book")
        .step_ok(0, "Reserve")
        .step_fails(1, "Validate", "bad\r\ninput")
        .undo(0, "Reserve")
        .end_rollback()
    )
    assert describe(rolled_back[-1]) == "saga book rolled back in 25.1 ms: bad input — rolled back: Reserve"


# -- markup in names, and lone surrogates in every rendering ---------------------------------------


SURROGATE = re.compile("[\ud800-\udfff]")


def step_named_after(name: str) -> tuple[SagaEvent, ...]:
    """A run whose only step, named after the file `name`, fails naming it too."""
    script = Script((f"Upload {name}",), saga="upload")
    return script.step_fails(0, f"Upload {name}", f"cannot upload {name}").end_rollback()


# Regression guard: a Mermaid directive in a name or error is drawn as text, not read as configuration.
def test_a_mermaid_directive_in_a_name_or_error_is_drawn_as_text() -> None:
    directive = '%%{init: {"theme": "dark"}}%%'
    events = (
        Script(("Book", directive))
        .step_ok(0, "Book")
        .step_fails(1, directive, f"50% off {directive}")
        .undo(0, "Book")
        .end_rollback()
    )
    # Mermaid reads `%%{...}%%` anywhere in the source as configuration (and drops it from the
    # text); as entity codes it is drawn as written.
    assert render_mermaid(fold(events)) == (
        "sequenceDiagram\n"
        "    participant E as Workflow Engine\n"
        "    participant S1 as Step 1 (Book)\n"
        '    participant S2 as Step 2 (#37;#37;{init: {"theme": "dark"}}#37;#37;)\n'
        "\n"
        "    E->>S1: execute()\n"
        "    S1-->>E: Success\n"
        "    E->>S2: execute()\n"
        '    S2-->>E: Fails (50#37; off #37;#37;{init: {"theme": "dark"}}#37;#37;)\n'
        "\n"
        "    rect rgba(220, 38, 38, 0.12)\n"
        "        Note over E: Rollback Triggered\n"
        "        E->>S1: compensate()\n"
        "    end\n"
    )


# Regression guard: DOT labels escape ampersands, so graphviz draws names as written.
def test_dot_labels_escape_ampersands_so_graphviz_draws_names_as_written() -> None:
    events = Script(("R&amp;D", "a &lt; b")).step_ok(0, "R&amp;D").step_ok(1, "a &lt; b").commit()
    model = fold(events)
    # Graphviz decodes entities in every label: `&` must reach it as `&amp;`.
    assert render_dot(model) == (
        "digraph saga {\n"
        '  graph [rankdir=LR, bgcolor="#ffffff", label="book_vacation · committed", labelloc=t, '
        'fontname="Helvetica", fontsize=16, pad=0.3, nodesep=0.5, ranksep=0.45];\n'
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=12, penwidth=1.6];\n'
        '  edge [fontname="Helvetica", fontsize=10, penwidth=1.4];\n'
        '  start [label="start", shape=circle, fillcolor="#1e293b", fontcolor="#ffffff", width=0.6];\n'
        '  s0 [label="1 · R&amp;amp;D\\n✓ done · 10.0 ms", fillcolor="#dcfce7", color="#16a34a", '
        'fontcolor="#14532d"];\n'
        "  start -> s0 [arrowsize=0.8];\n"
        '  s1 [label="2 · a &amp;lt; b\\n✓ done · 10.0 ms", fillcolor="#dcfce7", color="#16a34a", '
        'fontcolor="#14532d"];\n'
        "  s0 -> s1 [arrowsize=0.8];\n"
        '  outcome [label="committed", shape=box, style="rounded,filled,bold", fillcolor="#16a34a", '
        'fontcolor="#ffffff", color="#16a34a"];\n'
        "  s1 -> outcome;\n"
        "}\n"
    )
    require_executable("dot")
    rendering = render_graph(model)
    assert rendering.source is GraphSource.GRAPHVIZ
    drawn = [
        element.text
        for element in ElementTree.fromstring(rendering.svg.encode("utf-8")).iter()
        if element.tag.endswith("}text")
    ]
    assert drawn == [
        "book_vacation · committed",
        "start",
        "1 · R&amp;D",
        "✓ done · 10.0 ms",
        "2 · a &lt; b",
        "✓ done · 10.0 ms",
        "committed",
    ]


# Regression guard: graphviz draws a run with a lone surrogate instead of raising.
def test_graphviz_draws_a_run_with_a_lone_surrogate_instead_of_raising() -> None:
    require_executable("dot")
    rendering = render_graph(fold(step_named_after(UNDECODABLE)))
    assert rendering.source is GraphSource.GRAPHVIZ
    assert rendering.note is None
    assert rendering.svg == render_graph(fold(step_named_after(REPLACED))).svg


# Regression guard: every text rendering of a lone surrogate is valid UTF-8.
def test_every_text_rendering_of_a_lone_surrogate_is_valid_utf8() -> None:
    model, expected = fold(step_named_after(UNDECODABLE)), fold(step_named_after(REPLACED))
    # Each is written to files and printed: a lone surrogate would make either raise.
    assert render_dot(model) == render_dot(expected)
    assert render_mermaid(model) == render_mermaid(expected)
    assert render_text(model) == render_text(expected)
    assert SURROGATE.search(render_text(model) + render_mermaid(model) + render_dot(model)) is None


class Upload:
    """Fails naming a file whose name holds an undecodable byte."""

    name = "Upload"

    async def execute(self, ctx: AegisContext) -> None:
        raise OSError(f"cannot upload {UNDECODABLE}")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


# Regression guard: a rehearsal of an error with a lone surrogate is valid UTF-8.
@pytest.mark.anyio
async def test_a_rehearsal_of_an_error_with_a_lone_surrogate_is_valid_utf8() -> None:
    rehearsal = await rehearse_saga([Upload()])
    bundle = rehearsal._repr_mimebundle_()
    assert sorted(bundle) == ["text/html", "text/plain"]
    assert all(SURROGATE.search(data) is None for data in bundle.values())
    assert repr(rehearsal) == bundle["text/plain"]
    assert bundle["text/plain"].splitlines()[-1] == (
        f"  - all steps succeed: nothing was injected, yet the saga did not commit: cannot upload {REPLACED}"
        " — rolled back: nothing to undo."
    )
