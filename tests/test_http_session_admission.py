"""One peer cannot keep others out of streamable HTTP sessions (protocol 2025-11-25 and older).

Over real HTTP, on loopback: ``aegis-nb mock`` (or ``serve`` of a bare server) in a child process,
a flooder opening sessions at full speed from the same address as everyone else (so no budget per
address could tell it apart), and a legitimate mcp `Client` in legacy mode (2026-07-28 keeps no
sessions). A full session table closes its least recently active idle session, one that made no
request beyond its initialization first, instead of refusing the newcomer; a session with a call in
flight is never closed. Waits are on the server's own log lines (`ServerLog`) and anyio events; the
only clock is the bound on each admission (5 s) and on the flood itself.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest

from tests.http_serving_support import INITIALIZE, INITIALIZED, PING, POST_HEADERS, client, served

CAPACITY = 100
FLOOD_WORKERS = 4
FLOOD_REQUESTS = 50_000
FLOOD_SECONDS = 120.0
ADMISSION_SECONDS = 5.0
SESSION = {"mcp-protocol-version": "2025-11-25"}


class Flood:
    """`FLOOD_WORKERS` connections sending ``initialize`` (and, with `initialized`, the notification
    that follows it) as fast as the server answers, until stopped or past its bounds."""

    def __init__(self, url: str, *, initialized: bool, fill: int) -> None:
        self.url = url
        self.fill = fill
        self.initialized = initialized
        self.answers: Counter[int] = Counter()
        self.opened = 0
        self._filled = anyio.Event()

    async def run(self) -> None:
        with anyio.move_on_after(FLOOD_SECONDS):
            # A server this busy may take its time to answer: the flood is not what is measured.
            http = httpx2.AsyncClient(headers=POST_HEADERS, timeout=FLOOD_SECONDS)
            async with http, anyio.create_task_group() as workers:
                for _ in range(FLOOD_WORKERS):
                    workers.start_soon(self._worker, http)

    async def wait_filled(self) -> None:
        """Until the flood has opened `fill` sessions."""
        with anyio.fail_after(FLOOD_SECONDS):
            await self._filled.wait()

    async def _worker(self, http: httpx2.AsyncClient) -> None:
        while self.answers.total() < FLOOD_REQUESTS:
            opening = await http.post(self.url, json=INITIALIZE)
            self.answers[opening.status_code] += 1
            session = opening.headers.get("mcp-session-id")
            if session is None:
                continue
            self.opened += 1
            if self.opened >= self.fill:
                self._filled.set()
            if self.initialized:
                notified = await http.post(
                    self.url, json=INITIALIZED, headers={**SESSION, "mcp-session-id": session}
                )
                self.answers[notified.status_code] += 1


@asynccontextmanager
async def flooding(url: str, *, initialized: bool, fill: int) -> AsyncIterator[Flood]:
    """A `Flood` on `url` that has opened `fill` sessions, stopped when the block ends."""
    flood = Flood(url, initialized=initialized, fill=fill)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(flood.run)
        await flood.wait_filled()
        yield flood
        tasks.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("initialized", [False, True], ids=["initialize", "initialize+initialized"])
async def test_a_client_gets_in_within_5_s_while_one_peer_floods_initialize(initialized: bool) -> None:
    async with served("mock", "--max-sessions", str(CAPACITY)) as server:
        # A first call costs imports on both sides (seconds on a busy machine): not admission.
        async with client(server.url, "legacy") as agency:
            await agency.call_tool("list_bookings", {})
        async with flooding(server.url, initialized=initialized, fill=CAPACITY) as flood:
            admitted = await admissions(server.url)
            opened = flood.opened
    assert set(flood.answers) <= {200, 202}  # nobody is refused, the flooder included
    print(
        f"admission under a flood ({'with' if initialized else 'without'} initialized, {opened} sessions"
        f" opened): median {statistics.median(admitted):.3f} s, max {max(admitted):.3f} s",
        file=sys.stderr,
    )


async def admissions(url: str) -> list[float]:
    """Seconds each of three clients took from connecting to its first call's answer (5 s at most)."""
    admitted: list[float] = []
    for _ in range(3):
        began = anyio.current_time()
        with anyio.fail_after(ADMISSION_SECONDS):
            async with client(url, "legacy") as agency:
                result = await agency.call_tool("list_bookings", {})
        admitted.append(anyio.current_time() - began)
        assert result.is_error is False
    return admitted


@pytest.mark.anyio
async def test_a_session_with_a_call_in_flight_is_never_closed_to_admit_others() -> None:
    argv = ["serve", "tests.http_serving_support:holding_server", "--max-sessions", "20"]
    async with (
        served(*argv) as server,
        client(server.url, "legacy", read_timeout=FLOOD_SECONDS) as holder,  # its call waits out the flood
        anyio.create_task_group() as tasks,
    ):
        held: list[str] = []

        async def hold() -> None:
            result = await holder.call_tool("hold", {})
            held.append(str(result.structured_content))

        tasks.start_soon(hold)
        await server.log.wait_for(lambda lines: "hold: in flight" in lines)
        async with flooding(server.url, initialized=True, fill=100):
            pass  # five times what the table holds: every other session was closed, some again
        async with client(server.url) as releaser:  # 2026-07-28: no session, none to close
            await releaser.call_tool("release", {})
    assert held == ["{'result': 'released'}"]


@pytest.mark.anyio
async def test_a_flood_closes_unused_sessions_before_a_client_s_idle_one() -> None:
    async with served("mock", "--max-sessions", "20") as server, client(server.url, "legacy") as agency:
        assert (await agency.call_tool("list_bookings", {})).is_error is False
        async with flooding(server.url, initialized=True, fill=100):
            pass
        # Idle all along, its GET stream open: the flooder's sessions went first.
        assert (await agency.call_tool("list_bookings", {})).is_error is False


@pytest.mark.anyio
async def test_a_full_table_closes_its_oldest_unused_session_for_each_newcomer() -> None:
    async with (
        served("mock", "--max-sessions", "20") as server,
        httpx2.AsyncClient(headers=POST_HEADERS) as http,
    ):
        sessions = []
        for _ in range(40):
            opening = await http.post(server.url, json=INITIALIZE)
            assert opening.status_code == 200
            sessions.append(opening.headers["mcp-session-id"])
        pings = [
            (await http.post(server.url, json=PING, headers={**SESSION, "mcp-session-id": s})).status_code
            for s in sessions
        ]
        assert pings == [404] * 20 + [200] * 20
        assert terminated(server.log.lines) == set(sessions[:20])
        for mode in ("legacy", "auto"):  # 2025-11-25 takes a session's place; 2026-07-28 needs none
            async with client(server.url, mode) as agency:
                assert (await agency.call_tool("list_bookings", {})).is_error is False


def terminated(lines: list[str]) -> set[str]:
    """The sessions the SDK says it terminated."""
    prefix = "Terminating session: "
    return {line.removeprefix(prefix) for line in lines if line.startswith(prefix)}


@pytest.mark.anyio
async def test_a_session_that_did_nothing_beyond_its_initialization_is_closed_after_the_unused_timeout() -> (
    None
):
    async with (
        served("mock", "--unused-session-timeout", "0.3") as server,
        httpx2.AsyncClient(headers=POST_HEADERS) as http,
        client(server.url, "legacy") as streaming,  # its GET stream open, no call made yet
    ):

        async def opened(*then: dict[str, Any]) -> str:
            session = (await http.post(server.url, json=INITIALIZE)).headers["mcp-session-id"]
            for message in then:
                answer = await http.post(
                    server.url, json=message, headers={**SESSION, "mcp-session-id": session}
                )
                assert answer.status_code in (200, 202)
            return session

        initialized = await opened(INITIALIZED)
        pinged = await opened(INITIALIZED, PING)
        # Opened last: any session above that counted as unused would have been closed before it.
        bare = await opened()
        await server.log.wait_for(lambda lines: bare in terminated(lines))
        assert terminated(server.log.lines) == {initialized, bare}
        assert (await streaming.call_tool("list_bookings", {})).is_error is False
        still = [
            (await http.post(server.url, json=PING, headers={**SESSION, "mcp-session-id": s})).status_code
            for s in (initialized, pinged, bare)
        ]
        assert still == [404, 200, 404]
