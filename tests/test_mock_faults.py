"""Fault plans: checked when built, reproducible from their seeds, consumed call by call."""

from __future__ import annotations

import random

import pytest

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
