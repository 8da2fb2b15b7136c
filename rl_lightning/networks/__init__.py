from rl_lightning.networks.mlp import layer_init, mlp
from rl_lightning.networks.policies import ActorCritic, CategoricalHead, DiagGaussianHead

__all__ = ["ActorCritic", "CategoricalHead", "DiagGaussianHead", "layer_init", "mlp"]
