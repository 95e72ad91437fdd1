"""The learner node's ROS parameters, and what a start is checked against before ROS or JAX (robot_rl.ros.nodes.learner_node).

The table (:data:`PARAMETERS`; its `policy` and the policy kinds' run options come from robot_rl.policies.registry:
:func:`policy_parameters`), the spaces a robot file gives a run (:func:`robot_task_spaces`, :func:`run_spaces`),
the node's TrainConfig from its parameters (:func:`train_config`; its in-process twins' rules name a bad one), and the
cheap checks `run_node` applies to the command line's values before anything starts (:func:`check_parameters`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from robot_rl.learner.evaluations import AUTO
from robot_rl.policies.registry import RunOption, kind_of, run_options
from robot_rl.ros.node_util import NodeStartupError
from robot_rl.training.rules import DEFAULT_POLICY, policy_help
from robot_rl.training.run_folder import CONFIG_FILE

NODE_NAME = "learner"
# Settings that shape the observation spec and the task: a run folder cannot be resumed with others.
RUN_SETTINGS = ("task", "obs_mode", "image_size", "policy")

NODE_NOTES = {"base": "Offered to actors on other hosts (fetched from the node offering it if this host has none)."}
"""What the node does with a run option beyond its TrainConfig field, after the option's help."""


def policy_parameters() -> list[tuple[str, object, str]]:
    """The `policy` parameter and the policy kinds' run options (robot_rl.policies.registry.run_options) as parameter
    rows; an option that may be None takes 0 (a number) or '' (a path or string) for None."""
    rows: list[tuple[str, object, str]] = [("policy", DEFAULT_POLICY, policy_help())]
    for option in run_options():
        textual = option.value_type in (str, Path)
        if option.default is None:
            default = "" if textual else option.value_type()
        else:
            default = str(option.default) if textual else option.default
        help_text = option.help_with("''" if textual else "0")
        rows.append((option.name, default, " ".join(filter(None, (help_text, NODE_NOTES.get(option.name))))))
    return rows


def option_setting(option: RunOption, value):
    """A run option's TrainConfig value from its node parameter (0 or '': None; a path made absolute)."""
    if option.optional and not value:
        return None
    return Path(str(value)).resolve() if option.value_type is Path else option.value_type(value)


PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("run_dir", "runs/ros-learner", "checkpoints, transition log, policy file, status (resumed if present)"),
    ("task", "PickCube-v0", "task: on a sim robot file, a sim task (its spaces, demos, evaluations); else the run's "
                            "name only"),
    ("robot", "sim_panda", "robot file: a real robot's (sim: false) decides the observation spec whatever the task "
                           "(its state and cameras, as its actor builds them); a sim one's does for a task that is "
                           "not a sim task"),
    ("obs_mode", "pixels", "state | pixels | state+pixels: what the policy sees"),
    ("image_size", 64, "camera image side [px] for pixel modes"),
    ("demos", 20, "scripted demos to record in the sim for a new run (0: none)"),
    ("demo_path", "", "demo dataset (zarr) to use instead of recording (fetched from the node offering it if this "
                      "host has none)"),
    ("steps", 0, "stop after this many received transitions (0: run until stopped)"),
    ("utd", 2, "gradient steps per learner step"),
    ("batch_size", 256, "batch size"),
    ("critics", 2, "critic ensemble size"),
    ("updates_per_transition", 1.0, "learner steps per received transition"),
    ("weights_every", 5, "learner steps between weight broadcasts"),
    ("checkpoint_every", 500, "received transitions between checkpoints"),
    ("abandon_after_s", 120.0, "close an actor's open episode (as truncated) after this long without a step of it"),
    ("final_eval_episodes", 0, "after `steps`: evaluate the final policy in-process in the sim"),
    ("eval_every", -1, "sim task: evaluate the current policy in the sim every this many transitions, in a worker "
                       "thread (-1: a fifth of `steps`, off without steps; 0: off)"),
    ("eval_episodes", 10, "episodes of each evaluation every eval_every transitions"),
    ("progress_every_s", 5.0, "seconds between progress lines (0: none)"),
    ("final_validation", True, "after the final evaluation of a sim run: validate the final policy (validate_suite) "
                               "and write its validation record next to the policy file for the robot file"),
    ("validate_suite", "default", "suite of the final validation ('': no validation)"),
    ("validation_episodes", 0, "episodes per condition of the final validation (0: sized to the run: at most as "
                               "many env steps as it trained on, at most the suite's min_episodes, at least 1)"),
    ("jax_cache_dir", "", "JAX persistent compilation cache (empty: JAX_COMPILATION_CACHE_DIR if set, else "
                          "<run_dir>/jax_cache), for a fast respawn"),
    ("seed", 0, "seed"),
    *policy_parameters(),
)
"""The node's ROS parameters (name, default, description)."""


def robot_task_spaces(robot, obs_mode: str, image_size: int, action_dim: int = 4):
    """(observation spec, action dim) of a run whose robot file decides them (a real robot's, or a task that is not
    a sim task): the keys the actor builds from the same file (robot_rl.actor.robot_io.observed_sensors), i.e. the
    proprioceptive state and every camera at `image_size`. `robot`: a RobotConfig, a robot file or a shipped name."""
    from robot_rl.actor.robot_config import RobotConfig
    from robot_rl.actor.robot_io import observed_sensors
    from robot_rl.actor.sensors import STATE_SIZE
    from robot_rl.core.types import ObservationSpec

    robot = robot if isinstance(robot, RobotConfig) else load_robot(str(robot))
    problem = robot_obs_problem(robot, obs_mode)
    if problem:
        raise NodeStartupError(problem)
    keys, _ = observed_sensors(robot, obs_mode, ())
    return ObservationSpec.from_shapes({key: ((STATE_SIZE,), "float32") if key == "state" else
                                        ((image_size, image_size, 3), "uint8") for key in keys}), action_dim


def load_robot(name: str):
    """The robot file `name` (a path or a shipped name); NodeStartupError naming the file and the key. Cheap (YAML)."""
    from robot_rl.actor.robot_config import RobotConfigError, load_robot_config

    try:
        return load_robot_config(name)
    except RobotConfigError as error:
        raise NodeStartupError(f"robot: {error}") from None


def robot_obs_problem(robot, obs_mode: str) -> str | None:
    """Why a run whose robot file decides its observations cannot see `obs_mode` (no sim object_state, or no
    camera), or None."""
    if obs_mode != "pixels":
        return (f"obs_mode={obs_mode} needs a sim task's object_state; a run on robot file {robot.path or robot.name}"
                f"{' (sim: false)' if not robot.sim else ''} uses obs_mode pixels (the state and its cameras)")
    if not robot.cameras:
        return f"robot {robot.path or robot.name} has no cameras for obs_mode pixels"
    return None


def run_spaces(robot, cfg, checkpoint_state: dict | None = None):
    """(observation spec, action dim) of a learner run on `robot` (a RobotConfig) with TrainConfig `cfg`: recorded in
    its checkpoint, else a sim task's env in the sim mirror (a `sim: true` robot file), else the robot file's
    (`robot_task_spaces`: a real robot's file decides, whatever the task is named)."""
    state = checkpoint_state or {}
    # a head's recorded spec is its own, not the robot's
    if "observation_spec" in state and kind_of(cfg.policy).robot_spec_in_weights:
        from robot_rl.core.types import ArraySpec, ObservationSpec

        recorded = state["observation_spec"].items()
        spec = ObservationSpec.from_shapes({key: ArraySpec.from_json(entry) for key, entry in recorded})
        return spec, int(state["action_dim"])
    from robot_rl.sim.loop import make_env, sim_run_steps

    if not sim_run_steps(robot, cfg.task):
        return robot_task_spaces(robot, cfg.obs_mode, cfg.image_size)
    env = make_env(cfg.task, **cfg.env_settings())
    try:
        return env.observation_space, env.action_space.shape[0]
    finally:
        env.close()


def check_demo_images(demo_path, robot_name: str, image_size: int) -> None:
    """NodeStartupError if the demos' cameras were cropped / resized another way than the robot file's live frames
    (recorded by the actor in the dataset's `image_transforms`; datasets without it are not checked)."""
    import zarr

    from robot_rl.actor.robot_config import load_robot_config
    from robot_rl.core.vision import transform_mismatches

    try:
        recorded = dict(zarr.open_group(str(demo_path), mode="r").attrs).get("image_transforms")
    except Exception:  # noqa: BLE001 - the demo loader reports an unreadable dataset in its own words
        return
    if not recorded:
        return
    problems = transform_mismatches(recorded, load_robot_config(robot_name), image_size)
    if problems:
        raise NodeStartupError(f"demo_path {demo_path}: images differ from what the robot's cameras give now: "
                               f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def train_config(settings):
    """TrainConfig (the CPU preset) with the node's parameters (`settings`: name -> value) applied."""
    from robot_rl.training.config import TrainConfig

    base = TrainConfig()
    learner = dataclasses.replace(base.learner, utd=int(settings["utd"]), batch_size=int(settings["batch_size"]),
                                  seed=int(settings["seed"]))
    sac = dataclasses.replace(base.sac, critic_ensemble_size=int(settings["critics"]))
    return TrainConfig(**train_settings(settings), learner=learner, sac=sac)


def train_settings(settings) -> dict:
    """TrainConfig's own settings (all but its learner and agent configs) from the node's parameters; cheap (no JAX)."""
    demo_path = str(settings["demo_path"])
    final_eval = int(settings["final_eval_episodes"])
    from robot_rl.learner.evaluations import resolve_eval_every

    eval_every = resolve_eval_every(int(settings["eval_every"]), int(settings["steps"]))
    evals = {"eval_every": eval_every} if eval_every > 0 else {}
    if int(settings["eval_episodes"]) > 0:
        evals["eval_episodes"] = int(settings["eval_episodes"])
    return dict(
        policy=str(settings["policy"]),
        **{option.name: option_setting(option, settings[option.name]) for option in run_options()},
        task=str(settings["task"]), obs_mode=str(settings["obs_mode"]), image_size=int(settings["image_size"]),
        demos=int(settings["demos"]), demo_path=Path(demo_path) if demo_path else None,
        steps=int(settings["steps"]) or 1, weights_every=int(settings["weights_every"]),
        checkpoint_every=int(settings["checkpoint_every"]), final_eval_episodes=final_eval if final_eval else None,
        seed=int(settings["seed"]), **evals)


# The twin's field -> this node's parameter, where the names differ; what 0 means for a node parameter whose twin
# (TrainConfig, LearnerServer) has no 0.
TWIN_NAMES = {"critic_ensemble_size": "critics", "budget": "steps"}
ZERO_MEANS = {"steps": "run until stopped", "final_eval_episodes": "no final evaluation",
              **{option.name: option.none_means for option in run_options()
                 if option.optional and option.none_means and option.value_type in (int, float)}}


def node_problem(message: str) -> NodeStartupError:
    """A NodeStartupError of a twin's ValueError, in the node's parameter names (and what 0 means for them)."""
    import re

    for field, name in TWIN_NAMES.items():
        message = re.sub(rf"\b{field}=", f"{name}=", message)
    for name in ZERO_MEANS:  # the twin's None is the node's 0
        message = re.sub(rf"(\b{name}=\S+ must be [^;]*?) or None \([^)]*\)", r"\1", message)
    notes = [f"{name}:=0 means {meaning}" for name, meaning in ZERO_MEANS.items()
             if re.search(rf"\b{name}=", message)]
    return NodeStartupError(message + (f" ({'; '.join(notes)})" if notes else ""))


def checked_train_config(settings):
    """`train_config`, with an invalid setting as a NodeStartupError: the parameters are checked by the rules of
    their in-process twins (TrainConfig, LearnerConfig, SACConfig), which name the parameter and its range."""
    try:
        return train_config(settings)
    except ValueError as error:
        raise node_problem(str(error)) from None


def check_server_settings(settings) -> None:
    """NodeStartupError if a parameter of the node's `LearnerServer` (its twin's rules) is out of range; cheap (no
    JAX), so a resumed run checks them too before it starts."""
    from robot_rl.learner.server import settings_problems

    problems = settings_problems(float(settings["updates_per_transition"]), int(settings["weights_every"]),
                                 float(settings["abandon_after_s"]), int(settings["steps"]))
    if problems:
        raise node_problem(f"invalid LearnerServer settings: {'; '.join(problems)}")


SCHEDULE_MINIMA = (("eval_every", AUTO), ("eval_episodes", 0), ("progress_every_s", 0.0), ("validation_episodes", 0),
                   ("final_eval_episodes", 0))
"""The node's evaluation, progress and final-validation parameters that have no twin, and their least values."""


def check_parameters(node_name: str, values) -> None:
    """NodeStartupError for the first parameter the node cannot start with (`values`: name -> value): a run folder
    started with other settings, its LearnerServer's settings, its schedule, and a new run's TrainConfig settings
    (robot_rl.training.rules; a resumed run had them checked when it began, and those of its learner and agent
    configs are checked when the node builds its TrainConfig, after the JAX import). Cheap: run_node applies it to the
    command line's values before anything starts; the node to its declared values."""
    from robot_rl.learner.server import checkpoint_dir
    from robot_rl.ros.net.env import open_network_problem
    from robot_rl.training.rules import setting_problems

    settings = {name: values(name) for name, _, _ in PARAMETERS}
    robot = load_robot(str(settings["robot"]))
    problem = open_network_problem(robot.sim)
    if problem:
        raise NodeStartupError(problem)
    if not robot.sim:  # a real robot's file decides the observations, whatever the task is named
        problem = robot_obs_problem(robot, str(settings["obs_mode"]))
        if problem:
            raise NodeStartupError(problem)
    run_dir = Path(settings["run_dir"])
    check_run_settings(run_dir, settings)
    check_server_settings(settings)
    problems = [f"{name}={settings[name]!r} must be >= {low}" for name, low in SCHEDULE_MINIMA
                if not settings[name] >= low]  # NaN too
    if problems:
        raise NodeStartupError("; ".join(problems))
    if not checkpoint_dir(run_dir):
        problems = setting_problems(train_settings(settings))
        if problems:
            raise node_problem(f"invalid TrainConfig: {'; '.join(problems)}")


def check_run_settings(run_dir: Path, settings) -> None:
    """NodeStartupError if `run_dir` was started with another task / observation mode / image size."""
    try:
        recorded = json.loads((run_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return  # a new run (or one from before config.json): nothing to compare
    names = [n for n in RUN_SETTINGS if n != "image_size" or "pixels" in str(settings["obs_mode"])]
    different = [f"{n}={recorded.get(n)!r} (this node: {settings[n]!r})" for n in names
                 if n in recorded and recorded[n] != settings[n]]
    if different:
        raise NodeStartupError(f"run_dir {run_dir} was started with {', '.join(different)}: use the same settings "
                               "to resume it, or another run_dir")
