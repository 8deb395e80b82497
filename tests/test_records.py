"""`record` classes: the fast builder makes ordinary, frozen instances of the class itself."""

from __future__ import annotations

import dataclasses

import pytest

from aegis_nb import AegisContext
from aegis_nb.kernel.records import builder, record
from aegis_nb.saga.events import EventBase, StepEvent, StepSucceeded


@record
class Pair:
    left: int
    right: str


@record
class Other:
    left: int
    right: str


def test_builder_makes_the_same_value_as_the_constructor() -> None:
    built = builder(Pair)(1, "a")
    assert type(built) is Pair
    assert built == Pair(1, "a") == Pair(left=1, right="a")
    assert hash(built) == hash(Pair(1, "a"))
    assert repr(built) == "Pair(left=1, right='a')"
    assert dataclasses.replace(built, right="b") == Pair(1, "b")


def test_built_instances_stay_frozen() -> None:
    built = builder(Pair)(1, "a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.left = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del built.right
    assert built == Pair(1, "a")


def test_builder_of_an_inherited_event_fills_every_field_in_order() -> None:
    ctx = AegisContext({"a": 1})
    event = builder(StepSucceeded)("run", 3, 1.5, 2, "Book", 0.25, ctx)
    assert type(event) is StepSucceeded
    assert isinstance(event, StepEvent)
    assert isinstance(event, EventBase)
    assert event == StepSucceeded("run", 3, 1.5, 2, "Book", 0.25, ctx)
    match event:
        case StepSucceeded(step="Book", duration=0.25, context=c):
            assert c is ctx
        case _:
            pytest.fail("the built event does not match its class pattern")


def test_each_class_has_its_own_builder() -> None:
    assert type(builder(Other)(0, "x")) is Other
    assert type(builder(Pair)(0, "x")) is Pair


def test_record_fields_cannot_have_defaults() -> None:
    with pytest.raises(TypeError, match="Defaulted: record fields cannot have defaults"):

        @record
        class Defaulted:
            value: int = 0


def test_derived_contexts_are_immutable_contexts() -> None:
    derived = AegisContext({"a": 1}, deadline=10.0)._for_step("run", 2)
    assert type(derived) is AegisContext
    assert derived.to_json() == {"a": 1}
    assert (derived.deadline, derived.idempotency_key) == (10.0, "run/2")
    with pytest.raises(AttributeError, match="AegisContext is immutable"):
        derived._deadline = 20.0
    with pytest.raises(AttributeError, match="AegisContext is immutable"):
        del derived._run_id
    budgeted = derived._with_budget(30.0)
    assert type(budgeted) is AegisContext
    assert (budgeted.deadline, budgeted.idempotency_key, budgeted.metadata) == (
        30.0,
        "run/2",
        derived.metadata,
    )
    assert derived.deadline == 10.0
