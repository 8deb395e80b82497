"""An upstream that is down or dies is said plainly: down when the gateway starts, `aegis-nb gateway`
fails in one line naming it; killed mid-saga, the saga's steps so far are reported, the rollback is
attempted, and what could not be undone is reported stuck (or orphaned, for a call whose result never
came), while the ledger shows exactly that."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.mock import Ledger
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from tests.servers.launch import ROOT, aegis_nb

# The mock agency, started by a stub that first writes its pid (exec keeps it), so the test can kill it;
# started once only: the gateway's attempts to start it again fail, so it stays down.
LAUNCH_ONCE = (
    "import os, sys; os.path.exists(sys.argv[1]) and sys.exit(1); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); "
    "os.execv(sys.executable, [sys.executable, '-m', 'aegis_nb.cli', 'mock', '--ledger', sys.argv[2]])"
)

POLICY = """\
[upstreams.agency]
command = "aegis-nb"
args = ["mock"]

[tools.book_flight]
kind = "compensable"
undo = "cancel_flight"
undo_args = { booking_id = "/result/booking_id" }

[tools.reserve_hotel]
kind = "compensable"
undo = "cancel_hotel"
undo_args = { booking_id = "/result/booking_id" }
"""


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_upstream_killed_mid_saga_leaves_a_stuck_saga_that_says_what_stands(tmp_path: Path) -> None:
    pidfile, ledger = tmp_path / "pid", tmp_path / "ledger.db"
    agency = StdioServerParameters(
        command=sys.executable, args=["-c", LAUNCH_ONCE, str(pidfile), str(ledger)], cwd=ROOT
    )
    engine = WorkflowEngine(compensation_retry=RetryPolicy(attempts=2, initial_delay=0.0))
    gateway = Gateway(parse_policy(POLICY), upstreams={"agency": agency}, engine=engine)
    async with Client(gateway) as client:
        saga = ((await client.call_tool("saga_begin", {})).structured_content or {})["saga"]
        booked = await client.call_tool("book_flight", {"destination": "Oslo", "saga": saga})
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        with anyio.fail_after(30):  # a dead upstream answers at once: its pipe is closed
            lost = await client.call_tool("reserve_hotel", {"city": "Oslo", "nights": 1, "saga": saga})
            rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "upstream lost"})
    assert booked.is_error is False
    assert (lost.is_error, lost.content[0].text, (lost.meta or {}).get("aegis-nb/refused")) == (  # type: ignore[union-attr]
        True,
        "upstream 'agency' stopped answering during 'reserve_hotel': MCPError: Connection closed",
        None,  # not refused: it may have acted before the upstream went
    )
    status = rolled.structured_content or {}
    assert (status["status"], status["steps"]) == (
        "stuck",
        [
            {
                "index": 0,
                "name": "book_flight",
                "state": "stuck",
                # Not sent: the upstream is down (the gateway's attempts to start it again fail).
                "detail": "ToolError: cancel_flight was not called: upstream 'agency' is not connected (it "
                "stopped answering; the gateway is reconnecting it): try again later",
            },
            {  # in doubt, and no answer to bind its undo from
                "index": 1,
                "name": "reserve_hotel",
                "state": "orphaned",
                "detail": "cancel_hotel was not called: booking_id (/result/booking_id) did not resolve "
                "from the call",
            },
        ],
    )
    state: dict[str, Any] = dict(Ledger(ledger).state().to_json())
    assert ([f["booking_id"] for f in state["flights"]], state["hotels"], state["cancellations"]) == (
        ["FL-0001"],
        [],
        0,
    )


def test_an_upstream_down_at_start_is_one_line_naming_it(tmp_path: Path) -> None:
    policy = tmp_path / "down.toml"
    policy.write_text('[upstreams.agency]\ncommand = "no-such-agency-xyz"\n')
    done = aegis_nb("gateway", str(policy))
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "aegis-nb gateway: cannot connect to the MCP server started by 'no-such-agency-xyz' over stdio: "
        "FileNotFoundError: [Errno 2] No such file or directory: 'no-such-agency-xyz'\n",
    )


def test_a_policy_that_does_not_fit_is_refused_in_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "trip.toml"
    policy.write_text(
        f'[upstreams.agency]\ncommand = "{sys.executable}"\nargs = ["-m", "aegis_nb.cli", "mock"]\n\n'
        '[tools.rent_car]\nkind = "read_only"\n'
    )
    done = aegis_nb("gateway", str(policy))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"aegis-nb gateway: {policy}:5: tools.rent_car: no upstream serves a tool")
    assert done.stderr.count("\n") == 1


def test_bad_command_lines_are_refused(tmp_path: Path) -> None:
    existing = tmp_path / "policy.toml"
    existing.write_text("")
    cases = {
        (): "aegis-nb gateway: give a policy file, or --mock for the mock agency's own policy\n",
        (
            "p.toml",
            "--mock",
        ): "aegis-nb gateway: give a policy file, or --mock for the mock agency's own policy\n",
        (
            "p.toml",
            "--observe",
            "x",
        ): "aegis-nb gateway: --observe drafts a policy: give upstreams, not a policy file\n",
        ("--observe", "x", "-o", str(existing)): f"aegis-nb gateway: {existing} exists: the draft would "
        "overwrite it\n",
        ("--mock", "--port", "9"): "aegis-nb gateway: --port needs --transport http (stdio has no address)\n",
        (str(existing),): f"aegis-nb gateway: {existing}: upstreams: missing: add a [upstreams.NAME] table\n",
        ("--mock", "--journal", ""): "aegis-nb gateway: bad --journal: empty path (name the journal file)\n",
    }
    found = {argv: aegis_nb("gateway", *argv) for argv in cases}
    assert {argv: (done.returncode, done.stderr) for argv, done in found.items()} == {
        argv: (2, message) for argv, message in cases.items()
    }


def test_observe_writes_a_draft_that_loads_as_a_policy(tmp_path: Path) -> None:
    draft = tmp_path / "draft.toml"
    command = f"{sys.executable} -m aegis_nb.cli mock"
    done = aegis_nb("gateway", "--observe", command, "-o", str(draft))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    policy = parse_policy(draft.read_text(), str(draft))
    assert [(tool.name, tool.kind.value, tool.undo, tool.guessed) for tool in policy.tools] == [
        ("search_flights", "irreversible", None, True),
        ("book_flight", "compensable", "cancel_flight", True),
        ("cancel_flight", "irreversible", None, True),
        ("reserve_hotel", "compensable", "cancel_hotel", True),
        ("cancel_hotel", "irreversible", None, True),
        ("charge_card", "compensable", "refund_card", True),
        ("refund_card", "irreversible", None, True),
        ("list_bookings", "irreversible", None, True),
        ("set_faults", "irreversible", None, True),
    ]
    assert policy.upstreams[0].command == sys.executable
