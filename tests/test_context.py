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
