"""An upstream reached by a URL with credentials (``http://svc:PASSWORD@host/mcp?api_key=KEY``) never
has them shown: not in the gateway's start-up line, nor in its HTTP client's per-request log lines,
nor in errors about it, nor in the policy ``--observe`` drafts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from mcp import Client
from mcp.types import Tool

from aegis_nb.gateway.upstream import UpstreamLink, UpstreamLost, Upstreams, UpstreamTool
from aegis_nb.server.session import ToolSession
from tests.gateway_process_support import gateway_over_http
from tests.servers.launch import aegis_nb, free_port, http_server

PASSWORD = "pw-3f9a1c"
KEY = "key-8d2e7b"


def with_credentials(url: str) -> str:
    """`url` (``http://127.0.0.1:PORT/mcp``) with a user, a password and an API key in its query."""
    return url.replace("http://", f"http://svc:{PASSWORD}@") + f"?api_key={KEY}&region=eu"


def hidden(url: str) -> str:
    return url.replace("http://", "http://***@") + "?api_key=***&region=***"


@pytest.mark.anyio
async def test_a_served_gateway_logs_its_upstream_url_without_credentials(tmp_path: Path) -> None:
    async with http_server("mock") as agency:
        policy = tmp_path / "policy.toml"
        policy.write_text(f'[upstreams.agency]\nurl = "{with_credentials(agency.url)}"\n')
        async with gateway_over_http(policy) as gateway, Client(gateway.url) as client:
            found = await client.call_tool("search_flights", {"destination": "Oslo"})
            assert found.is_error is False
    log = "\n".join(gateway.stderr)
    assert (PASSWORD in log, KEY in log) == (False, False)
    assert f"gateway: 9 tools from 1 upstream(s): 'agency' ({hidden(agency.url)})" in gateway.stderr
    requests = [line for line in gateway.stderr if line.startswith("HTTP Request: POST")]
    assert requests  # httpx logs every request the gateway makes: each with the URL redacted
    assert {line.split(" ")[3] for line in requests} == {hidden(agency.url)}


def test_errors_and_drafts_about_an_upstream_never_show_its_credentials(tmp_path: Path) -> None:
    plain = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    policy = tmp_path / "down.toml"
    policy.write_text(f'[upstreams.agency]\nurl = "{with_credentials(plain)}"\n')
    refused = aegis_nb("gateway", str(policy))
    observed = aegis_nb("gateway", "--observe", with_credentials(plain))
    outputs = [refused.stdout, refused.stderr, observed.stdout, observed.stderr]
    assert [(PASSWORD in text, KEY in text) for text in outputs] == [(False, False)] * 4
    cannot = f"cannot connect to the MCP server at {plain}: ConnectError: All connection attempts failed"
    assert (refused.returncode, refused.stderr) == (1, f"aegis-nb gateway: {cannot}\n")
    assert (observed.returncode, observed.stderr) == (1, f"aegis-nb gateway: {cannot}\n")


@pytest.mark.anyio
async def test_an_upstream_lost_mid_call_is_named_without_credentials() -> None:
    """`UpstreamLost` quotes the transport's error, which may hold the URL."""

    class Broken:
        async def call_tool(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError(f"POST {with_credentials('http://svc.example/mcp')} failed")

    link = UpstreamLink("agency", "http://svc.example/mcp")
    link.session = cast(ToolSession, SimpleNamespace(client=Broken()))
    tool = Tool(name="book", input_schema={"type": "object"})
    upstreams = Upstreams({"agency": link}, {"book": UpstreamTool("agency", tool)})
    with pytest.raises(UpstreamLost) as lost:
        await upstreams.call("book", {})
    assert str(lost.value) == (
        "upstream 'agency' stopped answering during 'book': RuntimeError: "
        f"POST {hidden('http://svc.example/mcp')} failed"
    )
