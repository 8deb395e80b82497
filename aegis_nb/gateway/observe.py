"""``aegis-nb gateway --observe``: a starting policy drafted from what upstream servers list.

Every entry is a guess, and says so twice: ``guess = true`` (the gateway names the tools still
marked when it starts) and a comment giving the reason. The guesses, from the listing alone:

- ``readOnlyHint`` -> ``read_only``;
- a tool with an undo beside it -> ``compensable``: ``cancel_x``, ``refund_x``, ``undo_x``,
  ``delete_x``, ``release_x`` or ``unbook_x`` sharing a word with the tool's name (``book_flight`` /
  ``cancel_flight``); its undo arguments are bound to the result fields the tool's output schema
  names (``/result/booking_id``), else to the tool's own arguments of the same name;
- anything else -> ``irreversible``, with no exception for ``destructiveHint: false``: a tool that
  adds without destroying still cannot be taken back.

An ``idempotency_key`` argument is named as the tool's ``idempotency_arg``; an argument whose name
says card, password, secret or token is marked ``secret``.

What an upstream lists is untrusted: the draft is written by a TOML writer (tomlkit), so its names
appear only as quoted keys and strings, never in a comment, and with every character a terminal
would act on written as an escape. A tool whose name a policy cannot hold (letters, digits, ``_``,
``-`` and ``.``) is left out of the draft, and a URL's credentials are not written (`redacted_url`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import tomlkit
from mcp.types import Tool
from tomlkit.items import Table

from aegis_nb.gateway.policy import SAGA_TOOLS, UpstreamSpec, is_policy_name
from aegis_nb.gateway.upstream import Target
from aegis_nb.kernel.printable import BIDI_CONTROLS
from aegis_nb.server.session import connect, redacted_url

_UNDO_VERBS: Final = ("cancel", "refund", "undo", "delete", "release", "unbook", "remove", "void")
_SECRET_WORDS: Final = re.compile(r"card|password|passwd|secret|token|cvv|cvc|iban", re.IGNORECASE)
_IDEMPOTENCY: Final = "idempotency_key"

_RAW_IN_TOML: Final = re.compile("[\x7f-\x9f\u2028\u2029" + "".join(sorted(BIDI_CONTROLS)) + "]")
"""What a TOML writer may leave raw in a string and a terminal acts on: DEL, the C1 controls (an
8-bit CSI), the line separators and the bidi controls. The writer escapes the C0 controls itself."""

_HEADER: Final = (
    "A starting gateway policy, written by `aegis-nb gateway --observe` from the upstreams' tool",
    "listings. Every entry is a guess: check each, then delete its `guess = true`.",
)


def _words(name: str) -> set[str]:
    return {word for word in re.split(r"[_\-.]+", name.lower()) if word}


def _properties(schema: Mapping[str, Any] | None) -> list[str]:
    properties = (schema or {}).get("properties")
    return [name for name in properties if isinstance(name, str)] if isinstance(properties, Mapping) else []


def _pointer(root: str, name: str) -> str:
    """A JSON Pointer to `name` under `root`, escaped as RFC 6901 says (``~0``, ``~1``)."""
    return f"/{root}/" + name.replace("~", "~0").replace("/", "~1")


def undo_for(tool: Tool, tools: Sequence[Tool]) -> Tool | None:
    """The tool that looks like `tool`'s undo, or None: an undo verb and a word of `tool`'s name."""
    words = _words(tool.name)
    for other in tools:
        verb, _, rest = other.name.lower().partition("_")
        if other.name != tool.name and verb in _UNDO_VERBS and rest and _words(rest) & words:
            return other
    return None


def draft_policy(listings: Sequence[tuple[UpstreamSpec, Sequence[Tool]]]) -> str:
    """A policy file's text for the upstreams in `listings`, each with the tools it listed."""
    draft = tomlkit.document()
    for line in _HEADER:
        draft.add(tomlkit.comment(line))
    draft.add(tomlkit.nl())
    upstreams = tomlkit.table(is_super_table=True)
    for spec, _tools in listings:
        upstream = tomlkit.table()
        if spec.url is not None:
            url = redacted_url(spec.url)
            if url != spec.url:
                upstream.add(tomlkit.comment("the URL's credentials are not written here: put them back"))
            upstream.add("url", url)
        else:
            upstream.add("command", spec.command)
            if spec.args:
                upstream.add("args", list(spec.args))
        upstreams.add(spec.name, upstream)
    draft.add("upstreams", upstreams)
    several = len(listings) > 1
    entries = tomlkit.table(is_super_table=True)
    left_out = 0
    for spec, listed in listings:
        # Names a policy cannot hold would make the whole draft fail to load: the gateway serves
        # those tools by their annotations' default instead. A name listed twice is drafted once.
        tools = [tool for tool in listed if is_policy_name(tool.name) and tool.name not in SAGA_TOOLS]
        left_out += len(listed) - len(tools)
        undone = {found.name for tool in tools if (found := undo_for(tool, tools)) is not None}
        for tool in tools:
            if tool.name in entries:
                left_out += 1
                continue
            entries.add(tool.name, _entry(tool, tools, undone, spec.name if several else None))
    if left_out:
        draft.add(tomlkit.nl())
        draft.add(
            tomlkit.comment(f"{left_out} listed tool(s) left out, named as a policy cannot name a tool")
        )
        draft.add(tomlkit.comment("or drafted already: the gateway serves them as their annotations say"))
        draft.add(tomlkit.nl())
    if entries:
        draft.add("tools", entries)
    text = tomlkit.dumps(draft)
    # Only inside basic strings can these be (the comments are ours), where an escape means the same.
    return _RAW_IN_TOML.sub(lambda found: f"\\u{ord(found.group()):04X}", text).rstrip("\n") + "\n"


def _entry(tool: Tool, tools: Sequence[Tool], undone: set[str], upstream: str | None) -> Table:
    hints = tool.annotations
    arguments = _properties(tool.input_schema)
    entry = tomlkit.table()
    undo = undo_for(tool, tools)
    if hints is not None and hints.read_only_hint is True:
        entry.add(tomlkit.comment("guess: its readOnlyHint says it changes nothing"))
        entry.add("kind", "read_only")
    elif undo is not None:
        entry.add(tomlkit.comment("guess: the undo tool's name says it undoes this one"))
        entry.add("kind", "compensable")
        entry.add("undo", undo.name)
        results = _properties(tool.output_schema)
        bound = tomlkit.inline_table()
        for name in _properties(undo.input_schema):
            if name in results:
                bound[name] = _pointer("result", name)
            elif name in arguments and name != _IDEMPOTENCY:
                bound[name] = _pointer("arguments", name)
        if not bound:
            entry.add(
                tomlkit.comment("no argument of the undo matches what this tool takes or returns: bind them")
            )
        entry.add("undo_args", bound)
        if _IDEMPOTENCY in arguments:
            entry.add("idempotency_arg", _IDEMPOTENCY)
    elif tool.name in undone:
        entry.add(tomlkit.comment("guess: it undoes another tool; in a saga, saga_rollback undoes instead"))
        entry.add("kind", "irreversible")
    else:
        entry.add(tomlkit.comment("guess: nothing says it is read only or can be undone"))
        entry.add("kind", "irreversible")
    secret = [name for name in arguments if _SECRET_WORDS.search(name)]
    if secret:
        entry.add("secret", secret)
    if upstream is not None:
        entry.add("upstream", upstream)
    entry.add("guess", True)
    return entry


def upstream_from(text: str, taken: Sequence[str] = ()) -> UpstreamSpec:
    """An ``--observe`` argument as an upstream: a URL, or a command line (split as a shell would).

    Named after the URL's host or the command's file name (``agency``-style names are for the
    person editing the draft to choose), with a number added when `taken` has it already.
    """
    if re.match(r"https?://", text):
        base = urlsplit(text).hostname or "upstream"
        spec = UpstreamSpec("", url=text)
    else:
        argv = shlex.split(text)
        if not argv:
            raise ValueError("an empty upstream: give a command line or a URL")
        base = Path(argv[0]).stem or "upstream"
        spec = UpstreamSpec("", command=argv[0], args=tuple(argv[1:]))
    base = re.sub(r"[^A-Za-z0-9_\-]+", "-", base).strip("-") or "upstream"
    name, number = base, 1
    while name in taken:
        number += 1
        name = f"{base}-{number}"
    return replace(spec, name=name)


async def observe(upstreams: Sequence[tuple[UpstreamSpec, Target]]) -> str:
    """Connect to each upstream, list its tools, and draft a policy for them (`draft_policy`)."""
    listings: list[tuple[UpstreamSpec, Sequence[Tool]]] = []
    for spec, target in upstreams:
        async with connect(target) as session:
            listing = await session.client.list_tools()
        listings.append((spec, listing.tools))
    return draft_policy(listings)
