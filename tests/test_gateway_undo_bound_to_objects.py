"""An undo bound to an object- or list-valued result field (``/result/relations``, as ``--observe``
drafts for the reference memory server's ``create_relations``) is sent as the plain JSON the tool
answered: the rollback undoes the call and the saga ends rolled back, not stuck."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from typing_extensions import TypedDict

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy

pytestmark = pytest.mark.anyio


class Relation(TypedDict):
    source: str
    target: str
    kind: str


class Relations(TypedDict):
    relations: list[Relation]
    owner: dict[str, Any]


POLICY = """\
[upstreams.memory]
url = "http://memory.invalid/mcp"

[tools.create_relations]
kind = "compensable"
undo = "delete_relations"
undo_args = { relations = "/result/relations", owner = "/result/owner" }
"""


def memory(graph: set[tuple[str, str, str]], undos: list[dict[str, Any]]) -> MCPServer[Any]:
    """A knowledge graph's relations (`graph`), and every undo call's arguments as received (`undos`)."""
    server: MCPServer[Any] = MCPServer("memory")

    @server.tool()
    async def create_relations(relations: list[Relation]) -> Relations:
        graph.update((r["source"], r["target"], r["kind"]) for r in relations)
        return Relations(relations=relations, owner={"name": "ada", "tags": ["a", {"deep": [1, 2]}]})

    @server.tool()
    async def delete_relations(relations: list[Relation], owner: dict[str, Any]) -> dict[str, bool]:
        undos.append({"relations": relations, "owner": owner})
        graph.difference_update((r["source"], r["target"], r["kind"]) for r in relations)
        return {"changed": True}

    return server


async def test_an_undo_bound_to_a_list_of_objects_receives_them_and_the_saga_rolls_back() -> None:
    graph: set[tuple[str, str, str]] = set()
    undos: list[dict[str, Any]] = []
    relations = [
        {"source": "ada", "target": "babbage", "kind": "knows"},
        {"source": "babbage", "target": "engine", "kind": "built"},
    ]
    engine = WorkflowEngine(compensation_retry=RetryPolicy(attempts=2, initial_delay=0.0))
    gateway = Gateway(
        parse_policy(POLICY, "policy.toml"), upstreams={"memory": memory(graph, undos)}, engine=engine
    )
    async with Client(gateway) as client:
        begun = await client.call_tool("saga_begin", {})
        saga = (begun.structured_content or {})["saga"]
        created = await client.call_tool("create_relations", {"relations": relations, "saga": saga})
        standing = set(graph)
        rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "changed my mind"})
    assert created.is_error is False
    assert standing == {("ada", "babbage", "knows"), ("babbage", "engine", "built")}
    status = rolled.structured_content or {}
    assert (rolled.is_error, status["status"], status["steps"]) == (
        False,
        "rolled_back",
        [{"index": 0, "name": "create_relations", "state": "undone"}],
    )
    assert undos == [{"relations": relations, "owner": {"name": "ada", "tags": ["a", {"deep": [1, 2]}]}}]
    assert graph == set()
