"""The learner: replay buffers (demos + online, RLPD mixing), the SAC agent, checkpoints; no transport.

A checkpoint is a folder (`save`): ``agent.msgpack`` (weights and optimiser state), ``learner.json`` (counters, RNG,
the caller's `extra`, and how many rows of each replay store it covers), and ``<buffer>_open.zarr`` only while an
episode is open. The replay buffers themselves live beside it, in ``<checkpoint>.replay/{online,demo}.zarr``
(robot_rl.data.replay_store): appended to as episodes end (`persist_replay`), never rewritten, so a checkpoint's
time and size do not grow with the run. Checkpoints of version 1 (buffers inside, as ``online.zarr`` and
``demo.zarr``) are still read; the next `save` writes their buffers to a store.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from robot_rl.core import files
from robot_rl.agents.sac import SACAgent, SACConfig, aliased_actions
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.data.replay import MixedSampler, ReplayBuffer, insert_with_interventions
from robot_rl.data.replay_store import ReplayStore, ReplayStoreError
from robot_rl.policies.registry import CHUNK_KEYS
from robot_rl.core.types import ObservationSpec

CHECKPOINT_VERSION = 2
READABLE_CHECKPOINT_VERSIONS = (1, 2)
REPLAY_SUFFIX = ".replay"
BUFFER_NAMES = ("online", "demo")
ACTION_SLACK = 1e-6  # float rounding of actions at the bounds of [-1, 1]
log = logging.getLogger(__name__)


ROW_SHARE_METRICS = ("bc_error_demos", "bc_error_human")
"""Metrics over a kind of batch row that some batches lack."""


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Replay and update schedule of the learner."""

    batch_size: int = 256
    """Transitions per gradient step (demo and online rows together)."""
    utd: int = 4
    """Gradient steps per learner step, one jitted lax.scan (the update-to-data ratio at one step per env step)."""
    demo_ratio: float = 0.5
    """Share of each batch drawn from the demo buffer (RLPD: 0.5); all from the other when one buffer is empty."""
    online_capacity: int = 100_000
    """Frames the online replay buffer holds (an episode of T steps takes T + 1); the oldest are overwritten."""
    demo_capacity: int = 50_000
    """Frames the demo replay buffer holds (demos and human interventions); the oldest are overwritten."""
    n_step: int = 1
    """Rewards summed into each TD target (n-step return); the window stops at the end of an episode."""
    warmup_transitions: int | None = None
    """Transitions acted uniformly at random before the first update; None: 4 x batch_size without demos, 0 with."""
    seed: int = 0
    """Seed of the agent's initial weights and of batch sampling."""
    takeover_is_failure: bool = False
    """A human takeover marks the policy's step before it a failure (terminated, no bootstrap through the human's
    rescue), so the critic learns that what made the human step in was wrong (RLIF); the human's steps still train
    the critic and the BC term."""

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)!r} must be >= {low}"
                    for name, low in (("batch_size", 1), ("utd", 1), ("n_step", 1), ("online_capacity", 2),
                                      ("demo_capacity", 2), ("seed", 0)) if getattr(self, name) < low]
        if not 0.0 <= self.demo_ratio <= 1.0:
            problems.append(f"demo_ratio={self.demo_ratio!r} must be in [0, 1]")
        if self.warmup_transitions is not None and self.warmup_transitions < 0:
            problems.append(f"warmup_transitions={self.warmup_transitions!r} must be >= 0 or None (automatic)")
        if problems:
            raise ValueError(f"invalid {type(self).__name__}: {'; '.join(problems)}")


class CheckpointError(ValueError):
    """A learner checkpoint that cannot be restored (a part missing or damaged, another observation spec)."""


def replay_folder(checkpoint: str | Path) -> Path:
    """The folder of the replay stores that checkpoints saved at `checkpoint` cover."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + REPLAY_SUFFIX)


def checkpoint_replay(checkpoint: str | Path, name: str = "online") -> ReplayBuffer:
    """The `name` ("online" or "demo") replay buffer a checkpoint folder (as `Learner.checkpoint_path` finds it)
    restores, read without building an agent; CheckpointError if it cannot be read."""
    found = Path(checkpoint)
    try:
        state = json.loads((found / "learner.json").read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {found} cannot be read: learner.json is missing or damaged "
                              f"({type(error).__name__}: {error})") from None
    if state.get("version") == 1:
        return ReplayBuffer.load(found / f"{name}.zarr")
    return _read_checkpoint_buffer(found, state, name, None, None)


def _read_checkpoint_buffer(found: Path, state: Mapping[str, Any], name: str, observation_spec: Any,
                            action_dim: int | None) -> ReplayBuffer:
    """Buffer `name` of a version-2 checkpoint: its store up to the checkpoint's rows, then its open episode."""
    try:
        replay = state["replay"]
        entry = replay[name]
        store_path = found.parent / replay["folder"] / f"{name}.zarr"
    except (KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint {found} cannot be restored: learner.json lacks the replay extent "
                              f"({type(error).__name__}: {error})") from None
    try:
        store = ReplayStore(store_path, observation_spec, action_dim)
        open_path = found / f"{name}_open.zarr"
        tail = ReplayStore(open_path, store.observation_spec, store.action_dim) if open_path.exists() else None
        return store.load(int(entry["capacity"]), int(entry["rows"]), tail, int(entry["frames_written"]),
                          entry["open_from"])
    except ReplayStoreError as error:
        raise CheckpointError(f"checkpoint {found} cannot be restored: {error}") from None
    except (KeyError, TypeError, ValueError, OSError) as error:
        raise CheckpointError(f"checkpoint {found} cannot be restored: replay store {store_path} is missing or "
                              f"damaged ({type(error).__name__}: {error})") from None


def action_dim_of(action_space: Any) -> int:
    """The action size of an int or a gymnasium Box in [-1, 1]; any other space is refused with the fix."""
    if isinstance(action_space, (int, np.integer)) and not isinstance(action_space, bool):
        return int(action_space)
    low, high = getattr(action_space, "low", None), getattr(action_space, "high", None)
    shape = tuple(getattr(action_space, "shape", None) or ())
    if low is None or high is None or len(shape) != 1:
        raise ValueError(f"action space {action_space} is not a 1-d gymnasium Box: SAC needs continuous actions")
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    if not (np.all(low == -1.0) and np.all(high == 1.0)):
        raise ValueError(
            f"action space bounds [{_bounds_text(low)}, {_bounds_text(high)}] are not [-1, 1]: wrap the env in "
            "gymnasium.wrappers.RescaleAction(env, -1.0, 1.0)"
        )
    return shape[0]


def _shape_text(spec) -> str:
    return "x".join(str(d) for d in spec.shape)


def _bounds_text(bound: np.ndarray) -> str:
    if np.all(bound == bound.flat[0]):
        return f"{bound.flat[0]:g}"
    return "[" + ", ".join(f"{v:g}" for v in bound.flat) + "]"


class Learner:
    """Owns the demo and online replay buffers and the SAC agent; `step()` runs `utd` gradient steps.

    A loop of its own: `insert` every transition (`terminated`/`truncated` end an episode, `end_episode()` ends
    one that stopped otherwise); while `warming_up`, act with uniform random actions (`Actor.step(obs,
    uniform=True)` or `env.action_space.sample()`); call `step()` once per env step (it waits out the warm-up).
    """

    def __init__(
        self,
        observation_spec: Any,
        action_space: Any,
        sac: SACConfig = SACConfig(),
        config: LearnerConfig = LearnerConfig(),
        *,
        chunk_decisions: bool = False,
        robot_action_dim: int | None = None,
    ):
        """`observation_spec`: a gymnasium Dict space, an ObservationSpec or {key: (shape, dtype)};
        `action_space`: a gymnasium Box in [-1, 1] or the action size (of the SAC action).

        `chunk_decisions` (a noise-space head): the SAC action is the transitions' `learner_action`, one per action
        chunk; `insert` joins the steps of a chunk (`policy_info[CHUNK_KEYS.step]` 0, 1, ...) into one transition (the
        chunk's first observation, its action, the summed reward, the observation after its last step) and skips
        steps without a learner action (a human's), cutting the chunk they interrupt. With noise aliasing
        (`sac.aliased_chunk_dim`) it keeps a human's steps instead, joined into chunks of the same length with the
        noise unknown (they train the action critic), and `add_demos` joins demo steps the same way; a chunk cut
        short (by the episode's end, a takeover, a hand-back) is padded with its last action.

        `robot_action_dim`: size of the executed actions transitions carry (default: the SAC action's size; a
        noise-space head's differs)."""
        action_dim = action_dim_of(action_space)
        if hasattr(observation_spec, "low") and not hasattr(observation_spec, "spaces"):
            raise ValueError(
                f"observation space {observation_spec} is not a Dict: give the learner dict observations, e.g. "
                "gymnasium.wrappers.TransformObservation(env, lambda o: {'state': o}, "
                "gymnasium.spaces.Dict(state=env.observation_space))"
            )
        self.config = config
        self.observation_spec = ObservationSpec.coerce(observation_spec)
        self.agent = SACAgent.create(config.seed, self.observation_spec, action_dim, sac)
        self.robot_action_dim = action_dim if robot_action_dim is None else int(robot_action_dim)
        self.aliasing = aliased_actions(self.agent.config, action_dim)
        if self.aliasing is not None and (not chunk_decisions or self.aliasing.chunk_dim % self.robot_action_dim):
            raise ValueError(f"noise aliasing (sac.aliased_chunk_dim={self.aliasing.chunk_dim}) needs "
                             f"chunk_decisions and a whole number of {self.robot_action_dim}-d robot actions per chunk")
        stored = self.agent.batch_action_dim
        self.online = ReplayBuffer(self.observation_spec, stored, config.online_capacity)
        self.demo = ReplayBuffer(self.observation_spec, stored, config.demo_capacity)
        self.sampler = MixedSampler(self.demo, self.online, config.demo_ratio)
        self.rng = np.random.default_rng(config.seed)
        self.updates = 0
        self.transitions = 0
        self.interventions = 0
        self.demo_transitions = 0  # from demo datasets (add_demos), not interventions
        self._episode_rewards: list[float] = []  # of the open online episode
        self.chunk_decisions = bool(chunk_decisions)
        self.skipped = 0  # steps a chunk-decision learner could not use (no learner action: a human's)
        self._chunk: dict[str, Any] | None = None  # the chunk being joined (chunk_decisions)
        self._stores: dict[str, ReplayStore] = {}  # the replay stores the buffers are appended to (persist_replay)
        self._stores_folder: Path | None = None  # their folder: set by restore (not opened yet) or the first append
        self._restored_rows: dict[str, int] = {}  # rows of each store the restored checkpoint covered
        self._checkpointed_rows: dict[str, int] = {}  # rows of each store the last checkpoint covers
        self._warned_about_returns = False
        self._warned_about_actions = False

    @property
    def action_dim(self) -> int:
        """Size of the SAC action."""
        return self.agent.action_dim

    @property
    def steps_per_decision(self) -> int:
        """Robot steps one stored transition spans: a noise-aliasing learner's chunk length, else 1."""
        return 1 if self.aliasing is None else self.aliasing.chunk_dim // self.robot_action_dim

    # ------------------------------------------------------------------------------------------ warm-up
    @property
    def warmup_transitions(self) -> int:
        """Online transitions to collect before the first update (`LearnerConfig.warmup_transitions` resolved)."""
        if self.config.warmup_transitions is not None:
            return self.config.warmup_transitions
        return 0 if self.demo_transitions else 4 * self.config.batch_size

    @property
    def warming_up(self) -> bool:
        """True until `warmup_transitions` online transitions are in: act uniformly at random, no updates yet."""
        return self.transitions < self.warmup_transitions

    @property
    def ready(self) -> bool:
        """Whether `step()` updates the agent: the warm-up is over and there is data to sample."""
        return not self.warming_up and len(self.demo) + len(self.online) > 0

    # ------------------------------------------------------------------------------------------ data in
    def reward_error(self, reward: float) -> str | None:
        """Why `reward` cannot be learned with this agent's `target_bounds` (TD targets are clipped), or None."""
        bounds = self.agent.config.target_bounds
        if bounds is None or not np.isfinite(reward) or bounds[0] <= reward <= bounds[1]:
            return None
        return (f"reward {reward:g} is outside sac.target_bounds {tuple(bounds)} that TD targets are clipped to: "
                "scale the reward into them, or set --sac.target-bounds to the range of discounted returns "
                "(None turns clipping off: SACConfig(target_bounds=None))")

    def add_demos(self, dataset: EpisodeDataset, policy=None) -> int:
        """Put every step of every episode of `dataset` in the demo buffer; returns the number of transitions.

        `policy`: one over a frozen base (residual) labels each demo observation with what it adds (the base's
        action at that step, run over the episode as when acting: `reset()` per episode, `augment_observation(obs)`
        per step), so demos train its head like online data. The whole dataset is checked (keys, shapes, actions,
        rewards) before anything is added.
        """
        added_keys = () if policy is None else tuple(
            k for k in self.observation_spec.keys if k not in policy.observation_spec)
        self._check_demos(dataset, added_keys, () if policy is None else tuple(policy.observation_spec.keys))
        added = 0
        for index in range(dataset.num_episodes):
            episode = dataset.episode(index)
            length = len(episode["action"])
            obs = {k: episode["obs"][k] for k in self.observation_spec.keys if k not in added_keys}
            if added_keys:
                read = {k: episode["obs"][k] for k in policy.observation_spec.keys}
                frames = self._label_episode(policy, {**obs, **read}, episode["final_obs"], added_keys)
                frames = {k: frames[k] for k in self.observation_spec.keys}
                episode = {**episode, "final_obs": {k: v[-1] for k, v in frames.items()}}
                obs = {k: v[:-1] for k, v in frames.items()}
            span = self.steps_per_decision
            for t in range(0, length, span):
                end = min(t + span, length)
                current = {k: v[t] for k, v in obs.items()}
                following = {k: (obs[k][end] if end < length else episode["final_obs"][k]) for k in obs}
                action = episode["action"][t] if self.aliasing is None else self._packed(episode["action"][t:end])
                self.demo.insert(
                    current, action, float(np.sum(episode["reward"][t:end])), bool(episode["terminated"][end - 1]),
                    bool(episode["truncated"][end - 1]) or end == length, following,
                    bool(episode["intervention"][t:end].any()),
                )
                added += 1
            self.demo.end_episode()
            self._check_returns(episode["reward"], f"demo dataset {dataset.path} episode {index}")
        self.demo_transitions += added
        return added

    @staticmethod
    def _label_episode(policy, obs: dict[str, np.ndarray], final_obs: Mapping[str, np.ndarray],
                       added_keys: tuple[str, ...]) -> dict[str, np.ndarray]:
        """{key: (T + 1, ...)} of the episode's observations and its final one, with `policy`'s added entries."""
        frames = {k: np.concatenate([v, np.asarray(final_obs[k])[None]]) for k, v in obs.items()}
        policy.reset()
        labels: dict[str, list[np.ndarray]] = {k: [] for k in added_keys}
        for t in range(len(next(iter(frames.values())))):
            augmented = policy.augment_observation({k: v[t] for k, v in frames.items()})
            for key in added_keys:
                labels[key].append(np.asarray(augmented[key]))
        return {**frames, **{k: np.stack(v) for k, v in labels.items()}}

    def _check_demos(self, dataset: EpisodeDataset, added_keys: tuple[str, ...] = (),
                     policy_keys: tuple[str, ...] = ()) -> None:
        needed = [k for k in self.observation_spec.keys if k not in added_keys]
        if added_keys:  # the base policy labelling the demos reads its own entries too
            needed += [k for k in policy_keys if k not in needed]
        missing = [k for k in needed if k not in dataset.observation_spec]
        if missing:
            raise ValueError(
                f"demo dataset {dataset.path} lacks observation keys {missing} (it has "
                f"{sorted(dataset.observation_spec)}); record demos with the same --obs-mode"
            )
        for key, spec in self.observation_spec.entries:
            if key in added_keys:
                continue
            stored = dataset.observation_spec[key]
            if stored.shape == spec.shape and stored.dtype == spec.dtype:
                continue
            if spec.is_image and stored.is_image and stored.shape[2] == spec.shape[2]:
                raise ValueError(
                    f"demo dataset {dataset.path} has {key} {_shape_text(stored)} but this run uses "
                    f"{_shape_text(spec)}: record demos with --image-size {spec.shape[0]} or train with "
                    f"--image-size {stored.shape[0]}"
                )
            raise ValueError(
                f"demo dataset {dataset.path} has {key} {stored.dtype} {_shape_text(stored)} but this run uses "
                f"{spec.dtype} {_shape_text(spec)}: record demos with the same task and --obs-mode"
            )
        if dataset.action_spec.shape != (self.robot_action_dim,):
            raise ValueError(
                f"demo dataset {dataset.path} has {dataset.action_spec.shape[0] if dataset.action_spec.shape else 0}-d "
                f"actions but this run uses {self.robot_action_dim}-d actions: record demos with the same task"
            )
        actions = dataset.data["action"]
        if actions.size and np.abs(actions).max() > 1.0 + ACTION_SLACK:
            raise ValueError(
                f"demo dataset {dataset.path} has actions up to {np.abs(actions).max():g}, outside [-1, 1]: "
                "record demos in the policy's action range [-1, 1]"
            )
        rewards = dataset.data["reward"]
        problems = [self.reward_error(float(r)) for r in (rewards.min(), rewards.max())] if rewards.size else []
        problem = next((p for p in problems if p), None)
        if problem:
            raise ValueError(f"demo dataset {dataset.path}: {problem}")

    def insert(
        self,
        observation: Mapping[str, np.ndarray],
        action: np.ndarray,
        reward: float,
        terminated: bool,
        truncated: bool,
        next_observation: Mapping[str, np.ndarray],
        intervention: bool = False,
        learner_action: np.ndarray | None = None,
        policy_info: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """One transition from an actor; a human intervention also goes to the demo buffer (HIL-SERL).
        (`learner_action` and `policy_info` matter to a `chunk_decisions` learner only.)

        Within an episode `observation` must be the previous transition's `next_observation`; an episode ends with
        `terminated`/`truncated` or with `end_episode()`. A `reward` outside `sac.target_bounds` (when set) raises a
        ValueError and inserts nothing; an action outside [-1, 1] is stored with a warning (once).
        """
        problem = self.reward_error(float(reward))
        if problem:
            raise ValueError(problem)
        action = np.asarray(action, np.float32)
        if not self._warned_about_actions and np.abs(action).max(initial=0.0) > 1.0 + ACTION_SLACK:
            self._warned_about_actions = True
            log.warning(
                f"action {np.array2string(action, precision=3, separator=', ')} is outside [-1, 1], the range of "
                "the SAC policy, so the critic learns actions the policy cannot take: give actions in [-1, 1] "
                "(gymnasium.wrappers.RescaleAction(env, -1.0, 1.0))"
            )
        observation = {k: observation[k] for k in self.observation_spec.keys}
        next_observation = {k: next_observation[k] for k in self.observation_spec.keys}
        if self.chunk_decisions:
            self._join_chunk_step(observation, action, learner_action, reward, terminated, truncated,
                                  next_observation, policy_info or {})
        else:
            insert_with_interventions(self.online, self.demo, observation, action, reward, terminated, truncated,
                                      next_observation, intervention, self.config.takeover_is_failure)
        self.transitions += 1
        self.interventions += int(intervention)
        self._episode_rewards.append(float(reward))
        if terminated or truncated:
            self._close_episode()

    def continues_episode(self, observation: Mapping[str, np.ndarray]) -> bool:
        """Whether `observation` follows on from the last inserted step (what `insert` joins without a cut)."""
        if self.chunk_decisions and self._chunk is not None:
            following = self._chunk["next_observation"]
            return all(k in observation and np.array_equal(np.asarray(observation[k]), v) for k, v in following.items())
        return self.online.continues_episode(observation)

    def _join_chunk_step(self, observation, action, learner_action, reward, terminated, truncated,
                         next_observation, policy_info) -> None:
        step = policy_info.get(CHUNK_KEYS.step)
        human = learner_action is None or step is None  # a human's step: its noise is unknown
        chunk = self._chunk
        if human and chunk is not None and not chunk["human"] and self.config.takeover_is_failure:
            chunk["terminated"] = True
        if human and self.aliasing is None:
            self.skipped += 1
            self._close_chunk(cut=True)
            return
        if human:
            if chunk is not None and not chunk["human"]:  # a takeover ends the policy's chunk
                self._close_chunk(cut=False)
                chunk = None
        else:
            step = int(np.asarray(step))
            if chunk is not None and (chunk["human"] or step != chunk["steps"]):  # a new chunk begins
                self._close_chunk(cut=False)
                chunk = None
            if chunk is None and step != 0:  # the middle of a chunk whose start this learner never saw
                self.skipped += 1
                self._close_chunk(cut=True)
                return
        if chunk is None:
            chunk = self._chunk = {"observation": observation, "reward": 0.0, "steps": 0, "human": human,
                                   "executed": [],
                                   "action": None if human else np.asarray(learner_action, np.float32),
                                   "aliases": None if human else self._aliases_of(policy_info)}
        chunk["executed"].append(np.asarray(action, np.float32))
        chunk.update(reward=chunk["reward"] + float(reward), steps=chunk["steps"] + 1,
                     next_observation=next_observation, terminated=bool(terminated), truncated=bool(truncated))
        if terminated or truncated or (human and chunk["steps"] == self.steps_per_decision):
            self._close_chunk(cut=False)

    def _aliases_of(self, policy_info: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
        """The (noise, chunk) aliases a noise-aliasing actor recorded at a chunk's first step, if any."""
        noise, chunks = CHUNK_KEYS.alias_noise, CHUNK_KEYS.alias_chunks
        if self.aliasing is None or noise not in policy_info or chunks not in policy_info:
            return None
        return np.asarray(policy_info[noise]), np.asarray(policy_info[chunks])

    def _packed(self, executed: Any, noise: np.ndarray | None = None,
                aliases: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """A noise-aliasing transition's packed action; `executed` (steps, robot_action_dim) is padded to a whole
        chunk with its last action."""
        executed = np.asarray(executed, np.float32).reshape(-1, self.robot_action_dim)
        missing = self.steps_per_decision - len(executed)
        if missing > 0:
            executed = np.concatenate([executed, np.repeat(executed[-1:], missing, axis=0)])
        alias_noise, alias_chunks = (None, None) if aliases is None else aliases
        return self.aliasing.pack(executed[:self.steps_per_decision], noise, alias_noise, alias_chunks)

    def _close_chunk(self, *, cut: bool) -> None:
        """Insert the chunk being joined (if any) as one transition; `cut`: the episode does not go on from it."""
        chunk, self._chunk = self._chunk, None
        if chunk is not None:
            action = chunk["action"]
            if self.aliasing is not None:
                action = self._packed(chunk["executed"], action, chunk["aliases"])
            insert_with_interventions(self.online, self.demo, chunk["observation"], action, chunk["reward"],
                                      chunk["terminated"], chunk["truncated"], chunk["next_observation"],
                                      chunk["human"])
        if cut:
            self.online.end_episode()
            self.demo.end_episode()

    def end_episode(self) -> None:
        """End the open episode without a terminal flag (a reset, an abort): its last step bootstraps, like a
        time-limit truncation. The next `insert` starts a new episode."""
        if self.chunk_decisions:
            self._close_chunk(cut=True)
        self.online.end_episode()
        self.demo.end_episode()
        self._close_episode()

    def _close_episode(self) -> None:
        if self._episode_rewards:
            self._check_returns(np.asarray(self._episode_rewards), "online episode")
        self._episode_rewards = []

    def _check_returns(self, rewards: np.ndarray, where: str) -> None:
        """Warn (once) if a discounted return of the episode lies outside `target_bounds`, which clip TD targets."""
        bounds = self.agent.config.target_bounds
        if bounds is None or self._warned_about_returns or not len(rewards):
            return
        discount = self.agent.config.discount
        returns = np.empty(len(rewards))
        running = 0.0
        for t in range(len(rewards) - 1, -1, -1):
            running = float(rewards[t]) + discount * running
            returns[t] = running
        outside = returns[(returns < bounds[0]) | (returns > bounds[1])]
        if outside.size:
            self._warned_about_returns = True
            worst = outside[np.argmax(np.maximum(bounds[0] - outside, outside - bounds[1]))]
            log.warning(
                f"{where} has a discounted return of {worst:.3g} (discount {discount:g}), outside sac.target_bounds "
                f"{tuple(bounds)} that TD targets are clipped to, so the critic cannot learn these values: set "
                "--sac.target-bounds to the range of discounted returns, or None (no clipping)"
            )

    # ------------------------------------------------------------------------------------------ training
    def step(self) -> dict[str, float]:
        """Sample a [utd, batch] RLPD batch and run `utd` gradient steps in one jitted call.

        While `warming_up` it does nothing and returns {}.
        """
        if self.warming_up:
            return {}
        batch = self.sampler.sample_stacked(
            self.config.utd, self.config.batch_size, self.rng, self.config.n_step, self.agent.config.discount
        )
        self.agent, info = self.agent.update(batch, validate=False)
        self.updates += self.config.utd
        info = {k: float(v) for k, v in jax.device_get(info).items()}
        # Left out when these steps had no such rows (no human step yet, a demo-free batch): NaN, not a figure.
        return {k: v for k, v in info.items() if not (k in ROW_SHARE_METRICS and np.isnan(v))}

    def policy_bytes(self) -> bytes:
        """Actor weights (msgpack) to send to actors."""
        return self.agent.policy_to_bytes()

    # ------------------------------------------------------------------------------------------ checkpoints
    def _buffers(self) -> dict[str, ReplayBuffer]:
        return {"online": self.online, "demo": self.demo}

    def persist_replay(self, path: str | Path) -> int:
        """Append the final rows of both buffers (all but an open episode's) that are not on disk yet to the replay
        stores of checkpoint `path` (`replay_folder(path)`), durably; returns the rows appended. `save` does it
        first; robot_rl.learner.server calls it after each episode it inserts, so a checkpoint writes little."""
        stores = self._open_stores(path)
        return sum(stores[name].append(buffer, merge_through=self._checkpointed_rows.get(name))
                   for name, buffer in self._buffers().items())

    def _open_stores(self, path: str | Path) -> dict[str, ReplayStore]:
        folder = replay_folder(path)
        if self._stores and self._stores_folder == folder:
            return self._stores
        restored = self._stores_folder == folder  # this learner's buffers came from these stores
        files.make_dirs_durably(folder)
        stores = {}
        for name, buffer in self._buffers().items():
            store_path = folder / f"{name}.zarr"
            if not restored:  # what a store there holds is not this learner's (an earlier learner's, a crashed start)
                files.remove_tree_durably(store_path)
            stores[name] = ReplayStore(store_path, self.observation_spec, buffer.action_dim, create=True)
            if restored:  # rows appended after the restored checkpoint: its transition log inserts them again
                stores[name].truncate(self._restored_rows[name])
        if not restored:
            self._checkpointed_rows = {}
        self._stores, self._stores_folder = stores, folder
        return stores

    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> None:
        """Write agent, optimiser state, counters, RNG and `extra`, and how far each replay store goes (after
        appending the buffers' final rows to it; an open episode's rows go in the checkpoint), all durable; the
        previous checkpoint survives a crash. Time and size do not grow with the buffers."""
        path = Path(path)
        self.persist_replay(path)
        tmp = path.with_name(path.name + ".tmp")
        old = path.with_name(path.name + ".old")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / "agent.msgpack").write_bytes(self.agent.to_bytes())
        replay: dict[str, Any] = {"folder": self._stores_folder.name}
        for name, buffer in self._buffers().items():
            rows = self._stores[name].end
            first_open = max(rows, buffer.oldest_frame)
            if first_open < buffer.frames_written:  # an open episode: its rows may still change
                ReplayStore(tmp / f"{name}_open.zarr", self.observation_spec, buffer.action_dim, create=True).write(
                    first_open, buffer.rows(first_open, buffer.frames_written))
            replay[name] = {"rows": rows, "frames_written": buffer.frames_written, "open_from": buffer.open_from,
                            "capacity": buffer.capacity}
        state = {
            "version": CHECKPOINT_VERSION,
            "updates": self.updates,
            "transitions": self.transitions,
            "interventions": self.interventions,
            "demo_transitions": self.demo_transitions,
            "rng": self.rng.bit_generator.state,
            "replay": replay,
            "extra": dict(extra or {}),
        }
        (tmp / "learner.json").write_text(json.dumps(state))
        files.fsync_tree(tmp)
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            files.rename_durably(path, old)
        files.rename_durably(tmp, path)
        files.remove_tree_durably(old)
        self._checkpointed_rows = {name: entry["rows"] for name, entry in replay.items() if name in BUFFER_NAMES}

    @staticmethod
    def checkpoint_path(path: str | Path) -> Path | None:
        """The newest complete checkpoint at `path` (or its `.old` twin left by a crash mid-save), if any."""
        path = Path(path)
        for candidate in (path, path.with_name(path.name + ".old")):
            if (candidate / "learner.json").exists():
                return candidate
        return None

    def restore(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint written by `save` into this learner (same spec and configs); returns its `extra`.

        All or nothing: a missing or damaged part raises CheckpointError naming it, and the learner is unchanged.
        """
        found = self.checkpoint_path(path)
        if found is None:
            raise FileNotFoundError(f"no checkpoint at {path}")

        def load(name: str, read):
            try:
                return read(found / name)
            except Exception as exc:  # JSON, msgpack and zarr each raise their own types for a damaged file
                raise CheckpointError(f"checkpoint {found} cannot be restored: {name} is missing or damaged "
                                      f"({type(exc).__name__}: {exc})") from None

        def read_state(file: Path) -> dict[str, Any]:
            state = json.loads(file.read_text())
            if state.get("version") not in READABLE_CHECKPOINT_VERSIONS:
                raise ValueError(f"version {state.get('version')}, this code reads versions "
                                 f"{', '.join(map(str, READABLE_CHECKPOINT_VERSIONS))}")
            rng = np.random.default_rng()
            rng.bit_generator.state = state["rng"]
            return {**state, "rng": rng, "updates": int(state["updates"]), "transitions": int(state["transitions"]),
                    "extra": dict(state["extra"])}

        state = load("learner.json", read_state)
        agent = load("agent.msgpack", lambda file: self.agent.restore_bytes(file.read_bytes()))
        if state["version"] == 1:  # the buffers inside the checkpoint
            online, demo = load("online.zarr", ReplayBuffer.load), load("demo.zarr", ReplayBuffer.load)
            folder, rows = None, {}
        else:
            online, demo = (_read_checkpoint_buffer(found, state, name, self.observation_spec,
                                                    self.agent.batch_action_dim) for name in BUFFER_NAMES)
            folder = found.parent / state["replay"]["folder"]
            rows = {name: int(state["replay"][name]["rows"]) for name in BUFFER_NAMES}
        for loaded, current in ((online, self.online), (demo, self.demo)):
            if loaded.observation_spec != current.observation_spec or loaded.action_dim != current.action_dim:
                raise CheckpointError(
                    f"checkpoint {found} replay buffers do not match this learner's observation spec")
        self.agent, self.online, self.demo, self.rng = agent, online, demo, state["rng"]
        self._stores, self._stores_folder = {}, folder
        self._restored_rows, self._checkpointed_rows = rows, dict(rows)
        self.sampler = MixedSampler(self.demo, self.online, self.config.demo_ratio)
        self.updates, self.transitions = state["updates"], state["transitions"]
        self.interventions = int(state.get("interventions", 0))
        self.demo_transitions = int(state.get("demo_transitions", len(self.demo)))
        self._episode_rewards = []
        return state["extra"]
