"""The saga tools an `AegisMCP` with compensable tools serves: ``saga_begin``, ``saga_status``,
``saga_commit`` and ``saga_rollback``, over the server's `SagaHandles`.

Each answers with structure (`SagaState.to_json`, or the ticket for ``saga_begin``); a refused handle
is an error result marked refused (it did nothing), in the same words for every kind of refusal, and
so is a ``saga_begin`` past the server's limits. ``saga_commit`` and ``saga_rollback`` answer
``is_error`` whenever the saga did not end as asked (a commit that lost to a rollback or the TTL, a
rollback that lost to a commit or ended stuck), with the status it did end in as the structure.
Every tool is given the caller's identity (`Owner`), which a handle is bound to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Annotated, Any, Final

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import Field
from pydantic_core import to_json

from aegis_nb.server.results import error_result
from aegis_nb.server.saga_handles import HandleRefused, SagaHandles, SagaLimitReached
from aegis_nb.server.saga_state import Phase, SagaState

SAGA_TOOLS: Final = ("saga_begin", "saga_status", "saga_commit", "saga_rollback")

NOT_SERVING: Final = "sagas are served only while the server runs (its lifespan holds them)"

Handle = Annotated[str, Field(description="The saga handle saga_begin returned.")]

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]

Owner = Callable[[Context[Any, Any] | None], str | None]
"""The identity of a request's caller (`aegis_nb.server.callers.Callers.of`)."""


Registry = Callable[[Context[Any, Any] | None], SagaHandles | None]
"""The registry serving a request (None: sagas are not served now)."""


def saga_lifespan(
    inner: Lifespan | None,
    serving: Callable[[Any, object], AbstractAsyncContextManager[None]],
    connected: Callable[[object], AbstractAsyncContextManager[None]],
) -> Lifespan:
    """`inner` (the app's own lifespan, recovery included), then the saga handles, while serving;
    each run is `connected` as the connection its requests come over (see `Callers.connected`), and
    `serving` is given the run's state, which its requests see (see `SagaServing`)."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with (
            nullcontext({}) if inner is None else inner(app) as state,
            connected(state),
            serving(app, state),
        ):
            yield state

    return lifespan


def answer(structure: dict[str, Any], *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=to_json(structure).decode())],
        structured_content=structure,
        is_error=is_error,
    )


def saga_tools(handles: Registry, owner: Owner) -> dict[str, Callable[..., Awaitable[CallToolResult]]]:
    """The four tools by name, over the registry `handles(request)` gives (None: not serving), each
    saga bound to `owner` of the request that began it."""

    async def saga_begin(
        ttl_seconds: Annotated[
            float | None,
            Field(description="Roll back after this long without a call (default and most: the server's)."),
        ] = None,
        deadline_seconds: Annotated[
            float | None,
            Field(description="Roll back after this long in any case (default and most: the server's)."),
        ] = None,
        rollback_on_error: Annotated[
            bool, Field(description="Roll the saga back at the first failed step (default: keep it open).")
        ] = False,
        ctx: Context[Any, Any] | None = None,
    ) -> CallToolResult:
        """Begin a saga: pass the returned `saga` handle to compensable tools to make each call a step;
        end it with saga_commit or saga_rollback, or it is rolled back when idle past its TTL.
        The TTL and deadline may be shorter than the server's, not longer."""
        registry = handles(ctx)
        if registry is None:
            return error_result(NOT_SERVING, refused=True)
        try:
            ticket = await registry.begin(
                ttl=ttl_seconds,
                deadline_after=deadline_seconds,
                rollback_on_error=rollback_on_error,
                owner=owner(ctx),
            )
        except (ValueError, SagaLimitReached) as exc:
            return error_result(f"no saga was begun: {exc}", refused=True)
        return answer(ticket.to_json())

    async def saga_status(saga: Handle, ctx: Context[Any, Any] | None = None) -> CallToolResult:
        """The saga's steps so far, each live, failed, undone, orphaned or stuck, and its TTL left."""
        return await _over(handles(ctx), lambda registry: registry.status(saga, owner=owner(ctx)))

    async def saga_commit(saga: Handle, ctx: Context[Any, Any] | None = None) -> CallToolResult:
        """Commit the saga: its steps stand. An error if it ended otherwise (its status says how)."""
        return await _over(
            handles(ctx), lambda registry: registry.commit(saga, owner=owner(ctx)), wanted=Phase.COMMITTED
        )

    async def saga_rollback(
        saga: Handle,
        reason: Annotated[str, Field(description="Why, in a few words (kept in the run's record).")] = "",
        ctx: Context[Any, Any] | None = None,
    ) -> CallToolResult:
        """Undo every step of the saga that stands, newest first. An error if it did not end rolled
        back: committed already, or stuck with something left standing (its status says what)."""
        return await _over(
            handles(ctx),
            lambda registry: registry.rollback(saga, reason or "the agent asked", owner=owner(ctx)),
            wanted=Phase.ROLLED_BACK,
        )

    return {
        "saga_begin": saga_begin,
        "saga_status": saga_status,
        "saga_commit": saga_commit,
        "saga_rollback": saga_rollback,
    }


async def _over(
    registry: SagaHandles | None,
    act: Callable[[SagaHandles], Awaitable[SagaState]],
    *,
    wanted: Phase | None = None,
) -> CallToolResult:
    """`act`'s state as the answer; an error when `wanted` (the end asked for) is not how it ended."""
    if registry is None:
        return error_result(NOT_SERVING, refused=True)
    try:
        state = await act(registry)
    except HandleRefused as exc:
        return error_result(str(exc), refused=True)
    if wanted is None or state.phase is wanted:
        return answer(state.to_json())
    asked = "committed" if wanted is Phase.COMMITTED else "rolled back"
    return error_result(
        f"the saga was not {asked}: it ended {state.ended_as()}", refused=False, structured=state.to_json()
    )
