"""Deep Deterministic Policy Gradient (DDPG).

Lillicrap et al. 2016, "Continuous control with deep reinforcement learning",
https://arxiv.org/abs/1509.02971, in the simplified form of Fujimoto et al. 2018 ("OurDDPG") that
Stable-Baselines3 and CleanRL implement: Gaussian instead of Ornstein-Uhlenbeck exploration noise,
no batch normalization or weight decay, one learning rate, uniformly random actions for the first
``learning_starts`` env steps.

DDPG is TD3 (``rl_lightning.algorithms.td3``, where the whole algorithm lives) with TD3's three
changes switched off: one critic (``n_critics = 1``), an actor and target update after every critic
update (``policy_frequency = 1``) and no target policy smoothing (``target_policy_noise = 0``). This
class only fixes those; its other arguments, defaults and their descriptions are TD3's (through
``**kwargs``, which the CLI resolves).
"""

from __future__ import annotations

from typing import Any

from rl_lightning.algorithms.td3 import TD3


class DDPG(TD3):
    """DDPG for continuous (``Box``) actions with finite bounds.

    Its arguments are TD3's, described there, less the three it fixes (``policy_frequency``,
    ``target_policy_noise``, ``target_noise_clip``).
    """

    n_critics = 1

    def __init__(self, **kwargs: Any) -> None:
        # TD3's changes switched off: no delayed policy updates, no target policy smoothing.
        super().__init__(policy_frequency=1, target_policy_noise=0.0, target_noise_clip=0.0, **kwargs)
