"""The MCP conformance suite's server scenarios against an AegisMCP server over streamable HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.clients import BIN, CLIENTS, client_env, installed
from tests.conftest import require
from tests.servers.launch import LINE_TIMEOUT, http_server

pytestmark = pytest.mark.slow

# Scenarios we do not pass, and why (both are in the suite's "pending" set, not its active one).
NOT_SERVED = {
    # Needs an SSE event store for resumable streams; AegisMCP.run serves HTTP without one.
    "server-sse-polling",
    # Needs a tool named json_schema_2020_12_tool with a draft 2020-12 input schema; not served.
    "json-schema-2020-12",
}

PASSING = {
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "server-sse-multiple-streams",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
}

SUMMARY_LINE = re.compile(r"^[✓✗] (?P<name>\S+): (?P<passed>\d+) passed, (?P<failed>\d+) failed$")


async def run_suite() -> str:
    """The suite's output, every scenario."""
    async with http_server("serve", "tests.servers.conformance_app:app") as server:
        done = await anyio.run_process(
            [str(BIN / "conformance"), "server", "--url", server.url, "--suite", "all"],
            cwd=CLIENTS,
            env=client_env(),
            check=False,
        )
    return done.stdout.decode()


def outcomes(output: str) -> tuple[set[str], set[str]]:
    """The scenarios that passed and those that failed, from the suite's summary lines."""
    results = {
        match["name"]: (int(match["passed"]), int(match["failed"]))
        for line in output.splitlines()
        if (match := SUMMARY_LINE.match(line.strip()))
    }
    passed = {name for name, (ok, failed) in results.items() if ok > 0 and failed == 0}
    failed = {name for name, (_, failed_count) in results.items() if failed_count > 0}
    return passed, failed


def test_the_conformance_server_scenarios_pass_except_the_features_we_do_not_serve() -> None:
    # One event loop is enough here: the suite and the server are both subprocesses.
    require(installed("conformance"), "the MCP conformance suite (make clients)")
    output = anyio.run(run_suite)
    passed, failed = outcomes(output)
    assert (passed, failed) == (PASSING, NOT_SERVED), output[-3000:]


SSE_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CLIENT = {"name": "raw-http", "version": "0"}


def request(number: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC request."""
    return {"jsonrpc": "2.0", "id": number, "method": method, "params": params}


async def next_message(lines: AsyncIterator[str]) -> dict[str, Any]:
    """The next JSON-RPC message on the lines of a streamed POST response (an SSE stream)."""
    async for line in lines:
        if line.startswith("data:"):
            message: dict[str, Any] = json.loads(line.removeprefix("data:"))
            return message
    raise AssertionError("the stream ended without a message")


@pytest.mark.anyio
async def test_the_sampling_request_travels_on_the_calls_own_stream() -> None:
    # A client opens its standalone GET stream in the background after initializing; a sampling
    # request sent there (no related request id) is dropped when the tool call wins that race, and
    # tools-call-sampling failed on loaded machines. This client never opens a GET stream.
    async with (
        http_server("serve", "tests.servers.conformance_app:app") as server,
        httpx.AsyncClient(timeout=LINE_TIMEOUT) as http,
    ):
        hello = {"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": CLIENT}
        initialized = await http.post(server.url, headers=SSE_HEADERS, json=request(0, "initialize", hello))
        headers = {**SSE_HEADERS, "mcp-session-id": initialized.headers["mcp-session-id"]}
        notice = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(server.url, headers=headers, json=notice)).status_code == 202
        call = request(1, "tools/call", {"name": "test_sampling", "arguments": {"prompt": "Hi"}})
        with anyio.fail_after(LINE_TIMEOUT):
            async with http.stream("POST", server.url, headers=headers, json=call) as stream:
                lines = stream.aiter_lines()
                sampling = await next_message(lines)
                assert sampling.get("method") == "sampling/createMessage", sampling
                reply = {"role": "assistant", "content": {"type": "text", "text": "Hello"}, "model": "m"}
                answer = {"jsonrpc": "2.0", "id": sampling["id"], "result": reply}
                assert (await http.post(server.url, headers=headers, json=answer)).status_code == 202
                result = await next_message(lines)
    text = "LLM response: Hello"
    assert result["id"] == 1
    assert result["result"] == {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"result": text},
        "isError": False,
    }
