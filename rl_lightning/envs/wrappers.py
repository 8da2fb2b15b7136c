"""Observation wrappers for ``env.wrappers``.

``MaskVelocity``: the RL Baselines3 Zoo's "NoVel" envs (``rl_zoo3.wrappers.MaskVelocityWrapper``),
partially observed versions of classic control with the velocity entries of the observation zeroed
(or removed): a policy must infer velocities from its memory of past observations
(``RecurrentPPO``). In a config::

    env:
      env_id: CartPole-v1
      wrappers: [rl_lightning.envs.wrappers.MaskVelocity]
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

# Velocity entries of each env's observation, by env name (the id without its version); the zoo's.
VELOCITY_INDICES: dict[str, tuple[int, ...]] = {
    "CartPole": (1, 3),  # cart velocity, pole angular velocity
    "MountainCar": (1,),
    "MountainCarContinuous": (1,),
    "Pendulum": (2,),  # angular velocity
    "LunarLander": (2, 3, 5),  # linear velocities x, y; angular velocity
    "LunarLanderContinuous": (2, 3, 5),
}


class MaskVelocity(gym.ObservationWrapper):
    """The observation without its velocity entries (``VELOCITY_INDICES``): zeroed, as the zoo's
    ``MaskVelocityWrapper`` (the space is unchanged), or with ``remove`` left out of the observation
    (the space shrinks).

    Args:
        env: A CartPole, MountainCar(Continuous), Pendulum or LunarLander(Continuous) env.
        remove: Drop the velocity entries instead of zeroing them.
    """

    def __init__(self, env: gym.Env, remove: bool = False) -> None:
        super().__init__(env)
        name = env.spec.name if env.spec is not None else type(env.unwrapped).__name__
        if name not in VELOCITY_INDICES:
            raise ValueError(f"MaskVelocity knows the velocity entries of {sorted(VELOCITY_INDICES)}, not {name!r}.")
        space = env.observation_space
        self.keep = np.ones(space.shape, dtype=bool)
        self.keep[list(VELOCITY_INDICES[name])] = False
        self.remove = remove
        if remove:
            self.observation_space = gym.spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        if self.remove:
            return observation[self.keep]
        return np.where(self.keep, observation, 0).astype(observation.dtype)
