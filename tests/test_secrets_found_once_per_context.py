"""A context's secrets are found once and kept, a merge deriving them from its parent's (issue 30).

A run's rollback scrubs every secret any of its contexts held; rescanning each saved context made a
failing saga whose metadata grows every step quadratic. What a context reports must not change: the
same secrets, in the same order, repeats kept, as a full scan of its metadata finds.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aegis_nb import AegisContext, SagaFailed, Secret, WorkflowEngine
from aegis_nb.kernel.values import FrozenDict


class CountedSecret(Secret):
    """A secret that counts how often its value is read."""

    __slots__ = ()
    reads = 0

    def reveal(self) -> str:
        CountedSecret.reads += 1
        return super().reveal()


def full_scan(value: Any) -> list[str]:
    """The secrets inside a frozen value, walked whole: what `secret_values` has always meant."""
    if isinstance(value, Secret):
        return [value.reveal()]
    if isinstance(value, FrozenDict):
        return [secret for item in value.values() for secret in full_scan(item)]
    if isinstance(value, tuple):
        return [secret for item in value for secret in full_scan(item)]
    return []


def test_each_context_of_a_growing_run_reads_a_secret_once() -> None:
    CountedSecret.reads = 0
    contexts = [AegisContext({"card": CountedSecret("4111-1111")})]
    for index in range(50):
        contexts.append(contexts[-1].with_metadata({f"k{index}": index}))
    found = [ctx.secret_values() for ctx in contexts]
    assert found == [("4111-1111",)] * 51
    assert CountedSecret.reads == 1  # 51 before: every context scanned whole


leaves = st.one_of(
    st.integers(-5, 5),
    st.text(alphabet="abc", max_size=3),  # never a secret's value
    st.none(),
    st.builds(Secret, st.sampled_from(["s1", "s2", "s3"])),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("xyz"), inner, max_size=3)
    ),
    max_leaves=6,
)
updates = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), values, max_size=3)


@settings(max_examples=200, deadline=None)
@given(first=updates, merges=st.lists(updates, max_size=6))
def test_merged_contexts_report_the_secrets_a_full_scan_finds(
    first: dict[str, Any], merges: list[dict[str, Any]]
) -> None:
    ctx = AegisContext(first)
    chain = [ctx]
    for update in merges:
        ctx = ctx.with_metadata(update)
        chain.append(ctx)
    for each in reversed(chain):  # the newest first, so no parent was asked before its child
        assert each.secret_values() == tuple(full_scan(each.metadata))
        shown = repr(each)
        assert [secret for secret in ("s1", "s2", "s3") if secret in shown] == []
        with pytest.raises(TypeError):
            each.metadata["a"] = 1  # type: ignore[index]


class AddsKey:
    """Adds its key to the metadata (a secret for even positions); the last one fails."""

    def __init__(self, index: int, last: bool) -> None:
        self.index, self.last = index, last

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.last:
            raise RuntimeError("declined: card s0 and token s4 refused")
        value: object = Secret(f"s{self.index}") if self.index % 2 == 0 else self.index
        return ctx.with_metadata({f"k{self.index}": value})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


@pytest.mark.anyio
async def test_a_failing_growing_run_scrubs_every_secret_it_held() -> None:
    steps = [AddsKey(index, index == 6) for index in range(7)]
    with pytest.raises(SagaFailed) as failed:
        await WorkflowEngine().execute_saga(steps)
    cause = failed.value.__cause__
    assert cause is not None
    assert str(cause) == "RuntimeError: declined: card *** and token *** refused"


@settings(max_examples=30, deadline=None)
@given(
    start=st.integers(0, 300),
    merges=st.lists(
        st.dictionaries(
            st.integers(0, 400).map(lambda n: f"k{n}"),
            st.one_of(st.integers(), st.builds(Secret, st.sampled_from(["s1", "s2"]))),
            max_size=40,
        ),
        max_size=12,
    ),
)
def test_large_merged_metadata_behaves_as_the_dict_it_stands_for(
    start: int, merges: list[dict[str, Any]]
) -> None:
    """Past a few hundred keys a merge shares its parent's contents: nothing a reader sees changes."""
    plain: dict[str, Any] = {f"k{n}": n for n in range(start)}
    ctx = AegisContext(plain)
    for update in merges:
        before, previous = ctx, plain
        ctx = ctx.with_metadata(update)
        plain = {**plain, **update}
        assert list(before.metadata.items()) == list(previous.items())  # the parent untouched
        assert list(ctx.metadata.items()) == list(plain.items())  # insertion order kept
        assert [ctx.metadata[key] for key in plain] == list(plain.values())
        assert len(ctx.metadata) == len(plain)
        assert ctx.metadata == FrozenDict(plain)
        assert hash(ctx.metadata) == hash(FrozenDict(plain))
        assert repr(ctx.metadata) == repr(FrozenDict(plain))
        assert ctx.to_json() == AegisContext(plain).to_json()
        assert ctx.secret_values() == tuple(full_scan(FrozenDict(plain)))
        assert before.metadata.get("absent", "default") == "default"
        assert "absent" not in ctx.metadata
        with pytest.raises(TypeError):
            ctx.metadata["k0"] = 1  # type: ignore[index]
