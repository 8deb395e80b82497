"""`aegis-nb gateway` served over HTTP in a process of its own, with every line of its stderr kept."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE

import anyio

from tests.servers.launch import LINE_TIMEOUT, ROOT, Lines, free_port


@dataclass
class GatewayProcess:
    """The gateway's URL, and its stderr: the start-up lines at first, every line once it exits."""

    url: str
    stderr: list[str] = field(default_factory=list)


async def _read_all(lines: Lines, into: list[str]) -> None:
    try:
        while True:
            into.append(await lines.next_line())
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        return


@asynccontextmanager
async def gateway_over_http(policy: Path) -> AsyncIterator[GatewayProcess]:
    """Serve `policy` until the block ends (then the gateway is terminated and its stderr read out)."""
    port = free_port()
    command = [sys.executable, "-m", "aegis_nb.cli", "gateway", str(policy), "--transport", "http"]
    process = await anyio.open_process(
        [*command, "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=PIPE,
    )
    served = GatewayProcess(f"http://127.0.0.1:{port}/mcp")
    async with process, anyio.create_task_group() as readers:
        assert process.stderr is not None
        lines = Lines(process.stderr)
        try:
            with anyio.fail_after(LINE_TIMEOUT):
                while "Uvicorn running on" not in (line := await lines.next_line()):
                    served.stderr.append(line)
            served.stderr.append(line)
            readers.start_soon(_read_all, lines, served.stderr)
            yield served
        finally:
            process.terminate()
            with anyio.fail_after(LINE_TIMEOUT, shield=True):
                await process.wait()


@asynccontextmanager
async def mock_agency_over_http(port: int, ledger: Path) -> AsyncIterator[str]:
    """``aegis-nb mock --ledger <ledger>`` served on `port` until the block ends; yields its URL.

    Served again on the same port and ledger, it is the same agency restarted."""
    command = [sys.executable, "-m", "aegis_nb.cli", "mock", "--ledger", str(ledger), "--transport", "http"]
    process = await anyio.open_process(
        [*command, "--port", str(port)], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdin=PIPE
    )
    async with process:
        try:
            assert process.stderr is not None
            await Lines(process.stderr).wait_containing("Uvicorn running on")
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            with anyio.fail_after(LINE_TIMEOUT, shield=True):
                await process.wait()
