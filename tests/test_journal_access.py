"""A journal this user may not read is named unreadable, not unwritable.

SQLite says "unable to open database file" alike for a file it may not read and one it may not
write; the message must say which, or the person fixes the wrong permission. Permission bits do not
stop root, so as root the reading happens in a forked child that has dropped to an unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from aegis_nb.saga.durable import JournalError, JournalUnavailable, read_runs
from tests.test_journal_sqlite import make_journal

NOBODY = 65534


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder any user may enter and write (pytest's own tmp_path is private to its user)."""
    folder = Path(tempfile.mkdtemp(prefix="aegis-access-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def outcome(read: Callable[[], object]) -> str:
    """What `read()` returned, or the type and text of the `JournalError` it raised."""
    try:
        return f"returned {read()!r}"
    except JournalError as exc:
        return f"{type(exc).__name__}: {exc}"


def as_unprivileged_user(read: Callable[[], object]) -> str:
    """The `outcome` of `read()` for a user without root's powers over files."""
    if os.geteuid() != 0:
        return outcome(read)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (runs in the child, which leaves through os._exit)
        status = 1
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(writer, outcome(read).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        report = pipe.read().decode()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return report


def test_a_journal_this_user_may_not_read_is_reported_as_not_readable(shared_folder: Path) -> None:
    path = shared_folder / "j.db"
    anyio.run(make_journal, path)
    path.chmod(0)
    assert as_unprivileged_user(lambda: read_runs(path)) == (
        f"{JournalUnavailable.__name__}: journal {str(path)!r}: cannot open the journal: "
        "not readable here, permission denied (unable to open database file)"
    )


def test_a_journal_this_user_may_read_is_listed_even_where_it_may_not_write(shared_folder: Path) -> None:
    path = shared_folder / "j.db"
    anyio.run(make_journal, path, 2)
    path.chmod(0o444)
    shared_folder.chmod(0o555)  # nor create anything beside it
    try:
        assert as_unprivileged_user(lambda: [run.status.value for run in read_runs(path)]) == (
            "returned ['committed', 'committed']"
        )
    finally:
        shared_folder.chmod(0o777)
