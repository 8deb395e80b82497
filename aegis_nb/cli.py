"""`aegis-nb`: the command line (demo, serve, mock; later recover, runs, lab). Top layer: imports anything."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

Command = Callable[[argparse.Namespace], int]


def _demo(args: argparse.Namespace) -> int:
    import anyio

    from aegis_nb.demo import run_demo

    anyio.run(run_demo)
    return 0


def _load_app(spec: str) -> Any:
    """``module:attribute`` -> the MCP server it names (a factory is called with no arguments)."""
    import importlib

    from mcp.server.mcpserver import MCPServer

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"aegis-nb serve: expected module:app, got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the current folder are found
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"aegis-nb serve: cannot import {module_name!r}: {exc}") from None
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"aegis-nb serve: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, MCPServer) and callable(app):
        try:
            app = app()
        except TypeError as exc:
            raise SystemExit(
                f"aegis-nb serve: {spec!r} is not a server, nor a factory of one: {exc}"
            ) from None
    if not isinstance(app, MCPServer):
        raise SystemExit(f"aegis-nb serve: {spec!r} is a {type(app).__name__}, not an MCP server")
    return app


def _serve_app(app: Any, args: argparse.Namespace) -> int:
    from aegis_nb.server.app import AegisMCP

    if isinstance(app, AegisMCP):
        app.run(args.transport, host=args.host, port=args.port)
    elif args.transport == "stdio":
        app.run("stdio")
    else:
        app.run("streamable-http", host=args.host, port=args.port)
    return 0


def _serve(args: argparse.Namespace) -> int:
    return _serve_app(_load_app(args.app), args)


def _mock(args: argparse.Namespace) -> int:
    import json

    from aegis_nb.mock import FaultPlan, FaultPlanError, Ledger, TravelAgency

    try:
        plan = FaultPlan.from_json(json.loads(args.faults)) if args.faults else FaultPlan()
    except (ValueError, FaultPlanError) as exc:
        raise SystemExit(f"aegis-nb mock: bad --faults: {exc}") from None
    agency = TravelAgency(Ledger(args.ledger) if args.ledger else None, faults=plan)
    return _serve_app(agency.server, args)


def _add_transport_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000); served at /mcp")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aegis-nb", description="Sagas for MCP agents, notebook first.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the travel-agency saga: success, declined card, timeout")
    demo.set_defaults(handler=_demo)
    serve = commands.add_parser("serve", help="serve an MCP server (an AegisMCP app) given as module:app")
    serve.add_argument("app", help="module:attribute naming the server, or a function returning one")
    _add_transport_options(serve)
    serve.set_defaults(handler=_serve)
    mock = commands.add_parser("mock", help="serve the mock travel agency (flights, hotels, card)")
    mock.add_argument("--ledger", help="SQLite file for the ledger (default: in memory)")
    mock.add_argument("--faults", help='fault plan as JSON, e.g. \'{"charge_card": {"declined": true}}\'')
    _add_transport_options(mock)
    mock.set_defaults(handler=_mock)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Command = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
