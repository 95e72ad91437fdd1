"""The learner: replay buffers (demos + online, RLPD mixing), the SAC agent, checkpoints; no transport."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.data.replay import MixedSampler, ReplayBuffer, insert_with_interventions
from robot_rl.types import ObservationSpec

CHECKPOINT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Replay and update schedule of the learner."""

    batch_size: int = 256
    utd: int = 4
    """Gradient steps per `step()` call (one jitted lax.scan); the loop calls `step()` once per env step."""
    demo_ratio: float = 0.5
    """Share of each batch drawn from the demo buffer (RLPD: 0.5)."""
    online_capacity: int = 100_000
    demo_capacity: int = 50_000
    n_step: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.utd < 1 or self.n_step < 1:
            raise ValueError(f"batch_size, utd and n_step must be >= 1: {self}")


class Learner:
    """Owns the demo and online replay buffers and the SAC agent; `step()` runs `utd` gradient steps."""

    def __init__(
        self,
        observation_spec: Any,
        action_dim: int,
        sac: SACConfig = SACConfig(),
        config: LearnerConfig = LearnerConfig(),
    ):
        self.config = config
        self.observation_spec = ObservationSpec.coerce(observation_spec)
        self.agent = SACAgent.create(config.seed, self.observation_spec, action_dim, sac)
        self.online = ReplayBuffer(self.observation_spec, action_dim, config.online_capacity)
        self.demo = ReplayBuffer(self.observation_spec, action_dim, config.demo_capacity)
        self.sampler = MixedSampler(self.demo, self.online, config.demo_ratio)
        self.rng = np.random.default_rng(config.seed)
        self.updates = 0
        self.transitions = 0
        self.interventions = 0

    @property
    def action_dim(self) -> int:
        return self.agent.action_dim

    def add_demos(self, dataset: EpisodeDataset) -> int:
        """Put every step of every episode of `dataset` in the demo buffer; returns the number of transitions."""
        missing = [k for k in self.observation_spec.keys if k not in dataset.observation_spec]
        if missing:
            raise ValueError(
                f"demo dataset {dataset.path} lacks observation keys {missing} (it has {sorted(dataset.observation_spec)});"
                " record demos with the same --obs-mode"
            )
        added = 0
        for index in range(dataset.num_episodes):
            episode = dataset.episode(index)
            length = len(episode["action"])
            obs = {k: episode["obs"][k] for k in self.observation_spec.keys}
            for t in range(length):
                current = {k: v[t] for k, v in obs.items()}
                following = {k: (obs[k][t + 1] if t + 1 < length else episode["final_obs"][k]) for k in obs}
                self.demo.insert(
                    current, episode["action"][t], episode["reward"][t], episode["terminated"][t],
                    episode["truncated"][t] or t + 1 == length, following, bool(episode["intervention"][t]),
                )
                added += 1
            self.demo.end_episode()
        return added

    def insert(
        self,
        observation: Mapping[str, np.ndarray],
        action: np.ndarray,
        reward: float,
        terminated: bool,
        truncated: bool,
        next_observation: Mapping[str, np.ndarray],
        intervention: bool = False,
    ) -> None:
        """One transition from an actor; a human intervention also goes to the demo buffer (HIL-SERL)."""
        observation = {k: observation[k] for k in self.observation_spec.keys}
        next_observation = {k: next_observation[k] for k in self.observation_spec.keys}
        insert_with_interventions(
            self.online, self.demo, observation, action, reward, terminated, truncated, next_observation, intervention
        )
        self.transitions += 1
        self.interventions += int(intervention)

    @property
    def ready(self) -> bool:
        return len(self.demo) + len(self.online) > 0

    def step(self) -> dict[str, float]:
        """Sample a [utd, batch] RLPD batch and run `utd` gradient steps in one jitted call."""
        batch = self.sampler.sample_stacked(
            self.config.utd, self.config.batch_size, self.rng, self.config.n_step, self.agent.config.discount
        )
        self.agent, info = self.agent.update(batch, validate=False)
        self.updates += self.config.utd
        return {k: float(v) for k, v in jax.device_get(info).items()}

    def policy_bytes(self) -> bytes:
        """Actor weights (msgpack) to send to actors."""
        return self.agent.policy_to_bytes()

    # ------------------------------------------------------------------------------------------ checkpoints
    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> None:
        """Write agent, optimiser state, counters, RNG and both replay buffers; the previous checkpoint survives a crash."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        old = path.with_name(path.name + ".old")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / "agent.msgpack").write_bytes(self.agent.to_bytes())
        self.online.save(tmp / "online.zarr")
        self.demo.save(tmp / "demo.zarr")
        state = {
            "version": CHECKPOINT_VERSION,
            "updates": self.updates,
            "transitions": self.transitions,
            "interventions": self.interventions,
            "rng": self.rng.bit_generator.state,
            "extra": dict(extra or {}),
        }
        (tmp / "learner.json").write_text(json.dumps(state))
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def checkpoint_path(path: str | Path) -> Path | None:
        """The newest complete checkpoint at `path` (or its `.old` twin left by a crash mid-save), if any."""
        path = Path(path)
        for candidate in (path, path.with_name(path.name + ".old")):
            if (candidate / "learner.json").exists():
                return candidate
        return None

    def restore(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint written by `save` into this learner (same spec and configs); returns its `extra`."""
        found = self.checkpoint_path(path)
        if found is None:
            raise FileNotFoundError(f"no checkpoint at {path}")
        state = json.loads((found / "learner.json").read_text())
        if state.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint {found} has version {state.get('version')}, expected {CHECKPOINT_VERSION}")
        self.agent = self.agent.restore_bytes((found / "agent.msgpack").read_bytes())
        online, demo = ReplayBuffer.load(found / "online.zarr"), ReplayBuffer.load(found / "demo.zarr")
        for loaded, current in ((online, self.online), (demo, self.demo)):
            if loaded.observation_spec != current.observation_spec or loaded.action_dim != current.action_dim:
                raise ValueError(f"checkpoint {found} replay buffers do not match this learner's observation spec")
        self.online, self.demo = online, demo
        self.sampler = MixedSampler(self.demo, self.online, self.config.demo_ratio)
        self.updates, self.transitions = int(state["updates"]), int(state["transitions"])
        self.interventions = int(state.get("interventions", 0))
        self.rng.bit_generator.state = state["rng"]
        return state["extra"]
