"""A saga error's rendered traceback holds no secret: the chained cause is the original error only
when neither its text nor its chain holds one; otherwise a `ScrubbedError` stands in for it."""

from __future__ import annotations

import traceback
from typing import Any

import pytest

from aegis_nb import AegisContext, SagaRolledBack, Secret, WorkflowEngine
from aegis_nb.kernel.scrubbing import ScrubbedError, scrubbed_cause

pytestmark = pytest.mark.anyio

TOKEN = "CANARY-token-7f3a"


class Booked:
    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"booking": "B-1"})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class LeaksItsToken:
    """Fails with the token in its message, as careless code does."""

    async def execute(self, ctx: AegisContext, token: Any) -> AegisContext:
        raise ValueError(f"bad token {token.reveal()}")

    async def compensate(self, ctx: AegisContext, token: Any) -> None:
        return None


class LeaksThroughItsChain:
    """Fails with a clean message, raised from an error holding the context's secret."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        try:
            raise KeyError(ctx.metadata["api_key"].reveal())
        except KeyError as exc:
            raise RuntimeError("lookup failed") from exc

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Declines:
    async def execute(self, ctx: AegisContext) -> AegisContext:
        raise ValueError("Card Declined!")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


async def rolled_back(saga: list[Any], ctx: AegisContext) -> SagaRolledBack:
    with pytest.raises(SagaRolledBack) as caught:
        await WorkflowEngine().execute_saga(saga, ctx)
    return caught.value


async def test_a_secret_step_argument_in_the_error_text_never_reaches_the_traceback() -> None:
    error = await rolled_back([Booked(), (LeaksItsToken(), (Secret(TOKEN),), {})], AegisContext())

    rendered = "".join(traceback.format_exception(error))
    assert TOKEN not in rendered
    cause = error.__cause__
    assert isinstance(cause, ScrubbedError)
    assert (str(cause), cause.original_type) == ("ValueError: bad token ***", "ValueError")
    # Where it was raised is kept: the step's own frame is in the traceback.
    assert traceback.extract_tb(cause.__traceback__)[-1].name == "execute"
    assert str(error.report.cause) == "bad token ***"


async def test_a_secret_in_the_causes_chain_replaces_the_whole_chain() -> None:
    ctx = AegisContext({"api_key": Secret(TOKEN)})
    error = await rolled_back([Booked(), LeaksThroughItsChain()], ctx)

    rendered = "".join(traceback.format_exception(error))
    assert TOKEN not in rendered
    assert isinstance(error.__cause__, ScrubbedError)
    assert str(error.__cause__) == "RuntimeError: lookup failed"
    assert (error.__cause__.__cause__, error.__cause__.__suppress_context__) == (None, True)


async def test_an_error_without_secrets_is_chained_as_it_is() -> None:
    ctx = AegisContext({"api_key": Secret(TOKEN)})
    error = await rolled_back([Booked(), Declines()], ctx)

    assert type(error.__cause__) is ValueError
    assert error.__cause__.args == ("Card Declined!",)


def test_without_secrets_the_original_is_kept_even_if_it_mentions_stars() -> None:
    original = ValueError("*** not a secret")
    assert scrubbed_cause(original, []) is original
    assert scrubbed_cause(original, [""]) is original
