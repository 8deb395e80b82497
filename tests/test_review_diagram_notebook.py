"""Regressions: Mermaid directives and graphviz entities in names, lone surrogates in every rendering,
continued ``%aegis_saga`` lines, and compiler-only syntax errors in step cells.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from xml.etree import ElementTree

import pytest

pytest.importorskip("IPython")
pytest.importorskip("ipywidgets")

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from aegis_nb.diagram import GraphSource, fold, render_dot, render_graph, render_mermaid, render_text
from aegis_nb.kernel.context import AegisContext
from aegis_nb.notebook.blocking import HOOK, blocking_transformer
from aegis_nb.notebook.explorer import SagaExplorer
from aegis_nb.notebook.rehearsal import rehearse_saga
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.outcome import SagaRun
from tests.conftest import require_executable
from tests.ipython_support import loaded_shell
from tests.test_diagram_scenarios import Script

UNDECODABLE = os.fsdecode(b"report-\xff.pdf")  # how Python hands out an undecodable file name
REPLACED = "report-\ufffd.pdf"
SURROGATE = re.compile("[\ud800-\udfff]")


def upload_fails(name: str) -> tuple[SagaEvent, ...]:
    """A run whose only step, named after the file `name`, fails naming it too."""
    script = Script((f"Upload {name}",), saga="upload")
    return script.step_fails(0, f"Upload {name}", f"cannot upload {name}").end_rollback()


# -- Mermaid: a name cannot carry a directive ---------------------------------------------------------


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


# -- graphviz: entities in names ----------------------------------------------------------------------


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


# -- lone surrogates ----------------------------------------------------------------------------------


def test_graphviz_draws_a_run_with_a_lone_surrogate_instead_of_raising() -> None:
    require_executable("dot")
    rendering = render_graph(fold(upload_fails(UNDECODABLE)))
    assert rendering.source is GraphSource.GRAPHVIZ
    assert rendering.note is None
    assert rendering.svg == render_graph(fold(upload_fails(REPLACED))).svg


def test_every_text_rendering_of_a_lone_surrogate_is_valid_utf8() -> None:
    model, expected = fold(upload_fails(UNDECODABLE)), fold(upload_fails(REPLACED))
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


# -- IPython shells -----------------------------------------------------------------------------------


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell() as ip:
        yield ip


def define(shell: InteractiveShell, name: str, body: str = "return None") -> None:
    cell = f"%%aegis_step {name}\nasync def execute(ctx):\n    {body}\nasync def compensate(ctx):\n    pass\n"
    result = shell.run_cell(cell)
    assert result.success, result.error_in_exec


def test_the_explorer_html_of_an_error_with_a_lone_surrogate_is_valid_utf8(shell: InteractiveShell) -> None:
    shell.user_ns["FILE"] = UNDECODABLE
    define(shell, "Upload", 'raise OSError(f"cannot upload {FILE}")')
    result = shell.run_cell("%aegis_saga Upload --interactive")
    explorer = result.result
    assert isinstance(explorer, SagaExplorer)
    explorer.run_button.click()  # no loop is running here: each press runs the saga to the end
    explorer.run_button.click()
    # Widget values travel to the front end as UTF-8 JSON.
    html = [explorer.widget.current, explorer.widget.previous, explorer.widget.history]
    assert [SURROGATE.search(value) for value in html] == [None, None, None]
    assert f"cannot upload {REPLACED} — rolled back: nothing to undo</td>" in html[2]


def test_a_saga_magic_line_continued_with_a_backslash_is_one_magic(shell: InteractiveShell) -> None:
    lines = ["%aegis_saga BookFlight \\\n", "    ChargeCard -o run\n", "print('after')\n"]
    assert blocking_transformer(lines) == [
        f"await {HOOK}('aegis_saga', ' BookFlight      ChargeCard -o run', None)\n",
        "print('after')\n",
    ]
    define(shell, "BookFlight")
    define(shell, "ChargeCard")
    result = shell.run_cell("%aegis_saga BookFlight \\\n    ChargeCard -o run\n")
    assert result.success, result.error_before_exec or result.error_in_exec
    run = shell.user_ns["run"]
    assert isinstance(run, SagaRun)
    assert run.report.summary() == "committed: BookFlight, ChargeCard"


@pytest.mark.parametrize(
    ("code", "report"),
    [
        (
            "token = await fetch()\n",
            "syntax error on line 1 of the cell: 'await' outside function\n    token = await fetch()\n"
            "            ^",
        ),
        (
            "if True:\n    return 1\n",
            "syntax error on line 2 of the cell: 'return' outside function\n        return 1\n        ^",
        ),
        (
            "if True:\n    break\n",
            "syntax error on line 2 of the cell: 'break' outside loop\n        break\n        ^",
        ),
    ],
    ids=["await", "return", "break"],
)
def test_a_syntax_error_only_the_compiler_sees_is_one_line_naming_the_step(
    shell: InteractiveShell, code: str, report: str
) -> None:
    functions = "async def execute(ctx):\n    return None\nasync def compensate(ctx):\n    pass\n"
    cell = f"%%aegis_step Book\n{code}{functions}"
    error = shell.run_cell(cell).error_in_exec
    assert isinstance(error, UsageError)
    assert str(error) == f"step Book: {report}"
    assert "Book" not in shell.user_ns
