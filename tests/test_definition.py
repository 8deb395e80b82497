"""normalize_saga: the fast path for plain steps gives exactly what checking each entry gives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aegis_nb import AegisContext, SagaDefinitionError
from aegis_nb.saga.definition import normalize_saga


class Plain:
    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Other(Plain):
    pass


def test_bare_plain_steps_and_the_same_steps_as_tuples_normalize_alike() -> None:
    steps = [Plain(), Other(), Plain(), Plain()]
    bare = normalize_saga(steps)
    assert bare == normalize_saga([(s, (), {}) for s in steps])
    assert [(s.index, s.name, s.step) for s in bare] == [
        (0, "Plain#1", steps[0]),
        (1, "Other", steps[1]),
        (2, "Plain#2", steps[2]),
        (3, "Plain#3", steps[3]),
    ]
    assert [(s.args, dict(s.kwargs), s.timeout, s.retry, s.in_doubt) for s in bare] == [
        ((), {}, None, None, False)
    ] * len(steps)


def test_a_batch_of_one_step_class_is_numbered_in_order() -> None:
    batch = [Plain() for _ in range(3)]
    assert [s.name for s in normalize_saga(batch)] == ["Plain#1", "Plain#2", "Plain#3"]


def test_numbering_skips_a_name_a_step_already_has() -> None:
    named = Plain()
    named.name = "Plain#1"  # type: ignore[attr-defined]
    specs = normalize_saga([named, Plain(), Other(), Plain(), Plain()])
    assert [s.name for s in specs] == ["Plain#1", "Plain#2", "Other", "Plain#3", "Plain#4"]


def test_options_set_on_one_instance_of_a_plain_class_are_read() -> None:
    tuned = Plain()
    tuned.name = "tuned"  # type: ignore[attr-defined]
    tuned.timeout = 2  # type: ignore[attr-defined]
    tuned.in_doubt = True  # type: ignore[attr-defined]
    first, second = normalize_saga([Plain(), tuned])
    assert (first.name, first.timeout, first.in_doubt) == ("Plain", None, False)
    assert (second.name, second.timeout, second.in_doubt) == ("tuned", 2.0, True)


def test_a_bad_option_on_one_instance_of_a_plain_class_is_refused() -> None:
    bad = Plain()
    bad.timeout = -1  # type: ignore[attr-defined]
    with pytest.raises(SagaDefinitionError, match=r"saga entry 1 \(Plain\): timeout must be a positive"):
        normalize_saga([Plain(), bad])


def test_options_a_class_defines_or_makes_up_are_read() -> None:
    class Tuned(Plain):
        timeout = 3

    class Dynamic(Plain):
        def __getattr__(self, attribute: str) -> object:
            if attribute == "in_doubt":
                return True
            raise AttributeError(attribute)

    tuned, dynamic = normalize_saga([Tuned(), Dynamic()])
    assert (tuned.timeout, tuned.in_doubt) == (3.0, False)
    assert (dynamic.timeout, dynamic.in_doubt) == (None, True)


@given(st.lists(st.sampled_from(["A", "B", "A#1", "A#2", "B#1", "A#1#1"]), min_size=1, max_size=12))
def test_step_names_come_out_unique_and_unrepeated_names_stay_as_they_are(names: list[str]) -> None:
    steps = []
    for name in names:
        step = Plain()
        step.name = name  # type: ignore[attr-defined]
        steps.append(step)
    unique = [spec.name for spec in normalize_saga(steps)]
    assert len(set(unique)) == len(unique)
    for given_name, final in zip(names, unique, strict=True):
        if names.count(given_name) == 1:
            assert final == given_name
        else:
            assert final.startswith(f"{given_name}#")
