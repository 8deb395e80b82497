"""The SDK sets up the root logger when a server is *built*; `AegisMCP` does it when one *serves*.

And as plain lines (`serving_logs`): the SDK's own set-up picks rich's handler whenever `rich` is
installed (another package may bring it), which wraps records to the terminal's width and pads
them, so a served process's log would change shape with the packages beside it.

`MCPServer.__init__` calls `logging.basicConfig` at the server's log level (INFO by default). In a
notebook or a test, where servers are built to be called in-process, that turns on every library's
INFO logs (each HTTP request an httpx client makes, say) for the whole process, in every cell. A
process that serves (`AegisMCP.run`) belongs to its server, and gets the SDK's set-up there.

A served process logs what others wrote: an upstream's tool names and errors, and the URLs its
HTTP client calls (httpx logs each request's URL, credentials included). So every record is one
line, its control characters escaped (`printable`), and every URL in it shown without user info,
query values or fragment (`redact_urls`); a traceback keeps its lines, each escaped the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aegis_nb.kernel.printable import printable
from aegis_nb.server.session import redact_urls


class SafeLines(logging.Formatter):
    """One escaped line per record, URLs without their credentials; tracebacks line by line."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(redact_urls(super().formatMessage(record)))

    def formatException(self, ei: Any) -> str:
        return _lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _lines(super().formatStack(stack_info))


def _lines(text: str) -> str:
    return "\n".join(printable(redact_urls(line)) for line in text.split("\n"))


def serving_logs(level: str) -> None:
    """Log to stderr at `level` as the SDK does, one plain line per record whatever is installed,
    each made safe to show (`SafeLines`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(SafeLines("%(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


@contextmanager
def root_logger_kept() -> Iterator[None]:
    """Put the root logger's level and handlers back as they were, whatever the block set up."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
            handler.close()  # a stream handler's close flushes; it leaves stderr open
        root.setLevel(level)
