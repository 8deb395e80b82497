"""A journal this user may not read is named unreadable, not unwritable.

SQLite says "unable to open database file" alike for a file it may not read and one it may not
write; the message must say which, or the person fixes the wrong permission. Permission bits do not
stop root, so as root the reading happens in a child process that drops to an unprivileged user once
Python has started (the interpreter lives where only root may look). A fresh process rather than a
fork: pytest's process has threads, and a forked child may inherit a lock one of them held.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aegis_nb.saga.durable import JournalError, JournalUnavailable, read_runs
from tests.servers.launch import python_child
from tests.test_journal_sqlite import make_journal

NOBODY = 65534

READER = f"""
import os, sys
from tests.test_journal_access import outcome
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid({NOBODY})
    os.setuid({NOBODY})
print(outcome(sys.argv[1]), end="")
"""


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder any user may enter and write, sticky as /tmp is (pytest's own tmp_path is private to
    its user; a journal in a folder others may write into without the sticky bit is refused)."""
    folder = Path(tempfile.mkdtemp(prefix="aegis-access-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def outcome(path: str) -> str:
    """The statuses of the journal's runs, or the type and text of the `JournalError` reading raised."""
    try:
        return f"returned {[run.status.value for run in read_runs(path)]!r}"
    except JournalError as exc:
        return f"{type(exc).__name__}: {exc}"


def as_unprivileged_user(path: Path) -> str:
    """The `outcome` of reading `path` for a user without root's powers over files."""
    child = python_child("-c", READER, str(path))
    assert child.stderr == ""
    return child.stdout


def test_a_journal_this_user_may_not_read_is_reported_as_not_readable(shared_folder: Path) -> None:
    path = shared_folder / "j.db"
    anyio.run(make_journal, path)
    path.chmod(0)
    assert as_unprivileged_user(path) == (
        f"{JournalUnavailable.__name__}: journal {str(path)!r}: cannot open the journal: "
        "not readable here, permission denied (unable to open database file)"
    )


def test_a_journal_this_user_may_read_is_listed_even_where_it_may_not_write(shared_folder: Path) -> None:
    path = shared_folder / "j.db"
    anyio.run(make_journal, path, 2)
    path.chmod(0o444)
    shared_folder.chmod(0o555)  # nor create anything beside it
    try:
        assert as_unprivileged_user(path) == "returned ['committed', 'committed']"
    finally:
        shared_folder.chmod(0o777)
