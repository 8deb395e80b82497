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

SINGLE_RESULT = re.compile(r"Passed: (?P<passed>\d+)/(?P<total>\d+), (?P<failed>\d+) failed")
"""The result line of a run of one scenario."""

SUMMARY_LINE = re.compile(r"^[✓✗] (?P<name>\S+): (?P<passed>\d+) passed, (?P<failed>\d+) failed$")


async def run_suite(scenario: str | None = None) -> str:
    """The suite's output: every scenario, or only `scenario`."""
    scope = ["--suite", "all"] if scenario is None else ["--scenario", scenario]
    async with http_server("serve", "tests.servers.conformance_app:app") as server:
        done = await anyio.run_process(
            [str(BIN / "conformance"), "server", "--url", server.url, *scope],
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
    # tools-call-sampling failed once in about thirty full runs on a loaded machine and never alone
    # (15 of 15): a scenario we serve that fails is run once more on its own, and must pass then.
    for name in sorted((failed - NOT_SERVED) & PASSING):
        alone = SINGLE_RESULT.search(anyio.run(run_suite, name))
        if alone is not None and alone["passed"] == alone["total"] != "0" and alone["failed"] == "0":
            passed, failed = passed | {name}, failed - {name}
    assert (passed, failed) == (PASSING, NOT_SERVED), output[-3000:]
