"""Policy files: one folder set that `robot-rl eval`, the in-process tools and the ROS actor node all load.

A torch policy (diffusion, one-step) is a folder with ``policy.json`` (format, kind, config, observation spec, action
size, training facts) and ``model.safetensors`` (weights and normaliser statistics); no pickle anywhere, no
`torch.load`. A SAC policy is the learner's ``policy.msgpack`` (robot_rl.wire.policy_file). :func:`load_policy` takes
either, or a run folder holding one, and returns a :class:`~robot_rl.policies.base.Policy`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from robot_rl.policies.base import Policy, PolicyError, as_json_ready
from robot_rl.policies.registry import files_builder, weights_builder

POLICY_CONFIG = "policy.json"
POLICY_WEIGHTS = "model.safetensors"
FORMAT = "robot_rl.policy"
VERSION = 1


def save_policy_files(directory: str | Path, kind: str, description: Mapping[str, Any], tensors: Mapping[str, Any],
                      *, overwrite: bool = False) -> Path:
    """Write ``policy.json`` (`description` plus format, version and kind) and ``model.safetensors`` (`tensors`: name
    -> torch tensor) into `directory`, atomically: a reader sees the old set or the new one, never half of one."""
    from safetensors.torch import save_file

    directory = Path(directory)
    if directory.exists() and not overwrite and any(directory.iterdir()):
        raise PolicyError(f"{directory} exists and is not empty; choose another folder")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = directory.with_name(f".{directory.name}.writing-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        save_file({name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()},
                  str(staging / POLICY_WEIGHTS))
        header = {"format": FORMAT, "version": VERSION, "kind": kind, **as_json_ready(dict(description))}
        (staging / POLICY_CONFIG).write_text(json.dumps(header, indent=2) + "\n")
        if directory.exists():
            old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
            os.rename(directory, old)
            os.rename(staging, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def save_policy(directory: str | Path, kind: str, description: Mapping[str, Any], tensors: Mapping[str, Any],
                extra: Mapping[str, Any] | None, reserved: tuple[str, ...], *, overwrite: bool = False) -> Path:
    """A policy's files: its `description` plus `extra` training facts (which may not use a `reserved` key)."""
    extra = dict(extra or {})
    clashes = sorted(set(extra) & set(reserved))
    if clashes:
        raise PolicyError(f"extra policy facts may not be named {clashes}")
    return save_policy_files(directory, kind, {**description, **extra}, tensors, overwrite=overwrite)


def policy_folder(path: str | Path) -> Path | None:
    """The folder holding ``policy.json`` that `path` names (the folder, the json or the safetensors), else None."""
    path = Path(path)
    if path.name in (POLICY_CONFIG, POLICY_WEIGHTS):
        path = path.parent
    return path if (path / POLICY_CONFIG).is_file() else None


def find_policy_folder(path: str | Path) -> Path | None:
    """The policy folder `path` names, or that a run folder `path` holds (its ``policy/``), else None."""
    path = Path(path)
    return policy_folder(path) or (policy_folder(path / "policy") if path.is_dir() else None)


def read_policy_files(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(description, tensors) of a torch policy folder; PolicyError names the file and what is wrong."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = policy_folder(path)
    if folder is None:
        raise PolicyError(f"{path} is not a policy folder (no {POLICY_CONFIG})")
    config = folder / POLICY_CONFIG
    try:
        description = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PolicyError(f"{config}: unreadable policy description ({error})") from None
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise PolicyError(f"{config} is not a robot_rl policy description")
    if description.get("version") != VERSION:
        raise PolicyError(f"{config}: version {description.get('version')!r}, this robot_rl reads version {VERSION}")
    weights = folder / POLICY_WEIGHTS
    try:
        tensors = load_file(str(weights))
    except FileNotFoundError:
        raise PolicyError(f"{weights} is missing (the policy folder is incomplete)") from None
    except (OSError, SafetensorError, ValueError) as error:
        raise PolicyError(f"{weights}: unreadable weights ({error})") from None
    return description, tensors


def policy_from_weights(message, *, seed: int = 0, device: str = "auto") -> Policy:
    """The policy a learner's `WeightsMessage` describes (its kind, spec and config), holding those weights;
    `device` is where a torch base runs (a JAX head or SAC policy runs on JAX's device)."""
    return weights_builder(message.policy_kind)(message, seed=seed, device=device)


def load_policy(path: str | Path, *, device: str = "auto", seed: int = 0) -> Policy:
    """Any saved policy as a `Policy`: a torch policy folder, a SAC ``policy.msgpack``, or a run folder with one."""
    from robot_rl.policies.base import resolve_device

    path = Path(path)
    folder = find_policy_folder(path)
    if folder is not None:
        description, tensors = read_policy_files(folder)
        return files_builder(description.get("kind"))(description, tensors, resolve_device(device))
    from robot_rl.wire.policy_file import PolicyFileError, read_policy_file

    try:
        return policy_from_weights(read_policy_file(path), seed=seed, device=device)
    except PolicyFileError as error:
        if not path.exists():
            raise PolicyError(f"policy {path} does not exist") from None
        raise PolicyError(str(error)) from None
