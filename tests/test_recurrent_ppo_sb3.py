"""RecurrentPPO against sb3-contrib's: on the same weights and the same rollout (collected by sb3-contrib,
with episode starts and time-limit truncations inside it and memories carried in from the rollout
before), our sequence forward gives the log-probs and values sb3-contrib collected, and our loss and its
gradient are sb3-contrib's (with its minibatch sequences cut as ours: at sub-env and episode starts).
Skipped without the ``bench`` extra."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning.algorithms.ppo import ppo_loss
from rl_lightning.algorithms.recurrent_ppo import RecurrentActorCritic
from rl_lightning.envs.wrappers import MaskVelocity

sb3_contrib = pytest.importorskip("sb3_contrib")
STEPS, ENVS = 32, 8


def sb3_model():
    """sb3-contrib's RecurrentPPO on the zoo's CartPoleNoVel-v1 settings, 12-step episodes (truncations)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_vec_env(
        "CartPole-v1", n_envs=ENVS, seed=0, wrapper_class=MaskVelocity, env_kwargs={"max_episode_steps": 12}
    )
    return sb3_contrib.RecurrentPPO(
        "MlpLstmPolicy",
        VecNormalize(env, gamma=0.98),
        n_steps=STEPS,
        batch_size=STEPS * ENVS,
        gamma=0.98,
        gae_lambda=0.8,
        vf_coef=0.5,
        seed=0,
        device="cpu",
        policy_kwargs=dict(
            ortho_init=False,
            activation_fn=nn.ReLU,
            lstm_hidden_size=64,
            enable_critic_lstm=True,
            net_arch=dict(pi=[64], vf=[64]),
        ),
    )


def ours_with_weights_of(policy) -> RecurrentActorCritic:
    """Our network of the same shape (separate actor and critic LSTMs, [64] ReLU MLPs) with ``policy``'s weights."""
    ours = RecurrentActorCritic(
        policy.observation_space, policy.action_space, "lstm", 64, False, (64,), "relu", orthogonal_init=False
    )
    theirs = {
        "memories.0": policy.lstm_actor,
        "memories.1": policy.lstm_critic,
        "body.actor_body.0": policy.mlp_extractor.policy_net[0],
        "body.critic.0": policy.mlp_extractor.value_net[0],
        "body.critic.2": policy.value_net,
        "body.head.linear": policy.action_net,
    }
    ours.load_state_dict({f"{name}.{k}": v for name, m in theirs.items() for k, v in m.state_dict().items()})
    return ours, theirs


def test_same_rollout_same_weights_same_loss_and_gradient_as_sb3_contrib(monkeypatch):
    torch.manual_seed(0)
    model = sb3_model()
    _, callback = model._setup_learn(10 * STEPS * ENVS, None)
    callback.on_training_start(locals(), globals())
    for _ in range(2):  # the second rollout starts from the memories the first left, some mid-episode
        model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=STEPS)
    buf = model.rollout_buffer
    ours, theirs = ours_with_weights_of(model.policy)

    obs = torch.as_tensor(buf.observations).flatten(0, 1)  # time-major, as our minibatches
    actions = torch.as_tensor(buf.actions).long().flatten()
    starts = torch.as_tensor(buf.episode_starts).bool()
    assert starts[1:].any() and not starts[0].all(), "episodes must start inside the rollout and run into it"
    # each sub-env's memory before the rollout's first step: (h, c) of the actor's LSTM, then the critic's
    stored = (buf.hidden_states_pi, buf.cell_states_pi, buf.hidden_states_vf, buf.cell_states_vf)
    start_memory = torch.stack([torch.as_tensor(x[0, 0]) for x in stored], dim=1)
    logprobs, entropy, values = ours.evaluate(obs, actions, starts, start_memory)
    torch.testing.assert_close(logprobs.view(STEPS, ENVS), torch.as_tensor(buf.log_probs), rtol=0, atol=1e-5)
    torch.testing.assert_close(values.view(STEPS, ENVS), torch.as_tensor(buf.values), rtol=0, atol=1e-5)

    advantages = torch.as_tensor(buf.advantages).flatten()
    normalized = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    old_values, old_logprobs = torch.as_tensor(buf.values).flatten(), torch.as_tensor(buf.log_probs).flatten()
    returns = torch.as_tensor(buf.returns).flatten()
    # our vf_coef weighs half the squared error: sb3's 0.5 is 1.0 here
    ours_loss = ppo_loss(logprobs, old_logprobs, normalized, values, old_values, returns, entropy, 0.2, False, 0.0, 1.0)
    ours_loss.loss.backward()

    # sb3-contrib's train() on its one minibatch. It rotates the rollout at a random step first, which cuts one
    # more sequence there (restarted from the memory stored at collection); without the cut its sequences are ours.
    monkeypatch.setattr(np.random, "randint", lambda *args, **kwargs: 0)
    (data,) = list(buf.get(STEPS * ENVS))
    mask = data.mask > 1e-8
    v, lp, ent = model.policy.evaluate_actions(
        data.observations, data.actions.long().flatten(), data.lstm_states, data.episode_starts
    )
    adv = (data.advantages - data.advantages[mask].mean()) / (data.advantages[mask].std() + 1e-8)
    ratio = torch.exp(lp - data.old_log_prob)
    policy_loss = -torch.mean(torch.min(adv * ratio, adv * torch.clamp(ratio, 0.8, 1.2))[mask])
    value_loss = torch.mean(((data.returns - v.flatten()) ** 2)[mask])
    sb3_loss = policy_loss - 0.0 * torch.mean(ent[mask]) + 0.5 * value_loss
    sb3_loss.backward()

    torch.testing.assert_close(ours_loss.loss, sb3_loss, rtol=1e-5, atol=0)
    grads = dict(ours.named_parameters())
    for name, module in theirs.items():
        for k, param in module.named_parameters():
            scale = param.grad.abs().max()
            torch.testing.assert_close(grads[f"{name}.{k}"].grad / scale, param.grad / scale, rtol=0, atol=1e-5)
