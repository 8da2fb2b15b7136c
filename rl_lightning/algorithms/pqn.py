"""Parallelised Q-Network (PQN).

Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning", https://arxiv.org/abs/2407.04811;
implementation choices and defaults as in CleanRL's ``pqn.py`` (``pqn_atari_envpool.py`` for Atari).
Q-learning without a replay buffer or a target network: many vector envs decorrelate the data, and
``LayerNorm`` in every hidden layer of the Q-network keeps the bootstrapped regression stable. Each
rollout is collected epsilon-greedily (epsilon decayed linearly over ``exploration_fraction`` of the
budget), its Q(lambda) returns are computed backwards (``q_lambda_returns``), then
``update_epochs x num_minibatches`` minibatch steps regress ``Q(s, a)`` on them (squared error,
gradient-norm clipping, RAdam, learning rate annealed linearly over the budget).

The rollout side is the on-policy one (``Rollouts``): the module is its own policy, whose ``act``
returns epsilon-greedy actions and ``max_a Q(s, a)`` as the "values", and whose ``value`` is
``max_a Q``, so the collector's ``next_values`` are ``max_a Q`` of each transition's true next state
(the final observation where an episode was truncated). The log-probabilities it stores are unused.

One Lightning training step is one rollout and its update, as in PPO.

Deviations: epsilon is updated once per rollout, not per vector step. CleanRL's returns mask only the
bootstrap term at an episode end, not the lambda trace, and treat a time-limit truncation as a
termination; here the trace is cut at every episode end and a truncation bootstraps from
``max_a Q(final observation)``, as the rest of the collection does.
"""

from __future__ import annotations

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor

from rl_lightning.algorithms import on_policy
from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.dqn import epsilon_greedy
from rl_lightning.config import DEFAULT_RUN, RunConfig
from rl_lightning.data.rollout import Rollouts
from rl_lightning.envs.make import EnvConfig
from rl_lightning.networks.mlp import Activation
from rl_lightning.networks.q_networks import QNetwork
from rl_lightning.optim import linear_schedule
from rl_lightning.validation import fraction, on_policy_args, positive


def q_lambda_returns(
    rewards: Tensor,
    next_q_max: Tensor,
    terminated: Tensor,
    dones: Tensor,
    gamma: float,
    q_lambda: float,
) -> Tensor:
    """Q(lambda) returns of a rollout (Peng's, as PQN uses them), all inputs ``[T, N]``, computed backwards.

    ``next_q_max[t]`` is ``max_a Q(s'_t, a)`` of transition ``t``'s true next state (the final
    observation where the episode was truncated). ``terminated`` cuts the bootstrap; ``dones =
    terminated | truncated`` cuts the trace (the next row belongs to a new episode), as does the end
    of the rollout:

        G_t = r_t + gamma * (1 - terminated_t) * ((1 - lambda) * next_q_max_t + lambda * G_{t+1})
        with G_{t+1} := next_q_max_t where done_t or t = T - 1.
    """
    not_terminated = 1.0 - terminated.float()
    returns = torch.zeros_like(rewards)
    next_return = next_q_max[-1]
    for t in reversed(range(rewards.shape[0])):
        trace = torch.where(dones[t], next_q_max[t], next_return)
        mixed = (1.0 - q_lambda) * next_q_max[t] + q_lambda * trace
        next_return = rewards[t] + gamma * not_terminated[t] * mixed
        returns[t] = next_return
    return returns


@on_policy.with_shared_args
class PQN(RLModule):
    """PQN for discrete actions, vector observations (MLP) or images (Nature or MinAtar CNN), every
    hidden layer layer-normalized.

    Args:
        num_steps: Steps per sub-env per rollout; a rollout is ``num_envs * num_steps`` transitions.
        start_e: Exploration epsilon at the start.
        end_e: Exploration epsilon after the decay.
        exploration_fraction: Fraction of ``total_env_steps`` over which epsilon decays linearly.
        q_lambda: Lambda of the Q(lambda) returns, in [0, 1] (0: one-step Q-learning targets).
        learning_rate: RAdam learning rate (the start value when annealed).
        update_epochs: Passes over each rollout.
        num_minibatches: Minibatches per pass; must divide ``num_envs * num_steps``.
        hidden_sizes: Hidden widths of the MLP Q-network (vector observations only).
        layer_norm: ``LayerNorm`` before every hidden activation of the Q-network (what lets PQN do
            without a target network).
        orthogonal_init: Orthogonal initialization of gain sqrt(2) in every layer (CleanRL's PQN);
            ``False`` keeps PyTorch's default.
    """

    action_spaces = (gym.spaces.Discrete,)

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
        num_steps: int = 128,
        start_e: float = 1.0,
        end_e: float = 0.05,
        exploration_fraction: float = 0.5,
        gamma: float = 0.99,
        q_lambda: float = 0.65,
        learning_rate: float = 2.5e-4,
        anneal_lr: bool = True,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        max_grad_norm: float = 10.0,
        hidden_sizes: tuple[int, ...] = (120, 84),
        activation: Activation = "relu",
        layer_norm: bool = True,
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__(env, run)
        on_policy.rollout_epochs(self, num_steps, update_epochs, num_minibatches)
        on_policy_args(num_steps, learning_rate, gamma, hidden_sizes, activation)
        for name in ("q_lambda", "start_e", "end_e", "exploration_fraction"):
            fraction(name, self.hparams[name])
        positive("max_grad_norm", max_grad_norm)

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams
        self.q_net = QNetwork(
            observation_space,
            action_space,
            hp.hidden_sizes,
            hp.activation,
            orthogonal_init=hp.orthogonal_init,
            layer_norm=hp.layer_norm,
        )
        # A tensor, so that acting captured as a CUDA graph reads the current value; derived from the
        # env steps, so not saved.
        self.register_buffer("epsilon", torch.tensor(hp.start_e), persistent=False)

    def build_experience(self) -> Rollouts:
        return Rollouts(self.hparams.num_steps, self.hparams.gamma)

    # ----------------------------------------------------------------------------------- acting
    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Greedy actions, or epsilon-greedy with the current epsilon."""
        greedy = self.q_net(obs).argmax(-1)
        return greedy if deterministic else epsilon_greedy(greedy, int(self.action_space.n), self.epsilon)

    def act(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The collector's policy step: epsilon-greedy actions, (unused) zero log-probabilities and
        ``max_a Q(s, a)`` as the values."""
        q = self.q_net(obs)
        actions = epsilon_greedy(q.argmax(-1), int(self.action_space.n), self.epsilon)
        q_max = q.max(-1).values.float()
        return actions, torch.zeros_like(q_max), q_max

    def value(self, obs: Tensor) -> Tensor:
        """``max_a Q(s, a)``: what the collector bootstraps truncated episodes and the rollout's end from."""
        return self.q_net(obs).max(-1).values.float()

    # --------------------------------------------------------------------------------- training
    def training_step(self, iterations: int, batch_idx: int) -> Tensor:
        """``iterations`` (always 1 here) rollouts, each followed by its update epochs."""
        hp = self.hparams
        opt = self.optimizers()
        logging = self.should_log()
        for _ in self.within_budget(iterations):
            decay_steps = hp.exploration_fraction * self.total_env_steps
            self.epsilon.fill_(linear_schedule(hp.start_e, hp.end_e, decay_steps, self.env_steps))
            rollout = self.collect_rollout(self)
            returns = q_lambda_returns(
                rollout.rewards,
                rollout.next_values,
                rollout.terminated,
                rollout.terminated | rollout.truncated,
                hp.gamma,
                hp.q_lambda,
            )
            obs, actions, returns = (x.flatten(0, 1) for x in (rollout.obs, rollout.actions, returns))
            if hp.anneal_lr:
                self.anneal_learning_rate(opt, hp.learning_rate)
            stats: list[Tensor] = []
            for _ in range(hp.update_epochs):
                for rows in torch.randperm(self.env_steps_per_iteration, device=self.device).split(self.minibatch_size):
                    loss, q_mean = self.run_update(self.minibatch_update, obs[rows], actions[rows], returns[rows])
                    if logging:
                        stats.append(torch.stack([loss, q_mean]))

        if logging:
            loss_mean, q_mean = torch.stack(stats).mean(0)
            self.log_training(
                {
                    "train/loss": loss_mean,
                    "train/q_values": q_mean,
                    "train/epsilon": float(self.epsilon),
                    "train/learning_rate": opt.param_groups[0]["lr"],
                }
            )
        return loss

    def minibatch_update(self, obs: Tensor, actions: Tensor, returns: Tensor) -> tuple[Tensor, Tensor]:
        """One minibatch's squared error of ``Q(s, a)`` against the Q(lambda) returns and optimizer
        step (one CUDA graph with CUDA graphs on): the loss and the mean Q-value."""
        q = self.q_net(obs).gather(1, actions.long().unsqueeze(1)).squeeze(1).float()
        loss = F.mse_loss(q, returns)
        self.gradient_step(self.optimizers(), loss, self.hparams.max_grad_norm)
        return loss.detach(), q.detach().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # RAdam, as CleanRL's PQN. Capturable on CUDA with CUDA graphs: its step count and learning rate
        # live on the device (anneal_learning_rate updates a tensor learning rate in place).
        lr: float | Tensor = self.hparams.learning_rate
        capturable = self.graphs.enabled and self.device.type == "cuda"
        if capturable:
            lr = torch.tensor(lr, device=self.device)
        return torch.optim.RAdam(self.q_net.parameters(), lr=lr, capturable=capturable)
