"""`thaw` gives plain JSON all the way down, whatever holds the frozen values: a `FrozenDict`, or a
plain dict or list built around values taken from frozen metadata (an undo's bound arguments)."""

from __future__ import annotations

import json
from typing import Any

from aegis_nb.kernel.values import REDACTED, FrozenDict, Secret, freeze, thaw

RESULT: dict[str, Any] = {
    "relations": [{"source": "a", "target": "b"}],
    "owner": {"tags": ["x", {"deep": [1, 2.5]}]},
}


def kinds(value: Any) -> set[type]:
    """Every container type inside `value`."""
    if isinstance(value, dict):
        return {dict}.union(*map(kinds, value.values()))
    if isinstance(value, list | tuple):
        return {type(value)}.union(*map(kinds, value))
    return set() if value is None or isinstance(value, str | int | float) else {type(value)}


def test_plain_containers_holding_frozen_values_thaw_to_plain_json() -> None:
    frozen = freeze(RESULT, "result")
    bound = {"relations": frozen["relations"], "owner": frozen["owner"], "count": 1}
    listed = [frozen["relations"][0], (frozen["owner"],)]
    assert (thaw(bound), kinds(thaw(bound))) == ({**RESULT, "count": 1}, {dict, list})
    assert (thaw(listed), kinds(thaw(listed))) == ([RESULT["relations"][0], [RESULT["owner"]]], {dict, list})
    assert json.loads(json.dumps(thaw(bound))) == thaw(bound)


def test_secrets_inside_plain_containers_are_redacted_unless_revealed() -> None:
    held = {"card": Secret("4242"), "nested": [FrozenDict({"pin": Secret("1234")})]}
    assert thaw(held) == {"card": REDACTED, "nested": [{"pin": REDACTED}]}
    assert thaw(held, reveal=True) == {"card": "4242", "nested": [{"pin": "1234"}]}
