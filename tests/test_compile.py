"""``compile: true``: the CompileNetworks callback compiles the networks in place."""

import pytest
import torch

from rl_lightning import PPO, EnvConfig
from rl_lightning.callbacks import CompileNetworks
from tests.helpers import CARTPOLE_PPO, build, quick_trainer


def tiny_ppo(**kw) -> PPO:
    args = dict(env=EnvConfig("CartPole-v1", num_envs=4, seed=0), num_steps=16, env_steps_per_epoch=128)
    return build(PPO, **{**args, "total_env_steps": 128, "eval_episodes": 1, **kw})


def test_compile_covers_every_entry_point_and_keeps_checkpoints_compatible(tmp_path):
    model = tiny_ppo()
    trainer = quick_trainer(callbacks=[CompileNetworks(backend="eager")])  # eager: traces, no codegen (fast)
    trainer.fit(model)
    for name in ("act", "evaluate", "value", "forward"):
        assert hasattr(getattr(model.agent, name), "_torchdynamo_orig_callable"), name
    # PPO compiles its whole minibatch loss too (forward, objective and, through AOTAutograd, backward).
    assert hasattr(model.minibatch_loss, "_torchdynamo_orig_callable")
    keys = set(model.state_dict())
    assert keys and not any("_orig_mod" in k for k in keys)
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    plain = PPO.load_from_checkpoint(tmp_path / "c.ckpt")
    assert set(plain.state_dict()) == keys
    obs = torch.randn(5, 4)
    torch.testing.assert_close(plain(obs), model(obs))


def test_compile_networks_runs_once_per_module():
    model = tiny_ppo()
    trainer = quick_trainer(callbacks=[CompileNetworks(backend="eager")])
    trainer.fit(model)
    act = model.agent.act
    model.compile_networks(backend="eager")
    assert model.agent.act is act


@pytest.mark.slow
def test_compiled_ppo_learns_cartpole():
    # The solve test of tests/test_learning.py, with the networks compiled by inductor (whose random
    # numbers differ from eager's: a different trajectory from the same seed).
    import lightning as L

    L.seed_everything(0)
    model = build(PPO, env=EnvConfig("CartPole-v1", num_envs=8), total_env_steps=100_000, **CARTPOLE_PPO)
    trainer = quick_trainer(callbacks=[CompileNetworks()])
    trainer.fit(model)
    assert float(trainer.callback_metrics["val/episode_return"]) >= 475


def test_default_compile_networks_compiles_each_network_forward():
    from rl_lightning import RLModule
    from rl_lightning.networks.mlp import mlp

    class Toy(RLModule):
        def __init__(self):
            super().__init__(None, None)
            self.q_net = mlp(4, (8,), 2)

    toy = Toy()
    x = torch.randn(3, 4)
    expected = toy.q_net(x)
    toy.compile_networks(backend="eager")
    assert toy.q_net._compiled_call_impl is not None  # nn.Module.compile: forward, in place
    assert toy.eval_return._compiled_call_impl is None  # metrics are left alone
    torch.testing.assert_close(toy.q_net(x), expected)
    assert set(toy.state_dict()) == {"q_net.0.weight", "q_net.0.bias", "q_net.2.weight", "q_net.2.bias"}
