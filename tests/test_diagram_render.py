"""Properties every rendering keeps: determinism, well-formed escaped SVG, per-diagram ids, no secrets,
bounded folding of huge runs, and graphviz that falls back instead of failing."""

from __future__ import annotations

import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from aegis_nb.diagram import (
    GraphSource,
    fold,
    layout,
    render_dot,
    render_graph,
    render_mermaid,
    render_svg,
    render_text,
)
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.values import Secret
from aegis_nb.saga.engine import WorkflowEngine
from tests.conftest import require_executable
from tests.test_diagram_scenarios import SCENARIOS, Script, many_steps

SVG = "{http://www.w3.org/2000/svg}"


def ids_of(svg: str) -> list[str]:
    return [element.attrib["id"] for element in ET.fromstring(svg).iter() if "id" in element.attrib]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_same_events_same_bytes(scenario: str) -> None:
    first, second = fold(SCENARIOS[scenario]()), fold(SCENARIOS[scenario]())
    assert first is not second
    for render in (render_svg, render_mermaid, render_text, render_dot):
        assert render(first) == render(second)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_svg_is_well_formed_and_its_ids_are_unique(scenario: str) -> None:
    svg = render_svg(fold(SCENARIOS[scenario]()))
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    ids = ids_of(svg)
    assert len(ids) == len(set(ids)) > 1
    prefix = root.attrib["id"]
    assert all(i == prefix or i.startswith(prefix + "-") for i in ids)
    for element in root.iter():
        for value in element.attrib.values():
            if value.startswith("url(#"):
                assert value[5:-1] in ids


def test_two_diagrams_on_one_page_share_no_id() -> None:
    a = render_svg(fold(SCENARIOS["fail_third"]()))
    b = render_svg(fold(Script(run_id="another-run").step_ok(0, "BookFlight").commit()))
    c = render_svg(fold(SCENARIOS["fail_third"]()[:5]))  # the same run, drawn earlier (the live view)
    assert not set(ids_of(a)) & set(ids_of(b))
    assert not set(ids_of(a)) & set(ids_of(c))


def test_hostile_names_and_errors_are_escaped() -> None:
    name = '<script>alert("x")</script> & \x07bell'
    events = (
        Script((name,), saga="a<b>&'c'")
        .step_fails(0, name, "]]> <img src=x onerror=alert(1)>")
        .end_rollback()
    )
    model = fold(events)
    svg = render_svg(model)
    root = ET.fromstring(svg)  # well-formed despite everything
    assert "<script" not in svg
    assert "<img" not in svg
    texts = "".join(root.itertext())
    assert '<script>alert("x")</script> & bell' in texts
    assert "]]> <img src=x onerror=alert(1)>" in texts
    assert '"a<b>&\\"c\\"' not in render_dot(model)
    assert "label=\"a<b>&'c' · rolled back\"" in render_dot(model)


@pytest.mark.anyio
async def test_secrets_never_appear_in_any_rendering() -> None:
    token = "tok-5f3a9c1e77"

    class Leaky:
        name = "ChargeCard"

        async def execute(self, ctx: AegisContext) -> AegisContext:
            raise RuntimeError(f"declined for card token {ctx.metadata['card'].reveal()}")

        async def compensate(self, ctx: AegisContext) -> None:
            pass

    class Book:
        name = "BookFlight"

        async def execute(self, ctx: AegisContext) -> AegisContext:
            return ctx.with_metadata({"flight": "F1"})

        async def compensate(self, ctx: AegisContext) -> None:
            raise RuntimeError(f"cannot cancel with {ctx.metadata['card'].reveal()}")

    ctx = AegisContext({"card": Secret(token)})
    run = await WorkflowEngine().run_saga([Book(), Leaky()], ctx, name="pay")
    model = fold(run.events)
    for rendering in (render_svg(model), render_mermaid(model), render_text(model), render_dot(model)):
        assert token not in rendering
        assert "***" in rendering or "declined" not in rendering


def test_thirty_steps_keep_every_lifeline() -> None:
    plan = layout(fold(many_steps(30, fail_at=20)))
    assert len(plan.lanes) == 31
    assert plan.folded_steps == 0
    assert plan.folded_rows == 0


def test_a_thousand_steps_fold_to_a_bounded_drawing() -> None:
    model = fold(many_steps(1000, fail_at=700))
    plan = layout(model)
    assert len(plan.lanes) <= 20
    assert plan.folded_steps == 1000 - (len(plan.lanes) - 1 - 2)  # two fold lanes stand for the rest
    assert len(plan.rows) < 80
    svg = render_svg(model)
    assert len(svg) < 100_000
    root = ET.fromstring(svg)
    rollback = next(e for e in root.iter(f"{SVG}g") if e.attrib.get("class") == "aegis-rollback")
    assert rollback.attrib["data-compensations"] == "700"


def test_row_cap_folds_the_middle_of_a_phase() -> None:
    script = Script(("Flaky",))
    for attempt in range(1, 200):
        script.undo_fails(0, "Flaky", "nope", attempt, will_retry=True, ms=1.0)
    plan = layout(fold(script.end_rollback()), max_rows=40)
    assert len(plan.rows) == 1 + 40  # the "rollback triggered" note, then 40 rows
    assert plan.folded_rows == 398 - 39


def test_graph_without_dot_falls_back_to_our_svg_with_a_note() -> None:
    model = fold(SCENARIOS["fail_third"]())
    for dot in (None, "no-such-dot-executable"):
        rendering = render_graph(model, dot=dot)
        assert rendering.source is GraphSource.FALLBACK
        assert rendering.svg == render_svg(model)
        assert rendering.note == "graphviz `dot` is not installed; showing the sequence diagram instead"


def test_graph_with_a_failing_dot_falls_back(tmp_path: Path) -> None:
    broken = tmp_path / "dot"
    broken.write_text("#!/bin/sh\necho 'syntax error in line 1' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    rendering = render_graph(fold(SCENARIOS["success"]()), dot=str(broken))
    assert rendering.source is GraphSource.FALLBACK
    assert rendering.note == "graphviz `dot` failed (syntax error in line 1); showing the sequence diagram"


def test_graph_with_dot_draws_steps_and_compensations() -> None:
    require_executable("dot")
    rendering = render_graph(fold(SCENARIOS["fail_third"]()))
    assert rendering.source is GraphSource.GRAPHVIZ
    assert rendering.note is None
    root = ET.fromstring(rendering.svg)
    titles = [e.text for e in root.iter(f"{SVG}title")]
    assert {"s0", "s1", "s2", "s2&#45;&gt;s1", "s1&#45;&gt;s0"} <= set(titles) or {
        "s0",
        "s1",
        "s2",
        "s2->s1",
        "s1->s0",
    } <= set(titles)
