"""`aegis-nb` stopped or started wrongly: Ctrl-C, a factory's own bug, options stdio ignores, an empty
`--ledger`, a port in use, a journal another process holds. Each is one line on stderr and an exit
code, never a traceback, except a bug in the user's own factory, whose traceback is what they need.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path
from subprocess import PIPE

import anyio
import pytest

from aegis_nb.cli import main
from aegis_nb.mock import TravelAgency, travel_app
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.server.app import AegisMCP
from tests.servers.launch import ROOT, Lines, aegis_nb, free_port

JOURNAL_VARIABLE = "AEGIS_NB_TEST_JOURNAL"


def factory_with_a_bug() -> AegisMCP:
    """A factory that takes no arguments and fails inside with a TypeError of its own."""
    return AegisMCP("buggy", workflow_timeout=int(os.environ.get("NO_SUCH_VARIABLE_AEGIS")))  # type: ignore[arg-type]


def interrupted() -> AegisMCP:
    """Ctrl-C while the app is being built (in-process, the signal's KeyboardInterrupt itself)."""
    raise KeyboardInterrupt


def journaled_app() -> AegisMCP:
    """The travel agent journaling to the file the test names in the environment."""
    return travel_app(TravelAgency(), journal=os.environ[JOURNAL_VARIABLE])


# -- Ctrl-C -----------------------------------------------------------------------------------------

AS_FROM_A_TERMINAL = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from aegis_nb.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""`aegis-nb` with SIGINT handled as Python does when a terminal starts it (Ctrl-C: KeyboardInterrupt).

A test run started in the background of a script (or by a runner that does the same) ignores SIGINT,
and its children inherit that: Python then leaves SIGINT ignored, uvicorn still stops on it, and the
mock exits 0 without a word, so the test failed there and only there.
"""


def test_ctrl_c_is_one_line_and_exit_130(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "tests.test_cli_errors:interrupted"]) == 130
    assert capsys.readouterr() == ("", "aegis-nb serve: interrupted\n")


@pytest.mark.anyio
async def test_sigint_stops_an_http_mock_without_a_traceback() -> None:
    port = free_port()
    command = [sys.executable, "-c", AS_FROM_A_TERMINAL, "mock", "--transport", "http", "--port", str(port)]
    process = await anyio.open_process(command, cwd=ROOT, stdin=PIPE, stdout=PIPE, stderr=PIPE)
    async with process:
        assert process.stderr is not None
        stderr = Lines(process.stderr)
        await stderr.wait_containing("Uvicorn running on")
        process.send_signal(signal.SIGINT)
        rest = []
        with anyio.fail_after(60):
            try:
                while True:
                    rest.append(await stderr.next_line())
            except anyio.EndOfStream:
                pass
            assert await process.wait() == 130
    assert rest[-1] == "aegis-nb mock: interrupted"
    assert not [line for line in rest if "Traceback" in line]


# -- loading the app --------------------------------------------------------------------------------


def test_a_factorys_own_type_error_keeps_its_traceback() -> None:
    with pytest.raises(TypeError, match="int\\(\\) argument must be"):
        main(["serve", "tests.test_cli_errors:factory_with_a_bug"])


# -- options ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mock", "--port", "9000"], "aegis-nb mock: --port needs --transport http (stdio has no address)"),
        (
            ["serve", "aegis_nb.mock.travel:travel_agent", "--host", "0.0.0.0", "--port", "9000"],
            "aegis-nb serve: --host and --port need --transport http (stdio has no address)",
        ),
        (
            ["mock", "--ledger", ""],
            "aegis-nb mock: bad --ledger: empty path (leave --ledger out to keep it in memory)",
        ),
        (["mock", "--faults", ""], "aegis-nb mock: bad --faults: Expecting value: line 1 column 1 (char 0)"),
    ],
)
def test_options_stdio_would_ignore_or_empty_values_are_refused(argv: list[str], message: str) -> None:
    done = aegis_nb(*argv)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message + "\n")


def test_a_port_in_use_is_one_line_before_anything_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = aegis_nb("mock", "--transport", "http", "--port", str(port))
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"aegis-nb mock: cannot serve on 127.0.0.1:{port}: Address already in use;"
        " stop what holds it or choose another --port\n",
    )


# -- the app's journal ------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_serving_an_app_whose_journal_another_process_holds_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], transport: str
) -> None:
    path = tmp_path / "runs.db"
    monkeypatch.setenv(JOURNAL_VARIABLE, str(path))
    argv = ["serve", "tests.test_cli_errors:journaled_app", "--transport", transport]
    if transport == "http":
        argv += ["--port", str(free_port())]

    async def hold_and_serve() -> int:
        async with SqliteJournal(path):
            return await anyio.to_thread.run_sync(main, argv)

    assert anyio.run(hold_and_serve) == 2
    assert capsys.readouterr() == (
        "",
        f"aegis-nb serve: journal {str(path)!r}: another process holds {path}.lock\n",
    )


def test_serving_an_app_whose_journal_is_not_a_journal_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n" * 100)
    monkeypatch.setenv(JOURNAL_VARIABLE, str(notes))
    assert main(["serve", "tests.test_cli_errors:journaled_app"]) == 2
    assert capsys.readouterr() == (
        "",
        f"aegis-nb serve: journal {str(notes)!r}: damaged or not a journal (file is not a database)\n",
    )
    assert notes.read_text() == "hello\n" * 100
