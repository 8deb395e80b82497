"""Properties every rendering keeps: determinism, well-formed escaped SVG, per-diagram ids, no secrets,
bounded folding of huge runs, and graphviz that falls back instead of failing."""

from __future__ import annotations

import re
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aegis_nb.diagram import (
    GraphSource,
    MessageKind,
    SequenceBuilder,
    fold,
    labels,
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
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.retry import RetryPolicy
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
    assert '<script>alert("x")</script> & \\x07bell' in texts  # the bell shown, not dropped
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


class Scripted:
    """A step whose execute and compensate fail on demand, without sleeping."""

    def __init__(self, name: str, *, fails: bool, undo_fails: int) -> None:
        self.name = name
        self.fails = fails
        self.undo_fails = undo_fails
        self.undo_calls = 0

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.fails:
            raise ValueError(f"{self.name} refused")
        return ctx

    async def compensate(self, ctx: AegisContext) -> None:
        self.undo_calls += 1
        if self.undo_calls <= self.undo_fails:
            raise RuntimeError(f"{self.name} undo {self.undo_calls} failed")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=8),
    data=st.data(),
)
def test_any_real_run_renders_consistently(backend: str, count: int, data: st.DataObject) -> None:
    """Whatever the engine does, the model matches its report and every rendering agrees with the model."""
    fail_at = data.draw(st.none() | st.integers(min_value=0, max_value=count - 1), label="fail_at")
    undo_fails = data.draw(st.lists(st.integers(0, 3), min_size=count, max_size=count), label="undo_fails")
    steps = [Scripted(f"S{i}", fails=i == fail_at, undo_fails=undo_fails[i]) for i in range(count)]
    engine = WorkflowEngine(compensation_retry=RetryPolicy(attempts=3, initial_delay=0.0))

    async def main() -> SagaRun:
        return await engine.run_saga(steps, AegisContext(), name="prop")

    run = anyio.run(main, backend=backend)
    model = fold(run.events)
    assert model.status is run.status
    assert model.event_count == len(run.events)
    builder = SequenceBuilder()
    for event in run.events:
        builder.feed(event)
    assert builder.snapshot() == model
    svg = render_svg(model)
    root = ET.fromstring(svg)
    assert root.attrib["data-arrows"] == str(len(model.messages))
    compensations = sum(m.kind is MessageKind.COMPENSATE for m in model.messages)
    rollback = [g for g in root.iter(f"{SVG}g") if g.attrib.get("class") == "aegis-rollback"]
    assert [g.attrib["data-compensations"] for g in rollback] == (
        [] if fail_at is None else [str(compensations)]
    )
    mermaid = render_mermaid(model)
    arrows = [line for line in mermaid.splitlines() if re.match(r"\s+(E|S\d+)(->>|-->>|--x)", line)]
    undone = sum(m.kind is MessageKind.COMPENSATED for m in model.messages)
    assert len(arrows) == len(model.messages) - undone
    assert ("rect rgba(220, 38, 38, 0.12)" in mermaid) is (fail_at is not None)
    text = render_text(model)
    assert text.endswith(labels.summary(model) + "\n")
    failed = fail_at is not None
    # Title, cause (when failed), blank line; one line per arrow; the rollback bracket; the summary.
    assert len(text.splitlines()) == 2 + failed + len(model.messages) + 2 * failed + 1


def test_text_keeps_every_row_on_one_line_whatever_the_names_and_errors() -> None:
    name, error = "Charge\nCard", "1 validation error\ncard_number\n  String should match"
    events = Script((name,), saga="trip\nto Lisbon").step_fails(0, name, error).end_rollback()
    text = render_text(fold(events))
    assert text.splitlines() == [
        "trip to Lisbon — ROLLED BACK · 1 step · 10.0 ms · run 0f1e2d3c",
        "✗ Charge Card: ValueError: 1 validation error card_number String should match",
        "",
        "   +0.00 ms  Engine → 1 Charge Card  execute()",
        "   +10.0 ms  Engine ← 1 Charge Card  ✗ ValueError: 1 validation error card_number String should"
        " match · 10.0 ms",
        "┌─ ⟲ Rollback triggered",
        "└─",
        "1 validation error card_number String should match — rolled back: nothing to undo",
    ]
