"""Every code block of the README runs where its label says, and prints what the README shows.

A newcomer meets the README's blocks in two places: cells of one notebook, run top to bottom, and
files run with ``python``. Each block says which (``<!-- run: KIND -->``, see `tests.readme_support`),
and is run so here: the notebook blocks as the cells of one notebook in a real kernel (nbclient), each
script in a fresh interpreter, each server as a stdio MCP server a client lists, each shell command
through the argument parser, Makefile or pyproject.toml that must accept it, each policy through the
gateway's loader. An ``output`` block must equal what the block before it printed. An unlabelled
block fails, so a new example cannot slip in untested.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import aegis_nb
from aegis_nb.cli import build_parser
from tests.readme_support import KINDS, README, Block, blocks, github_anchor, printed_by
from tests.servers.launch import aegis_nb as run_aegis_nb

ROOT = README.parent
ALL = blocks()
OUTPUTS = printed_by(ALL)


def of_kind(kind: str) -> list[Any]:
    return [pytest.param(block, id=block.name) for block in ALL if block.kind == kind]


def test_every_block_says_where_it_runs() -> None:
    assert [block.line for block in ALL if block.kind not in KINDS] == []
    # An output shows what the block before it printed, so it follows a block that runs.
    runs = ("notebook", "script")
    assert [
        block.line
        for before, block in itertools.pairwise(ALL)
        if block.kind == "output"
        if before.kind not in runs
    ] == []
    assert ALL[0].kind != "output"


def test_an_unlabelled_block_is_found_and_an_output_is_paired_with_the_block_before_it() -> None:
    text = (
        "<!-- run: script -->\n```python\nprint(1)\n```\n\n"
        "<!-- run: output -->\n```\n1\n```\n\n"
        "```sh\nls\n```\n"
    )
    script, output, bare = blocks(text)
    assert [(b.kind, b.language, b.code, b.line) for b in (script, output, bare)] == [
        ("script", "python", "print(1)\n", 2),
        ("output", "", "1\n", 7),
        (None, "sh", "ls\n", 11),
    ]
    assert printed_by([script, output, bare]) == {2: output}


def test_the_contents_link_to_headings_that_exist() -> None:
    text = README.read_text()
    fenced = "".join(block.code for block in ALL)
    headings = {
        github_anchor(line.lstrip("#"))
        for line in text.splitlines()
        if line.startswith("#") and line not in fenced
    }
    assert sorted(set(re.findall(r"\]\(#([\w-]+)\)", text)) - headings) == []


# -- notebook ------------------------------------------------------------------------------------


def test_the_notebook_blocks_run_in_order_in_one_kernel(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [block for block in ALL if block.kind == "notebook"]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(block.code.rstrip("\n")) for block in cells]
    client = nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a block fails

    def stdout(cell: Any) -> str:
        return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")

    shown = {block.line: OUTPUTS[block.line].code for block in cells if block.line in OUTPUTS}
    printed = {block.line: stdout(cell) for block, cell in zip(cells, notebook.cells, strict=True)}
    assert {line: printed[line] for line in shown} == shown
    # Blocks without an output block print nothing: what a cell prints, the README shows.
    assert {line: text for line, text in printed.items() if line not in shown and text} == {}
    # The live view ended as its static picture, which a saved notebook keeps.
    (watch,) = (cell for block, cell in zip(cells, notebook.cells, strict=True) if "LiveView()" in block.code)
    pictures = [o.data["text/html"] for o in watch.outputs if "text/html" in o.get("data", {})]
    assert any('<img src="data:image/svg+xml;base64,' in html for html in pictures)


# -- script --------------------------------------------------------------------------------------


def exited_as_temporalio_may(done: subprocess.CompletedProcess[str]) -> bool:
    """temporalio's native runtime may abort a short-lived script as the interpreter exits, after its
    work is done (temporalio/sdk-python#300; the README says so beside its Temporal example)."""
    aborted = done.returncode == -signal.SIGABRT and "PyGILState_Release" in done.stderr
    return aborted or done.returncode == -signal.SIGSEGV


@pytest.mark.parametrize("block", of_kind("script"))
def test_a_script_block_runs_in_a_fresh_python(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code)
    # The venv's scripts first, as an activated venv has them (the Temporal example's dev server).
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PATH": path},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    uses_temporal = "temporalio" in block.code
    assert done.returncode == 0 or (uses_temporal and exited_as_temporalio_may(done)), done.stderr[-3000:]
    printed = done.stdout
    if uses_temporal:  # the dev server shares stdout: its banner lines are not the example's
        printed = "".join(
            line for line in printed.splitlines(True) if line.strip() and not line.startswith("Temporal ")
        )
    assert printed == (OUTPUTS[block.line].code if block.line in OUTPUTS else "")


# -- server --------------------------------------------------------------------------------------

SERVED_TOOLS = {
    "agency": ["book_flight", "cancel_flight", "saga_begin", "saga_commit", "saga_rollback", "saga_status"],
    "travel": ["book_vacation"],
}
"""The tools each server block serves, by the name it gives its `AegisMCP`."""


@pytest.mark.anyio
@pytest.mark.parametrize("block", of_kind("server"))
async def test_a_server_block_serves_its_tools_over_stdio(block: Block, tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters

    script = tmp_path / "server.py"
    script.write_text(block.code)
    (name,) = re.findall(r'AegisMCP\("(\w+)"', block.code)
    params = StdioServerParameters(command=sys.executable, args=[str(script)], cwd=str(tmp_path))
    async with Client(params) as client:
        listed = await client.list_tools()
    assert sorted(tool.name for tool in listed.tools) == SERVED_TOOLS[name]


# -- shell ---------------------------------------------------------------------------------------


def commands(code: str) -> list[list[str]]:
    """The commands of a shell block, comments dropped, ``a && b`` as two."""
    found: list[list[str]] = []
    for line in code.splitlines():
        words = shlex.split(line, comments=True)
        while "&&" in words:
            found.append(words[: words.index("&&")])
            words = words[words.index("&&") + 1 :]
        if words:
            found.append(words)
    return found


def placeholders_filled(words: list[str]) -> list[str]:
    """``<id>`` becomes a value, ``[--dry-run]`` (optional) the option itself."""
    return [re.sub(r"^<\w+>$", "x", word).removeprefix("[").removesuffix("]") for word in words]


def check_command(words: list[str]) -> None:
    """Fail unless the program named would accept `words`."""
    program, arguments = Path(words[0]).name, words[1:]
    if program == "aegis-nb" and set(arguments) & {"--version", "--help"}:
        done = run_aegis_nb(*arguments)  # cheap: run for real
        assert (done.returncode, done.stderr) == (0, ""), shlex.join(words)
    elif program == "aegis-nb":
        try:
            build_parser().parse_args(placeholders_filled(arguments))
        except SystemExit as exc:  # argparse refused it, and said why on stderr
            pytest.fail(f"aegis-nb refuses {shlex.join(words)!r} (exit {exc.code})")
    elif program == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
        assert set(arguments) <= set(targets), shlex.join(words)
    elif program == "pip":
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        for requirement in arguments:
            ours = requirement.startswith(".") or "aegis_nb-" in requirement
            named = re.fullmatch(r"(.*)\[([\w,-]+)\]", requirement)
            if ours and named is not None:
                assert set(named[2].split(",")) <= set(extras), requirement
                wheel = re.search(r"aegis_nb-([\w.]+)-py3-none-any\.whl", named[1])
                assert wheel is None or wheel[1] == aegis_nb.__version__, requirement
    else:
        assert program in ("python", "export"), f"no check for {shlex.join(words)!r}"


@pytest.mark.parametrize("block", of_kind("shell"))
def test_a_shell_block_holds_commands_their_programs_accept(block: Block) -> None:
    found = commands(block.code)
    assert found
    for words in found:
        check_command(words)


def test_a_shell_check_refuses_what_the_programs_would() -> None:
    for words in (
        ["aegis-nb", "serve", "app:app", "--transport", "pigeon"],
        ["aegis-nb", "--versions"],
        ["make", "no-such-target"],
        ["pip", "install", "-e", ".[no-such-extra]"],
        ["pip", "install", "aegis_nb-0.0.1-py3-none-any.whl[mcp]"],
        ["curl", "example.com"],
    ):
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            check_command(words)


# -- policy --------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", of_kind("policy"))
def test_a_policy_block_loads_as_a_gateway_policy(block: Block, tmp_path: Path) -> None:
    from aegis_nb.gateway import load_policy

    path = tmp_path / "policy.toml"
    path.write_text(block.code)
    policy = load_policy(path)
    written = tomllib.loads(block.code)
    assert [tool.name for tool in policy.tools] == list(written["tools"])
    assert [upstream.name for upstream in policy.upstreams] == list(written["upstreams"])
