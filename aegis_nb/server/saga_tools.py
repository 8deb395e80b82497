"""The saga tools an `AegisMCP` with compensable tools serves: ``saga_begin``, ``saga_status``,
``saga_commit`` and ``saga_rollback``, over the server's `SagaHandles`.

Each answers with structure (`SagaState.to_json`, or the ticket for ``saga_begin``); a refused handle
is an error result marked refused (it did nothing), in the same words for every kind of refusal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Annotated, Any, Final

from mcp.types import CallToolResult, TextContent
from pydantic import Field
from pydantic_core import to_json

from aegis_nb.server.results import error_result
from aegis_nb.server.saga_handles import HandleRefused, SagaHandles, SagaState

SAGA_TOOLS: Final = ("saga_begin", "saga_status", "saga_commit", "saga_rollback")

NOT_SERVING: Final = "sagas are served only while the server runs (its lifespan holds them)"

Handle = Annotated[str, Field(description="The saga handle saga_begin returned.")]

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


def saga_lifespan(
    inner: Lifespan | None, serving: Callable[[Any], AbstractAsyncContextManager[None]]
) -> Lifespan:
    """`inner` (the app's own lifespan, recovery included), then the saga handles, while serving."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with nullcontext({}) if inner is None else inner(app) as state, serving(app):
            yield state

    return lifespan


def answer(structure: dict[str, Any], *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=to_json(structure).decode())],
        structured_content=structure,
        is_error=is_error,
    )


def saga_tools(
    handles: Callable[[], SagaHandles | None],
) -> dict[str, Callable[..., Awaitable[CallToolResult]]]:
    """The four tools by name, reading the registry `handles()` gives (None: not serving)."""

    async def saga_begin(
        ttl_seconds: Annotated[
            float | None,
            Field(description="Roll back after this long without a call (default: the server's)."),
        ] = None,
        deadline_seconds: Annotated[
            float | None, Field(description="Roll back after this long in any case (default: the server's).")
        ] = None,
        rollback_on_error: Annotated[
            bool, Field(description="Roll the saga back at the first failed step (default: keep it open).")
        ] = False,
    ) -> CallToolResult:
        """Begin a saga: pass the returned `saga` handle to compensable tools to make each call a step;
        end it with saga_commit or saga_rollback, or it is rolled back when idle past its TTL."""
        registry = handles()
        if registry is None:
            return error_result(NOT_SERVING, refused=True)
        try:
            ticket = await registry.begin(
                ttl=ttl_seconds, deadline_after=deadline_seconds, rollback_on_error=rollback_on_error
            )
        except ValueError as exc:
            return error_result(str(exc), refused=True)
        return answer(ticket.to_json())

    async def saga_status(saga: Handle) -> CallToolResult:
        """The saga's steps so far, each live, failed, undone, orphaned or stuck, and its TTL left."""
        return await _over(handles, lambda registry: registry.status(saga))

    async def saga_commit(saga: Handle) -> CallToolResult:
        """Commit the saga: its steps stand. A finished saga answers with its final status."""
        return await _over(handles, lambda registry: registry.commit(saga))

    async def saga_rollback(
        saga: Handle,
        reason: Annotated[str, Field(description="Why, in a few words (kept in the run's record).")] = "",
    ) -> CallToolResult:
        """Undo every step of the saga that stands, newest first. A finished saga answers unchanged."""
        return await _over(handles, lambda registry: registry.rollback(saga, reason or "the agent asked"))

    return {
        "saga_begin": saga_begin,
        "saga_status": saga_status,
        "saga_commit": saga_commit,
        "saga_rollback": saga_rollback,
    }


async def _over(
    handles: Callable[[], SagaHandles | None], act: Callable[[SagaHandles], Awaitable[SagaState]]
) -> CallToolResult:
    registry = handles()
    if registry is None:
        return error_result(NOT_SERVING, refused=True)
    try:
        state = await act(registry)
    except HandleRefused as exc:
        return error_result(str(exc), refused=True)
    return answer(state.to_json())
