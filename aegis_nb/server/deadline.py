"""The deadline of one MCP request: the server's default timeout, shortened by the client's `_meta`.

A client states how long it will wait with ``_meta = {"aegis-nb/timeoutMs": 1500}`` on ``tools/call``.
It is a relative budget, not a timestamp, because the client's clock and the server's loop clock are
unrelated; the server turns it into an absolute deadline on its loop clock when the request arrives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import anyio

from aegis_nb.kernel.errors import AegisError, ToolTimeoutError

TIMEOUT_META_KEY: Final = "aegis-nb/timeoutMs"
"""``_meta`` key of a ``tools/call`` request: milliseconds the client will wait (a positive number)."""


class InvalidRequestMeta(AegisError, ValueError):
    """The request's ``_meta`` carries an unusable value; nothing ran."""


def request_deadline(
    meta: Mapping[str, Any] | None, default_timeout: float | None, now: float | None = None
) -> float:
    """Absolute deadline on the loop clock: now + the shorter of `default_timeout` and the client's budget.

    `now` is the loop clock's reading when the request arrived, if the caller already took one.
    """
    if now is None:
        now = anyio.current_time()
    deadline = math.inf if default_timeout is None else now + default_timeout
    raw = None if meta is None else meta.get(TIMEOUT_META_KEY)
    if raw is None:
        return deadline
    # Compared, not converted: JSON ints have no bound, and one past float range must not overflow.
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw < math.inf:
        raise InvalidRequestMeta(
            f"_meta[{TIMEOUT_META_KEY!r}] must be a positive number of milliseconds, got {raw!r}"
        )
    try:
        return min(deadline, now + raw / 1000.0)
    except OverflowError:  # an int past float range: longer than any deadline
        return deadline


def check_timeout(timeout: float | None, what: str) -> float | None:
    """`timeout` if it is None or positive finite seconds; else a `ValueError` naming `what`."""
    if timeout is None:
        return None
    # Compared, not converted: an int past float range must be refused, not overflow.
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
        raise ValueError(f"{what} must be positive seconds or None, got {timeout!r}")
    try:
        return float(timeout)
    except OverflowError:
        raise ValueError(f"{what} must be positive seconds or None, got {timeout!r}") from None


def too_late(name: str, budget: float) -> str:
    """Why a call whose deadline had passed when it arrived was refused (nothing of it ran)."""
    return str(ToolTimeoutError(name, budget, "; it was not run"))
