"""The simulated human takes over when the policy is stuck or pushes out of the workspace, within its budget; in-process
it watches and acts as the scripted teleop node does over ROS (the same supervisor fed the same robot history)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.actor.runner import run_episodes
from robot_rl.actor.session import Actor
from robot_rl.actor.teleop_mapping import action_to_twist, twist_to_action
from robot_rl.policies.gaussian import GaussianPolicy
from robot_rl.sim.expert import make_expert
from robot_rl.sim.human import ScriptedSupervisor, SimulatedHuman, SimulatedHumanConfig
from robot_rl.sim.loop import as_actor, make_env
from robot_rl.sim.robot_adapter import SimLink, SimRobotAdapter, sim_runner


class ScriptedPolicy:
    """An `act(obs)` policy whose action at step t of an episode is `action_at(t)`."""

    def __init__(self, action_at):
        self.action_at = action_at
        self.t = 0

    def reset(self):
        self.t = 0

    def act(self, obs):
        self.t += 1
        return np.asarray(self.action_at(self.t - 1), np.float32)


def constant(action):
    return ScriptedPolicy(lambda t: action)


def episodes_with_human(env, human, policy, seeds=(0,), *, steps=None, on_command=None):
    """Episodes through the in-process episode loop with `human` on the sim link: per episode, whether each command was
    the human's (the session's intervention flag). `steps` ends the run after that many commands."""
    flags: list[list[bool]] = []

    def commanded(step):
        flags[-1].append(step.intervention)
        if on_command is not None:
            on_command(step)

    link = SimLink(SimRobotAdapter(env), list(seeds), human=human)
    runner = sim_runner(link, as_actor(policy, env.action_space.shape[0]), on_command=commanded)
    for _ in seeds:
        flags.append([])
        run_episodes(runner, 1, should_stop=None if steps is None else lambda: len(flags[-1]) >= steps)
    return [np.array(episode) for episode in flags]


@pytest.fixture(scope="module")
def env():
    env = make_env("PickCube-v0")
    yield env
    env.close()


def test_stuck_policy_triggers_bounded_takeovers(env):
    config = SimulatedHumanConfig(takeover_steps=4, episode_budget=10, stuck_window=5)
    (flags,) = episodes_with_human(env, SimulatedHuman(env, config), constant([0, 0, 0, -1]))
    # The human sees the TCP after each command (frames 1, 2, ...): a full window of evidence at frame 5, and their
    # command answers that frame.
    assert not flags[:5].any()
    assert flags[5:9].all()  # then the expert keeps control for takeover_steps
    assert flags.sum() == 10  # and never exceeds the episode budget


def test_pushing_out_of_the_workspace_triggers_a_takeover_that_brings_the_arm_back(env):
    config = SimulatedHumanConfig(takeover_steps=3, stuck_window=50, boundary_steps=2)
    base = env.unwrapped
    tcp, cube = [], []  # per command: TCP and cube positions before it

    def look(*_):
        tcp.append(base.tcp_pose()[0].copy())
        cube.append(base.cube_pose()[0].copy())

    link = SimLink(SimRobotAdapter(env), [0], human=SimulatedHuman(env, config), on_reset=look)
    flags = []
    runner = sim_runner(link, as_actor(constant([1, 0, 0, -1]), 4),
                        on_command=lambda step: (flags.append(step.intervention), look()))
    run_episodes(runner, 1, should_stop=lambda: len(flags) >= 20)
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
    flags = episodes_with_human(env, human, constant([0, 0, 0, -1]), seeds=(0, 1, 2))
    assert human.total_steps == 6 == sum(episode.sum() for episode in flags)
    assert not flags[1].any() and not flags[2].any()  # spent in the first episode
    circling = ScriptedPolicy(lambda t: [np.cos(t / 3), np.sin(t / 3), 0, -1])
    (flags,) = episodes_with_human(env, SimulatedHuman(env, SimulatedHumanConfig()), circling, steps=30)
    assert not flags.any()


def test_a_watching_human_takes_over_a_policy_heading_away_and_leaves_the_expert_alone(env):
    config = SimulatedHumanConfig(takeover_steps=3, stuck_window=50, disagreement=0.6, disagreement_steps=2)
    (flags,) = episodes_with_human(env, SimulatedHuman(env, config), constant([-1, -1, 1, -1]))
    # Frame 1 has no push yet (one commanded target), frame 2 the first: heading up and away from the cube at once.
    assert flags[2:5].all() and not flags[:2].any() and flags.sum() == config.episode_budget
    # The push is read from the last two commanded targets, so it is the expert's previous action: where the expert
    # turns sharply the two differ, and a watcher who needs three disagreeing steps in a row (the default) leaves it
    # alone.
    watcher = SimulatedHuman(env, SimulatedHumanConfig(stuck_window=50, disagreement=0.6))
    (flags,) = episodes_with_human(env, watcher, make_expert(env))
    assert not flags.any()


def test_actor_with_simulated_human_succeeds_and_flags_its_steps(env):
    from robot_rl.agents.sac import SACAgent
    from robot_rl.sim.evaluate import evaluate

    agent = SACAgent.create(0, env.observation_space, 4)
    config = SimulatedHumanConfig(takeover_steps=50, episode_budget=50, stuck_window=2, stuck_distance=0.1)
    human = SimulatedHuman(env, config)
    actor = Actor(GaussianPolicy(agent), deterministic=True)
    (result,) = evaluate(env, actor, 1, seed=1, human=human)  # through an ActorSession and the safety layer
    assert result.success  # the untrained policy is "stuck" at frame 2; the expert takes over and finishes the task
    assert human.episode_steps == result.steps - 2  # every step from command 2 on (none answers the last frame)


def test_a_human_watching_for_hazards_stops_a_press_beside_the_hole_before_the_peg_turns():
    from robot_rl.sim.human import TRIGGER_HAZARD

    env = make_env("PegInsert-v0")
    base = env.unwrapped

    def press(t):
        """Bring the tip 6 mm above a point 1.5 mm off the hole along x (across the pads' faces; from 20 mm above it
        first), then press at 3 mm a step: a press that turns the peg in the hand (tests/test_sim_env.py)."""
        if t < 10:
            goal = base.hole_top() + [-0.0015, 0.0, 0.02 if t < 6 else 0.006]
            return np.r_[np.clip((goal - base.peg_tip()) / base.max_translation, -1, 1), 1.0]
        return np.r_[0.0, 0.0, -0.003 / base.max_translation, 1.0]

    def press_beside_the_hole(watch: bool):
        human = SimulatedHuman(env, SimulatedHumanConfig(stuck_window=50, watch_hazards=watch))
        tilts = []
        (flags,) = episodes_with_human(env, human, ScriptedPolicy(press), seeds=(1,), steps=18,
                                       on_command=lambda step: tilts.append(base.peg_tilt_deg()))
        return flags, np.array(tilts), human

    flags, tilts, _ = press_beside_the_hole(watch=False)
    assert not flags.any() and tilts.max() > 10.0  # nobody stopped it: the peg turned
    flags, tilts, human = press_beside_the_hole(watch=True)
    assert not flags[:10].any()  # the approach above the hole harms nothing
    first = int(np.argmax(flags))
    # The sim names the hazard at a frame (the hand's target is there already): the human acts a step or two after
    # the press began, as over ROS.
    assert flags.any() and first in (11, 12) and human.rule.last_trigger == TRIGGER_HAZARD
    assert flags[first:first + human.config.takeover_steps].all()
    assert tilts.max() < 3.0, tilts  # the expert's hands lifted, aligned and came down: the peg never turned
    env.close()


@pytest.mark.parametrize("disagreement, triggers", [(None, {"stuck", "pushing_out"}),
                                                     (0.6, {"disagrees_with_expert"})])
def test_the_same_supervisor_decides_alike_in_process_and_fed_as_the_ros_node_is(env, disagreement, triggers):
    """A recorded in-process episode (the commands' targets, and at each frame the TCP and the expert's action, read
    from the sim, not from the human) fed to a ScriptedSupervisor the way the scripted teleop node feeds it
    (command/target_pose, sim/expert_action, then tcp_pose) engages at exactly the frames whose commands were the
    human's in-process, and the executed human action is the expert's through the teleop twist."""
    config = SimulatedHumanConfig(takeover_steps=3, episode_budget=12, stuck_window=4, boundary_steps=2,
                                  disagreement=disagreement)
    base = env.unwrapped
    expert = make_expert(env)  # the sim node's expert (no noise): what it publishes on sim/expert_action
    targets, tcps, experts, actions, flags = [], [], [], [], []

    def commanded(step):  # after the command's env step: the frame it produced
        targets.append(step.command.target_position.copy())
        flags.append(step.intervention)
        tcps.append(base.tcp_pose()[0].copy())
        experts.append(expert.act())

    def policy_action(t):  # heads for the +x face, waits there, then wanders off
        return [1, 0, 0, -1] if t < 12 else [0, 0, 0, -1] if t < 24 else [-0.5, 1, 0.3, -1]

    link = SimLink(SimRobotAdapter(env), [2], human=SimulatedHuman(env, config))
    recorded = []
    runner = sim_runner(link, as_actor(ScriptedPolicy(policy_action), 4), on_command=commanded,
                        on_episode_end=lambda end: recorded.extend(t for t, _ in end.steps))
    run_episodes(runner, 1)
    flags = np.array(flags)
    assert flags.any() and not flags.all()

    node_core = ScriptedSupervisor(config, base.workspace_low, base.workspace_high, control_dt=base.control_dt,
                                   max_translation=base.max_translation, max_rotation=base.max_rotation)
    engaged = []
    for target, tcp, expert_action in zip(targets[:-1], tcps[:-1], experts[:-1]):  # the last frame ends the episode
        node_core.on_target(target)
        node_core.on_expert_action(expert_action)
        engaged.append(node_core.step(tcp))
    assert engaged == flags[1:].tolist()  # frame t's decision is command t's
    assert set(node_core.rule.episode_takeovers) == triggers and sum(node_core.rule.episode_takeovers.values()) == 4
    for t in np.flatnonzero(flags):  # the human's commands: the expert's action at that frame, through the twist
        twist = action_to_twist(experts[t - 1], control_dt=base.control_dt, max_translation=base.max_translation,
                                max_rotation=base.max_rotation)
        expected = twist_to_action(*twist, control_dt=base.control_dt, max_translation=base.max_translation,
                                   max_rotation=base.max_rotation, action_dim=4)
        np.testing.assert_allclose(recorded[t].action, expected, atol=1e-6)
        assert recorded[t].intervention
