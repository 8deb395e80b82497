"""`aegis-nb serve` and `aegis-nb mock`: bad input is refused with a message that says what is wrong."""

from __future__ import annotations

import pytest

from aegis_nb.cli import main


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
