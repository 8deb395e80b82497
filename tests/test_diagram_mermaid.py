"""The Mermaid rendering of the documentation's scenario says what the documentation's diagram says.

`PAGE` is the ``sequenceDiagram`` of the AegisMCP "Workflows & Sagas" page, copied verbatim. The
saga below runs through the real engine with the page's step names and failure, and its Mermaid is
compared with the page's participant by participant and arrow by arrow, including which arrows sit
inside the rollback ``rect``. Only the box's colour differs, on purpose: the page's near-black
``rgb(60, 20, 20)`` hid the arrows inside it on a light theme (see `test_diagram_fit`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from aegis_nb.diagram import fold, render_mermaid
from aegis_nb.diagram.mermaid import ROLLBACK_COLOUR
from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent

PAGE = """\
sequenceDiagram
    participant E as Workflow Engine
    participant S1 as Step 1 (Flight)
    participant S2 as Step 2 (Hotel)
    participant S3 as Step 3 (Credit Card)

    E->>S1: execute()
    S1-->>E: Success
    E->>S2: execute()
    S2-->>E: Success
    E->>S3: execute()
    S3-->>E: Fails (Insufficient Funds)

    rect rgb(60, 20, 20)
        Note over E: Rollback Triggered
        E->>S2: compensate()
        E->>S1: compensate()
    end
"""
# The page's diagram as we draw it: the same statements, in a box that reads on a light theme.
OURS = PAGE.replace("rect rgb(60, 20, 20)", f"rect {ROLLBACK_COLOUR}")


@dataclass(frozen=True)
class Line:
    """A mermaid statement, with whether it sits inside a ``rect`` box (and the box's colour)."""

    statement: str
    box: str | None


def statements(source: str) -> list[Line]:
    lines: list[Line] = []
    box: str | None = None
    for raw in source.splitlines():
        line = raw.strip()
        if not line or line == "sequenceDiagram":
            continue
        if line.startswith("rect "):
            box = line.removeprefix("rect ")
        elif line == "end":
            box = None
        else:
            lines.append(Line(line, box))
    return lines


ARROW = re.compile(r"^(\w+)(-->>|->>|--x|-x)(\w+): (.*)$")


class Named:
    """A step with a display name, as the page's steps are called."""

    def __init__(self, name: str, error: str | None = None) -> None:
        self.name = name
        self.error = error

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.error:
            raise ValueError(self.error)
        return ctx.with_metadata({self.name: "booked"})

    async def compensate(self, ctx: AegisContext) -> None:
        pass


async def documentation_run() -> tuple[SagaEvent, ...]:
    steps = [Named("Flight"), Named("Hotel"), Named("Credit Card", error="Insufficient Funds")]
    run = await WorkflowEngine().run_saga(steps, AegisContext(), name="book_vacation")
    return run.events


@pytest.mark.anyio
async def test_participants_match_the_page() -> None:
    ours = statements(render_mermaid(fold(await documentation_run())))
    page = statements(PAGE)
    assert [line for line in ours if line.statement.startswith("participant")] == [
        line for line in page if line.statement.startswith("participant")
    ]


@pytest.mark.anyio
async def test_arrows_match_the_page_one_by_one() -> None:
    ours = [
        line
        for line in statements(render_mermaid(fold(await documentation_run())))
        if ARROW.match(line.statement)
    ]
    page = [line for line in statements(OURS) if ARROW.match(line.statement)]
    assert len(ours) == len(page) == 8
    for mine, theirs in zip(ours, page, strict=True):
        assert ARROW.match(mine.statement).groups() == ARROW.match(theirs.statement).groups()  # type: ignore[union-attr]
        assert mine.box == theirs.box


@pytest.mark.anyio
async def test_whole_diagram_is_the_page_diagram() -> None:
    assert statements(render_mermaid(fold(await documentation_run()))) == statements(OURS)


def test_names_are_escaped() -> None:
    from tests.test_diagram_scenarios import Script

    events = Script(("Pay; #1 <now>",)).step_fails(0, "Pay; #1 <now>", "bad; really #bad").end_rollback()
    source = render_mermaid(fold(events))
    assert "participant S1 as Step 1 (Pay#59; #35;1 #lt;now#gt;)" in source
    assert "S1-->>E: Fails (bad#59; really #35;bad)" in source
