"""Opening SQLite files as journals: created private, locked for one writer, checked, log prepared.

Also maps SQLite's errors to the journal's error tree. `store` builds `JournalFile` on these.

A journal is trusted only if nobody but this user (or root) could have written it: recovery acts on
what it says. `check_trusted` refuses, before SQLite opens anything, a journal (or its ``-wal`` or
``-shm`` file) that is group- or world-writable or belongs to another user, and one in a folder
others may write into (unless the folder is sticky, as /tmp is, and belongs to this user or root)
or that belongs to another user, since they could replace the file. It also refuses a 0-byte file:
a journal is never empty once created (`create_file` sets it up under another name and links it in
place), so an empty one was truncated or put there, and setting it up anew would hide that.

A journal file is opened by one name (`check_one_name`). SQLite keeps a database's write-ahead log
and its index beside the name it is opened by (``<name>-wal``, ``<name>-shm``), so each name of one
file (a hard link) is another journal to whoever opens it: one misses what the other committed
(recovery then undoes committed runs), and writers through two names damage the file. The writer
lock (`lock_writer`) is taken beside the file symlinks lead to, the file itself once it has one name.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import secrets
import sqlite3
import stat
from pathlib import Path
from typing import Final

from aegis_nb.saga.durable.errors import (
    JournalCorrupt,
    JournalError,
    JournalInUse,
    JournalTooNew,
    JournalTooOld,
    JournalUnavailable,
    JournalUntrusted,
)

APPLICATION_ID = 0x41654A6C
"""SQLite's application id for aegis_nb journals ("AeJl"): tells our files from other databases."""

LEDGER_APPLICATION_ID = 0x41654C67
"""The mock agency's ledger ("AeLg", `aegis_nb.mock.ledger.APPLICATION_ID`, pinned equal by a test):
repeated here because the saga layer does not import mock, and a ledger is the likeliest wrong file."""

FILE_SCHEMA: Final = 2
"""The file's table layout (its ``PRAGMA user_version``); the records inside carry their own
schema version (`codec.SCHEMA_VERSION`). 2: events in the order written, indexed by run."""

_LOG_HEADER, _FRAME_HEADER = 32, 24
"""Sizes of the write-ahead log's header and of each frame's header (SQLite's WAL file format)."""
_LOG_SLACK = 64
"""Frames beyond the checkpoint threshold preallocated for the batch that crosses it."""


def create_file(path: Path, schema: str) -> bool:
    """Create the journal, mode 0600, with `schema` in it, if it does not exist; True if it was created.

    Set up under a name of its own and then linked in place, so a crash never leaves an empty
    file at `path` (which `check_trusted` refuses), and a writer creating it at the same moment
    finds either no file or a whole one. Where the file system has no hard links, the file is
    created in place, and a crash before its schema is written leaves it empty.
    """
    if os.path.lexists(path):  # a dangling symlink too: `check_trusted` says what it is
        return False
    staged = path.with_name(f"{path.name}.new-{secrets.token_hex(4)}")
    try:
        fd = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise JournalUnavailable(path, f"cannot create the file ({exc.strerror})") from exc
    os.close(fd)
    try:
        _set_up(path, staged, schema)
        try:
            os.link(staged, path)
        except FileExistsError:
            return False  # another writer created it meanwhile: theirs is the journal
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise JournalUnavailable(path, f"cannot create the file ({exc.strerror})") from exc
            return _create_in_place(path, schema)
    finally:
        for leftover in (staged, Path(f"{staged}-journal")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
    _sync_folder(path)
    return True


def _create_in_place(path: Path, schema: str) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise JournalUnavailable(path, f"cannot create the file ({exc.strerror})") from exc
    os.close(fd)
    _set_up(path, path, schema)
    return True


def _set_up(path: Path, target: Path, schema: str) -> None:
    """Write `schema` into the new, empty database `target` (named `path` in errors), in one transaction."""
    db = connect(path, f"file:{quote(target)}?mode=rw")
    try:
        run_setup(path, db, lambda: db.executescript(f"BEGIN IMMEDIATE;{schema}COMMIT;"))
    finally:
        db.close()


def _sync_folder(path: Path) -> None:
    """Make the new name durable (best effort: some file systems cannot sync a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_trusted(path: Path, *, created: bool = False) -> None:
    """Refuse a journal others could have written, or an empty file (see the module docstring).

    `created`: this process just created the file, so it holds no one else's words. Only the
    file and its folders are looked at: nothing is opened, created or changed.
    """
    check_regular(path)
    check_one_name(path)
    check_folders(path)
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            info = os.stat(name)
        except FileNotFoundError:
            continue  # no -wal or -shm: no writer has it open
        except OSError as exc:
            raise JournalUnavailable(path, f"cannot look at {name} ({exc.strerror})") from None
        _check_owner_and_mode(path, name, info)
    if not created and os.stat(path).st_size == 0:
        raise JournalCorrupt(
            path,
            "is empty (0 bytes), which a journal never is: it was truncated or put there; "
            "delete it to start a new journal",
        )


def check_one_name(path: Path) -> None:
    """Refuse a journal file that has another name than `path` (symlinks lead to the file: not names).

    The name `create_file` stages a new journal under, linked in place and then removed, is its
    creator's for that moment, not a second name.
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        raise JournalUnavailable(path, f"cannot look at the file ({exc.strerror})") from None
    if info.st_nlink < 2:
        return
    real = path.resolve()
    staged = sum(_same_file(name, info) for name in real.parent.glob(f"{glob.escape(real.name)}.new-*"))
    # Counted after the staging names: one removed meanwhile is not taken for another name.
    try:
        others = os.stat(path).st_nlink - 1 - staged
    except OSError as exc:
        raise JournalUnavailable(path, f"cannot look at the file ({exc.strerror})") from None
    if others > 0:
        raise JournalUnavailable(
            path,
            f"has {others + 1} names (hard links): SQLite keeps a journal's write-ahead log beside"
            " the name it is opened by, so each name would show another journal; remove the other"
            " names and open it by one (a symlink to it is fine)",
        )


def _same_file(name: Path, info: os.stat_result) -> bool:
    try:
        return os.path.samestat(os.stat(name), info)
    except OSError:  # gone meanwhile
        return False


def check_folders(path: Path) -> None:
    """Refuse a journal path in a folder others could write into (see the module docstring); a
    folder that does not exist is left for creating or opening the file to report."""
    for folder in _folders(path):
        _check_folder(path, folder)


def _folders(path: Path) -> tuple[Path, ...]:
    """The folder the path names and, through symlinks, the folder of the file itself."""
    given = Path(os.path.abspath(path)).parent
    real = path.resolve().parent
    return (given,) if real == given else (given, real)


def _check_folder(path: Path, folder: Path) -> None:
    try:
        info = os.stat(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise JournalUnavailable(path, f"cannot look at its folder {folder} ({exc.strerror})") from None
    me = os.geteuid()
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid not in (me, 0):
        raise JournalUntrusted(
            path,
            f"its folder {folder} belongs to uid {info.st_uid}, not to this process (uid {me}) or root: "
            f"its owner could replace the journal; keep the journal in a folder of your own",
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        raise JournalUntrusted(
            path,
            f"its folder {folder} may be written by others (mode {mode:04o}) and is not sticky: they "
            f"could replace the journal; keep it in a folder only you can write (chmod go-w {folder})",
        )


def _check_owner_and_mode(path: Path, name: Path, info: os.stat_result) -> None:
    me = os.geteuid()
    mode = stat.S_IMODE(info.st_mode)
    which = "it" if name == path else str(name)
    # Root's files are trusted (root can write ours anyway); another user's never, even by root:
    # recovering them would act, as this user, on what that user wrote. Run as its owner instead.
    if info.st_uid not in (me, 0):
        raise JournalUntrusted(
            path,
            f"{which} belongs to uid {info.st_uid}, not to this process (uid {me}): a journal is only "
            f"trusted by its own user; run as uid {info.st_uid}, or take it over: chown {me} {name}",
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise JournalUntrusted(
            path,
            f"{which} may be written by others (mode {mode:04o}), who could make recovery run their "
            f"steps; make it private: chmod 600 {name}",
        )


def check_regular(path: Path) -> None:
    """Refuse a path that is missing, or that is a folder or a device rather than a journal file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise JournalUnavailable(path, "no such journal file") from None
    except OSError as exc:
        raise JournalUnavailable(path, f"cannot look at the file ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise JournalUnavailable(path, "is a directory, not a journal file: name the file in it")
    if not stat.S_ISREG(mode):
        raise JournalUnavailable(path, "exists and is not a regular file")


def lock_writer(path: Path) -> int:
    """Hold ``<file>.lock`` beside the file itself: a journal opened through a symlink takes the lock
    its target's writers take (SQLite writes the target too), so it cannot recover their live runs.
    A file with a second name (a hard link) was refused before (`check_one_name`)."""
    real = path.resolve()
    lock_path = real.with_name(real.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise JournalUnavailable(path, f"cannot create its lock file {lock_path} ({exc.strerror})") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise JournalInUse(path, f"another process holds {lock_path}") from None
        raise JournalUnavailable(path, f"cannot lock {lock_path} ({exc.strerror})") from exc
    return fd


def quote(path: Path) -> str:
    return str(path.resolve()).replace("%", "%25").replace("?", "%3f").replace("#", "%23")


def connect(path: Path, uri: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "cannot open") from exc


def run_setup(path: Path, db: sqlite3.Connection, action: object) -> None:
    try:
        action()  # type: ignore[operator]
    except sqlite3.Error as exc:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise sqlite_error(path, exc, "cannot set up") from exc


def pragma(path: Path, db: sqlite3.Connection, sql: str, *, expect: str | None = None) -> None:
    try:
        row = db.execute(sql).fetchone()
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "cannot open") from exc
    if expect is not None and (row is None or str(row[0]).lower() != expect):
        raise JournalUnavailable(path, f"{sql} gave {row!r}, expected {expect!r}")


def preallocate_log(path: Path, db: sqlite3.Connection) -> None:
    """Write the log out to the size it reaches before SQLite checkpoints and restarts it.

    A sync that grows a file must also commit its new size and blocks: on the ext4 disks here
    that costs about twice a sync that overwrites blocks the file already has (~0.35 ms against
    ~0.15 ms). SQLite reads the log only up to its last valid frame (each frame is checksummed
    and salted with its log's header), so zeros past it are what a log looks like after SQLite
    restarts it, and the log is never read or written beyond it otherwise. A fresh log so pays the
    overwrite price from its first commit instead of after its first ~1000 pages. Best effort: on
    a disk too full for it, the log is left as it was and grows as usual.
    """
    try:
        page = int(db.execute("PRAGMA page_size").fetchone()[0])
        frames = int(db.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "cannot open") from exc
    wanted = _LOG_HEADER + (frames + _LOG_SLACK) * (page + _FRAME_HEADER)
    try:
        fd = os.open(path.with_name(path.name + "-wal"), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return  # no log yet: SQLite creates it on the first write, and it grows as usual
    try:
        size = os.fstat(fd).st_size
        if size < wanted:
            try:
                os.pwrite(fd, bytes(wanted - size), size)
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
    finally:
        os.close(fd)


def user_version(path: Path, db: sqlite3.Connection) -> int:
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "cannot read the header of") from exc


def check_header(path: Path, db: sqlite3.Connection) -> bool:
    """Refuse files that are not our journals, or that a newer schema wrote; True if it is empty."""
    try:
        application_id = int(db.execute("PRAGMA application_id").fetchone()[0])
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "cannot read the header of") from exc
    if application_id == 0 and version == 0 and tables == 0:
        return True  # an empty database (a writer created the file, then died before the schema)
    if application_id == LEDGER_APPLICATION_ID:
        raise JournalCorrupt(
            path, "not an aegis_nb journal: it is an aegis-nb mock ledger (aegis-nb mock --ledger)"
        )
    names = ", ".join(sorted(_table_names(path, db))) if application_id == 0 and version == 0 else ""
    if names:
        raise JournalCorrupt(
            path, f"not an aegis_nb journal: it holds another application's tables ({names})"
        )
    if application_id != APPLICATION_ID:
        raise JournalCorrupt(path, f"not an aegis_nb journal (SQLite application id {application_id:#x})")
    if version > FILE_SCHEMA:
        raise JournalTooNew(
            path, f"written by journal schema {version}; this aegis_nb reads up to schema {FILE_SCHEMA}"
        )
    if version < 1:
        raise JournalCorrupt(path, f"unknown journal schema {version}")
    if version < FILE_SCHEMA:
        raise JournalTooOld(
            path,
            f"written by journal schema {version}, a development layout from before aegis_nb 0.1.0; "
            f"this aegis_nb reads schema {FILE_SCHEMA}: finish its runs with the version that wrote it",
        )
    return False


def _table_names(path: Path, db: sqlite3.Connection) -> list[str]:
    try:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")
        return [str(name) for (name,) in rows]
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "cannot read the header of") from exc


def check_integrity(path: Path, db: sqlite3.Connection) -> None:
    try:
        problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)")]
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "cannot check") from exc
    if problems != ["ok"]:
        # SQLite's report starts "*** in database main ***" and may span lines: one line, its findings.
        found = [line.strip() for text in problems for line in text.splitlines()]
        found = [line for line in found if line and not line.startswith("***")]
        raise JournalCorrupt(path, "damaged: " + "; ".join(found or problems))


def sqlite_error(path: Path, exc: sqlite3.Error, doing: str) -> JournalError:
    """Map a SQLite error to ours: damage is `JournalCorrupt`, everything else `JournalUnavailable`."""
    code = getattr(exc, "sqlite_errorcode", -1) & 0xFF  # the primary code of an extended one
    text = str(exc)
    if (
        code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
        or "malformed" in text
        or ("not a database" in text)
    ):
        return JournalCorrupt(path, f"damaged or not a journal ({text})")
    if code == sqlite3.SQLITE_FULL:
        return JournalUnavailable(path, f"{doing} the journal: the disk is full ({text})")
    if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
        return JournalUnavailable(path, f"{doing} the journal: {_access_problem(path)} ({text})")
    return JournalUnavailable(path, f"{doing} the journal ({text})")


def _access_problem(path: Path) -> str:
    """What keeps this process from a journal SQLite could not open or write.

    SQLite says "unable to open database file" alike for a file this user may not read and for one
    it may read but not write (or whose folder refuses the files SQLite keeps beside it).
    """
    return "not writable here" if os.access(path, os.R_OK) else "not readable here, permission denied"
