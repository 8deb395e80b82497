"""The notebook's widgets, each an anywidget model with one small ES module drawing it.

anywidget speaks the Jupyter widget protocol, so one model and one ``render`` serve every front end
with a widget manager (JupyterLab, Notebook 7, VS Code, Colab) and marimo, which draws anywidget but
not ipywidgets. Python owns the state: it renders the diagrams (SVG, in HTML) and the front end only
places them and sends back what a person did.

What a person does travels as a custom message (``model.send``), never as a state update
(``save_changes``): ipykernel >= 7.4 answers a message that arrives while a cell awaits without an
idle status, and ipywidgets' front end then holds back every later state update of that model,
waiting for it; custom messages are not held back. Each module also hides its widget's static
fallback output once drawn (see `fallback`).
"""

from __future__ import annotations

import uuid
from typing import Any

import anywidget
import traitlets

_HIDE_FALLBACK = """
const BUTTON = "font:inherit;padding:3px 10px;border:1px solid #cbd5e1;border-radius:4px;" +
  "background:#f1f5f9;color:#0f172a;cursor:pointer";

function hideFallback(model, el) {
  const id = model.get("fallback_id");
  if (!id) return;
  const chosen = `.aegis-fallback[data-for="${id}"]`;
  const style = document.createElement("style");
  // The output around it too, where :has() is known, so no empty gap is left behind.
  style.textContent = `${chosen}{display:none}.jp-OutputArea-child:has(${chosen}){display:none}`;
  el.appendChild(style);
}
"""

DIAGRAM_ESM = (
    _HIDE_FALLBACK
    + """
function render({ model, el }) {
  el.classList.add("aegis-live");
  hideFallback(model, el);
  const box = document.createElement("div");
  el.appendChild(box);
  const draw = () => {
    box.innerHTML = model.get("value");
    // A run in progress stays in view while it grows (Run All moves on below the fold).
    if (model.get("follow")) box.scrollIntoView({ block: "nearest" });
  };
  draw();
  model.on("change:value", draw);
  return () => model.off("change:value", draw);
}
export default { render };
"""
)

REPLAY_ESM = (
    _HIDE_FALLBACK
    + """
function render({ model, el }) {
  el.classList.add("aegis-replay");
  hideFallback(model, el);
  const bar = document.createElement("div");
  bar.style.cssText = "display:flex;align-items:center;gap:8px;margin:4px 0;flex-wrap:wrap";
  const play = document.createElement("button");
  play.type = "button";
  play.className = "aegis-play";
  play.style.cssText = BUTTON;
  const label = document.createElement("label");
  label.textContent = "event";
  const range = document.createElement("input");
  range.type = "range";
  range.min = "1";
  range.step = "1";
  range.className = "aegis-position";
  range.setAttribute("aria-label", "event");
  range.style.width = "min(100%, 480px)";
  const readout = document.createElement("span");
  readout.className = "aegis-readout";
  const box = document.createElement("div");
  bar.append(play, label, range, readout);
  el.append(bar, box);

  let timer = null;
  const send = (position) => model.send({ position });
  const shown = () => { readout.textContent = `${range.value} / ${model.get("count")}`; };
  const stop = () => {
    if (timer !== null) clearInterval(timer);
    timer = null;
    play.textContent = "\u25b6 play";
    play.setAttribute("aria-pressed", "false");
  };
  const step = () => {
    const next = Number(range.value) + 1;
    if (next > model.get("count")) return stop();
    range.value = String(next);
    shown();
    send(next);
  };
  const start = () => {
    if (Number(range.value) >= model.get("count")) {
      range.value = "1";
      shown();
      send(1);
    }
    play.textContent = "\u275a\u275a pause";
    play.setAttribute("aria-pressed", "true");
    timer = setInterval(step, model.get("interval"));
  };
  play.addEventListener("click", () => (timer === null ? start() : stop()));
  range.addEventListener("keydown", (event) => event.stopPropagation()); // arrows move the slider
  range.addEventListener(model.get("continuous") ? "input" : "change", () => {
    shown();
    send(Number(range.value));
  });
  const sync = () => {
    range.max = String(model.get("count"));
    range.value = String(model.get("position"));
    shown();
  };
  const draw = () => { box.innerHTML = model.get("value"); };
  stop();
  sync();
  draw();
  model.on("change:position", sync);
  model.on("change:value", draw);
  return () => {
    stop();
    model.off("change:position", sync);
    model.off("change:value", draw);
  };
}
export default { render };
"""
)

EXPLORER_ESM = (
    _HIDE_FALLBACK
    + """
function format(value, how) {
  return how === ".2g" ? String(Number(Number(value).toPrecision(2))) : Number(value).toFixed(2);
}

function slider(text, value, min, max, step, how, set) {
  const row = document.createElement("div");
  row.className = "aegis-slider";
  row.style.cssText = "display:flex;align-items:center;gap:8px;margin:2px 0;max-width:480px";
  const label = document.createElement("label");
  label.textContent = text;
  label.style.cssText = "min-width:11em";
  const range = document.createElement("input");
  range.type = "range";
  range.setAttribute("aria-label", text);
  Object.assign(range, { min: String(min), max: String(max), step: String(step) });
  range.style.flex = "1";
  const readout = document.createElement("input");
  readout.type = "text";
  readout.className = "aegis-readout";
  readout.setAttribute("aria-label", `${text} value`);
  readout.style.cssText = "width:4.5em;font:inherit";
  const show = (v) => { range.value = String(v); readout.value = format(v, how); };
  show(value);
  range.addEventListener("input", () => { readout.value = format(range.value, how); });
  range.addEventListener("keydown", (event) => event.stopPropagation()); // arrows move the slider
  range.addEventListener("change", () => set(Number(range.value)));
  const commit = () => {
    const typed = Number(readout.value);
    if (readout.value.trim() === "" || !Number.isFinite(typed)) return show(range.value);
    const clamped = Math.min(Math.max(typed, min), max);
    show(clamped);
    set(clamped);
  };
  readout.addEventListener("change", commit);
  readout.addEventListener("keydown", (event) => {
    event.stopPropagation(); // typing here is not a notebook shortcut (Enter, A, B...)
    if (event.key === "Enter") {
      event.preventDefault();
      commit();
    }
  });
  row.append(label, range, readout);
  return { row, show };
}

function render({ model, el }) {
  el.classList.add("aegis-explorer");
  hideFallback(model, el);
  const controls = document.createElement("div");
  const buttons = document.createElement("div");
  buttons.style.cssText = "display:flex;gap:6px;flex-wrap:wrap;margin:6px 0";
  const send = (message) => model.send(message);
  const labels = model.get("labels");

  const deadline = slider(
    "deadline (s)", model.get("deadline"), model.get("deadline_min"), model.get("deadline_max"),
    model.get("deadline_step"), model.get("deadline_format"),
    (value) => send({ set: "deadline", value }),
  );
  controls.append(deadline.row);
  const latency = {};
  for (const name of labels) {
    latency[name] = slider(
      `${name} latency (s)`, model.get("latency")[name], 0, model.get("latency_max")[name], 0.05, ".2f",
      (value) => send({ set: "latency", name, value }),
    );
    controls.append(latency[name].row);
  }
  const toggles = {};
  for (const name of labels) {
    const toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "aegis-toggle";
    toggle.style.cssText = BUTTON;
    toggle.textContent = `\u26a1 ${name} fails`;
    const flip = () => send({ set: "failing", name, value: !model.get("failing")[name] });
    toggle.addEventListener("click", flip);
    toggles[name] = toggle;
    buttons.append(toggle);
  }
  const run = document.createElement("button");
  run.type = "button";
  run.className = "aegis-run";
  run.textContent = "\u25b6 Run";
  run.setAttribute("aria-label", "Run");
  run.style.cssText = BUTTON + ";background:#1976d2;color:white;border-color:#1976d2;padding:3px 16px";
  run.addEventListener("click", () => send({ run: true }));
  buttons.append(run);

  const pane = (title) => {
    const column = document.createElement("div");
    // Side by side only where both fit at a readable size (600 px each); stacked in a laptop's
    // notebook column (1280 px screen), each diagram at its own size, not squeezed to half of it.
    column.style.cssText = "flex:1 1 600px;min-width:0;max-width:100%;overflow-x:auto";
    const heading = document.createElement("b");
    heading.textContent = title;
    const body = document.createElement("div");
    column.append(heading, body);
    return { column, body };
  };
  const current = pane("this run");
  const previous = pane("previous run");
  const panes = document.createElement("div");
  panes.style.cssText = "display:flex;flex-wrap:wrap;gap:12px";
  panes.append(current.column, previous.column);
  const history = document.createElement("div");
  el.append(controls, buttons, panes, history);

  const sync = () => {
    deadline.show(model.get("deadline"));
    for (const name of labels) latency[name].show(model.get("latency")[name]);
    for (const name of labels) {
      const on = !!model.get("failing")[name];
      toggles[name].setAttribute("aria-pressed", String(on));
      toggles[name].style.background = on ? "#94a3b8" : "#f1f5f9";
    }
    run.disabled = model.get("running");
    run.style.opacity = run.disabled ? "0.6" : "1";
  };
  const draw = () => {
    current.body.innerHTML = model.get("current");
    previous.body.innerHTML = model.get("previous");
    history.innerHTML = model.get("history");
  };
  sync();
  draw();
  const names = ["deadline", "latency", "failing", "running"];
  for (const name of names) model.on(`change:${name}`, sync);
  for (const name of ["current", "previous", "history"]) model.on(`change:${name}`, draw);
}
export default { render };
"""
)


def _fallback_id() -> str:
    return uuid.uuid4().hex


class DiagramWidget(anywidget.AnyWidget):
    """A live diagram: `value` is its HTML; while `follow` is on, the front end keeps it in view."""

    _esm = DIAGRAM_ESM
    value = traitlets.Unicode("").tag(sync=True)
    follow = traitlets.Bool(False).tag(sync=True)
    fallback_id = traitlets.Unicode("").tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fallback_id=_fallback_id(), **kwargs)


class ReplayWidget(anywidget.AnyWidget):
    """A play button and a slider (`position`, 1..`count`) over a run, and the diagram there (`value`)."""

    _esm = REPLAY_ESM
    value = traitlets.Unicode("").tag(sync=True)
    position = traitlets.Int(1).tag(sync=True)
    count = traitlets.Int(1).tag(sync=True)
    interval = traitlets.Int(400).tag(sync=True)
    """Milliseconds between two events when the play button plays."""
    continuous = traitlets.Bool(True).tag(sync=True)
    fallback_id = traitlets.Unicode("").tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fallback_id=_fallback_id(), **kwargs)


class ExplorerWidget(anywidget.AnyWidget):
    """The explorer's controls (a deadline, a latency and a fail toggle per step, Run) and its panes."""

    _esm = EXPLORER_ESM
    labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    deadline = traitlets.Float(1.0).tag(sync=True)
    deadline_min = traitlets.Float(0.05).tag(sync=True)
    deadline_max = traitlets.Float(5.0).tag(sync=True)
    deadline_step = traitlets.Float(0.05).tag(sync=True)
    deadline_format = traitlets.Unicode(".2f").tag(sync=True)
    latency = traitlets.Dict(value_trait=traitlets.Float()).tag(sync=True)
    latency_max = traitlets.Dict(value_trait=traitlets.Float()).tag(sync=True)
    failing = traitlets.Dict(value_trait=traitlets.Bool()).tag(sync=True)
    running = traitlets.Bool(False).tag(sync=True)
    current = traitlets.Unicode("<i>press Run</i>").tag(sync=True)
    previous = traitlets.Unicode("").tag(sync=True)
    history = traitlets.Unicode("").tag(sync=True)
    fallback_id = traitlets.Unicode("").tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fallback_id=_fallback_id(), **kwargs)
