"""The gateway in front of the real mcp-server-git (PyPI, over stdio, in its own venv): ``git_add``
undone by ``git_reset``, a saga of staging calls failing at every position, and the repository's
status read with git itself before the saga and after each rollback."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from aegis_nb.gateway import Gateway, parse_policy
from tests.conftest import require_executable
from tests.real_servers_support import git_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

POLICY = """\
[upstreams.git]
command = "mcp-server-git"

[tools.git_status]
kind = "read_only"

[tools.git_add]
kind = "compensable"
undo = "git_reset"
undo_args = { repo_path = "/arguments/repo_path" }
"""

FILES = ["notes.txt", "plan.txt", "draft.txt"]

STAGED_BEFORE = (
    "git_reset unstages everything, what the user had staged before the saga too: the undo of a "
    "git_add needs a before read of the index (issue 26, next: before/verify)"
)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A repository with one commit, and three new files not yet staged."""
    git = require_executable("git")
    repo = tmp_path / "repo"
    repo.mkdir()
    for argv in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "ada@example.org"],
        ["config", "user.name", "Ada"],
    ):
        subprocess.run([git, *argv], cwd=repo, check=True)
    (repo / "README").write_text("a repository\n")
    subprocess.run([git, "add", "README"], cwd=repo, check=True)
    subprocess.run([git, "commit", "-q", "-m", "first"], cwd=repo, check=True)
    for name in [*FILES, "staged.txt"]:
        (repo / name).write_text(f"{name}\n")
    return repo


async def status(repo: Path) -> str:
    """What git says of the index and the work tree, untracked files included."""
    done = await anyio.run_process(["git", "status", "--porcelain=v1", "-uall"], cwd=repo)
    return done.stdout.decode()


def policy_for(repo: Path) -> Any:
    command, args = git_server(repo)
    text = POLICY.replace('command = "mcp-server-git"', f"command = {command!r}\nargs = {args!r}")
    return parse_policy(text, "git_policy.toml")


CASES = [
    *(pytest.param(position, False, id=f"{position}-clean-index") for position in range(len(FILES) + 1)),
    pytest.param(0, True, id="0-a-file-staged-before"),  # nothing to undo: the staged file stays
    *(
        pytest.param(
            position,
            True,
            id=f"{position}-a-file-staged-before",
            marks=pytest.mark.xfail(strict=True, reason=STAGED_BEFORE),
        )
        for position in range(1, len(FILES) + 1)
    ),
]


@pytest.mark.parametrize(("position", "staged_before"), CASES)
async def test_a_rollback_after_a_failure_at_any_step_restores_the_repository_status(
    repository: Path, position: int, staged_before: bool
) -> None:
    repo = str(repository)
    async with Client(Gateway(policy_for(repository))) as client:
        if staged_before:  # outside a saga: passed through
            assert (
                await client.call_tool("git_add", {"repo_path": repo, "files": ["staged.txt"]})
            ).is_error is False
        before = await status(repository)
        begun = await client.call_tool("saga_begin", {})
        saga = (begun.structured_content or {})["saga"]
        for name in FILES[:position]:
            added = await client.call_tool("git_add", {"repo_path": repo, "files": [name], "saga": saga})
            assert (name, added.is_error) == (name, False)
        during = await status(repository)
        # Refused by the gateway before it reaches the server: files must be a list.
        failed = await client.call_tool("git_add", {"repo_path": repo, "files": "notes.txt", "saga": saga})
        rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "a step failed"})
    assert failed.is_error is True
    assert (during == before) is (position == 0)
    assert await status(repository) == before
    steps = rolled.structured_content or {}
    assert (rolled.is_error, steps["status"], steps["steps"]) == (
        False,
        "rolled_back",
        [
            {"index": index, "name": "git_add" if index == 0 else f"git_add#{index + 1}", "state": "undone"}
            for index in range(position)
        ],
    )
