"""`aegis-nb serve` and `aegis-nb mock`: bad input is refused with a message that says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from aegis_nb.cli import main
from tests.servers.launch import aegis_nb


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "no_colon"], "aegis-nb serve: expected module:app, got 'no_colon'"),
        (["serve", "no_such_module_xyz:app"], "aegis-nb serve: cannot import 'no_such_module_xyz'"),
        (["serve", "json:nothing"], "aegis-nb serve: module 'json' has no attribute 'nothing'"),
        (
            ["serve", "json:JSONDecoder"],
            "aegis-nb serve: 'json:JSONDecoder' is a JSONDecoder, not an MCP server",
        ),
        (["serve", "json:dumps"], "aegis-nb serve: 'json:dumps' is not a server, nor a factory of one"),
        (
            ["serve", "myapp.py:app"],
            "aegis-nb serve: expected module:app with a module name, not a file path, got 'myapp.py:app'"
            " (from the file's folder: myapp:app)",
        ),
        (
            ["serve", "apps/travel:agent"],
            "aegis-nb serve: expected module:app with a module name, not a file path, got "
            "'apps/travel:agent' (from the file's folder: travel:agent)",
        ),
        (["mock", "--faults", "{not json"], "aegis-nb mock: bad --faults: Expecting property name"),
        (["mock", "--faults", '{"rent_car": {}}'], "aegis-nb mock: bad --faults: unknown tool 'rent_car'"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err.startswith(message), err.count("\n"), err.endswith("\n")) == ("", True, 1, True)


def test_an_unknown_transport_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "x:y", "--transport", "pigeon"])
    assert "invalid choice: 'pigeon' (choose from 'stdio', 'http')" in capsys.readouterr().err


# -- aegis-nb mock --ledger ------------------------------------------------------------------------


# Regression guard: mock --ledger in a missing folder is one line on stderr, not a traceback.
def test_mock_with_a_ledger_in_a_missing_folder_fails_in_one_line(tmp_path: Path) -> None:
    ledger = tmp_path / "missing-dir" / "ledger.db"
    done = aegis_nb("mock", "--ledger", str(ledger))
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"aegis-nb mock: bad --ledger: cannot open {str(ledger)!r} as a ledger:"
        " unable to open database file\n",
    )
    assert list(tmp_path.iterdir()) == []


# Regression guard: mock --ledger on a file that is not SQLite is one line, and the file is left as it was.
def test_mock_with_a_ledger_that_is_not_sqlite_fails_in_one_line_and_leaves_the_file(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n" * 100)
    done = aegis_nb("mock", "--ledger", str(notes))
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"aegis-nb mock: bad --ledger: cannot open {str(notes)!r} as a ledger: file is not a database\n",
    )
    assert notes.read_text() == "hello\n" * 100
    assert list(tmp_path.iterdir()) == [notes]


# Regression guard: a port out of range is a usage error, not a traceback.
@pytest.mark.parametrize("command", ["mock", "serve"])
@pytest.mark.parametrize(
    ("port", "message"),
    [("99999", "a port is 0-65535, got 99999"), ("eighty", "expected a port number, got 'eighty'")],
)
def test_a_port_out_of_range_is_a_usage_error_not_a_traceback(
    command: str, port: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--transport", "http", "--port", port] + (
        ["some.module:app"] if command == "serve" else []
    )
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1] == f"aegis-nb {command}: error: argument --port: {message}"
    )
