"""The process the kill test kills: a zygote that imports everything once, then forks one worker per life.

Run as ``python -m tests.kill_child JOURNAL LEDGER``. The zygote reads one line per life on stdin
(``life <number> <seed> <sagas>``), forks a worker, and reports ``exit <pid> <status>`` once the
worker is dead; an empty stdin ends it. Forking from a warm zygote keeps a restart at milliseconds
instead of the second the MCP SDK takes to import, so the test can kill a hundred workers quickly.

A worker is one life of a travel-booking service: it opens the journal and the agency's SQLite
ledger, recovers what the previous life left unfinished, starts `sagas` trips at once (the seeded
fault plan makes some fail at a random step and some time out after booking), and then idles until
it is killed (or the test's end of stdin closes). Each trip takes one of the `SHAPES` at random, named
in its saga's name: the list, the list with the flight and the hotel booked together (a parallel
group), and the same two as dynamic sagas whose code adds each step as it goes. Whatever the
shape, the flight is step 0, the hotel 1 and the charge 2, so the ledger's keys name their run.
Every line it writes (``pid``, ``ev``, ``undo``, ``idle``) is one atomic pipe write, so the parent
always knows how far it got.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
from collections.abc import Mapping
from typing import Any

import anyio
from mcp.types import CallToolResult

from aegis_nb import RetryPolicy, SagaFailed, WorkflowEngine, parallel
from aegis_nb.mock import FaultPlan, Ledger, ToolFaults, TravelAgency
from aegis_nb.mock.travel import travel_steps, trip_context
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.saga.events import SagaEvent

DESTINATIONS = ("Lisbon", "Porto", "Madrid", "Rome")
UNDO_TOOLS = ("cancel_flight", "cancel_hotel", "refund_card")
SAGA_DEADLINE = 0.25
"""Seconds each trip may take: a hung booking times out after this (then it is undone in doubt)."""
SHAPES = ("list", "group", "dynamic", "dynamic_group")
"""How a trip's saga is shaped; its saga is named ``book_trip_<shape>``."""


def say(line: str) -> None:
    """One line to the parent, in one write (atomic on a pipe)."""
    os.write(1, (line + "\n").encode())


class AgencyCaller:
    """Calls the mock agency's tools in-process, server side (no transport: the ledger is what matters).

    Reports each undo and whether it changed anything, so the parent can see that an undo repeated
    across a crash never applies twice.
    """

    def __init__(self, agency: TravelAgency) -> None:
        self.agency = agency

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        args = dict(arguments or {})
        result = await self.agency.server.call_tool(name, args)
        assert isinstance(result, CallToolResult)
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            raise RuntimeError(text or f"{name} failed")
        data = dict(result.structured_content or {})
        if name in UNDO_TOOLS:
            target = args.get("booking_id") or args.get("charge_id") or args.get("idempotency_key")
            say(f"undo {name} {data.get('id') or target} {data.get('changed')}")
        return data


def fault_plan(rng: random.Random) -> FaultPlan:
    """Per life: bookings and charges fail now and then, a booking may hang after acting, undos hiccup."""
    seed = rng.randrange(2**31)
    hang = rng.choice(["book_flight", "reserve_hotel", "charge_card", None, None])
    tools = {
        "book_flight": ToolFaults(fail_rate=0.1, seed=seed),
        "reserve_hotel": ToolFaults(fail_rate=0.15, seed=seed + 1),
        "charge_card": ToolFaults(fail_rate=0.15, seed=seed + 2),
        "cancel_hotel": ToolFaults(fail_next=rng.choice([0, 0, 1])),
    }
    if hang is not None:
        tools[hang] = ToolFaults(hang_after_effect=1, fail_rate=0.1, seed=seed + 3)
    return FaultPlan(tools)


async def live(journal_path: str, ledger_path: str, life: int, seed: int, sagas: int) -> None:
    rng = random.Random(seed)
    agency = TravelAgency(Ledger(ledger_path), fault_plan(rng))
    steps = travel_steps(
        AgencyCaller(agency), compensation_retry=RetryPolicy(attempts=4, initial_delay=0.001)
    )
    phase = "recover"

    def report(event: SagaEvent) -> None:
        say(f"ev {phase} {type(event).__name__} {event.run_id}")

    async with SqliteJournal(journal_path, steps=steps) as journal:
        engine = WorkflowEngine(journal=journal, sinks=[report])
        recovered = await engine.recover()
        say(f"recovered {len(recovered)}")
        phase = "live"

        async def trip(number: int) -> None:
            # Fresh step objects per trip; recovery finds the registered ones by their names.
            flight, hotel, card = travel_steps(AgencyCaller(agency))
            city, nights = rng.choice(DESTINATIONS), rng.randint(1, 5)
            fly, stay = (flight, (), {"destination": city}), (hotel, (), {"city": city, "nights": nights})
            ctx = trip_context("4242424242424242", traveller=f"t{life}-{number}").with_timeout(SAGA_DEADLINE)
            shape = rng.choice(SHAPES)
            name = f"book_trip_{shape}"
            with contextlib.suppress(SagaFailed):  # a rolled-back trip is an outcome, not an error
                if shape == "list":
                    await engine.execute_saga([fly, stay, card], ctx, name=name)
                elif shape == "group":
                    await engine.execute_saga([parallel(fly, stay), card], ctx, name=name)
                else:
                    async with engine.saga(ctx, name=name) as saga:
                        if shape == "dynamic":
                            await saga.step(flight, destination=city)
                            await saga.step(hotel, city=city, nights=nights)
                        else:
                            await saga.parallel(fly, stay)
                        await saga.step(card)

        async with anyio.create_task_group() as group:
            for number in range(sagas):
                group.start_soon(trip, number)
        say("idle")
        # The parent kills every worker. Should the parent itself die first, its end of our stdin
        # closes: leave then, rather than idle forever as an orphan.
        while await anyio.to_thread.run_sync(os.read, 0, 1024, abandon_on_cancel=True):
            pass


def worker(journal_path: str, ledger_path: str, life: int, seed: int, sagas: int) -> None:
    say(f"pid {os.getpid()}")
    anyio.run(live, journal_path, ledger_path, life, seed, sagas)


def zygote(journal_path: str, ledger_path: str) -> None:
    say("ready")
    for line in sys.stdin:
        _, life, seed, sagas = line.split()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                worker(journal_path, ledger_path, int(life), int(seed), int(sagas))
            finally:
                os._exit(1)  # never run the zygote's loop in a worker
        _, status = os.waitpid(pid, 0)
        say(f"exit {pid} {status}")


if __name__ == "__main__":
    zygote(sys.argv[1], sys.argv[2])
