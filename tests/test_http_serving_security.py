"""Serving streamable HTTP safely: Host/Origin allow-lists, a bearer token, and bounded sessions.

Over real HTTP: ``aegis-nb mock`` (an `AegisMCP` app, so `AegisMCP.run` with its keyword arguments)
or ``aegis-nb serve`` of a plain `MCPServer` in a child process on a free port, reached with
httpx2 (the transport the mcp client uses) and the mcp `Client`, on asyncio and trio.

Off loopback the server refuses to start without ``--allow-host``; with the allow-lists a foreign
Origin gets 403 and a foreign Host 421, and nothing is charged (the agency's own ledger, read by its
``list_bookings`` tool). On a loopback address the SDK leaves unchecked (127.0.0.2) the check holds
too. A token makes every request without it a 401, and never reaches the server's output.

The sessions' deadlines are the SDK's: cancel scopes on the serving loop's clock, in a uvicorn
process a test cannot give a fake clock. So the session tests use a sub-second unused-session
timeout and wait for the SDK's own "Session <id> idle timeout" log line of each session, an event
(the server's stderr read as it comes), not a sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from subprocess import PIPE
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import Process
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from aegis_nb.kernel.values import Secret
from aegis_nb.server.http_security import BearerTokenGate, HttpSecurity, UnsafeServing
from aegis_nb.server.session import sole_exception
from tests.conftest import require
from tests.servers.launch import LINE_TIMEOUT, ROOT, Lines, aegis_nb, free_port, python_child

CARD = "4242424242424242"
TOKEN = "tok-3f9a61c2e0b7-right"
WRONG_TOKEN = "tok-77d0c5e1a2f4-wrong"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bare", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
SERVER_ERROR = "Server returned an error response"
"""What the mcp client raises for any 4xx or 5xx answer."""
POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def plain_server() -> MCPServer[Any]:
    """A bare `MCPServer` (no AegisMCP), served by ``aegis-nb serve`` through the same security."""
    server: MCPServer[Any] = MCPServer("plain")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


# -- a server in a child process ----------------------------------------------------------------------


class ServerLog:
    """The server's stderr, kept whole and read as it comes; `wait_for` waits on new lines, not a timer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ended = False
        self._changed = anyio.Event()

    async def follow(self, lines: Lines) -> None:
        try:
            while True:
                self.lines.append(await lines.next_line())
                self._changed.set()
                self._changed = anyio.Event()
        except anyio.EndOfStream:
            self.ended = True
            self._changed.set()

    async def wait_for(self, found: Callable[[list[str]], bool]) -> None:
        with anyio.fail_after(LINE_TIMEOUT):
            while not found(self.lines):
                assert not self.ended, f"the server exited first:\n{self.text()}"
                await self._changed.wait()

    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Served:
    origin: str  # scheme://host:port as the test reaches it
    port: int
    log: ServerLog

    @property
    def url(self) -> str:
        return f"{self.origin}/mcp"


@asynccontextmanager
async def served(*argv: str, host: str = "127.0.0.1", **env: str) -> AsyncIterator[Served]:
    """``aegis-nb <argv> --transport http --host <host>`` on a free port, from when uvicorn listens."""
    port = free_port()
    command = [sys.executable, "-m", "aegis_nb.cli", *argv, "--transport", "http"]
    command += ["--host", host, "--port", str(port)]
    environment = {k: v for k, v in os.environ.items() if k != "AEGIS_NB_TOKEN"}
    environment.update(PYTHONUNBUFFERED="1", **env)
    process: Process = await anyio.open_process(command, cwd=ROOT, env=environment, stderr=PIPE)
    log = ServerLog()
    try:
        async with anyio.create_task_group() as tasks:
            assert process.stderr is not None
            tasks.start_soon(log.follow, Lines(process.stderr))
            await log.wait_for(lambda lines: any("Uvicorn running on" in line for line in lines))
            reached = "127.0.0.1" if host == "0.0.0.0" else host
            yield Served(f"http://{reached}:{port}", port, log)
            stop(process)  # its stderr ends with its shutdown lines, and `follow` with it
    finally:
        stop(process)
        with anyio.move_on_after(10, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()


def stop(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError):  # asyncio's, once the process has exited
        process.terminate()


def can_bind(host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, 0))
        except OSError:
            return False
    return True


@asynccontextmanager
async def client(url: str, mode: str = "auto", **headers: str) -> AsyncIterator[Client]:
    """An mcp client sending `headers` with every request (the SDK leaves a given httpx2 client open)."""
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as session,
    ):
        yield session


async def connected(url: str, mode: str = "auto", **headers: str) -> None:
    async with client(url, mode, **headers):
        pass


async def refused(attempt: Awaitable[object]) -> str:
    """The message of the `MCPError` a client's `attempt` ends with (the client may wrap it in groups)."""
    try:
        await attempt
    except MCPError as exc:
        return str(exc)
    except BaseExceptionGroup as group:
        found = sole_exception(group)
        if not isinstance(found, MCPError):
            raise
        return str(found)
    raise AssertionError("the server served what it should have refused")


async def post(url: str, body: dict[str, Any], **headers: str) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(url, json=body, headers={**POST_HEADERS, **headers})


async def charges(url: str, **headers: str) -> list[dict[str, Any]]:
    async with client(url, **headers) as agency:
        result = await agency.call_tool("list_bookings", {})
    assert result.structured_content is not None
    return list(result.structured_content["charges"])


async def charge(url: str, **headers: str) -> None:
    async with client(url, **headers) as agency:
        result = await agency.call_tool("charge_card", {"amount_cents": 1200, "card_number": CARD})
    assert result.is_error is False


def status(response: httpx2.Response) -> tuple[int, str]:
    return response.status_code, response.text


# -- refusing to start off loopback -------------------------------------------------------------------

REFUSED_OFF_LOOPBACK = (
    "aegis-nb mock: refusing to serve on {host}, off loopback, without --allow-host: pass --allow-host"
    " HOST[:PORT] for each name clients reach the server by, and --allow-origin URL for each web origin"
    " allowed to call it (none by default); set AEGIS_NB_TOKEN to require a bearer token; or serve on"
    " 127.0.0.1\n"
)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "mcp.example.com"])
def test_the_cli_refuses_to_serve_off_loopback_without_allowed_hosts(host: str) -> None:
    done = aegis_nb("mock", "--transport", "http", "--host", host, "--port", str(free_port()))
    assert (done.returncode, done.stdout, done.stderr) == (2, "", REFUSED_OFF_LOOPBACK.format(host=host))


def test_app_run_refuses_to_serve_off_loopback_before_anything_starts() -> None:
    code = (
        "from aegis_nb.server.app import AegisMCP\n"
        f"AegisMCP('x').run('http', host='0.0.0.0', port={free_port()})\n"
    )
    done = python_child("-c", code, check=False)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "aegis_nb.server.http_security.UnsafeServing: refusing to serve on 0.0.0.0, off loopback, without"
        " allowed_hosts: name the hosts clients reach the server by (allowed_hosts=['mcp.example.com']),"
        " and allowed_origins for the web pages allowed to call it; or serve on 127.0.0.1"
    )
    assert "Uvicorn" not in done.stderr


def test_off_loopback_the_allow_lists_are_what_the_sdk_checks() -> None:
    security = HttpSecurity(
        allowed_hosts=("MCP.example.com", "10.0.0.5:8000", "[2001:db8::1]"),
        allowed_origins=("https://App.example.com/", "http://localhost:*"),
    )
    settings = security.transport_security("0.0.0.0")
    assert settings.model_dump() == {
        "enable_dns_rebinding_protection": True,
        "allowed_hosts": [
            "mcp.example.com",
            "mcp.example.com:*",
            "10.0.0.5:8000",
            "[2001:db8::1]",
            "[2001:db8::1]:*",
        ],
        "allowed_origins": ["https://app.example.com", "http://localhost:*"],
    }
    with pytest.raises(UnsafeServing):
        HttpSecurity(allowed_origins=("https://app.example.com",)).transport_security("0.0.0.0")


def test_on_loopback_the_bound_address_and_the_loopback_names_are_allowed() -> None:
    settings = HttpSecurity(allowed_hosts=("mcp.example.com",)).transport_security("127.0.0.2")
    assert settings.model_dump() == {
        "enable_dns_rebinding_protection": True,
        "allowed_hosts": [
            "mcp.example.com",
            "mcp.example.com:*",
            "127.0.0.2:*",
            "127.0.0.1:*",
            "localhost:*",
            "[::1]:*",
        ],
        "allowed_origins": [
            "http://127.0.0.2:*",
            "http://127.0.0.1:*",
            "http://localhost:*",
            "http://[::1]:*",
        ],
    }


# -- Origin and Host ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_off_loopback_a_foreign_origin_gets_403_a_foreign_host_421_and_nothing_is_charged() -> None:
    allow = ["--allow-host", "mcp.example.com", "--allow-origin", "https://app.example.com"]
    async with served("mock", *allow, host="0.0.0.0") as server:
        host = f"mcp.example.com:{server.port}"
        evil = {"host": host, "origin": "http://evil.example"}
        assert await refused(charge(server.url, **evil)) == SERVER_ERROR
        assert status(await post(server.url, INITIALIZE, **evil)) == (403, "Invalid Origin header")
        # The address it was reached by is not a name it was told to answer to.
        assert status(await post(server.url, INITIALIZE)) == (421, "Invalid Host header")
        assert await charges(server.url, host=host) == []
        await charge(server.url, host=host, origin="https://app.example.com")
        assert [c["amount_cents"] for c in await charges(server.url, host=host)] == [1200]
    assert "serving on 0.0.0.0 without a bearer token: whoever can reach it can call its tools" in (
        server.log.lines
    )


@pytest.mark.anyio
async def test_on_a_loopback_address_the_sdk_leaves_open_a_foreign_origin_gets_403() -> None:
    require(can_bind("127.0.0.2"), "the loopback address 127.0.0.2 (Linux routes all of 127/8 to lo)")
    async with served("mock", host="127.0.0.2") as server:
        evil = {"origin": "http://evil.example"}
        assert await refused(charge(server.url, **evil)) == SERVER_ERROR
        for mode in ("auto", "legacy"):  # 2026-07-28 (no session) and 2025-11-25 (sessions)
            assert await refused(connected(server.url, mode, **evil)) == SERVER_ERROR
        assert status(await post(server.url, INITIALIZE, **evil)) == (403, "Invalid Origin header")
        assert status(await post(server.url, INITIALIZE, host="evil.example")) == (421, "Invalid Host header")
        await charge(server.url, origin=server.origin)
        assert [c["amount_cents"] for c in await charges(server.url)] == [1200]


# -- the bearer token ---------------------------------------------------------------------------------

MISSING = {"error": "invalid_token", "error_description": "this server needs an Authorization: Bearer token"}
WRONG = {"error": "invalid_token", "error_description": "the bearer token is not valid"}


def refusal(response: httpx2.Response) -> tuple[int, str | None, Any]:
    return response.status_code, response.headers.get("www-authenticate"), json.loads(response.text)


@pytest.mark.anyio
@pytest.mark.parametrize("given", ["environment", "flag"])
async def test_with_a_token_every_request_without_it_gets_401(given: str) -> None:
    argv, env = (
        (["mock"], {"AEGIS_NB_TOKEN": TOKEN}) if given == "environment" else (["mock", "--token", TOKEN], {})
    )
    async with served(*argv, **env) as server:
        assert refusal(await post(server.url, INITIALIZE)) == (401, "Bearer", MISSING)
        wrong = await post(server.url, INITIALIZE, authorization=f"Bearer {WRONG_TOKEN}")
        assert refusal(wrong) == (401, 'Bearer error="invalid_token"', WRONG)
        basic = await post(server.url, INITIALIZE, authorization=f"Basic {TOKEN}")
        assert refusal(basic) == (401, 'Bearer error="invalid_token"', WRONG)
        assert await refused(charge(server.url)) == SERVER_ERROR
        assert await refused(charge(server.url, authorization=f"Bearer {WRONG_TOKEN}")) == SERVER_ERROR
        assert await charges(server.url, authorization=f"Bearer {TOKEN}") == []
        for mode in ("auto", "legacy"):
            async with client(server.url, mode, authorization=f"bearer {TOKEN}") as agency:
                result = await agency.call_tool("charge_card", {"amount_cents": 500, "card_number": CARD})
                assert result.is_error is False
        assert [c["amount_cents"] for c in await charges(server.url, authorization=f"Bearer {TOKEN}")] == [
            500,
            500,
        ]
    logged = server.log.text()
    assert "refused a request with a wrong bearer token from 127.0.0.1" in server.log.lines
    assert TOKEN not in logged
    assert WRONG_TOKEN not in logged


@pytest.mark.anyio
async def test_a_plain_mcp_server_is_served_behind_the_same_token_and_checks() -> None:
    argv = ["serve", "tests.test_http_serving_security:plain_server"]
    async with served(*argv, AEGIS_NB_TOKEN=TOKEN) as server:
        assert refusal(await post(server.url, INITIALIZE)) == (401, "Bearer", MISSING)
        bearer = f"Bearer {TOKEN}"
        evil = await post(server.url, INITIALIZE, authorization=bearer, origin="http://evil.example")
        assert status(evil) == (403, "Invalid Origin header")
        async with client(server.url, authorization=bearer) as plain:
            result = await plain.call_tool("echo", {"text": "hi"})
        assert result.structured_content == {"result": "hi"}
    assert TOKEN not in server.log.text()


def test_the_token_shows_in_no_repr() -> None:
    security = HttpSecurity(token=Secret(TOKEN))
    assert repr(security) == (
        "HttpSecurity(allowed_hosts=(), allowed_origins=(), max_sessions=1000,"
        " session_idle_timeout=600.0, unused_session_timeout=30.0)"
    )
    assert repr(BearerTokenGate(plain_server().streamable_http_app(), Secret(TOKEN))) == (
        "BearerTokenGate(token=***)"
    )


# -- sessions -----------------------------------------------------------------------------------------


async def bare_initializes(url: str, count: int) -> list[tuple[int, str | None]]:
    """`count` initialize requests, one after another, each answered and then left alone."""
    answers = []
    async with httpx2.AsyncClient() as http:
        for _ in range(count):
            response = await http.post(url, json=INITIALIZE, headers=POST_HEADERS)
            answers.append((response.status_code, response.headers.get("mcp-session-id")))
    return answers


def idle_timeouts(lines: list[str]) -> set[str]:
    """The sessions the SDK says it closed for being idle."""
    prefix, suffix = "Session ", " idle timeout"
    return {
        line[len(prefix) : -len(suffix)]
        for line in lines
        if line.startswith(prefix) and line.endswith(suffix)
    }


@pytest.mark.anyio
async def test_a_burst_of_bare_initializes_fills_no_more_than_the_configured_sessions() -> None:
    async with served("mock", "--max-sessions", "20") as server:
        answers = await bare_initializes(server.url, 40)
        assert [code for code, _ in answers] == [200] * 20 + [503] * 20
        assert await refused(connected(server.url, "legacy")) == "Too many open sessions"
        # Protocol 2026-07-28 keeps no sessions: such a client is served all the same.
        async with client(server.url) as modern:
            assert (await modern.call_tool("list_bookings", {})).is_error is False


@pytest.mark.anyio
async def test_after_a_burst_of_bare_initializes_a_later_client_is_served_once_they_go_unused() -> None:
    argv = ["mock", "--max-sessions", "20", "--unused-session-timeout", "0.3"]
    async with served(*argv) as server:
        answers = await bare_initializes(server.url, 40)
        assert {code for code, _ in answers} <= {200, 503}
        opened = {session for code, session in answers if code == 200}
        assert len(opened) >= 20
        assert None not in opened
        await server.log.wait_for(lambda lines: opened <= idle_timeouts(lines))
        # Not the SDK's idle timeout (600 s by default here): the unused one closed them.
        async with client(server.url, "legacy") as agency:
            result = await agency.call_tool("charge_card", {"amount_cents": 700, "card_number": CARD})
            assert result.is_error is False
        assert [c["amount_cents"] for c in await charges(server.url)] == [700]


@pytest.mark.anyio
async def test_a_session_used_after_its_initialize_is_not_closed_as_unused() -> None:
    async with (
        served("mock", "--unused-session-timeout", "0.3") as server,
        httpx2.AsyncClient(headers=POST_HEADERS) as http,
    ):
        used_open = await http.post(server.url, json=INITIALIZE)
        used = used_open.headers["mcp-session-id"]
        session = {"mcp-session-id": used, "mcp-protocol-version": "2025-11-25"}
        assert (await http.post(server.url, json=INITIALIZED, headers=session)).status_code == 202
        # Opened after the used one: had the used one been given the short deadline, it would have
        # run out first, and the SDK would have said so first.
        unused = (await http.post(server.url, json=INITIALIZE)).headers["mcp-session-id"]
        await server.log.wait_for(lambda lines: unused in idle_timeouts(lines))
        assert used not in idle_timeouts(server.log.lines)
        pong = await http.post(server.url, json=PING, headers=session)
        assert pong.status_code == 200
        gone = await http.post(server.url, json=PING, headers={**session, "mcp-session-id": unused})
        assert gone.status_code == 404


# -- refused options ----------------------------------------------------------------------------------


ORIGIN_ERROR = "expected an origin scheme://host[:port] (http or https, no path), got"
SECONDS_ERROR = "expected a positive number of seconds, got"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--allow-host", "https://mcp.example.com"],
            "--allow-host: expected HOST[:PORT] (mcp.example.com, mcp.example.com:8000),"
            " got 'https://mcp.example.com'",
        ),
        (
            ["--allow-host", "mcp.example.com:99999"],
            "--allow-host: expected a port 1-65535 or * after the host, got 'mcp.example.com:99999'",
        ),
        (
            ["--allow-origin", "https://app.example.com/page"],
            f"--allow-origin: {ORIGIN_ERROR} 'https://app.example.com/page'",
        ),
        (["--allow-origin", "app.example.com"], f"--allow-origin: {ORIGIN_ERROR} 'app.example.com'"),
        (
            ["--token", "two words"],
            "--token: the bearer token must be printable ASCII with no spaces (it travels in a header)",
        ),
        (["--max-sessions", "0"], "--max-sessions: expected at least 1, got 0"),
        (["--session-idle-timeout", "-1"], f"--session-idle-timeout: {SECONDS_ERROR} '-1'"),
        (["--unused-session-timeout", "inf"], f"--unused-session-timeout: {SECONDS_ERROR} 'inf'"),
    ],
)
def test_bad_http_options_are_usage_errors(argv: list[str], message: str) -> None:
    done = aegis_nb("mock", "--transport", "http", *argv)
    *usage, last = done.stderr.splitlines()
    assert (done.returncode, done.stdout, usage[0].split()[:3]) == (2, "", ["usage:", "aegis-nb", "mock"])
    assert last == f"aegis-nb mock: error: argument {message}"


@pytest.mark.parametrize(
    "option", ["--allow-host=x", "--allow-origin=http://x", "--token=t", "--max-sessions=5"]
)
def test_http_options_over_stdio_are_refused(option: str) -> None:
    done = aegis_nb("mock", option)
    name = option.partition("=")[0]
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"aegis-nb mock: {name} needs --transport http (stdio has no address)\n",
    )


def test_an_empty_token_in_the_environment_is_refused_not_taken_as_none() -> None:
    done = aegis_nb("mock", "--transport", "http", "--port", str(free_port()), AEGIS_NB_TOKEN="")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "aegis-nb mock: bad AEGIS_NB_TOKEN: the bearer token is empty\n",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"allowed_hosts": ("a b",)},
            "allowed_hosts: expected HOST[:PORT] (mcp.example.com, mcp.example.com:8000), got 'a b'",
        ),
        (
            {"allowed_origins": ("*",)},
            "allowed_origins: expected an origin scheme://host[:port] (http or https, no path), got '*'",
        ),
        ({"token": Secret("")}, "the bearer token is empty"),
        ({"max_sessions": True}, "max_sessions: expected a whole number >= 1, got True"),
        (
            {"session_idle_timeout": 0},
            "session_idle_timeout: expected a positive, finite number of seconds, got 0",
        ),
        (
            {"unused_session_timeout": float("nan")},
            "unused_session_timeout: expected a positive, finite number of seconds, got nan",
        ),
    ],
)
def test_bad_security_settings_are_value_errors_naming_the_setting(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        HttpSecurity(**options)
