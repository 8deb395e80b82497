"""Fault plans: checked when built, reproducible from their seeds, consumed call by call, set tool by tool."""

from __future__ import annotations

import copy
import random

import pytest

from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock import TravelAgency
from aegis_nb.mock.faults import FaultOutcome, FaultPlan, FaultPlanError, FaultState, Latency, ToolFaults


def test_a_plan_round_trips_through_json() -> None:
    plan = FaultPlan(
        {
            "reserve_hotel": ToolFaults(latency=Latency.uniform(0.01, 0.02, seed=7), fail_next=1),
            "charge_card": ToolFaults(declined=True),
            "cancel_hotel": ToolFaults(fail_next=2),
            "book_flight": ToolFaults(latency=Latency.exponential(0.01, seed=3), fail_rate=0.25, seed=9),
            "refund_card": ToolFaults(latency=Latency.fixed(0.5), hang_after_effect=1),
        }
    )
    data = plan.to_json()
    assert data == {
        "reserve_hotel": {"latency": {"uniform": [0.01, 0.02], "seed": 7}, "fail_next": 1},
        "charge_card": {"declined": True},
        "cancel_hotel": {"fail_next": 2},
        "book_flight": {"latency": {"exponential": 0.01, "seed": 3}, "fail_rate": 0.25, "seed": 9},
        "refund_card": {"latency": {"fixed": 0.5}, "hang_after_effect": 1},
    }
    assert FaultPlan.from_json(data) == plan


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"book_hotel": {}}, "unknown tool 'book_hotel' in fault plan"),
        ({"book_flight": {"fail_nxt": 1}}, r"book_flight: unknown fault option\(s\) \['fail_nxt'\]"),
        ({"book_flight": {"fail_next": -1}}, "book_flight: fail_next must be a non-negative int, got -1"),
        ({"book_flight": {"fail_rate": 1.5}}, "book_flight: fail_rate must be a probability"),
        ({"book_flight": {"declined": True}}, "book_flight: only charge_card can decline"),
        ({"book_flight": {"latency": -1}}, "latency must be a finite number of seconds >= 0, got -1"),
        ({"book_flight": {"latency": {"uniform": [2, 1]}}}, r"latency high \(1.0\) must not be below low"),
        ({"book_flight": {"latency": {"gamma": 1}}}, "latency takes one of fixed, uniform, exponential"),
        ({"book_flight": "slow"}, "book_flight: faults must be an object"),
        (["book_flight"], "a fault plan is an object of tool name -> faults"),
    ],
)
def test_bad_plans_are_refused_with_the_reason(data: object, message: str) -> None:
    with pytest.raises(FaultPlanError, match=message):
        FaultPlan.from_json(data)


def test_fail_next_counts_down_then_calls_proceed() -> None:
    state = FaultState(FaultPlan({"cancel_hotel": ToolFaults(fail_next=2)}))
    outcomes = [state.before("cancel_hotel") for _ in range(3)]
    assert outcomes == [FaultOutcome.FAIL, FaultOutcome.FAIL, FaultOutcome.PROCEED]
    assert state.before("book_flight") is FaultOutcome.PROCEED


def test_random_failures_and_latencies_are_reproducible_from_their_seeds() -> None:
    plan = FaultPlan(
        {"book_flight": ToolFaults(latency=Latency.uniform(0.0, 1.0, seed=5), fail_rate=0.5, seed=11)}
    )
    first, second = FaultState(plan), FaultState(plan)
    run_a = [(first.delay("book_flight"), first.before("book_flight")) for _ in range(20)]
    run_b = [(second.delay("book_flight"), second.before("book_flight")) for _ in range(20)]
    assert run_a == run_b
    rates, delays = random.Random(11), random.Random(5)
    expected = [
        (delays.uniform(0.0, 1.0), FaultOutcome.FAIL if rates.random() < 0.5 else FaultOutcome.PROCEED)
        for _ in range(20)
    ]
    assert run_a == expected


def test_hang_after_effect_is_consumed_once_per_call() -> None:
    state = FaultState(FaultPlan({"charge_card": ToolFaults(hang_after_effect=1)}))
    assert [state.hangs_after_effect("charge_card") for _ in range(2)] == [True, False]


def test_with_tool_returns_a_new_plan_and_leaves_the_old_one() -> None:
    plan = FaultPlan()
    declined = plan.with_tool("charge_card", ToolFaults(declined=True))
    assert plan.to_json() == {}
    assert declined.to_json() == {"charge_card": {"declined": True}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"cancel_hotel": {"latency": -1}},
            "cancel_hotel: latency must be a finite number of seconds >= 0, got -1",
        ),
        (
            {"book_flight": {"latency": 0.2}, "reserve_hotel": {"latency": {"uniform": [0.5, 0.1]}}},
            "reserve_hotel: latency high (0.1) must not be below low (0.5)",
        ),
        (
            {"charge_card": {"latency": {"fixed": "slow"}}},
            "charge_card: latency must be a finite number of seconds >= 0, got 'slow'",
        ),
        (
            {"refund_card": {"latency": {"exponential": 0}}},
            "refund_card: an exponential latency needs a positive mean",
        ),
        (
            {"search_flights": {"latency": {"uniform": [0.1, float("inf")]}}},
            "search_flights: latency high must be a finite number of seconds >= 0, got inf",
        ),
        (
            {"book_flight": {"latency": "slow"}},
            "book_flight: latency must be seconds or an object, got 'slow'",
        ),
        (
            {"book_flight": {"latency": {"uniform": [1]}}},
            "book_flight: uniform latency is [low, high], got [1]",
        ),
        (
            {"book_flight": {"latency": {"fixed": 1, "seed": "x"}}},
            "book_flight: latency seed must be an int, got 'x'",
        ),
    ],
)
def test_every_bad_latency_names_its_tool_once(data: object, message: str) -> None:
    with pytest.raises(FaultPlanError) as refused:
        FaultPlan.from_json(data)
    assert str(refused.value) == message


def test_replacing_one_tools_faults_keeps_the_others_counts_and_generators() -> None:
    plan = FaultPlan(
        {
            "cancel_hotel": ToolFaults(fail_next=2),
            "book_flight": ToolFaults(latency=Latency.uniform(0.0, 1.0, seed=5), fail_rate=0.5, seed=11),
            "charge_card": ToolFaults(hang_after_effect=2),
        }
    )
    changed, untouched = FaultState(plan), FaultState(plan)

    def calls(state: FaultState) -> list[object]:
        return [
            state.before("cancel_hotel"),
            state.delay("book_flight"),
            state.before("book_flight"),
            state.hangs_after_effect("charge_card"),
        ]

    assert calls(changed) == calls(untouched)
    changed.replace_tool("refund_card", ToolFaults(fail_next=1))
    # The other tools go on where they were, as if nothing had changed.
    assert [calls(changed) for _ in range(3)] == [calls(untouched) for _ in range(3)]
    assert changed.before("refund_card") is FaultOutcome.FAIL
    assert changed.before("refund_card") is FaultOutcome.PROCEED
    assert changed.plan.to_json() == {**plan.to_json(), "refund_card": {"fail_next": 1}}


def test_replacing_a_tools_faults_restarts_only_that_tool() -> None:
    state = FaultState(FaultPlan({"cancel_hotel": ToolFaults(fail_next=2, latency=Latency.fixed(0.5))}))
    assert state.before("cancel_hotel") is FaultOutcome.FAIL
    state.replace_tool("cancel_hotel", ToolFaults(fail_next=3))
    outcomes = [state.before("cancel_hotel") for _ in range(4)]
    assert outcomes == [FaultOutcome.FAIL] * 3 + [FaultOutcome.PROCEED]
    assert state.delay("cancel_hotel") == 0.0
    state.replace_tool("cancel_hotel", ToolFaults(latency=Latency.uniform(0.0, 1.0, seed=5)))
    assert state.delay("cancel_hotel") == random.Random(5).uniform(0.0, 1.0)


def test_replacing_a_tools_faults_with_bad_ones_changes_nothing() -> None:
    state = FaultState(FaultPlan({"cancel_hotel": ToolFaults(fail_next=1)}))
    with pytest.raises(FaultPlanError) as refused:
        state.replace_tool("book_flight", ToolFaults(declined=True))
    assert str(refused.value) == "book_flight: only charge_card can decline"
    with pytest.raises(FaultPlanError) as refused:
        state.replace_tool("rent_car", ToolFaults())
    assert str(refused.value).startswith("unknown tool 'rent_car' in fault plan; known: ")
    assert state.plan.to_json() == {"cancel_hotel": {"fail_next": 1}}
    assert [state.before(tool) for tool in ("book_flight", "cancel_hotel", "cancel_hotel")] == [
        FaultOutcome.PROCEED,
        FaultOutcome.FAIL,
        FaultOutcome.PROCEED,
    ]


def test_a_fault_plan_is_an_immutable_hashable_value() -> None:
    plan = FaultPlan({"charge_card": ToolFaults(declined=True)})
    with pytest.raises(TypeError):
        plan.tools["book_flight"] = ToolFaults(fail_next=1)  # type: ignore[index]
    assert plan.for_tool("book_flight") == ToolFaults()
    same = FaultPlan({"charge_card": ToolFaults(declined=True)})
    assert (plan == same, hash(plan) == hash(same), {plan, same} == {plan}) == (True, True, True)
    assert (copy.copy(plan) is plan, copy.deepcopy(plan) is plan) == (True, True)
    assert plan.with_tool("book_flight", ToolFaults(fail_next=1)).tools == {
        "charge_card": ToolFaults(declined=True),
        "book_flight": ToolFaults(fail_next=1),
    }
    assert plan.tools == {"charge_card": ToolFaults(declined=True)}


# Regression guard: set_tool_faults on one tool leaves another's call count and seeded generator alone.
@pytest.mark.anyio
async def test_changing_one_tools_faults_keeps_the_count_of_another() -> None:
    agency = TravelAgency(faults=FaultPlan({"cancel_hotel": ToolFaults(fail_next=2)}))
    outcomes: list[str] = []
    async with agency.connect() as session:
        await session.call_tool("reserve_hotel", {"city": "Lisbon", "nights": 1})

        async def cancel() -> None:
            try:
                result = await session.call_tool("cancel_hotel", {"booking_id": "HT-0001"})
                outcomes.append(f"changed={result['changed']}")
            except ToolError as exc:
                outcomes.append(exc.message)

        await cancel()
        agency.set_tool_faults("charge_card", ToolFaults(declined=True))
        await cancel()
        await cancel()
    failed = "cancel_hotel is unavailable (injected failure)"
    assert outcomes == [failed, failed, "changed=True"]
    assert agency.faults.to_json() == {"cancel_hotel": {"fail_next": 2}, "charge_card": {"declined": True}}
