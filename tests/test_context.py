"""AegisContext: deep immutability, JSON-only metadata, deadlines that only shorten, secrets hidden."""

from __future__ import annotations

import math
import pickle

import anyio
import pytest

from aegis_nb import AegisContext, Secret
from aegis_nb.kernel.values import FrozenDict


def test_with_metadata_returns_a_new_context_and_leaves_the_old_one() -> None:
    original = AegisContext({"a": 1})
    derived = original.with_metadata({"b": [1, {"c": 2}]})

    assert original.to_json() == {"a": 1}
    assert derived.to_json() == {"a": 1, "b": [1, {"c": 2}]}
    assert derived.metadata["b"] == (1, FrozenDict({"c": 2}))


def test_with_metadata_overrides_existing_keys() -> None:
    assert AegisContext({"a": 1}).with_metadata({"a": 2}).to_json() == {"a": 2}


def test_context_attributes_cannot_be_set_or_deleted() -> None:
    ctx = AegisContext()
    with pytest.raises(AttributeError, match="immutable"):
        ctx.metadata = {}  # type: ignore[misc, assignment]
    with pytest.raises(AttributeError, match="immutable"):
        del ctx.deadline


def test_metadata_is_read_only_at_every_depth() -> None:
    ctx = AegisContext({"trip": {"legs": ["LIS", "NYC"], "pax": {"adults": 2}}})
    with pytest.raises(TypeError):
        ctx.metadata["trip"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        del ctx.metadata["trip"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        ctx.metadata["trip"]["pax"]["adults"] = 3
    with pytest.raises(AttributeError):
        ctx.metadata["trip"]["legs"].append("SFO")
    assert ctx.to_json() == {"trip": {"legs": ["LIS", "NYC"], "pax": {"adults": 2}}}


def test_the_callers_dict_is_copied_not_shared() -> None:
    source = {"legs": ["LIS"]}
    ctx = AegisContext({"trip": source})
    source["legs"].append("NYC")
    assert ctx.to_json() == {"trip": {"legs": ["LIS"]}}


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"when": {1, 2}}, r"metadata\['when'\]: value of type set is not JSON-compatible"),
        ({"trip": {"legs": [b"LIS"]}}, r"metadata\['trip'\]\['legs'\]\[0\]: value of type bytes"),
        ({"ratio": math.nan}, r"metadata\['ratio'\]: nan is not JSON-compatible"),
        ({"trip": {3: "x"}}, r"metadata\['trip'\] keys must be str, got int key 3"),
        ({1: "x"}, r"metadata keys must be str, got int key 1"),
    ],
)
def test_non_json_metadata_is_a_type_error_naming_the_key(
    metadata: dict[object, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        AegisContext(metadata)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        AegisContext().with_metadata(metadata)  # type: ignore[arg-type]


def test_secrets_never_show_in_repr_or_json() -> None:
    ctx = AegisContext({"card": Secret("4111-1111-1111-1111"), "name": "Ada"})
    assert repr(ctx) == "AegisContext(metadata={'card': '***', 'name': 'Ada'})"
    assert ctx.to_json() == {"card": "***", "name": "Ada"}
    assert repr(ctx.metadata["card"]) == "Secret('***')"
    assert ctx.metadata["card"].reveal() == "4111-1111-1111-1111"
    assert ctx.secret_values() == ("4111-1111-1111-1111",)
    with pytest.raises(TypeError):
        pickle.dumps(ctx.metadata["card"])


@pytest.mark.anyio
async def test_deadline_only_shortens() -> None:
    ctx = AegisContext()
    assert ctx.deadline == math.inf
    assert ctx.remaining() == math.inf
    now = anyio.current_time()
    soon = ctx.with_deadline(now + 10)
    assert soon.deadline == now + 10
    assert soon.with_deadline(now + 20) is soon
    assert soon.with_timeout(3600) is soon
    sooner = soon.with_timeout(1)
    assert sooner.deadline < soon.deadline
    assert 0 < sooner.remaining() <= 1


def test_bad_deadlines_are_rejected() -> None:
    with pytest.raises(TypeError, match="deadline must be a number"):
        AegisContext(deadline="soon")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deadline must be a number"):
        AegisContext().with_deadline(math.nan)
    with pytest.raises(ValueError, match="must not be negative"):
        AegisContext().with_timeout(-1)


def test_contexts_compare_and_hash_by_value() -> None:
    a = AegisContext({"x": [1, 2]})
    b = AegisContext({"x": (1, 2)})
    assert a == b
    assert hash(a) == hash(b)
    assert a != a.with_metadata({"y": 1})


def test_idempotency_key_is_absent_outside_a_run() -> None:
    assert AegisContext().idempotency_key is None


def test_a_context_stamped_for_a_step_is_a_new_immutable_context() -> None:
    original = AegisContext({"a": 1, "card": Secret("4242")}, deadline=10.0)
    stamped = original.for_step("run", 2)
    assert type(stamped) is AegisContext
    assert (stamped.run_id, stamped.step_index, stamped.idempotency_key) == ("run", 2, "run/2")
    assert (stamped.metadata, stamped.deadline) == (original.metadata, 10.0)
    assert repr(stamped) == (
        "AegisContext(metadata={'a': 1, 'card': '***'}, deadline=10.000000, idempotency_key='run/2')"
    )
    assert original.idempotency_key is None
    with pytest.raises(AttributeError, match="AegisContext is immutable"):
        stamped._deadline = 20.0
    with pytest.raises(AttributeError, match="AegisContext is immutable"):
        del stamped._run_id


def test_a_budget_replaces_the_deadline_where_with_deadline_only_shortens_it() -> None:
    # A compensation runs when the forward deadline may be spent: the engine gives it a budget of
    # its own, later than that deadline; with_deadline, which steps use, could never lengthen it.
    spent = AegisContext({"a": 1}, deadline=10.0).for_step("run", 2)
    assert spent.with_deadline(30.0) is spent
    budgeted = spent.with_budget(30.0)
    assert (budgeted.deadline, budgeted.idempotency_key, budgeted.metadata) == (30.0, "run/2", spent.metadata)
    assert budgeted.with_budget(5.0).deadline == 5.0
    assert spent.deadline == 10.0
    with pytest.raises(TypeError, match="deadline must be a number on the loop clock, got nan"):
        spent.with_budget(math.nan)  # a NaN deadline would compare as never past


def test_a_context_rebuilt_from_its_parts_equals_the_original() -> None:
    original = AegisContext({"trip": {"legs": ["LIS"]}}, deadline=12.5).for_step("run", 1)
    rebuilt = AegisContext.from_parts(
        original.metadata, deadline=original.deadline, run_id=original.run_id, step_index=original.step_index
    )
    assert rebuilt == original
    assert rebuilt.metadata is original.metadata  # a FrozenDict is frozen already: not copied
    source = {"legs": ["LIS"]}
    thawed = AegisContext.from_parts({"trip": source}, deadline=12.5, run_id="run", step_index=1)
    source["legs"].append("NYC")
    assert thawed == original  # any other mapping is checked and frozen, as the constructor does
    outside = AegisContext.from_parts({}, deadline=math.inf, run_id=None, step_index=None)
    assert outside == AegisContext()


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (
            {"deadline": "soon", "run_id": None, "step_index": None},
            "deadline must be a number on the loop clock",
        ),
        ({"deadline": 1.0, "run_id": 7, "step_index": None}, "run_id must be a str or None, got 7"),
        ({"deadline": 1.0, "run_id": "r", "step_index": True}, "step_index must be an int or None, got True"),
        ({"deadline": 1.0, "run_id": "r", "step_index": "0"}, "step_index must be an int or None, got '0'"),
    ],
)
def test_parts_of_the_wrong_type_are_refused(parts: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        AegisContext.from_parts({}, **parts)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"metadata\['when'\]: value of type set"):
        AegisContext.from_parts({"when": {1}}, deadline=1.0, run_id=None, step_index=None)
