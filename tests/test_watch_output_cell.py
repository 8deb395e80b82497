"""``%aegis_watch`` draws a saga under the cell whose call caused it, not under the cell that started
the server which ran it.

As in tutorial 05, run in a real kernel with nbclient: one cell serves an `AegisMCP` app over
streamable HTTP from a task of the kernel's loop, the next cell's MCP client calls its workflow,
which rolls back. The server's task was created by the first cell and keeps that cell's request as
its context, so the watch view's outputs used to be sent to it (too late for nbclient, which had
moved on: the diagram was lost; JupyterLab drew it under the wrong cell). The calling cell must
hold the diagram, a static ``<img>`` of the rolled-back run; the serving cell nothing.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("uvicorn")

CELLS = [
    "%load_ext aegis_nb\n"
    "from aegis_nb import AegisContext, AegisMCP, step\n"
    "app = AegisMCP('travel-agent', workflow_timeout=5)\n\n"
    "@step(name='BookFlight')\n"
    "async def book_flight(ctx):\n    return ctx.with_metadata({'flight': 'FL-1'})\n\n"
    "@book_flight.compensation\nasync def cancel_flight(ctx):\n    pass\n\n"
    "@step(name='ChargeCard', read_only=True)\n"
    "async def charge(ctx):\n    raise ValueError('Card Declined!')\n\n"
    "@app.workflow('book_trip')\n"
    "async def book_trip(ctx: AegisContext, destination: str):\n"
    "    run = await app.workflow_engine.run_saga([book_flight, charge], ctx)\n"
    "    return run.unwrap()",
    "%aegis_watch app",
    "import asyncio, socket, uvicorn\n"
    "listener = socket.socket()\nlistener.bind(('127.0.0.1', 0))\nlistener.listen()\n"
    "port = listener.getsockname()[1]\n"
    "http_server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), log_level='warning'))\n"
    "serving = asyncio.get_running_loop().create_task(http_server.serve(sockets=[listener]))",
    "from mcp import Client\n"
    "async with Client(f'http://127.0.0.1:{port}/mcp') as client:\n"
    "    remote = await client.call_tool('book_trip', {'destination': 'Oslo'})\n"
    "print('is_error:', remote.is_error, remote.content[0].text)",
    "http_server.should_exit = True\nawait serving\nprint('stopped')",
]


def test_the_diagram_of_a_served_call_is_drawn_under_the_calling_cell(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    serve, call = notebook.cells[2], notebook.cells[3]
    assert serve.outputs == []
    kinds = [(output.output_type, sorted(output.get("data", {}))) for output in call.outputs]
    assert kinds == [
        ("display_data", ["text/plain"]),  # the live widget, blanked (its view is not kept without state)
        ("display_data", ["text/plain"]),  # its fallback, blanked
        ("display_data", ["text/html", "text/plain"]),  # the static diagram
        ("stream", []),
    ], call.outputs
    static = call.outputs[2].data
    alt = re.search(r'alt="([^"]*)"', static["text/html"])
    assert alt is not None
    assert html.unescape(alt[1]) == "book_trip: rolled back — Card Declined! — rolled back: BookFlight"
    assert static["text/plain"].startswith("book_trip — ROLLED BACK · 2 steps · ")
    assert call.outputs[3].text == "is_error: True Card Declined! — rolled back: BookFlight\n"
    assert notebook.cells[4].outputs[0].text == "stopped\n"


def test_the_running_cell_is_followed_once_and_no_longer_after_unloading() -> None:
    from tests.ipython_support import loaded_shell, ok

    with loaded_shell("import aegis_nb.notebook.magics as m\nengine = m.WorkflowEngine()") as shell:
        magics = shell.magics_manager.registry["AegisMagics"]
        began = magics.running_cell._began
        ok(shell, "%aegis_watch engine")
        ok(shell, "%aegis_watch engine")
        assert shell.events.callbacks["pre_run_cell"].count(began) == 1
        # A plain IPython shell has no request headers: outputs stay where IPython puts them.
        assert magics.running_cell.header is None
        ok(shell, "%unload_ext aegis_nb")
        assert began not in shell.events.callbacks["pre_run_cell"]
        assert magics.running_cell._ended not in shell.events.callbacks["post_run_cell"]
