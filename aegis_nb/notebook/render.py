"""The live view's HTML: the inline SVG diagram (so the page can inspect it) above a compact event log."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from aegis_nb.diagram import SequenceModel, render_svg
from aegis_nb.kernel.text import counted

# No height limit: the caller already keeps the last few lines (`LiveView`'s `log_lines`), and a
# box of a fixed height cut its last line in half whenever more lines came than fitted.
LOG_STYLE = (
    "margin:6px 0 0;padding:6px 10px;overflow-x:auto;background:#f8fafc;"
    "border:1px solid #e2e8f0;border-radius:8px;color:#334155;font-size:11.5px;line-height:1.35"
)


def live_html(
    model: SequenceModel,
    log: Sequence[str],
    *,
    earlier: int = 0,
    max_height: int = 640,
    svg: str | None = None,
) -> str:
    """The diagram of `model` inline, then the log lines (`earlier`: how many older lines were cut).

    `svg` is `render_svg(model)` when the caller already has it.
    """
    lines = [escape(line) for line in log]
    if earlier:
        lines.insert(0, f"… {counted(earlier, 'earlier event')}")
    return (
        f'<div class="aegis-live-diagram" data-status="{model.status.value}" '
        f'data-events="{model.event_count}" style="overflow:auto;max-height:{max_height}px">'
        f"{render_svg(model) if svg is None else svg}</div>"
        f'<pre class="aegis-log" style="{LOG_STYLE}">' + "\n".join(lines) + "</pre>"
    )
