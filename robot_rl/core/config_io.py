"""JSON (de)serialisation of the frozen dataclass configs (train, SAC, policy) saved in run folders and messages."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any


def config_to_json(config: Any) -> dict[str, Any]:
    """A (nested) dataclass config as plain JSON data: paths become strings and tuples lists."""

    def convert(value):
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, tuple):
            return [convert(v) for v in value]
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value

    return convert(dataclasses.asdict(config))


def config_from_json(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild a (nested, frozen) dataclass config written by `config_to_json`. A field missing from `data` takes
    its default, or, where the class lists it in `FIELDS_ADDED`, the value configs written before it existed had."""
    hints = typing.get_type_hints(cls)
    added = getattr(cls, "FIELDS_ADDED", {})
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name not in data:
            if field.name in added:
                kwargs[field.name] = added[field.name]
            continue
        value, hint = data[field.name], hints[field.name]
        if dataclasses.is_dataclass(hint):
            value = config_from_json(hint, value)
        elif isinstance(value, list):
            value = tuple(value)
        elif value is not None and Path in typing.get_args(hint):
            value = Path(value)
        kwargs[field.name] = value
    return cls(**kwargs)
