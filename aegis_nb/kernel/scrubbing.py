"""Secret scrubbing: error text with every secret value replaced by ``***``, and stand-ins for errors
that held one.

A `Secret`'s value may reach an exception's message, its notes or its chain (a tool that echoed it, a
`KeyError` showing it escaped); `scrub` hides it from text, `scrubbed_cause` from a rendered traceback,
`scrubbed_error` from a tool's failure, and `scrub_json` from the data a tool answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from aegis_nb.kernel.errors import ToolError, ToolTimeoutError


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when its ``__str__`` raises: a failure must still be reported."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__}: str() failed>"


class ScrubbedError(Exception):
    """Stands in, as a saga error's ``__cause__``, for an error whose text (or chain) held a secret.

    Its message is the original's type and scrubbed text, its notes the original's scrubbed; it
    keeps the original's traceback (where it was raised: source lines, not values) but not its
    chain, which may hold the secret too.
    """

    def __init__(self, original: BaseException, secrets: Iterable[str]) -> None:
        secrets = tuple(secrets)
        super().__init__(f"{type(original).__name__}: {scrub(exception_text(original), secrets)}")
        self.original_type = type(original).__name__
        self.__traceback__ = original.__traceback__
        self.__suppress_context__ = True
        for note in _notes(original):
            self.add_note(scrub(note, secrets))


def scrubbed_cause(exc: BaseException, secrets: Iterable[str]) -> BaseException:
    """`exc` to chain under a saga error: itself, unless its text or its chain's holds a secret.

    A rendered traceback follows ``__cause__`` and ``__context__``: an unscrubbed original there
    would show a revealed `Secret` the report took care to hide.
    """
    secrets = [secret for secret in secrets if secret]
    if not secrets:
        return exc
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        # A note (`add_note`) prints with the traceback, so it may reveal a secret as well.
        for text in (exception_text(error), *_notes(error)):
            if scrub(text, secrets) != text:
                return ScrubbedError(exc, secrets)
        pending += [error.__cause__, error.__context__]
        if isinstance(error, BaseExceptionGroup):
            pending += error.exceptions
    return exc


def scrubbed_error(exc: Exception, tool: str, secrets: Iterable[str]) -> Exception:
    """`exc` itself, or when its words (or a tool error's structured content) hold a secret value,
    the same failure in words that do not, with no chain back to the original.

    For failures the engine cannot scrub, as it never held the secrets: a tool's own, which its
    step used once and did not keep. A failure other than a tool's error or timeout is said as a
    `ToolError` that does not claim a refusal (the tool may have acted first).
    """
    secrets = [secret for secret in secrets if secret]
    text = exception_text(exc)
    clean = scrub(text, secrets)
    structured = exc.structured if isinstance(exc, ToolError) else None
    clean_structured = None if structured is None else scrub_json(structured, secrets)
    if clean == text and clean_structured == structured:
        return exc
    if isinstance(exc, ToolError):
        return ToolError(exc.tool, scrub(exc.message, secrets), clean_structured, refused=exc.refused)
    if isinstance(exc, ToolTimeoutError):
        timed_out = ToolTimeoutError(exc.step, exc.budget)
        timed_out.args = (clean,)
        return timed_out
    return ToolError(tool, f"{type(exc).__name__}: {clean}", refused=False)


def scrub_json(value: Any, secrets: Iterable[str]) -> Any:
    """JSON data with every secret value replaced by ``***`` in its strings and keys; a number
    whose digits hold one (a card number sent as a number) becomes the string ``***``."""
    secrets = tuple(secret for secret in secrets if secret)
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {scrub(str(key), secrets): scrub_json(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_json(item, secrets) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value if scrub(str(value), secrets) == str(value) else "***"
    return value


def _notes(exc: BaseException) -> tuple[str, ...]:
    """The exception's notes as text (a note that is not a string prints as its ``str``)."""
    notes = getattr(exc, "__notes__", None)
    return tuple(str(note) for note in notes) if isinstance(notes, list) else ()


def scrub(text: str, secrets: Iterable[str]) -> str:
    r"""`text` with every secret value replaced by ``***``, as written and as escaped.

    Error text often shows a value escaped: a `KeyError`'s message is the key's ``repr``, where a
    backslash, quote or newline in a password comes out as ``\\``, ``\'`` or ``\n``, and JSON
    escapes it likewise; a message that already quoted the value with ``!r`` is escaped twice. So
    each secret is also replaced in its ``repr``, ``ascii`` and JSON forms, with either quote
    escaped, and those forms escaped once more.

    Longest first: a secret may contain another (a DSN holding a password), and replacing the
    shorter one first would leave the rest of the longer one in the text.
    """
    forms = {secret for secret in secrets if secret}
    for _ in range(2):  # escaped, then escaped again
        forms |= {escaped for form in forms for escaped in _escaped_forms(form)}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "***")
    return text


def _escaped_forms(text: str) -> tuple[str, ...]:
    quoted = repr(text)[1:-1]
    return (
        quoted,
        # repr picks its quotes from the whole string it writes: inside a longer one, the other
        # quote may be the escaped one.
        quoted.replace("'", "\\'"),
        quoted.replace('"', '\\"'),
        ascii(text)[1:-1],
        json.dumps(text)[1:-1],
        json.dumps(text, ensure_ascii=False)[1:-1],
    )
