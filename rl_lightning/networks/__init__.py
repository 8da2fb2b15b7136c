from rl_lightning.networks.cnn import MinAtarCNN, NatureCNN
from rl_lightning.networks.mlp import layer_init, mlp
from rl_lightning.networks.noisy import NoisyLinear
from rl_lightning.networks.policies import ActorCritic, CategoricalHead, DiagGaussianHead
from rl_lightning.networks.q_networks import QNetwork
from rl_lightning.networks.utils import polyak_update

__all__ = [
    "ActorCritic",
    "CategoricalHead",
    "DiagGaussianHead",
    "MinAtarCNN",
    "NatureCNN",
    "NoisyLinear",
    "QNetwork",
    "layer_init",
    "mlp",
    "polyak_update",
]
