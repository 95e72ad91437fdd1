"""The actor's policy slot without ROS: learner weights, weight lag in a resumed run, a lost learner, the gate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from robot_rl.actor.session import ActorSession
from robot_rl.actor.policy_slot import PolicySettings, PolicySlot
from robot_rl.policies.base import PolicyError
from robot_rl.actor.robot_config import load_robot_config
from robot_rl.actor.safety import Safety, SafetyConfig

STATE_KEYS = ("state", "object_state")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Lines(list):
    def info(self, message):
        self.append(message)

    warning = error = info


@pytest.fixture(scope="module")
def agent():
    from ros_harness import untrained_state_agent

    return untrained_state_agent()


def make(robot_name="sim_panda", **settings):
    robot = load_robot_config(robot_name)
    session = ActorSession(Safety(SafetyConfig(action_dim=4)), "test")
    clock, lines = Clock(), Lines()
    slot = PolicySlot(session, robot, PolicySettings(observation_keys=STATE_KEYS, **settings), log=lines, clock=clock)
    return slot, clock, lines


def weights(agent, version, transitions=0, done=False):
    from robot_rl.policies.gaussian import weights_message

    return dataclasses.replace(weights_message(agent, version=version, transitions=transitions), training_done=done)


def test_an_actor_joining_a_resumed_run_waits_only_for_weights_that_saw_its_own_transitions(agent):
    slot, clock, lines = make(max_weight_lag=2, weight_wait_s=5.0)
    assert slot.start_wait(False, False)[0] == "policy weights from the learner"
    assert slot.start_wait(False, False)[1].endswith("; no weights message heard yet")
    slot.weights_heard["not newer than those in use"] += 1  # what the actor node counts of messages it did not use
    assert slot.start_wait(False, False)[1].endswith("heard but not used: 1 not newer than those in use")
    assert slot.start_wait(True, False) is None  # a human who took over acts without weights
    assert slot.use_weights(weights(agent, 1, transitions=1000), "learner") is None  # 1000 from earlier runs
    assert slot.start_wait(False, False) is None and slot.weights_version == 1
    assert slot.step_wait(2) is None  # 2 of ours not trained on: within the lag
    assert slot.step_wait(3)[0] == "fresher policy weights (max_weight_lag)"
    assert slot.use_weights(weights(agent, 2, transitions=1003), "learner") is None
    assert slot.step_wait(3) is None and slot.step_wait(5) is None and slot.step_wait(6) is not None
    clock.t += 5.0  # the learner is slow: act on after weight_wait_s, with a warning
    assert slot.step_wait(6) is None and "no fresh weights for 5.0s" in lines[-1]


def test_older_weights_are_ignored_and_final_weights_end_training(agent):
    slot, _, lines = make()
    slot.use_weights(weights(agent, 3), "learner")
    assert not slot.wants(weights(agent, 2)) and slot.wants(weights(agent, 4))
    assert slot.use_weights(weights(agent, 4, done=True), "learner") is None
    assert slot.training_done and "reached its training budget" in lines[-1]
    none, *_ = make(source="none")
    assert not none.wants(weights(agent, 9))
    assert none.start_wait(False, False)[0] == "a teleop node (teleop/engaged)" and none.start_wait(False, True) is None


def test_weights_for_other_observations_or_actions_are_refused(agent):
    slot, *_ = make(action_dim=7)
    assert "the policy has 4 actions, the actor action_dim=7" in slot.use_weights(weights(agent, 1), "learner")
    slot, *_ = make()
    slot.settings = dataclasses.replace(slot.settings, observation_keys=("state",))
    assert slot.use_weights(weights(agent, 1), "learner") == (
        f"the learner's policy reads ['object_state', 'state']; this actor builds ['state'] from robot file "
        f"{slot.robot.path}: start the learner with robot:={slot.robot.path} (or the same obs_mode / cameras)")
    assert slot.session.actor is None
    from robot_rl.core.types import ObservationSpec

    wrench = ObservationSpec.from_shapes({"state": ((14,), "float32"), "wrench": ((6,), "float32")})
    assert "wrist force/torque reading (observation key wrench)" in slot.check_spec(wrench, 4)


def test_a_learner_trained_for_another_robot_file_is_one_line_naming_both_key_lists_and_the_fix(tmp_path):
    """A learner that built its policy for the sim's cameras, and an actor on a robot file whose cameras are named
    otherwise: the refusal names what each side has and how to make them agree."""
    from ros_harness import third_party_robot_file

    from robot_rl.actor.policy_slot import observation_mismatch
    from robot_rl.actor.robot_io import observed_sensors
    from robot_rl.core.types import ObservationSpec

    robot = load_robot_config(third_party_robot_file(tmp_path / "arm.yaml", sim=False))
    keys, _ = observed_sensors(robot, "pixels", ())
    session = ActorSession(Safety(SafetyConfig(action_dim=4)), "test")
    slot = PolicySlot(session, robot, PolicySettings(observation_keys=keys), log=Lines())
    image = ((64, 64, 3), "uint8")
    sim_spec = ObservationSpec.from_shapes({"state": ((14,), "float32"), "images/front": image,
                                            "images/wrist": image})
    line = (f"the learner's policy reads ['images/front', 'images/wrist', 'state']; this actor builds ['state', "
            f"'images/scene', 'images/hand'] from robot file {robot.path}: start the learner with robot:={robot.path} "
            "(or the same obs_mode / cameras)")
    assert slot.check_spec(sim_spec, 4) == line and "\n" not in line
    assert slot.check_spec(sim_spec, 4, origin="file") == observation_mismatch(
        sim_spec.keys, keys, robot.path, learner=False)
    assert "act with a policy trained on this robot file's observations" in slot.check_spec(sim_spec, 4, "file")
    robot_spec = ObservationSpec.from_shapes({"state": ((14,), "float32"), "images/scene": image,
                                              "images/hand": image})
    assert slot.check_spec(robot_spec, 4) is None


def test_a_silent_learner_is_away_after_the_robot_file_s_time_and_hold_holds(agent, tmp_path):
    robot = tmp_path / "robot.yaml"
    robot.write_text(Path(load_robot_config("sim_panda").path).read_text() + "\nlearner_lost: {action: hold, after_s: 2}\n")
    slot, clock, lines = make(str(robot))
    slot.use_weights(weights(agent, 1), "learner")
    slot.heard_learner()
    clock.t = 1.5
    assert slot.hold_reason() is None
    clock.t = 2.5
    assert slot.hold_reason() == "learner_away" and slot.hold_reason() == "learner_away"
    assert sum("the learner is away (nothing of it for 2 s): holding" in line for line in lines) == 1
    clock.t = 4.0
    slot.heard_learner()
    assert slot.hold_reason() is None and "the learner is back after 4.0 s away" in lines[-1]
    assert slot.learner_watch.outages == 1


def test_a_real_robot_refuses_an_unvalidated_policy_file_unless_allowed(agent, tmp_path):
    from robot_rl.wire.policy_file import write_policy_file

    path = write_policy_file(tmp_path / "policy.msgpack", weights(agent, 1))
    real = tmp_path / "real_panda.yaml"
    real.write_text(Path(load_robot_config("sim_panda").path).read_text().replace("sim: true", "sim: false"))
    slot, *_ = make(str(real))
    with pytest.raises(PolicyError, match="robot-rl validate"):
        slot.load_file(str(path))
    assert slot.session.actor is None
    allowed, _, lines = make(str(real), allow_unvalidated=True)
    allowed.load_file(str(path))
    assert allowed.unvalidated and any("UNVALIDATED POLICY ON A REAL ROBOT" in line for line in lines)
    spec = allowed.session.actor.policy.observation_spec
    action = allowed.session.actor.policy_action({key: np.zeros(e.shape, e.dtype) for key, e in spec.entries})
    assert np.isfinite(action).all()
    assert allowed.start_wait(False, False) is None and "UNVALIDATED policy" in lines[-1]  # logged every episode
