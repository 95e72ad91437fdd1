"""Replay buffer: frame de-duplication, next_obs across episodes and ring wrap, mixing, interventions, zarr."""

import numpy as np
import pytest

from robot_rl.data.replay import MixedSampler, ReplayBuffer, insert_with_interventions
from robot_rl.core.types import ObservationSpec

SPEC = ObservationSpec.from_shapes({"state": ((2,), np.float32), "images/front": ((4, 4, 3), np.uint8)})


def make_obs(episode: int, t: int) -> dict:
    """Observation that encodes (episode, t) so next_obs can be checked exactly."""
    return {
        "state": np.array([episode, t], np.float32),
        "images/front": np.full((4, 4, 3), (episode * 31 + t) % 256, np.uint8),
    }


def fill(buffer: ReplayBuffer, episode_lengths, truncate_last=False, start_episode=0):
    """Insert episodes; actions encode (episode, t); the last step terminates (or truncates)."""
    steps = 0
    for e, length in enumerate(episode_lengths, start=start_episode):
        for t in range(length):
            done = t == length - 1
            buffer.insert(
                make_obs(e, t), np.array([e, t, 0, 0], np.float32), float(t), done and not truncate_last,
                done and truncate_last, make_obs(e, t + 1),
            )
            steps += 1
    return steps


def check_next_obs(batch):
    state, next_state = batch.observations["state"], batch.next_observations["state"]
    np.testing.assert_array_equal(batch.actions[..., :2], state)  # action was taken from this obs
    np.testing.assert_array_equal(next_state[..., 0], state[..., 0])  # same episode
    np.testing.assert_array_equal(next_state[..., 1], state[..., 1] + 1)
    e, t = state[..., 0].astype(int), state[..., 1].astype(int)
    np.testing.assert_array_equal(batch.next_observations["images/front"][..., 0, 0, 0], (e * 31 + t + 1) % 256)


def test_frames_stored_once_per_step_plus_episode_end():
    buffer = ReplayBuffer(SPEC, 4, capacity=1000)
    lengths = [5, 7, 3]
    steps = fill(buffer, lengths)
    assert len(buffer) == steps
    assert buffer.num_frames == steps + len(lengths)
    check_next_obs(buffer.sample(256, np.random.default_rng(0)))


def test_next_obs_across_episode_boundaries_and_terminal_masks():
    buffer = ReplayBuffer(SPEC, 4, capacity=1000)
    fill(buffer, [4, 6], truncate_last=False)
    fill(buffer, [3], truncate_last=True, start_episode=2)
    batch = buffer.gather(np.flatnonzero(buffer.valid))
    check_next_obs(batch)
    state = batch.observations["state"]
    last_of_terminated = ((state[:, 0] == 0) & (state[:, 1] == 3)) | ((state[:, 0] == 1) & (state[:, 1] == 5))
    np.testing.assert_array_equal(batch.masks, np.where(last_of_terminated, 0.0, 1.0))  # truncation bootstraps


def test_ring_wraparound_never_uses_overwritten_frames():
    rng = np.random.default_rng(1)
    buffer = ReplayBuffer(SPEC, 4, capacity=17)
    lengths = rng.integers(1, 9, size=40)
    fill(buffer, lengths)
    assert buffer.num_frames == 17
    assert 0 < len(buffer) < 17
    check_next_obs(buffer.gather(np.flatnonzero(buffer.valid)))
    check_next_obs(buffer.sample_stacked(3, 64, rng))
    # an episode longer than the ring
    fill(buffer, [40], start_episode=100)
    check_next_obs(buffer.gather(np.flatnonzero(buffer.valid)))
    assert len(buffer) == 16


def test_pending_episode_step_is_sampled_with_its_live_next_obs():
    buffer = ReplayBuffer(SPEC, 4, capacity=8)
    for t in range(12):  # one long running episode, never done
        buffer.insert(make_obs(0, t), np.array([0, t, 0, 0], np.float32), 0.0, False, False, make_obs(0, t + 1))
    batch = buffer.gather(np.flatnonzero(buffer.valid))
    check_next_obs(batch)
    assert batch.observations["state"][:, 1].max() == 11


def test_n_step_returns_stop_at_episode_end():
    buffer = ReplayBuffer(SPEC, 4, capacity=100)
    fill(buffer, [5])  # rewards 0,1,2,3,4; terminal at t=4
    gamma = 0.5
    batch = buffer.gather(np.flatnonzero(buffer.valid), n_step=3, discount=gamma)
    t = batch.observations["state"][:, 1].astype(int)
    expected = [sum(gamma**i * r for i, r in enumerate(range(s, min(s + 3, 5)))) for s in t]
    np.testing.assert_allclose(batch.rewards, expected)
    np.testing.assert_allclose(batch.discounts, gamma ** np.minimum(3, 5 - t))
    np.testing.assert_array_equal(batch.masks, (t + 3 < 5).astype(np.float32))
    np.testing.assert_array_equal(batch.next_observations["state"][:, 1], np.minimum(t + 3, 5))


def test_sampling_is_uniform_over_transitions():
    buffer = ReplayBuffer(SPEC, 4, capacity=100)
    fill(buffer, [10, 10])
    idx = buffer.sample_indices(20000, np.random.default_rng(0))
    counts = np.bincount(idx, minlength=100)
    assert counts[~buffer.valid[:100]].sum() == 0
    assert counts[buffer.valid[:100]].min() > 800


def test_mixer_ratio_and_fallbacks():
    rng = np.random.default_rng(0)
    demo, online = ReplayBuffer(SPEC, 4, 200), ReplayBuffer(SPEC, 4, 200)
    sampler = MixedSampler(demo, online, demo_ratio=0.25)
    with pytest.raises(ValueError, match="empty"):
        sampler.sample(8, rng)
    fill(online, [10], start_episode=1)
    assert (sampler.sample(64, rng).observations["state"][:, 0] == 1).all()  # online only
    fill(demo, [10], start_episode=0)
    batch = sampler.sample_stacked(50, 64, rng)
    assert batch.actions.shape == (50, 64, 4)
    from_demo = batch.observations["state"][..., 0] == 0
    assert abs(from_demo.mean() - 0.25) < 0.01
    online_empty = MixedSampler(demo, ReplayBuffer(SPEC, 4, 10), 0.5)
    assert (online_empty.sample(32, rng).observations["state"][:, 0] == 0).all()


def test_interventions_go_to_both_buffers():
    demo, online = ReplayBuffer(SPEC, 4, 100), ReplayBuffer(SPEC, 4, 100)
    flags = [False, True, True, False, False, True, False]
    for t, flag in enumerate(flags):
        insert_with_interventions(
            online, demo, make_obs(0, t), np.array([0, t, 0, 0], np.float32), 0.0, False, t == len(flags) - 1,
            make_obs(0, t + 1), intervention=flag,
        )
    assert len(online) == len(flags) and online.intervention[online.valid].sum() == 3
    assert len(demo) == 3 and demo.intervention[demo.valid].all()
    assert demo.num_frames == 3 + 2  # two fragments, each with its own end frame
    batch = demo.gather(np.flatnonzero(demo.valid), n_step=3, discount=0.9)
    check_next_obs(demo.gather(np.flatnonzero(demo.valid)))
    # n-step never crosses from one fragment into the next
    np.testing.assert_array_equal(batch.next_observations["state"][:, 1], [3, 3, 6])


def test_a_takeover_fails_the_policy_step_before_it_when_asked():
    flags = [False, False, True, True, False, True]
    for failure in (False, True):
        demo, online = ReplayBuffer(SPEC, 4, 100), ReplayBuffer(SPEC, 4, 100)
        for t, flag in enumerate(flags):
            insert_with_interventions(online, demo, make_obs(0, t), np.array([0, t, 0, 0], np.float32), 0.0, False,
                                      t == len(flags) - 1, make_obs(0, t + 1), flag, takeover_is_failure=failure)
        marked = np.flatnonzero(online.terminated[:len(flags)])
        # only the policy's steps a takeover followed (1 and 4); the human's steps and the others run on
        assert marked.tolist() == ([1, 4] if failure else [])
        batch = online.gather(np.arange(len(flags)), n_step=3, discount=0.5)
        if failure:  # no bootstrap past the failed step, and no n-step window crosses it
            np.testing.assert_array_equal(batch.masks, [0, 0, 0, 0, 0, 1])
            np.testing.assert_array_equal(batch.next_observations["state"][:, 1], [2, 2, 5, 5, 5, 6])
        check_next_obs(online.gather(np.arange(len(flags))))
    assert not ReplayBuffer(SPEC, 4, 10).fail_last_step()  # nothing open


def test_bad_inputs_raise():
    buffer = ReplayBuffer(SPEC, 4, 10)
    obs = make_obs(0, 0)
    with pytest.raises(ValueError, match="missing"):
        buffer.insert({"state": obs["state"]}, np.zeros(4), 0.0, False, False, obs)
    with pytest.raises(ValueError, match="images/front"):
        buffer.insert(obs, np.zeros(4), 0.0, False, False, dict(obs, **{"images/front": np.zeros((5, 4, 3), np.uint8)}))
    with pytest.raises(ValueError, match="state"):
        buffer.insert(dict(obs, state=np.array([np.nan, 0], np.float32)), np.zeros(4), 0.0, False, False, obs)
    with pytest.raises(ValueError, match="action"):
        ReplayBuffer(SPEC, 4, 10).insert(obs, np.zeros(3), 0.0, False, False, obs)
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(SPEC, 4, 10).sample(4, np.random.default_rng(0))


def test_zarr_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    buffer = ReplayBuffer(SPEC, 4, capacity=23)
    fill(buffer, rng.integers(1, 8, size=10))
    buffer.insert(make_obs(50, 0), np.array([50, 0, 0, 0], np.float32), 1.0, False, False, make_obs(50, 1))
    buffer.save(tmp_path / "replay")
    loaded = ReplayBuffer.load(tmp_path / "replay")
    assert loaded.observation_spec == buffer.observation_spec and len(loaded) == len(buffer)
    for name in ("actions", "rewards", "terminated", "truncated", "intervention", "valid"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(buffer, name))
    for key in buffer.frames:
        np.testing.assert_array_equal(loaded.frames[key], buffer.frames[key])
    # resume the running episode in both and compare
    for b in (buffer, loaded):
        b.insert(make_obs(50, 1), np.array([50, 1, 0, 0], np.float32), 1.0, True, False, make_obs(50, 2))
    np.testing.assert_array_equal(loaded.valid, buffer.valid)
    check_next_obs(loaded.gather(np.flatnonzero(loaded.valid)))


def test_a_new_episode_without_ending_the_last_one_raises_and_stores_nothing():
    buffer = ReplayBuffer(SPEC, 4, 50)
    for t in range(3):  # an episode still running: no terminated/truncated yet
        buffer.insert(make_obs(0, t), np.zeros(4), 0.0, False, False, make_obs(0, t + 1))
    assert buffer.continues_episode(make_obs(0, 3)) and not buffer.continues_episode(make_obs(1, 0))
    before = {name: getattr(buffer, name).copy() for name in ("actions", "rewards", "valid", "truncated")}
    frames = {k: v.copy() for k, v in buffer.frames.items()}
    with pytest.raises(ValueError, match=r"observation\['images/front'\] is not the previous transition's "
                                         r"next_observation: the previous episode was not ended.*end_episode\(\)"):
        buffer.insert(make_obs(1, 0), np.ones(4), 1.0, False, False, make_obs(1, 1))
    only_state_differs = dict(make_obs(0, 3), state=np.array([0, 99], np.float32))
    with pytest.raises(ValueError, match=r"observation\['state'\]"):
        buffer.insert(only_state_differs, np.ones(4), 1.0, False, False, make_obs(0, 4))
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(buffer, name), value)
    for key, value in frames.items():
        np.testing.assert_array_equal(buffer.frames[key], value)
    assert buffer.num_frames == 4

    buffer.end_episode()  # the fix the message names: the old episode bootstraps from its last frame
    assert not buffer.continues_episode(make_obs(0, 3))
    buffer.insert(make_obs(1, 0), np.array([1, 0, 0, 0], np.float32), 1.0, True, False, make_obs(1, 1))
    batch = buffer.gather(np.flatnonzero(buffer.valid))
    np.testing.assert_array_equal(batch.next_observations["state"][:, 0], batch.observations["state"][:, 0])
    assert buffer.truncated[buffer.valid].tolist() == [False, False, True, False]
    np.testing.assert_array_equal(batch.masks, [1, 1, 1, 0])


def test_the_continuity_check_compares_values_after_the_dtype_cast():
    buffer = ReplayBuffer(SPEC, 4, 10)
    first, second = make_obs(0, 0), make_obs(0, 1)
    buffer.insert(first, np.zeros(4), 0.0, False, False, second)
    as_float64 = {k: np.asarray(v, np.float64) if k == "state" else v.copy() for k, v in second.items()}
    buffer.insert(as_float64, np.zeros(4), 0.0, True, False, make_obs(0, 2))  # same values, another dtype: fine
    assert len(buffer) == 2
    with pytest.raises(ValueError, match="not the previous"):
        buffer.insert(first, np.zeros(4), 0.0, False, False, second)  # new episode after a terminal: fine ...
        buffer.insert(dict(second, state=np.array([0, 1 + 1e-6])), np.zeros(4), 0.0, False, False, second)
    assert len(buffer) == 3
