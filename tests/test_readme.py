"""The README's examples run as written and print what the README says.

Its first example and its notebook sections ("Try it in a notebook", "Watch a saga roll back") are
one notebook, as a newcomer runs them: top to bottom, in one kernel, each block a cell.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).parent.parent / "README.md"
FENCE = re.compile(r"```(python|ipython)\n(.*?)```", flags=re.S)
NOTEBOOK_SECTIONS = ("## A saga in a few lines", "## Try it in a notebook", "## Watch a saga roll back")


def section(title: str) -> str:
    """The README's text from `title` to the next ``## `` heading."""
    text = README.read_text()
    start = text.index(f"\n{title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : None if end < 0 else end]


def notebook_blocks() -> list[str]:
    """The code blocks of the notebook sections, in the README's order."""
    return [code for title in NOTEBOOK_SECTIONS for _, code in FENCE.findall(section(title))]


def test_the_first_example_rolls_back_the_flight_where_a_cell_may_await(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (example,) = FENCE.findall(section("## A saga in a few lines"))
    # Compiled as a notebook cell is: top-level await allowed, run on a loop of its own.
    code = compile(example[1], "<README>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {}
    asyncio.run(eval(code, namespace))
    assert capsys.readouterr().out.splitlines() == [
        "cancelling FL-LIS",
        "Card Declined! — rolled back: BookFlight",
    ]


def test_the_notebook_examples_run_top_to_bottom_in_one_kernel(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    blocks = notebook_blocks()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(block.rstrip("\n")) for block in blocks]
    client = nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a block fails

    def text(cell: Any, name: str) -> str:
        return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == name)

    first, load, book, pay, saga, watch = notebook.cells
    assert text(first, "stdout") == "cancelling FL-LIS\nCard Declined! — rolled back: BookFlight\n"
    assert [load.outputs, book.outputs, pay.outputs] == [[], [], []]
    assert text(saga, "stdout") == "cancelling FL-Lisbon\n"
    assert text(saga, "stderr") == ("SagaRolledBack: saga 'saga': Card Declined! — rolled back: BookFlight\n")
    results = [o for o in watch.outputs if o.output_type == "execute_result"]
    assert [o.data["text/plain"] for o in results] == ["'Card Declined! — rolled back: BookFlight'"]
    # The live view ended as its static picture, which a saved notebook keeps.
    pictures = [o.data["text/html"] for o in watch.outputs if "text/html" in o.get("data", {})]
    assert any('<img src="data:image/svg+xml;base64,' in html for html in pictures)


def test_testing_your_steps_prints_what_the_readme_says(capsys: pytest.CaptureFixture[str]) -> None:
    text = section("## Testing your steps")
    ((_, example),) = FENCE.findall(text)
    (printed,) = re.findall(r"It prints:\n\n```\n(.*?)```", text, flags=re.S)
    code = compile(example, "<README>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    asyncio.run(eval(code, {}))
    assert capsys.readouterr().out == printed
