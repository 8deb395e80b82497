"""Diagram layer (pure): saga events → a sequence model → SVG, Mermaid, DOT and text renderings.

No Jupyter imports and no I/O except `render_graph`, which runs graphviz `dot` when it exists.
"""

from aegis_nb.diagram.graph import GraphRendering, GraphSource, render_dot, render_graph
from aegis_nb.diagram.layout import Layout, layout
from aegis_nb.diagram.mermaid import render_mermaid
from aegis_nb.diagram.model import (
    EMPTY,
    Group,
    LaneState,
    Message,
    MessageKind,
    SequenceBuilder,
    SequenceModel,
    fold,
)
from aegis_nb.diagram.svg import render_svg
from aegis_nb.diagram.text import render_text

__all__ = [
    "EMPTY",
    "GraphRendering",
    "GraphSource",
    "Group",
    "LaneState",
    "Layout",
    "Message",
    "MessageKind",
    "SequenceBuilder",
    "SequenceModel",
    "fold",
    "layout",
    "render_dot",
    "render_graph",
    "render_mermaid",
    "render_svg",
    "render_text",
]
