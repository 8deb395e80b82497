"""The SDK sets up the root logger when a server is *built*; `AegisMCP` does it when one *serves*.

And as plain lines (`serving_logs`): the SDK's own set-up picks rich's handler whenever `rich` is
installed (another package may bring it), which wraps records to the terminal's width and pads
them, so a served process's log would change shape with the packages beside it.

`MCPServer.__init__` calls `logging.basicConfig` at the server's log level (INFO by default). In a
notebook or a test, where servers are built to be called in-process, that turns on every library's
INFO logs (each HTTP request an httpx client makes, say) for the whole process, in every cell. A
process that serves (`AegisMCP.run`) belongs to its server, and gets the SDK's set-up there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


def serving_logs(level: str) -> None:
    """Log to stderr at `level` as the SDK does, one plain line per record whatever is installed."""
    logging.basicConfig(level=level, format="%(message)s", handlers=[logging.StreamHandler()])


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
