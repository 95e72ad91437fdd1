"""Small interfaces that carry the system: whatever acts in an env is a `Policy`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

Observation = Mapping[str, np.ndarray]


@runtime_checkable
class Policy(Protocol):
    """Maps an observation to an action in [-1, 1], one per call (what lock-step loops run: the scripted expert, an
    `Actor`, a `ChunkRunner`); `reset` is called at the start of each episode. Policy kinds implement the chunked
    robot_rl.policies.base.Policy."""

    def reset(self) -> None: ...

    def act(self, obs: Observation) -> np.ndarray: ...

