"""Recovery runs only known code, and a journal others could have written is refused.

A journal is a file, and whoever can edit it chooses the step locators recovery rebuilds. A
locator resolves only to a registered step, a module-level step object, or a step class (async
``execute`` and ``compensate``, checked on the class before it is called, its JSON state bound to
its signature), from the modules the app allows; anything else (``subprocess:Popen``, ``os:system``,
``builtins:eval``, a module not allowed, a class that is no step) is a `StepNotRecoverable` naming
the run, the run stays unfinished, and nothing of it ran: a marker file the edited locator would
create stays absent, a module not allowed is not even looked for, and no other step of the run is
compensated. The same holds for ``aegis-nb recover`` in a process of its own.

Before SQLite opens anything, a journal that is group- or world-writable, belongs to another user,
lies in a folder others may write into (unless sticky, as /tmp is) or belongs to another user's
folder, or is a 0-byte file, is refused with a `JournalError` that says what to do, reading
included, and the file is left exactly as it was, with nothing created beside it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sqlite3
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from io import FileIO  # noqa: F401  (a class the module imports: its name here is no step's)
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.durable import (
    JournalCorrupt,
    JournalError,
    RecoveryIncomplete,
    SqliteJournal,
    StepNotRecoverable,
    read_runs,
)
from aegis_nb.saga.durable.errors import JournalUntrusted
from tests.conftest import require
from tests.durable_support import Crash, CrashingJournal
from tests.servers.launch import aegis_nb
from tests.test_journal_sqlite import file_digest, lines, log

HERE = __name__
APP = WorkflowEngine(journal=SqliteJournal("never-opened.db", allow_modules=[HERE]))
"""The app ``aegis-nb recover`` loads: it allows this module's steps (its own file is never opened)."""

NOBODY = 65534


@dataclass
class Mark:
    """A class step rebuilt from its JSON fields; logs what it does and undoes."""

    name: str
    logfile: str

    async def execute(self, ctx: AegisContext) -> None:
        log(self.logfile, f"do {self.name}")

    async def compensate(self, ctx: AegisContext) -> None:
        log(self.logfile, f"undo {self.name}")


class SideEffect:
    """No step: constructing it is an effect (it writes `marker`), as a constructor anywhere may be."""

    def __init__(self, marker: str) -> None:
        Path(marker).write_text("constructed")


class Finder(importlib.abc.MetaPathFinder):
    """Records every module the import system is asked for, and finds none itself."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        self.asked.append(fullname)
        return None


async def crashed_run(path: Path, logfile: Path) -> None:
    """Run ``r1`` of steps a, b, c killed as c started: a and b are owed their compensations."""
    steps = [Mark(name, str(logfile)) for name in "abc"]
    # Events: 0 start, 1-2 a, 3-4 b, 5 c started: the process dies there.
    with pytest.raises(Crash):
        await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 5)).run_saga(steps, run_id="r1")
    assert lines(logfile) == ["do a", "do b"]


def edit_locator(path: Path, step: int, locator: dict[str, Any]) -> None:
    """Rewrite the locator of run r1's `step` in the file, as anyone who may write it could."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        (text,) = db.execute("SELECT steps FROM runs WHERE run_id = 'r1'").fetchone()
        steps = json.loads(text)
        steps["steps"][step]["locator"] = locator
        db.execute("UPDATE runs SET steps = ? WHERE run_id = 'r1'", (json.dumps(steps),))


async def recover_refused(path: Path, **journal: Any) -> RecoveryIncomplete:
    """Recover `path` in a journal allowing this module (unless `journal` says otherwise)."""
    async with SqliteJournal(path, **{"allow_modules": [HERE], **journal}) as restarted:
        with pytest.raises(RecoveryIncomplete) as caught:
            await WorkflowEngine(journal=restarted).recover()
    return caught.value


def only_refusal(path: Path, error: RecoveryIncomplete) -> StepNotRecoverable:
    """The refusal of run r1, the only run left unfinished, as `error` reports it."""
    assert set(error.refusals) == {"r1"}
    refused = error.refusals["r1"]
    assert error.problems == {"r1": refused.detail}
    assert str(error) == f"journal {str(path)!r}: 1 run(s) left unfinished: run r1: {refused.detail}"
    assert [run.status for run in read_runs(path)] == [SagaStatus.RUNNING]
    return refused


# -- what an edited locator may name ------------------------------------------------------------

NOT_ALLOWED = (
    "nothing of it was run. If the step is the app's, register it or allow its module: "
    "SqliteJournal(path, allow_modules=[{module!r}])"
)


def marker_locators(marker: Path) -> list[tuple[str, dict[str, Any], dict[str, Any], str]]:
    """(id, locator, journal options, the refusal after ``step 'a' (<locator>): ``) per edit."""
    allowed = f"(allowed: {HERE}); "
    return [
        (
            "subprocess-popen",
            {"by": "class", "target": "subprocess:Popen", "state": {"args": ["touch", str(marker)]}},
            {},
            f"module 'subprocess' is not one this journal rebuilds steps from {allowed}"
            + NOT_ALLOWED.format(module="subprocess"),
        ),
        (
            "popen-even-where-subprocess-is-allowed",
            {"by": "class", "target": "subprocess:Popen", "state": {"args": ["touch", str(marker)]}},
            {"allow_modules": [HERE, "subprocess"]},
            "Popen is not a step class (no async execute and compensate); nothing of it was run",
        ),
        (
            "os-system",
            {"by": "object", "target": "os:system"},
            {},
            f"module 'os' is not one this journal rebuilds steps from {allowed}"
            + NOT_ALLOWED.format(module="os"),
        ),
        (
            "builtins-eval",
            {"by": "class", "target": "builtins:eval", "state": {}},
            {},
            f"module 'builtins' is not one this journal rebuilds steps from {allowed}"
            + NOT_ALLOWED.format(module="builtins"),
        ),
        (
            "a-class-this-module-imported",
            {"by": "class", "target": f"{HERE}:FileIO", "state": {"file": str(marker), "mode": "w"}},
            {},
            f"{HERE}:FileIO is _io:FileIO, defined elsewhere; nothing of it was run",
        ),
        (
            "a-constructor-with-effects-that-is-no-step",
            {"by": "class", "target": f"{HERE}:SideEffect", "state": {"marker": str(marker)}},
            {},
            "SideEffect is not a step class (no async execute and compensate); nothing of it was run",
        ),
        (
            "an-object-that-is-no-step",
            {"by": "object", "target": f"{HERE}:marker_locators"},
            {},
            "it names a builtins.function, not a step; nothing of it was run",
        ),
        (
            "a-step-class-whose-state-does-not-bind",
            {"by": "class", "target": f"{HERE}:Mark", "state": {"name": "a", "logfile": "x", "cmd": "rm"}},
            {},
            "its state ['cmd', 'logfile', 'name'] does not match the constructor of Mark; nothing of it "
            "was run",
        ),
        (
            "a-dunder-path",
            {"by": "class", "target": f"{HERE}:Mark.__class__", "state": {}},
            {},
            f"'{HERE}:Mark.__class__' is not a module:name reference; nothing of it was run",
        ),
    ]


CASES = [case[0] for case in marker_locators(Path("m"))]


@pytest.mark.anyio
@pytest.mark.parametrize("case", CASES)
async def test_an_edited_locator_naming_foreign_code_is_refused_and_nothing_runs(
    tmp_path: Path, case: str
) -> None:
    path, logfile, marker = tmp_path / "j.db", tmp_path / "log", tmp_path / "marker"
    ((_, locator, options, why),) = [c for c in marker_locators(marker) if c[0] == case]
    await crashed_run(path, logfile)
    edit_locator(path, 0, locator)
    error = await recover_refused(path, **options)
    assert not marker.exists()
    assert lines(logfile) == ["do a", "do b"]  # b is not undone either: the run is left whole
    refused = only_refusal(path, error)
    shown = f"{locator['by']} {locator['target']}"
    assert str(refused) == f"run r1: step 'a' ({shown}): {why}"
    assert (refused.run_id, refused.step, refused.locator) == ("r1", "a", shown)


@pytest.mark.anyio
async def test_a_module_not_allowed_is_not_imported_nor_even_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, logfile, marker = tmp_path / "j.db", tmp_path / "log", tmp_path / "marker"
    module = f"aegis_trust_probe_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "importable"
    folder.mkdir()
    # A module whose import is an effect, holding a real step class: importing alone runs code.
    (folder / f"{module}.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "class Step:\n"
        "    async def execute(self, ctx): ...\n"
        "    async def compensate(self, ctx): ...\n"
    )
    monkeypatch.syspath_prepend(folder)
    finder = Finder()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    await crashed_run(path, logfile)
    edit_locator(path, 0, {"by": "class", "target": f"{module}:Step", "state": {}})
    error = await recover_refused(path)
    imported = module in sys.modules
    monkeypatch.delitem(sys.modules, module, raising=False)  # in case it was imported after all
    assert not imported
    assert not marker.exists()
    assert module not in finder.asked
    assert str(only_refusal(path, error)) == (
        f"run r1: step 'a' (class {module}:Step): module {module!r} is not one this journal rebuilds "
        f"steps from (allowed: {HERE}); " + NOT_ALLOWED.format(module=module)
    )


@pytest.mark.anyio
async def test_the_apps_own_steps_are_rebuilt_only_from_the_modules_it_allows(tmp_path: Path) -> None:
    path, logfile = tmp_path / "j.db", tmp_path / "log"
    await crashed_run(path, logfile)
    # A new journal object has located nothing: this module is not allowed until the app says so.
    refused = only_refusal(path, await recover_refused(path, allow_modules=[]))
    assert lines(logfile) == ["do a", "do b"]
    assert str(refused) == (
        f"run r1: step 'b' (class {HERE}:Mark): module {HERE!r} is not one this journal rebuilds "
        f"steps from (allowed: none); " + NOT_ALLOWED.format(module=HERE)
    )
    async with SqliteJournal(path, allow_modules=["tests"]) as restarted:  # a prefix: its package
        (run,) = await WorkflowEngine(journal=restarted).recover()
    assert run.report.status is SagaStatus.ROLLED_BACK
    assert lines(logfile) == ["do a", "do b", "undo b", "undo a"]


@pytest.mark.anyio
async def test_an_aegismcp_apps_workflow_module_is_its_own_so_its_steps_recover(tmp_path: Path) -> None:
    # `AegisMCP(..., journal=path)` cannot name modules; the modules of its workflows are the app's
    # own code, so the step classes defined beside them recover after a restart, and nothing else.
    from aegis_nb import AegisMCP

    path, logfile = tmp_path / "j.db", tmp_path / "log"
    await crashed_run(path, logfile)
    app = AegisMCP("Restarted", journal=path)

    async def book(ctx: AegisContext) -> AegisContext:
        return ctx

    app.workflow("book")(book)  # defined in this module, as an app's workflow is in the app's
    async with app.workflow_engine.journal as restarted:  # type: ignore[union-attr]
        assert isinstance(restarted, SqliteJournal)
        assert restarted.resolver.may_import(HERE)
        assert not restarted.resolver.may_import("subprocess")
        (run,) = await app.workflow_engine.recover()
    assert run.report.status is SagaStatus.ROLLED_BACK
    assert lines(logfile) == ["do a", "do b", "undo b", "undo a"]


def test_aegis_nb_recover_refuses_an_edited_journal_in_a_process_of_its_own(tmp_path: Path) -> None:
    path, logfile, marker = tmp_path / "j.db", tmp_path / "log", tmp_path / "marker"
    anyio.run(crashed_run, path, logfile)
    edit_locator(
        path, 0, {"by": "class", "target": "subprocess:Popen", "state": {"args": ["touch", str(marker)]}}
    )
    child = aegis_nb("recover", "--journal", str(path), f"{HERE}:APP")
    assert not marker.exists()
    assert lines(logfile) == ["do a", "do b"]
    assert (child.returncode, child.stdout, child.stderr) == (
        1,
        "recovered 0 run(s): 0 rolled back, 0 stuck; 1 left unfinished\n",
        f"aegis-nb recover: journal {str(path)!r}: 1 run(s) left unfinished: run r1: step 'a' "
        "(class subprocess:Popen): module 'subprocess' is not one this journal rebuilds steps from "
        f"(allowed: {HERE}); " + NOT_ALLOWED.format(module="subprocess") + "\n",
    )
    assert [run.status for run in read_runs(path)] == [SagaStatus.RUNNING]
    assert not Path("never-opened.db").exists()


# -- who may have written the file --------------------------------------------------------------


def folder_listing(folder: Path) -> dict[str, str]:
    return {file.name: file_digest(file) for file in sorted(folder.iterdir()) if file.is_file()}


async def refused_everywhere(path: Path) -> JournalError:
    """The error opening `path` to write raises; reading and ``aegis-nb runs`` refuse it alike, and
    nothing in its folder changes (nor is anything created beside it)."""
    before = folder_listing(path.parent)
    with pytest.raises(JournalError) as writing:
        await SqliteJournal(path).open()
    with pytest.raises(JournalError) as reading:
        read_runs(path)
    assert (type(reading.value), str(reading.value)) == (type(writing.value), str(writing.value))
    child = aegis_nb("runs", "--journal", str(path))
    assert (child.returncode, child.stdout, child.stderr) == (2, "", f"aegis-nb runs: {writing.value}\n")
    assert folder_listing(path.parent) == before
    return writing.value


async def a_journal(path: Path) -> None:
    async with SqliteJournal(path) as journal:
        await WorkflowEngine(journal=journal).run_saga([Mark("a", os.devnull)], run_id="r1")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [0o666, 0o660, 0o620], ids=["0666", "0660", "0620"])
async def test_a_journal_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "j.db"
    await a_journal(path)
    path.chmod(mode)
    error = await refused_everywhere(path)
    assert isinstance(error, JournalUntrusted)
    assert str(error) == (
        f"journal {str(path)!r}: it may be written by others (mode {mode:04o}), who could make "
        f"recovery run their steps; make it private: chmod 600 {path}"
    )


@pytest.mark.anyio
async def test_a_log_beside_the_journal_that_others_may_write_is_refused(tmp_path: Path) -> None:
    path, log_file = tmp_path / "j.db", tmp_path / "j.db-wal"
    await a_journal(path)
    log_file.write_bytes(b"")
    log_file.chmod(0o646)
    error = await refused_everywhere(path)
    assert isinstance(error, JournalUntrusted)
    assert str(error) == (
        f"journal {str(path)!r}: {log_file} may be written by others (mode 0646), who could make "
        f"recovery run their steps; make it private: chmod 600 {log_file}"
    )


@pytest.mark.anyio
async def test_another_users_journal_is_refused_even_by_root(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root (to give a journal to another user)")
    path = tmp_path / "j.db"
    await a_journal(path)
    os.chown(path, NOBODY, NOBODY)
    error = await refused_everywhere(path)
    assert isinstance(error, JournalUntrusted)
    assert str(error) == (
        f"journal {str(path)!r}: it belongs to uid {NOBODY}, not to this process (uid 0): a journal is "
        f"only trusted by its own user; run as uid {NOBODY}, or take it over: chown 0 {path}"
    )


@pytest.mark.anyio
async def test_a_journal_in_a_folder_others_may_write_into_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "j.db"
    await a_journal(path)
    folder.chmod(0o777)
    error = await refused_everywhere(path)
    assert isinstance(error, JournalUntrusted)
    assert str(error) == (
        f"journal {str(path)!r}: its folder {folder} may be written by others (mode 0777) and is not "
        f"sticky: they could replace the journal; keep it in a folder only you can write "
        f"(chmod go-w {folder})"
    )
    # Nor is a new journal created there, lock file included.
    with pytest.raises(JournalUntrusted):
        await SqliteJournal(folder / "new.db").open()
    assert sorted(file.name for file in folder.iterdir()) == ["j.db", "j.db.lock"]


@pytest.mark.anyio
async def test_a_journal_reached_through_a_symlink_into_such_a_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    await a_journal(folder / "j.db")
    folder.chmod(0o777)
    path = tmp_path / "link.db"
    path.symlink_to(folder / "j.db")
    with pytest.raises(JournalUntrusted) as caught:
        await SqliteJournal(path).open()
    assert str(caught.value) == (
        f"journal {str(path)!r}: its folder {folder} may be written by others (mode 0777) and is not "
        f"sticky: they could replace the journal; keep it in a folder only you can write "
        f"(chmod go-w {folder})"
    )


@pytest.mark.anyio
async def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root (to give a folder to another user)")
    folder = tmp_path / "theirs"
    folder.mkdir()
    path = folder / "j.db"
    await a_journal(path)
    os.chown(folder, NOBODY, NOBODY)
    error = await refused_everywhere(path)
    assert isinstance(error, JournalUntrusted)
    assert str(error) == (
        f"journal {str(path)!r}: its folder {folder} belongs to uid {NOBODY}, not to this process "
        "(uid 0) or root: its owner could replace the journal; keep the journal in a folder of your own"
    )


@pytest.mark.anyio
async def test_a_private_journal_in_a_sticky_folder_is_used(tmp_path: Path) -> None:
    folder = tmp_path / "sticky"
    folder.mkdir()
    folder.chmod(0o1777)  # as /tmp: others may add files, not replace ours
    path = folder / "j.db"
    await a_journal(path)
    # Set up under another name first, then linked in place: nothing of that is left over.
    assert sorted(file.name for file in folder.iterdir()) == ["j.db", "j.db.lock"]
    assert [run.status for run in read_runs(path)] == [SagaStatus.COMMITTED]


@pytest.mark.anyio
async def test_an_empty_file_is_refused_and_left_empty(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    path.touch(mode=0o600)
    error = await refused_everywhere(path)
    assert isinstance(error, JournalCorrupt)
    assert str(error) == (
        f"journal {str(path)!r}: is empty (0 bytes), which a journal never is: it was truncated or "
        "put there; delete it to start a new journal"
    )
    assert path.stat().st_size == 0
    child = aegis_nb("recover", "--journal", str(path), f"{HERE}:APP")
    assert (child.returncode, child.stdout, child.stderr) == (2, "", f"aegis-nb recover: {error}\n")
    assert path.stat().st_size == 0
