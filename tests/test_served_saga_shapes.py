"""A workflow served by AegisMCP may use either shape of saga, over the real MCP SDK.

`tests/servers/shaped_trips.py` serves a saga built step by step (``engine.saga()``, which books the
hotel and the car together only if the flight is within budget, and rolls back at its own request
otherwise) and a list holding a parallel group. Called in-process (the SDK's direct dispatch and its
JSON-RPC one) and over streamable HTTP, each returns its whole structured result, and every event
becomes a progress notification: a dynamic saga's steps are counted as they come (it has no plan),
a group's members are marked as running in parallel, and their interleaved events each name their
own step. Members start in the order their tasks are scheduled, so only their two starts may come
in either order.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
import pytest
from mcp import Client

from tests.servers.launch import http_server
from tests.servers.shaped_trips import app

pytestmark = pytest.mark.anyio

Mode = Literal["auto", "legacy"]
MODES: list[Mode] = ["auto", "legacy"]  # in-process direct dispatch, and JSON-RPC


class ProgressLog:
    """A progress callback keeping what arrives; `messages()` waits until `expected` are in.

    The client runs each callback in a task of its own, so they may finish after the call returns,
    and in any order: the progress value gives the order.
    """

    def __init__(self, expected: int) -> None:
        self.received: list[tuple[float, str | None]] = []
        self.expected = expected
        self.complete = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.received.append((progress, message))
        if len(self.received) == self.expected:
            self.complete.set()

    async def messages(self) -> list[str | None]:
        with anyio.fail_after(10):
            await self.complete.wait()
        return settled([message for _, message in sorted(self.received)])


def settled(messages: list[str | None]) -> list[str | None]:
    """`messages` with each run of parallel members' starts in member order (they start together)."""
    out = list(messages)
    start = 0
    while start < len(out):
        end = start
        while end < len(out) and "(in parallel): executing" in (out[end] or ""):
            end += 1
        out[start:end] = sorted(out[start:end], key=str)
        start = end + 1
    return out


def timeless(structured: dict[str, Any] | None) -> dict[str, Any]:
    """The structured result with its run id and measured durations replaced."""
    assert structured is not None
    assert structured["duration_ms"] >= 0
    steps = [{**step, "duration_ms": 0} for step in structured["steps"]]
    shown = {**structured, "run_id": "RUN", "duration_ms": 0, "steps": steps}
    if "report" in shown:
        shown["report"] = {**shown["report"], "run_id": "RUN"}
    return shown


FLIGHT = {"price_cents": 42_000}
HOTEL = {"price_cents": 30_000}
CAR = {"price_cents": 9_000}


def timings(*names: str) -> list[dict[str, Any]]:
    return [{"index": index, "name": name, "duration_ms": 0} for index, name in enumerate(names)]


PLANNED_AND_BOOKED = {
    "status": "committed",
    "run_id": "RUN",
    "metadata": {"flight": FLIGHT, "hotel": HOTEL, "car": CAR},
    "steps": timings("flight", "hotel", "car"),
    "duration_ms": 0,
}
PLANNED_AND_BOOKED_PROGRESS = [
    "plan_trip started",
    "step 1: executing flight",
    "step 1: flight done",
    "step 2 (in parallel): executing hotel",
    "step 3 (in parallel): executing car",
    "step 2 (in parallel): hotel done",
    "step 3 (in parallel): car done",
    "plan_trip committed",
]


@pytest.mark.parametrize("mode", MODES)
async def test_a_dynamic_saga_served_books_the_group_it_chose_and_commits(mode: Mode) -> None:
    progress = ProgressLog(len(PLANNED_AND_BOOKED_PROGRESS))
    async with Client(app, mode=mode) as client:
        result = await client.call_tool("plan_trip", {"budget_cents": 50_000}, progress_callback=progress)
        messages = await progress.messages()
    assert (result.is_error, timeless(result.structured_content)) == (False, PLANNED_AND_BOOKED)
    assert messages == PLANNED_AND_BOOKED_PROGRESS


OVER_BUDGET_SUMMARY = "the flight is over budget — rolled back: flight"
OVER_BUDGET_PROGRESS = [
    "plan_trip started",
    "step 1: executing flight",
    "step 1: flight done",
    "compensating flight",
    "flight undone",
    f"plan_trip rolled back: {OVER_BUDGET_SUMMARY}",
]


@pytest.mark.parametrize("mode", MODES)
async def test_a_dynamic_saga_served_rolls_back_at_its_own_request(mode: Mode) -> None:
    progress = ProgressLog(len(OVER_BUDGET_PROGRESS))
    async with Client(app, mode=mode) as client:
        result = await client.call_tool("plan_trip", {"budget_cents": 100}, progress_callback=progress)
        messages = await progress.messages()
    assert result.is_error is True
    shown = timeless(result.structured_content)
    report = shown.pop("report")
    assert shown == {
        "status": "rolled_back",
        "run_id": "RUN",
        "metadata": {},
        "steps": timings("flight"),
        "duration_ms": 0,
        "summary": OVER_BUDGET_SUMMARY,
    }
    assert (report["status"], report["failure_kind"], report["cause"], report["failed_step"]) == (
        "rolled_back",
        "requested",
        {"type": "RollbackRequested", "message": "the flight is over budget"},
        None,
    )
    assert [step["name"] for step in report["compensated"]] == ["flight"]
    assert messages == OVER_BUDGET_PROGRESS


CAR_DECLINED_SUMMARY = "car declined — rolled back: hotel, flight"


def car_declined_progress(saga: str, of: str) -> list[str]:
    """The progress of a trip whose car is declined while the hotel is booked; `of` is " of 4" for
    a list's plan, empty for a dynamic saga's."""
    return [
        f"{saga} started" + (": flight -> hotel -> car -> card" if of else ""),
        f"step 1{of}: executing flight",
        f"step 1{of}: flight done",
        f"step 2{of} (in parallel): executing hotel",
        f"step 3{of} (in parallel): executing car",
        f"step 2{of} (in parallel): hotel done",
        f"step 3{of} (in parallel): car failed: car declined",
        "compensating hotel",
        "hotel undone",
        "compensating flight",
        "flight undone",
        f"{saga} rolled back: {CAR_DECLINED_SUMMARY}",
    ]


def car_declined_result(report: dict[str, Any] | None) -> dict[str, Any]:
    """The structured result of a trip whose car was declined; without `report` if None."""
    result = {
        "status": "rolled_back",
        "run_id": "RUN",
        "metadata": {},
        "steps": timings("flight", "hotel"),
        "duration_ms": 0,
        "summary": CAR_DECLINED_SUMMARY,
    }
    return result if report is None else {**result, "report": report}


def car_declined_report(saga: str, plan: list[str]) -> dict[str, Any]:
    return {
        "run_id": "RUN",
        "saga": saga,
        "status": "rolled_back",
        "steps": plan,
        "succeeded": [{"index": 0, "name": "flight"}, {"index": 1, "name": "hotel"}],
        "failed_step": {"index": 2, "name": "car"},
        "failure_kind": "error",
        "cause": {"type": "RuntimeError", "message": "car declined"},
        "compensated": [{"index": 1, "name": "hotel"}, {"index": 0, "name": "flight"}],
        "compensation_failures": [],
        "left_standing": [],
    }


@pytest.mark.parametrize("mode", MODES)
async def test_a_dynamic_saga_served_undoes_the_member_that_succeeded_when_its_sibling_fails(
    mode: Mode,
) -> None:
    expected = car_declined_progress("plan_trip", "")
    progress = ProgressLog(len(expected))
    async with Client(app, mode=mode) as client:
        result = await client.call_tool(
            "plan_trip", {"budget_cents": 50_000, "car_declined": True}, progress_callback=progress
        )
        messages = await progress.messages()
    assert result.is_error is True
    shown = timeless(result.structured_content)
    report = shown.pop("report")
    assert shown == car_declined_result(None)
    assert [step["name"] for step in report["compensated"]] == ["hotel", "flight"]
    assert (report["failed_step"]["name"], report["cause"]) == (
        "car",
        {"type": "RuntimeError", "message": "car declined"},
    )
    assert messages == expected


async def test_a_dynamic_saga_served_reports_each_step_with_its_index() -> None:
    async with Client(app) as client:
        result = await client.call_tool("plan_trip", {"budget_cents": 50_000, "car_declined": True})
    assert timeless(result.structured_content)["report"] == car_declined_report(
        "plan_trip", ["flight", "hotel", "car"]
    )


BOOKED_PROGRESS = [
    "book_trip started: flight -> hotel -> car -> card",
    "step 1 of 4: executing flight",
    "step 1 of 4: flight done",
    "step 2 of 4 (in parallel): executing hotel",
    "step 3 of 4 (in parallel): executing car",
    "step 2 of 4 (in parallel): hotel done",
    "step 3 of 4 (in parallel): car done",
    "step 4 of 4: executing card",
    "step 4 of 4: card done",
    "book_trip committed",
]
BOOKED = {
    "status": "committed",
    "run_id": "RUN",
    "metadata": {"flight": FLIGHT, "hotel": HOTEL, "car": CAR, "card": {"price_cents": 0}},
    "steps": timings("flight", "hotel", "car", "card"),
    "duration_ms": 0,
}


@pytest.mark.parametrize("mode", MODES)
async def test_a_list_with_a_parallel_group_served_commits_with_the_members_merged(mode: Mode) -> None:
    progress = ProgressLog(len(BOOKED_PROGRESS))
    async with Client(app, mode=mode) as client:
        result = await client.call_tool("book_trip", {}, progress_callback=progress)
        messages = await progress.messages()
    assert (result.is_error, timeless(result.structured_content)) == (False, BOOKED)
    assert messages == BOOKED_PROGRESS


@pytest.mark.parametrize("mode", MODES)
async def test_a_list_with_a_parallel_group_served_rolls_back_when_a_member_fails(mode: Mode) -> None:
    expected = car_declined_progress("book_trip", " of 4")
    progress = ProgressLog(len(expected))
    async with Client(app, mode=mode) as client:
        result = await client.call_tool("book_trip", {"car_declined": True}, progress_callback=progress)
        messages = await progress.messages()
    assert result.is_error is True
    assert timeless(result.structured_content) == car_declined_result(
        car_declined_report("book_trip", ["flight", "hotel", "car", "card"])
    )
    assert messages == expected


async def test_both_shapes_served_over_streamable_http_by_aegis_nb_serve() -> None:
    planned = ProgressLog(len(PLANNED_AND_BOOKED_PROGRESS))
    declined = car_declined_progress("book_trip", " of 4")
    booked = ProgressLog(len(declined))
    async with (
        http_server("serve", "tests.servers.shaped_trips:app") as server,
        Client(server.url) as client,
    ):
        dynamic = await client.call_tool("plan_trip", {"budget_cents": 50_000}, progress_callback=planned)
        assert await planned.messages() == PLANNED_AND_BOOKED_PROGRESS
        grouped = await client.call_tool("book_trip", {"car_declined": True}, progress_callback=booked)
        assert await booked.messages() == declined
    assert (dynamic.is_error, timeless(dynamic.structured_content)) == (False, PLANNED_AND_BOOKED)
    assert (grouped.is_error, timeless(grouped.structured_content)) == (
        True,
        car_declined_result(car_declined_report("book_trip", ["flight", "hotel", "car", "card"])),
    )
