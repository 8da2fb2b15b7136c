"""The registry of env backends: ``env.backend`` names one of ``BACKENDS``, and ``rl_lightning.envs.make``
looks it up there, nowhere else. A new backend is one module implementing ``EnvBackend``
(``rl_lightning.envs.backend``) and one line here."""

from __future__ import annotations

import gymnasium as gym

from rl_lightning.envs.backend import EnvBackend
from rl_lightning.envs.envpool_backend import EnvpoolBackend
from rl_lightning.envs.gymnasium_backend import GymnasiumBackend
from rl_lightning.envs.torch_backend import TorchBackend

BACKENDS: dict[str, EnvBackend] = {
    "gymnasium": GymnasiumBackend(),
    "torch": TorchBackend(),
    "envpool": EnvpoolBackend(),
}
DEFAULT_BACKEND = "gymnasium"


def backend_of(envs: gym.vector.VectorEnv) -> EnvBackend:
    """The backend ``envs`` belong to: the ``env_backend`` that ``make_vector_env`` (or the backend's own
    vector env class) sets on them; a vector env built elsewhere is gymnasium's."""
    return BACKENDS[getattr(envs, "env_backend", DEFAULT_BACKEND)]
