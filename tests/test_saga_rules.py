"""The saga's rules as pure functions (`aegis_nb.saga.rules`), the ones the in-process engine and the
Temporal workflow both call: admission under a deadline, a group's member start, accepting a result,
the failure event, what is owed and in what order, the retry schedule and the words.

Pure: no event loop, no clock; values in, values out, checked whole.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aegis_nb import AegisContext, RetryPolicy, StepResultError, ToolTimeoutError
from aegis_nb.kernel.report import ErrorInfo, FailureKind
from aegis_nb.saga import rules
from aegis_nb.saga.events import StepFailed, StepTimedOut
from aegis_nb.saga.parallel import CompensationOrder
from aegis_nb.saga.rules import OwedGroup

HEADER = ("run-1", 4, 100.0)
DECLINED = ErrorInfo("CardDeclined", "card declined")

times = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
timeouts = st.none() | st.floats(min_value=1e-3, max_value=1e3)
policies = st.builds(
    RetryPolicy,
    attempts=st.integers(min_value=1, max_value=12),
    initial_delay=st.floats(min_value=0, max_value=10),
    multiplier=st.floats(min_value=1, max_value=10),
    max_delay=st.floats(min_value=0, max_value=60),
)


# -- admission --------------------------------------------------------------------------------------


@given(now=times, left=st.floats(min_value=-1e3, max_value=1e3) | st.just(math.inf), timeout=timeouts)
def test_a_step_is_admitted_until_its_deadline_or_its_own_timeout_whichever_comes_first(
    now: float, left: float, timeout: float | None
) -> None:
    deadline = now + left
    limit = deadline if timeout is None else min(deadline, now + timeout)
    if now < limit:
        assert rules.admit("hotel", deadline, timeout, now) == limit
    else:
        with pytest.raises(ToolTimeoutError) as refused:
            rules.admit("hotel", deadline, timeout, now)
        assert (refused.value.step, refused.value.budget) == ("hotel", limit - now)
        assert str(refused.value).endswith("; it was not run")


def test_a_refused_step_is_told_how_late_it_was_and_that_it_was_not_run() -> None:
    with pytest.raises(ToolTimeoutError) as refused:
        rules.admit("hotel", 10.0, None, 10.25)
    assert str(refused.value) == (
        "step 'hotel' had no time left: the deadline passed 250.0 ms before it started; it was not run"
    )


def test_a_groups_member_never_starts_once_a_sibling_has_failed() -> None:
    assert rules.member_starts([]) is True
    assert rules.member_starts([RuntimeError("declined")]) is False


# -- accepting a result -----------------------------------------------------------------------------


def stamped(ctx: AegisContext, index: int = 3) -> AegisContext:
    return ctx.for_step("run-1", index)


def test_a_step_returning_none_hands_on_its_input_itself() -> None:
    step_input = stamped(AegisContext({"who": "ada"}, deadline=50.0))
    assert rules.accept("hotel", step_input, None) is step_input


def test_a_result_derived_from_the_input_is_taken_as_it_is() -> None:
    step_input = stamped(AegisContext({"who": "ada"}, deadline=50.0))
    result = step_input.with_metadata({"hotel": "H-1"})
    assert rules.accept("hotel", step_input, result) is result


@given(result_deadline=st.floats(min_value=0, max_value=100) | st.just(math.inf), index=st.integers(0, 5))
def test_a_result_is_stamped_with_the_steps_key_and_never_outlives_its_deadline(
    result_deadline: float, index: int
) -> None:
    step_input = stamped(AegisContext({"who": "ada"}, deadline=50.0))
    result = AegisContext({"hotel": "H-1"}, deadline=result_deadline)
    if index:
        result = result.for_step("another-run", index)
    accepted = rules.accept("hotel", step_input, result)
    assert accepted == AegisContext.from_parts(
        {"hotel": "H-1"}, deadline=min(result_deadline, 50.0), run_id="run-1", step_index=3
    )


def test_a_result_that_is_no_context_is_a_step_result_error_naming_the_step() -> None:
    with pytest.raises(StepResultError) as wrong:
        rules.accept("hotel", stamped(AegisContext()), {"hotel": "H-1"})
    assert str(wrong.value) == "step 'hotel': execute() must return an AegisContext or None, got dict"


# -- the failure event ------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [2.5, None])
def test_a_timeout_is_recorded_as_timed_out_with_the_budget_it_was_given_else_its_duration(
    budget: float | None,
) -> None:
    timeout = ErrorInfo("ToolTimeoutError", "step 'hotel' ran past its deadline")
    event = rules.failure_event(HEADER, 3, "hotel", 2, 1.5, FailureKind.TIMEOUT, timeout, budget)
    assert event == StepTimedOut(
        "run-1", 4, 100.0, index=3, step="hotel", duration=1.5, budget=budget or 1.5, error=timeout, group=2
    )


@pytest.mark.parametrize("kind", [FailureKind.ERROR, FailureKind.CANCELLED, FailureKind.INTERRUPTED])
def test_any_other_failure_is_recorded_as_failed_with_its_kind(kind: FailureKind) -> None:
    event = rules.failure_event(HEADER, 3, "hotel", None, 1.5, kind, DECLINED, 9.0)
    assert event == StepFailed(
        "run-1", 4, 100.0, index=3, step="hotel", duration=1.5, kind=kind, error=DECLINED, group=None
    )


def test_a_member_cut_off_by_its_siblings_failure_says_so_in_the_engines_words() -> None:
    assert rules.sibling_cancelled("CardDeclined") == ErrorInfo(
        "CancelledError", "cancelled: another member of its parallel group failed (CardDeclined)"
    )


def test_only_a_siblings_cancellation_is_told_apart_from_the_runs_failure() -> None:
    assert rules.cancelled_by_sibling(rules.sibling_cancelled("CardDeclined")) is True
    assert rules.cancelled_by_sibling(rules.CANCELLED) is False
    quoted = rules.sibling_cancelled("CardDeclined").message  # a step's own error that quotes the words
    assert rules.cancelled_by_sibling(ErrorInfo("CardDeclined", quoted)) is False


# -- what is owed, and in what order ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("in_doubt", "refused", "lost", "owed"),
    [
        (False, False, False, False),
        (True, False, False, True),
        (True, True, False, False),  # the tool answered that it did not act
        (False, False, True, True),  # a lost attempt may have acted, in doubt or not
        (True, True, True, True),  # a refusal after a lost attempt does not speak for that attempt
        (False, True, True, True),
    ],
)
def test_a_failed_step_is_owed_its_compensation_only_if_it_may_have_acted(
    in_doubt: bool, refused: bool, lost: bool, owed: bool
) -> None:
    cause = ErrorInfo("ToolError", "no such card", refused=refused)
    assert rules.owes_compensation(in_doubt, cause, lost=lost) is owed


def test_a_group_owes_its_members_in_start_order_and_nothing_when_none_is_owed() -> None:
    settled = [("hotel", 2), ("flight", 1), ("car", 3)]
    assert rules.owed_group(settled, lambda item: item[1], CompensationOrder.CONCURRENT) == OwedGroup(
        (("flight", 1), ("hotel", 2), ("car", 3)), CompensationOrder.CONCURRENT
    )
    assert rules.owed_group([], lambda item: item[1], CompensationOrder.CONCURRENT) is None


def expected_order(owed: list[str | OwedGroup[str]]) -> list[str | OwedGroup[str]]:
    """The rollback's order written out plainly, item by item."""
    units: list[str | OwedGroup[str]] = []
    for item in owed:
        if isinstance(item, str):
            units.append(item)
        elif item.order is CompensationOrder.REVERSE_START or len(item.members) == 1:
            units += list(item.members)[::-1]
        else:
            units.append(item)
    return units


groups = st.builds(
    OwedGroup,
    st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=4).map(tuple),
    st.sampled_from(CompensationOrder),
)


@given(st.lists(st.text(min_size=1, max_size=3) | groups, max_size=8))
def test_a_rollback_undoes_what_is_owed_in_the_order_given_a_group_as_its_order_says(
    owed: list[str | OwedGroup[str]],
) -> None:
    assert list(rules.rollback_order(owed)) == expected_order(owed)


def test_a_concurrent_group_is_undone_as_one_a_reverse_start_one_newest_start_first() -> None:
    concurrent = OwedGroup(("flight", "hotel"), CompensationOrder.CONCURRENT)
    reverse = OwedGroup(("car", "train"), CompensationOrder.REVERSE_START)
    alone = OwedGroup(("boat",), CompensationOrder.CONCURRENT)
    owed = ["card", reverse, alone, concurrent, "visa"]
    assert list(rules.rollback_order(owed)) == ["card", "train", "car", "boat", concurrent, "visa"]


# -- the retry schedule -----------------------------------------------------------------------------


@given(policies)
def test_the_waits_between_attempts_are_the_policys_and_the_last_attempt_gives_up(
    policy: RetryPolicy,
) -> None:
    waits = [rules.backoff(policy, attempt) for attempt in range(1, policy.attempts + 1)]
    assert waits == [*policy.delays(), None]


@pytest.mark.parametrize(
    ("policy", "waits"),
    [
        (RetryPolicy(attempts=4, initial_delay=3, multiplier=10**300, max_delay=7), [3, 7, 7, None]),
        (RetryPolicy(attempts=4, initial_delay=0.5, multiplier=1e300, max_delay=2), [0.5, 2, 2, None]),
        (RetryPolicy(attempts=3, initial_delay=0.1), [0.1, 0.2, None]),
        (RetryPolicy.never(), [None]),
    ],
)
def test_waits_that_would_overflow_are_capped_as_they_grow(
    policy: RetryPolicy, waits: list[float | None]
) -> None:
    assert [rules.backoff(policy, attempt) for attempt in range(1, policy.attempts + 1)] == waits


def test_a_steps_own_policy_wins_over_the_runs() -> None:
    own, default = RetryPolicy(attempts=5), RetryPolicy()
    assert rules.retry_policy(own, default) is own
    assert rules.retry_policy(None, default) is default


def test_an_attempt_cut_off_by_the_backstop_names_its_budget_and_when() -> None:
    error = rules.cut_off("hotel", 0.5, 0.75)
    assert (error.step, error.budget) == ("hotel", 0.5)
    assert str(error).endswith("; cut off 750.0 ms after it started")


# -- purity -----------------------------------------------------------------------------------------


def test_the_rules_import_nothing_that_waits_reads_a_clock_or_does_io() -> None:
    # The Temporal workflow sandbox imports this module; a replay must take the same decisions.
    tree = ast.parse(Path(rules.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    outside = {name for name in imported if name and not name.startswith("aegis_nb.")}
    assert outside == {"__future__", "collections.abc", "dataclasses", "typing"}
    assert all(name.split(".")[1] in {"kernel", "saga"} for name in imported - outside if name)


DRIVERS = {
    "engine": ("aegis_nb/saga/execution.py", "aegis_nb/saga/rollback.py"),
    "temporal": ("aegis_nb/temporal/workflow.py",),
}
SHARED = {
    "admit",
    "member_starts",
    "accept",
    "failure_event",
    "sibling_cancelled",
    "owes_compensation",
    "owed_group",
    "rollback_order",
    "retry_policy",
    "backoff",
}


def called(paths: tuple[str, ...]) -> set[str]:
    """The names the modules at `paths` call (``f(...)``, not ``x.f(...)``)."""
    root = Path(rules.__file__).parent.parent.parent
    return {
        node.func.id
        for path in paths
        for node in ast.walk(ast.parse((root / path).read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_both_drivers_take_every_decision_from_the_rules_and_restate_none(driver: str) -> None:
    # The drift this ends: "a member never starts once its group has failed" was the engine's alone.
    names = called(DRIVERS[driver])
    assert SHARED - names == set()
    assert names & {"StepFailed", "StepTimedOut", "ToolTimeoutError"} == set()
