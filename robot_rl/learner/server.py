"""The learner's side of the actor protocol, without transport: transition payloads in (de-duplicated, logged before
they are acknowledged, inserted into replay an episode at a time), gradient steps scheduled against the data that
arrived, versioned weights out, checkpoints that survive a crash. The learner node wraps it; tests drive it directly.

Start-up comes in three parts, so that a respawned learner acknowledges transitions before its agent exists:

- `open()` restores the protocol state (de-duplication, acks, the transition log) from the run folder without
  importing JAX; from then on `ingest()` logs and acknowledges what arrives;
- `load_learner()` restores the checkpoint's agent and replay buffers into a `Learner` (or adds the demos of a new
  run); it touches nothing `ingest()` uses, so it may run in another thread meanwhile;
- `attach()` stages every logged transition the checkpoint does not hold, after which transitions go into replay as
  they arrive and the learner trains.

`start()` does all three in one call.

Abandoned episodes: an episode is inserted when its last step (terminated or truncated) arrives. An actor killed
mid-episode never sends that step, so its open episode is closed as truncated (its last step bootstraps) and
inserted when a new incarnation of the same actor id sends data, or when no step of it arrived for
`abandon_after_s` seconds of the learner's time (a decision logged in the transition log, so a restart closes it at
the same point). Steps of a closed episode that arrive later (a robot paused by a human for long) are inserted as an
episode of their own. Closed episodes leave the staging, so the log batches that held them are dropped at the next
checkpoint.

Replay on disk: each inserted episode is appended to the learner's replay stores beside the checkpoint
(`Learner.persist_replay`, robot_rl.data.replay_store) at once, so a checkpoint writes only the agent, optimiser,
counters and how far the stores go; its time and size do not grow with the run. A restart reads the stores back up
to the checkpoint's rows: the episodes appended after it come again from the transition log.

Run identity: the run folder's id (`RUN_FILE`, made when a learner first opens the folder, kept across restarts) and
this start's learner incarnation (`INCARNATION_FILE`: 1, 2, ... one per `open()`) go with every weights message and
acknowledgement (robot_rl.wire.learner_contact.RunBinding on the actor's side). Transitions an actor addressed to
another run are dropped, counted by run, and not acknowledged.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.core.files import atomic_write_bytes, atomic_write_text, make_dirs_durably
from robot_rl.policies.gaussian import weights_message
from robot_rl.wire.policy_file import POLICY_FILE, write_policy_file
from robot_rl.wire.inbox import Inbox
from robot_rl.wire.protocol import TransportError, make_run_id, run_id_problem
from robot_rl.wire.transition_log import ClosedEpisodes, LoggedBatch, TransitionLog
from robot_rl.wire.transitions import StampedTransition, decode_transitions_message
from robot_rl.wire.weights import WeightsMessage, reversion_weights

if TYPE_CHECKING:  # robot_rl.learner.learner imports JAX, which ingesting and acknowledging do not need
    from robot_rl.learner.learner import Learner

CHECKPOINT_DIR = "checkpoint"
LOG_DIR = "transition_log"
RUN_FILE = "run.json"
"""The run's id ({"run_id": ...}), made when a learner first opens the run folder."""
INCARNATION_FILE = "learner_runs"
"""How many times a learner opened the run folder: the current start's learner incarnation."""
VERSIONS_PER_RUN = 1_000_000_000
ABANDON_AFTER_S = 120.0
# close_abandoned() is polled about once a second; a longer pause means the learner itself was busy (a checkpoint,
# an evaluation), and that time does not count as silence of the actors.
MAX_POLL_GAP_S = 10.0

EpisodeKey = tuple[str, int]  # (source, episode)


def actor_id(source: str) -> str:
    """`robot1/3fa2c0d1e4b5` -> `robot1` (a source is one incarnation of an actor)."""
    return source.split("/", 1)[0]


def checkpoint_dir(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run folder (the rule of `Learner.checkpoint_path`, without JAX)."""
    path = Path(run_dir) / CHECKPOINT_DIR
    for candidate in (path, path.with_name(path.name + ".old")):
        if (candidate / "learner.json").exists():
            return candidate
    return None


def checkpoint_server_state(run_dir: str | Path) -> dict[str, Any] | None:
    """What the run folder's checkpoint recorded about the protocol (its ``server`` section), or None without one."""
    found = checkpoint_dir(run_dir)
    if found is None:
        return None
    state = json.loads((found / "learner.json").read_text())
    return dict(state.get("extra", {}).get("server", {}))


def read_run_id(run_dir: str | Path) -> str | None:
    """The id of the run in `run_dir` (None: no learner opened it yet); ValueError naming the file if corrupt."""
    path = Path(run_dir) / RUN_FILE
    try:
        run_id = json.loads(path.read_text())["run_id"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        run_id = None
    if not isinstance(run_id, str) or run_id_problem(run_id):
        raise ValueError(f"{path} holds no valid run id: remove it to give the run a new one (actors serving the "
                         "old id then ignore this learner unless they follow new runs)")
    return run_id


def ensure_run_id(run_dir: str | Path) -> str:
    """The id of the run in `run_dir`, made (and made durable) if it has none yet."""
    run_id = read_run_id(run_dir)
    if run_id is None:
        run_id = make_run_id()
        atomic_write_bytes(Path(run_dir) / RUN_FILE, json.dumps({"run_id": run_id}).encode(), fsync=True)
    return run_id


def next_incarnation(run_dir: str | Path) -> int:
    """Count one more learner start of the run in `run_dir` and return it (1, 2, ...); made durable, since
    incarnations order the run's weights and acknowledgements at the actors."""
    path = Path(run_dir) / INCARNATION_FILE
    try:
        incarnation = int(path.read_text()) + 1 if path.exists() else 1
    except ValueError:
        raise ValueError(f"{path} does not hold a count of learner starts: remove it to count afresh") from None
    atomic_write_bytes(path, str(incarnation).encode(), fsync=True)
    return incarnation


def compile_learner_step(learner: Learner) -> None:
    """Compile the learner's jitted update (or load it from JAX's persistent cache) on a throw-away batch of the
    shapes its steps use; the learner itself is not changed."""
    from robot_rl.data.replay import MixedSampler, ReplayBuffer

    spec, config = learner.observation_spec, learner.config
    buffer = ReplayBuffer(spec, learner.agent.batch_action_dim, 4)
    zero = {key: np.zeros(entry.shape, entry.dtype) for key, entry in spec.entries}
    buffer.insert(zero, np.zeros(learner.agent.batch_action_dim, np.float32), 0.0, False, True, zero)
    batch = MixedSampler(buffer, buffer, config.demo_ratio).sample_stacked(
        config.utd, config.batch_size, np.random.default_rng(0), config.n_step, learner.agent.config.discount)
    _, info = learner.agent.update(batch, validate=False)
    next(iter(info.values())).block_until_ready()


def settings_problems(updates_per_transition: float, weights_every: int, abandon_after_s: float,
                      budget: int = 0) -> list[str]:
    """What is wrong with a `LearnerServer`'s settings (empty: nothing); the learner node checks its parameters
    with it before it makes anything."""
    problems = []
    if not (math.isfinite(updates_per_transition) and updates_per_transition >= 0):
        problems.append(f"updates_per_transition={updates_per_transition!r} must be >= 0")
    if weights_every < 1:
        problems.append(f"weights_every={weights_every!r} must be >= 1")
    if not (math.isfinite(abandon_after_s) and abandon_after_s > 0):
        problems.append(f"abandon_after_s={abandon_after_s!r} must be > 0")
    if budget < 0:
        problems.append(f"budget={budget!r} must be >= 0")
    return problems


class LearnerServer:
    """Serves one `Learner` to any number of actors (sources); see the module doc."""

    def __init__(self, learner: Learner | None, run_dir: str | Path, *, updates_per_transition: float = 1.0,
                 weights_every: int = 5, budget: int = 0, abandon_after_s: float = ABANDON_AFTER_S,
                 clock: Callable[[], float] = time.monotonic):
        problems = settings_problems(updates_per_transition, weights_every, abandon_after_s, budget)
        if problems:
            raise ValueError(f"invalid LearnerServer settings: {'; '.join(problems)}")
        self.learner = learner  # None until attach() when the learner is built while transitions already arrive
        self.make_policy: Callable | None = None
        """agent -> the Policy whose `weights_message` is broadcast and saved (None: a plain SAC Gaussian); the
        learner node sets it from its run's robot_rl.training.config.policy_kind."""
        self.run_dir = Path(run_dir)
        make_dirs_durably(self.run_dir)  # a power cut after the first acknowledgement keeps the folder that holds it
        self.updates_per_transition = float(updates_per_transition)
        self.weights_every = int(weights_every)
        self.budget = int(budget)  # transitions to train on (0: no limit); more are still logged and acknowledged
        self.abandon_after_s = float(abandon_after_s)
        self._clock = clock
        self.inbox = Inbox()
        self.log = TransitionLog(self.run_dir / LOG_DIR)
        self.logged_through = -1  # index of the last log entry written (or replayed into the inbox)
        self.staged_through = -1  # index of the last log entry whose contents are in the learner
        self.received = 0  # accepted transitions (each counted once)
        self.rejected = 0
        self.steps = 0  # learner.step() calls (each runs `utd` gradient steps)
        self.weights_version = 0
        self._weights_trained_on = 0  # trained_on of the last weights sent
        self.successes = 0
        self.episodes = 0
        self.abandoned = 0  # episodes closed without their last step
        self.without_next_frame = 0  # transitions whose next frame never came (the last of an abandoned episode)
        self.episode_log: list[dict[str, Any]] = []  # one row per inserted episode (robot_rl.core.report's episode rows)
        self.metrics: list[dict[str, Any]] = []  # training metrics over time, added by the node (report rows)
        self.evals: list[dict[str, Any]] = []  # evaluation rows (robot_rl.core.report's), added by the node
        self.run_started_at = time.time()  # unix time the run began (its first learner start)
        self.rejections: list[str] = []  # reasons of dropped transitions, for the node to log
        self.run_id: str | None = None  # this run's id and this start's learner incarnation (set by open())
        self.incarnation: int | None = None
        self.foreign_runs: collections.Counter[str] = collections.Counter()  # transitions for another run, by run
        self.opened = False
        self.attached = False
        self.checkpoint_state: dict[str, Any] | None = None  # the checkpoint's `server` section open() resumed from
        self._restage: list[tuple[int, str, StampedTransition]] = []  # (log index, source, item): see open()
        self._staged: dict[EpisodeKey, list[StampedTransition]] = {}
        self._staged_log_index: dict[EpisodeKey, int] = {}  # oldest log entry holding a staged episode's items
        self._last_data: dict[EpisodeKey, float] = {}  # clock time of each staged episode's newest step
        self._last_poll: float | None = None
        self._closed: set[EpisodeKey] = set()  # episodes already inserted
        self._sources: set[str] = set()  # sources whose transitions were staged (to notice a new incarnation)

    # ----- start-up ----------------------------------------------------------------------------------------------
    def start(self, demos=None) -> str:
        """Resume from the run folder's checkpoint and transition log, or start fresh with `demos` (all at once)."""
        opened = self.open()
        loaded = self.load_learner(self.learner, demos)
        return f"{opened}; {loaded}; {self.attach(self.learner)}"

    def open(self) -> str:
        """Restore de-duplication, acks and the transition log from the run folder; no learner and no JAX needed.

        From here on `ingest()` logs and acknowledges transitions (they are staged once a learner is attached).
        """
        state = checkpoint_server_state(self.run_dir)
        self.checkpoint_state = state
        if state is not None:
            self.inbox = Inbox.from_json(state.get("inbox", {}))
            self.logged_through = int(state.get("logged_through", -1))
            self.received, self.steps = int(state.get("received", 0)), int(state.get("steps", 0))
            self.weights_version = int(state.get("weights_version", 0))
            self.episodes, self.successes = int(state.get("episodes", 0)), int(state.get("successes", 0))
            self.rejected, self.abandoned = int(state.get("rejected", 0)), int(state.get("abandoned", 0))
            self.without_next_frame = int(state.get("without_next_frame", 0))
            self.episode_log, self.metrics = list(state.get("episode_log", [])), list(state.get("metrics", []))
            self.evals = list(state.get("evals", []))
            self.run_started_at = float(state.get("run_started_at", self.run_started_at))
            self._closed = {(source, int(episode)) for source, episode in state.get("closed", [])}
            self._sources = set(state.get("sources", self.inbox.trackers))
            self.log.continue_after(self.logged_through)
        self.staged_through = self.logged_through
        # Every entry the log kept is read (and checked) here: those the checkpoint covers for the items of the
        # partial episodes it recorded (attach() stages them), the others to rebuild the acks.
        wanted = {(source, int(seq)) for source, seq in (state or {}).get("staged", [])}
        logged = 0
        for index, entry in self.log.replay(-1):
            self.logged_through = max(self.logged_through, index)
            if not isinstance(entry, LoggedBatch):
                continue
            if index <= self.staged_through:
                self._restage += [(index, entry.source, t) for t in entry.items if (entry.source, t.seq) in wanted]
            else:  # logged items were new when logged: the inbox takes them all again
                logged += len(self.inbox.accept(entry.source, entry.items))
        self.run_id = ensure_run_id(self.run_dir)
        self.incarnation = next_incarnation(self.run_dir)
        # Weights sent after the last checkpoint had versions the checkpoint does not know. Actors compare versions
        # within one learner incarnation only; each incarnation still starts a new block of versions, so that
        # versions keep growing across restarts for whatever else reads them (status files, benches).
        self.weights_version = max(self.weights_version, (self.incarnation - 1) * VERSIONS_PER_RUN)
        self.opened = True
        identity = f"run {self.run_id}, learner incarnation {self.incarnation}"
        if state is None:
            return f"a new run ({logged} logged transitions; {identity})"
        return f"resumed from {checkpoint_dir(self.run_dir)} and {logged} logged transitions after it ({identity})"

    def load_learner(self, learner: Learner, demos=None, labeller=None) -> str:
        """Restore the checkpoint's agent, optimiser and replay buffers into `learner`, or add `demos` on a new run.

        Touches nothing that `ingest()` uses: it may run in another thread while transitions arrive.
        """
        found = checkpoint_dir(self.run_dir)
        if found is not None:
            learner.restore(found)
            return f"restored {found} ({len(learner.online)} online, {len(learner.demo)} demo transitions)"
        added = learner.add_demos(demos, labeller) if demos is not None else 0
        return f"started with {added} demo transitions"

    def attach(self, learner: Learner, extra: Mapping[str, Any] | None = None) -> str:
        """Make `learner` (prepared by `load_learner`) the one this server trains: stage the partial episodes the
        checkpoint recorded and every log entry after it. A new run is checkpointed at once (with `extra`)."""
        if not self.opened:
            raise RuntimeError("open() the server before attaching a learner")
        self.learner = learner
        for index, source, item in self._restage:  # the partial episodes the checkpoint recorded
            self._stage(source, item, index)
        self._restage = []
        replayed = 0
        for index, entry in self.log.replay(self.staged_through):
            replayed += self._apply(index, entry)
            self.staged_through = index
        self.logged_through = max(self.logged_through, self.staged_through)
        self.attached = True
        if self.checkpoint_state is None:
            self.checkpoint(extra)
        return f"staged {replayed} logged transitions"

    # ----- data in -----------------------------------------------------------------------------------------------
    def ingest(self, payload: bytes | bytearray | memoryview) -> dict[str, int]:
        """Accept a transitions payload; returns the cumulative acks to send back ({} for transitions an actor
        addressed to another run: dropped, counted in `foreign_runs`, not acknowledged). TransportError if
        malformed."""
        if not self.opened:
            raise RuntimeError("open() the server before ingesting transitions")
        source, items, run, floor = decode_transitions_message(payload)
        if run is not None and run != self.run_id:
            self.foreign_runs[run] += len(items)
            return {}
        return self.accept(source, items, floor)

    def accept(self, source: str, items: Sequence[StampedTransition], floor: int | None = None) -> dict[str, int]:
        """Accept an actor's transitions in memory (in-process training; `ingest` decodes a message into this);
        returns the cumulative acks (`floor`: robot_rl.wire.transitions.TransitionsMessage.floor)."""
        if not self.opened:
            raise RuntimeError("open() the server before ingesting transitions")
        fresh = self.inbox.accept(source, items, floor)
        if fresh:  # logged (rejected ones too, so a restart rebuilds the same acks) before they are acknowledged
            self.logged_through = self.log.append(source, fresh)
            if self.attached:
                self._apply(self.logged_through, LoggedBatch(source, fresh))
                self.staged_through = self.logged_through
        return self.inbox.acks()

    def _apply(self, index: int, entry: LoggedBatch | ClosedEpisodes) -> int:
        """Put one log entry into the learner; returns how many transitions it staged."""
        if isinstance(entry, ClosedEpisodes):
            for key in entry.episodes:
                self._close((key[0], int(key[1])))
            return 0
        if entry.source not in self._sources:
            self._sources.add(entry.source)
            # a new incarnation of an actor: the episodes its previous incarnations left open will not go on
            restarted = actor_id(entry.source)
            for key in [k for k in self._staged if k[0] != entry.source and actor_id(k[0]) == restarted]:
                self._close(key)
        return self._accept(entry.source, entry.items, index)

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
        for name, obs in (("obs", item.observation), ("next_obs", item.next_observation or item.observation)):
            missing = [k for k in spec.keys if k not in obs]
            if missing:
                return f"{name} lacks keys {missing}"
            for key, entry in spec.entries:
                value = obs[key]
                if tuple(value.shape) != entry.shape or value.dtype.name != entry.dtype:
                    return f"{name}[{key!r}] is {value.dtype.name}{tuple(value.shape)}, expected {entry.dtype}{entry.shape}"
                if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
                    return f"{name}[{key!r}] is not finite"
        if tuple(item.action.shape) != (self.learner.robot_action_dim,):
            return f"action has shape {tuple(item.action.shape)}, expected ({self.learner.robot_action_dim},)"
        return self.learner.reward_error(item.reward)

    def _stage(self, source: str, item: StampedTransition, log_index: int) -> None:
        key = (source, item.episode)
        if key in self._closed:  # a step of an episode already inserted (re-sent with a gap, or after a long pause)
            self._insert_fragment([item])
            return
        self._staged.setdefault(key, []).append(item)
        self._staged_log_index.setdefault(key, log_index)
        self._last_data[key] = self._clock()
        if item.terminated or item.truncated:
            items = self._unstage(key)
            self._insert_fragment(items)
            self._episode_done(source, items)

    def _unstage(self, key: EpisodeKey) -> list[StampedTransition]:
        self._staged_log_index.pop(key, None)
        self._last_data.pop(key, None)
        self._closed.add(key)
        return self._staged.pop(key, [])

    def _close(self, key: EpisodeKey) -> None:
        """Insert a staged episode that will not go on, its last step marked truncated (it bootstraps)."""
        items = sorted(self._unstage(key), key=lambda t: t.step)
        if not items:
            return
        items[-1] = dataclasses.replace(items[-1], truncated=True)
        self._insert_fragment(items)
        self.abandoned += 1
        self._episode_done(key[0], items)

    def _episode_done(self, source: str, items: list[StampedTransition]) -> None:
        """Count an inserted episode and add it to `episode_log` (the report's training curve)."""
        success = any(t.success for t in items)
        self.episodes += 1
        self.successes += int(success)
        self.episode_log.append({
            "env_step": self.received, "source": source.split("/", 1)[0], "success": success,
            "return": float(sum(t.reward for t in items)), "length": len(items),
            "intervention_rate": sum(t.intervention for t in items) / len(items)})

    def close_abandoned(self, now: float | None = None) -> list[EpisodeKey]:
        """Close every staged episode without a new step for `abandon_after_s` (call it about once a second);
        returns the episodes closed. The decision is logged first, so a restart makes it at the same point."""
        if not self.attached:
            return []
        now = self._clock() if now is None else now
        if self._last_poll is not None and now - self._last_poll > MAX_POLL_GAP_S:
            busy = now - self._last_poll
            self._last_data = {key: seen + busy for key, seen in self._last_data.items()}
        self._last_poll = now
        silent = sorted(key for key, seen in self._last_data.items() if now - seen >= self.abandon_after_s)
        if silent:
            self.logged_through = self.staged_through = self.log.append_closed(ClosedEpisodes(tuple(silent)))
            for key in silent:
                self._close(key)
        return silent

    def _insert_fragment(self, items: list[StampedTransition]) -> None:
        """Insert transitions of one episode in step order; a gap in the steps cuts the replay episode there. A
        transition sent without its next frame takes it from the next step's transition; one whose next step never
        came (its actor stopped mid-episode) cannot be inserted and is counted in `without_next_frame`."""
        items.sort(key=lambda t: t.step)
        previous_step = None
        for i, item in enumerate(items):
            next_observation = item.next_observation
            if next_observation is None:
                following = items[i + 1] if i + 1 < len(items) else None
                if following is None or following.step != item.step + 1:
                    self.received -= 1
                    self.without_next_frame += 1
                    continue
                next_observation = following.observation
            if previous_step is not None and (item.step != previous_step + 1
                                              or not self.learner.continues_episode(item.observation)):
                self.learner.end_episode()
            try:
                self.learner.insert(item.observation, item.action, item.reward, item.terminated, item.truncated,
                                    next_observation, item.intervention, item.learner_action,
                                    item.policy_info)
            except ValueError as error:  # the learner refuses it (e.g. a reward outside its target bounds)
                self.learner.end_episode()
                self.received -= 1
                self.rejected += 1
                self.rejections.append(f"transition seq {item.seq} (episode {item.episode} step {item.step}): {error}")
            previous_step = item.step
        self.learner.end_episode()
        # Durable on disk as it closes, so a checkpoint writes only the agent and the counters.
        self.learner.persist_replay(self.run_dir / CHECKPOINT_DIR)

    # ----- training ----------------------------------------------------------------------------------------------
    @property
    def pending_steps(self) -> int:
        """learner.step() calls owed to the data received so far (one per transition by default)."""
        if not self.attached or not self.learner.ready:
            return 0
        usable = min(self.received, self.budget) if self.budget else self.received
        usable -= self.learner.warmup_transitions  # as in-process: no steps are owed for the warm-up's transitions
        return max(0, int(usable * self.updates_per_transition) - self.steps)

    @property
    def trained_on(self) -> int:
        """Transitions whose learner steps are done."""
        if self.updates_per_transition <= 0:
            return self.received
        warmup = self.learner.warmup_transitions if self.attached else 0
        return min(self.received, warmup + int(self.steps / self.updates_per_transition))

    @property
    def budget_done(self) -> bool:
        return self.attached and bool(self.budget) and self.received >= self.budget and self.pending_steps == 0

    def train_step(self) -> tuple[dict[str, float], bool]:
        """One learner step; returns (info, whether new weights are due)."""
        info = self.learner.step()
        self.steps += 1
        return info, self.steps % self.weights_every == 0

    @property
    def warmup_weights_due(self) -> bool:
        """Whether the warm-up took `weights_every` transitions since the last weights went out: the policy is
        unchanged, but a lock-step actor waits for weights that account for its transitions (max_weight_lag)."""
        return (self.attached and self.learner.warming_up
                and self.trained_on - self._weights_trained_on >= self.weights_every)

    def weights(self) -> WeightsMessage:
        """The current policy as a new weights version."""
        self.weights_version += 1
        self._weights_trained_on = self.trained_on
        return self._weights_message(self.weights_version)

    def stored_weights(self) -> bytes | None:
        """The run folder's policy file (the policy of its last checkpoint) as a new weights version, encoded, or
        None for a new run: what a respawned learner broadcasts before its agent is built (no JAX needed)."""
        try:
            payload = reversion_weights((self.run_dir / POLICY_FILE).read_bytes(), self.weights_version + 1,
                                        run=self.run_id, incarnation=self.incarnation)
        except (OSError, TransportError):
            return None
        self.weights_version += 1
        return payload

    def _weights_message(self, version: int) -> WeightsMessage:
        if self.make_policy is None:
            message = weights_message(self.learner.agent, version=version, transitions=self.trained_on,
                                      updates=self.learner.updates)
        else:
            message = self.make_policy(self.learner.agent).weights_message(
                version=version, transitions=self.trained_on, updates=self.learner.updates)
        return dataclasses.replace(message, run=self.run_id, incarnation=self.incarnation)

    # ----- persistence -------------------------------------------------------------------------------------------
    def checkpoint(self, extra: Mapping[str, Any] | None = None) -> None:
        """Checkpoint learner + protocol state, write the policy file, and drop the log entries it covers."""
        if not self.attached:
            raise RuntimeError("no learner attached: nothing to checkpoint yet")
        learner = self.learner
        staged = [[source, item.seq] for (source, _), items in self._staged.items() for item in items]
        server = {
            "inbox": self.inbox.to_json(), "logged_through": self.staged_through, "received": self.received,
            "steps": self.steps, "weights_version": self.weights_version, "episodes": self.episodes,
            "successes": self.successes, "staged": staged, "rejected": self.rejected, "abandoned": self.abandoned,
            "without_next_frame": self.without_next_frame,
            "closed": sorted([source, episode] for source, episode in self._closed), "sources": sorted(self._sources),
            "episode_log": self.episode_log, "metrics": self.metrics, "evals": self.evals,
            "run_started_at": self.run_started_at,
            "observation_spec": {key: entry.to_json() for key, entry in learner.observation_spec.entries},
            "action_dim": learner.action_dim,
        }
        learner.save(self.run_dir / CHECKPOINT_DIR, extra={"server": server, **dict(extra or {})})
        self.write_policy()
        # Partial episodes are not in the replay the checkpoint covers: keep their log batches until inserted.
        keep_from = min(self._staged_log_index.values(), default=self.staged_through + 1)
        self.log.truncate(min(self.staged_through, keep_from - 1))

    def write_policy(self) -> Path:
        """The current policy as a weights file (what `actor_node -p weights_path:=...` and sim_eval load)."""
        return write_policy_file(self.run_dir / POLICY_FILE, self._weights_message(max(self.weights_version, 1)))

    def status(self) -> dict[str, Any]:
        learner = self.learner if self.attached else None
        return {
            "received": self.received, "rejected": self.rejected, "duplicates": self.inbox.duplicates,
            "steps": self.steps, "updates": learner.updates if learner else None,
            "weights_version": self.weights_version, "learner_ready": self.attached,
            "online": len(learner.online) if learner else None, "demo": len(learner.demo) if learner else None,
            "interventions": learner.interventions if learner else None, "episodes": self.episodes,
            "successes": self.successes, "abandoned": self.abandoned, "without_next_frame": self.without_next_frame,
            "staged": {f"{source} episode {episode}": len(items) for (source, episode), items in self._staged.items()},
            "log_entries": len(self.log.indices()), "acks": self.inbox.acks(),
            "sources": {s: t.to_json() for s, t in self.inbox.trackers.items()}, "time": time.time(),
            "run": self.run_id, "incarnation": self.incarnation, "foreign_transitions": dict(self.foreign_runs),
        }

    def write_status(self, path: str | Path, **extra: Any) -> None:
        atomic_write_text(path, json.dumps({**self.status(), **extra}))
