"""The widget-view mime type, and a widget's view bundle as IPython outputs carry it."""

from __future__ import annotations

from typing import Any

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def widget_view(widget: Any) -> Any:
    """The widget-view part of `widget`'s mime bundle (anywidget's comes as a (data, metadata) pair)."""
    bundle = widget._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    return (data or {}).get(WIDGET_MIME)
