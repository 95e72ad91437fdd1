"""The replay store (robot_rl.data.replay_store) and checkpoints that cover it: rows appended as episodes end, read
back exactly into a buffer, checkpoints whose size does not grow with the run, and no acknowledged transition lost
or doubled by a crash at any step of an append or a checkpoint."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import stat
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core import files

from robot_rl.wire import transition_log
from robot_rl.agents.sac import SACConfig
from robot_rl.data import replay_store
from robot_rl.data.replay import ReplayBuffer
from robot_rl.data.replay_store import ReplayStore, ReplayStoreError
from robot_rl.learner.learner import Learner, LearnerConfig, checkpoint_replay, replay_folder
from robot_rl.learner.server import CHECKPOINT_DIR, LearnerServer
from robot_rl.wire.protocol import make_source
from robot_rl.wire.transitions import StampedTransition

SPEC = {"state": ((3,), np.float32), "images/front": ((4, 4, 3), np.uint8)}
LEARNER_SPEC = {"state": ((3,), np.float32)}  # a learner's pixel encoder needs larger images than these
ACTION_DIM = 4
SMALL_SAC = SACConfig(actor_hidden_dims=(16, 16), critic_hidden_dims=(16, 16), critic_ensemble_size=2)
SMALL_LEARNER = LearnerConfig(batch_size=8, utd=1, online_capacity=40, demo_capacity=30, seed=1, warmup_transitions=0)
SOURCE = make_source("arm-a", "inc0")
BUFFER_FIELDS = ("actions", "rewards", "terminated", "truncated", "intervention", "valid")


def observation(episode: int, step: int) -> dict[str, np.ndarray]:
    """An observation that encodes (episode, step), so rows can be checked exactly."""
    return {"state": np.array([episode, step, 0], np.float32),
            "images/front": np.full((4, 4, 3), (episode * 31 + step) % 256, np.uint8)}


def insert_episode(learner: Learner, episode: int, length: int, *, start: int = 0, end: bool = True,
                   interventions=()) -> None:
    """Steps `start` to `length` - 1 of an episode; the last one terminates it if `end`."""
    for step in range(start, length):
        last = end and step == length - 1
        learner.insert(observation(episode, step), np.array([episode, step, 0, 0], np.float32), float(step),
                       last, False, observation(episode, step + 1), step in interventions)


def insert_episode_into(buffer: ReplayBuffer, episode: int, length: int) -> None:
    """An episode of `length` steps straight into a buffer."""
    for step in range(length):
        buffer.insert(observation(episode, step), np.array([episode, step, 0, 0], np.float32), 1.0,
                      step == length - 1, False, observation(episode, step + 1))


def assert_same_buffer(loaded: ReplayBuffer, buffer: ReplayBuffer) -> None:
    assert (loaded.frames_written, loaded._cursor, loaded._pending_slot, loaded.open_from, loaded.capacity) == (
        buffer.frames_written, buffer._cursor, buffer._pending_slot, buffer.open_from, buffer.capacity)
    for name in BUFFER_FIELDS:
        np.testing.assert_array_equal(getattr(loaded, name), getattr(buffer, name), err_msg=name)
    for key in buffer.frames:
        np.testing.assert_array_equal(loaded.frames[key], buffer.frames[key], err_msg=key)


def new_learner() -> Learner:
    return Learner(LEARNER_SPEC, ACTION_DIM, SMALL_SAC, SMALL_LEARNER)


# ----- the store ------------------------------------------------------------------------------------------------

def test_rows_appended_as_episodes_end_read_back_as_the_ring_holds_them(tmp_path):
    buffer = ReplayBuffer(SPEC, ACTION_DIM, capacity=23)
    store = ReplayStore(tmp_path / "online.zarr", buffer.observation_spec, ACTION_DIM, create=True)
    rng = np.random.default_rng(3)
    for episode in range(12):  # 12 short episodes wrap the ring of 23 frames twice
        length = int(rng.integers(1, 8))
        insert_episode_into(buffer, episode, length)
        assert store.append(buffer) == length + 1
    buffer.insert(observation(99, 0), np.zeros(4, np.float32), 0.0, False, False, observation(99, 1))
    assert store.append(buffer) == 0  # the open episode's rows may still change: not appended
    assert len(store.segments) == 12 and store.end == buffer.final_frames
    buffer.end_episode()
    store.append(buffer)
    assert_same_buffer(ReplayStore(tmp_path / "online.zarr").load(23, store.end), buffer)
    with pytest.raises(ReplayStoreError, match="holds rows of another observation spec"):
        ReplayStore(tmp_path / "online.zarr", {"state": ((3,), np.float32)}, ACTION_DIM)


def test_rows_that_left_the_ring_before_they_were_appended_are_skipped(tmp_path):
    buffer = ReplayBuffer(SPEC, ACTION_DIM, capacity=10)
    store = ReplayStore(tmp_path / "demo.zarr", buffer.observation_spec, ACTION_DIM, create=True)
    for step in range(25):  # one long episode: its first frames are overwritten before it ends
        buffer.insert(observation(0, step), np.zeros(4), 0.0, False, step == 24, observation(0, step + 1))
    assert store.append(buffer) == 10
    assert [(s.start, s.end) for s in store.segments] == [(16, 26)]
    assert_same_buffer(store.load(10, 26), buffer)


def test_small_segments_are_merged_once_a_checkpoint_covers_them_and_leftovers_of_a_crash_go(tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setattr(replay_store, "MIN_SEGMENT_ROWS", 1)
    monkeypatch.setattr(replay_store, "MAX_SEGMENT_ROWS", 10)
    buffer = ReplayBuffer(SPEC, ACTION_DIM, capacity=50)
    store = ReplayStore(tmp_path / "online.zarr", buffer.observation_spec, ACTION_DIM, create=True)
    for episode in range(4):  # 4 episodes of 4 frames
        insert_episode_into(buffer, episode, 3)
        store.append(buffer, merge_through=8)
    assert [(s.start, s.end) for s in store.segments] == [(0, 4), (4, 8), (8, 12), (12, 16)]  # < 10 rows below 8
    store.append(buffer, merge_through=16)
    assert [(s.start, s.end) for s in store.segments] == [(0, 16)]
    assert sorted(p.name for p in store.path.iterdir()) == ["rows-000000000000-000000000016.zip", "zarr.json"]
    # a merge cut short (small segments still there) and an append cut short (a temporary file) read as before
    shutil.copy(store.path / "rows-000000000000-000000000016.zip", store.path / "rows-000000000004-000000000008.zip")
    (store.path / ".tmp-0000-rows-000000000016-000000000020.zip").write_bytes(b"half")
    reopened = ReplayStore(store.path)
    assert [(s.start, s.end) for s in reopened.segments] == [(0, 16)]
    assert_same_buffer(reopened.load(50, 16), buffer)
    insert_episode_into(buffer, 4, 3)
    reopened.append(buffer)
    assert sorted(p.name for p in store.path.iterdir()) == [
        "rows-000000000000-000000000016.zip", "rows-000000000016-000000000020.zip", "zarr.json"]


# ----- checkpoints ----------------------------------------------------------------------------------------------

def test_a_checkpoint_restores_both_buffers_exactly_with_an_open_episode_and_rows_after_it_are_dropped(tmp_path):
    learner = new_learner()
    for episode in range(9):  # the online ring (40) wraps; interventions fill the demo ring (30)
        insert_episode(learner, episode, 5, interventions=(1, 2, 3))
    insert_episode(learner, 9, 3, end=False)  # open at the checkpoint: its rows go in the checkpoint itself
    learner.save(tmp_path / "ckpt", extra={"at": 1})
    assert (tmp_path / "ckpt" / "online_open.zarr").exists()
    assert replay_folder(tmp_path / "ckpt") == tmp_path / "ckpt.replay"
    saved = {"online": copy.deepcopy(learner.online), "demo": copy.deepcopy(learner.demo)}
    insert_episode(learner, 9, 5, start=3)  # ends the open episode, appended after the checkpoint's rows:
    assert learner.persist_replay(tmp_path / "ckpt") == 6  # its 5 steps and last frame; a crash follows

    restored = new_learner()
    assert restored.restore(tmp_path / "ckpt") == {"at": 1}
    assert_same_buffer(restored.online, saved["online"])
    assert_same_buffer(restored.demo, saved["demo"])
    assert_same_buffer(checkpoint_replay(tmp_path / "ckpt", "demo"), saved["demo"])
    insert_episode(restored, 9, 8, start=3)  # other steps this time (a resumed in-process run collects anew)
    restored.save(tmp_path / "ckpt")
    assert_same_buffer(checkpoint_replay(tmp_path / "ckpt"), restored.online)
    assert not (tmp_path / "ckpt" / "online_open.zarr").exists()


def test_a_version_1_checkpoint_is_still_restored_and_its_buffers_go_to_the_stores_at_the_next_save(tmp_path):
    learner = new_learner()
    insert_episode(learner, 0, 6, interventions=(2,))
    insert_episode(learner, 1, 2, end=False)
    learner.save(tmp_path / "ckpt")
    old = tmp_path / "old"  # what version 1 wrote: the buffers inside the checkpoint
    old.mkdir()
    shutil.copy(tmp_path / "ckpt" / "agent.msgpack", old)
    learner.online.save(old / "online.zarr")
    learner.demo.save(old / "demo.zarr")
    state = json.loads((tmp_path / "ckpt" / "learner.json").read_text())
    del state["replay"]
    (old / "learner.json").write_text(json.dumps({**state, "version": 1}))

    restored = new_learner()
    restored.restore(old)
    assert_same_buffer(restored.online, learner.online)
    insert_episode(restored, 1, 4, start=2)
    restored.save(old)
    assert_same_buffer(checkpoint_replay(old), restored.online)
    assert json.loads((old / "learner.json").read_text())["version"] == 2 and not (old / "online.zarr").exists()


def test_checkpoint_bytes_do_not_grow_with_the_run(tmp_path):
    config = LearnerConfig(batch_size=8, utd=1, online_capacity=10_000, demo_capacity=100, warmup_transitions=0)
    server = LearnerServer(Learner(LEARNER_SPEC, ACTION_DIM, SMALL_SAC, config), tmp_path, updates_per_transition=0.0)
    server.start()

    def run_to(transitions: int, length: int = 250) -> int:
        while server.received < transitions:  # one message per episode
            episode = server.episodes
            server.accept(SOURCE, [StampedTransition(
                seq=episode * length + step, episode=episode, step=step, observation=observation(episode, step),
                action=np.zeros(4, np.float32), reward=0.0, terminated=step == length - 1, truncated=False,
                next_observation=observation(episode, step + 1)) for step in range(length)])
        server.checkpoint()
        return sum(f.stat().st_size for f in (tmp_path / CHECKPOINT_DIR).rglob("*") if f.is_file())

    at_1k, at_5k = run_to(1000), run_to(5000)
    assert len(server.learner.online) == 5000
    assert at_5k < 2 * at_1k, (at_1k, at_5k)
    stored = sum(f.stat().st_size for f in (tmp_path / "checkpoint.replay").rglob("*") if f.is_file())
    assert stored > 5000 * 3 * 4 > at_5k  # the frames are in the store, not in the checkpoint


# ----- crashes --------------------------------------------------------------------------------------------------

WRITE_STEPS = [(files, "rename_durably"), (files, "remove_tree_durably"), (replay_store, "write_rows"),
               (transition_log, "atomic_write_bytes"), (Path, "unlink")]
"""Every step that changes what a crash leaves on disk, in the replay stores, checkpoints and the transition log: a
segment's contents, renames into place, removals (a store truncated or merged, a log entry dropped), log entries.
Flushes are left out: this kills the writer, not the power, so a flush changes nothing on disk."""


def disk_state(run_dir: Path) -> int:
    return hash(tuple((str(path.relative_to(run_dir)), path.read_bytes() if path.is_file() else b"")
                      for path in sorted(run_dir.rglob("*"))))


def before_each_write_step(patch, before_step) -> None:
    """Call `before_step()` before each of WRITE_STEPS (patched through `patch`, a monkeypatch context)."""
    for owner, name in WRITE_STEPS:
        def step(*args, __original=getattr(owner, name), **kwargs):
            before_step()
            return __original(*args, **kwargs)
        patch.setattr(owner, name, step)


@contextlib.contextmanager
def disk_at_each_step(monkeypatch, run_dir: Path, acked: dict[str, int]):
    """Before each write step taken inside the block, copy `run_dir` and `acked` (the acknowledgements sent so
    far): what a writer killed there leaves. Yields the list of (copy, acks) it fills, one per distinct pair."""
    crashes: list[tuple[Path, dict[str, int]]] = []
    seen = set()

    def before_step() -> None:
        state = (disk_state(run_dir), tuple(sorted(acked.items())))
        if run_dir.exists() and state not in seen:
            seen.add(state)
            copy_dir = run_dir.with_name(f"crash{len(crashes) + 1}")
            shutil.copytree(run_dir, copy_dir)
            crashes.append((copy_dir, dict(acked)))

    with monkeypatch.context() as patch:
        before_each_write_step(patch, before_step)
        yield crashes


def stamped(episode: int, step: int, length: int, seq: int, interventions=()) -> StampedTransition:
    return StampedTransition(seq=seq, episode=episode, step=step, observation=observation(episode, step),
                             action=np.array([episode, step, 0, 0], np.float32), reward=0.0,
                             terminated=step == length - 1, truncated=False,
                             next_observation=observation(episode, step + 1), intervention=step in interventions)


def contents(buffer: ReplayBuffer) -> Counter:
    return Counter(tuple(int(v) for v in row[:2]) for row in buffer.actions[buffer.valid])


def new_server(run_dir: Path) -> LearnerServer:
    return LearnerServer(new_learner(), run_dir, updates_per_transition=0.0)


class PowerCutDisk:
    """What a power cut leaves of a folder: each folder's entries as of its last fsync, each file's bytes as of its
    last fsync (a file never flushed is empty), everything not flushed lost. Fed by every os.fsync of the process."""

    def __init__(self, root: Path):
        self.root = root.stat().st_ino  # the root's entries count as durable from the start
        self.folders: dict[int, dict[str, tuple[int, bool]]] = {}
        self.contents: dict[int, bytes] = {}
        self._record_folder(root)

    def _record_folder(self, folder: Path) -> None:
        self.folders[folder.stat().st_ino] = {entry.name: (entry.inode(), entry.is_dir(follow_symlinks=False))
                                              for entry in os.scandir(folder)}

    def flushed(self, descriptor: int) -> None:
        """Record what an fsync of `descriptor` makes durable."""
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            self._record_folder(Path(os.readlink(f"/proc/self/fd/{descriptor}")))
        else:
            with open(f"/proc/self/fd/{descriptor}", "rb") as file:  # also for a write-only descriptor
                self.contents[os.fstat(descriptor).st_ino] = file.read()

    def state(self) -> int:
        return hash((repr(sorted(self.folders.items())), tuple(sorted(self.contents.items()))))

    def image(self, target: Path) -> Path:
        """Write into `target` (a new folder) what a power cut now would leave of the root."""
        def build(inode: int, folder: Path) -> None:
            folder.mkdir()
            for name, (child, is_folder) in self.folders.get(inode, {}).items():
                if is_folder:
                    build(child, folder / name)
                else:
                    (folder / name).write_bytes(self.contents.get(child, b""))
        build(self.root, target)
        return target


@contextlib.contextmanager
def power_cut_at_each_step(monkeypatch, root: Path, acked: dict[str, int]):
    """Before each write step and each fsync inside the block, the disk a power cut there leaves of `root` (a copy)
    and `acked`. Yields the list of (copy of the run folder, acks) it fills, one per distinct pair."""
    crashes: list[tuple[Path, dict[str, int]]] = []
    disk, seen, real_fsync = PowerCutDisk(root), set(), os.fsync

    def before_step() -> None:
        state = (disk.state(), tuple(sorted(acked.items())))
        if state not in seen:
            seen.add(state)
            image = disk.image(root.with_name(f"{root.name}-cut{len(crashes) + 1}"))
            crashes.append((image / "run", dict(acked)))

    def fsync(descriptor: int) -> None:
        before_step()
        real_fsync(descriptor)
        disk.flushed(descriptor)

    with monkeypatch.context() as patch:
        before_each_write_step(patch, before_step)
        patch.setattr(os, "fsync", fsync)
        yield crashes
        before_step()


@pytest.mark.parametrize("failure", ["killed", "power_cut"])
def test_a_crash_at_any_step_of_an_append_or_a_checkpoint_loses_nothing_acknowledged_and_doubles_nothing(
        tmp_path, monkeypatch, failure):
    """The writer killed between any two steps (the disk keeps every write), or the power cut there (a stand-in
    that keeps only what was flushed): a restart on what is left, and the actor sending again what was not
    acknowledged, ends with every transition in replay once."""
    if failure == "killed":  # flushes change nothing a killed process leaves: see WRITE_STEPS
        monkeypatch.setattr(files, "fsync_file", lambda path: None)
        monkeypatch.setattr(files, "fsync_dir", lambda path: None)
    monkeypatch.setattr(replay_store, "MIN_SEGMENT_ROWS", 1)
    monkeypatch.setattr(replay_store, "MAX_SEGMENT_ROWS", 6)  # so that the run merges segments
    e0 = [stamped(0, step, 3, step, interventions=(1,)) for step in range(3)]
    e1 = [stamped(1, step, 3, 3 + step) for step in range(3)]
    e2 = [stamped(2, step, 2, 6 + step) for step in range(2)]
    root = tmp_path / "disk"
    root.mkdir()
    sent, run_dir, acked = e0 + e1 + e2, root / "run", {}
    recorder = (disk_at_each_step(monkeypatch, run_dir, acked) if failure == "killed"
                else power_cut_at_each_step(monkeypatch, root, acked))
    with recorder as crashes:
        server = new_server(run_dir)
        server.start()  # makes the stores; the first checkpoint
        acked.update(server.accept(SOURCE, e0))  # appended to the online and demo stores
        acked.update(server.accept(SOURCE, e1[:2]))
        server.checkpoint()  # with an episode open
        acked.update(server.accept(SOURCE, e1[2:]))
        server.checkpoint()
        acked.update(server.accept(SOURCE, e2))  # appended; e0 and e1's small segments merged
        server.checkpoint()
    online_store = ReplayStore(run_dir / "checkpoint.replay" / "online.zarr")
    assert [(s.start, s.end) for s in online_store.segments] == [(0, 8), (8, 11)]  # e0 and e1 merged
    assert len(crashes) > 20
    assert crashes[-1][1] == acked  # the last one: after everything was acknowledged
    everything = Counter((t.episode, t.step) for t in sent)
    for crash, (crashed_dir, acks) in enumerate(crashes, 1):
        ack = acks.get(SOURCE, -1)
        if ack < 0 and not crashed_dir.exists():
            continue  # cut before the run folder was made: nothing acknowledged, nothing to restart from
        restarted = new_server(crashed_dir)
        restarted.start()
        in_replay = contents(restarted.learner.online)
        ended = {t.episode for t in sent if t.terminated and t.seq <= ack}  # the others are staged, not inserted
        acknowledged = Counter((t.episode, t.step) for t in sent if t.seq <= ack and t.episode in ended)
        assert not acknowledged - in_replay, f"{failure} {crash}: lost {acknowledged - in_replay}"
        assert max(in_replay.values(), default=1) == 1 and not in_replay - everything, f"{failure} {crash}: doubled"
        # the actor sends again what was not acknowledged: everything is in replay once, also after a checkpoint
        restarted.accept(SOURCE, [t for t in sent if t.seq > ack])
        restarted.checkpoint()
        assert contents(restarted.learner.online) == everything, f"{failure} {crash}"
        assert contents(restarted.learner.demo) == Counter({(0, 1): 1}), f"{failure} {crash}"
        assert_same_buffer(checkpoint_replay(crashed_dir / CHECKPOINT_DIR), restarted.learner.online)
