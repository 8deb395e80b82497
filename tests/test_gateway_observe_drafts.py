"""``aegis-nb gateway --observe`` drafts a policy from the upstreams' listings alone: read only from
``readOnlyHint``, compensable where an undo tool sits beside a tool (its arguments bound to the result
fields the output schema names), irreversible otherwise; secrets and idempotency keys named; every
entry marked as a guess, which the gateway then lists when it starts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from typing_extensions import TypedDict

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.gateway.observe import observe, upstream_from


class Rental(TypedDict):
    rental_id: str
    car: str


def rentals() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("rentals")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def list_cars(city: str) -> list[str]:
        return [city]

    @server.tool()
    async def rent_car(city: str, card_token: str, idempotency_key: str = "") -> Rental:
        return Rental(rental_id="R1", car=city)

    @server.tool()
    async def cancel_car(rental_id: str, city: str = "") -> dict[str, bool]:
        return {"changed": True}

    @server.tool()
    async def email_receipt(to: str) -> str:
        return to

    return server


DRAFT = """\
# A starting gateway policy, written by `aegis-nb gateway --observe` from the upstreams' tool
# listings. Every entry is a guess: check each, then delete its `guess = true`.

[upstreams.rentals]
url = "http://127.0.0.1:9100/mcp"

[tools.list_cars]
# guess: its readOnlyHint says it changes nothing
kind = "read_only"
guess = true

[tools.rent_car]
# guess: the undo tool's name says it undoes this one
kind = "compensable"
undo = "cancel_car"
undo_args = {rental_id = "/result/rental_id", city = "/arguments/city"}
idempotency_arg = "idempotency_key"
secret = ["card_token"]
guess = true

[tools.cancel_car]
# guess: it undoes another tool; in a saga, saga_rollback undoes instead
kind = "irreversible"
guess = true

[tools.email_receipt]
# guess: nothing says it is read only or can be undone
kind = "irreversible"
guess = true
"""


@pytest.mark.anyio
async def test_a_draft_guesses_each_tool_from_its_listing_and_says_so() -> None:
    spec = replace(upstream_from("http://127.0.0.1:9100/mcp"), name="rentals")
    assert await observe([(spec, rentals())]) == DRAFT


@pytest.mark.anyio
async def test_the_gateway_lists_the_guesses_it_serves_when_it_starts() -> None:
    async with Gateway(parse_policy(DRAFT, "draft.toml"), upstreams={"rentals": rentals()}) as gateway:
        assert gateway.startup_lines() == [
            "gateway: 4 tools from 1 upstream(s): 'rentals' (http://127.0.0.1:9100/mcp)",
            "gateway: cancel_car is irreversible, marked as a guess in the policy (guess = true)",
            "gateway: email_receipt is irreversible, marked as a guess in the policy (guess = true)",
            "gateway: list_cars is read_only, marked as a guess in the policy (guess = true)",
            "gateway: rent_car is compensable, marked as a guess in the policy (guess = true)",
        ]


def test_upstreams_are_named_after_their_host_or_command_and_numbered_when_taken() -> None:
    names: list[str] = []
    for text in ("http://agency.example:80/mcp", "aegis-nb mock --ledger x.db", "/usr/bin/aegis-nb mock"):
        names.append(upstream_from(text, names).name)
    assert names == ["agency-example", "aegis-nb", "aegis-nb-2"]
    assert upstream_from("aegis-nb mock --ledger 'my ledger.db'").args == ("mock", "--ledger", "my ledger.db")
    with pytest.raises(ValueError, match="an empty upstream"):
        upstream_from("  ")
