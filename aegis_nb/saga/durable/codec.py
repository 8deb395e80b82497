"""Events, contexts and reports to JSON text and back, with a schema version: never pickle.

Every record the journal stores is one JSON object carrying ``"v"`` (the schema version). Contexts are
written with their metadata as plain JSON, their deadline (``null`` for none), and the run id and
step position that make up the idempotency key. Secret values are never written: the record keeps
only *where* secrets were, and decoding puts ``Secret("***")`` there, so a recovered compensation that
needs a secret must fetch it again. Errors carry ``"refused": true`` only when set (a refusing `ToolError`,
which recovery must not undo); records without it read as not refused. Decoding checks every field
and raises `RecordError` saying what is wrong; the journal adds the file and the record to that.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final, get_type_hints

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
    SagaStatus,
)
from aegis_nb.kernel.values import REDACTED, FrozenDict, Secret
from aegis_nb.saga.events import EVENT_TYPES, SagaEvent, SagaRolledBackEvent

SCHEMA_VERSION: Final = 1
"""The version written into every record and into the journal file; readers refuse newer ones."""

_WIRE_NAMES: Final = MappingProxyType(
    # SagaRolledBackEvent keeps 0.1.0's wire name, SagaCompensated, so journals and Temporal histories
    # read the same in both versions: a 0.1.0 reader of a new journal would otherwise call it corrupt.
    {cls: cls.__name__ for cls in EVENT_TYPES} | {SagaRolledBackEvent: "SagaCompensated"}
)
"""The ``type`` each event class is written as (a string only at the wire; classes everywhere else)."""

_EVENTS: Final = MappingProxyType({name: cls for cls, name in _WIRE_NAMES.items()})

JSONPath = tuple[str | int, ...]


class RecordError(ValueError):
    """A record does not decode; `too_new` when it was written by a newer schema."""

    def __init__(self, problem: str, *, too_new: bool = False) -> None:
        self.too_new = too_new
        super().__init__(problem)


# -- plain JSON ------------------------------------------------------------------------------------


_ENCODE: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode
"""Built once: `json.dumps` with options builds a new encoder per call, a third of its cost here."""


def dumps(data: object) -> str:
    """Compact JSON; NaN and infinity are refused (they are not JSON)."""
    return _ENCODE(data)


def loads(text: str) -> Any:
    """Parse one record; anything but a versioned JSON object of this schema is a `RecordError`."""
    try:
        data = json.loads(text, parse_constant=_no_constants)
    except (ValueError, TypeError) as exc:
        raise RecordError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"expected a JSON object, got {type(data).__name__}")
    version = data.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise RecordError(f'no schema version ("v"), got {version!r}')
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"written by schema {version}; this aegis_nb reads up to schema {SCHEMA_VERSION}", too_new=True
        )
    return data


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def json_problem(value: object, path: str) -> str | None:
    """Why `value` is not plain JSON data (None, bool, int, finite float, str, list, str-keyed dict)."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}, which JSON cannot hold"
    if isinstance(value, Secret):
        return f"{path} is a Secret, and secrets are never written; pass it in the context metadata"
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = json_problem(item, f"{path}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a {type(key).__name__} key {key!r}; JSON keys are str"
            problem = json_problem(item, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    return f"{path} is a {type(value).__name__}, which is not JSON data"


# -- checked access --------------------------------------------------------------------------------


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise RecordError(f"{what} must be a JSON array, got {type(value).__name__}")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{what} must be a string, got {value!r}")
    return value


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"{what} must be an integer, got {value!r}")
    return value


def _optional_int(value: object, what: str) -> int | None:
    return None if value is None else _int(value, what)


def _float(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{what} must be a number, got {value!r}")
    return float(value)


# -- contexts --------------------------------------------------------------------------------------


def context_to_json(ctx: AegisContext) -> dict[str, Any]:
    """A context as JSON data: metadata (secrets as ``***``), where the secrets were, deadline, key."""
    metadata = ctx.metadata
    data: dict[str, Any] = {"metadata": ctx.to_json() if metadata else {}}
    secrets = list(_secret_paths(metadata, ())) if metadata else None
    if secrets:
        data["secrets"] = [list(path) for path in secrets]
    data["deadline"] = None if ctx.deadline == math.inf else ctx.deadline
    data["run_id"] = ctx.run_id
    data["step"] = ctx.step_index
    return data


def context_from_json(data: object) -> AegisContext:
    """The context `context_to_json` wrote; each secret comes back as ``Secret("***")``."""
    obj = _object(data, "context")
    metadata = _object(obj.get("metadata"), "context metadata")
    for raw in _list(obj.get("secrets", []), "context secrets"):
        metadata = _redact_at(metadata, tuple(_list(raw, "secret path")))
    deadline = obj.get("deadline")
    if deadline is None:
        deadline = math.inf
    run_id = obj.get("run_id")
    step = obj.get("step")
    if not (isinstance(deadline, int | float) and not isinstance(deadline, bool)):
        raise RecordError(f"context deadline must be a number or null, got {deadline!r}")
    if run_id is not None and not isinstance(run_id, str):
        raise RecordError(f"context run_id must be a string or null, got {run_id!r}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise RecordError(f"context step must be an int or null, got {step!r}")
    try:
        frozen = FrozenDict(metadata)
    except TypeError as exc:
        raise RecordError(f"context metadata: {exc}") from None
    return AegisContext.from_parts(frozen, deadline=float(deadline), run_id=run_id, step_index=step)


def _secret_paths(value: object, path: JSONPath) -> Any:
    if isinstance(value, Secret):
        yield path
    elif isinstance(value, FrozenDict):
        for key, item in value.items():
            yield from _secret_paths(item, (*path, key))
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from _secret_paths(item, (*path, i))


def _redact_at(data: Any, path: tuple[Any, ...]) -> Any:
    """A copy of `data` with ``Secret("***")`` at `path` (which must hold the ``***`` placeholder)."""
    if not path:
        if data != REDACTED:
            raise RecordError(f"a secret's place holds {data!r}, not {REDACTED!r}")
        return Secret(REDACTED)
    head, rest = path[0], path[1:]
    if isinstance(data, dict) and isinstance(head, str) and head in data:
        return {**data, head: _redact_at(data[head], rest)}
    if (
        isinstance(data, list)
        and isinstance(head, int)
        and not isinstance(head, bool)
        and 0 <= head < len(data)
    ):
        return [*data[:head], _redact_at(data[head], rest), *data[head + 1 :]]
    raise RecordError(f"secret path element {head!r} does not exist in the metadata")


# -- reports ---------------------------------------------------------------------------------------


def report_from_json(data: object) -> SagaReport:
    """The `SagaReport` that `report_to_json` (or `SagaReport.to_json`) wrote."""
    obj = _object(data, "report")
    try:
        return SagaReport(
            run_id=_str(obj.get("run_id"), "report run_id"),
            saga=_str(obj.get("saga"), "report saga"),
            status=SagaStatus(obj.get("status")),
            steps=tuple(_str(s, "report step") for s in _list(obj.get("steps"), "report steps")),
            succeeded=tuple(_ref(s) for s in _list(obj.get("succeeded"), "report succeeded")),
            failed_step=None if obj.get("failed_step") is None else _ref(obj["failed_step"]),
            failure_kind=None if obj.get("failure_kind") is None else FailureKind(obj["failure_kind"]),
            cause=None if obj.get("cause") is None else _error(obj["cause"]),
            compensated=tuple(_ref(s) for s in _list(obj.get("compensated"), "report compensated")),
            compensation_failures=tuple(
                CompensationFailure(
                    _ref(_object(f, "failure").get("step")),
                    _int(f.get("attempts"), "failure attempts"),
                    _error(f.get("error")),
                )
                for f in _list(obj.get("compensation_failures"), "report compensation_failures")
            ),
            found_nothing=tuple(
                _str(s, "report found_nothing")
                for s in _list(obj.get("found_nothing", []), "report found_nothing")
            ),
        )
    except ValueError as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"report: {exc}") from None


def _ref(data: object) -> str:
    """A step's name from its ``{"index", "name"}`` reference (the index is for readers)."""
    return _str(_object(data, "step reference").get("name"), "step name")


def _error(data: object) -> ErrorInfo:
    obj = _object(data, "error")
    refused = obj.get("refused", False)  # absent in records written before the flag existed
    if not isinstance(refused, bool):
        raise RecordError(f"error refused must be true or false, got {refused!r}")
    return ErrorInfo(
        _str(obj.get("type"), "error type"), _str(obj.get("message"), "error message"), refused=refused
    )


def _error_to_json(info: ErrorInfo) -> dict[str, object]:
    """An error as JSON; ``"refused"`` only when set, so most records read as they always did."""
    if info.refused:
        return {"type": info.type, "message": info.message, "refused": True}
    return {"type": info.type, "message": info.message}


def report_to_json(report: SagaReport) -> dict[str, object]:
    """`SagaReport.to_json` with each error's `refused` flag, which that public (MCP) form leaves out."""
    data = report.to_json()
    if report.cause is not None and report.cause.refused:
        data["cause"] = _error_to_json(report.cause)
    failures = data["compensation_failures"]
    assert isinstance(failures, list)
    for failure, item in zip(report.compensation_failures, failures, strict=True):
        if failure.error.refused:
            item["error"] = _error_to_json(failure.error)
    if report.found_nothing:  # written only when some undo found nothing: older journals read the same
        data["found_nothing"] = list(report.found_nothing)
    return data


# -- events ----------------------------------------------------------------------------------------


def _deadline_to_json(deadline: float) -> float | None:
    return None if deadline == math.inf else deadline  # JSON has no infinity: null is "no deadline"


def _deadline_from_json(value: object, where: str) -> float:
    return math.inf if value is None else _float(value, where)


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise RecordError(f"{where} must be true or false, got {value!r}")
    return value


def _kind(value: object, where: str) -> FailureKind:
    try:
        return FailureKind(value)
    except ValueError:
        raise RecordError(f"{where}: unknown failure kind {value!r}") from None


def _names(value: object, where: str) -> tuple[str, ...]:
    return tuple(_str(name, where) for name in _list(value, where))


Encoder = Callable[[Any], Any]
Decoder = Callable[[object, str], Any]

# How each field type of the events is written and read back. A deadline is a float whose infinity
# JSON cannot hold, so it goes by its field's name; `_layout` refuses a type missing here.
_CODECS: Final[Mapping[object, tuple[Encoder | None, Decoder]]] = MappingProxyType(
    {
        str: (None, _str),
        int: (None, _int),
        int | None: (None, _optional_int),
        float: (None, _float),
        bool: (None, _bool),
        tuple[str, ...]: (list, _names),
        FailureKind: (attrgetter("value"), _kind),
        ErrorInfo: (_error_to_json, lambda value, where: _error(value)),
        AegisContext: (context_to_json, lambda value, where: context_from_json(value)),
        SagaReport: (report_to_json, lambda value, where: report_from_json(value)),
    }
)
_DEADLINE: Final[tuple[Encoder | None, Decoder]] = (_deadline_to_json, _deadline_from_json)


_REQUIRED: Final = dataclasses.MISSING


def _layout(cls: type) -> tuple[tuple[str, Encoder | None, Decoder, object], ...]:
    """Each field of event class `cls` in order, with its encoder (None: already JSON), decoder and
    default (`_REQUIRED` for none)."""
    hints = get_type_hints(cls)
    layout = []
    for field in dataclasses.fields(cls):
        codec = _DEADLINE if field.name == "deadline" else _CODECS.get(hints[field.name])
        if codec is None:
            raise TypeError(f"{cls.__name__}.{field.name}: no JSON codec for {hints[field.name]!r}")
        layout.append((field.name, *codec, field.default))
    return tuple(layout)


_LAYOUTS: Final = MappingProxyType({cls: _layout(cls) for cls in EVENT_TYPES})
EVENT_LAYOUTS: Final = MappingProxyType(
    {
        cls: tuple((name, encode, default) for name, encode, _, default in layout)
        for cls, layout in _LAYOUTS.items()
    }
)
"""Per event class, each field's name, encoder (None: already JSON) and default. Encoding runs twice
per step, so the field types are looked at once, at import, rather than per event."""


def event_to_json(event: SagaEvent) -> dict[str, Any]:
    """An event as a versioned JSON object: ``{"v": 1, "type": "StepSucceeded", ...fields}``.

    A field added after 0.1.0 has a default and is left out while it holds it, so the events 0.1.0
    wrote are written byte for byte as it wrote them (and 0.1.0, which refuses unknown fields, still
    reads them).
    """
    data: dict[str, Any] = {"v": SCHEMA_VERSION, "type": _WIRE_NAMES[type(event)]}
    for name, encode, default in EVENT_LAYOUTS[type(event)]:
        value = getattr(event, name)
        if default is not _REQUIRED and value == default:
            continue
        data[name] = value if encode is None else encode(value)
    return data


def decode_event(text: str) -> SagaEvent:
    """The event `encode_event` wrote; `RecordError` if any field is missing, extra or mistyped."""
    return event_from_json(loads(text))


def event_from_json(data: Mapping[str, Any]) -> SagaEvent:
    name = data.get("type")
    cls = _EVENTS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise RecordError(f"unknown event type {name!r}")
    layout = _LAYOUTS[cls]
    known = {field for field, _, _, _ in layout} | {"v", "type"}
    required = {field for field, _, _, default in layout if default is _REQUIRED} | {"v", "type"}
    present = set(data)
    if not required <= present <= known:
        missing, extra = sorted(required - present), sorted(present - known)
        raise RecordError(f"{name}: missing fields {missing}, unexpected fields {extra}")
    values: dict[str, Any] = {
        field: decode(data[field], f"{name}.{field}") if field in data else default
        for field, _, decode, default in layout
    }
    return cls(**values)  # type: ignore[return-value]
