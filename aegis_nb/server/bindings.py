"""Undo-argument bindings: a JSON Pointer (RFC 6901) into ``{"arguments": ..., "result": ...}`` of a call.

``booking_id = "/result/booking_id"`` binds the undo tool's ``booking_id`` to what the call returned;
``"/arguments/destination"`` to what it was sent. SEP-3172's runtime expressions are accepted too:
``$response.body#/booking_id`` is ``/result/booking_id`` and ``$request.body#/x`` is ``/arguments/x``.
A pointer that does not resolve on a given call yields `UNRESOLVED`: the undo must then never be
called with a value missing (SEP-3172), and the step is left orphaned instead.

Here in the server layer so that `AegisMCP`'s compensable tools and the gateway's policy share one
reading of a binding (aegis_nb.gateway sits above the server and may import it).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

_ROOTS: Final = ("arguments", "result")
_EXPRESSIONS: Final = {"$response.body#": "result", "$request.body#": "arguments"}


class BindingError(ValueError):
    """A binding that is not a JSON Pointer into the call's arguments or result (refused at load)."""


class Unresolved(enum.Enum):
    """A pointer that found nothing on this call; a one-member enum, so the sentinel has a type."""

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
        if tokens[0] not in _ROOTS:
            raise BindingError(f"{text!r} must point into /arguments or /result, not /{tokens[0]}")
        return cls(text, tokens)

    def resolve(self, arguments: Mapping[str, Any], result: Mapping[str, Any] | None) -> Any:
        """The value the pointer names on this call, or `UNRESOLVED` (a result that never came, too)."""
        root: Any = arguments if self.tokens[0] == "arguments" else result
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


def _unescape(token: str, text: str) -> str:
    """RFC 6901: ``~1`` is '/', ``~0`` is '~', and any other '~' is an error."""
    rest = token.replace("~0", "").replace("~1", "")
    if "~" in rest:
        raise BindingError(f"{text!r}: '~' in a JSON Pointer must be followed by 0 or 1")
    return token.replace("~1", "/").replace("~0", "~")


def bind(
    bindings: Mapping[str, Binding], arguments: Mapping[str, Any], result: Mapping[str, Any] | None
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The undo's arguments, and the names of those whose pointer did not resolve (then: do not call)."""
    bound: dict[str, Any] = {}
    missing: list[str] = []
    for name, binding in bindings.items():
        value = binding.resolve(arguments, result)
        if value is UNRESOLVED:
            missing.append(name)
        else:
            bound[name] = value
    return bound, tuple(missing)
