"""Static renderings that survive a saved notebook: GitHub, nbconvert HTML offline, untrusted notebooks.

A widget output shows "model not found" once its kernel is gone, inline ``<svg>`` in HTML is
sanitized away in untrusted notebooks, and ``image/svg+xml`` is not shown there either. An ``<img>``
whose source is the SVG as a ``data:`` URI, next to a ``text/plain`` rendering, is shown everywhere.

Every bundle is valid UTF-8 text: lone surrogates (undecodable bytes in an error message) become
U+FFFD, since the kernel sends bundles as UTF-8 JSON and ``str.encode`` refuses them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from html import escape
from typing import Any

from aegis_nb.diagram import (
    GraphSource,
    SequenceModel,
    fold,
    render_dot,
    render_graph,
    render_mermaid,
    render_svg,
    render_text,
)
from aegis_nb.diagram.labels import status_word, summary
from aegis_nb.kernel.text import replace_surrogates
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.outcome import SagaRun

Bundle = dict[str, str]
"""A display bundle: mime type to data."""

MERMAID_MIME = "text/vnd.mermaid"


def data_uri(svg: str) -> str:
    """``data:image/svg+xml;base64,...`` for an ``<img src>``."""
    data = replace_surrogates(svg).encode("utf-8")
    return "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")


def img_html(svg: str, alt: str, *, css_class: str = "aegis-static", note: str | None = None) -> str:
    """An ``<img>`` of `svg` at its natural size, scrolling sideways when wider than the page."""
    parts = [f'<div class="{css_class}" style="overflow-x:auto;max-width:100%">']
    if note:
        parts.append(f'<div class="aegis-note" style="color:#9a3412;font-size:12px">{escape(note)}</div>')
    parts.append(f'<img src="{data_uri(svg)}" alt="{escape(alt, quote=True)}" style="max-width:none"/>')
    parts.append("</div>")
    return "".join(parts)


def static_bundle(model: SequenceModel, *, svg: str | None = None) -> Bundle:
    """The finished (or current) diagram as ``text/html`` (an ``<img>``) plus ``text/plain``.

    `svg` is `render_svg(model)` when the caller already has it.
    """
    alt = f"{model.saga}: {status_word(model.status)} — {summary(model)}"
    picture = render_svg(model) if svg is None else svg
    return _utf8({"text/html": img_html(picture, alt), "text/plain": render_text(model)})


def _utf8(bundle: Bundle) -> Bundle:
    """`bundle` with lone surrogates made U+FFFD in every value, so that it encodes as UTF-8."""
    return {mime: replace_surrogates(data) for mime, data in bundle.items()}


def as_model(source: SagaRun | SequenceModel | Iterable[SagaEvent]) -> SequenceModel:
    """A sequence model from a run, a model, or a run's events."""
    if isinstance(source, SequenceModel):
        return source
    if isinstance(source, SagaRun):
        return fold(source.events)
    return fold(source)


class SagaDiagram:
    """A run's diagram in every format; displays itself as the static bundle.

    ``SagaDiagram(run)`` at the end of a cell shows the picture; `.svg`, `.mermaid`, `.dot` and
    `.text` give the sources; `.graph()` the graphviz view; `.mermaid_view()` the mermaid one.
    """

    __slots__ = ("model",)

    def __init__(self, source: SagaRun | SequenceModel | Iterable[SagaEvent]) -> None:
        self.model = as_model(source)

    @property
    def svg(self) -> str:
        return render_svg(self.model)

    @property
    def mermaid(self) -> str:
        return render_mermaid(self.model)

    @property
    def dot(self) -> str:
        return render_dot(self.model)

    @property
    def text(self) -> str:
        return render_text(self.model)

    def graph(self, *, dot: str | None = "dot") -> GraphView:
        """The saga as a graphviz graph (our SVG plus a one-line note when `dot` is missing)."""
        return GraphView(self.model, dot=dot)

    def mermaid_view(self) -> MermaidView:
        """The mermaid source as ``text/vnd.mermaid``, which JupyterLab draws offline."""
        return MermaidView(self.mermaid)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Bundle:
        return static_bundle(self.model)

    def __repr__(self) -> str:
        return replace_surrogates(self.text)  # printable, like the bundles


class GraphView:
    """A graphviz rendering shown as an ``<img>``; falls back to the sequence diagram with a note."""

    __slots__ = ("model", "rendering")

    def __init__(self, model: SequenceModel, *, dot: str | None = "dot") -> None:
        self.model = model
        self.rendering = render_graph(model, dot=dot)

    @property
    def note(self) -> str | None:
        return self.rendering.note

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Bundle:
        alt = f"{self.model.saga}: {summary(self.model)}"
        html = img_html(self.rendering.svg, alt, css_class="aegis-graph", note=self.rendering.note)
        text = render_text(self.model)
        if self.rendering.source is GraphSource.FALLBACK and self.rendering.note:
            text = f"{self.rendering.note}\n{text}"
        return _utf8({"text/html": html, "text/plain": text})


class MermaidView:
    """Mermaid source displayed as ``text/vnd.mermaid`` (JupyterLab >= 4.1), with the source as text."""

    __slots__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Bundle:
        return _utf8({MERMAID_MIME: self.source, "text/plain": self.source})
