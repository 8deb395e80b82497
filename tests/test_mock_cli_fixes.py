"""`aegis-nb recover` and `aegis-nb mock` on bad input, and the agency's per-tool fault changes.

A mistyped journal is reported, not created; a bad ``module:app`` or ``--ledger`` is one line on
stderr and a non-zero exit, never a traceback; changing one tool's faults leaves the others' counts
and seeded generators where they were.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from aegis_nb.cli import main
from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock import FaultPlan, ToolFaults, TravelAgency
from aegis_nb.saga.durable import SqliteJournal
from tests.servers.launch import aegis_nb


def empty_journal(path: Path) -> Path:
    async def create() -> None:
        async with SqliteJournal(path):
            pass

    anyio.run(create)
    return path


# -- aegis-nb recover -------------------------------------------------------------------------------


def test_recover_on_a_missing_journal_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jounral.db"
    assert main(["recover", "--journal", str(path), "tests.test_journal_cli:ENGINE"]) == 2
    assert capsys.readouterr() == ("", f"aegis-nb recover: journal {str(path)!r}: no such journal file\n")
    assert list(tmp_path.iterdir()) == []


def test_recover_with_a_factory_that_needs_arguments_fails_in_one_line(tmp_path: Path) -> None:
    journal = empty_journal(tmp_path / "j.db")
    done = aegis_nb("recover", "--journal", str(journal), "aegis_nb.mock.travel:travel_saga")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "aegis-nb recover: 'aegis_nb.mock.travel:travel_saga' is not an AegisMCP app or WorkflowEngine,"
        " nor a factory of one: travel_saga() missing 3 required positional arguments: 'session',"
        " 'destination', and 'nights'\n",
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "aegis-nb recover: expected module:app, got 'no_colon'"),
        (
            "no_such_module_xyz:app",
            "aegis-nb recover: cannot import 'no_such_module_xyz': No module named 'no_such_module_xyz'",
        ),
        ("json:nothing", "aegis-nb recover: module 'json' has no attribute 'nothing'"),
        (
            "json:JSONDecoder",
            "aegis-nb recover: 'json:JSONDecoder' is a JSONDecoder, not an AegisMCP app or WorkflowEngine",
        ),
        (
            "json:dumps",
            "aegis-nb recover: 'json:dumps' is not an AegisMCP app or WorkflowEngine, nor a factory of one:"
            " dumps() missing 1 required positional argument: 'obj'",
        ),
    ],
)
def test_recover_loads_its_app_as_serve_does(
    tmp_path: Path, spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = empty_journal(tmp_path / "j.db")
    assert main(["recover", "--journal", str(journal), spec]) == 2
    assert capsys.readouterr() == ("", message + "\n")


# -- aegis-nb mock --ledger -------------------------------------------------------------------------


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


# -- TravelAgency.set_tool_faults -------------------------------------------------------------------


@pytest.mark.anyio
async def test_changing_one_tools_faults_keeps_the_count_of_another() -> None:
    agency = TravelAgency(faults=FaultPlan({"cancel_hotel": ToolFaults(fail_next=2)}))
    outcomes: list[str] = []
    async with agency.connect() as session:
        await session.call_tool("reserve_hotel", {"city": "Lisbon", "nights": 1})

        async def cancel() -> None:
            try:
                result = await session.call_tool("cancel_hotel", {"booking_id": "HT-0001"})
                outcomes.append(f"changed={result['changed']}")
            except ToolError as exc:
                outcomes.append(exc.message)

        await cancel()
        agency.set_tool_faults("charge_card", ToolFaults(declined=True))
        await cancel()
        await cancel()
    failed = "cancel_hotel is unavailable (injected failure)"
    assert outcomes == [failed, failed, "changed=True"]
    assert agency.faults.to_json() == {"cancel_hotel": {"fail_next": 2}, "charge_card": {"declined": True}}
