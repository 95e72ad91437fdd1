"""The actor node's ROS parameters: names, defaults, descriptions and ranges (robot_rl.ros.nodes.actor_node)."""

from __future__ import annotations

from collections.abc import Callable

from robot_rl.ros.node_util import NodeStartupError, Range, check_ranges

NODE_NAME = "actor"
MODES = ("", "lockstep", "realtime")
POLICIES = ("learner", "none")
OBS_MODES = ("state", "pixels", "state+pixels")

PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("actor_id", "robot0", "this actor's id in transitions (letters, digits, _ . -)"),
    ("robot", "sim_panda", "robot file (path, or a shipped name such as sim_panda): rate, limits, sensors, "
                           "commands, reset"),
    ("task", "PickCube-v0", "task name recorded with episodes; on a sim robot file (sim: true) a sim task's "
                            "registered episode length applies"),
    ("obs_mode", "", "state | pixels | state+pixels: state (+ object_state) and/or every camera of the robot"),
    ("observation_keys", ["state", "images/front", "images/wrist"], "policy observation keys (no obs_mode)"),
    ("image_size", 0, "policy image side [px] (0: the policy's own; 64 without a policy)"),
    ("action_dim", 4, "4: (dx, dy, dz, gripper) | 7: with rotations"),
    ("mode", "", "lockstep | realtime ('': the robot file's)"),
    ("control_period", 0.0, "seconds between commands in realtime mode (0: the robot file's rate)"),
    ("max_sensor_age", 0.0, "a sensor older than this [s] holds the robot (0: the robot file's)"),
    ("max_episode_steps", 0, "episode time limit in steps (0: the robot file's; a sim task's on a sim robot "
                             "file)"),
    ("episodes", 0, "stop after this many episodes (0: run until stopped)"),
    ("policy", "learner", "learner: weights from the learner or weights_path | none: hold unless the human acts "
                          "(episodes start once a teleop node is up)"),
    ("weights_path", "", "policy to act with at once, never waiting for a learner: a SAC policy.msgpack, a policy "
                         "folder (train-bc, distill) or a run folder holding either"),
    ("device", "auto", "torch device of a torch policy: auto | cpu | cuda | cuda:N"),
    ("inference_steps", 0, "DDIM steps per chunk of a diffusion policy (0: as saved in its policy.json)"),
    ("chunk_execute", 0, "actions of each chunk executed before the next is used (0: the policy's chunk length)"),
    ("ensemble_decay", -1.0, "realtime: temporal ensembling of overlapping chunks, weight exp(-decay * i) "
                             "(< 0: off, the newest chunk wins)"),
    ("deterministic", False, "act with the policy mean (evaluation)"),
    ("seed", 0, "policy sampling seed"),
    ("stream_transitions", True, "send transitions to the learner"),
    ("record_path", "", "write every finished episode to this zarr dataset (demos from teleop)"),
    ("outbox_capacity", 3000, "unacknowledged transitions kept (the oldest is dropped beyond)"),
    ("resend_after", 2.0, "re-send an unacknowledged transition after this many seconds at least (longer when "
                          "the learner's acknowledgements are measured to take longer)"),
    ("run_id", "", "serve only the learner run with this id (its run folder's run.json; '': the first run heard); "
                   "weights and acks of other runs are ignored"),
    ("follow_new_run", False, "switch to a new run when its learner appears (its weights, and the unacknowledged "
                              "transitions go to it) instead of ignoring it"),
    ("max_weight_lag", 0, "lockstep: wait for weights that saw all but this many transitions (0: off)"),
    ("weight_wait_s", 5.0, "longest wait per step for such weights"),
    ("reset_service", "", "std_srvs/Trigger service that starts an episode ('': the robot file's reset; none: "
                          "no reset, episodes follow each other)"),
    ("reset_timeout_s", 0.0, "give up a reset not done within this many seconds, and try again (0: the robot "
                             "file's)"),
    ("frame_timeout_s", 10.0, "no sensor frame this long after a reset (lockstep: after a command): the sim or "
                              "driver is gone; the episode is given up and the reset called again"),
    ("stats_path", "", "write a JSON status file here every second (`robot-rl status` reads it)"),
    ("eval_out", "", "with weights_path and episodes: when they are done, write `robot-rl eval`'s eval.json to this "
                     "folder (auto: an eval folder next to the policy, as robot-rl eval)"),
    ("allow_unvalidated", False, "real robot: run a policy (weights_path, or the base of a learner's head) that has "
                                 "no passing validation record for this robot file (logged at every episode)"),
)
"""The node's ROS parameters (name, default, description)."""

PARAMETER_RANGES: dict[str, Range] = {
    "image_size": Range(16, high=640, also={0: "the policy's own"}),  # the sim's, train's and record's range
    "control_period": Range(above=0, also={0: "the robot file's rate"}),
    "max_sensor_age": Range(above=0, also={0: "the robot file's"}),
    "max_episode_steps": Range(1, also={0: "the robot file's; a sim task's on a sim robot file"}),
    "episodes": Range(1, also={0: "run until stopped"}),
    "inference_steps": Range(1, also={0: "as saved in its policy.json"}),
    "chunk_execute": Range(1, also={0: "the policy's chunk length"}),
    "ensemble_decay": Range(),
    "seed": Range(0),
    "max_weight_lag": Range(0),
    "weight_wait_s": Range(above=0),
    "reset_timeout_s": Range(above=0, also={0: "the robot file's"}),
    "frame_timeout_s": Range(above=0),
}
"""Ranges of the numeric parameters (checked at start-up: one error line, exit status 2). outbox_capacity and
resend_after are checked by their twin, robot_rl.wire.outbox.Outbox; a policy checks chunk_execute and
inference_steps against itself when it is loaded."""


ACTION_DIMS = (4, 7)


def check_parameters(node_name: str, values: Callable[[str], object]) -> None:
    """NodeStartupError for the first parameter value (`values`: name -> value) the actor cannot start with: out of
    its range (PARAMETER_RANGES), not one of its choices, a malformed run_id or one with follow_new_run, or eval_out
    without what it evaluates. Cheap: run_node applies it to the command line's values before anything starts; the
    node to its declared values."""
    check_ranges(node_name, values, PARAMETER_RANGES)
    for name, choices in (("mode", MODES), ("policy", POLICIES), ("obs_mode", ("", *OBS_MODES))):
        if str(values(name)) not in choices:
            raise NodeStartupError(f"{name}={str(values(name))!r} must be one of {', '.join(map(repr, choices))}")
    if int(values("action_dim")) not in ACTION_DIMS:
        raise NodeStartupError(f"action_dim={int(values('action_dim'))} must be 4 (dx, dy, dz, gripper) or 7 (with "
                               "rotations)")
    run_id = str(values("run_id"))
    if run_id:
        from robot_rl.wire.protocol import run_id_problem  # numpy and the codec: only where a run is named

        if run_id_problem(run_id):
            raise NodeStartupError(f"run_id: {run_id_problem(run_id)}")
        if bool(values("follow_new_run")):
            raise NodeStartupError(f"run_id={run_id!r} serves that run only: drop run_id or follow_new_run")
    if values("eval_out") and not (values("weights_path") and int(values("episodes"))):
        raise NodeStartupError(f"eval_out={str(values('eval_out'))!r} evaluates a saved policy over a number of "
                               "episodes: give weights_path and episodes too")
