"""Building a server leaves the process's logging alone; serving one sets it up as the SDK does.

The SDK's `MCPServer.__init__` calls `logging.basicConfig` (INFO): in a notebook, every library's
INFO logs would then show in every cell. `AegisMCP` defers that to `run()`.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.travel import travel_app
from aegis_nb.server.app import AegisMCP
from tests.servers.launch import ROOT


@contextmanager
def fresh_root_logger() -> Iterator[logging.Logger]:
    """The root logger as a fresh process (a notebook kernel) has it: WARNING, no handlers.

    pytest's capture handlers (added for the test's call, after fixtures) would otherwise make
    `basicConfig` a no-op and hide the problem.
    """
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    root.handlers.clear()
    root.setLevel(logging.WARNING)
    try:
        yield root
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_building_servers_leaves_the_root_logger_alone(tmp_path: Path) -> None:
    with fresh_root_logger() as root:
        AegisMCP("plain")
        AegisMCP("durable", journal=tmp_path / "journal.sqlite")
        travel_app(TravelAgency())
        state = (root.level, root.handlers[:])

    assert state == (logging.WARNING, [])


def test_a_servers_own_handlers_and_level_survive_building_another() -> None:
    mine = logging.StreamHandler(sys.stderr)
    with fresh_root_logger() as root:
        root.addHandler(mine)
        root.setLevel(logging.DEBUG)
        AegisMCP("plain")
        state = (root.level, root.handlers[:])

    assert state == (logging.DEBUG, [mine])


SERVED = """
import logging
from aegis_nb.server.app import AegisMCP

app = AegisMCP("logs")

@app.tool()
async def hello() -> str:
    logging.getLogger("traveller").info("hello from a tool")
    return "hi"

app.run()
"""


@pytest.mark.anyio
async def test_a_served_app_logs_at_info_as_the_sdk_sets_up() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVED], cwd=str(ROOT))
    with tempfile.TemporaryFile("w+") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("hello", {})
        errlog.seek(0)
        output = errlog.read().splitlines()

    assert result.is_error is False
    assert output == ["hello from a tool"]
