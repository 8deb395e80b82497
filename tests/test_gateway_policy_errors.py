"""A gateway policy is checked before anything is served: every error names the file, the line and the
key (an unknown key, a bad pointer, a kind that does not exist, a tool no upstream serves), and the
shipped policy of the mock agency loads and fits the agency's tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from aegis_nb.gateway import Binding, BindingError, Gateway, PolicyError, ToolKind, load_policy, parse_policy
from aegis_nb.gateway.policy import key_line
from aegis_nb.mock import TravelAgency

HEAD = """\
[upstreams.agency]
command = "aegis-nb"
args = ["mock"]
"""

AGENCY_TOOLS = (
    "book_flight, cancel_flight, cancel_hotel, charge_card, list_bookings, refund_card, reserve_hotel, "
    "search_flights, set_faults"
)

SHIPPED = Path(__file__).parent.parent / "aegis_nb" / "mock" / "travel_policy.toml"


def error_of(text: str) -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "trip.toml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '\n[tools.book_flight]\nkind = "compensable"\nundo = "cancel_flight"\nundoo_args = {}\n',
            "trip.toml:8: tools.book_flight.undoo_args: unknown key (known here: allow_in_saga, guess, "
            "idempotency_arg, kind, secret, undo, undo_args, upstream)",
        ),
        (
            '\n[tools.book_flight]\nkind = "compensable"\nundo = "cancel_flight"\n'
            'undo_args = { booking_id = "result/booking_id" }\n',
            "trip.toml:8: tools.book_flight.undo_args.booking_id: bad pointer: 'result/booking_id' is not a "
            "JSON Pointer: it must start with '/' (e.g. '/result/id')",
        ),
        (
            '\n[tools.book_flight]\nkind = "compensable"\nundo = "cancel_flight"\n\n'
            "[tools.book_flight.undo_args]\n"
            'booking_id = "/response/booking_id"\n',
            "trip.toml:10: tools.book_flight.undo_args.booking_id: bad pointer: '/response/booking_id' must "
            "point into /arguments, /result or /before, not /response",
        ),
        (
            '\n[tools.book_flight]\nkind = "compensable"\nundo = "cancel_flight"\n'
            'undo_args = { booking_id = "$response.headers#/id" }\n',
            "trip.toml:8: tools.book_flight.undo_args.booking_id: bad pointer: '$response.headers#/id': the "
            "expressions understood are '$response.body#/...' or '$request.body#/...'",
        ),
        (
            '\n[tools.book_flight]\nkind = "undoable"\n',
            "trip.toml:6: tools.book_flight.kind: expected one of 'read_only', 'compensable', "
            "'irreversible', got 'undoable'",
        ),
        (
            '\n[tools.book_flight]\nkind = "compensable"\n',
            'trip.toml:5: tools.book_flight: a compensable tool needs undo = "<the tool that undoes it>"',
        ),
        (
            '\n[tools.search_flights]\nkind = "read_only"\nundo = "x"\n',
            "trip.toml:7: tools.search_flights.undo: only a compensable tool has undo, not a read_only one",
        ),
        (
            '\n[tools.saga_begin]\nkind = "read_only"\n',
            "trip.toml:5: tools.saga_begin: 'saga_begin' is the gateway's own saga tool; an upstream tool "
            "cannot take its name",
        ),
        (
            '\n[tools.book_flight]\nkind = "read_only"\nupstream = "airline"\n',
            "trip.toml:7: tools.book_flight.upstream: no upstream 'airline' (upstreams: agency)",
        ),
        (
            "timeout = 3\n",
            "trip.toml:4: upstreams.agency.timeout: unknown key (known here: args, command, env, url)",
        ),
        (
            '\n[tools.x]\nkind = "read_only"\nkind = "compensable"\n',
            "trip.toml:7: not valid TOML: Cannot overwrite a value",
        ),
    ],
)
def test_a_policy_error_names_the_file_the_line_and_the_key(body: str, message: str) -> None:
    assert error_of(HEAD + body) == message


def test_an_upstream_needs_a_command_or_a_url_and_a_policy_needs_an_upstream() -> None:
    assert error_of('[upstreams.a]\nargs = ["x"]\n') == (
        "trip.toml:1: upstreams.a: give either command (a stdio server) or url (streamable HTTP), not both"
    )
    assert error_of('[upstreams.a]\nurl = "ftp://x"\n') == (
        "trip.toml:2: upstreams.a.url: expected an http:// or https:// URL"
    )
    assert error_of("[tools]\n") == "trip.toml: upstreams: missing: add a [upstreams.NAME] table"
    assert (
        error_of("timeout = 3\n" + HEAD) == "trip.toml:1: timeout: unknown key (known here: tools, upstreams)"
    )


def test_a_missing_file_is_a_policy_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(tmp_path / "none.toml")
    assert str(caught.value) == f"{tmp_path / 'none.toml'}: cannot read the policy: No such file or directory"


def test_key_line_finds_tables_dotted_keys_and_inline_tables() -> None:
    text = (
        "[tools.a]\n"  # 1
        'kind = "compensable"\n'  # 2
        'undo_args = { x = "/result/x", y = "/result/y" }\n'  # 3
        "[tools.b]\n"  # 4
        'undo_args.z = "/result/z"\n'  # 5
        '[tools."c.d"]\n'  # 6
        "kind = 1\n"  # 7
    )
    found = [
        key_line(text, path)
        for path in [
            ("tools", "a"),
            ("tools", "a", "kind"),
            ("tools", "a", "undo_args", "y"),
            ("tools", "b", "undo_args", "z"),
            ("tools", "c.d", "kind"),
            ("tools", "b", "missing"),
            ("nowhere",),
        ]
    ]
    assert found == [1, 2, 3, 5, 7, 4, None]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("/result/booking_id", ("result", "booking_id")),
        ("$response.body#/booking_id", ("result", "booking_id")),
        ("$request.body#/city", ("arguments", "city")),
        ("/arguments/a~1b/c~0d", ("arguments", "a/b", "c~d")),
        ("/result", ("result",)),
    ],
)
def test_bindings_read_json_pointers_and_sep_3172_expressions(text: str, tokens: tuple[str, ...]) -> None:
    assert Binding.parse(text) == Binding(text, tokens)


def test_a_binding_resolves_or_says_it_did_not() -> None:
    arguments = {"city": "Oslo", "rooms": [{"id": "r1"}]}
    result = {"booking_id": "HT-1", "list": ["a", "b"], "zero": 0}
    found = [
        Binding.parse(text).resolve(arguments, result)
        for text in (
            "/result/booking_id",
            "/arguments/rooms/0/id",
            "/result/list/1",
            "/result/zero",
            "/result/missing",
            "/result/list/2",
            "/result/list/01",
            "/result/list/-",
            "/result/booking_id/x",
        )
    ]
    assert [repr(value) for value in found] == [
        "'HT-1'",
        "'r1'",
        "'b'",
        "0",
        *["<Unresolved.UNRESOLVED: 1>"] * 5,
    ]
    # A step compensated in doubt has no result: nothing under /result resolves, /arguments still does.
    assert repr(Binding.parse("/result/booking_id").resolve(arguments, None)) == "<Unresolved.UNRESOLVED: 1>"
    assert Binding.parse("/arguments/city").resolve(arguments, None) == "Oslo"


def test_a_tilde_that_escapes_nothing_is_a_bad_pointer() -> None:
    with pytest.raises(
        BindingError, match=r"'/result/a~2': '~' in a JSON Pointer must be followed by 0 or 1"
    ):
        Binding.parse("/result/a~2")


def test_the_mock_agency_ships_a_policy_for_every_one_of_its_tools() -> None:
    policy = load_policy(SHIPPED)
    assert {tool.name: tool.kind for tool in policy.tools} == {
        "search_flights": ToolKind.READ_ONLY,
        "list_bookings": ToolKind.READ_ONLY,
        "book_flight": ToolKind.COMPENSABLE,
        "reserve_hotel": ToolKind.COMPENSABLE,
        "charge_card": ToolKind.COMPENSABLE,
        "cancel_flight": ToolKind.IRREVERSIBLE,
        "cancel_hotel": ToolKind.IRREVERSIBLE,
        "refund_card": ToolKind.IRREVERSIBLE,
        "set_faults": ToolKind.IRREVERSIBLE,
    }
    charge = policy.tool("charge_card")
    assert charge is not None
    assert (charge.undo, charge.bindings, charge.secret) == (
        "refund_card",
        {"idempotency_key": Binding("$request.body#/idempotency_key", ("arguments", "idempotency_key"))},
        ("card_number",),
    )


def test_the_shipped_policy_is_in_the_wheel_listing() -> None:
    # Hatch ships every file in the package folder that git does not ignore: a .toml beside the code.
    assert SHIPPED.is_file()
    assert "travel_policy.toml" not in (Path(__file__).parent.parent / ".gitignore").read_text()


@pytest.mark.anyio
async def test_a_policy_that_does_not_fit_the_upstream_is_refused_at_start() -> None:
    cases = {
        '[tools.rent_car]\nkind = "read_only"\n': "trip.toml:5: tools.rent_car: no upstream serves a tool "
        f"'rent_car' (tools: {AGENCY_TOOLS})",
        '[tools.book_flight]\nkind = "compensable"\nundo = "unbook"\n': "trip.toml:7: "
        f"tools.book_flight.undo: no upstream serves the undo tool 'unbook' (tools: {AGENCY_TOOLS})",
        '[tools.book_flight]\nkind = "compensable"\nundo = "cancel_flight"\n'
        'undo_args = { flight = "/result/booking_id" }\n': "trip.toml:8: tools.book_flight.undo_args.flight: "
        "the undo tool 'cancel_flight' takes no argument 'flight' (it takes: booking_id, idempotency_key)",
        '[tools.book_flight]\nkind = "compensable"\nundo = "cancel_flight"\n'
        'undo_args = { booking_id = "/arguments/booking" }\n': "trip.toml:8: "
        "tools.book_flight.undo_args.booking_id: '/arguments/booking': 'book_flight' takes no argument "
        "'booking'",
        '[tools.charge_card]\nkind = "compensable"\nundo = "refund_card"\nsecret = ["card"]\n': "trip.toml:"
        "8: tools.charge_card.secret: 'charge_card' takes no argument 'card'",
    }
    found = {}
    for body, _ in cases.items():
        gateway = Gateway(
            parse_policy(f"{HEAD}\n{body}", "trip.toml"), upstreams={"agency": TravelAgency().server}
        )
        with pytest.raises(PolicyError) as caught:
            async with gateway:
                pass
        found[body] = str(caught.value)
    assert found == cases
