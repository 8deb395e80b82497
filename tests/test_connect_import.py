"""`connect` loads what the SDK checks results with (`jsonschema`) off the event loop.

Where Jupyter is installed that first import compiles a grammar and takes about a second; on the
loop's own thread it would stall every other task (a server's other requests) for that long. Each
run is a fresh interpreter, the only place where the module is not imported yet.
"""

from __future__ import annotations

import pytest

from tests.servers.launch import python_child

CHILD = """
import sys, threading
import anyio
from mcp.server.mcpserver import MCPServer
from aegis_nb import connect

on_the_loop_thread = []  # for each import of the module: whether the loop's thread ran it

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "jsonschema":
            on_the_loop_thread.append(threading.current_thread() is threading.main_thread())
        return None  # found by the usual finders

async def main():
    assert "jsonschema" not in sys.modules, "imported before connect"
    sys.meta_path.insert(0, Watch())
    async with connect(MCPServer("empty")) as session:
        assert threading.current_thread() is threading.main_thread()
        print(await session.list_tools(), on_the_loop_thread)

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_connect_imports_the_result_checker_once_in_a_worker_thread(backend: str) -> None:
    child = python_child("-c", CHILD, backend, check=False)
    assert (child.returncode, child.stderr, child.stdout) == (0, "", "[] [False]\n")
