"""`aegis-nb`: the command line (demo, serve, mock, gateway, runs, recover). Top layer: imports anything.

Exit status: 0 done; 1 the command ran and could not finish its job (`recover` left runs stuck or
unfinished, or its journal failed part-way; a server the app needs was unreachable; an extra is not
installed); 2 refused before doing anything, because the command line or something it names cannot
be used (a bad option, an app that does not import, a journal, ledger or port that cannot be had,
HTTP off loopback with no --allow-host), as argparse's own usage errors; 130 interrupted (Ctrl-C).
Every failure is one line on stderr.
"""

from __future__ import annotations

import argparse
import errno
import shlex
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any

Command = Callable[[argparse.Namespace], int]


class Refused(Exception):
    """The command line, or something it names, cannot be used: `main` prints it, exit status 2."""


DEMO_SCENARIOS = (
    "it commits",
    "the card is declined",
    "the hotel misses the deadline",
    "flight and hotel booked in parallel",
)
"""What `aegis-nb demo` runs, in order, for its help (`aegis_nb.demo` itself needs the mcp extra)."""


def _demo(args: argparse.Namespace) -> int:
    import anyio

    from aegis_nb.kernel.extras import needs_extra

    with needs_extra("mcp", "the travel-agency demo"):
        from aegis_nb.demo import run_demo

    anyio.run(run_demo)
    return 0


def _load(command: str, spec: str, what: str, wanted: Callable[[Any], bool]) -> Any:
    """``module:attribute`` -> the object it names, or what it returns when it is a factory.

    A callable that is not `wanted` is called with no arguments; if that fails with a TypeError (it
    needs arguments), it is reported in one line as not `what`, nor a factory of one. Every error is
    a `Refused` prefixed with ``aegis-nb <command>:``; the caller checks the type it got.
    """
    import importlib

    module_name, _, attribute = spec.partition(":")
    if "/" in module_name or "\\" in module_name or module_name.endswith(".py"):
        # Importing "app.py" would run app.py and then fail; "dir/app" could never import. A file
        # given alone most likely holds an `app`, as the examples name it.
        stem = Path(module_name.replace("\\", "/")).stem
        raise Refused(
            f"aegis-nb {command}: expected module:app with a module name, not a file path, got {spec!r}"
            f" (from the file's folder: {stem}:{attribute or 'app'})"
        )
    if not module_name or not attribute:
        raise Refused(f"aegis-nb {command}: expected module:app, got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the current folder are found
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise Refused(f"aegis-nb {command}: cannot import {module_name!r}: {exc}") from None
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise Refused(f"aegis-nb {command}: module {module_name!r} has no attribute {attribute!r}") from None
    if not wanted(app) and callable(app):
        try:
            app = app()
        except TypeError as exc:
            if exc.__traceback__ is not None and exc.__traceback__.tb_next is not None:
                raise  # raised inside the factory, not by the call: its traceback is what helps
            raise Refused(
                f"aegis-nb {command}: {spec!r} is not {what}, nor a factory of one: {exc}"
            ) from None
    return app


def _load_app(spec: str) -> Any:
    """``module:attribute`` -> the MCP server it names (a factory is called with no arguments)."""
    from aegis_nb.kernel.extras import needs_extra

    with needs_extra("mcp", "serving an MCP app"):
        from mcp.server.mcpserver import MCPServer

    app = _load("serve", spec, "a server", lambda app: isinstance(app, MCPServer))
    if not isinstance(app, MCPServer):
        raise Refused(f"aegis-nb serve: {spec!r} is a {type(app).__name__}, not an MCP server")
    return app


_HTTP_OPTIONS = (
    "host",
    "port",
    "allow_host",
    "allow_origin",
    "token",
    "max_sessions",
    "session_idle_timeout",
    "unused_session_timeout",
)
"""The options only streamable HTTP uses (their defaults are None, so that giving one is seen)."""

_SESSION_LIMITS = ("max_sessions", "session_idle_timeout", "unused_session_timeout")
"""Options named as `HttpSecurity`'s fields, whose defaults are its own."""


def _check_transport_options(command: str, args: argparse.Namespace) -> None:
    """Over stdio, an HTTP option would be ignored: the server would wait on stdin, saying nothing."""
    if args.transport == "http":
        args.host = "127.0.0.1" if args.host is None else args.host
        args.port = 8000 if args.port is None else args.port
        return
    given = [f"--{name.replace('_', '-')}" for name in _HTTP_OPTIONS if getattr(args, name) is not None]
    if given:
        verb = "needs" if len(given) == 1 else "need"
        raise Refused(
            f"aegis-nb {command}: {' and '.join(given)} {verb} --transport http (stdio has no address)"
        )


def _http_security(command: str, args: argparse.Namespace) -> Any:
    """The `HttpSecurity` the options ask for (the token from --token, else $AEGIS_NB_TOKEN), or Refused:
    off loopback without --allow-host, nothing may be served."""
    import os

    from aegis_nb.kernel.values import Secret
    from aegis_nb.server.http_security import TOKEN_ENV, HttpSecurity, UnsafeServing, check_token

    token = args.token  # argparse checked it
    if token is None and (token := os.environ.get(TOKEN_ENV)) is not None:
        try:
            check_token(Secret(token))
        except ValueError as exc:  # an empty one is an unset variable: serving open would be a surprise
            raise Refused(f"aegis-nb {command}: bad {TOKEN_ENV}: {exc}") from None
    limits = {name: getattr(args, name) for name in _SESSION_LIMITS if getattr(args, name) is not None}
    security = HttpSecurity(
        allowed_hosts=tuple(args.allow_host or ()),
        allowed_origins=tuple(args.allow_origin or ()),
        token=None if token is None else Secret(token),
        **limits,
    )
    try:
        security.transport_security(args.host)
    except UnsafeServing:
        raise Refused(
            f"aegis-nb {command}: refusing to serve on {args.host}, off loopback, without --allow-host:"
            " pass --allow-host HOST[:PORT] for each name clients reach the server by, and --allow-origin"
            f" URL for each web origin allowed to call it (none by default); set {TOKEN_ENV} to require"
            " a bearer token; or serve on 127.0.0.1"
        ) from None
    return security


def _check_address(command: str, host: str, port: int) -> None:
    """Bind `host`:`port` once before serving: uvicorn would report a port in use, or a host that does
    not resolve, amid its start-up lines (after the app's start-up ran) and exit with status 3."""
    import socket

    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise Refused(f"aegis-nb {command}: cannot resolve --host {host!r}: {exc.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            # As asyncio's create_server binds for uvicorn: reused addresses, IPv6 apart from IPv4.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                hint = (
                    "; stop what holds it or choose another --port" if exc.errno == errno.EADDRINUSE else ""
                )
                raise Refused(
                    f"aegis-nb {command}: cannot serve on {host}:{port}: {exc.strerror}{hint}"
                ) from None


def _check_journal(command: str, app: Any) -> None:
    """Open an app's journal once before serving, so a journal another process holds (or a file that is
    no journal) is one line here, not a traceback from the app's start-up."""
    import anyio

    from aegis_nb.saga.durable import JournalError, SqliteJournal

    journal = getattr(getattr(app, "workflow_engine", None), "journal", None)
    if not isinstance(journal, SqliteJournal):
        return

    async def try_open() -> None:
        async with SqliteJournal(journal.path):
            pass

    try:
        anyio.run(try_open)
    except JournalError as exc:
        raise Refused(f"aegis-nb {command}: {exc}") from None


def _serve_app(command: str, app: Any, args: argparse.Namespace) -> int:
    import anyio

    from aegis_nb.server.app import AegisMCP
    from aegis_nb.server.http_security import serve_http

    security = _http_security(command, args) if args.transport == "http" else None
    _check_journal(command, app)
    if security is None:
        app.run("stdio")
        return 0
    _check_address(command, args.host, args.port)
    if isinstance(app, AegisMCP):
        app.run(
            "http",
            host=args.host,
            port=args.port,
            allowed_hosts=args.allow_host or (),
            allowed_origins=args.allow_origin or (),
            token=security.token,
            max_sessions=security.max_sessions,
            session_idle_timeout=security.session_idle_timeout,
            unused_session_timeout=security.unused_session_timeout,
        )
    else:  # any other MCPServer, served as safely: uvicorn serves on asyncio only
        anyio.run(serve_http, app, args.host, args.port, security, backend="asyncio")
    return 0


def _serve(args: argparse.Namespace) -> int:
    _check_transport_options("serve", args)
    return _serve_app("serve", _load_app(args.app), args)


def _mock(args: argparse.Namespace) -> int:
    import json

    from aegis_nb.mock import FaultPlan, FaultPlanError, Ledger, LedgerError, TravelAgency

    _check_transport_options("mock", args)
    # An empty value (an unset shell variable) is refused, not taken as "none given": SQLite would
    # open '' as a private temporary database, and the user would lose a ledger they think is kept.
    if args.ledger == "":
        raise Refused("aegis-nb mock: bad --ledger: empty path (leave --ledger out to keep it in memory)")
    try:
        plan = FaultPlan() if args.faults is None else FaultPlan.from_json(json.loads(args.faults))
    except (ValueError, FaultPlanError) as exc:
        raise Refused(f"aegis-nb mock: bad --faults: {exc}") from None
    try:
        ledger = None if args.ledger is None else Ledger(args.ledger)
    except LedgerError as exc:  # a missing folder, or a file that is not SQLite
        raise Refused(f"aegis-nb mock: bad --ledger: {exc}") from None
    agency = TravelAgency(ledger, faults=plan)
    return _serve_app("mock", agency.server, args)


def _gateway(args: argparse.Namespace) -> int:
    """Serve upstream MCP servers behind a saga policy, or (--observe) draft a policy for them."""
    import anyio

    from aegis_nb.kernel.extras import needs_extra
    from aegis_nb.server.session import sole_exception

    with needs_extra("mcp", "the gateway"):
        from aegis_nb.gateway import Gateway, PolicyError, UpstreamSpec, load_policy
        from aegis_nb.gateway.observe import observe, upstream_from
        from aegis_nb.gateway.upstream import target_of

    if args.observe is not None:
        if args.policy is not None or args.mock:
            raise Refused("aegis-nb gateway: --observe drafts a policy: give upstreams, not a policy file")
        if args.output is not None and Path(args.output).exists():
            raise Refused(f"aegis-nb gateway: {args.output} exists: the draft would overwrite it")
        specs: list[UpstreamSpec] = []
        for text in args.observe:
            try:
                specs.append(upstream_from(text, [spec.name for spec in specs]))
            except ValueError as exc:
                raise Refused(f"aegis-nb gateway: bad upstream {text!r}: {exc}") from None
        draft = anyio.run(observe, [(spec, target_of(spec)) for spec in specs])
        if args.output is None:
            print(draft, end="")
        else:
            Path(args.output).write_text(draft, encoding="utf-8")
        return 0
    if (args.policy is None) == (not args.mock):
        raise Refused("aegis-nb gateway: give a policy file, or --mock for the mock agency's own policy")
    _check_transport_options("gateway", args)
    shipped = Path(__file__).parent / "mock" / "travel_policy.toml"
    try:
        policy = load_policy(shipped if args.mock else args.policy)
        if args.journal == "":
            raise Refused(f"aegis-nb gateway: {_EMPTY_JOURNAL}")
        return _serve_app("gateway", Gateway(policy, journal=args.journal), args)
    except Exception as exc:  # a policy that does not fit the upstreams' tools is found as they start
        found = sole_exception(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if isinstance(found, PolicyError):
            raise Refused(f"aegis-nb gateway: {found}") from None
        raise


_EMPTY_JOURNAL = "bad --journal: empty path (name the journal file)"
"""An empty --journal (an unset shell variable), refused by name: as a path it is the current folder."""


def _runs(args: argparse.Namespace) -> int:
    """List a journal's runs with their status, or replay one run's events as text."""
    from aegis_nb.kernel.printable import printable_line
    from aegis_nb.saga.durable import JournalError, read_run, read_runs
    from aegis_nb.saga.durable.runs import runs_table
    from aegis_nb.saga.trace import describe

    if args.journal == "":
        raise Refused(f"aegis-nb runs: {_EMPTY_JOURNAL}")
    if args.run == "":  # not "no --run": listing every run would answer another question
        raise Refused("aegis-nb runs: bad --run: empty run id (leave --run out to list every run)")
    if args.prune is not None and args.run is not None:
        raise Refused("aegis-nb runs: --prune removes runs, --run replays one: give one of them")
    if args.dry_run and args.prune is None:
        raise Refused("aegis-nb runs: --dry-run goes with --prune BEFORE (it shows what would be removed)")
    try:
        if args.prune is not None:
            from aegis_nb.saga.durable.runs import prune_lines
            from aegis_nb.saga.durable.store import prune_runs

            print("\n".join(prune_lines(prune_runs(args.journal, args.prune, dry_run=args.dry_run))))
            return 0
        if args.run is not None:
            for event in read_run(args.journal, args.run).events:
                print(describe(event))
            return 0
        runs = read_runs(args.journal)
    except KeyError:
        listing = f"aegis-nb runs --journal {shlex.quote(args.journal)}"
        missing = f"no run {args.run!r} in {args.journal} ({listing} lists them)"
        raise Refused(f"aegis-nb runs: {missing}") from None
    except JournalError as exc:
        # It may quote what the journal holds (a run id), which anyone who could write it chose.
        raise Refused(f"aegis-nb runs: {printable_line(str(exc))}") from None
    for line in runs_table(runs):
        print(line)
    return 0


def _recover(args: argparse.Namespace) -> int:
    """Finish the unfinished runs of a journal, rebuilding steps as the app `module:app` defines them."""
    import anyio

    from aegis_nb.kernel.printable import printable_line
    from aegis_nb.saga.durable import JournalError, JournalUnavailable, RecoveryIncomplete, SqliteJournal
    from aegis_nb.saga.durable.sqlitefile import check_regular
    from aegis_nb.saga.engine import WorkflowEngine
    from aegis_nb.saga.events import SagaEvent
    from aegis_nb.saga.trace import describe

    if args.journal == "":
        raise Refused(f"aegis-nb recover: {_EMPTY_JOURNAL}")
    # Opening a journal creates it when missing: a mistyped path would "recover 0 runs" and exit 0.
    # Checked before the app is loaded, so a typo costs no import and leaves no file behind.
    try:
        check_regular(Path(args.journal))
    except JournalUnavailable as exc:
        raise Refused(f"aegis-nb recover: {exc}") from None
    module_name = args.app.partition(":")[0]
    what = "an AegisMCP app or WorkflowEngine"
    app = _load(
        "recover",
        args.app,
        what,
        lambda app: isinstance(app, WorkflowEngine) or hasattr(app, "workflow_engine"),
    )
    engine = app if isinstance(app, WorkflowEngine) else getattr(app, "workflow_engine", None)
    if not isinstance(engine, WorkflowEngine):
        raise Refused(f"aegis-nb recover: {args.app!r} is a {type(app).__name__}, not {what}")
    # The app's own journal says which steps and modules it trusts recovery to rebuild.
    own = engine.journal.resolver if isinstance(engine.journal, SqliteJournal) else None
    registered = own.registry if own is not None else {}
    allowed = (own.allow_modules or ()) if own is not None else ()
    journal = SqliteJournal(args.journal, steps=registered, main_module=module_name, allow_modules=allowed)
    # An AegisMCP app's steps may compensate through sessions its own lifespan opens.
    server = sys.modules.get("aegis_nb.server.app")
    is_server = server is not None and isinstance(app, server.AegisMCP)
    resources: AbstractAsyncContextManager[Any] = app.resources() if is_server else nullcontext()
    begun = False  # a journal error once recovery has begun is no refusal: it stopped part-way

    def show(event: SagaEvent) -> None:
        nonlocal begun
        begun = True
        # Runs are recovered concurrently: each line names its run, or their lines would mix.
        # The run id and what the errors say come from the journal: shown, never obeyed.
        print(f"[{printable_line(event.run_id)}] {describe(event)}", flush=True)

    recovering = WorkflowEngine(
        compensation_retry=engine.compensation_retry,
        compensation_budget=engine.compensation_budget,
        journal=journal,
        sinks=[show],
    )

    async def recover() -> int:
        async with resources, journal:
            try:
                runs = await recovering.recover()
            except RecoveryIncomplete as exc:
                print(f"aegis-nb recover: {printable_line(str(exc))}", file=sys.stderr)
                runs = exc.runs
                left = len(exc.problems)
            except JournalError as exc:
                if not begun:
                    raise  # nothing was undone yet: the journal could not be used (exit 2)
                # Part-way through: what was undone stays undone, and what the journal could not
                # record stays unfinished in it, for the next recover.
                print(f"aegis-nb recover: stopped part-way: {printable_line(str(exc))}", file=sys.stderr)
                return 1
            else:
                left = 0
        stuck = sum(1 for run in runs if run.report.left_standing)
        summary = f"{len(runs) - stuck} rolled back, {stuck} stuck; {left} left unfinished"
        print(f"recovered {len(runs)} run(s): {summary}")
        return 1 if stuck or left else 0

    try:
        return anyio.run(recover)
    except JournalError as exc:
        raise Refused(f"aegis-nb recover: {printable_line(str(exc))}") from None


def _port(text: str) -> int:
    """A TCP port, checked here: out of range, the server would fail with a traceback once started."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, got {port}")
    return port


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {count}")
    return count


def _instant(text: str) -> float:
    from aegis_nb.saga.durable.runs import parse_instant

    try:
        return parse_instant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    import math

    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def _checked(check: str) -> Callable[[str], str]:
    """An argparse type that checks a value with `aegis_nb.server.http_security`'s `check` and keeps it.

    Imported when an option is given, not when the parser is built (it needs the mcp extra). The
    token's check says what is wrong without repeating it: it would land on the screen and in logs.
    """

    def parse(text: str) -> str:
        from aegis_nb.kernel.values import Secret
        from aegis_nb.server import http_security

        try:
            if check == "token":
                http_security.check_token(Secret(text))
            else:
                getattr(http_security, check)(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


def _add_transport_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: stdio")
    # No defaults here: `_check_transport_options` refuses them over stdio, then fills them in.
    parser.add_argument("--host", help="HTTP host (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, help="HTTP port (default 8000; 0 picks a free one); served at /mcp"
    )
    # Checked when given, by the functions the server uses, so a bad one is a usage error here.
    parser.add_argument(
        "--allow-host",
        action="append",
        type=_checked("host_patterns"),
        metavar="HOST[:PORT]",
        help="a Host clients reach the server by (repeatable); required off loopback",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        type=_checked("origin"),
        metavar="URL",
        help="a web origin (scheme://host[:port]) allowed to call (repeatable; default: none off loopback)",
    )
    parser.add_argument(
        "--token",
        type=_checked("token"),
        help="require Authorization: Bearer TOKEN; prefer $AEGIS_NB_TOKEN (a flag shows in ps)",
    )
    parser.add_argument(
        "--max-sessions", type=_count, metavar="N", help="sessions open at once (default 1000)"
    )
    parser.add_argument(
        "--session-idle-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="close a session after this long with no request in flight (default 600)",
    )
    parser.add_argument(
        "--unused-session-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="close a session used for nothing but its initialization for this long (default 30)",
    )


def build_parser() -> argparse.ArgumentParser:
    from aegis_nb import __version__

    parser = argparse.ArgumentParser(prog="aegis-nb", description="Sagas for MCP agents, notebook first.")
    parser.add_argument("--version", action="version", version=f"aegis-nb {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help=f"run the travel-agency saga over MCP {len(DEMO_SCENARIOS)} ways: {'; '.join(DEMO_SCENARIOS)}"
        " (mcp extra)",
    )
    demo.set_defaults(handler=_demo)
    serve = commands.add_parser(
        "serve", help="serve an MCP server (an AegisMCP app) given as module:app (mcp extra)"
    )
    serve.add_argument("app", help="module:attribute naming the server, or a function returning one")
    _add_transport_options(serve)
    serve.set_defaults(handler=_serve)
    mock = commands.add_parser("mock", help="serve the mock travel agency (flights, hotels, card; mcp extra)")
    mock.add_argument("--ledger", help="SQLite file for the ledger (default: in memory)")
    mock.add_argument("--faults", help='fault plan as JSON, e.g. \'{"charge_card": {"declined": true}}\'')
    _add_transport_options(mock)
    mock.set_defaults(handler=_mock)
    gateway = commands.add_parser(
        "gateway", help="serve other MCP servers' tools behind a saga policy, or --observe them (mcp extra)"
    )
    gateway.add_argument("policy", nargs="?", help="the policy file (TOML)")
    gateway.add_argument("--mock", action="store_true", help="serve `aegis-nb mock` with its shipped policy")
    gateway.add_argument(
        "--observe", nargs="+", metavar="UPSTREAM", help="draft a policy for these commands or URLs instead"
    )
    gateway.add_argument("--output", "-o", help="with --observe: write the draft here (default: stdout)")
    gateway.add_argument("--journal", help="SQLite journal: sagas open at a crash are rolled back on start")
    _add_transport_options(gateway)
    gateway.set_defaults(handler=_gateway)
    runs = commands.add_parser("runs", help="list the runs of a durable journal, or replay one")
    runs.add_argument("--journal", required=True, help="the SQLite journal file")
    runs.add_argument("--run", help="print this run's events, recovery included")
    runs.add_argument(
        "--prune",
        metavar="BEFORE",
        type=_instant,
        help="delete the finished runs last updated before this ISO date or time (UTC unless it says)",
    )
    runs.add_argument("--dry-run", action="store_true", help="with --prune: only show what it would delete")
    runs.set_defaults(handler=_runs)
    recover = commands.add_parser("recover", help="roll back the runs a crash left unfinished in a journal")
    recover.add_argument("--journal", required=True, help="the SQLite journal file")
    recover.add_argument("app", help="module:app (an AegisMCP app or WorkflowEngine) whose steps to rebuild")
    recover.set_defaults(handler=_recover)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Command = args.handler
    from aegis_nb.kernel.extras import MissingExtra

    try:
        return handler(args)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    except MissingExtra as exc:
        # The command needs an extra that is not installed: the pip line is all the user needs.
        print(f"aegis-nb {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C is how a server is stopped and a demo cut short: by then the saga in flight has
        # rolled back, so a traceback would only hide that. 130 is the shell's code for SIGINT.
        print(f"aegis-nb {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # A server the app connects to on start-up (an agency at a URL) that is not there: its
        # `connect` error says which, and what went wrong, in one line; a traceback adds nothing.
        from aegis_nb.kernel.errors import ServerUnreachable
        from aegis_nb.server.session import sole_exception

        found = sole_exception(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if not isinstance(found, ServerUnreachable):
            raise
        print(f"aegis-nb {args.command}: {found}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
