"""What the on-policy actor-critics (PPO, A2C, REINFORCE) share beyond ``RLModule``: a module-level
function each assigns as a method, so no base class stands between them and ``RLModule``."""

from __future__ import annotations

from typing import Any

from torch import Tensor


def actor_critic_forward(module: Any, obs: Tensor, deterministic: bool = True) -> Tensor:
    """Actions for raw observations: the mode of the policy, or a sample. The ``forward`` of PPO, A2C
    and REINFORCE (``forward = actor_critic_forward``): ``module.agent``, an ``ActorCritic``, on the
    observations normalized by ``module.obs_rms`` (``None``: as they are)."""
    return module.agent(obs if module.obs_rms is None else module.obs_rms.normalize(obs), deterministic)
