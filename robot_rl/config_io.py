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
    """Rebuild a (nested, frozen) dataclass config written by `config_to_json`."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name not in data:
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
