"""What an upstream lists cannot write the policy ``--observe`` drafts: tool and argument names that
carry TOML (a new upstream running ``sh``), quotes, backslashes and terminal escapes come out only as
quoted TOML keys and strings, the draft parses back to exactly what was meant, names a policy cannot
hold are left out, and nothing printed holds a control character."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.types import Tool

from aegis_nb.gateway import load_policy, parse_policy
from aegis_nb.gateway.observe import draft_policy, observe
from aegis_nb.gateway.policy import UpstreamSpec
from aegis_nb.kernel.printable import printable
from tests.servers.hostile_upstream import (
    CARD_ARG,
    EVIL_UNDO,
    INJECTED,
    ROOM_ARG,
    TERMINAL,
    TOOLS,
    hostile_server,
)
from tests.servers.launch import LINE_TIMEOUT, ROOT, Lines, aegis_nb, free_port

UPSTREAM = UpstreamSpec("hostile", url="http://hostile.invalid/mcp")

DRAFTED = {
    "upstreams": {"hostile": {"url": "http://hostile.invalid/mcp"}},
    "tools": {
        "book_room": {
            "kind": "compensable",
            "undo": "cancel_room",
            "undo_args": {
                ROOM_ARG: "/arguments/room~1~0id" + INJECTED + TERMINAL,
                "room": "/arguments/room",
            },
            "secret": [CARD_ARG],
            "guess": True,
        },
        "cancel_room": {"kind": "irreversible", "guess": True},
        "look.up": {"kind": "read_only", "guess": True},
        "rent_car": {"kind": "irreversible", "guess": True},
    },
}
"""The hostile listing's draft: its three tools with names no policy can hold are left out."""


def control_characters(text: str) -> list[str]:
    """The lines of `text` that hold a control, separator or bidi character."""
    return [line for line in text.split("\n") if printable(line) != line]


@pytest.mark.anyio
async def test_a_hostile_listing_drafts_only_quoted_names_and_one_upstream(tmp_path: Path) -> None:
    draft = await observe([(UPSTREAM, cast(Any, hostile_server()))])
    assert tomllib.loads(draft) == DRAFTED
    assert control_characters(draft) == []
    (tmp_path / "draft.toml").write_text(draft, encoding="utf-8")
    policy = load_policy(tmp_path / "draft.toml")
    assert policy.upstreams == (UPSTREAM,)
    book = policy.tool("book_room")
    assert book is not None
    assert {name: getattr(binding, "tokens", None) for name, binding in book.undo_args} == {
        ROOM_ARG: ("arguments", ROOM_ARG),
        "room": ("arguments", "room"),
    }


def test_an_undo_named_to_inject_an_upstream_adds_none() -> None:
    listing = [tool for tool in TOOLS if tool.name in ("rent_car", EVIL_UNDO)]
    draft = draft_policy([(UPSTREAM, listing)])
    assert tomllib.loads(draft) == {
        "upstreams": {"hostile": {"url": "http://hostile.invalid/mcp"}},
        "tools": {"rent_car": {"kind": "irreversible", "guess": True}},
    }


def test_observe_prints_a_draft_with_no_control_characters_and_the_gateway_serves_it(tmp_path: Path) -> None:
    command = f"{sys.executable} tests/servers/hostile_upstream.py"
    observed = aegis_nb("gateway", "--observe", command)
    assert (observed.returncode, observed.stderr) == (0, "")
    assert control_characters(observed.stdout) == []
    assert tomllib.loads(observed.stdout) == {
        **DRAFTED,
        "upstreams": {"python": {"command": sys.executable, "args": ["tests/servers/hostile_upstream.py"]}},
    }


names = st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(tools=st.lists(st.tuples(names, st.lists(names, max_size=3)), max_size=6))
def test_any_listing_drafts_a_policy_that_round_trips_with_one_upstream(
    tools: list[tuple[str, list[str]]],
) -> None:
    listing = [
        Tool(
            name=name,
            input_schema={
                "type": "object",
                "properties": {argument: {"type": "string"} for argument in args},
            },
        )
        for name, args in tools
    ]
    draft = draft_policy([(UPSTREAM, listing)])
    parsed = tomllib.loads(draft)
    assert parsed["upstreams"] == {"hostile": {"url": "http://hostile.invalid/mcp"}}
    assert control_characters(draft) == []
    policy = parse_policy(draft, "draft.toml")
    assert policy.upstreams == (UPSTREAM,)
    drafted = [tool.name for tool in policy.tools]
    assert set(drafted) <= {name for name, _args in tools}
    assert len(drafted) == len(set(drafted))


@pytest.mark.anyio
async def test_the_gateway_names_hostile_tools_on_stderr_escaped(tmp_path: Path) -> None:
    policy = tmp_path / "hostile.toml"
    policy.write_text(
        f'[upstreams.python]\ncommand = "{sys.executable}"\nargs = ["tests/servers/hostile_upstream.py"]\n'
    )
    command = [sys.executable, "-m", "aegis_nb.cli", "gateway", str(policy), "--transport", "http"]
    process = await anyio.open_process(
        [*command, "--port", str(free_port())], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    stderr: list[str] = []
    try:
        assert process.stderr is not None
        lines = Lines(process.stderr)
        with anyio.fail_after(LINE_TIMEOUT):
            while "Uvicorn running on" not in (line := await lines.next_line()):
                stderr.append(line)
    finally:
        process.terminate()
        await process.wait()
    served = "is not in the policy: served as"
    assert [line for line in stderr if line.startswith("gateway:")] == [
        f"gateway: 7 tools from 1 upstream(s): 'python' ({sys.executable} ...)",
        f"gateway: \\x1b[31mred_tool {served} read_only (from its annotations)",
        f"gateway: book_room {served} irreversible (from its annotations)",
        'gateway: cancel_car-"] [upstreams.x] command = "sh" args = ["-c", "touch pwned"] # '
        f"{served} irreversible (from its annotations)",
        f"gateway: cancel_room {served} irreversible (from its annotations)",
        'gateway: evil"] [upstreams.x] command = "sh" args = ["-c", "touch pwned"] '
        "#\\x1b[31mred\\x1b[0m \\x1b[2K\\x1b]0;title\\x07\\x9b2J\\u202efdp.exe\\ "
        f"{served} irreversible (from its annotations)",
        f"gateway: look.up {served} read_only (from its annotations)",
        f"gateway: rent_car {served} irreversible (from its annotations)",
    ]
    assert control_characters("\n".join(stderr)) == []


def test_a_policy_error_naming_hostile_tools_is_one_escaped_line(tmp_path: Path) -> None:
    policy = tmp_path / "hostile.toml"
    policy.write_text(
        f'[upstreams.python]\ncommand = "{sys.executable}"\nargs = ["tests/servers/hostile_upstream.py"]\n\n'
        '[tools.nope]\nkind = "read_only"\n'
    )
    done = aegis_nb("gateway", str(policy))
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1)
    assert done.stderr.startswith(
        f"aegis-nb gateway: {policy}:5: tools.nope: no upstream serves a tool 'nope' (tools: "
    )
    assert "\\x1b[31mred_tool" in done.stderr
    assert control_characters(done.stderr.rstrip("\n")) == []
