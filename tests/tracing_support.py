"""Spans for the trace tests: an SDK tracer provider of their own, and a finished trace as one tree.

`Spans.tree()` turns what the in-memory exporter holds into nested plain data (names, attributes,
events, status, links by name, children), with run ids replaced by ``RUN``, so a test can assert a
whole trace with one ``==``. The provider is never set globally: each test passes it to its tracer.
"""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Tracer

from tests.conftest import require

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

Node = dict[str, Any]


class Spans:
    """A tracer provider whose finished spans are kept in memory, and a tracer of the test's own.

    The SDK is the dev extra's (the package needs only the API): without it the test skips, or fails
    under AEGIS_STRICT=1.
    """

    def __init__(self) -> None:
        require(importlib.util.find_spec("opentelemetry.sdk") is not None, "opentelemetry-sdk (dev extra)")
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def tracer(self) -> Tracer:
        return self.provider.get_tracer("tests")

    def finished(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def tree(self, run_ids: Iterable[str] = ()) -> list[Node]:
        return span_tree(self.finished(), run_ids)


def span_tree(spans: Sequence[ReadableSpan], run_ids: Iterable[str] = ()) -> list[Node]:
    """`spans` as trees, roots first, children in the order they started; `run_ids` become ``RUN``."""
    known = {span.context.span_id: span for span in spans if span.context is not None}
    names = {span_id: span.name for span_id, span in known.items()}
    children: dict[int | None, list[ReadableSpan]] = defaultdict(list)
    for span in sorted(spans, key=lambda span: span.start_time or 0):
        parent = span.parent.span_id if span.parent is not None else None
        children[parent if parent in known else None].append(span)
    hidden = tuple(run_ids)

    def node(span: ReadableSpan) -> Node:
        assert span.context is not None
        return {
            "name": span.name,
            "attributes": _hide(dict(span.attributes or {}), hidden),
            "events": [(event.name, _hide(dict(event.attributes or {}), hidden)) for event in span.events],
            "status": (span.status.status_code.name, span.status.description),
            "links": [names.get(link.context.span_id, "?") for link in span.links],
            "children": [node(child) for child in children[span.context.span_id]],
        }

    return [node(span) for span in children[None]]


def _hide(attributes: Mapping[str, Any], run_ids: tuple[str, ...]) -> dict[str, Any]:
    def hidden(value: Any) -> Any:
        if isinstance(value, str):
            for run_id in run_ids:
                value = value.replace(run_id, "RUN")
        return value

    return {key: hidden(value) for key, value in attributes.items()}


def spans_json(spans: Iterable[ReadableSpan]) -> str:
    """Every span as the SDK serialises it (what an exporter would send), in one text."""
    return json.dumps([json.loads(span.to_json()) for span in spans])


def filed_spans(text: str) -> list[dict[str, Any]]:
    """Spans another process wrote one per line (``ReadableSpan.to_json(indent=None)``)."""
    return [json.loads(line) for line in text.splitlines()]


def filed_tree(spans: Sequence[Mapping[str, Any]], parent_id: str, run_ids: Iterable[str] = ()) -> list[Node]:
    """The filed spans below span `parent_id` (``0x`` and hex, as filed) as trees of names, kinds and
    children, ordered by start time; our own spans (``aegis.run.id``) with their attributes too."""
    hidden = tuple(run_ids)
    ordered = sorted(spans, key=lambda span: str(span["start_time"]))

    def below(parent: str) -> list[Node]:
        return [node(span) for span in ordered if span["parent_id"] == parent]

    def node(span: Mapping[str, Any]) -> Node:
        shown: Node = {"name": span["name"], "kind": span["kind"].removeprefix("SpanKind.")}
        if "aegis.run.id" in span["attributes"]:
            shown["attributes"] = _hide(span["attributes"], hidden)
        shown["children"] = below(span["context"]["span_id"])
        return shown

    return below(parent_id)
