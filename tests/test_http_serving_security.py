"""Serving streamable HTTP safely: Host/Origin allow-lists, a bearer token, the options' checks.

Over real HTTP: ``aegis-nb mock`` (an `AegisMCP` app, so `AegisMCP.run` with its keyword arguments)
or ``aegis-nb serve`` of a plain `MCPServer` in a child process on a free port, reached with
httpx2 (the transport the mcp client uses) and the mcp `Client`, on asyncio and trio.

Off loopback the server refuses to start without ``--allow-host``; with the allow-lists a foreign
Origin gets 403 and a foreign Host 421, and nothing is charged (the agency's own ledger, read by its
``list_bookings`` tool). On a loopback address the SDK leaves unchecked (127.0.0.2) the check holds
too. A token makes every request without it a 401, and never reaches the server's output.

Session admission (bounded sessions that one peer cannot exhaust) is tests/test_http_session_admission.py.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Awaitable
from typing import Any

import httpx2
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from aegis_nb.kernel.values import Secret
from aegis_nb.server.http_security import BearerTokenGate, HttpSecurity, UnsafeServing
from aegis_nb.server.session import sole_exception
from tests.conftest import require
from tests.http_serving_support import (
    INITIALIZE,
    client,
    post,
    served,
)
from tests.servers.launch import aegis_nb, free_port, python_child

CARD = "4242424242424242"
TOKEN = "tok-3f9a61c2e0b7-right"
WRONG_TOKEN = "tok-77d0c5e1a2f4-wrong"
SERVER_ERROR = "Server returned an error response"
"""What the mcp client raises for any 4xx or 5xx answer."""


def plain_server() -> MCPServer[Any]:
    """A bare `MCPServer` (no AegisMCP), served by ``aegis-nb serve`` through the same security."""
    server: MCPServer[Any] = MCPServer("plain")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


def can_bind(host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, 0))
        except OSError:
            return False
    return True


async def connected(url: str, mode: str = "auto", **headers: str) -> None:
    async with client(url, mode, read_timeout=5.0, **headers):
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


async def charges(url: str, **headers: str) -> list[dict[str, Any]]:
    async with client(url, read_timeout=5.0, **headers) as agency:
        result = await agency.call_tool("list_bookings", {})
    assert result.structured_content is not None
    return list(result.structured_content["charges"])


async def charge(url: str, **headers: str) -> None:
    async with client(url, read_timeout=5.0, **headers) as agency:
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
