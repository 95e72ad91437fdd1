"""Chunks executed in time with a fake clock (stale actions dropped, replacement, temporal ensembling, holds), the
observation history, the receding-horizon runner, and the policy interface's checks."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.policies.base import (ActionChunk, ChunkRunner, ObservationHistory, PolicyBase, PolicyError,
                                    stack_history)
from robot_rl.policies.chunking import ChunkSchedule

DT = 0.1


def chunk(values, dim: int = 2, **info) -> ActionChunk:
    """A chunk whose action i is `values[i]` in every dimension."""
    actions = np.repeat(np.asarray(values, np.float32)[:, None], dim, axis=1)
    return ActionChunk(actions, actions * 10, {k: np.asarray(v) for k, v in info.items()})


def test_action_i_is_due_at_the_observation_stamp_plus_i_periods():
    schedule = ChunkSchedule(DT)
    assert schedule.add(chunk([0, 1, 2, 3]), observation_stamp=5.0, now=5.0) == 4
    executed = [schedule.action_at(5.0 + k * DT + 0.01) for k in range(4)]  # ticks a little late: same slots
    assert [e.index for e in executed] == [0, 1, 2, 3]
    assert [round(e.due, 6) for e in executed] == [5.0, 5.1, 5.2, 5.3]
    np.testing.assert_array_equal(executed[2].action, [2, 2])
    np.testing.assert_array_equal(executed[2].learner_action, [20, 20])
    assert schedule.action_at(5.4) is None  # nothing due: the actor holds
    assert schedule.counters["executed"] == 4 and schedule.counters["empty"] == 1


def test_actions_already_due_when_the_chunk_arrives_are_dropped():
    schedule = ChunkSchedule(DT)
    # computed from the observation of t=1.0, ready 230 ms later: the ticks of 1.0 and 1.1 have passed
    assert schedule.add(chunk([0, 1, 2, 3, 4]), observation_stamp=1.0, now=1.23) == 3
    assert schedule.counters["stale"] == 2
    first = schedule.action_at(1.23)
    assert first.index == 2 and first.observation_stamp == 1.0  # the action due at 1.2, not the stale one of 1.0
    assert [schedule.action_at(t).index for t in (1.3, 1.4)] == [3, 4]


def test_a_chunk_entirely_in_the_past_schedules_nothing_and_ticks_hold():
    schedule = ChunkSchedule(DT)
    assert schedule.add(chunk([0, 1]), observation_stamp=0.0, now=0.5) == 0
    assert schedule.counters["stale"] == 2
    assert schedule.action_at(0.5) is None and schedule.pending(0.5) == 0


def test_a_newer_chunk_replaces_the_older_plan_from_its_first_slot():
    schedule = ChunkSchedule(DT)
    schedule.add(chunk([0, 1, 2, 3, 4, 5, 6, 7]), observation_stamp=0.0, now=0.0)
    assert [schedule.action_at(t).chunk for t in (0.0, 0.1)] == [0, 0]
    schedule.add(chunk([10, 11, 12]), observation_stamp=0.2, now=0.2)  # replanned at 0.2
    taken = [schedule.action_at(t) for t in (0.2, 0.3, 0.4)]
    assert [(e.chunk, e.index) for e in taken] == [(1, 0), (1, 1), (1, 2)]
    assert schedule.action_at(0.5) is None  # the old plan beyond the new one's end was withdrawn too
    assert schedule.counters["replaced"] == 6


def test_temporal_ensembling_averages_overlapping_chunks_with_exponential_weights():
    decay = 0.5
    schedule = ChunkSchedule(DT, ensemble_decay=decay)
    schedule.add(chunk([0.0, 1.0, 2.0]), observation_stamp=0.0, now=0.0)
    schedule.add(chunk([5.0, 6.0]), observation_stamp=0.1, now=0.1)  # slot 1: 1.0 (older) and 5.0 (newer)
    assert schedule.action_at(0.0).action[0] == 0.0
    mixed = schedule.action_at(0.1)
    w = np.exp(-decay * np.arange(2))
    assert mixed.action[0] == pytest.approx((w[0] * 1.0 + w[1] * 5.0) / w.sum())
    assert mixed.chunk == 1 and mixed.learner_action[0] == 50.0  # learner action and source: the newest chunk
    assert schedule.action_at(0.2).action[0] == pytest.approx((w[0] * 2.0 + w[1] * 6.0) / w.sum())


def test_scheduled_actions_whose_tick_never_came_are_counted_expired():
    schedule = ChunkSchedule(DT)
    schedule.add(chunk([0, 1, 2, 3]), observation_stamp=0.0, now=0.0)
    assert schedule.action_at(0.0).index == 0
    assert schedule.action_at(0.3).index == 3  # the control loop missed the ticks of 0.1 and 0.2
    assert schedule.counters["expired"] == 2
    assert schedule.horizon(0.4) == 0.0


def test_horizon_says_how_long_the_plan_lasts():
    schedule = ChunkSchedule(DT)
    schedule.add(chunk([0, 1, 2, 3]), observation_stamp=0.0, now=0.0)
    assert schedule.horizon(0.0) == pytest.approx(0.4)
    schedule.action_at(0.0)
    assert schedule.horizon(0.1) == pytest.approx(0.3) and schedule.pending(0.1) == 3
    schedule.clear()
    assert schedule.pending(0.1) == 0


def test_chunk_info_travels_per_step_and_lengths_are_checked():
    schedule = ChunkSchedule(DT)
    schedule.add(chunk([0, 1], base_action=[[7.0], [8.0]]), observation_stamp=0.0, now=0.0)
    schedule.action_at(0.0)
    np.testing.assert_array_equal(schedule.action_at(0.1).info["base_action"], [8.0])
    with pytest.raises(PolicyError, match="must have 2 steps"):
        chunk([0, 1], base_action=[[7.0]])
    with pytest.raises(PolicyError, match="non-finite"):
        ActionChunk(np.array([[np.nan, 0.0]]), np.zeros((1, 2)))
    with pytest.raises(PolicyError, match="control period"):
        ChunkSchedule(0.0)


def test_observation_history_pads_the_episode_start_with_the_first_observation():
    history = ObservationHistory(3)
    history.append({"x": np.array([1.0])})
    assert [o["x"][0] for o in history.observations()] == [1.0, 1.0, 1.0]
    history.append({"x": np.array([2.0])})
    history.append({"x": np.array([3.0])})
    history.append({"x": np.array([4.0])})
    assert [o["x"][0] for o in history.observations()] == [2.0, 3.0, 4.0]
    history.reset()
    assert history.observations() == []
    stacked = stack_history([{"x": np.array([5.0])}], ["x"], 2)
    np.testing.assert_array_equal(stacked["x"], [[5.0], [5.0]])
    with pytest.raises(PolicyError, match="observation has no 'y'"):
        stack_history([{"x": np.array([5.0])}], ["y"], 1)


class CountingPolicy(PolicyBase):
    """A fake chunked policy: each chunk is [n, n+1, ...] for the n-th call; it records the histories it saw."""

    kind = "fake"
    observation_keys = ("x",)
    action_dim = 1
    obs_horizon = 2
    chunk_length = 4
    device = "cpu"

    def __init__(self):
        self.calls, self.histories, self.resets = 0, [], 0

    def reset(self):
        self.resets += 1

    def act_chunk(self, history, *, deterministic=True):
        self.histories.append([float(o["x"][0]) for o in history])
        start = 10.0 * self.calls
        self.calls += 1
        actions = (start + np.arange(self.chunk_length, dtype=np.float32))[:, None]
        return ActionChunk(actions, actions)

    def learner_action_of(self, executed, info):
        return executed


def test_chunk_runner_executes_receding_horizon_chunks_with_the_observation_history():
    policy = CountingPolicy()
    runner = ChunkRunner(policy, execute=3)
    runner.reset()
    actions = [float(runner.act({"x": np.array([float(t)])})[0]) for t in range(7)]
    assert actions == [0, 1, 2, 10, 11, 12, 20]  # 3 of each 4-step chunk, then a new chunk
    assert policy.histories == [[0.0, 0.0], [2.0, 3.0], [5.0, 6.0]]  # the first observation padded
    runner.reset()
    assert policy.resets == 2 and float(runner.act({"x": np.array([9.0])})[0]) == 30.0
    with pytest.raises(PolicyError, match="execute=5"):
        ChunkRunner(policy, execute=5)


def _wait_for(predicate, what: str, timeout_s: float = 30.0) -> None:
    """Liveness only: a worker thread's step happens (a deadline far beyond it, not a timing figure)."""
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.001)


class SteppedPolicy(CountingPolicy):
    """A chunked policy whose n-th act_chunk returns once the test releases call n (a denoiser whose duration the
    test decides, on the planner's fake clock); a call the test never released returns after 30 s, noted in
    `timed_out` (a tick that waited for the worker would only go on then)."""

    chunk_length = 8

    def __init__(self):
        super().__init__()
        import threading

        self.entered: list[float] = []  # each call's request: the newest observation's x (its tick)
        self.releases = [threading.Event() for _ in range(100)]
        self.timed_out = 0

    def act_chunk(self, history, *, deterministic=True):
        call = len(self.entered)
        self.entered.append(float(history[-1]["x"][0]))
        if not self.releases[call].wait(30.0):
            self.timed_out += 1
        return super().act_chunk(history, deterministic=deterministic)


class GatedPolicy(CountingPolicy):
    """A chunked policy whose act_chunk does not return until the test opens its gate (or 30 s pass: then
    `timed_out`, and a tick that waited for the worker would only go on then)."""

    chunk_length = 8

    def __init__(self):
        super().__init__()
        import threading

        self.started, self.gate, self.timed_out = threading.Event(), threading.Event(), False

    def act_chunk(self, history, *, deterministic=True):
        self.started.set()
        if not self.gate.wait(30.0):
            self.timed_out = True
        return super().act_chunk(history, deterministic=deterministic)


def test_the_planner_computes_chunks_in_a_worker_and_never_blocks_the_tick():
    """On a fake clock each chunk takes 3.5 control periods (the test releases the worker then): the ticks hold
    until the first chunk came, then execute the action due at each, planned ahead; the actions whose time passed
    while their chunk was computed are dropped, never executed."""
    from robot_rl.policies.chunking import ChunkPlanner

    dt, ticks = 0.25, 40  # binary fractions: the fake times are exact
    clock = [0.0]
    policy = SteppedPolicy()
    planner = ChunkPlanner(policy, dt, clock=lambda: clock[0])
    actions, holds = {}, []
    try:
        for tick in range(ticks):
            if tick and tick % 4 == 0:  # the chunk asked for 4 ticks ago is ready 3.5 periods after its request
                clock[0] = (tick - 0.5) * dt
                policy.releases[tick // 4 - 1].set()
                _wait_for(lambda: planner.counters["added"] == tick // 4, f"chunk {tick // 4 - 1} added")
            now = clock[0] = tick * dt
            planner.observe({"x": np.array([float(tick)])}, now)
            action = planner.action_at(now)  # the worker is inside act_chunk: this must not wait for it
            if action is None:
                holds.append(tick)
            else:
                assert planner.schedule.slot(action.due) == planner.schedule.slot(now), (tick, action)  # not stale
                actions[tick] = (float(action.action[0]), action.chunk, action.index)
            if tick % 4 == 0:  # a new chunk was asked for from this tick's observation
                _wait_for(lambda: len(policy.entered) == tick // 4 + 1, f"the chunk asked for at tick {tick}")
        stale, compute_s = planner.counters["stale"], max(planner.compute_s)  # before the last chunk is let go
    finally:
        for release in policy.releases:
            release.set()
        planner.close()
    assert policy.timed_out == 0  # no tick waited for the worker
    assert policy.entered == [float(t) for t in range(0, ticks, 4)]  # each chunk from its tick's observation
    assert holds == [0, 1, 2, 3]  # held until the first chunk came
    # then every tick executed the action due at it: chunk k (asked for at tick 4k) from its index 4 on
    assert actions == {t: (10.0 * (t // 4 - 1) + 4 + t % 4, t // 4 - 1, 4 + t % 4) for t in range(4, ticks)}
    assert stale == 4 * (ticks // 4 - 1)  # each chunk's first 4 actions came too late: dropped
    assert compute_s == 3.5 * dt


def test_ticks_go_on_while_the_policy_is_inside_act_chunk():
    import time

    from robot_rl.policies.chunking import ChunkPlanner

    policy = GatedPolicy()
    planner = ChunkPlanner(policy, 0.02)
    try:
        planner.observe({"x": np.array([0.0])}, time.monotonic())
        assert policy.started.wait(30.0)
        for tick in range(1, 11):  # ten ticks while the worker is stuck in the policy
            now = time.monotonic()
            planner.observe({"x": np.array([float(tick)])}, now)
            assert planner.action_at(now) is None  # nothing due yet: hold, do not wait
        # had a tick waited for the chunk it would only have gone on once the gate timed out
        assert not policy.timed_out and not policy.gate.is_set()
        policy.gate.set()
        _wait_for(lambda: planner.counters["added"] >= 1, "chunk added")  # the chunk the worker computed arrived
        assert not policy.timed_out
    finally:
        policy.gate.set()
        planner.close()


def test_an_interrupt_discards_the_chunk_being_computed():
    import time

    from robot_rl.policies.chunking import ChunkPlanner

    policy = GatedPolicy()
    planner = ChunkPlanner(policy, 0.02)
    try:
        planner.observe({"x": np.array([0.0])}, time.monotonic())  # starts a chunk
        assert policy.started.wait(30.0)  # the worker computes it
        planner.interrupt({"x": np.array([1.0])})  # a human takes over while it is computed
        policy.gate.set()
        _wait_for(lambda: planner.counters["discarded"] > 0, "chunk discarded")
        assert planner.counters["discarded"] == 8 and planner.counters["added"] == 0
        assert planner.schedule.pending(time.monotonic()) == 0
        assert [float(o["x"][0]) for o in planner.history.observations()] == [0.0, 1.0]
    finally:
        policy.gate.set()
        planner.close()


def test_a_policy_error_in_the_worker_reaches_the_control_thread():
    import time

    from robot_rl.policies.chunking import ChunkPlanner

    class Broken(CountingPolicy):
        def act_chunk(self, history, *, deterministic=True):
            raise PolicyError("observation has no 'x'")

    planner = ChunkPlanner(Broken(), 0.02)
    try:
        planner.observe({}, time.monotonic())
        _wait_for(lambda: planner.error is not None, "policy error")  # the worker ran the policy
        with pytest.raises(PolicyError, match="no 'x'"):
            planner.action_at(time.monotonic())
    finally:
        planner.close()


def test_the_actor_runs_chunks_receding_horizon_and_a_human_drops_the_plan():
    from robot_rl.actor.session import Actor

    policy = CountingPolicy()
    actor = Actor(policy, deterministic=True, execute=2)
    actor.reset()
    taken = [float(actor.policy_action({"x": np.array([float(t)])})[0]) for t in range(3)]
    assert taken == [0.0, 1.0, 10.0]
    actor.human_acted({"x": np.array([3.0])})  # the rest of chunk 1 is dropped
    assert float(actor.policy_action({"x": np.array([4.0])})[0]) == 20.0
    assert policy.histories[-1] == [3.0, 4.0]


def test_a_session_holds_while_a_real_time_policy_has_no_action_due():
    from robot_rl.actor.session import Actor, ActorSession
    from robot_rl.policies.chunking import ChunkPlanner
    from robot_rl.actor.safety import Safety, SafetyConfig

    class Chunked(CountingPolicy):
        action_dim = 4

        def act_chunk(self, history, *, deterministic=True):
            actions = np.tile(np.array([0.1, 0.0, 0.0, 1.0], np.float32), (self.chunk_length, 1))
            return ActionChunk(actions, actions)

    clock = {"t": 100.0}
    planner = ChunkPlanner(Chunked(), 0.1, clock=lambda: clock["t"])
    session = ActorSession(Safety(SafetyConfig()), "a", actor=Actor(Chunked(), planner=planner))
    try:
        session.start_episode([0.5, 0.0, 0.2], [0.0, 1.0, 0.0, 0.0])
        obs = {"x": np.array([0.0]), "state": np.zeros(3, np.float32)}
        first = session.step(obs, now=100.0)
        assert first.policy_late and session.counters["policy_late"] == 1  # the first chunk is not there yet
        import time

        deadline = time.monotonic() + 2.0
        while planner.schedule.pending(100.0) == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        second = session.step(obs, now=100.0)
        assert not second.policy_late and second.command is not None
    finally:
        planner.close()
