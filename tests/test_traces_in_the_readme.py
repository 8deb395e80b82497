"""The README's Traces example runs as written and prints the spans the README says, in that order."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
from typing import Any

import pytest

from tests.conftest import require
from tests.test_readme import FENCE, section


def test_the_traces_example_prints_a_span_per_step_per_undo_and_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    require(importlib.util.find_spec("opentelemetry.sdk") is not None, "opentelemetry-sdk (dev extra)")
    text = section("## Traces")
    (example,) = (code for language, code in FENCE.findall(text) if language == "python")
    code = compile(example, "<README>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {}
    asyncio.run(eval(code, namespace))
    printed = capsys.readouterr().out
    assert printed.splitlines() == [
        "execute_tool BookFlight succeeded",
        "execute_tool ChargeCard failed",
        "compensate BookFlight succeeded",
        "invoke_workflow trip rolled_back",
    ]
    assert f"```\n{printed}```" in text  # the README shows exactly that
