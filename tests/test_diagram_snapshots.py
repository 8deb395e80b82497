"""Whole-output snapshots of every rendering for fixed event sequences.

A mismatch fails. To accept a deliberate change, regenerate and review the diff::

    AEGIS_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/test_diagram_snapshots.py
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from aegis_nb.diagram import SequenceModel, fold, render_dot, render_mermaid, render_svg, render_text
from tests.test_diagram_scenarios import CROWDED, SCENARIOS, many_steps

SNAPSHOTS = Path(__file__).parent / "snapshots" / "diagram"
UPDATE = os.environ.get("AEGIS_UPDATE_SNAPSHOTS") == "1"

RENDERERS: dict[str, Callable[[SequenceModel], str]] = {
    "svg": render_svg,
    "mmd": render_mermaid,
    "txt": render_text,
    "dot": render_dot,
}


def check_snapshot(name: str, actual: str) -> None:
    """Compare `actual` with the stored snapshot `name`, whole; rewrite it when updating."""
    path = SNAPSHOTS / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"no snapshot {path}; create it with AEGIS_UPDATE_SNAPSHOTS=1 and review it"
    assert actual == path.read_text(encoding="utf-8"), f"{name} differs from its snapshot"


@pytest.mark.parametrize("extension", sorted(RENDERERS))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rendering_matches_snapshot(scenario: str, extension: str) -> None:
    model = fold(SCENARIOS[scenario]())
    check_snapshot(f"{scenario}.{extension}", RENDERERS[extension](model))


@pytest.mark.parametrize("extension", ["svg", "txt"])
def test_thirty_steps_are_drawn_unfolded(extension: str) -> None:
    check_snapshot(f"thirty_steps.{extension}", RENDERERS[extension](fold(many_steps(30, fail_at=20))))


@pytest.mark.parametrize("extension", ["svg", "txt", "dot"])
def test_a_thousand_steps_are_folded(extension: str) -> None:
    check_snapshot(f"thousand_steps.{extension}", RENDERERS[extension](fold(many_steps(1000, fail_at=700))))


@pytest.mark.parametrize("cut", [1, 4, 7, 9])
def test_running_states_match_snapshot(cut: int) -> None:
    """The live view draws prefixes: mid-forward, at the failure, mid-rollback."""
    model = fold(SCENARIOS["fail_third"]()[: cut + 1])
    check_snapshot(f"fail_third_after_{cut}.svg", render_svg(model))
    check_snapshot(f"fail_third_after_{cut}.txt", render_text(model))


@pytest.mark.parametrize("scenario", sorted(CROWDED))
def test_crowded_drawings_match_snapshot(scenario: str) -> None:
    """Long names, titles, errors and summaries are clipped or wrapped to the drawing (see the PNGs)."""
    check_snapshot(f"crowded/{scenario}.svg", render_svg(fold(CROWDED[scenario]())))
