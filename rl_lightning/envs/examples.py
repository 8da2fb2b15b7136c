"""Small example envs for the spaces classic control lacks, named in configs as
``rl_lightning.envs.examples:GridReach-v0`` (gymnasium's ``module:EnvId`` form: importing this module
registers them).

``GridReach-v0``: reach a goal cell on a grid. Observations are a ``Dict`` of the agent's and the
goal's positions (each ``Discrete``: one-hot encoded for the networks); actions are ``Discrete(4)``
(up, down, left, right), or ``MultiDiscrete([3, 3])`` (a move of -1, 0 or +1 on each axis) with
``multi_discrete=True``. Reward -0.02 per step and +1 at the goal; episodes are truncated after
``max_steps``. A random policy averages about 0.0 on the default 5x5 grid (half its episodes time out at
-1); a solved one about 0.95.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class GridReach(gym.Env):
    """See the module docstring.

    Args:
        size: Grid side length.
        multi_discrete: ``MultiDiscrete([3, 3])`` actions instead of ``Discrete(4)``.
        max_steps: Steps before the episode is truncated.
    """

    metadata = {"render_modes": []}
    MOVES = np.array([[0, 1], [0, -1], [-1, 0], [1, 0]])

    def __init__(self, size: int = 5, multi_discrete: bool = False, max_steps: int = 50) -> None:
        self.size, self.multi_discrete, self.max_steps = size, multi_discrete, max_steps
        cells = gym.spaces.Discrete(size * size)
        self.observation_space = gym.spaces.Dict({"agent": cells, "goal": cells})
        self.action_space = gym.spaces.MultiDiscrete([3, 3]) if multi_discrete else gym.spaces.Discrete(4)

    def _obs(self) -> dict[str, int]:
        return {"agent": int(self.agent @ [1, self.size]), "goal": int(self.goal @ [1, self.size])}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.agent, self.goal = self.np_random.integers(0, self.size, 2), self.np_random.integers(0, self.size, 2)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        move = np.asarray(action) - 1 if self.multi_discrete else self.MOVES[int(action)]
        self.agent = np.clip(self.agent + move, 0, self.size - 1)
        self.t += 1
        reached = bool((self.agent == self.goal).all())
        return self._obs(), (1.0 if reached else -0.02), reached, self.t >= self.max_steps, {}


if "GridReach-v0" not in gym.envs.registry:
    gym.register("GridReach-v0", entry_point=GridReach)
