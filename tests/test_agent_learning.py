"""SAC must actually learn: a 1-step contextual bandit with reward -||a - f(s)||^2, trained off-policy."""

import numpy as np

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.core.types import Batch, ObservationSpec


def optimal_action(states: np.ndarray) -> np.ndarray:
    return 0.8 * np.stack([states[:, 1], -states[:, 0]], axis=-1)


def bandit_batch(rng: np.random.Generator, lead: tuple[int, ...]) -> Batch:
    states = rng.uniform(-1, 1, lead + (2,)).astype(np.float32)
    actions = rng.uniform(-1, 1, lead + (2,)).astype(np.float32)
    flat_states, flat_actions = states.reshape(-1, 2), actions.reshape(-1, 2)
    rewards = -np.sum((flat_actions - optimal_action(flat_states)) ** 2, axis=-1).reshape(lead)
    zeros = np.zeros(lead, np.float32)
    return Batch({"state": states}, actions, rewards.astype(np.float32), zeros, zeros, {"state": states}, zeros > 0, zeros > 0)


def action_error(agent: SACAgent, rng: np.random.Generator) -> float:
    states = rng.uniform(-1, 1, (512, 2)).astype(np.float32)
    actions = np.asarray(agent.eval_actions({"state": states}))
    return float(np.mean(np.sum((actions - optimal_action(states)) ** 2, axis=-1)))


def test_sac_learns_contextual_bandit():
    spec = ObservationSpec.from_shapes({"state": ((2,), np.float32)})
    config = SACConfig(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64), critic_ensemble_size=2,
                       actor_lr=1e-3, critic_lr=1e-3, init_temperature=0.01)
    agent = SACAgent.create(0, spec, 2, config)
    rng = np.random.default_rng(0)
    before = action_error(agent, rng)
    for _ in range(75):
        agent, info = agent.update(bandit_batch(rng, (20, 256)))
    after = action_error(agent, rng)
    assert np.isfinite(float(info["critic_loss"]))
    assert before > 0.2, before
    assert after < 0.03, (before, after)


def test_bc_term_imitates_demo_rows_only():
    """With no reward signal, bc_weight pulls the actor to the demo actions; online rows' actions are ignored."""
    spec = ObservationSpec.from_shapes({"state": ((2,), np.float32)})
    config = SACConfig(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64), critic_ensemble_size=2,
                       actor_lr=1e-3, init_temperature=1e-4, bc_weight=10.0)
    agent = SACAgent.create(0, spec, 2, config)
    rng = np.random.default_rng(1)
    for _ in range(40):
        batch = bandit_batch(rng, (10, 256))
        demo = np.zeros((10, 256), bool)
        demo[:, :128] = True
        expert = optimal_action(batch.observations["state"].reshape(-1, 2)).reshape(10, 256, 2)
        actions = np.where(demo[..., None], expert, -expert).astype(np.float32)  # online rows do the opposite
        zeros = np.zeros((10, 256), np.float32)
        agent, info = agent.update(batch.replace(actions=actions, rewards=zeros, demo=demo))
    assert action_error(agent, rng) < 0.05
    assert float(info["bc_error"]) < 0.05
