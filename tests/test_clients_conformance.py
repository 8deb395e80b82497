"""The MCP conformance suite's server scenarios against an AegisMCP server over streamable HTTP."""

from __future__ import annotations

import re

import anyio
import pytest

from tests.clients import BIN, CLIENTS, client_env, installed
from tests.conftest import require
from tests.servers.launch import http_server

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
    async with http_server("serve", "tests.servers.conformance_app:app") as server:
        done = await anyio.run_process(
            [str(BIN / "conformance"), "server", "--url", server.url, "--suite", "all"],
            cwd=CLIENTS,
            env=client_env(),
            check=False,
        )
    return done.stdout.decode()


def test_the_conformance_server_scenarios_pass_except_the_features_we_do_not_serve() -> None:
    # One event loop is enough here: the suite and the server are both subprocesses.
    require(installed("conformance"), "the MCP conformance suite (make clients)")
    output = anyio.run(run_suite)
    results = {
        match["name"]: (int(match["passed"]), int(match["failed"]))
        for line in output.splitlines()
        if (match := SUMMARY_LINE.match(line.strip()))
    }
    passed = {name for name, (ok, failed) in results.items() if ok > 0 and failed == 0}
    failed = {name for name, (_, failed_count) in results.items() if failed_count > 0}
    assert (passed, failed) == (PASSING, NOT_SERVED), output[-3000:]
