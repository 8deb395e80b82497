"""Undo-argument bindings: how an undo's arguments are taken from ``{arguments, result, before}`` of a call.

Three forms, one per need (in a gateway policy's ``undo_args``, TOML)::

    booking_id = "/result/booking_id"                        # a value as it is: a JSON Pointer
    entityNames = { jmespath = "result.entities[*].name" }   # a value built: JMESPath
    sha = { regex = "with hash (?P<sha>[0-9a-f]+)", from = "/result/text" }   # words out of a text

- A **JSON Pointer** (RFC 6901) names one value: ``/arguments/x`` what the call was sent, ``/result/x``
  what it answered, ``/before/x`` what the ``before`` read answered. SEP-3172's runtime expressions
  are read as pointers too: ``$response.body#/id`` is ``/result/id``, ``$request.body#/x`` is
  ``/arguments/x``.
- A **JMESPath** expression (jmespath.org) over the object ``{"arguments", "result", "before"}``
  maps over lists (``result.entities[*].name``), renames keys and builds objects
  (``result.results[*].{entityName: entityName, observations: addedObservations}``). It must start
  from one of the three names (or ``@``, the whole object); its functions are JMESPath's own.
- A **regex** with named groups, searched in the text a pointer names (``from``, by default
  ``/result/text``: where a tool that answers in plain words puts them, see
  `aegis_nb.server.session.unwrap_result`). One named group gives its text; several give an object
  of them (``{"sha": ..., "branch": ...}``).

A binding that finds nothing on a given call is `UNRESOLVED`, and the undo must then not be called
(SEP-3172: never with a value missing): a pointer to a key or index that is not there, a JMESPath
expression that gives ``null`` or fails on the call's values, or that reads ``result`` (``before``)
when the call left none, a regex that does not match or whose named group took no part. The step
is then left orphaned instead.

Here in the server layer so that `AegisMCP`'s compensable tools and the gateway's policy share one
reading of a binding (aegis_nb.gateway sits above the server and may import it).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import jmespath  # type: ignore[import-untyped]  # no stubs
from jmespath import exceptions as jmespath_errors
from jmespath.functions import Functions  # type: ignore[import-untyped]

from aegis_nb.kernel.values import thaw
from aegis_nb.server.validation import ArgumentChecker

ROOTS: Final = ("arguments", "result", "before")
"""What a binding reads: the call's arguments, its result, and what its ``before`` read answered."""

_EXPRESSIONS: Final = {"$response.body#": "result", "$request.body#": "arguments"}
_DEFAULT_TEXT: Final = "/result/text"
_FORMS: Final = (
    'a JSON Pointer string (\'/result/id\'), { jmespath = "..." } or { regex = "...", from = "..." }'
)


class BindingError(ValueError):
    """A binding that cannot be read (refused at load): the reason, naming the text as written."""


class Unresolved(enum.Enum):
    """A binding that found nothing on this call; a one-member enum, so the sentinel has a type."""

    UNRESOLVED = enum.auto()


UNRESOLVED: Final = Unresolved.UNRESOLVED


@dataclass(frozen=True, slots=True)
class Binding:
    """One parsed pointer: the text as written, and its reference tokens (the first is the root)."""

    text: str
    tokens: tuple[str, ...]

    @classmethod
    def parse(cls, text: object) -> Binding:
        """`text` as a pointer (``/result/id``) or an SEP-3172 expression; `BindingError` says why not."""
        if not isinstance(text, str):
            raise BindingError(
                f"expected a JSON Pointer string such as '/result/id', got {type(text).__name__}"
            )
        pointer = text
        for prefix, root in _EXPRESSIONS.items():
            if text.startswith(prefix):
                rest = text.removeprefix(prefix)
                if rest and not rest.startswith("/"):
                    raise BindingError(f"{text!r}: after {prefix!r} comes a JSON Pointer starting with '/'")
                pointer = f"/{root}{rest}"
                break
        else:
            if text.startswith("$"):
                known = " or ".join(repr(f"{p}/...") for p in _EXPRESSIONS)
                raise BindingError(f"{text!r}: the expressions understood are {known}")
        if not pointer.startswith("/"):
            raise BindingError(f"{text!r} is not a JSON Pointer: it must start with '/' (e.g. '/result/id')")
        raw = pointer[1:].split("/")
        tokens = tuple(_unescape(token, text) for token in raw)
        if tokens[0] not in ROOTS:
            raise BindingError(f"{text!r} must point into /arguments, /result or /before, not /{tokens[0]}")
        return cls(text, tokens)

    @property
    def roots(self) -> frozenset[str]:
        """Which of `ROOTS` the pointer reads."""
        return frozenset(self.tokens[:1])

    @property
    def argument(self) -> str | None:
        """The call's argument a ``/arguments/<name>...`` pointer reads, else None."""
        return self.tokens[1] if self.tokens[0] == "arguments" and len(self.tokens) > 1 else None

    def resolve(
        self, arguments: Mapping[str, Any], result: Mapping[str, Any] | None, before: Any = None
    ) -> Any:
        """The value the pointer names on this call, or `UNRESOLVED` (a result that never came, too)."""
        root: Any = {"arguments": arguments, "result": result, "before": before}[self.tokens[0]]
        if root is None:
            return UNRESOLVED
        node = root
        for token in self.tokens[1:]:
            if isinstance(node, Mapping):
                if token not in node:
                    return UNRESOLVED
                node = node[token]
            elif isinstance(node, Sequence) and not isinstance(node, str):
                # RFC 6901: an index is digits without a leading zero; '-' (past the end) names nothing.
                if not token.isdigit() or (token != "0" and token.startswith("0")) or int(token) >= len(node):
                    return UNRESOLVED
                node = node[int(token)]
            else:
                return UNRESOLVED
        return node


@dataclass(frozen=True, slots=True)
class JmesPathBinding:
    """A JMESPath expression over ``{arguments, result, before}``; `text` is the expression."""

    text: str
    roots: frozenset[str]
    """Which of `ROOTS` it reads (from its syntax tree); ``@`` for the whole object."""
    compiled: Any = field(compare=False, repr=False)

    @classmethod
    def parse(cls, text: object) -> JmesPathBinding:
        """`text` compiled; `BindingError` for bad syntax, an unknown function or name at the top."""
        if not isinstance(text, str):
            raise BindingError(f"expected a JMESPath expression as a string, got {type(text).__name__}")
        try:
            compiled = jmespath.compile(text)
        except jmespath_errors.JMESPathError as exc:
            raise BindingError(f"{text!r} is not a JMESPath expression: {_parse_problem(exc)}") from None
        tree = compiled.parsed
        unknown = sorted(_functions(tree) - _FUNCTIONS)
        if unknown:
            raise BindingError(f"{text!r}: JMESPath has no function {unknown[0]}()")
        roots = _roots(tree)
        stray = sorted(roots - {*ROOTS, "@"})
        if stray:
            raise BindingError(
                f"{text!r} reads {stray[0]!r} at the top: an expression starts from arguments, result "
                f"or before (e.g. 'result.{stray[0]}')"
            )
        return cls(text, frozenset(roots), compiled)

    @property
    def value_type(self) -> str | None:
        """The JSON type every value of the expression has, when its form says so; else None."""
        return _type_of(self.compiled.parsed)

    def resolve(
        self, arguments: Mapping[str, Any], result: Mapping[str, Any] | None, before: Any = None
    ) -> Any:
        """The expression's value on this call, or `UNRESOLVED` (null, an error, a root not there)."""
        if ("result" in self.roots and result is None) or ("before" in self.roots and before is None):
            return UNRESOLVED
        # Thawed: JMESPath walks only dicts and lists, and metadata keeps frozen mappings and tuples.
        # Only what the expression reads is thawed (a result may be large).
        given = {"arguments": arguments, "result": result, "before": before}
        document = {
            name: thaw(value) if "@" in self.roots or name in self.roots else None
            for name, value in given.items()
        }
        try:
            value = self.compiled.search(document)
        except jmespath_errors.JMESPathError:  # a function given the wrong type on this call's values
            return UNRESOLVED
        return UNRESOLVED if value is None else value


@dataclass(frozen=True, slots=True)
class RegexBinding:
    """Named groups of `pattern` searched in the text `source` names."""

    pattern: re.Pattern[str]
    source: Binding

    @classmethod
    def parse(cls, pattern: object, source: object = _DEFAULT_TEXT) -> RegexBinding:
        """`pattern` compiled (it must have a named group) and `source` read as a pointer."""
        if not isinstance(pattern, str):
            raise BindingError(f"expected a regular expression as a string, got {type(pattern).__name__}")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise BindingError(f"{pattern!r} is not a regular expression: {exc}") from None
        if not compiled.groupindex:
            raise BindingError(f"{pattern!r} names no group: write (?P<name>...) around what to take")
        try:
            text = Binding.parse(source)
        except BindingError as exc:
            raise BindingError(f"from: {exc}") from None
        return cls(compiled, text)

    @property
    def text(self) -> str:
        """How messages name it: the pattern as written."""
        return self.pattern.pattern

    @property
    def roots(self) -> frozenset[str]:
        return self.source.roots

    @property
    def value_type(self) -> str:
        """A string for one named group, an object of strings for several."""
        return "string" if len(self.pattern.groupindex) == 1 else "object"

    def resolve(
        self, arguments: Mapping[str, Any], result: Mapping[str, Any] | None, before: Any = None
    ) -> Any:
        """The named group's text (or an object of them), or `UNRESOLVED` (no text, no match)."""
        text = self.source.resolve(arguments, result, before)
        if not isinstance(text, str):
            return UNRESOLVED
        found = self.pattern.search(text)
        if found is None:
            return UNRESOLVED
        groups = found.groupdict()
        if any(value is None for value in groups.values()):  # an alternative that did not take part
            return UNRESOLVED
        return next(iter(groups.values())) if len(groups) == 1 else groups


UndoBinding: TypeAlias = Binding | JmesPathBinding | RegexBinding
"""Any of the three forms."""


def parse_binding(value: object) -> UndoBinding:
    """A binding as a policy writes it: a pointer string, ``{jmespath = ...}``, ``{regex, from}``."""
    if isinstance(value, str):
        return Binding.parse(value)
    if not isinstance(value, Mapping):
        raise BindingError(f"expected {_FORMS}, got {type(value).__name__}")
    keys = set(value)
    if keys == {"jmespath"}:
        return JmesPathBinding.parse(value["jmespath"])
    if "regex" in keys and keys <= {"regex", "from"}:
        return RegexBinding.parse(value["regex"], value.get("from", _DEFAULT_TEXT))
    listed = ", ".join(sorted(map(str, keys))) or "nothing"
    raise BindingError(f"a table here holds jmespath, or regex with an optional from (it holds {listed})")


def bind(
    bindings: Mapping[str, UndoBinding],
    arguments: Mapping[str, Any],
    result: Mapping[str, Any] | None,
    before: Any = None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The undo's arguments, and the names of those whose binding did not resolve (then: do not call)."""
    bound: dict[str, Any] = {}
    missing: list[str] = []
    for name, binding in bindings.items():
        value = binding.resolve(arguments, result, before)
        if value is UNRESOLVED:
            missing.append(name)
        else:
            bound[name] = value
    return bound, tuple(missing)


def value_type(binding: UndoBinding, arguments: Mapping[str, Any] | None = None) -> str | None:
    """The JSON type a binding's value always has, when known without a call; else None.

    `arguments` is the called tool's input schema's ``properties``: a pointer to one of its
    arguments has the type that argument is published with.
    """
    if isinstance(binding, Binding):
        name = binding.argument
        if name is None or len(binding.tokens) != 2 or arguments is None:
            return None
        schema = arguments.get(name)
        declared = schema.get("type") if isinstance(schema, Mapping) else None
        return declared if isinstance(declared, str) else None
    return binding.value_type


def _unescape(token: str, text: str) -> str:
    """RFC 6901: ``~1`` is '/', ``~0`` is '~', and any other '~' is an error."""
    rest = token.replace("~0", "").replace("~1", "")
    if "~" in rest:
        raise BindingError(f"{text!r}: '~' in a JSON Pointer must be followed by 0 or 1")
    return token.replace("~1", "/").replace("~0", "~")


# -- reading a JMESPath syntax tree ------------------------------------------------------------------

_FUNCTIONS: Final = frozenset(Functions.FUNCTION_TABLE)

# Nodes whose first child is evaluated on the node's input, the others on what that child gives.
_CHAINS: Final = frozenset(
    {"subexpression", "index_expression", "projection", "value_projection", "filter_projection",
     "flatten", "pipe"}
)  # fmt: skip
# Nodes with no child evaluated on the input.
_LEAVES: Final = frozenset({"literal", "index", "slice", "expref", "raw_string"})

_TYPES: Final = {
    "multi_select_dict": "object",
    "multi_select_list": "array",
    "projection": "array",
    "value_projection": "array",
    "filter_projection": "array",
    "flatten": "array",
    "comparator": "boolean",
    "not_expression": "boolean",
}
_FUNCTION_TYPES: Final = {
    "to_string": "string",
    "join": "string",
    "type": "string",
    "length": "integer",
    "keys": "array",
    "values": "array",
    "sort": "array",
    "sort_by": "array",
    "to_array": "array",
    "map": "array",
    "merge": "object",
    "contains": "boolean",
    "starts_with": "boolean",
    "ends_with": "boolean",
}
_LITERAL_TYPES: Final = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
}


def _roots(node: Mapping[str, Any]) -> set[str]:
    """The names read from the expression's input (``@`` for the input itself)."""
    kind = node["type"]
    children: list[Mapping[str, Any]] = node.get("children", [])
    if kind == "field":
        return {node["value"]}
    if kind in ("current", "identity"):
        return {"@"}
    if kind in _LEAVES:
        return set()
    if kind in _CHAINS:
        return _roots(children[0]) if children else set()
    found: set[str] = set()
    for child in children:  # multi-selects, functions, comparisons, and/or/not: all on the input
        found |= _roots(child)
    return found


def _functions(node: Mapping[str, Any]) -> set[str]:
    found = {node["value"]} if node["type"] == "function_expression" else set()
    for child in node.get("children", []):
        found |= _functions(child)
    return found


def _type_of(node: Mapping[str, Any]) -> str | None:
    kind = node["type"]
    if kind == "literal":
        return _LITERAL_TYPES.get(type(node["value"]))
    if kind == "function_expression":
        return _FUNCTION_TYPES.get(node["value"])
    if kind in ("subexpression", "pipe"):  # the value is the last child's
        return _type_of(node["children"][-1])
    return _TYPES.get(kind)


def _parse_problem(exc: Exception) -> str:
    """JMESPath's parse error in one line (its own text spans three, with a caret under the place)."""
    if isinstance(exc, jmespath_errors.EmptyExpressionError):
        return "the expression is empty"
    if isinstance(exc, jmespath_errors.IncompleteExpressionError):
        return "the expression is incomplete"
    if isinstance(exc, jmespath_errors.LexerError):
        return f"{exc.message} at column {exc.lexer_position + 1}"
    if isinstance(exc, jmespath_errors.ArityError):
        return str(exc)
    if isinstance(exc, jmespath_errors.ParseError):
        return f"{exc.msg} at column {exc.lex_position + 1}"
    return str(exc).splitlines()[0]


def unfit_arguments(undo: str, schema: Mapping[str, Any], bound: Mapping[str, Any]) -> str | None:
    """Why the `bound` arguments do not fit the undo tool's input `schema` (then: do not call), or None.

    Made before the call, as a binding can resolve on one call to a value its tool refuses (a
    JMESPath projection giving an empty list where the schema asks for one item, a null inside an
    object built). The words name the argument and the rule, never the value (it may be secret).
    """
    problems = ArgumentChecker(schema).problems(thaw(bound))
    if not problems:
        return None
    return f"{undo} was not called: the bound arguments do not fit its input schema ({'; '.join(problems)})"
