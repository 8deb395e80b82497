"""A compensable tool's runner: with a saga handle the call is that saga's next step, else a plain call.

The handle comes from the ``saga`` argument the runner publishes (so a model can pass it) or from the
request's ``_meta["aegis-nb/saga"]`` (for hosts that set it). Inside a saga, the tool's arguments
marked secret are held by its step for the call alone (never in events, the journal, status, reports
or logs), the call gets the step's idempotency key, and the result says which step it was
(``_meta["aegis-nb/step"]``). The handle answers only the caller that began its saga.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from mcp.types import CallToolResult, TextContent
from pydantic import Field
from pydantic_core import to_json

from aegis_nb.kernel.errors import ToolError, ToolTimeoutError
from aegis_nb.kernel.scrubbing import exception_text, scrub
from aegis_nb.kernel.values import thaw
from aegis_nb.server.compensable import SAGA_ARGUMENT, SAGA_META_KEY, STEP_META_KEY, CompensableCall
from aegis_nb.server.results import error_result, timed_out_result
from aegis_nb.server.saga_handles import HandleRefused, NotOpen, SagaHandles
from aegis_nb.server.saga_tools import Owner, Registry
from aegis_nb.server.signature import request_meta

HandleArgument = Annotated[
    str,
    Field(description="A handle from saga_begin: the call becomes a step of that saga, undone on rollback."),
]


def compensable_runner(
    plain: Callable[..., Awaitable[Any]],
    step: CompensableCall,
    secret: frozenset[str],
    handles: Registry,
    request_param: str,
    refused: Callable[[Mapping[str, Any]], CallToolResult | None],
    owner: Owner,
) -> Callable[..., Awaitable[Any]]:
    """`plain` (the tool's ordinary runner) published with the ``saga`` argument added; see above.

    `refused` checks the arguments against the published schema first (None: they fit); `owner`
    tells who the request's caller is.
    """

    async def run_compensable(**kwargs: Any) -> Any:
        request = kwargs.pop(request_param, None)
        refusal = refused(kwargs)
        if refusal is not None:
            return refusal
        kwargs[request_param] = request
        handle = kwargs.pop(SAGA_ARGUMENT, "")
        meta = request_meta(kwargs.get(request_param))
        if not handle and meta is not None:
            handle = meta.get(SAGA_META_KEY) or ""
        if not handle:
            return await plain(**kwargs)
        request = kwargs.pop(request_param, None)
        registry = handles(request)
        if registry is None:
            return error_result("sagas are served only while the server runs", refused=True)
        caller = owner(request)
        if step.key_argument is not None:
            kwargs.pop(step.key_argument, None)  # inside a saga, the step's own key is sent
        hidden = tuple(value for name, value in kwargs.items() if name in secret and isinstance(value, str))
        arguments = {name: value for name, value in kwargs.items() if name not in secret}
        arguments.update(step.hold({name: kwargs[name] for name in secret if name in kwargs}))
        try:
            return await _run_step(registry, handle, caller, step, arguments, hidden)
        finally:
            step.release(arguments)  # no-op once its execute took them; else never kept

    published = inspect.signature(plain)
    params = list(published.parameters.values())
    if any(p.name == SAGA_ARGUMENT for p in params):
        from aegis_nb.kernel.errors import SagaDefinitionError

        raise SagaDefinitionError(
            f"compensable tool {step.name!r}: its parameter {SAGA_ARGUMENT!r} is the saga handle's name"
        )
    handle_param = inspect.Parameter(
        SAGA_ARGUMENT, inspect.Parameter.KEYWORD_ONLY, default="", annotation=HandleArgument
    )
    run_compensable.__signature__ = published.replace(parameters=[*params, handle_param])  # type: ignore[attr-defined]
    run_compensable.__annotations__ = {**plain.__annotations__, SAGA_ARGUMENT: HandleArgument}
    for attribute in ("__name__", "__qualname__", "__doc__", "_aegis_wrapped"):
        setattr(run_compensable, attribute, getattr(plain, attribute, None))
    return run_compensable


async def _run_step(
    registry: SagaHandles,
    handle: Any,
    caller: str | None,
    step: CompensableCall,
    arguments: dict[str, Any],
    hidden: tuple[str, ...],
) -> CallToolResult:
    """Run the call as the saga's next step; every outcome as a result (`hidden`: its secret values)."""
    try:
        done = await registry.step(handle, step, (), arguments, owner=caller)
    except HandleRefused as exc:
        return error_result(str(exc), refused=True)
    except NotOpen as exc:
        state = exc.state.to_json()
        if exc.cut_off:  # it ran, and may have acted: the state says whether that was undone
            text = f"{step.name} was cancelled when the saga ended: {exc.state.ended_as()}"
            return error_result(text, refused=False, structured=state)
        return error_result(f"{exc}; nothing was done", refused=True, structured=state)
    except ToolError as exc:
        return error_result(scrub(exc.message, hidden), refused=exc.refused, structured=exc.structured)
    except ToolTimeoutError as exc:
        return timed_out_result(scrub(str(exc), hidden), exc)
    except Exception as exc:
        # The tool's own code raised: it may have acted (the step is then in doubt).
        text = scrub(exception_text(exc), hidden)
        return error_result(f"{step.name} failed: {type(exc).__name__}: {text}", refused=False)
    result = thaw(done.context.metadata.get(step.result_key(done.index)), reveal=True)
    structured = result if isinstance(result, dict) else {"result": result}
    return CallToolResult(
        content=[TextContent(type="text", text=to_json(structured).decode())],
        structured_content=structured,
        _meta={STEP_META_KEY: {"index": done.index, "idempotency_key": done.context.idempotency_key}},
    )


def secret_names(names: object, parameters: Mapping[str, inspect.Parameter], tool: str) -> frozenset[str]:
    """The tool's parameters marked secret, checked to be parameters of its own."""
    from aegis_nb.kernel.errors import SagaDefinitionError

    found: frozenset[str] = frozenset([names] if isinstance(names, str) else names)  # type: ignore[call-overload]
    unknown = sorted(found - set(parameters))
    if unknown:
        raise SagaDefinitionError(f"tool {tool!r}: secret names no parameter of it: {', '.join(unknown)}")
    return found
