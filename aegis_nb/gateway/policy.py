"""A gateway policy: which upstream MCP servers to front, and what each of their tools is to a saga.

A TOML file::

    [upstreams.agency]                 # a stdio command (command, args, env) or a url (streamable HTTP)
    command = "aegis-nb"
    args = ["mock"]
    env = { AGENCY_DB = "${HOME}/agency.db" }   # ${NAME}: from the gateway's environment ($$ is '$')

    [tools.search_flights]
    kind = "read_only"                 # passed through; never a step

    [tools.book_flight]
    kind = "compensable"               # inside a saga: a step, undone by `undo` on rollback
    undo = "cancel_flight"
    undo_args = { booking_id = "/result/booking_id" }   # JSON Pointer over {arguments, result}
    idempotency_arg = "idempotency_key"                 # sent the step's idempotency key

    [tools.charge_card]
    kind = "compensable"
    undo = "refund_card"
    undo_args = { charge_id = "$response.body#/charge_id" }   # SEP-3172's form
    secret = ["card_number"]           # never shown in events, journal, status or logs

    [tools.set_faults]
    kind = "irreversible"              # refused inside a saga unless allow_in_saga = true

An undo argument may also be built with JMESPath (``{ jmespath = "result.items[*].id" }``) or
taken from a text answer by a regex's named group (``{ regex = "hash (?P<sha>[0-9a-f]+)" }``): see
`aegis_nb.server.bindings`. A tool may be its own undo (a checkout undone by a checkout).

A tool may say ``upstream = "agency"`` (needed only when two upstreams serve one name), and
``guess = true`` marks an entry `observe` wrote from annotations, not yet confirmed by a person.

Everything that can be checked without the upstreams is checked by `load_policy`, and the rest
(tools that exist, undo arguments they take and require, of the types they take) by
`Policy.check_tools` once they are listed. Every
error is a `PolicyError` naming the file, the line and the key. `tomllib` keeps no line numbers, so
`key_line` finds a key's line in the text itself.
"""

from __future__ import annotations

import enum
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aegis_nb.kernel.errors import AegisError
from aegis_nb.kernel.printable import printable_line
from aegis_nb.server.bindings import Binding, BindingError, UndoBinding, parse_binding, value_type
from aegis_nb.server.session import redacted_url

SAGA_TOOLS: Final = ("saga_begin", "saga_status", "saga_commit", "saga_rollback")
"""The gateway's own tools: an upstream tool may not take their names."""


class ToolKind(enum.Enum):
    """What an upstream tool is to a saga."""

    READ_ONLY = "read_only"
    """Passed through, in a saga or not: it changes nothing, so there is nothing to undo."""
    COMPENSABLE = "compensable"
    """In a saga, a step: its undo tool is called with the bound arguments on rollback."""
    IRREVERSIBLE = "irreversible"
    """Passed through outside a saga; refused inside one unless the policy allows it."""


class PolicyError(AegisError, ValueError):
    """A policy that cannot be used: `source`, `line` (1-based, None when unknown), `key` (dotted)."""

    def __init__(self, source: str, line: int | None, key: str, problem: str) -> None:
        self.source = source
        self.line = line
        self.key = key
        self.problem = problem
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One upstream server: a stdio `command` with `args` and `env`, or a streamable HTTP `url`.

    `env` holds the values with every ``${NAME}`` replaced; they may be secrets, so no repr shows them."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    url: str | None = None

    def describe(self) -> str:
        """How messages name it (a command's arguments may hold secrets: only the command is shown;
        a URL's credentials and query values are not shown)."""
        if self.url is not None:
            return f"{self.name!r} ({printable_line(redacted_url(self.url))})"
        return f"{self.name!r} ({printable_line(self.command or '')} ...)"


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """What one upstream tool is; `guessed`: taken from annotations or marked ``guess = true``."""

    name: str
    kind: ToolKind
    undo: str | None = None
    undo_args: tuple[tuple[str, UndoBinding], ...] = ()
    idempotency_arg: str | None = None
    allow_in_saga: bool = False
    secret: tuple[str, ...] = ()
    upstream: str | None = None
    guessed: bool = False

    @property
    def bindings(self) -> dict[str, UndoBinding]:
        """The undo's arguments by name (a fresh dict)."""
        return dict(self.undo_args)


@dataclass(frozen=True, slots=True)
class Policy:
    """A loaded policy: its upstreams, its tool entries, and where it came from (for error lines)."""

    source: str
    upstreams: tuple[UpstreamSpec, ...]
    tools: tuple[ToolPolicy, ...]
    text: str = field(default="", repr=False)

    def tool(self, name: str) -> ToolPolicy | None:
        """The entry for `name`, or None when the policy does not name it."""
        return next((tool for tool in self.tools if tool.name == name), None)

    def error(self, path: tuple[str, ...], problem: str) -> PolicyError:
        """A `PolicyError` at the line where `path` is written."""
        return PolicyError(self.source, key_line(self.text, path), ".".join(path), problem)

    def check_tools(self, served: Mapping[str, Mapping[str, Any]]) -> None:
        """Check the entries against the upstream tools: `served` maps a tool name to its input schema.

        Refused: a named tool that no upstream serves, an undo tool that does not exist, an undo
        argument its tool does not take, an argument it requires that no binding gives, a binding
        whose value is of a type the argument does not take (where the binding's form says), an
        ``/arguments/x`` or secret the tool does not take.
        """
        known = ", ".join(map(printable_line, sorted(served))) or "none"  # upstream names: escaped
        for tool in self.tools:
            if tool.name not in served:
                raise self.error(
                    ("tools", tool.name), f"no upstream serves a tool {tool.name!r} (tools: {known})"
                )
            own = _parameters(served[tool.name])
            for name in tool.secret:
                if own is not None and name not in own:
                    raise self.error(
                        ("tools", tool.name, "secret"), f"{tool.name!r} takes no argument {name!r}"
                    )
            if tool.undo is None:
                continue
            if tool.undo not in served:
                raise self.error(
                    ("tools", tool.name, "undo"),
                    f"no upstream serves the undo tool {tool.undo!r} (tools: {known})",
                )
            self._check_undo_args(tool, served[tool.name], served[tool.undo])

    def _check_undo_args(
        self, tool: ToolPolicy, schema: Mapping[str, Any], undo_schema: Mapping[str, Any]
    ) -> None:
        """The bindings of `tool` against its own input schema and its undo's (see `check_tools`)."""
        own, takes = _parameters(schema), _parameters(undo_schema)
        undo_properties = _properties(undo_schema)
        for name, binding in tool.undo_args:
            path = ("tools", tool.name, "undo_args", name)
            if takes is not None and name not in takes:
                raise self.error(
                    path,
                    f"the undo tool {tool.undo!r} takes no argument {name!r} "
                    f"(it takes: {', '.join(map(printable_line, takes))})",
                )
            pointed = binding.argument if isinstance(binding, Binding) else None
            if pointed is not None and own is not None and pointed not in own:
                raise self.error(path, f"{binding.text!r}: {tool.name!r} takes no argument {pointed!r}")
            gives = value_type(binding, _properties(schema))
            declared = (undo_properties or {}).get(name)
            wanted = _types(declared.get("type") if isinstance(declared, Mapping) else None)
            if gives is not None and wanted is not None and not _fits(gives, wanted):
                raise self.error(
                    path,
                    f"{binding.text!r} gives {_a(gives)}, but the undo tool {tool.undo!r} takes {name!r} "
                    f"as {' or '.join(map(_a, wanted))}",
                )
        required = undo_schema.get("required")
        bound = {name for name, _binding in tool.undo_args}
        unbound = [name for name in required if name not in bound] if isinstance(required, list) else []
        if unbound:
            raise self.error(
                ("tools", tool.name, "undo_args"),
                f"the undo tool {tool.undo!r} requires "
                f"{', '.join(printable_line(str(name)) for name in unbound)}, which undo_args does not bind",
            )


def _parameters(schema: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The argument names an input schema lists, or None when it lists none and so allows any."""
    properties = _properties(schema)
    return tuple(properties) if properties else None


def _properties(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    properties = schema.get("properties")
    return properties if isinstance(properties, Mapping) else None


def _types(declared: object) -> list[str] | None:
    """The JSON types a schema's ``type`` allows, or None when it does not say."""
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list) and declared and all(isinstance(kind, str) for kind in declared):
        return declared
    return None


def _fits(gives: str, wanted: list[str]) -> bool:
    """Whether a value of JSON type `gives` may be of one of the types `wanted`."""
    numbers = {"integer", "number"}
    return gives in wanted or (gives in numbers and bool(numbers & set(wanted)))


def _a(kind: str) -> str:
    """A JSON type with its article: 'an array', 'a string'."""
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


# -- loading ----------------------------------------------------------------------------------------

_UPSTREAM_KEYS: Final = frozenset({"command", "args", "env", "url"})
_TOOL_KEYS: Final = frozenset(
    {"kind", "undo", "undo_args", "idempotency_arg", "allow_in_saga", "secret", "upstream", "guess"}
)
_TOP_KEYS: Final = frozenset({"upstreams", "tools"})
_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]+")
_REFERENCE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\$|\$")


def is_policy_name(name: str) -> bool:
    """Whether a policy can name an upstream or a tool `name`: letters, digits, '_', '-' and '.'."""
    return _NAME.fullmatch(name) is not None


def load_policy(path: str | Path, environ: Mapping[str, str] | None = None) -> Policy:
    """Read and check a policy file; `PolicyError` (file, line, key) for anything wrong in it.

    `environ` (the process's environment by default) fills the ``${NAME}`` of upstreams' `env`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(source, None, "", f"cannot read the policy: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PolicyError(source, None, "", "the policy is not UTF-8 text") from None
    return parse_policy(text, source, environ)


def parse_policy(text: str, source: str = "<policy>", environ: Mapping[str, str] | None = None) -> Policy:
    """A policy from its TOML `text`; `source` names it in errors, `environ` fills ``${NAME}``
    in upstreams' `env` (the process's environment by default)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends "(at line N, column M)": reworded so the line leads, as in every error.
        match = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        line = int(match.group(1)) if match else None
        message = str(exc)[: match.start()].strip() if match else str(exc)
        raise PolicyError(source, line, "", f"not valid TOML: {message}") from None
    checker = _Checker(source, text, os.environ if environ is None else environ)
    checker.keys(data, (), _TOP_KEYS)
    upstreams = tuple(
        checker.upstream(name, entry) for name, entry in checker.table(data, ("upstreams",)).items()
    )
    if not upstreams:
        raise PolicyError(source, None, "upstreams", "name at least one upstream server ([upstreams.NAME])")
    names = {upstream.name for upstream in upstreams}
    tools = tuple(
        checker.tool(name, entry, names)
        for name, entry in checker.table(data, ("tools",), required=False).items()
    )
    return Policy(source, upstreams, tools, text)


@dataclass(frozen=True, slots=True)
class _Checker:
    """Reads the parsed TOML, each value checked, each error at its key's line."""

    source: str
    text: str
    environ: Mapping[str, str] = field(repr=False)

    def fail(self, path: tuple[str, ...], problem: str) -> PolicyError:
        return PolicyError(self.source, key_line(self.text, path), ".".join(path), problem)

    def keys(self, table: Mapping[str, Any], path: tuple[str, ...], allowed: Iterable[str]) -> None:
        allowed = sorted(allowed)
        for key in table:
            if key not in allowed:
                raise self.fail((*path, key), f"unknown key (known here: {', '.join(allowed)})")

    def table(
        self, data: Mapping[str, Any], path: tuple[str, ...], *, required: bool = True
    ) -> dict[str, Any]:
        value = data.get(path[-1])
        if value is None:
            if required:
                raise PolicyError(
                    self.source, None, ".".join(path), f"missing: add a [{path[-1]}.NAME] table"
                )
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a table, got {_kind(value)}")
        for name, entry in value.items():
            if not _NAME.fullmatch(name):
                raise self.fail((*path, name), "a name is letters, digits, '_', '-' and '.'")
            if not isinstance(entry, dict):
                raise self.fail((*path, name), f"expected a table, got {_kind(entry)}")
        return value

    def upstream(self, name: str, entry: dict[str, Any]) -> UpstreamSpec:
        path = ("upstreams", name)
        self.keys(entry, path, _UPSTREAM_KEYS)
        command, url = entry.get("command"), entry.get("url")
        if (command is None) == (url is None):
            raise self.fail(path, "give either command (a stdio server) or url (streamable HTTP), not both")
        if url is not None:
            if not isinstance(url, str) or not re.match(r"https?://", url):
                raise self.fail((*path, "url"), "expected an http:// or https:// URL")
            for key in ("args", "env"):
                if key in entry:
                    raise self.fail((*path, key), "only a command takes args and env")
            return UpstreamSpec(name, url=url)
        if not isinstance(command, str) or not command:
            raise self.fail((*path, "command"), "expected the command to run, as a string")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise self.fail((*path, "args"), "expected a list of strings")
        env = entry.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
            raise self.fail((*path, "env"), "expected a table of strings")
        filled = {key: self.expand((*path, "env", key), value) for key, value in env.items()}
        return UpstreamSpec(name, command=command, args=tuple(args), env=tuple(sorted(filled.items())))

    def expand(self, path: tuple[str, ...], value: str) -> str:
        """`value` with each ``${NAME}`` replaced by the variable from `environ`, and ``$$`` by '$'."""

        def replace(found: re.Match[str]) -> str:
            name = found.group(1)
            if name is not None:
                if name not in self.environ:
                    raise self.fail(path, f"${{{name}}}: {name} is not set in the gateway's environment")
                return self.environ[name]
            if found.group() == "$$":
                return "$"
            raise self.fail(
                path, "a '$' starts ${NAME} (a variable of the gateway's environment); write $$ for '$'"
            )

        return _REFERENCE.sub(replace, value)

    def tool(self, name: str, entry: dict[str, Any], upstreams: set[str]) -> ToolPolicy:
        path = ("tools", name)
        self.keys(entry, path, _TOOL_KEYS)
        if name in SAGA_TOOLS:
            raise self.fail(
                path, f"{name!r} is the gateway's own saga tool; an upstream tool cannot take its name"
            )
        raw_kind = entry.get("kind")
        choices = ", ".join(repr(kind.value) for kind in ToolKind)
        if raw_kind is None:
            raise self.fail(path, f"missing kind ({choices})")
        try:
            kind = ToolKind(raw_kind)
        except ValueError:
            raise self.fail((*path, "kind"), f"expected one of {choices}, got {raw_kind!r}") from None
        undo = entry.get("undo")
        raw_args = entry.get("undo_args", {})
        if kind is ToolKind.COMPENSABLE:
            if undo is None:
                raise self.fail(path, 'a compensable tool needs undo = "<the tool that undoes it>"')
            if not isinstance(undo, str) or not undo:
                raise self.fail((*path, "undo"), "expected a tool name")
        else:
            for key in ("undo", "undo_args", "idempotency_arg"):
                if key in entry:
                    raise self.fail(
                        (*path, key), f"only a compensable tool has {key}, not a {kind.value} one"
                    )
        if not isinstance(raw_args, dict):
            raise self.fail((*path, "undo_args"), 'expected a table: argument = "/result/pointer"')
        bindings = tuple(self.binding((*path, "undo_args", arg), text) for arg, text in raw_args.items())
        allow = entry.get("allow_in_saga", False)
        if not isinstance(allow, bool):
            raise self.fail((*path, "allow_in_saga"), "expected true or false")
        if allow and kind is not ToolKind.IRREVERSIBLE:
            raise self.fail((*path, "allow_in_saga"), "only an irreversible tool is refused in a saga")
        return ToolPolicy(
            name,
            kind,
            undo=undo,
            undo_args=bindings,
            idempotency_arg=self.optional_name(entry, (*path, "idempotency_arg")),
            allow_in_saga=allow,
            secret=self.names(entry, (*path, "secret")),
            upstream=self.upstream_name(entry, path, upstreams),
            guessed=self.flag(entry, (*path, "guess")),
        )

    def binding(self, path: tuple[str, ...], value: object) -> tuple[str, UndoBinding]:
        """One undo argument's binding, by its name (the last key of `path`)."""
        try:
            binding = parse_binding(value)
        except BindingError as exc:
            form = "pointer" if isinstance(value, str) else "binding"
            raise self.fail(path, f"bad {form}: {exc}") from None
        if "before" in binding.roots:
            # The seam for `before` reads: until a tool can name one, nothing fills /before.
            raise self.fail(path, f"{binding.text!r} reads before, but {path[1]!r} has no before read")
        return path[-1], binding

    def optional_name(self, entry: dict[str, Any], path: tuple[str, ...]) -> str | None:
        value = entry.get(path[-1])
        if value is not None and (not isinstance(value, str) or not value):
            raise self.fail(path, "expected an argument name")
        return value

    def names(self, entry: dict[str, Any], path: tuple[str, ...]) -> tuple[str, ...]:
        value = entry.get(path[-1], [])
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise self.fail(path, "expected a list of argument names")
        return tuple(value)

    def flag(self, entry: dict[str, Any], path: tuple[str, ...]) -> bool:
        value = entry.get(path[-1], False)
        if not isinstance(value, bool):
            raise self.fail(path, "expected true or false")
        return value

    def upstream_name(self, entry: dict[str, Any], path: tuple[str, ...], upstreams: set[str]) -> str | None:
        value = entry.get("upstream")
        if value is not None and value not in upstreams:
            known = ", ".join(sorted(upstreams))
            raise self.fail((*path, "upstream"), f"no upstream {value!r} (upstreams: {known})")
        return value


def _kind(value: object) -> str:
    return {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "an array"}.get(
        type(value), type(value).__name__
    )


# -- where a key is written -------------------------------------------------------------------------

_HEADER: Final = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY: Final = re.compile(
    r"^\s*((?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)


def _dotted(text: str) -> tuple[str, ...]:
    """``a."b.c".d`` -> ("a", "b.c", "d")."""
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_\-]+)", text)
    return tuple(next(part for part in groups if part) if any(groups) else "" for groups in parts)


def key_line(text: str, path: tuple[str, ...]) -> int | None:
    """The 1-based line where `path` (or, failing that, the longest prefix of it) is written in `text`.

    Reads table headers (``[tools.book_flight]``) and key lines (``undo = ...``, dotted keys too); a
    key inside an inline table (``undo_args = { booking_id = ... }``) is found on its table's line
    when the key's own name appears there. Multi-line strings and arrays are not followed: a line
    inside one that looks like a key could be taken for it, which costs only a wrong line number.
    """
    best: tuple[int, int] | None = None  # (length of the prefix matched, line)
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _dotted(header.group(1))
            found = table
        else:
            key = _KEY.match(line)
            if not key:
                continue
            found = (*table, *_dotted(key.group(1)))
            rest = path[len(found) :]
            # A key of an inline table on this line: counted as matched when its name is there.
            if (
                path[: len(found)] == found
                and rest
                and re.search(rf"[{{,]\s*[\"']?{re.escape(rest[0])}[\"']?\s*=", line)
            ):
                found = (*found, rest[0])
        if path[: len(found)] == found and (best is None or len(found) > best[0]):
            best = (len(found), number)
            if len(found) == len(path):
                return number
    return None if best is None or best[0] == 0 else best[1]
