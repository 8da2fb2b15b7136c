"""Mixed precision: autocast covers collection and the training step; output layers, log-probs,
returns and losses stay float32."""

import warnings

import lightning as L
import pytest
import torch

import rl_lightning.algorithms.base as base_module
import rl_lightning.algorithms.ppo as ppo_module
from rl_lightning import DQN, PPO, EnvConfig, RecurrentPPO
from tests.helpers import CARTPOLE_PPO, build, quick_trainer, tiny_sac
from tests.helpers import tiny_td3 as tiny


def test_bf16_mixed_autocasts_collection_and_training_but_keeps_log_probs_targets_and_losses_float32(monkeypatch):
    model = build(
        PPO,
        env=EnvConfig("CartPole-v1", num_envs=4, seed=0),
        total_env_steps=256,
        num_steps=16,
        env_steps_per_epoch=128,
        eval_episodes=1,
    )
    seen = {"rollouts": 0, "losses": 0}
    original_collect, original_loss = model.collect_rollout, ppo_module.ppo_loss

    def collect(policy):
        assert torch.is_autocast_enabled("cpu")  # collection runs under the same autocast as training ...
        rollout = original_collect(policy)
        assert all(t.dtype in (torch.float32, torch.long, torch.bool) for t in rollout)  # ... its outputs are not
        seen["rollouts"] += 1
        return rollout

    def loss(*args, **kwargs):
        assert torch.is_autocast_enabled("cpu")  # the training step runs under autocast ...
        assert all(a.dtype == torch.float32 for a in args if isinstance(a, torch.Tensor))  # ... the loss does not
        seen["losses"] += 1
        out = original_loss(*args, **kwargs)
        assert out.loss.dtype == torch.float32
        return out

    model.collect_rollout = collect
    monkeypatch.setattr(ppo_module, "ppo_loss", loss)
    quick_trainer(precision="bf16-mixed").fit(model)
    assert seen["rollouts"] == 4 and seen["losses"] == 4 * 4 * 4
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())


def test_output_layers_and_log_probs_are_float32_under_autocast():
    model = build(PPO, env=EnvConfig("CartPole-v1", num_envs=2, seed=0), total_env_steps=64, num_steps=8)
    model.build_for_env()
    obs, actions = torch.randn(6, 4), torch.randint(0, 2, (6,))
    with torch.no_grad():
        model.agent.critic[-1].bias.fill_(50.0)  # a value bfloat16 would round to a multiple of 0.25
        logp32, _, v32 = model.agent.evaluate(obs, actions)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logp, entropy, values = model.agent.evaluate(obs, actions)
            hidden = model.agent.actor_body(obs)
    assert hidden.dtype == torch.bfloat16  # hidden layers do run in low precision
    assert logp.dtype == entropy.dtype == values.dtype == torch.float32
    # Only the hidden features' rounding is left: far below bfloat16's 0.25 steps at 50.
    assert (values - v32).abs().max() < 0.05 and (logp - logp32).abs().max() < 0.01


def test_float32_linear_is_a_plain_linear_without_autocast():
    from rl_lightning.networks.mlp import Float32Linear

    layer, plain = Float32Linear(3, 2), torch.nn.Linear(3, 2)
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(4, 3)
    torch.testing.assert_close(layer(x), plain(x), rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x.bfloat16()).dtype == torch.float32 and plain(x).dtype == torch.bfloat16


def tiny_dqn(**kw) -> DQN:
    args = dict(env=EnvConfig("CartPole-v1", seed=0), total_env_steps=300, learning_starts=100, train_freq=4)
    return build(DQN, **args, gradient_steps=1, env_steps_per_epoch=300, eval_episodes=1, **kw)


@pytest.mark.parametrize(
    ("make", "fused"),
    [
        (tiny_sac, True),  # never clips: the fused kernel stays (TD3 1.36x, SAC 1.12x in bf16: docs/benchmarks.md)
        (tiny, True),  # TD3
        (tiny_dqn, False),  # clips at max_grad_norm=10
        (lambda: tiny_dqn(max_grad_norm=None), True),
    ],
    ids=["SAC", "TD3", "DQN-clipped", "DQN-unclipped"],
)
def test_bf16_mixed_keeps_fused_adam_unless_the_algorithm_clips_gradients(make, fused):
    # Lightning's mixed-precision plugin refuses to clip the gradients of a fused optimizer: such
    # a run would fail at its first clip_gradients; the others keep the fused kernel.
    model = make()
    trainer = quick_trainer(precision="bf16-mixed")
    trainer.fit(model)
    assert [opt.defaults["fused"] for opt in trainer.optimizers] == [fused] * len(trainer.optimizers)
    assert trainer.global_step > 0  # optimizer steps were taken
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_16_mixed_on_cpu_warns_that_it_runs_bf16():
    # The Python API gets Lightning's own message; the CLI refuses (tests/test_cli.py).
    with pytest.warns(UserWarning, match=r"precision='16-mixed'.*not supported on CPU.*bf16-mixed"):
        trainer = quick_trainer(precision="16-mixed")
    assert trainer.precision == "bf16-mixed"


@pytest.mark.parametrize("native", [False, True], ids=["emulated", "native"])
def test_bf16_mixed_on_a_cpu_that_emulates_bfloat16_warns_before_training(monkeypatch, native):
    # On an AVX2 CPU oneDNN emulates bfloat16 products: SAC's and TD3's updates ran 12x slower than in float32.
    monkeypatch.setattr(base_module, "cpu_computes_bfloat16", lambda: native)
    model = tiny(total_env_steps=64, learning_starts=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quick_trainer(precision="bf16-mixed", limit_val_batches=0).fit(model)
    said = [str(w.message) for w in caught if "without bfloat16 instructions" in str(w.message)]
    assert len(said) == (0 if native else 1)
    assert all("--trainer.precision 32-true" in line for line in said)  # the way forward
    assert model.env_steps == 64  # a warning, not a refusal: it trains


def test_recurrent_ppo_trains_in_bf16_mixed_with_a_float32_memory():
    """oneDNN has no bfloat16 LSTM with a float32 state: the memories run in float32, the MLPs after them
    in bfloat16 (before, collection failed at its first step)."""
    L.seed_everything(0)
    model = build(
        RecurrentPPO,
        env=EnvConfig("CartPole-v1", num_envs=4, seed=0),
        total_env_steps=256,
        num_steps=16,
        num_minibatches=2,
        hidden_size=16,
        env_steps_per_epoch=128,
        eval_episodes=1,
    )
    quick_trainer(precision="bf16-mixed").fit(model)
    assert model.env_steps == 256 and model.experience.memory.dtype == torch.float32
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        memory = model.agent.initial_state(3)
        actor, critic, memory = model.agent._run(torch.randn(5, 3, 4, dtype=torch.bfloat16), memory)
        hidden = model.agent.body.actor_body(actor[-1])
    assert actor.dtype == critic.dtype == memory.dtype == torch.float32 and hidden.dtype == torch.bfloat16


@pytest.mark.slow
def test_ppo_solves_cartpole_in_bf16_mixed():
    L.seed_everything(0)
    model = build(PPO, env=EnvConfig("CartPole-v1", num_envs=8), total_env_steps=100_000, **CARTPOLE_PPO)
    trainer = quick_trainer(precision="bf16-mixed")
    trainer.fit(model)
    assert float(trainer.callback_metrics["val/episode_return"]) >= 475


def test_denormals_flush_to_zero_while_fitting_and_not_after():
    def scaled_denormal() -> float:
        return (torch.tensor([1e-39]) * 1.0).item()  # 1e-39 is below float32's smallest normal number

    seen = []

    class Probe(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(scaled_denormal())

    model = build(
        PPO, env=EnvConfig("CartPole-v1", num_envs=2, seed=0), total_env_steps=64, num_steps=16, eval_episodes=1
    )
    quick_trainer(callbacks=[Probe()]).fit(model)
    assert seen and all(value == 0.0 for value in seen)
    assert scaled_denormal() > 0.0  # restored when fit ends
