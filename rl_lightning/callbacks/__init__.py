from rl_lightning.callbacks.compile import CompileNetworks

__all__ = ["CompileNetworks"]
