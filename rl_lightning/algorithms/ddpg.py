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
from rl_lightning.config import CONTINUOUS_CONTROL_REPLAY, DEFAULT_RUN, ReplayConfig, RunConfig
from rl_lightning.envs.make import EnvConfig
from rl_lightning.exploration import NoiseType
from rl_lightning.networks.mlp import Activation


class DDPG(TD3):
    """DDPG for continuous (``Box``) actions with finite bounds.

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        run: Budget (``total_env_steps``) and evaluation rhythm.
        replay: Replay buffer, warm-up and the rhythm of collection phases and gradient steps.
        learning_rate: Adam learning rate of the actor and the critic.
        gamma: Discount factor, in (0, 1].
        tau: Polyak coefficient of the target networks (``target <- tau * online + (1 - tau) *
            target``; 1.0 copies).
        exploration_noise: Scale (sigma) of the noise added to the actor's actions during collection,
            relative to half the action range (0.1 adds 10 % of it).
        noise_type: ``normal`` (i.i.d. Gaussian), ``ornstein_uhlenbeck`` (DDPG's original, Lillicrap et
            al. 2016) or ``pink`` (1/f colored noise over each episode); see ``rl_lightning.exploration``.
        hidden_sizes: Hidden widths of the actor and of the critic.
        activation: Hidden activation of the MLPs.
    """

    n_critics = 1

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
        replay: ReplayConfig = CONTINUOUS_CONTROL_REPLAY,
        learning_rate: float = 1e-3,
        gamma: float = 0.99,
        tau: float = 0.005,
        exploration_noise: float = 0.1,
        noise_type: NoiseType = "normal",
        hidden_sizes: tuple[int, ...] = (400, 300),
        activation: Activation = "relu",
    ) -> None:
        super().__init__(
            env=env,
            run=run,
            replay=replay,
            learning_rate=learning_rate,
            gamma=gamma,
            tau=tau,
            exploration_noise=exploration_noise,
            noise_type=noise_type,
            policy_frequency=1,  # no delayed policy updates
            target_policy_noise=0.0,  # no target policy smoothing
            target_noise_clip=0.0,
            hidden_sizes=hidden_sizes,
            activation=activation,
        )
