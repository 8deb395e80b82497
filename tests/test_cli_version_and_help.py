"""`aegis-nb --version`, a help that says what the demo runs, and `serve file.py` answered with the
``module:app`` to type instead. Each is what a user sees first, so whole outputs are compared."""

from __future__ import annotations

import re

import pytest

import aegis_nb
from aegis_nb.cli import DEMO_SCENARIOS, build_parser, main
from aegis_nb.demo import run_demo
from tests.servers.launch import aegis_nb as run_aegis_nb


def test_version_prints_the_package_version_and_exits_0() -> None:
    done = run_aegis_nb("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"aegis-nb {aegis_nb.__version__}\n", "")


def test_the_top_level_help_names_version_and_says_how_many_ways_the_demo_runs() -> None:
    text = " ".join(build_parser().format_help().split())  # argparse wraps to the terminal's width
    assert "[--version]" in text
    assert (
        "demo run the travel-agency saga over MCP 4 ways: it commits; the card is declined; the hotel"
        " misses the deadline; flight and hotel booked in parallel (mcp extra)"
    ) in text


@pytest.mark.anyio
async def test_the_demo_runs_the_scenarios_its_help_lists(capsys: pytest.CaptureFixture[str]) -> None:
    await run_demo()
    headers = re.findall(r"^=== (\d+)\. ", capsys.readouterr().out, flags=re.MULTILINE)
    assert headers == [str(number) for number in range(1, len(DEMO_SCENARIOS) + 1)]


@pytest.mark.parametrize(
    ("spec", "suggested"),
    [("trip.py", "trip:app"), ("apps/trip.py", "trip:app"), ("apps/trip", "trip:app")],
)
def test_serve_given_a_file_alone_suggests_the_module_and_app_to_type(
    spec: str, suggested: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", spec]) == 2
    assert capsys.readouterr() == (
        "",
        "aegis-nb serve: expected module:app with a module name, not a file path, got "
        f"{spec!r} (from the file's folder: {suggested})\n",
    )
