"""Policy files: a trained policy on disk in the learner's weights format (msgpack, no pickle).

``<run_dir>/policy.msgpack`` is written by the learner node and by ``robot-rl train``; ``robot-rl eval``, the actor node
(``-p weights_path:=...``) and ``launch/sim_eval.yaml`` load it. It is one `WeightsMessage`: the actor weights with
the observation spec and agent config an actor needs to build the policy from scratch. A learner checkpoint
(``checkpoint/agent.msgpack``: agent and optimiser state) is not a policy file, and reading one says so.
"""

from __future__ import annotations

from pathlib import Path

from robot_rl.core.files import atomic_write_bytes
from robot_rl.wire.protocol import TransportError
from robot_rl.wire.weights import WeightsMessage, decode_weights, encode_weights

POLICY_FILE = "policy.msgpack"


class PolicyFileError(ValueError):
    """A policy file is missing, unreadable or not a policy file; the message names the file and the fix."""


def write_policy_file(path: str | Path, message: WeightsMessage) -> Path:
    """Write `message` to `path` atomically (a reader never sees half a file); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_bytes(path, encode_weights(message))


def resolve_policy_path(path: str | Path) -> Path:
    """A policy file, or a run folder holding one (``<run_dir>/policy.msgpack``)."""
    path = Path(path)
    if path.is_dir():
        if (path / POLICY_FILE).is_file():
            return path / POLICY_FILE
        raise PolicyFileError(f"{path} is a folder without a {POLICY_FILE}; pass a run folder or its {POLICY_FILE}")
    return path


def read_policy_file(path: str | Path) -> WeightsMessage:
    """Load a policy file (or a run folder's); PolicyFileError names the file and what is wrong with it."""
    path = resolve_policy_path(path)
    try:
        payload = path.read_bytes()
    except FileNotFoundError:
        raise PolicyFileError(f"policy file {path} does not exist") from None
    except OSError as error:
        raise PolicyFileError(f"cannot read policy file {path}: {error.strerror or error}") from None
    try:
        return decode_weights(payload)
    except TransportError as error:
        if path.name == "agent.msgpack" or path.parent.name.startswith("checkpoint"):
            run_dir = path.parent.parent
            raise PolicyFileError(
                f"{path} is a learner checkpoint, not a policy file; pass {run_dir / POLICY_FILE}") from None
        raise PolicyFileError(f"{path} is not a robot_rl policy file ({error})") from None
