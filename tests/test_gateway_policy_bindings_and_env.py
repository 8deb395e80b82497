"""A gateway policy reads the three binding forms and refuses bad ones with file, line and key; checks
each undo's bindings against the undo tool's listed schema (arguments it requires, types it takes);
lets a tool be its own undo (a toggle undone by itself, rolled back through the gateway); and starts a
stdio upstream with the `env` it names, ``${NAME}`` taken from the gateway's environment."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from aegis_nb.gateway import Gateway, PolicyError, parse_policy
from aegis_nb.gateway.upstream import target_of
from aegis_nb.server.bindings import JmesPathBinding, RegexBinding

HEAD = """\
[upstreams.memory]
command = "mcp-server-memory"
"""

MEMORY = (
    HEAD
    + """
[tools.create_entities]
kind = "compensable"
undo = "delete_entities"
undo_args = { entityNames = { jmespath = "result.entities[*].name" } }

[tools.add_observations]
kind = "compensable"
undo = "delete_observations"

[tools.add_observations.undo_args]
deletions = { jmespath = "result.results[*].{entityName: entityName, observations: addedObservations}" }

[tools.git_commit]
kind = "compensable"
undo = "git_reset_to"
undo_args.revision = { regex = "with hash (?P<sha>[0-9a-f]+)", from = "/result/text" }
"""
)


def error_of(text: str, environ: dict[str, str] | None = None, source: str = "memory.toml") -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source, environ)
    return str(caught.value)


def test_a_policy_reads_jmespath_and_regex_bindings_in_inline_tables_sub_tables_and_dotted_keys() -> None:
    policy = parse_policy(MEMORY, "memory.toml")
    found = {tool.name: tool.bindings for tool in policy.tools}
    deletions = "result.results[*].{entityName: entityName, observations: addedObservations}"
    assert found == {
        "create_entities": {"entityNames": JmesPathBinding.parse("result.entities[*].name")},
        "add_observations": {"deletions": JmesPathBinding.parse(deletions)},
        "git_commit": {"revision": RegexBinding.parse("with hash (?P<sha>[0-9a-f]+)", "/result/text")},
    }


ENTRY = '\n[tools.create_entities]\nkind = "compensable"\nundo = "delete_entities"\n'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            ENTRY + 'undo_args = { entityNames = { jmespath = "entities[*].name" } }\n',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: bad binding: 'entities[*].name' "
            "reads 'entities' at the top: an expression starts from arguments, result or before (e.g. "
            "'result.entities')",
        ),
        (
            ENTRY + '\n[tools.create_entities.undo_args]\nentityNames = { jmespath = "result.entities[" }\n',
            "memory.toml:9: tools.create_entities.undo_args.entityNames: bad binding: 'result.entities[' is "
            "not a JMESPath expression: the expression is incomplete",
        ),
        (
            ENTRY + 'undo_args.entityNames = { regex = "[0-9a-f]+" }\n',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: bad binding: '[0-9a-f]+' names no "
            "group: write (?P<name>...) around what to take",
        ),
        (
            ENTRY + 'undo_args = { entityNames = { jmespath = "result", regex = "(?P<a>.)" } }\n',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: bad binding: a table here holds "
            "jmespath, or regex with an optional from (it holds jmespath, regex)",
        ),
        (
            ENTRY + "undo_args = { entityNames = 3 }\n",
            "memory.toml:7: tools.create_entities.undo_args.entityNames: bad binding: expected a JSON "
            'Pointer string (\'/result/id\'), { jmespath = "..." } or { regex = "...", from = "..." }, '
            "got int",
        ),
        (
            ENTRY + 'undo_args = { entityNames = "/before/names" }\n',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: '/before/names' reads before, but "
            "'create_entities' has no before read",
        ),
        (
            ENTRY + 'undo_args = { entityNames = { jmespath = "[result, before]" } }\n',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: '[result, before]' reads before, "
            "but 'create_entities' has no before read",
        ),
    ],
)
def test_a_bad_binding_is_refused_at_load_with_file_line_and_key(body: str, message: str) -> None:
    assert error_of(HEAD + body) == message


# -- checked against the undo tool's listed schema ---------------------------------------------------

SCHEMAS: dict[str, dict[str, Any]] = {
    "create_entities": {
        "type": "object",
        "properties": {"entities": {"type": "array"}, "label": {"type": "string"}},
        "required": ["entities"],
    },
    "delete_entities": {
        "type": "object",
        "properties": {"entityNames": {"type": "array", "items": {"type": "string"}}, "force": {}},
        "required": ["entityNames"],
    },
    "toggle": {"type": "object", "properties": {"light": {"type": "string"}}, "required": ["light"]},
}


@pytest.mark.parametrize(
    ("undo_args", "message"),
    [
        (
            '{ force = "/result/force" }',
            "memory.toml:7: tools.create_entities.undo_args: the undo tool 'delete_entities' requires "
            "entityNames, which undo_args does not bind",
        ),
        (
            '{ entityNames = { jmespath = "result.entities[0].{name: name}" } }',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: 'result.entities[0].{name: name}' "
            "gives an object, but the undo tool 'delete_entities' takes 'entityNames' as an array",
        ),
        (
            '{ entityNames = { regex = "(?P<name>\\\\w+)" } }',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: '(?P<name>\\\\w+)' gives a "
            "string, but the undo tool 'delete_entities' takes 'entityNames' as an array",
        ),
        (
            '{ entityNames = "/arguments/label" }',
            "memory.toml:7: tools.create_entities.undo_args.entityNames: '/arguments/label' gives a "
            "string, but the undo tool 'delete_entities' takes 'entityNames' as an array",
        ),
    ],
)
def test_bindings_that_cannot_fit_the_listed_undo_are_refused_with_file_line_and_key(
    undo_args: str, message: str
) -> None:
    policy = parse_policy(HEAD + ENTRY + f"undo_args = {undo_args}\n", "memory.toml")
    with pytest.raises(PolicyError) as caught:
        policy.check_tools(SCHEMAS)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "undo_args",
    [
        '{ entityNames = { jmespath = "result.entities[*].name" } }',
        '{ entityNames = "/result/names", force = { jmespath = "`true`" } }',  # force: no type said
        '{ entityNames = { jmespath = "result | [0]" } }',  # its type is not known without a call
    ],
)
def test_bindings_that_may_fit_the_listed_undo_load(undo_args: str) -> None:
    parse_policy(HEAD + ENTRY + f"undo_args = {undo_args}\n", "memory.toml").check_tools(SCHEMAS)


# -- a tool that is its own undo ---------------------------------------------------------------------

SELF_UNDONE = """\
[upstreams.lights]
url = "http://lights.invalid/mcp"

[tools.toggle]
kind = "compensable"
undo = "toggle"
undo_args = { light = "/arguments/light" }
"""


def lights(on: set[str], calls: list[str]) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("lights")

    @server.tool()
    async def toggle(light: str) -> dict[str, bool]:
        calls.append(light)
        on.symmetric_difference_update({light})
        return {"on": light in on}

    return server


@pytest.mark.anyio
async def test_a_tool_that_is_its_own_undo_loads_and_rolls_back_by_calling_itself_again() -> None:
    on: set[str] = {"porch"}
    calls: list[str] = []
    gateway = Gateway(parse_policy(SELF_UNDONE, "lights.toml"), upstreams={"lights": lights(on, calls)})
    async with Client(gateway) as client:
        begun = await client.call_tool("saga_begin", {})
        saga = (begun.structured_content or {})["saga"]
        toggled = await client.call_tool("toggle", {"light": "hall", "saga": saga})
        lit = set(on)
        rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "too bright"})
    assert (toggled.is_error, toggled.structured_content, lit) == (False, {"on": True}, {"porch", "hall"})
    status = rolled.structured_content or {}
    assert (rolled.is_error, status["status"], status["steps"]) == (
        False,
        "rolled_back",
        [{"index": 0, "name": "toggle", "state": "undone"}],
    )
    assert (calls, on) == (["hall", "hall"], {"porch"})


# -- env per upstream ---------------------------------------------------------------------------------

ENVIRONMENT = """\
[upstreams.reader]
command = "python"
env = { GRAPH = "${HOME}/graph.jsonl", PRICE = "$$5", PLAIN = "as written" }
"""


def test_env_values_take_names_from_the_given_environment_and_reach_the_stdio_parameters() -> None:
    policy = parse_policy(ENVIRONMENT, "reader.toml", {"HOME": "/home/ada", "TOKEN": "unused"})
    (spec,) = policy.upstreams
    assert spec.env == (("GRAPH", "/home/ada/graph.jsonl"), ("PLAIN", "as written"), ("PRICE", "$5"))
    target = target_of(spec)
    assert not isinstance(target, str)
    assert target.env == {"GRAPH": "/home/ada/graph.jsonl", "PLAIN": "as written", "PRICE": "$5"}


def test_env_values_stay_out_of_the_upstreams_repr() -> None:
    (spec,) = parse_policy(ENVIRONMENT, "reader.toml", {"HOME": "/secret/home"}).upstreams
    assert repr(spec) == "UpstreamSpec(name='reader', command='python', args=(), url=None)"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            'env = { GRAPH = "${MEMORY_FILE_PATH}" }',
            "reader.toml:3: upstreams.reader.env.GRAPH: ${MEMORY_FILE_PATH}: MEMORY_FILE_PATH is not set in "
            "the gateway's environment",
        ),
        (
            'env = { PRICE = "5$" }',
            "reader.toml:3: upstreams.reader.env.PRICE: a '$' starts ${NAME} (a variable of the gateway's "
            "environment); write $$ for '$'",
        ),
        (
            'env = { GRAPH = "${HOME" }',
            "reader.toml:3: upstreams.reader.env.GRAPH: a '$' starts ${NAME} (a variable of the gateway's "
            "environment); write $$ for '$'",
        ),
        (
            '\n[upstreams.reader.env]\nGRAPH = "${1HOME}"\n',
            "reader.toml:5: upstreams.reader.env.GRAPH: a '$' starts ${NAME} (a variable of the gateway's "
            "environment); write $$ for '$'",
        ),
    ],
)
def test_an_env_value_naming_what_the_environment_lacks_is_refused_with_file_line_and_key(
    env: str, message: str
) -> None:
    text = f'[upstreams.reader]\ncommand = "python"\n{env}\n'
    assert error_of(text, {"HOME": "/home/ada"}, "reader.toml") == message


READER = Path(__file__).parent / "servers" / "environment_reader.py"


@pytest.mark.anyio
async def test_a_stdio_upstream_is_started_with_the_env_the_policy_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AEGIS_TEST_GRAPH", "/tmp/graph.jsonl")
    text = (
        f"[upstreams.reader]\ncommand = {str(sys.executable)!r}\nargs = [{str(READER)!r}]\n"
        'env = { MEMORY_FILE_PATH = "${AEGIS_TEST_GRAPH}" }\n'
    )
    gateway = Gateway(parse_policy(text, "reader.toml"))
    async with Client(gateway) as client:
        named = await client.call_tool("read_variable", {"name": "MEMORY_FILE_PATH"})
        unnamed = await client.call_tool("read_variable", {"name": "AEGIS_TEST_GRAPH"})
    # Only what the policy names reaches the upstream, not the whole of the gateway's environment.
    assert (named.structured_content, unnamed.structured_content) == (
        {"name": "MEMORY_FILE_PATH", "value": "/tmp/graph.jsonl"},
        {"name": "AEGIS_TEST_GRAPH", "value": None},
    )
