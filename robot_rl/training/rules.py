"""The rules of robot_rl.training.config.TrainConfig on its own settings (not those of its agent, learner or
simulated-human configs), importable without JAX or MuJoCo: TrainConfig applies them when it is made, and the ROS
learner node (robot_rl.ros.nodes.learner_node) applies them to its parameters before it starts ROS or imports JAX.
The `policy` choices and the policy kinds' run options, with their checks, come from robot_rl.policies.registry."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Literal

from robot_rl.policies.registry import kind_of, learner_kinds, run_names, run_options

ObsMode = Literal["state", "pixels", "state+pixels"]
CHOICES = {"obs_mode": typing.get_args(ObsMode)}
DEFAULT_POLICY = run_names()[0]
"""The `policy` of a run that names none."""
AT_LEAST = (("steps", 1), ("eval_every", 1), ("eval_episodes", 1), ("weights_every", 1), ("checkpoint_every", 1),
            ("demos", 0), ("seed", 0))
IMAGE_SIZES = (16, 640)
"""The camera image sides [px] a run may use (smallest, largest)."""


def policy_help() -> str:
    """The help of `policy`: each learner-trained kind's run name and what its SAC action means."""
    return "What the SAC action means: " + "; ".join(f"`{kind.run_name}` = {kind.summary}"
                                                      for kind in learner_kinds()) + "."


def setting_problems(settings: Mapping[str, Any]) -> list[str]:
    """What is wrong with these TrainConfig settings (field name -> value), one phrase each. A field that `settings`
    lacks is not checked: TrainConfig's default, which passes."""
    given = settings.__contains__
    problems = [f"{name}={settings[name]!r} must be >= {low}" for name, low in AT_LEAST
                if given(name) and settings[name] < low]
    if settings.get("final_eval_episodes") is not None and settings["final_eval_episodes"] < 1:
        problems.append(f"final_eval_episodes={settings['final_eval_episodes']!r} must be >= 1 or None "
                        "(eval_episodes)")
    # the command line checks its choices; a node or a file does not
    for name, choices in {**CHOICES, "policy": run_names()}.items():
        if given(name) and settings[name] not in choices:
            problems.append(f"{name}={settings[name]!r} must be one of {', '.join(map(repr, choices))}")
    if settings.get("policy", DEFAULT_POLICY) in run_names():
        problems += _policy_option_problems(settings)
    problems += [problem for option in run_options() if given(option.name)
                 for problem in [option.problem(settings[option.name])] if problem]
    if given("image_size") and not IMAGE_SIZES[0] <= settings["image_size"] <= IMAGE_SIZES[1]:
        problems.append(f"image_size={settings['image_size']!r} must be in [{IMAGE_SIZES[0]}, {IMAGE_SIZES[1]}]")
    return problems


def _policy_option_problems(settings: Mapping[str, Any]) -> list[str]:
    """A run option the policy kind needs missing, one it does not read switched on (robot_rl.policies.registry)."""
    policy = settings.get("policy", DEFAULT_POLICY)
    kind = kind_of(policy)
    problems = [f"policy={policy!r} needs {option.flag}" for option in kind.options
                if option.required and settings.get(option.name) is None]
    for option in run_options():
        value = settings.get(option.name)
        off = option.default is None or option.default is False  # options with a working default are not "set"
        if off and value is not None and value is not False and not kind.reads(option):
            readers = " or ".join(other.run_name for other in learner_kinds() if other.reads(option))
            shown = option.flag if option.value_type is bool else f"{option.flag} {value}"
            problems.append(f"{shown} is only used with --policy {readers}")
    return problems
