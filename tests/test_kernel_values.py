"""Kernel values at their edges: escaped secrets, copying, re-initialisation, odd inputs, equality."""

from __future__ import annotations

import copy
import json
import math
import pickle
from typing import Any

import pytest

from aegis_nb import AegisContext, Secret, WorkflowEngine
from aegis_nb.kernel.scrubbing import scrub
from aegis_nb.kernel.values import FrozenDict

# -- secrets in escaped error text ------------------------------------------------------------------

UMLAUTS = "pässwörd\\"
BACKSLASHED = "ab\\cd-s3cret"


@pytest.mark.parametrize(
    ("secret", "text", "scrubbed"),
    [
        (r"hunter2\backslash", str(KeyError(r"hunter2\backslash")), "'***'"),
        ("pass\nword", str(KeyError("pass\nword")), "'***'"),
        ('it\'s "quoted"', str(KeyError('it\'s "quoted"')), "'***'"),
        (UMLAUTS, f"bad key {UMLAUTS!a}", "bad key '***'"),
        (UMLAUTS, json.dumps({"pw": UMLAUTS}), '{"pw": "***"}'),
        (UMLAUTS, json.dumps({"pw": UMLAUTS}, ensure_ascii=False), '{"pw": "***"}'),
        ("tab\there", "literal tab\there and escaped 'tab\\there'", "literal *** and escaped '***'"),
        # Inside a longer repr that picked the other quote, and a message that quoted it already.
        ("it's-s3cret", str(KeyError('pw=it\'s-s3cret for "admin"')), "'pw=*** for \"admin\"'"),
        (BACKSLASHED, str(KeyError("unknown token " + repr(BACKSLASHED))), "\"unknown token '***'\""),
    ],
)
def test_scrub_replaces_a_secret_written_escaped(secret: str, text: str, scrubbed: str) -> None:
    assert scrub(text, [secret]) == scrubbed


def test_scrub_replaces_the_longer_escaped_secret_first() -> None:
    password = "pw\\1"
    dsn = f"postgres://ada:{password}@db"
    text = str(KeyError(dsn)) + " / " + str(KeyError(password))
    assert scrub(text, [password, dsn]) == "'***' / '***'"


class _Login:
    """Looks the password up as a key: the `KeyError` message is the password's repr."""

    name = "Login"

    async def execute(self, ctx: AegisContext) -> AegisContext:
        vault: dict[str, int] = {}
        return ctx.with_metadata({"session": vault[ctx.metadata["password"].reveal()]})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


@pytest.mark.anyio
async def test_a_key_error_on_a_secret_with_a_backslash_does_not_leak_it() -> None:
    ctx = AegisContext({"password": Secret("hunter2\\x\n'\"")})
    run = await WorkflowEngine().run_saga([_Login()], ctx)
    assert run.report.cause is not None
    assert run.report.cause.message == "'***'"
    assert str(run.error) == "saga 'saga': '***' — rolled back: nothing to undo"


# -- copying and pickling ---------------------------------------------------------------------------


def test_immutable_values_copy_as_themselves() -> None:
    ctx = AegisContext({"flight": {"id": "FL-1", "legs": [1, 2]}, "card": Secret("4111")})
    meta, flight, card = ctx.metadata, ctx.metadata["flight"], ctx.metadata["card"]
    for value in (ctx, meta, flight, card):
        assert copy.copy(value) is value
        assert copy.deepcopy(value) is value
    state: dict[str, Any] = {"ctx": ctx, "seen": [meta]}
    assert copy.deepcopy(state) == {"ctx": ctx, "seen": [meta]}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (FrozenDict({"a": 1}), "FrozenDict is not pickled; journals store thaw()'s JSON instead"),
        (
            FrozenDict({"card": Secret("4111")}),
            "FrozenDict is not pickled; journals store thaw()'s JSON instead",
        ),
        (AegisContext({"a": 1}), "AegisContext is not pickled; journals store to_json() instead"),
        (Secret("4111"), "a Secret cannot be pickled"),
    ],
)
def test_kernel_values_refuse_pickling_when_dumped(value: object, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        pickle.dumps(value)
    assert str(caught.value) == message


# -- no re-initialisation, no deleting --------------------------------------------------------------


@pytest.mark.anyio
async def test_a_context_cannot_be_initialised_again() -> None:
    ctx = AegisContext({"a": 1}).with_timeout(5).for_step("run", 0)
    before = (ctx.to_json(), ctx.deadline, ctx.idempotency_key, hash(ctx))
    for built in (ctx, AegisContext()):
        with pytest.raises(AttributeError) as caught:
            built.__init__({"a": 2})  # type: ignore[misc]
        assert (
            str(caught.value)
            == "AegisContext is immutable; use with_metadata() (tried to call __init__ again)"
        )
    assert (ctx.to_json(), ctx.deadline, ctx.idempotency_key, hash(ctx)) == before
    assert AegisContext().to_json() == {}


def test_frozen_dicts_and_secrets_cannot_be_initialised_again() -> None:
    secret = Secret("pw")
    for meta in (AegisContext({"b": 1}).metadata, FrozenDict({"b": 1})):
        with pytest.raises(AttributeError) as caught:
            meta.__init__({"b": "changed"})  # type: ignore[misc]
        assert str(caught.value) == "FrozenDict is immutable (tried to call __init__ again)"
        assert meta == FrozenDict({"b": 1})
    with pytest.raises(AttributeError) as caught:
        secret.__init__("other")  # type: ignore[misc]
    assert str(caught.value) == "Secret is immutable (tried to call __init__ again)"
    assert secret.reveal() == "pw"


@pytest.mark.parametrize(
    ("value", "name", "message"),
    [
        (FrozenDict({"b": 1}), "_data", "FrozenDict is immutable"),
        (FrozenDict({"b": 1}), "_hash", "FrozenDict is immutable"),
        (AegisContext({"b": 1}).metadata, "_data", "FrozenDict is immutable"),
        (Secret("pw"), "_value", "Secret is immutable"),
    ],
)
def test_internal_attributes_cannot_be_deleted(value: object, name: str, message: str) -> None:
    with pytest.raises(AttributeError) as caught:
        delattr(value, name)
    assert str(caught.value) == message
    getattr(value, name)  # still there


# -- metadata and deadline inputs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ([], "metadata must be a mapping, got list"),
        ((), "metadata must be a mapping, got tuple"),
        ("", "metadata must be a mapping, got str"),
        (0, "metadata must be a mapping, got int"),
        (False, "metadata must be a mapping, got bool"),
        ([("a", 1)], "metadata must be a mapping, got list"),
    ],
)
def test_non_mapping_metadata_is_rejected_even_when_empty(metadata: object, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        AegisContext(metadata)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_missing_or_empty_metadata_is_an_empty_mapping() -> None:
    assert AegisContext().metadata == AegisContext(None).metadata == AegisContext({}).metadata == FrozenDict()
    assert AegisContext().to_json() == {}


def test_an_int_deadline_beyond_float_range_is_no_deadline() -> None:
    assert AegisContext(deadline=10**400).deadline == math.inf
    assert AegisContext(deadline=10**400) == AegisContext()
    assert AegisContext(deadline=-(10**400)).deadline == -math.inf
    for ctx in (AegisContext(), AegisContext(deadline=5.0)):
        assert ctx.with_deadline(10**400) is ctx
    assert AegisContext(deadline=5.0).with_deadline(-(10**400)).deadline == -math.inf


@pytest.mark.anyio
async def test_a_timeout_beyond_float_range_changes_nothing() -> None:
    for ctx in (AegisContext(), AegisContext().with_timeout(60)):
        assert ctx.with_timeout(10**400) is ctx


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: AegisContext(deadline=True),
            TypeError,
            "deadline must be a number on the loop clock, got True",
        ),
        (
            lambda: AegisContext(deadline="5"),  # type: ignore[arg-type]
            TypeError,
            "deadline must be a number on the loop clock, got '5'",
        ),
        (
            lambda: AegisContext(deadline=math.nan),
            TypeError,
            "deadline must be a number on the loop clock, got nan",
        ),
        (
            lambda: AegisContext().with_deadline(None),  # type: ignore[arg-type]
            TypeError,
            "deadline must be a number on the loop clock, got None",
        ),
        (
            lambda: AegisContext().with_timeout(False),
            TypeError,
            "timeout must be a number of seconds, got False",
        ),
        (
            lambda: AegisContext().with_timeout(math.nan),
            TypeError,
            "timeout must be a number of seconds, got nan",
        ),
        (
            lambda: AegisContext().with_timeout(-(10**400)),
            ValueError,
            f"timeout must not be negative, got {-(10**400)}",
        ),
    ],
)
def test_bad_deadlines_and_timeouts_keep_their_messages(
    call: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value) == message


# -- equality -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plain",
    [
        {"a": [1]},
        {"a": (1,)},
        {"a": {"b": [1, {"c": [2]}]}},
        {"a": [1], "card": Secret("4111")},
    ],
)
def test_a_frozen_dict_equals_the_plain_mapping_it_was_made_from(plain: dict[str, Any]) -> None:
    frozen = FrozenDict(plain)
    assert frozen == plain
    assert plain == frozen
    assert (frozen != plain) is False


@pytest.mark.parametrize(
    "other",
    [
        {"a": {1}},  # not JSON-compatible: unequal, not an error
        {"a": math.nan},
        {1: [1]},
        {"a": [1], "b": 2},
        {"a": [2]},
        {},
    ],
)
def test_a_frozen_dict_is_unequal_to_other_mappings_without_raising(other: dict[Any, Any]) -> None:
    assert (FrozenDict({"a": [1]}) == other) is False
    assert (other == FrozenDict({"a": [1]})) is False


def test_equal_frozen_dicts_hash_alike() -> None:
    assert FrozenDict({"a": [1, {"b": 2}]}) == FrozenDict({"a": (1, FrozenDict({"b": 2}))})
    assert hash(FrozenDict({"a": [1, {"b": 2}]})) == hash(FrozenDict({"a": (1, FrozenDict({"b": 2}))}))
