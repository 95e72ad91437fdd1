"""The rules of robot_rl.training.config.TrainConfig on its own settings (not those of its agent, learner or
simulated-human configs), importable without JAX or MuJoCo: TrainConfig applies them when it is made, and the ROS
learner node (robot_rl.ros.nodes.learner_node) applies them to its parameters before it starts ROS or imports JAX."""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from typing import Any, Literal

from robot_rl.policies.registry import kind_of, learner_kinds

ObsMode = Literal["state", "pixels", "state+pixels"]
PolicyName = Literal["plain", "residual", "noise"]
CHOICES = {"obs_mode": typing.get_args(ObsMode), "policy": typing.get_args(PolicyName)}
AT_LEAST = (("steps", 1), ("eval_every", 1), ("eval_episodes", 1), ("weights_every", 1), ("checkpoint_every", 1),
            ("demos", 0), ("seed", 0))
IMAGE_SIZES = (16, 640)
"""The camera image sides [px] a run may use (smallest, largest)."""


def setting_problems(settings: Mapping[str, Any]) -> list[str]:
    """What is wrong with these TrainConfig settings (field name -> value), one phrase each. A field that `settings`
    lacks is not checked: TrainConfig's default, which passes."""
    given = settings.__contains__
    problems = [f"{name}={settings[name]!r} must be >= {low}" for name, low in AT_LEAST
                if given(name) and settings[name] < low]
    if settings.get("final_eval_episodes") is not None and settings["final_eval_episodes"] < 1:
        problems.append(f"final_eval_episodes={settings['final_eval_episodes']!r} must be >= 1 or None "
                        "(eval_episodes)")
    for name, choices in CHOICES.items():  # the command line checks its choices; a node or a file does not
        if given(name) and settings[name] not in choices:
            problems.append(f"{name}={settings[name]!r} must be one of {', '.join(map(repr, choices))}")
    if settings.get("policy", "plain") in CHOICES["policy"]:
        problems += _policy_option_problems(settings)
    for name in ("noise_bound", "residual_scale"):
        if given(name) and not (math.isfinite(settings[name]) and settings[name] > 0):
            problems.append(f"{name}={settings[name]!r} must be > 0")
    if settings.get("base_execute") is not None and settings["base_execute"] < 1:
        problems.append(f"base_execute={settings['base_execute']!r} must be >= 1 or None (the base's chunk)")
    if given("image_size") and not IMAGE_SIZES[0] <= settings["image_size"] <= IMAGE_SIZES[1]:
        problems.append(f"image_size={settings['image_size']!r} must be in [{IMAGE_SIZES[0]}, {IMAGE_SIZES[1]}]")
    return problems


def _policy_option_problems(settings: Mapping[str, Any]) -> list[str]:
    """A base missing or given in vain, another policy kind's flag set (robot_rl.policies.registry)."""
    kind = kind_of(settings.get("policy", "plain"))
    base = settings.get("base")
    problems = []
    if "base" in kind.options and base is None:
        problems.append(f"policy={settings.get('policy', 'plain')!r} needs --base (the frozen base policy's folder "
                        "or file)")
    if "base" not in kind.options and base is not None:
        on_base = " or ".join(other.name for other in learner_kinds() if "base" in other.options)
        problems.append(f"--base {base} is only used with --policy {on_base}")
    for other in learner_kinds():
        problems += [f"--{flag.replace('_', '-')} is a --policy {other.name} option" for flag in other.options
                     if flag not in kind.options and settings.get(flag) is True]
    return problems
