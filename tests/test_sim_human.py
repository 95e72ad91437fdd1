"""The simulated human takes over when the policy is stuck or pushes out of the workspace, within its budget."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.actor.session import Actor
from robot_rl.sim.loop import make_env
from robot_rl.sim.human import SimulatedHuman, SimulatedHumanConfig


class ConstantPolicy:
    def __init__(self, action):
        self.action = np.asarray(action, np.float32)

    def reset(self):
        pass

    def act(self, obs):
        return self.action


def interventions_over_episode(env, human, policy, seed=0):
    obs, _ = env.reset(seed=seed)
    human.reset()
    flags = []
    for _ in range(50):
        action = human.act(obs, policy.act(obs))
        flags.append(action is not None)
        obs, _, terminated, truncated, _ = env.step(policy.act(obs) if action is None else action)
        if terminated or truncated:
            break
    return np.array(flags)


@pytest.fixture(scope="module")
def env():
    env = make_env("PickCube-v0")
    yield env
    env.close()


def test_stuck_policy_triggers_bounded_takeovers(env):
    config = SimulatedHumanConfig(takeover_steps=4, episode_budget=10, stuck_window=5)
    flags = interventions_over_episode(env, SimulatedHuman(env, config), ConstantPolicy([0, 0, 0, -1]))
    assert not flags[:4].any()  # needs a full window of evidence first
    assert flags[4:8].all()  # then the expert keeps control for takeover_steps
    assert flags.sum() == 10  # and never exceeds the episode budget


def test_pushing_out_of_the_workspace_triggers_a_takeover_that_brings_the_arm_back(env):
    config = SimulatedHumanConfig(takeover_steps=3, stuck_window=50, boundary_steps=2)
    human, policy, base = SimulatedHuman(env, config), ConstantPolicy([1, 0, 0, -1]), env.unwrapped
    obs, _ = env.reset(seed=0)
    human.reset()
    flags, tcp, cube = [], [], []  # per step: the human acted; TCP and cube positions before the step
    for _ in range(20):
        tcp.append(base.tcp_pose()[0].copy())
        cube.append(base.cube_pose()[0].copy())
        action = human.act(obs, policy.act(obs))
        flags.append(action is not None)
        obs = env.step(policy.act(obs) if action is None else action)[0]
    flags = np.array(flags)
    first = int(np.argmax(flags))
    assert flags.any() and 2 <= first <= 12 and flags[first:first + 3].all()
    assert tcp[first][0] > base.workspace_high[0] - 0.005  # the policy had pinned the arm to the +x face
    start, end = tcp[first], tcp[first + 3]  # before the takeover and after its three steps
    assert end[0] < start[0] - 0.04  # the human's actions moved the arm back into the workspace...
    distance = [np.linalg.norm((p - cube[first])[:2]) for p in (start, end)]
    assert distance[1] < distance[0] - 0.05, distance  # ...towards the expert's target (above the cube)


def test_total_budget_and_no_takeover_of_a_moving_policy(env):
    human = SimulatedHuman(env, SimulatedHumanConfig(total_budget=6, episode_budget=50))
    for seed in range(3):
        interventions_over_episode(env, human, ConstantPolicy([0, 0, 0, -1]), seed)
    assert human.total_steps == 6
    circling = SimulatedHuman(env, SimulatedHumanConfig())
    obs, _ = env.reset(seed=0)
    for t in range(30):
        action = np.array([np.cos(t / 3), np.sin(t / 3), 0, -1], np.float32)
        assert circling.act(obs, action) is None
        obs = env.step(action)[0]


def test_a_watching_human_takes_over_a_policy_heading_away_and_leaves_the_expert_alone(env):
    config = SimulatedHumanConfig(takeover_steps=3, stuck_window=50, disagreement=0.6, disagreement_steps=2)
    flags = interventions_over_episode(env, SimulatedHuman(env, config), ConstantPolicy([-1, -1, 1, -1]))
    assert flags[1:4].all() and flags.sum() == config.episode_budget  # heads up and away from the cube at once
    human = SimulatedHuman(env, config)
    expert = SimulatedHuman(env, SimulatedHumanConfig()).expert
    obs, _ = env.reset(seed=0)
    human.reset()
    for _ in range(30):
        action = expert.act(obs)
        assert human.act(obs, action) is None  # the expert's own motion never disagrees with itself
        obs = env.step(action)[0]


def test_actor_with_simulated_human_succeeds_and_flags_its_steps(env):
    from robot_rl.agents.sac import SACAgent
    from robot_rl.sim.evaluate import evaluate

    agent = SACAgent.create(0, env.observation_space, 4)
    config = SimulatedHumanConfig(takeover_steps=50, episode_budget=50, stuck_window=2, stuck_distance=0.1)
    human = SimulatedHuman(env, config)
    actor = Actor(agent, deterministic=True, human=human)
    (result,) = evaluate(env, actor, 1, seed=1)  # the actor runs through an ActorSession and the safety layer
    assert result.success  # the untrained policy is "stuck" at once; the expert takes over and finishes the task
    assert human.episode_steps == result.steps - 1


def test_a_human_watching_for_hazards_stops_a_press_beside_the_hole_before_the_peg_turns():
    from robot_rl.sim.human import TRIGGER_HAZARD

    env = make_env("PegInsert-v0")
    base = env.unwrapped

    def press_beside_the_hole(watch: bool):
        """Bring the tip 6 mm above a point 1.5 mm off the hole along x (across the pads' faces), then press at 5 mm
        a step: the press that turns the peg in the hand (tests/test_sim_env.py)."""
        config = SimulatedHumanConfig(stuck_window=50, watch_hazards=watch)
        human = SimulatedHuman(env, config)
        obs, _ = env.reset(seed=1)
        human.reset()
        goal = base.hole_top() + [-0.0015, 0.0, 0.006]
        flags, tilts = [], []
        for step in range(16):
            if step < 10:
                action = np.r_[np.clip((goal - base.peg_tip()) / base.max_translation, -1, 1), 1.0]
            else:
                action = np.r_[0.0, 0.0, -0.005 / base.max_translation, 1.0]
            taken = human.act(obs, action.astype(np.float32))
            flags.append(taken is not None)
            obs = env.step(action if taken is None else taken)[0]
            tilts.append(base.peg_tilt_deg())
        return np.array(flags), np.array(tilts), human

    flags, tilts, _ = press_beside_the_hole(watch=False)
    assert not flags.any() and tilts.max() > 10.0  # nobody stopped it: the peg turned
    flags, tilts, human = press_beside_the_hole(watch=True)
    assert not flags[:10].any()  # the approach above the hole harms nothing
    first = int(np.argmax(flags))
    assert flags.any() and first in (10, 11) and human.rule.last_trigger == TRIGGER_HAZARD
    assert flags[first:first + human.config.takeover_steps].all()
    assert tilts.max() < 3.0, tilts  # the expert's hands lifted, aligned and came down: the peg never turned
    env.close()
