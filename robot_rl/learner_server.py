"""The learner's side of the actor protocol, without transport: transition payloads in (de-duplicated, logged before
they are acknowledged, inserted into replay an episode at a time), gradient steps scheduled against the data that
arrived, versioned weights out, checkpoints that survive a crash. The learner node wraps it; tests drive it directly.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.learner import Learner
from robot_rl.train import config_to_json
from robot_rl.transport import (
    Inbox,
    StampedTransition,
    TransitionLog,
    WeightsMessage,
    decode_transitions,
    encode_weights,
)

CHECKPOINT_DIR = "checkpoint"
LOG_DIR = "transition_log"
POLICY_FILE = "policy.msgpack"
VERSIONS_PER_RUN = 1_000_000_000


class LearnerServer:
    """Serves one `Learner` to any number of actors (sources); see the module doc."""

    def __init__(self, learner: Learner, run_dir: str | Path, *, updates_per_transition: float = 1.0,
                 weights_every: int = 5, budget: int = 0):
        if updates_per_transition < 0 or weights_every < 1:
            raise ValueError("updates_per_transition must be >= 0 and weights_every >= 1")
        self.learner = learner
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.updates_per_transition = float(updates_per_transition)
        self.weights_every = int(weights_every)
        self.budget = int(budget)  # transitions to train on (0: no limit); more are still logged and acknowledged
        self.inbox = Inbox()
        self.log = TransitionLog(self.run_dir / LOG_DIR)
        self.logged_through = -1  # index of the last log batch whose transitions are in the learner
        self.received = 0  # accepted transitions (each counted once)
        self.rejected = 0
        self.steps = 0  # learner.step() calls (each runs `utd` gradient steps)
        self.weights_version = 0
        self.successes = 0
        self.episodes = 0
        self.rejections: list[str] = []  # reasons of dropped transitions, for the node to log
        self._staged: dict[tuple[str, int], list[StampedTransition]] = {}
        self._staged_log_index: dict[tuple[str, int], int] = {}  # oldest log batch holding a staged episode's items
        self._closed: set[tuple[str, int]] = set()  # episodes already inserted

    # ----- start-up ----------------------------------------------------------------------------------------------
    def start(self, demos=None) -> str:
        """Resume from the run folder's checkpoint and transition log, or start fresh with `demos`."""
        message = self._start(demos)
        # Weights sent after the last checkpoint had versions the checkpoint does not know: start each run of the
        # learner in a new block of versions so actors (which keep only newer weights) accept what it sends.
        epoch_file = self.run_dir / "learner_runs"
        epoch = int(epoch_file.read_text()) + 1 if epoch_file.exists() else 1
        epoch_file.write_text(str(epoch))
        self.weights_version = max(self.weights_version, (epoch - 1) * VERSIONS_PER_RUN)
        return message

    def _start(self, demos) -> str:
        checkpoint = Learner.checkpoint_path(self.run_dir / CHECKPOINT_DIR)
        if checkpoint is not None:
            extra = self.learner.restore(checkpoint)
            server = extra.get("server", {})
            self.inbox = Inbox.from_json(server.get("inbox", {}))
            self.logged_through = int(server.get("logged_through", -1))
            self.received, self.steps = int(server.get("received", 0)), int(server.get("steps", 0))
            self.weights_version = int(server.get("weights_version", 0))
            self.episodes, self.successes = int(server.get("episodes", 0)), int(server.get("successes", 0))
            self.rejected = int(server.get("rejected", 0))
            self._closed = {(source, int(episode)) for source, episode in server.get("closed", [])}
            self.log.continue_after(self.logged_through)
            replayed = self._replay_log(server.get("staged", []))
            return (f"resumed from {checkpoint} ({self.received - replayed} transitions) and {replayed} logged "
                    f"transitions after it")
        added = self.learner.add_demos(demos) if demos is not None else 0
        replayed = self._replay_log([])
        self.checkpoint()
        return f"started with {added} demo transitions" + (f" and {replayed} logged transitions" if replayed else "")

    def _replay_log(self, staged_seqs: list) -> int:
        """Re-ingest logged batches after the checkpoint; `staged_seqs` re-stages partial episodes it recorded."""
        wanted = {(source, int(seq)) for source, seq in staged_seqs}
        replayed = 0
        if wanted:  # partial episodes at checkpoint time live in log batches the checkpoint already covers
            for index, source, items in self.log.replay(-1):
                if index > self.logged_through:
                    break
                for item in items:
                    if (source, item.seq) in wanted:
                        self._stage(source, item, index)
        for index, source, items in self.log.replay(self.logged_through):
            replayed += self._accept(source, self.inbox.accept(source, items), index)
            self.logged_through = index
        return replayed

    # ----- data in -----------------------------------------------------------------------------------------------
    def ingest(self, payload: bytes | bytearray | memoryview) -> dict[str, int]:
        """Accept a transitions payload; returns the cumulative acks to send back. TransportError if malformed."""
        source, items = decode_transitions(payload)
        fresh = self.inbox.accept(source, items)
        if fresh:  # logged (rejected ones too, so a restart rebuilds the same acks) before they are acknowledged
            self.logged_through = self.log.append(source, fresh)
            self._accept(source, fresh, self.logged_through)
        return self.inbox.acks()

    def _accept(self, source: str, fresh: list[StampedTransition], log_index: int) -> int:
        """Stage new transitions; one that does not fit the learner is dropped with a reason. Returns how many fit."""
        accepted = 0
        for item in fresh:
            problem = self._problem(item)
            if problem:
                self.rejected += 1
                self.rejections.append(f"transition {source} seq {item.seq}: {problem}")
                continue
            self._stage(source, item, log_index)
            accepted += 1
        self.received += accepted
        return accepted

    def _problem(self, item: StampedTransition) -> str | None:
        spec = self.learner.observation_spec
        for name, obs in (("obs", item.observation), ("next_obs", item.next_observation)):
            missing = [k for k in spec.keys if k not in obs]
            if missing:
                return f"{name} lacks keys {missing}"
            for key, entry in spec.entries:
                value = obs[key]
                if tuple(value.shape) != entry.shape or value.dtype.name != entry.dtype:
                    return f"{name}[{key!r}] is {value.dtype.name}{tuple(value.shape)}, expected {entry.dtype}{entry.shape}"
                if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
                    return f"{name}[{key!r}] is not finite"
        if tuple(item.action.shape) != (self.learner.action_dim,):
            return f"action has shape {tuple(item.action.shape)}, expected ({self.learner.action_dim},)"
        return None

    def _stage(self, source: str, item: StampedTransition, log_index: int) -> None:
        key = (source, item.episode)
        if key in self._closed:  # a re-sent step of an episode already inserted (with a gap): add it on its own
            self._insert_fragment([item])
            return
        self._staged.setdefault(key, []).append(item)
        self._staged_log_index.setdefault(key, log_index)
        if item.terminated or item.truncated:
            self._staged_log_index.pop(key)
            self._closed.add(key)
            items = self._staged.pop(key)
            self._insert_fragment(items)
            self.episodes += 1
            self.successes += int(any(t.success for t in items))

    def _insert_fragment(self, items: list[StampedTransition]) -> None:
        """Insert transitions of one episode in step order; a gap in the steps cuts the replay episode there."""
        items.sort(key=lambda t: t.step)
        online, demo = self.learner.online, self.learner.demo
        previous_step = None
        for item in items:
            if previous_step is not None and item.step != previous_step + 1:
                online.end_episode()
                demo.end_episode()
            self.learner.insert(item.observation, item.action, item.reward, item.terminated, item.truncated,
                                item.next_observation, item.intervention)
            previous_step = item.step
        online.end_episode()
        demo.end_episode()

    # ----- training ----------------------------------------------------------------------------------------------
    @property
    def pending_steps(self) -> int:
        """learner.step() calls owed to the data received so far (one per transition by default)."""
        if not self.learner.ready:
            return 0
        usable = min(self.received, self.budget) if self.budget else self.received
        return max(0, int(usable * self.updates_per_transition) - self.steps)

    @property
    def trained_on(self) -> int:
        """Transitions whose learner steps are done."""
        if self.updates_per_transition <= 0:
            return self.received
        return min(self.received, int(self.steps / self.updates_per_transition))

    @property
    def budget_done(self) -> bool:
        return bool(self.budget) and self.received >= self.budget and self.pending_steps == 0

    def train_step(self) -> tuple[dict[str, float], bool]:
        """One learner step; returns (info, whether new weights are due)."""
        info = self.learner.step()
        self.steps += 1
        return info, self.steps % self.weights_every == 0

    def weights(self) -> WeightsMessage:
        """The current policy as a new weights version."""
        self.weights_version += 1
        return self._weights_message(self.weights_version)

    def _weights_message(self, version: int) -> WeightsMessage:
        agent = self.learner.agent
        return WeightsMessage(
            version=version, policy=agent.policy_to_bytes(), observation_spec=agent.observation_spec,
            action_dim=agent.action_dim, sac_config=config_to_json(agent.config), transitions=self.trained_on,
            updates=self.learner.updates)

    # ----- persistence -------------------------------------------------------------------------------------------
    def checkpoint(self, extra: Mapping[str, Any] | None = None) -> None:
        """Checkpoint learner + protocol state, write the policy file, and drop the log batches it covers."""
        staged = [[source, item.seq] for (source, _), items in self._staged.items() for item in items]
        server = {
            "inbox": self.inbox.to_json(), "logged_through": self.logged_through, "received": self.received,
            "steps": self.steps, "weights_version": self.weights_version, "episodes": self.episodes,
            "successes": self.successes, "staged": staged, "rejected": self.rejected,
            "closed": sorted([source, episode] for source, episode in self._closed),
        }
        self.learner.save(self.run_dir / CHECKPOINT_DIR, extra={"server": server, **dict(extra or {})})
        self.write_policy()
        # Partial episodes are not in the checkpoint's replay buffers: keep their log batches until inserted.
        keep_from = min(self._staged_log_index.values(), default=self.logged_through + 1)
        self.log.truncate(min(self.logged_through, keep_from - 1))

    def write_policy(self) -> Path:
        """The current policy as a weights file (what `actor_node -p weights_path:=...` and sim_eval load)."""
        path = self.run_dir / POLICY_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(encode_weights(self._weights_message(max(self.weights_version, 1))))
        os.replace(tmp, path)
        return path

    def status(self) -> dict[str, Any]:
        learner = self.learner
        return {
            "received": self.received, "rejected": self.rejected, "duplicates": self.inbox.duplicates,
            "steps": self.steps, "updates": learner.updates, "weights_version": self.weights_version,
            "online": len(learner.online), "demo": len(learner.demo), "interventions": learner.interventions,
            "episodes": self.episodes, "successes": self.successes, "acks": self.inbox.acks(),
            "sources": {s: t.to_json() for s, t in self.inbox.trackers.items()}, "time": time.time(),
        }

    def write_status(self, path: str | Path, **extra: Any) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({**self.status(), **extra}))
        os.replace(tmp, path)
