"""With a journal, a gateway's sagas survive nothing silently: SIGKILLed mid-saga and restarted, the
gateway rolls back the saga that was open (its agent's calls are gone), through the upstream, so the
ledger ends clean and ``aegis-nb runs`` lists the run as recovered; stopped cleanly, it rolls its open
sagas back before the upstreams close. The card number reaches the journal in no form."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from aegis_nb.mock import Ledger
from tests.servers.launch import ROOT, aegis_nb
from tests.test_gateway_policy_errors import SHIPPED

CARD = "4242424242424242"

# The gateway, started by a stub that first writes its pid (exec keeps it), so the test can kill it.
LAUNCH = (
    "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
    "os.execv(sys.executable, [sys.executable, '-m', 'aegis_nb.cli', *sys.argv[2:]])"
)

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


def served_gateway(tmp_path: Path) -> StdioServerParameters:
    """``aegis-nb gateway`` over the shipped policy, journaled, its agency keeping a ledger file."""
    policy = tmp_path / "policy.toml"
    policy.write_text(
        SHIPPED.read_text().replace(
            'command = "aegis-nb"\nargs = ["mock"]',
            f'command = "{sys.executable}"\nargs = ["-m", "aegis_nb.cli", "mock", "--ledger", '
            f'"{tmp_path / "ledger.db"}"]',
        )
    )
    argv = ["-c", LAUNCH, str(tmp_path / "pid"), "gateway", str(policy), "--journal", str(tmp_path / "j.db")]
    return StdioServerParameters(command=sys.executable, args=argv, cwd=ROOT)


def ledger(tmp_path: Path) -> dict[str, Any]:
    return dict(Ledger(tmp_path / "ledger.db").state().to_json())


def runs(tmp_path: Path) -> list[str]:
    """``aegis-nb runs`` of the journal, each line without the run id and the time."""
    done = aegis_nb("runs", "--journal", str(tmp_path / "j.db"))
    assert done.returncode == 0, done.stderr
    return [" ".join(line.split()[1:-2]) for line in done.stdout.splitlines()[1:-1]]


async def test_a_gateway_killed_mid_saga_rolls_it_back_when_it_starts_again(tmp_path: Path) -> None:
    gateway = served_gateway(tmp_path)
    standing: dict[str, Any] = {}

    async def book_then_kill() -> None:
        async with Client(gateway) as agent:
            begun = await agent.call_tool("saga_begin", {})
            saga = (begun.structured_content or {})["saga"]
            await agent.call_tool("book_flight", {"destination": "Oslo", "saga": saga})
            await agent.call_tool("charge_card", {"amount_cents": 900, "card_number": CARD, "saga": saga})
            standing.update(ledger(tmp_path))
            os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
            with anyio.fail_after(30):
                await agent.call_tool("list_bookings", {})

    try:
        await book_then_kill()
    except Exception as exc:  # the session breaks, however the SDK words it (an ExceptionGroup today)
        broken: Exception | None = exc
    else:
        broken = None
    assert broken is not None, "a call to a killed gateway answered"
    assert (len(standing["flights"]), len(standing["charges"])) == (1, 1)
    async with Client(gateway) as restarted:  # start-up recovery runs before it serves
        bookings = (await restarted.call_tool("list_bookings", {})).structured_content or {}
    assert {key: bookings[key] for key in ("flights", "charges", "cancellations", "refunds")} == {
        "flights": [],
        "charges": [],
        "cancellations": 1,
        "refunds": 1,
    }
    assert runs(tmp_path) == ["agent_saga rolled_back 10 1x"]
    assert CARD.encode() not in (tmp_path / "j.db").read_bytes()


async def test_a_gateway_stopped_cleanly_rolls_its_open_sagas_back_first(tmp_path: Path) -> None:
    async with Client(served_gateway(tmp_path)) as agent:
        begun = await agent.call_tool("saga_begin", {})
        saga = (begun.structured_content or {})["saga"]
        await agent.call_tool("book_flight", {"destination": "Oslo", "saga": saga})
    # Leaving the client closed the gateway's stdin and waited for it to exit (the SDK's stdio
    # client gives it 2 s before it terminates it, which a rollback of one step stays well within).
    assert (ledger(tmp_path)["flights"], runs(tmp_path)) == ([], ["agent_saga rolled_back 6 -"])
