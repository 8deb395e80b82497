"""How a registered function meets the SDK: the signature it publishes, and the request it receives.

The SDK builds a tool's input schema from its function's signature and injects its `Context` into
a parameter annotated with it. `AegisMCP` registers runners that publish the user function's
parameters (a workflow's without its `AegisContext`) and receive the SDK `Context` under
`REQUEST_PARAM`, unless the function takes one itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context

from aegis_nb.kernel.errors import SagaDefinitionError

REQUEST_PARAM = "aegis_request"
"""Name of the SDK `Context` parameter added to the functions we register (it is not in the schema)."""


def request_meta(request: Context[Any, Any] | None) -> Mapping[str, Any] | None:
    """The `_meta` of the request being served, if any."""
    context = request_context(request)
    return None if context is None else context.meta


def request_context(request: Context[Any, Any] | None) -> ServerRequestContext[Any, Any] | None:
    """The SDK's context of the request being served, if any.

    `Context` keeps it in a pydantic private attribute, and reading one through pydantic's
    ``__getattr__`` costs ~4 µs (~6 µs amid a busy server) on every call: it is read from the
    model's private store instead, with the public property as the fallback should the SDK
    rename it.
    """
    if request is None:
        return None
    private = getattr(request, "__pydantic_private__", None)
    if isinstance(private, dict) and SDK_REQUEST_ATTRIBUTE in private:
        found: ServerRequestContext[Any, Any] | None = private[SDK_REQUEST_ATTRIBUTE]
        return found
    try:
        return request.request_context
    except ValueError:  # called outside a request (e.g. MCPServer.call_tool without a context)
        return None


SDK_REQUEST_ATTRIBUTE = "_request_context"
"""Where the SDK's `Context` keeps the request context (`Context.request_context` reads it)."""


def publish_signature(
    runner: Callable[..., Any],
    params: list[inspect.Parameter],
    returns: Any,
    name: str,
    doc: str | None,
    *,
    add_request: bool = True,
) -> None:
    """Give `runner` the parameters the SDK should publish, plus the SDK `Context` it must receive."""
    kinds = inspect.Parameter
    published = [p for p in params if p.kind is not kinds.VAR_KEYWORD]
    if any(p.kind in (kinds.VAR_POSITIONAL, kinds.POSITIONAL_ONLY) for p in published):
        raise SagaDefinitionError(f"{name!r}: *args and positional-only parameters cannot be MCP arguments")
    published = [p.replace(kind=kinds.KEYWORD_ONLY) for p in published]
    if add_request:
        published.append(kinds(REQUEST_PARAM, kinds.KEYWORD_ONLY, annotation=Context))
    runner.__signature__ = inspect.Signature(published, return_annotation=returns)  # type: ignore[attr-defined]
    runner.__annotations__ = {
        **{p.name: p.annotation for p in published if p.annotation is not inspect.Parameter.empty},
        "return": returns,
    }
    runner.__name__ = name
    runner.__qualname__ = name
    runner.__doc__ = doc
    runner._aegis_wrapped = True  # type: ignore[attr-defined]
