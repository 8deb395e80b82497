"""An AegisMCP server with the tools, resources and prompts the MCP conformance suite's server scenarios call.

Served over streamable HTTP by `tests/test_clients_conformance.py`
(``aegis-nb serve tests.servers.conformance_app:app --transport http``). Plain tools run through
AegisMCP's deadline wrapper and a saga workflow is served next to them, so the suite checks our
server, not a bare `MCPServer`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import (
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

from aegis_nb.kernel.context import AegisContext
from aegis_nb.server.app import AegisMCP

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

app = AegisMCP("aegis-conformance", tool_timeout=30.0)


class Note:
    """A one-step saga, so the server also serves a workflow while the suite runs."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"noted": True})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


@app.workflow("note_saga")
async def note_saga(ctx: AegisContext) -> AegisContext:
    """A saga of one step."""
    return await app.workflow_engine.execute_saga([Note()], ctx)


@app.tool()
async def test_simple_text() -> str:
    """Tests simple text content response"""
    return "This is a simple text response for testing."


@app.tool()
async def test_image_content() -> list[ImageContent]:
    """Tests image content response"""
    return [ImageContent(type="image", data=PNG, mime_type="image/png")]


@app.tool()
async def test_audio_content() -> list[AudioContent]:
    """Tests audio content response"""
    return [AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


@app.tool()
async def test_embedded_resource() -> list[EmbeddedResource]:
    """Tests embedded resource content response"""
    contents = TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return [EmbeddedResource(type="resource", resource=contents)]


@app.tool()
async def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Tests response with multiple content types (text, image, resource)"""
    contents = TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text='{"test": "data", "value": 123}',
    )
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        EmbeddedResource(type="resource", resource=contents),
    ]


@app.tool()
async def test_tool_with_logging(ctx: Context[Any, Any]) -> str:
    """Tests tool that emits log messages during execution"""
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.session.send_log_message(level="info", data=message, related_request_id=ctx.request_id)
        await anyio.sleep(0.05)
    return "Tool with logging executed successfully"


@app.tool()
async def test_tool_with_progress(ctx: Context[Any, Any]) -> str:
    """Tests tool that reports progress notifications"""
    for done in (0, 50, 100):
        await ctx.report_progress(progress=done, total=100, message=f"Completed step {done} of 100")
        await anyio.sleep(0.05)
    meta = ctx.request_context.meta or {}
    return str(meta.get("progress_token", meta.get("progressToken", 0)))


@app.tool()
async def test_error_handling() -> str:
    """Tests error response handling"""
    raise RuntimeError("This tool intentionally returns an error for testing")


class UserResponse(BaseModel):
    response: str = Field(description="User's response")


@app.tool()
async def test_elicitation(message: str, ctx: Context[Any, Any]) -> str:
    """Tests server-initiated elicitation (user input request)"""
    result = await ctx.elicit(message=message, schema=UserResponse)
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"User response: action={result.action}, content={content}"


@app.tool()
async def test_sampling(prompt: str, ctx: Context[Any, Any]) -> str:
    """Tests server-initiated sampling (LLM completion request)"""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=prompt))
    # Sent on this call's own response stream, as ctx.elicit sends its request. Without the related
    # request id the SDK sends it on the client's standalone GET stream, which the client opens in
    # the background after initializing: if the call comes first, the request is silently dropped.
    result = await ctx.session.create_message(
        messages=[message], max_tokens=100, related_request_id=ctx.request_id
    )
    reply = result.content.text if isinstance(result.content, TextContent) else "No response"
    return f"LLM response: {reply}"


class Defaults(BaseModel):
    """Every primitive type with a default (SEP-1034)."""

    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active",
        description="User status",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    verified: bool = Field(default=True, description="Verification status")


@app.tool()
async def test_elicitation_sep1034_defaults(ctx: Context[Any, Any]) -> str:
    """Tests elicitation with default values for all primitive types (SEP-1034)"""
    result = await ctx.elicit(message="Please provide user information", schema=Defaults)
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation result: action={result.action}, content={content}"


def _titled(key: str, options: dict[str, str]) -> dict[str, Any]:
    return {key: [{"const": value, "title": title} for value, title in options.items()]}


class Enums(BaseModel):
    """The enum shapes of SEP-1330."""

    untitledSingle: str = Field(
        description="Simple enum without titles",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    titledSingle: str = Field(
        description="Enum with titled options (oneOf)",
        json_schema_extra=_titled(
            "oneOf", {"low": "Low Priority", "medium": "Medium Priority", "high": "High Priority"}
        ),
    )
    untitledMulti: list[str] = Field(
        description="Multi-select without titles",
        json_schema_extra={"items": {"type": "string", "enum": ["read", "write", "execute"]}},
    )
    titledMulti: list[str] = Field(
        description="Multi-select with titled options",
        json_schema_extra={
            "items": _titled("anyOf", {"feature": "New Feature", "bug": "Bug Fix", "docs": "Documentation"})
        },
    )
    legacyEnum: str = Field(
        description="Legacy enum with enumNames",
        json_schema_extra={
            "enum": ["small", "medium", "large"],
            "enumNames": ["Small Size", "Medium Size", "Large Size"],
        },
    )


@app.tool()
async def test_elicitation_sep1330_enums(ctx: Context[Any, Any]) -> str:
    """Tests elicitation with enum schema variations per SEP-1330"""
    result = await ctx.elicit(message="Please select values using different enum schema types", schema=Enums)
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation completed: action={result.action}, content={content}"


@app.resource("test://static-text")
def static_text() -> str:
    """A static text resource for testing"""
    return "This is the content of the static text resource."


@app.resource("test://static-binary")
def static_binary() -> bytes:
    """A static binary resource (image) for testing"""
    return base64.b64decode(PNG)


@app.resource("test://template/{id}/data")
def template_data(id: str) -> str:
    """A resource template with parameter substitution"""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@app.resource("test://watched-resource")
def watched_resource() -> str:
    """A resource that can be subscribed to for updates"""
    return "Watched resource content"


@app.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A simple prompt without arguments"""
    return [UserMessage(content=TextContent(type="text", text="This is a simple prompt for testing."))]


@app.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with required arguments"""
    text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    return [UserMessage(content=TextContent(type="text", text=text))]


@app.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt that includes an embedded resource"""
    contents = TextResourceContents(
        uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
    )
    return [
        UserMessage(content=EmbeddedResource(type="resource", resource=contents)),
        UserMessage(content=TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@app.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt that includes image content"""
    return [
        UserMessage(content=ImageContent(type="image", data=PNG, mime_type="image/png")),
        UserMessage(content=TextContent(type="text", text="Please analyze the image above.")),
    ]


# The SDK's MCPServer.completion() has no annotations at all, so the decorator it returns is untyped.
@app.completion()  # type: ignore[no-untyped-call, untyped-decorator]
async def complete(
    ref: PromptReference | ResourceTemplateReference,
    argument: CompletionArgument,
    context: CompletionContext | None,
) -> Completion:
    return Completion(values=[], total=0, has_more=False)


async def _set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


async def _subscribe(ctx: Any, params: SubscribeRequestParams | UnsubscribeRequestParams) -> EmptyResult:
    return EmptyResult()


# The suite's legacy-era scenarios need these methods; MCPServer has no public hook for them.
_lowlevel = app._lowlevel_server
_lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)
_lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)
_lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, _subscribe)
