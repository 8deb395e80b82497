"""Events straight to the journal's JSON text, one generated encoder per event class.

The journal encodes two events per step, and building the dict for the json module costs 3-5 µs an
event. Each event class gets a function writing the same text directly from its fields (under
1 µs); values of an unexpected type, and contexts holding metadata, still go through the json
module, so the text is always exactly ``dumps(event_to_json(event))`` (a test checks it).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.durable.codec import EVENT_LAYOUTS, SCHEMA_VERSION, context_to_json, dumps
from aegis_nb.saga.events import EVENT_TYPES, SagaEvent


def _text_str(value: object) -> str:
    return _encode_str(value) if value.__class__ is str else dumps(value)


def _text_int(value: object) -> str:
    return _int_repr(value) if value.__class__ is int else dumps(value)


def _text_float(value: object) -> str:
    if value.__class__ is float and math.isfinite(value):
        return _float_repr(value)
    return dumps(value)  # ints as JSON writes them; NaN and infinity refused, as everywhere


def _text_deadline(value: float) -> str:
    return "null" if value == math.inf else _text_float(value)


def _text_context(ctx: AegisContext) -> str:
    if ctx.metadata:
        return dumps(context_to_json(ctx))
    run_id, step = ctx.run_id, ctx.step_index
    return (
        '{"metadata":{},"deadline":'
        + _text_deadline(ctx.deadline)
        + ',"run_id":'
        + ("null" if run_id is None else _text_str(run_id))
        + ',"step":'
        + ("null" if step is None else _text_int(step))
        + "}"
    )


_encode_str = json.encoder.encode_basestring
_int_repr = int.__repr__
_float_repr = float.__repr__
_TEXT_FIELDS: Final[Mapping[str, str]] = MappingProxyType(
    {"str": "_text_str", "int": "_text_int", "float": "_text_float", "AegisContext": "_text_context"}
)


def _text_encoder(cls: type) -> Callable[[Any], str]:
    """One event class's text encoder, generated from its layout (`EVENT_LAYOUTS`)."""
    scope: dict[str, Any] = {"dumps": dumps, "_text_deadline": _text_deadline}
    scope.update({name: globals()[name] for name in _TEXT_FIELDS.values()})
    pieces = [repr(f'{{"v":{SCHEMA_VERSION},"type":"{cls.__name__}"')]
    for (name, to_json), field in zip(EVENT_LAYOUTS[cls], dataclasses.fields(cls), strict=True):
        if name == "deadline":
            text = f"_text_deadline(event.{name})"
        elif str(field.type) in _TEXT_FIELDS:
            text = f"{_TEXT_FIELDS[str(field.type)]}(event.{name})"
        elif to_json is None:
            text = f"dumps(event.{name})"
        else:  # errors, kinds, reports, step names: rare events, the json module's way
            scope[f"to_json_{name}"] = to_json
            text = f"dumps(to_json_{name}(event.{name}))"
        pieces += [repr(f',"{name}":'), text]
    source = "def encode(event):\n    return " + " + ".join([*pieces, repr("}")]) + "\n"
    namespace: dict[str, Any] = {}
    exec(source, scope, namespace)
    encode: Callable[[Any], str] = namespace["encode"]
    encode.__qualname__ = f"encode_{cls.__name__}"
    return encode


_TEXT_ENCODERS: Final = MappingProxyType({cls: _text_encoder(cls) for cls in EVENT_TYPES})


def encode_event(event: SagaEvent) -> str:
    """`event_to_json` as compact JSON text, the form the journal stores."""
    return _TEXT_ENCODERS[type(event)](event)
