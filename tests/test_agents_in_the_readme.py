"""The README's "Agents in the loop" example runs as written (a cell: top-level await) and prints
what the README shows under it: the agent's answer quoting the rollback, and an empty ledger."""

from __future__ import annotations

import ast
import asyncio
import re

import pytest

from tests.test_readme import section

EXAMPLE = re.compile(r"```python\n(.*?)```\n\n```text\n(.*?)```", flags=re.S)


def test_the_agent_example_prints_what_the_readme_says(capsys: pytest.CaptureFixture[str]) -> None:
    ((code, shown),) = EXAMPLE.findall(section("## Agents in the loop"))
    compiled = compile(code, "<README>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    async def run() -> None:
        coroutine = eval(compiled, {"__name__": "readme"})
        if coroutine is not None:
            await coroutine

    asyncio.run(run())
    assert capsys.readouterr().out == shown
