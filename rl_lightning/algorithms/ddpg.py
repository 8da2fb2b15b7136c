"""Deep Deterministic Policy Gradient (DDPG).

Lillicrap et al. 2016, "Continuous control with deep reinforcement learning",
https://arxiv.org/abs/1509.02971, in the simplified form of Fujimoto et al. 2018 ("OurDDPG") that
Stable-Baselines3 and CleanRL implement: Gaussian instead of Ornstein-Uhlenbeck exploration noise,
no batch normalization or weight decay, one learning rate, uniformly random actions for the first
``learning_starts`` env steps.

DDPG is TD3 (``rl_lightning.algorithms.td3``, where the whole algorithm lives) with TD3's three
changes switched off: one critic (``n_critics = 1``), an actor and target update after every critic
update (``policy_frequency = 1``) and no target policy smoothing (``target_policy_noise = 0``). This
class only fixes those; its other arguments and defaults are TD3's (a test keeps them in step).
"""

from __future__ import annotations

from rl_lightning.algorithms.td3 import TD3
from rl_lightning.envs.make import EnvConfig


class DDPG(TD3):
    """DDPG for continuous (``Box``) actions with finite bounds.

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        total_env_steps: Training budget in env steps (all ranks together).
        buffer_size: Replay capacity in transitions, per rank.
        learning_rate: Adam learning rate of the actor and the critic.
        batch_size: Transitions per gradient step.
        gamma: Discount factor, in (0, 1].
        tau: Polyak coefficient of the target networks (``target <- tau * online + (1 - tau) *
            target``; 1.0 copies).
        learning_starts: Env steps of uniformly random actions before the first gradient step (all
            ranks together); at most ``total_env_steps``.
        train_freq: Vector steps per collection phase (``train_freq * env.num_envs`` env steps per
            rank); each phase is followed by ``gradient_steps`` updates.
        gradient_steps: Gradient steps (critic, then actor) after each collection phase.
        phases_per_step: Collection phases (each followed by its updates) per Lightning training step
            (speed only: the run is the same; metrics are logged per training step).
        exploration_noise: Std of the Gaussian noise added to the actor's actions during collection,
            relative to half the action range (0.1 adds 10 % of it).
        hidden_sizes: Hidden widths of the actor and of the critic.
        activation: Hidden activation: ``relu``, ``tanh``, ``elu`` or ``silu``.
        save_replay_buffer: Save the replay buffer with checkpoints (one of 64 MiB or more in a side
            file ``<checkpoint>.replay-<env step>.pt`` next to it), so a resumed run continues with the
            same contents instead of refilling it.
        buffer_on_cpu: Keep the replay buffer in host memory even when training on an accelerator.
        env_steps_per_epoch: Env steps per Lightning epoch (all ranks); one evaluation per epoch.
        eval_episodes: Deterministic evaluation episodes (no exploration noise) per evaluation.
    """

    n_critics = 1

    def __init__(
        self,
        env: EnvConfig | None = None,
        total_env_steps: int = 1_000_000,
        buffer_size: int = 1_000_000,
        learning_rate: float = 1e-3,
        batch_size: int = 256,
        gamma: float = 0.99,
        tau: float = 0.005,
        learning_starts: int = 100,
        train_freq: int = 1,
        gradient_steps: int = 1,
        phases_per_step: int = 10,
        exploration_noise: float = 0.1,
        hidden_sizes: tuple[int, ...] = (400, 300),
        activation: str = "relu",
        save_replay_buffer: bool = False,
        buffer_on_cpu: bool = False,
        env_steps_per_epoch: int = 10_000,
        eval_episodes: int = 20,
    ) -> None:
        super().__init__(
            env=env,
            total_env_steps=total_env_steps,
            buffer_size=buffer_size,
            learning_rate=learning_rate,
            batch_size=batch_size,
            gamma=gamma,
            tau=tau,
            learning_starts=learning_starts,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            phases_per_step=phases_per_step,
            exploration_noise=exploration_noise,
            policy_frequency=1,  # no delayed policy updates
            target_policy_noise=0.0,  # no target policy smoothing
            target_noise_clip=0.0,
            hidden_sizes=hidden_sizes,
            activation=activation,
            save_replay_buffer=save_replay_buffer,
            buffer_on_cpu=buffer_on_cpu,
            env_steps_per_epoch=env_steps_per_epoch,
            eval_episodes=eval_episodes,
        )
