"""ToolExecutor: awaitables run under the context deadline; past it, ToolTimeoutError."""

from __future__ import annotations

import anyio
import pytest

from aegis_nb import AegisContext, AegisError, ToolExecutor, ToolTimeoutError

pytestmark = pytest.mark.anyio


async def double(x: int) -> int:
    await anyio.lowlevel.checkpoint()
    return 2 * x


async def test_returns_the_result_within_the_deadline() -> None:
    assert await ToolExecutor().run(AegisContext().with_timeout(5), double, 21) == 42
    assert await ToolExecutor().run(AegisContext(), double, 4) == 8


async def test_raises_tool_timeout_naming_the_call_and_budget() -> None:
    with pytest.raises(ToolTimeoutError) as raised:
        await ToolExecutor().run_named(
            "search_flights", AegisContext().with_timeout(0.01), anyio.sleep_forever
        )
    error = raised.value
    assert isinstance(error, TimeoutError)
    assert isinstance(error, AegisError)
    assert error.step == "search_flights"
    assert error.budget is not None
    assert 0 < error.budget <= 0.01
    assert str(error).startswith("step 'search_flights' exceeded its deadline (budget ")


async def test_a_deadline_already_past_runs_nothing() -> None:
    ran = []

    async def record() -> None:
        ran.append(True)

    ctx = AegisContext(deadline=anyio.current_time() - 1)
    with pytest.raises(ToolTimeoutError, match="had no time left"):
        await ToolExecutor().run(ctx, record)
    assert ran == []


async def test_an_outer_cancellation_is_not_turned_into_a_timeout() -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await ToolExecutor().run(AegisContext().with_timeout(5), anyio.sleep_forever)
    assert scope.cancelled_caught
