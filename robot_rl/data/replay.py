"""In-RAM replay buffers (numpy): frame-deduplicated ring buffer, RLPD demo/online mixing, interventions, zarr save/load.

Storage layout: slot i holds one observation frame and, when `valid[i]`, the transition taken from it (action,
reward, flags). Its next observation is always the frame in slot i + 1 (mod capacity), so every frame is stored
once: an episode of T steps uses T + 1 slots (its last next_obs gets a slot with no transition).

Frames are numbered in the order written (0, 1, ...; frame f lives in slot f % capacity while it is among the last
`capacity`). A frame's *row* is its slot's contents: the frame and the transition fields `ROW_FIELDS`. Rows before
the open episode are final (nothing changes them while they stay in the ring): robot_rl.data.replay_store appends
them to disk and reads them back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.core.types import Batch, ObservationSpec

ROW_FIELDS = ("actions", "rewards", "terminated", "truncated", "intervention", "valid")
"""A slot's transition fields, beside its frame (`frames/<key>` in a row)."""


class ReplayBuffer:
    """Ring buffer of transitions that stores each observation frame once (next_obs = the following slot)."""

    def __init__(self, observation_spec: Any, action_dim: int, capacity: int):
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {capacity}")
        self.observation_spec = ObservationSpec.coerce(observation_spec)
        self.action_dim = int(action_dim)
        self.capacity = int(capacity)
        # np.zeros maps lazily: a large image buffer costs RAM only as it fills.
        self.frames = {k: np.zeros((capacity,) + s.shape, s.dtype) for k, s in self.observation_spec.entries}
        self.actions = np.zeros((capacity, action_dim), np.float32)
        self.rewards = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, bool)
        self.truncated = np.zeros(capacity, bool)
        self.intervention = np.zeros(capacity, bool)
        self.valid = np.zeros(capacity, bool)  # slot starts a transition whose next frame is live
        self._cursor = 0  # next slot to write a new frame into
        self._frames_written = 0
        self._pending_slot: int | None = None  # slot holding the last next_obs of an episode still running
        self._open_from = 0  # number of the open episode's first frame (when _pending_slot is set)

    # ------------------------------------------------------------------------------------------ inserting
    def __len__(self) -> int:
        """Number of transitions that can be sampled."""
        return int(self.valid.sum())

    @property
    def num_frames(self) -> int:
        """Number of observation frames stored (steps + episode ends, capped at capacity)."""
        return min(self._frames_written, self.capacity)

    @property
    def frames_written(self) -> int:
        """Frames written since the buffer began (the number the next frame gets)."""
        return self._frames_written

    @property
    def oldest_frame(self) -> int:
        """Number of the oldest frame still in the ring."""
        return max(0, self._frames_written - self.capacity)

    @property
    def open_from(self) -> int | None:
        """Number of the open episode's first frame, or None when no episode is open."""
        return None if self._pending_slot is None else self._open_from

    @property
    def final_frames(self) -> int:
        """Frames whose rows will not change again while they are in the ring: all but the open episode's."""
        return self._frames_written if self._pending_slot is None else self._open_from

    def insert(
        self,
        observation: Mapping[str, Any],
        action: Any,
        reward: float,
        terminated: bool,
        truncated: bool,
        next_observation: Mapping[str, Any],
        intervention: bool = False,
    ) -> None:
        """Add one transition. Within an episode `observation` must be the previous call's `next_observation`.

        An episode ends with a `terminated` or `truncated` transition or with `end_episode()`; an `observation` that
        is not the open episode's last `next_observation` raises a ValueError rather than joining two episodes.
        """
        for name, value in (("observation", observation), ("next_observation", next_observation)):
            self.observation_spec.validate(value, 0, name)
            self._check_finite(value, name)
        if self._pending_slot is None:
            slot = None
        else:
            slot = self._pending_slot
            different = self._different_key(slot, observation)
            if different is not None:
                raise ValueError(
                    f"observation[{different!r}] is not the previous transition's next_observation: the previous "
                    "episode was not ended; pass terminated/truncated with its last step or call "
                    "Learner.end_episode() (ReplayBuffer.end_episode()) before starting a new one"
                )
        action = np.asarray(action, np.float32)
        if action.shape != (self.action_dim,):
            raise ValueError(f"action has shape {action.shape}, expected ({self.action_dim},)")
        if not np.isfinite(action).all() or not np.isfinite(reward):
            raise ValueError("action or reward contains NaN or inf")
        if slot is None:
            self._open_from = self._frames_written
            slot = self._write_frame(observation)
        self.actions[slot] = action
        self.rewards[slot] = reward
        self.terminated[slot] = terminated
        self.truncated[slot] = truncated
        self.intervention[slot] = intervention
        next_slot = self._write_frame(next_observation)
        self.valid[slot] = True
        self._pending_slot = None if (terminated or truncated) else next_slot

    def end_episode(self) -> None:
        """End the open episode (if any) as a truncation: its last next_observation stays as a bootstrap target.

        The next insert starts a new episode with a new frame. Call it when an episode stops without a
        terminated/truncated transition (a reset, a cut intervention fragment, a gap in the steps).
        """
        if self._pending_slot is not None:
            previous = (self._pending_slot - 1) % self.capacity
            if self.valid[previous]:
                self.truncated[previous] = True
        self._pending_slot = None

    def fail_last_step(self) -> bool:
        """Mark the open episode's newest transition terminated (a failure: no bootstrap past it) unless it is a
        human's; True if one was marked. A takeover calls it on the policy's step the human stepped in after."""
        if self._pending_slot is None:
            return False
        previous = (self._pending_slot - 1) % self.capacity
        if not self.valid[previous] or self.intervention[previous]:
            return False
        self.terminated[previous] = True
        return True

    def continues_episode(self, observation: Mapping[str, Any]) -> bool:
        """Whether an episode is open and `observation` is its last `next_observation` (what `insert` requires)."""
        return self._pending_slot is not None and self._different_key(self._pending_slot, observation) is None

    def _different_key(self, slot: int, observation: Mapping[str, Any]) -> str | None:
        """The first key whose value differs from the frame stored in `slot` (exact, after the dtype cast), or None.

        Costs one compare of the frame: about 10 us for two 128x128 RGB images.
        """
        for key, frames in self.frames.items():
            if not np.array_equal(frames[slot], np.asarray(observation[key], frames.dtype)):
                return key
        return None

    def _check_finite(self, observation: Mapping[str, Any], name: str) -> None:
        for key in self.observation_spec.vector_keys:
            value = np.asarray(observation[key])
            if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
                raise ValueError(f"{name}[{key!r}] contains NaN or inf")

    def _write_frame(self, observation: Mapping[str, Any]) -> int:
        slot = self._cursor
        # Overwriting frame `slot` kills the old transition stored in it; the one in slot-1 (the other user of this
        # frame, as its next_obs) is always our own freshest write or an episode-end frame, never a live old one.
        self.valid[slot] = False
        for key in self.frames:
            self.frames[key][slot] = observation[key]
        self._cursor = (slot + 1) % self.capacity
        self._frames_written += 1
        return slot

    # ------------------------------------------------------------------------------------------ sampling
    def sample_indices(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """`count` uniformly drawn indices of valid transition slots (vectorised rejection sampling)."""
        filled = self.num_frames
        n_valid = len(self)
        if n_valid == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if n_valid < filled // 2:
            return rng.choice(np.flatnonzero(self.valid), size=count)
        chosen = np.empty(0, np.int64)
        while chosen.size < count:
            candidates = rng.integers(0, filled, size=2 * (count - chosen.size) + 8)
            chosen = np.concatenate([chosen, candidates[self.valid[candidates]]])
        return chosen[:count]

    def gather(self, indices: np.ndarray, n_step: int = 1, discount: float = 0.99) -> Batch:
        """Batch for transition slots `indices` (any shape), with vectorised n-step returns.

        The n-step window stops at termination (mask 0), truncation or the episode's newest step (bootstrap with
        gamma**steps_taken).
        """
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        flat = np.asarray(indices).reshape(-1)
        if not self.valid[flat].all():
            raise ValueError("gather: some indices are not valid transitions")
        rewards = self.rewards[flat].copy()
        discounts = np.full(flat.shape, discount, np.float32)
        masks = (~self.terminated[flat]).astype(np.float32)
        last = flat.copy()  # slot of the last step in each window
        running = ~(self.terminated[flat] | self.truncated[flat])
        for _ in range(1, n_step):
            following = (last + 1) % self.capacity
            running &= self.valid[following]
            if not running.any():
                break
            last = np.where(running, following, last)
            rewards = np.where(running, rewards + discounts * self.rewards[following], rewards)
            masks = np.where(running, (~self.terminated[following]).astype(np.float32), masks)
            discounts = np.where(running, discounts * discount, discounts)
            running &= ~(self.terminated[following] | self.truncated[following])
        next_index = (last + 1) % self.capacity
        shape = np.shape(indices)
        return Batch(
            observations={k: v[flat].reshape(shape + v.shape[1:]) for k, v in self.frames.items()},
            actions=self.actions[flat].reshape(shape + (self.action_dim,)),
            rewards=rewards.astype(np.float32).reshape(shape),
            discounts=discounts.astype(np.float32).reshape(shape),
            masks=masks.reshape(shape),
            next_observations={k: v[next_index].reshape(shape + v.shape[1:]) for k, v in self.frames.items()},
            intervention=self.intervention[flat].reshape(shape),
            demo=np.zeros(shape, bool),
        )

    def sample(self, batch_size: int, rng: np.random.Generator, n_step: int = 1, discount: float = 0.99) -> Batch:
        """Uniform batch with leading dim [batch_size]."""
        return self.gather(self.sample_indices(batch_size, rng), n_step, discount)

    def sample_stacked(
        self, num_batches: int, batch_size: int, rng: np.random.Generator, n_step: int = 1, discount: float = 0.99
    ) -> Batch:
        """`num_batches` independent batches stacked as [K, B] (for the agent's scanned update)."""
        indices = self.sample_indices(num_batches * batch_size, rng).reshape(num_batches, batch_size)
        return self.gather(indices, n_step, discount)

    # ------------------------------------------------------------------------------------------ rows
    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Copies of the rows of frames [start, stop) (all still in the ring): `frames/<key>` and `ROW_FIELDS`."""
        if not self.oldest_frame <= start <= stop <= self._frames_written:
            raise ValueError(f"frames [{start}, {stop}) are not all in the ring (it holds [{self.oldest_frame}, "
                             f"{self._frames_written}))")
        slots = np.arange(start, stop) % self.capacity
        rows = {f"frames/{key}": frames[slots] for key, frames in self.frames.items()}
        rows.update({name: getattr(self, name)[slots] for name in ROW_FIELDS})
        return rows

    def put_rows(self, start: int, rows: Mapping[str, np.ndarray]) -> None:
        """Write rows of frames [start, start + len) into their slots (the buffer's position is `set_position`'s)."""
        count = len(rows["valid"])
        if count > self.capacity:
            raise ValueError(f"{count} rows do not fit a buffer of capacity {self.capacity}")
        slots = np.arange(start, start + count) % self.capacity
        for key, frames in self.frames.items():
            frames[slots] = rows[f"frames/{key}"]
        for name in ROW_FIELDS:
            getattr(self, name)[slots] = rows[name]

    def set_position(self, frames_written: int, open_from: int | None = None) -> None:
        """Set how many frames were written and where the open episode began (None: none is open), for rows put
        with `put_rows`."""
        if frames_written < 0 or (open_from is not None and not 0 <= open_from < frames_written - 1):
            raise ValueError(f"no buffer position has {frames_written} frames written and an episode open from "
                             f"{open_from}")
        self._frames_written = int(frames_written)
        self._cursor = self._frames_written % self.capacity
        self._pending_slot = None if open_from is None else (self._frames_written - 1) % self.capacity
        self._open_from = 0 if open_from is None else int(open_from)

    def _open_episode_start(self) -> int:
        """Number of the open episode's first frame, found from the slots (a transition joins a frame to the next
        frame of its own episode, so the episode starts after the newest slot without one)."""
        frame = self._frames_written - 1
        while frame > self.oldest_frame and self.valid[(frame - 1) % self.capacity]:
            frame -= 1
        return frame

    # ------------------------------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the buffer (contents and ring position) to a zarr group directory."""
        import zarr

        group = zarr.open_group(str(path), mode="w")
        filled = self.num_frames
        arrays = {f"frames/{k}": v for k, v in self.frames.items()}
        arrays.update(
            actions=self.actions,
            rewards=self.rewards,
            terminated=self.terminated,
            truncated=self.truncated,
            intervention=self.intervention,
            valid=self.valid,
        )
        for name, array in arrays.items():
            data = array[:filled]
            chunk_rows = max(1, min(max(filled, 1), (1 << 24) // max(1, data[:1].nbytes)))
            out = group.create_array(name, shape=data.shape, dtype=data.dtype, chunks=(chunk_rows,) + data.shape[1:])
            if filled:
                out[:] = data
        group.attrs["replay_buffer"] = {
            "version": 1,
            "capacity": self.capacity,
            "action_dim": self.action_dim,
            "cursor": self._cursor,
            "frames_written": self._frames_written,
            "pending_slot": self._pending_slot,
            "observation_spec": [[k, list(s.shape), s.dtype] for k, s in self.observation_spec.entries],
        }

    @classmethod
    def load(cls, path: str | os.PathLike) -> ReplayBuffer:
        """Read a buffer written by `save`."""
        import zarr

        group = zarr.open_group(str(path), mode="r")
        meta = group.attrs["replay_buffer"]
        spec = ObservationSpec.from_shapes({k: (tuple(shape), dtype) for k, shape, dtype in meta["observation_spec"]})
        buffer = cls(spec, meta["action_dim"], meta["capacity"])
        filled = min(meta["frames_written"], meta["capacity"])
        if filled:
            for key in buffer.frames:
                buffer.frames[key][:filled] = group[f"frames/{key}"][:]
            for name in ("actions", "rewards", "terminated", "truncated", "intervention", "valid"):
                getattr(buffer, name)[:filled] = group[name][:]
        buffer._cursor = meta["cursor"]
        buffer._frames_written = meta["frames_written"]
        buffer._pending_slot = meta["pending_slot"]
        if buffer._pending_slot is not None:
            buffer._open_from = buffer._open_episode_start()
        return buffer

    def describe(self) -> str:
        return json.dumps({"transitions": len(self), "frames": self.num_frames, "capacity": self.capacity})


class MixedSampler:
    """RLPD batches: a `demo_ratio` share from the demo buffer, the rest from the online buffer.

    When one buffer is empty the whole batch comes from the other.
    """

    def __init__(self, demo: ReplayBuffer, online: ReplayBuffer, demo_ratio: float = 0.5):
        if not 0.0 <= demo_ratio <= 1.0:
            raise ValueError(f"demo_ratio must be in [0, 1], got {demo_ratio}")
        if demo.observation_spec != online.observation_spec or demo.action_dim != online.action_dim:
            raise ValueError("demo and online buffers must have the same observation spec and action_dim")
        self.demo, self.online, self.demo_ratio = demo, online, demo_ratio

    def _split(self, total: int) -> int:
        """How many of `total` samples come from the demo buffer."""
        if len(self.demo) == 0 and len(self.online) == 0:
            raise ValueError("cannot sample: demo and online buffers are both empty")
        if len(self.online) == 0:
            return total
        if len(self.demo) == 0:
            return 0
        return int(round(total * self.demo_ratio))

    def sample_stacked(
        self, num_batches: int, batch_size: int, rng: np.random.Generator, n_step: int = 1, discount: float = 0.99
    ) -> Batch:
        """[K, B] batch; each of the K batches has the same demo/online split (demo rows first)."""
        n_demo = self._split(batch_size)
        parts = []
        if n_demo:
            demo_part = self.demo.sample_stacked(num_batches, n_demo, rng, n_step, discount)
            parts.append(demo_part.replace(demo=np.ones_like(demo_part.demo)))
        if batch_size - n_demo:
            parts.append(self.online.sample_stacked(num_batches, batch_size - n_demo, rng, n_step, discount))
        return concatenate_batches(parts, axis=1)

    def sample(self, batch_size: int, rng: np.random.Generator, n_step: int = 1, discount: float = 0.99) -> Batch:
        """[B] batch."""
        stacked = self.sample_stacked(1, batch_size, rng, n_step, discount)
        return Batch(**{k: _map(lambda x: x[0], v) for k, v in stacked.as_dict().items()})


def _map(fn, value):
    return {k: fn(v) for k, v in value.items()} if isinstance(value, dict) else fn(value)


def concatenate_batches(batches: list[Batch], axis: int = 0) -> Batch:
    """Concatenate numpy batches along `axis`."""
    if len(batches) == 1:
        return batches[0]
    out = {}
    for name, first in batches[0].as_dict().items():
        if isinstance(first, dict):
            out[name] = {k: np.concatenate([b.as_dict()[name][k] for b in batches], axis) for k in first}
        else:
            out[name] = np.concatenate([b.as_dict()[name] for b in batches], axis)
    return Batch(**out)


def insert_with_interventions(
    online: ReplayBuffer,
    demo: ReplayBuffer,
    observation: Mapping[str, Any],
    action: Any,
    reward: float,
    terminated: bool,
    truncated: bool,
    next_observation: Mapping[str, Any],
    intervention: bool = False,
    takeover_is_failure: bool = False,
) -> None:
    """HIL-SERL rule: every transition goes to `online`; human-intervention transitions also go to `demo`.

    `takeover_is_failure`: a takeover (the first human step after the policy's) marks the policy's step before it
    a failure (terminated, its reward kept) in `online`, so the critic does not credit the policy with the human's
    rescue (RLIF's reading of an intervention)."""
    if intervention and takeover_is_failure:
        online.fail_last_step()
    online.insert(observation, action, reward, terminated, truncated, next_observation, intervention)
    if intervention:
        demo.insert(observation, action, reward, terminated, truncated, next_observation, intervention)
    else:
        demo.end_episode()  # the intervention fragment (if any) ended; the next one starts with a fresh frame
