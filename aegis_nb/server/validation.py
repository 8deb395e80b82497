"""Arguments checked against a tool's published input schema, before anything runs.

No client checks input schemas, and pydantic cannot enforce what a schema only publishes (a
parameter typed loosely so that its error never repeats a card number, with a ``pattern``): a
workflow or compensable call is checked here first, so a bad argument is refused before any step
runs. The words name the argument and the rule it broke, never the value sent (it may be secret).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_RULES: dict[str, str] = {
    "pattern": "must match the pattern {}",
    "type": "must be of type {}",
    "enum": "must be one of {}",
    "const": "must be {}",
    "minLength": "must be at least {} characters long",
    "maxLength": "must be at most {} characters long",
    "minimum": "must be >= {}",
    "maximum": "must be <= {}",
    "exclusiveMinimum": "must be > {}",
    "exclusiveMaximum": "must be < {}",
    "minItems": "must have at least {} items",
    "maxItems": "must have at most {} items",
    "format": "must be in the format {}",
}


class ArgumentChecker:
    """Checks one tool's arguments against its input schema (the validator is built once)."""

    __slots__ = ("_validator",)

    def __init__(self, schema: Mapping[str, Any]) -> None:
        # Imported when the first workflow is registered, not with the server package: the first
        # import of jsonschema takes about a second where Jupyter is installed, and `connect` loads
        # it off the event loop (see aegis_nb.server.session).
        import jsonschema  # type: ignore[import-untyped]  # no stubs; the SDK depends on it

        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        self._validator = cls(schema)

    def problems(self, arguments: Mapping[str, Any]) -> tuple[str, ...]:
        """What is wrong with `arguments`, one line per broken rule, in schema order; () if nothing."""
        errors = sorted(self._validator.iter_errors(dict(arguments)), key=_where)
        return tuple(_words(error) for error in errors)


def _where(error: Any) -> tuple[str, ...]:
    return tuple(str(part) for part in error.absolute_path)


def _words(error: Any) -> str:
    """One broken rule, naming the argument but never its value."""
    path = "/".join(_where(error))
    rule = _RULES.get(error.validator)
    if error.validator == "required":
        # The schema's own words name only the missing property, which the schema published.
        return f"{path + ': ' if path else ''}{error.message}"
    if error.validator == "additionalProperties":
        return f"{path + ': ' if path else ''}{error.message}"
    text = rule.format(error.validator_value) if rule else f"fails the schema's {error.validator!r} rule"
    return f"{path or 'arguments'}: {text}"
