"""`aegis-nb`: the command line (demo; later serve, recover, runs, lab). Top layer: may import anything."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Command = Callable[[argparse.Namespace], int]


def _demo(args: argparse.Namespace) -> int:
    import anyio

    from aegis_nb.demo import run_demo

    anyio.run(run_demo)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aegis-nb", description="Sagas for MCP agents, notebook first.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the travel-agency saga: success, declined card, timeout")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Command = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
