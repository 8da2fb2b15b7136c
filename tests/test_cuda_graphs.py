"""CUDA graphs for the updates (rl_lightning.cuda_graphs, the CUDAGraphs callback): everything but the
capture itself, which needs a CUDA device (benchmarks/gpu.py measures it there)."""

from types import SimpleNamespace

import lightning as L
import pytest
import torch

from rl_lightning.callbacks import CUDAGraphs
from rl_lightning.cuda_graphs import GraphedUpdate
from rl_lightning.errors import ConfigError
from rl_lightning.optim import make_adam
from tests.helpers import GOLDEN_CASES, ROOT, TINY_RUN, assert_matches_golden, run_golden_case

GRAPHED = ["ppo", "a2c", "dqn", "dqn_double_dueling_nstep_per", "sac", "td3", "ddpg"]


@pytest.mark.parametrize("name", GRAPHED)
def test_the_graphed_update_path_trains_exactly_as_the_goldens(name):
    # With CUDA graphs on, every update goes through run_update and the plain-torch optimizer step
    # (on CPU without capture): same parameters, replay contents, optimizer-step count and returns.
    assert_matches_golden(name, run_golden_case(name, callbacks=[CUDAGraphs()]))


def test_graphed_update_runs_eagerly_off_cuda_and_returns_what_the_update_returns():
    calls = []

    def update(x, y):
        calls.append(1)
        return x + y, (x * y).sum()

    graphed = GraphedUpdate(update)
    out = graphed(torch.ones(3), torch.full((3,), 2.0))
    assert torch.equal(out[0], torch.full((3,), 3.0)) and out[1].item() == 6.0
    assert (graphed.eager_calls, graphed.captures, graphed.replays, len(calls)) == (1, 0, 0, 1)


def trainer_stub(world_size=1, precision="32-true", device="cpu"):
    return SimpleNamespace(
        world_size=world_size, precision=precision, strategy=SimpleNamespace(root_device=torch.device(device))
    )


def test_cuda_graphs_refuse_ddp_and_float16_with_the_reason():
    module = SimpleNamespace(enable_cuda_graphs=lambda: None)
    with pytest.raises(ConfigError, match="DDP: a replayed update would skip DDP's gradient all-reduce"):
        CUDAGraphs().setup(trainer_stub(world_size=2), module, "fit")
    with pytest.raises(ConfigError, match="16-mixed: its gradient scaler syncs with the host"):
        CUDAGraphs().setup(trainer_stub(precision="16-mixed"), module, "fit")


def test_on_cpu_one_line_says_the_updates_run_eagerly(caplog):
    enabled = []
    with caplog.at_level("INFO"):
        CUDAGraphs().setup(trainer_stub(), SimpleNamespace(enable_cuda_graphs=lambda: enabled.append(1)), "fit")
    assert enabled == [1]
    assert "no CUDA device (this run is on cpu); the updates run eagerly" in caplog.text


def test_capturable_adam_only_on_cuda_and_annealing_writes_a_tensor_learning_rate_in_place():
    param = torch.nn.Parameter(torch.zeros(2))
    assert not make_adam([param], 1e-3, 1e-8, fused=True, capturable=True).defaults["capturable"]  # CPU: as ever
    model = GOLDEN_CASES["ppo"]()
    opt = torch.optim.Adam([param], lr=torch.tensor(1e-3), capturable=False)
    lr = opt.param_groups[0]["lr"]
    model.env_steps = model.total_env_steps // 2
    model.anneal_learning_rate(opt, 1e-3)
    assert opt.param_groups[0]["lr"] is lr and lr.item() == pytest.approx(5e-4)


def test_cli_switch_and_preset(tmp_path, cli_here):
    configs = (
        "--config",
        str(ROOT / "configs/ppo/cartpole.yaml"),
        "--config",
        str(ROOT / "configs/trainer/cudagraphs.yaml"),
    )
    out = cli_here("fit", *configs, *TINY_RUN)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cuda_graphs: no CUDA device (this run is on cpu)" in out.stdout + out.stderr


def test_on_policy_collection_acts_through_the_graphed_policy_except_with_gsde():
    from rl_lightning import PPO, EnvConfig, RunConfig
    from tests.helpers import quick_trainer

    def fit(**kwargs):
        model = PPO(
            env=EnvConfig(kwargs.pop("env_id", "CartPole-v1"), num_envs=2, seed=0),
            run=RunConfig(total_env_steps=64, env_steps_per_epoch=64, eval_episodes=1),
            num_steps=16,
            num_minibatches=2,
            update_epochs=1,
            **kwargs,
        )
        quick_trainer(callbacks=[CUDAGraphs()]).fit(model)
        return {name: g.eager_calls for name, g in model.graphs.graphed.items()}

    assert fit() == {"act": 2 * 16, "minibatch_update": 2 * 2}  # 2 rollouts of 16 vector steps
    assert "act" not in fit(env_id="Pendulum-v1", use_sde=True)


def test_torch_env_rollouts_run_each_vector_step_through_one_graphed_step_in_place():
    from rl_lightning import PPO, EnvConfig, RunConfig
    from rl_lightning.envs.torch import make_torch_env
    from tests.helpers import quick_trainer

    # The env keeps its state tensors (a captured step replays on them) through steps and resets.
    env = make_torch_env("CartPole-v1", 4)
    env.reset(seed=0)
    tensors = (env.state, env.episode_steps, env.episode_returns)
    for _ in range(30):
        env.step(torch.zeros(4, dtype=torch.int64))
    env.reset(seed=1)
    assert all(a is b for a, b in zip(tensors, (env.state, env.episode_steps, env.episode_returns), strict=True))

    model = PPO(
        env=EnvConfig("CartPole-v1", num_envs=16, backend="torch", seed=0),
        run=RunConfig(total_env_steps=16 * 8 * 3, env_steps_per_epoch=16 * 8 * 3, eval_episodes=1),
        num_steps=8,
        num_minibatches=2,
        update_epochs=1,
    )
    seen = []

    class Collector(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            seen.append(pl_module.experience.collector)

    quick_trainer(callbacks=[CUDAGraphs(), Collector()]).fit(model)
    _, step = seen[-1]._graphed_step
    assert step.eager_calls == 3 * 8 and step.generators == [seen[-1].envs.generator]  # CPU: eager
    assert "act" not in model.graphs.graphed  # the whole step is graphed, the policy's act inside it
