"""The options of the aegis magics, parsed into immutable values, with errors that say how to fix them.

Parsing happens before anything runs: an unknown option, an unknown step in ``--fail`` or
``--latency``, or a deadline that is not a positive number raises IPython's `UsageError` (shown as one
line, no traceback) naming the mistake and the fix.
"""

from __future__ import annotations

import argparse
import difflib
import enum
import keyword
import math
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from IPython.core.error import UsageError

from aegis_nb.saga.retry import RetryPolicy


class MockKind(enum.Enum):
    """Mock MCP tool servers `--mock` can start."""

    TRAVEL = "travel"


@dataclass(frozen=True)
class StepOptions:
    """What ``%%aegis_step NAME [options]`` was given."""

    name: str
    timeout: float | None = None
    retries: int | None = None
    retry_delay: float | None = None
    in_doubt: bool = False
    read_only: bool = False

    @property
    def compensation_retry(self) -> RetryPolicy | None:
        """The retry policy for the compensation, or ``None`` for the engine's default."""
        if self.retries is None and self.retry_delay is None:
            return None
        default = RetryPolicy()
        attempts = default.attempts if self.retries is None else self.retries + 1
        delay = default.initial_delay if self.retry_delay is None else self.retry_delay
        return RetryPolicy(attempts=attempts, initial_delay=delay)


@dataclass(frozen=True)
class SagaOptions:
    """What ``%aegis_saga STEP ... [options]`` (or its cell form's first line) was given.

    ``fail`` and ``latency`` are keyed by step references as written (``Fly`` or ``Fly#2``); they are
    checked against the saga's steps once it is planned (see `SagaPlan.select`).
    """

    steps: tuple[str, ...] = ()
    deadline: float | None = None
    fail: Mapping[str, str | None] = field(default_factory=dict)
    latency: Mapping[str, float] = field(default_factory=dict)
    mock: MockKind | None = None
    name: str | None = None
    output: str | None = None
    context: str | None = None
    background: bool = False
    interactive: bool = False


@dataclass(frozen=True)
class RehearseOptions:
    """What ``%aegis_rehearse STEP ... [options]`` was given."""

    steps: tuple[str, ...]
    mock: MockKind | None
    timeout: float
    name: str | None = None
    output: str | None = None
    context: str | None = None


class _Parser(argparse.ArgumentParser):
    """A magic's argument parser whose errors are `UsageError`s that say what to type instead."""

    def __init__(self, prog: str, usage: str) -> None:
        super().__init__(prog=prog, usage=usage, add_help=False, allow_abbrev=False)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"%{self.prog}: {message}. Usage: {self.usage}")

    def parse(self, argstring: str) -> argparse.Namespace:
        try:
            argv = shlex.split(argstring)
        except ValueError as exc:
            raise UsageError(f"%{self.prog}: cannot split the options ({exc}); check the quotes") from None
        unknown = [
            arg.split("=", 1)[0]
            for arg in argv
            if arg.startswith("-") and not _is_number(arg) and arg.split("=", 1)[0] not in self._option_names
        ]
        if unknown:
            bad = unknown[0]
            raise UsageError(
                f"%{self.prog}: unknown option {bad}{did_you_mean(bad, sorted(self._option_names))}. "
                f"Usage: {self.usage}"
            )
        return self.parse_intermixed_args(argv)

    @property
    def _option_names(self) -> set[str]:
        return {name for action in self._actions for name in action.option_strings}


SAGA_USAGE = (
    "%aegis_saga STEP [STEP ...] [--deadline SECONDS] [--fail STEP[=MESSAGE]] [--latency STEP=SECONDS] "
    "[--mock travel] [--name NAME] [-o VAR] [--context VAR] [--background | --interactive]"
)
STEP_USAGE = (
    "%%aegis_step NAME [--timeout SECONDS] [--retries N] [--retry-delay SECONDS] [--in-doubt] [--read-only]"
)
REHEARSE_USAGE = (
    "%aegis_rehearse STEP [STEP ...] [--mock travel] [--timeout SECONDS] [--name NAME] [-o VAR] "
    "[--context VAR]"
)


def saga_parser() -> _Parser:
    parser = _Parser("aegis_saga", SAGA_USAGE)
    parser.add_argument("steps", nargs="*", metavar="STEP", help="the steps, in order")
    parser.add_argument("--deadline", metavar="SECONDS", help="the whole saga's deadline")
    parser.add_argument("--fail", action="append", default=[], metavar="STEP[=MESSAGE]")
    parser.add_argument("--latency", action="append", default=[], metavar="STEP=SECONDS")
    parser.add_argument("--mock", metavar="KIND", help="start mock MCP tools: travel")
    parser.add_argument("--name", help="the saga's name in the diagram and report")
    parser.add_argument("-o", "--output", metavar="VAR", help="bind the finished SagaRun to VAR")
    parser.add_argument("--context", metavar="VAR", help="start from the AegisContext (or dict) in VAR")
    parser.add_argument("--background", action="store_true", help="return at once; await the result")
    parser.add_argument("--interactive", action="store_true", help="sliders, toggles and a Run button")
    return parser


def step_parser() -> _Parser:
    parser = _Parser("aegis_step", STEP_USAGE)
    parser.add_argument("name", metavar="NAME")
    parser.add_argument("--timeout", metavar="SECONDS")
    parser.add_argument("--retries", metavar="N")
    parser.add_argument("--retry-delay", metavar="SECONDS")
    parser.add_argument("--in-doubt", action="store_true")
    parser.add_argument("--read-only", action="store_true")
    return parser


def rehearse_parser() -> _Parser:
    parser = _Parser("aegis_rehearse", REHEARSE_USAGE)
    parser.add_argument("steps", nargs="*", metavar="STEP")
    parser.add_argument("--mock", metavar="KIND")
    parser.add_argument("--timeout", metavar="SECONDS", help="how long a hanging step is given")
    parser.add_argument("--name")
    parser.add_argument("-o", "--output", metavar="VAR")
    parser.add_argument("--context", metavar="VAR")
    return parser


def parse_step_options(line: str) -> StepOptions:
    """``NAME [--timeout S] [--retries N] [--retry-delay S] [--in-doubt] [--read-only]``."""
    args = step_parser().parse(line)
    name = identifier(args.name, "%%aegis_step NAME")
    retries = None
    if args.retries is not None:
        try:
            retries = int(args.retries)
        except ValueError:
            retries = -1
        if retries < 0:
            raise UsageError(
                f"%%aegis_step: --retries takes a whole number >= 0 (retries after the first attempt), "
                f"got {args.retries!r}; e.g. --retries 2"
            )
    return StepOptions(
        name=name,
        timeout=_seconds(args.timeout, "%%aegis_step: --timeout", positive=True),
        retries=retries,
        retry_delay=_seconds(args.retry_delay, "%%aegis_step: --retry-delay", positive=False),
        in_doubt=args.in_doubt,
        read_only=args.read_only,
    )


def parse_saga_options(line: str) -> SagaOptions:
    """The saga magic's line: step names and options, checked."""
    args = saga_parser().parse(line)
    if args.background and args.interactive:
        raise UsageError("%aegis_saga: choose one of --background and --interactive")
    fail: dict[str, str | None] = {}
    for item in args.fail:
        step, sep, message = item.partition("=")
        fail[step_reference(step, "--fail STEP[=MESSAGE]")] = message if sep else None
    latency: dict[str, float] = {}
    for item in args.latency:
        step, sep, seconds = item.partition("=")
        if not sep:
            raise UsageError(f"%aegis_saga: --latency takes STEP=SECONDS, e.g. --latency {step}=0.5")
        latency[step_reference(step, "--latency STEP=SECONDS")] = _parse_seconds(
            seconds, f"%aegis_saga: --latency {step}=", positive=False
        )
    return SagaOptions(
        steps=line_steps(args.steps, "aegis_saga"),
        deadline=_seconds(args.deadline, "%aegis_saga: --deadline", positive=True),
        fail=fail,
        latency=latency,
        mock=_mock(args.mock, "aegis_saga"),
        name=args.name,
        output=None if args.output is None else identifier(args.output, "-o VAR"),
        context=None if args.context is None else identifier(args.context, "--context VAR"),
        background=args.background,
        interactive=args.interactive,
    )


DEFAULT_REHEARSAL_TIMEOUT = 0.25
"""Seconds a step that hangs after its effect is given before it times out, in a rehearsal."""


def parse_rehearse_options(line: str) -> RehearseOptions:
    args = rehearse_parser().parse(line)
    timeout = _seconds(args.timeout, "%aegis_rehearse: --timeout", positive=True)
    return RehearseOptions(
        steps=line_steps(args.steps, "aegis_rehearse"),
        mock=_mock(args.mock, "aegis_rehearse"),
        timeout=timeout or DEFAULT_REHEARSAL_TIMEOUT,
        name=args.name,
        output=None if args.output is None else identifier(args.output, "-o VAR"),
        context=None if args.context is None else identifier(args.context, "--context VAR"),
    )


def line_steps(words: Iterable[str], magic: str) -> tuple[str, ...]:
    """The step names a magic's line lists; a step called with arguments is refused with the cell form.

    The line is split like a shell's (quotes removed, words at spaces), so ``BookFlight("New York")``
    cannot survive it intact; the cell form reads each line as Python, which can.
    """
    steps = []
    for word in words:
        name, paren, _ = word.partition("(")
        if paren:
            raise UsageError(
                f"%{magic}: {name or word}(...) has arguments, which only the cell form takes: write "
                f"%%{magic} (with the options) on the first line, then one step per line, "
                f'e.g. {name or "BookFlight"}("Lisbon")'
            )
        if "&" in word:
            raise UsageError(
                f"%{magic}: steps that run together (A & B) are written in the cell form: "
                f"%%{magic} (with the options) on the first line, then one line per step or group, "
                "e.g. BookFlight & ReserveHotel"
            )
        steps.append(identifier(word, "a step name"))
    return tuple(steps)


def identifier(text: str, what: str) -> str:
    """`text` if it is a Python identifier (a variable a step can be bound to), else a `UsageError`."""
    if text.isidentifier() and not keyword.iskeyword(text):
        return text
    raise UsageError(f"{what}: {text!r} is not a valid Python name (letters, digits and _, not a keyword)")


def step_reference(text: str, what: str) -> str:
    """`text` if it can name a step in an option: a Python name, or ``NAME#N`` for one use of a repeat.

    The engine calls the uses of a repeated step ``Fly#1``, ``Fly#2`` (so does the diagram), and
    ``--fail Fly#2`` must be able to pick the second.
    """
    name, sep, number = text.partition("#")
    numbered = number.isdecimal() and number.isascii() and not number.startswith("0")
    if (not sep or numbered) and name.isidentifier() and not keyword.iskeyword(name):
        return text
    raise UsageError(
        f"{what}: {text!r} is not a step name (a Python name, or NAME#N for the N-th use of a repeated "
        "step, as the diagram shows it)"
    )


def _mock(value: str | None, magic: str) -> MockKind | None:
    if value is None:
        return None
    try:
        return MockKind(value)
    except ValueError:
        known = ", ".join(kind.value for kind in MockKind)
        raise UsageError(f"%{magic}: --mock {value!r} is not a mock we have; use one of: {known}") from None


def _seconds(value: str | None, what: str, *, positive: bool) -> float | None:
    return None if value is None else _parse_seconds(value, what, positive=positive)


def _parse_seconds(value: str, what: str, *, positive: bool) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    ok = math.isfinite(seconds) and (seconds > 0 if positive else seconds >= 0)
    if not ok:
        kind = "a positive" if positive else "a non-negative"
        raise UsageError(f"{what} takes {kind} number of seconds, e.g. 2.5; got {value!r}")
    return seconds


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
