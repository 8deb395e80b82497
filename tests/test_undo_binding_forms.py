"""Undo bindings in their three forms (a JSON Pointer, JMESPath, a regex's named groups) over
``{arguments, result, before}``: whole undo arguments out of real servers' answers, UNRESOLVED
whenever a form finds nothing, clear refusals at load, pointer and JMESPath agreeing where both
can say the same thing, and the bound arguments checked against the undo's schema before a call."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aegis_nb.kernel.values import freeze
from aegis_nb.server.bindings import (
    UNRESOLVED,
    Binding,
    BindingError,
    JmesPathBinding,
    RegexBinding,
    bind,
    parse_binding,
    unfit_arguments,
    value_type,
)

# What @modelcontextprotocol/server-memory 2026.8.31 answers (its structured content).
ENTITIES = {
    "entities": [
        {"name": "ada", "entityType": "person", "observations": ["wrote the first program"]},
        {"name": "engine", "entityType": "machine", "observations": []},
    ]
}
OBSERVATIONS = {
    "results": [
        {"entityName": "ada", "addedObservations": ["met babbage"]},
        {"entityName": "engine", "addedObservations": ["analytical", "never built"]},
    ]
}
# mcp-server-git's git_commit answers in words only: `unwrap_result` makes that {"text": ...}.
COMMITTED = {"text": "Changes committed successfully with hash 3f2a9c0de1b4a7f6e5d4c3b2a1908172635445ab"}


def test_jmespath_maps_a_list_of_entities_to_their_names() -> None:
    bindings = {"entityNames": parse_binding({"jmespath": "result.entities[*].name"})}
    assert bind(bindings, {}, freeze(ENTITIES, "result")) == ({"entityNames": ["ada", "engine"]}, ())


def test_jmespath_renames_keys_and_builds_the_objects_an_undo_takes() -> None:
    text = "result.results[*].{entityName: entityName, observations: addedObservations}"
    bindings = {"deletions": parse_binding({"jmespath": text})}
    assert bind(bindings, {}, freeze(OBSERVATIONS, "result")) == (
        {
            "deletions": [
                {"entityName": "ada", "observations": ["met babbage"]},
                {"entityName": "engine", "observations": ["analytical", "never built"]},
            ]
        },
        (),
    )


def test_jmespath_builds_one_object_from_the_arguments_the_result_and_the_before_read() -> None:
    binding = parse_binding(
        {"jmespath": "{branch: before.current, repo: arguments.repo_path, n: length(result.entities)}"}
    )
    assert binding.resolve({"repo_path": "/r"}, ENTITIES, {"current": "main"}) == {
        "branch": "main",
        "repo": "/r",
        "n": 2,
    }


def test_a_regex_takes_the_commit_hash_out_of_a_text_answer() -> None:
    bindings = {"revision": parse_binding({"regex": "with hash (?P<sha>[0-9a-f]+)", "from": "/result/text"})}
    assert bind(bindings, {}, COMMITTED) == ({"revision": "3f2a9c0de1b4a7f6e5d4c3b2a1908172635445ab"}, ())


def test_a_regex_with_several_named_groups_gives_an_object_and_reads_result_text_by_default() -> None:
    binding = parse_binding({"regex": r"(?P<verb>\w+) committed .* hash (?P<sha>[0-9a-f]{7})"})
    assert binding == RegexBinding.parse(
        r"(?P<verb>\w+) committed .* hash (?P<sha>[0-9a-f]{7})", "/result/text"
    )
    assert binding.resolve({}, COMMITTED) == {"verb": "Changes", "sha": "3f2a9c0"}


def test_a_pointer_reads_the_before_read_too() -> None:
    assert Binding.parse("/before/branch").resolve({}, None, {"branch": "main"}) == "main"


@pytest.mark.parametrize(
    ("binding", "arguments", "result", "before"),
    [
        ({"jmespath": "result.entities[*].name"}, {}, None, None),  # the call left no result
        ({"jmespath": "result.missing"}, {}, ENTITIES, None),  # null
        ({"jmespath": "length(result.entities[0].name.x)"}, {}, ENTITIES, None),  # length(null) fails
        ({"jmespath": "before.branch"}, {}, ENTITIES, None),  # no before read
        ({"jmespath": "{a: before.branch}"}, {}, ENTITIES, None),  # reads before, which is not there
        ({"regex": "with hash (?P<sha>[0-9a-f]+)"}, {}, {"text": "nothing to commit"}, None),
        ({"regex": "(?P<a>x)|(?P<b>y)"}, {}, {"text": "y"}, None),  # a named group took no part
        ({"regex": "(?P<sha>.+)"}, {}, ENTITIES, None),  # no text at /result/text
        ({"regex": "(?P<sha>.+)", "from": "/result/entities"}, {}, ENTITIES, None),  # not a string
        ("/before/branch", {}, ENTITIES, None),
    ],
)
def test_a_binding_that_finds_nothing_is_unresolved(
    binding: object, arguments: dict[str, Any], result: dict[str, Any] | None, before: Any
) -> None:
    assert bind({"x": parse_binding(binding)}, arguments, result, before) == ({}, ("x",))
    assert parse_binding(binding).resolve(arguments, result, before) is UNRESOLVED


def test_an_expression_reading_only_the_arguments_resolves_on_a_call_that_left_no_result() -> None:
    bindings = {"name": parse_binding({"jmespath": "arguments.entities[0].name"})}
    assert bind(bindings, {"entities": [{"name": "ada"}]}, None) == ({"name": "ada"}, ())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"jmespath": "entities[*].name"},
            "'entities[*].name' reads 'entities' at the top: an expression starts from arguments, result "
            "or before (e.g. 'result.entities')",
        ),
        (
            {"jmespath": "result.entities[*"},
            "'result.entities[*' is not a JMESPath expression: the expression is incomplete",
        ),
        (
            {"jmespath": "result..x"},
            "'result..x' is not a JMESPath expression: Expecting: ['quoted_identifier', "
            "'unquoted_identifier', 'lbracket', 'lbrace'], got: dot at column 8",
        ),
        ({"jmespath": ""}, "'' is not a JMESPath expression: the expression is empty"),
        ({"jmespath": "names(result)"}, "'names(result)': JMESPath has no function names()"),
        ({"jmespath": 3}, "expected a JMESPath expression as a string, got int"),
        (
            {"regex": "with hash [0-9a-f]+"},
            "'with hash [0-9a-f]+' names no group: write (?P<name>...) around what to take",
        ),
        (
            {"regex": "(?P<sha>[0-9a-f+"},
            "'(?P<sha>[0-9a-f+' is not a regular expression: unterminated character set at position 8",
        ),
        (
            {"regex": "(?P<sha>.+)", "from": "result/text"},
            "from: 'result/text' is not a JSON Pointer: it must start with '/' (e.g. '/result/id')",
        ),
        (
            {"regex": "(?P<sha>.+)", "group": "sha"},
            "a table here holds jmespath, or regex with an optional from (it holds group, regex)",
        ),
        (
            {"jmespath": "result", "regex": "(?P<a>.)"},
            "a table here holds jmespath, or regex with an optional from (it holds jmespath, regex)",
        ),
        ({}, "a table here holds jmespath, or regex with an optional from (it holds nothing)"),
        (
            ["/result/id"],
            'expected a JSON Pointer string (\'/result/id\'), { jmespath = "..." } or { regex = "...", '
            'from = "..." }, got list',
        ),
        ("/response/id", "'/response/id' must point into /arguments, /result or /before, not /response"),
    ],
)
def test_a_binding_that_cannot_be_read_is_refused_with_its_reason(value: object, message: str) -> None:
    with pytest.raises(BindingError) as caught:
        parse_binding(value)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("value", "roots", "kind"),
    [
        ("/result/id", {"result"}, None),
        ("/arguments/city", {"arguments"}, "string"),
        ({"jmespath": "result.entities[*].name"}, {"result"}, "array"),
        ({"jmespath": "{a: arguments.city, b: before.x}"}, {"arguments", "before"}, "object"),
        ({"jmespath": "result | [0]"}, {"result"}, None),
        ({"jmespath": "join(', ', result.names)"}, {"result"}, "string"),
        ({"jmespath": "@"}, {"@"}, None),
        ({"jmespath": "sort_by(result.items, &price)[0].id"}, {"result"}, None),
        ({"regex": "(?P<sha>.+)"}, {"result"}, "string"),
        ({"regex": "(?P<a>.)(?P<b>.)", "from": "/arguments/message"}, {"arguments"}, "object"),
    ],
)
def test_what_a_binding_reads_and_the_type_it_gives_are_known_at_load(
    value: object, roots: set[str], kind: str | None
) -> None:
    binding = parse_binding(value)
    assert (set(binding.roots), value_type(binding, {"city": {"type": "string"}})) == (roots, kind)


UNDO_SCHEMA = {
    "type": "object",
    "properties": {"entityNames": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "required": ["entityNames"],
}


@pytest.mark.parametrize(
    ("bound", "why"),
    [
        ({"entityNames": ["ada"]}, None),
        (
            {"entityNames": []},
            "delete_entities was not called: the bound arguments do not fit its input schema "
            "(entityNames: must have at least 1 items)",
        ),
        (
            {"entityNames": ["ada", None]},
            "delete_entities was not called: the bound arguments do not fit its input schema "
            "(entityNames/1: must be of type string)",
        ),
        (
            {},
            "delete_entities was not called: the bound arguments do not fit its input schema "
            "('entityNames' is a required property)",
        ),
    ],
)
def test_bound_arguments_are_checked_against_the_undo_schema_before_the_call(
    bound: dict[str, Any], why: str | None
) -> None:
    assert unfit_arguments("delete_entities", UNDO_SCHEMA, freeze(bound, "bound")) == why


def test_a_secret_bound_value_that_does_not_fit_is_not_quoted() -> None:
    schema = {"type": "object", "properties": {"card": {"type": "string", "pattern": "^[0-9]{4}$"}}}
    why = unfit_arguments("refund", schema, {"card": "4111 1111 1111 1111"})
    assert why == (
        "refund was not called: the bound arguments do not fit its input schema "
        "(card: must match the pattern ^[0-9]{4}$)"
    )


# -- pointer and JMESPath agree where both can say the same thing -----------------------------------

KEYS = st.text(alphabet="abcxyz_", min_size=1, max_size=4).filter(lambda key: not key[0].isdigit())
LEAVES = st.one_of(
    st.integers(), st.text(max_size=5), st.booleans(), st.floats(allow_nan=False, allow_infinity=False)
)
DOCUMENTS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=20,
)
STEPS = st.lists(st.one_of(KEYS, st.integers(min_value=0, max_value=4)), max_size=4)


def _pointer(root: str, steps: list[str | int]) -> str:
    return "/" + "/".join([root, *map(str, steps)])


def _expression(root: str, steps: list[str | int]) -> str:
    return root + "".join(f"[{step}]" if isinstance(step, int) else f".{json.dumps(step)}" for step in steps)


@given(
    arguments=st.dictionaries(KEYS, DOCUMENTS, max_size=4),
    result=st.dictionaries(KEYS, DOCUMENTS, max_size=4),
    root=st.sampled_from(["arguments", "result"]),
    steps=STEPS,
)
def test_a_pointer_and_the_jmespath_path_it_spells_resolve_alike(
    arguments: dict[str, Any], result: dict[str, Any], root: str, steps: list[str | int]
) -> None:
    pointer = Binding.parse(_pointer(root, steps)).resolve(arguments, result)
    expression = JmesPathBinding.parse(_expression(root, steps)).resolve(arguments, result)
    assert pointer == expression  # UNRESOLVED for both, or the same value (no leaf is null)


@given(result=st.dictionaries(KEYS, DOCUMENTS, max_size=4), steps=STEPS)
def test_frozen_results_resolve_as_the_plain_ones(result: dict[str, Any], steps: list[str | int]) -> None:
    frozen = freeze(result, "result")
    for binding in (
        Binding.parse(_pointer("result", steps)),
        JmesPathBinding.parse(_expression("result", steps)),
    ):
        plain, held = binding.resolve({}, result), binding.resolve({}, frozen)
        assert (held is UNRESOLVED, freeze(held, "x") if held is not UNRESOLVED else None) == (
            plain is UNRESOLVED,
            freeze(plain, "x") if plain is not UNRESOLVED else None,
        )
