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
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from mcp.types import Tool

from aegis_nb.gateway.policy import UpstreamSpec
from aegis_nb.gateway.upstream import Target
from aegis_nb.server.session import connect

_UNDO_VERBS: Final = ("cancel", "refund", "undo", "delete", "release", "unbook", "remove", "void")
_SECRET_WORDS: Final = re.compile(r"card|password|passwd|secret|token|cvv|cvc|iban", re.IGNORECASE)
_IDEMPOTENCY: Final = "idempotency_key"
_BARE: Final = re.compile(r"[A-Za-z0-9_\-]+")


def _key(name: str) -> str:
    """A TOML key: bare when it can be, else quoted."""
    return name if _BARE.fullmatch(name) else json.dumps(name)


def _words(name: str) -> set[str]:
    return {word for word in re.split(r"[_\-.]+", name.lower()) if word}


def _properties(schema: Mapping[str, Any] | None) -> list[str]:
    properties = (schema or {}).get("properties")
    return list(properties) if isinstance(properties, Mapping) else []


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
    lines = [
        "# A starting gateway policy, written by `aegis-nb gateway --observe` from the upstreams' tool",
        "# listings. Every entry is a guess: check each, then delete its `guess = true`.",
        "",
    ]
    for spec, _tools in listings:
        lines.append(f"[upstreams.{_key(spec.name)}]")
        if spec.url is not None:
            lines.append(f"url = {json.dumps(spec.url)}")
        else:
            lines.append(f"command = {json.dumps(spec.command)}")
            if spec.args:
                lines.append(f"args = {json.dumps(list(spec.args))}")
        lines.append("")
    several = len(listings) > 1
    for spec, tools in listings:
        undone = {found.name for tool in tools if (found := undo_for(tool, tools)) is not None}
        for tool in tools:
            lines.extend(_entry(tool, tools, undone, spec.name if several else None))
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _entry(tool: Tool, tools: Sequence[Tool], undone: set[str], upstream: str | None) -> list[str]:
    hints = tool.annotations
    arguments = _properties(tool.input_schema)
    lines = [f"[tools.{_key(tool.name)}]"]
    undo = undo_for(tool, tools)
    if hints is not None and hints.read_only_hint is True:
        lines += ["# guess: its readOnlyHint says it changes nothing", 'kind = "read_only"']
    elif undo is not None:
        lines += [
            f"# guess: {undo.name} looks like its undo",
            'kind = "compensable"',
            f"undo = {json.dumps(undo.name)}",
        ]
        results = _properties(tool.output_schema)
        bound = []
        for name in _properties(undo.input_schema):
            if name in results:
                bound.append(f"{_key(name)} = {json.dumps('/result/' + name)}")
            elif name in arguments and name != _IDEMPOTENCY:
                bound.append(f"{_key(name)} = {json.dumps('/arguments/' + name)}")
        if bound:
            lines.append(f"undo_args = {{ {', '.join(bound)} }}")
        else:
            lines.append(f"# no argument of {undo.name} matches what {tool.name} takes or returns: bind them")
            lines.append("undo_args = {}")
        if _IDEMPOTENCY in arguments:
            lines.append(f'idempotency_arg = "{_IDEMPOTENCY}"')
    elif tool.name in undone:
        lines += [
            "# guess: it undoes another tool; in a saga, saga_rollback undoes instead",
            'kind = "irreversible"',
        ]
    else:
        lines += ["# guess: nothing says it is read only or can be undone", 'kind = "irreversible"']
    secret = [name for name in arguments if _SECRET_WORDS.search(name)]
    if secret:
        lines.append(f"secret = {json.dumps(secret)}")
    if upstream is not None:
        lines.append(f"upstream = {json.dumps(upstream)}")
    lines.append("guess = true")
    return lines


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
