"""The policy registry: every kind registered once and built through it, its run names, one-line errors for unknown
kinds, a kind's run options reaching `robot-rl train`, the learner node and the learning bench from its entry alone,
and no kind named in a branch above robot_rl.policies."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
import typing
from pathlib import Path

import numpy as np
import pytest

from robot_rl.policies.base import PolicyError
from robot_rl.policies.registry import (BASE, GAUSSIAN, KINDS, PolicyKind, RunOption, kind_of, learner_kinds,
                                        learner_plan, positive, register, robot_observation_spec, run_names,
                                        unregister, weights_builder)
from robot_rl.core.types import ObservationSpec

ROOT = Path(__file__).resolve().parents[1]
SPEC = ObservationSpec.from_shapes({"state": ((5,), np.float32)})
ACTION_DIM = 3


@pytest.fixture(scope="module")
def diffusion_folder(tmp_path_factory) -> Path:
    """A tiny untrained diffusion policy's folder (a torch kind, and the base of the heads)."""
    import torch

    from robot_rl.policies.config import DiffusionConfig
    from robot_rl.policies.diffusion import DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer

    torch.set_num_threads(1)
    config = DiffusionConfig(obs_horizon=1, prediction_horizon=4, action_horizon=2, down_dims=(8,), groups=4,
                             step_embedding_dim=8, state_features=8, train_timesteps=10, inference_steps=2)
    rng = np.random.default_rng(0)
    normalizer = Normalizer().fit({"state": rng.normal(size=(20, 5)), "action": rng.uniform(-1, 1, (20, ACTION_DIM))})
    policy = DiffusionPolicy.create(config, SPEC, ACTION_DIM, normalizer)
    return policy.save(tmp_path_factory.mktemp("diffusion") / "policy")


def run_config(kind_name: str, base: Path | None):
    """A run's options (TrainConfig, the CPU preset with a small SAC) choosing `kind_name` on `base`."""
    from robot_rl.training.config import TrainConfig

    kind = kind_of(kind_name)
    sac = dataclasses.replace(TrainConfig().sac, actor_hidden_dims=(8,), critic_hidden_dims=(8,))
    return TrainConfig(policy=kind.run_name, base=base if kind.reads(BASE) else None, sac=sac)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_registered_kind_builds_through_the_registry(name, diffusion_folder, tmp_path):
    from robot_rl.agents.sac import SACAgent
    from robot_rl.policies.checkpoint import load_policy, policy_from_weights
    from robot_rl.policies.one_step import OneStepPolicy

    kind = kind_of(name)
    if kind.from_files is not None:
        folder = diffusion_folder
        if kind.name != load_policy(folder, device="cpu").kind:  # a one-step student of the diffusion policy
            folder = OneStepPolicy.from_teacher(load_policy(folder, device="cpu")).save(tmp_path / "student")
        assert load_policy(folder, device="cpu").kind == name
        return
    plan = learner_plan(run_config(name, diffusion_folder), SPEC, ACTION_DIM)
    assert plan.kind is kind and plan.chunk_decisions == kind.chunk_decisions
    policy = plan.make_policy(SACAgent.create(0, plan.observation_spec, plan.action_dim, plan.sac))
    assert policy.kind == name and policy.action_dim == ACTION_DIM
    rebuilt = policy_from_weights(policy.weights_message(version=1), device="cpu")
    assert type(rebuilt) is type(policy) and rebuilt.weights_version == 1
    assert (robot_observation_spec(policy.weights_message(version=1)) is not None) == kind.robot_spec_in_weights


def test_the_learner_kinds_set_what_their_sac_action_needs(diffusion_folder):
    from robot_rl.agents.sac import SACAgent

    residual = learner_plan(run_config("residual", diffusion_folder), SPEC, ACTION_DIM)
    assert residual.sac.residual_scale == 0.1 and residual.sac.actor_zero_init_last
    labeller = residual.demo_labeller(SACAgent.create(0, residual.observation_spec, ACTION_DIM, residual.sac))
    assert "base_action" in labeller.augment_observation({"state": np.zeros(5, np.float32)})
    noise = learner_plan(run_config("noise", diffusion_folder), SPEC, ACTION_DIM)
    assert noise.sac.bc_weight == 0.0 and noise.sac.aliased_chunk_dim is None and noise.robot_action_dim == ACTION_DIM
    assert noise.action_dim == 4 * ACTION_DIM and noise.sac.discount == pytest.approx(residual.sac.discount ** 2)
    plain = learner_plan(run_config(GAUSSIAN, None), SPEC, ACTION_DIM)
    assert plain.uniform_warmup and not residual.uniform_warmup and not noise.uniform_warmup
    assert plain.sac.residual_scale is None and plain.observation_spec == SPEC
    assert plain.demo_labeller(None) is None and noise.demo_labeller(None) is None


def test_plain_is_the_gaussian_kind_wherever_it_is_read():
    from robot_rl.wire.weights import WeightsMessage

    assert kind_of("plain") is kind_of(GAUSSIAN) and kind_of("plain").name == GAUSSIAN
    assert weights_builder("plain") == weights_builder(GAUSSIAN)
    assert WeightsMessage(0, b"", SPEC, ACTION_DIM, {}).policy_kind == GAUSSIAN  # weights that name no kind


def test_demos_and_base_options_follow_the_kind(diffusion_folder):
    from robot_rl.training.config import TrainConfig

    assert TrainConfig().learns_from_demos
    assert not TrainConfig(policy="noise", base=diffusion_folder).learns_from_demos
    assert TrainConfig(policy="noise", base=diffusion_folder, noise_aliasing=True).learns_from_demos
    with pytest.raises(ValueError, match="--noise-repeat is only used with --policy noise"):
        TrainConfig(policy="residual", base=diffusion_folder, noise_repeat=True)
    with pytest.raises(ValueError, match="only used with --policy residual or noise"):
        TrainConfig(base=diffusion_folder)


def test_an_unknown_kind_is_one_line_naming_the_known_kinds(tmp_path):
    from robot_rl.policies.checkpoint import policy_from_weights
    from robot_rl.wire.weights import WeightsMessage

    errors = []
    for attempt in (lambda: kind_of("nope"), lambda: policy_from_weights(WeightsMessage(0, b"", SPEC, 1, {}, "nope"))):
        with pytest.raises(PolicyError) as error:
            attempt()
        errors.append(str(error.value))
    assert all("'nope'" in e and "\n" not in e for e in errors), errors
    assert all(name in errors[0] for name in KINDS) and "gaussian (plain)" in errors[0]
    assert all(kind.name in errors[1] for kind in learner_kinds())


MADE_UP_GAIN = RunOption("made_up_gain", float, 0.5, check=positive,
                         help="Made-up head: the gain of its made-up correction.")


@pytest.fixture
def made_up_kind():
    """A made-up learner-trained kind with one run option, registered for one test."""
    kind = register(PolicyKind("made_up", summary="a made-up correction", options=(MADE_UP_GAIN,),
                               from_weights="robot_rl.policies.gaussian:GaussianPolicy.from_message"))
    try:
        yield kind
    finally:
        unregister(kind.name)


def fresh_copy(path: str, monkeypatch):
    """A new copy of the module at `path` (from the repository root), run now, with the registry as it is now; the
    module imported before stays as it was."""
    name = "fresh_" + re.sub(r"\W", "_", path.removesuffix(".py"))
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses and tyro look a class's module up there
    spec.loader.exec_module(module)
    return module


def test_a_kind_s_run_options_reach_the_run_the_learner_node_and_the_bench_from_its_entry(made_up_kind, monkeypatch,
                                                                                          capsys):
    import tyro

    from robot_rl.training.rules import setting_problems

    assert "made_up" in run_names()
    config = fresh_copy("robot_rl/training/config.py", monkeypatch)
    fields = {field.name: field.default for field in dataclasses.fields(config.TrainConfig)}
    assert fields["made_up_gain"] == 0.5
    assert config.TrainConfig(policy="made_up", made_up_gain=2.0).made_up_gain == 2.0
    with pytest.raises(ValueError, match=r"made_up_gain=-1.0 must be > 0"):
        config.TrainConfig(policy="made_up", made_up_gain=-1.0)
    monkeypatch.setenv("COLUMNS", "100")  # one column: an option, then its text
    with pytest.raises(SystemExit):
        tyro.cli(config.TrainConfig, args=["--help"])
    help_text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "--made-up-gain FLOAT Made-up head: the gain of its made-up correction. (default: 0.5)" in help_text
    assert "--policy {plain,residual,noise,made_up}" in help_text and "`made_up` = a made-up correction" in help_text

    params = fresh_copy("robot_rl/ros/nodes/learner_params.py", monkeypatch)
    table = {name: (default, text) for name, default, text in params.PARAMETERS}
    assert table["made_up_gain"] == (0.5, MADE_UP_GAIN.help) and "`made_up` =" in table["policy"][1]
    settings = {name: default for name, (default, _) in table.items()} | {"policy": "made_up", "made_up_gain": 2}
    assert params.train_settings(settings)["made_up_gain"] == 2.0
    assert setting_problems(params.train_settings(settings | {"made_up_gain": 0.0})) == ["made_up_gain=0.0 must be > 0"]

    bench = fresh_copy("bench/learning.py", monkeypatch)
    assert bench.Args().made_up_gain == 0.5
    assert "made_up" in typing.get_args(typing.get_type_hints(bench.Args)["policy"])


def test_kinds_reading_one_option_share_it_and_names_are_taken_once():
    clash = dataclasses.replace(BASE, default=Path("elsewhere"))
    with pytest.raises(ValueError, match="run option 'base' of policy kind 'made_up' differs"):
        register(PolicyKind("made_up", options=(clash,)))
    with pytest.raises(ValueError, match="policy kind name 'plain' is already registered"):
        register(PolicyKind("made_up", run_name="plain"))
    assert "made_up" not in KINDS


KIND_NAMES = "|".join(re.escape(name) for kind in KINDS.values() for name in kind.names)
KIND_BRANCH = re.compile(rf'(==|!=)\s*["\']({KIND_NAMES})["\']|["\']({KIND_NAMES})["\']\s*(==|!=)')


def test_no_kind_is_compared_above_the_policies():
    sources = [path for pattern in ("robot_rl/*.py", "robot_rl/ros/*.py", "robot_rl/agents/*.py", "bench/*.py",
                                    "drivers/*.py") for path in sorted(ROOT.glob(pattern))]
    branches = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in sources
                for number, line in enumerate(path.read_text().splitlines(), 1) if KIND_BRANCH.search(line)]
    assert sources and not branches, "ask robot_rl.policies.registry instead:\n" + "\n".join(branches)
