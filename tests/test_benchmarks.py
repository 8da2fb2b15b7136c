"""benchmarks/gpu.py runs only where a GPU is lent, rarely: its code paths are kept working here on the
CPU at tiny sizes, so the one prepared run on a GPU does not fail on a renamed API."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT, benchmark_script

pytest.importorskip("ale_py")


def test_gpu_script_counts_transfers_on_cpu(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu.py"), "--smoke-cpu", "--sections", "transfers"]
    subprocess.run([*cmd, "--out", str(tmp_path)], check=True, capture_output=True, timeout=300)
    (result,) = json.loads((tmp_path / "gpu.json").read_text())["transfers"]
    assert result["vector_steps"] == 256
    assert result["htod"] == result["dtoh"] == 0  # on the CPU nothing crosses
    assert "### Host-device copies" in (tmp_path / "gpu.md").read_text()


def test_population_cost_script_times_a_sac_update_and_a_collection_step() -> None:
    costs = benchmark_script("population_cost").sac_costs(members=2, calls=1, repeats=1, batch=8)
    assert set(costs) == {"update_ms", "act_ms"} and all(ms > 0 for ms in costs.values())


def test_population_cost_script_times_a_ppo_update_and_its_arithmetic_floor() -> None:
    module = benchmark_script("population_cost")
    costs = [module.ppo_costs(members=n, calls=1, repeats=1, batch=8) for n in (1, 2)]
    assert all(set(c) == {"update_ms", "floor_ms"} and all(ms > 0 for ms in c.values()) for c in costs)


@pytest.mark.slow  # four fits, each a fresh process (~40 s)
def test_gpu_script_population_section_on_cpu(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu.py"), "--smoke-cpu", "--sections", "population"]
    subprocess.run([*cmd, "--out", str(tmp_path)], check=True, capture_output=True, timeout=600)
    results = json.loads((tmp_path / "gpu.json").read_text())["population"]
    assert [(r["config"], r["population"]) for r in results] == [
        ("configs/ppo/cartpole.yaml", 1),
        ("configs/ppo/cartpole.yaml", 4),
        ("configs/sac/pendulum.yaml", 1),
        ("configs/sac/pendulum.yaml", 2),
    ]
    assert [len(r["returns"]) for r in results] == [1, 4, 1, 2]
    assert "x |" in (tmp_path / "gpu.md").read_text()  # each population's time over one run's


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_gpu_script_times_the_atari_update(algo: str) -> None:
    r = benchmark_script("gpu").time_update(algo, batch=4, mode="fp32", device="cpu", iters=1)
    assert r["us_per_step"] > 0 and r["algo"] == algo


def test_gpu_script_fit_worker_reports_steady_state_rates() -> None:
    spec = {
        "config": "configs/dqn/atari.yaml",
        "accelerator": "cpu",
        "model": {"total_env_steps": 200, "learning_starts": 100, "buffer_size": 1_000, "train_freq": 1},
        "max_time_s": 600,  # the Trainer's max_time (gpu.py's Pong section runs for the time it has)
    }
    threads = torch.get_num_threads()
    try:
        r = benchmark_script("gpu").fit_worker(spec)  # common.fit_worker, as gpu.py imports it
    finally:
        torch.set_num_threads(threads)  # the worker sets 1 (it is meant for a fresh process)
    assert r["env_steps"] == 200 and r["grad_steps"] == 100  # one per env step after the random fill
    assert r["env_steps_per_s"] > 0 and r["grad_steps_per_s"] > 0
    assert isinstance(r["curve"], list)  # [env steps, training return] per logged step


def test_lightning_overhead_script_pairs_fit_and_plain_steps() -> None:
    """benchmarks/lightning_overhead.py (docs/benchmarks.md's overhead figure) keeps running: the paired
    measurement of both setups and the hook attribution, at a tiny size."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/lightning_overhead.py"), "--rollouts", "4"],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert out.count("Lightning's overhead") == 3
    hooks = next(line for line in out.splitlines() if line.startswith("of which the hooks"))
    for hook in ("on_before_backward", "on_after_backward", "on_before_optimizer_step"):
        assert hook in hooks  # dispatched once per optimizer step, so counted


def test_compare_script_runs_ours_and_the_plain_torch_ppo_on_a_tiny_budget() -> None:
    """benchmarks/compare.py's own-library runners (SB3's is not installed by the dev extra)."""
    compare = benchmark_script("compare")
    import dataclasses

    spec = dataclasses.replace(compare.SPECS["ppo"], total_env_steps=512, eval_every=256)
    threads = torch.get_num_threads()
    try:
        for runner in (compare.run_ours, compare.run_plain):
            r = runner(spec, 0)
            assert r["env_steps"] >= 512 and r["env_steps_per_s"] > 0, runner
    finally:
        torch.set_num_threads(threads)


def test_learning_report_gives_mean_and_iqm_with_intervals_and_plots_the_curves(tmp_path: Path) -> None:
    learning = benchmark_script("learning")
    results = [
        {
            "config": "ppo/hopper",
            "seed": s,
            "env_steps": 1000,
            "final": f,
            "best": f,
            "solve_steps": None,
            "solve_s": None,
            "wall_s": 1.0,
            "curve": [(500, f / 2), (1000, f)],
        }
        for s, f in enumerate([2000.0, 2600.0, 3200.0, 2900.0])
    ]
    table = learning.summary_table(results)
    assert "| `configs/ppo/hopper.yaml` | 4 | 2675.0 [" in table and "| 2410 |" in table  # the zoo's reference
    assert "| SB3 zoo, its eval log (v3, 1 run): " in table  # the published curve at the runs' 1000 env steps
    learning.plot_curves(results, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_make_model_overrides_replace_the_configs_own_values() -> None:
    common = benchmark_script("common")
    from rl_lightning import C51, DQN, TQC, EnvConfig, RecurrentPPO

    init = {"env": EnvConfig(env_id="CartPole-v1"), "learning_rate": 2.5e-4, "run": {"total_env_steps": 500}}
    model = common.make_model(DQN, init, learning_rate=1e-3, total_env_steps=800)
    assert model.hparams.learning_rate == 1e-3 and model.total_env_steps == 800
    # A variant takes its parent's run and replay as **kwargs: the overrides still reach them.
    for variant in (C51, TQC, RecurrentPPO):
        env = EnvConfig(env_id="Pendulum-v1" if variant is TQC else "CartPole-v1")
        model = common.make_model(variant, {**init, "env": env}, total_env_steps=800, eval_episodes=3)
        assert model.total_env_steps == 800 and model.hparams.run.eval_episodes == 3
        if variant is not RecurrentPPO:
            model = common.make_model(variant, {**init, "env": env}, learning_starts=300)
            assert model.hparams.replay.learning_starts == 300


def test_set_overrides_read_numbers_as_numbers():
    learning = benchmark_script("learning")
    items = ["learning_rate=3e-4", "hidden_sizes=[64, 64]", "activation=tanh", "anneal_lr=true"]
    parsed = learning.parse_overrides(items)
    assert parsed == {"learning_rate": 3e-4, "hidden_sizes": [64, 64], "activation": "tanh", "anneal_lr": True}


def test_gpu_script_graph_runs_report_their_update_graphs() -> None:
    from types import SimpleNamespace

    gpu = benchmark_script("gpu")
    specs = dict(gpu.graph_specs(SimpleNamespace(gpu=False)))
    assert {name.split(",")[0] for name in specs} == {
        "PPO Pong (envpool)",
        "DQN Pong (envpool)",
        "PQN Pong (envpool)",
        "Rainbow Pong (envpool)",
        "A2C CartPole",
        "SAC HalfCheetah",
        "TD3 HalfCheetah",
        "CrossQ HalfCheetah (2048-wide critics)",
        "TQC HalfCheetah",
    }
    # On the GPU, CrossQ's critics are the config's (the zoo's 2048 wide); the CPU smoke run narrows them.
    on_gpu = dict(gpu.graph_specs(SimpleNamespace(gpu=True)))
    assert "critic_hidden_sizes" not in on_gpu["CrossQ HalfCheetah (2048-wide critics), eager"]["model"]
    assert "[2048, 2048]" in (ROOT / "configs/crossq/halfcheetah.yaml").read_text()
    threads = torch.get_num_threads()
    try:
        r = gpu.fit_worker(specs["A2C CartPole, CUDA graphs"])
    finally:
        torch.set_num_threads(threads)
    captured, replayed, eager, failed = r["graphs"]["rollout_update"]
    assert (captured, replayed, failed) == (0, 0, False) and eager == r["grad_steps"] > 0  # CPU: eager updates


def test_published_curves_are_read_at_the_runs_env_steps() -> None:
    """The shipped reference curves: the TD3 paper's 10 seeds on Hopper at 300k env steps (their 61st
    evaluation), interpolated between evaluations, and nothing for a config without published curves."""
    learning = benchmark_script("learning")
    paper = next(r for r in learning.REFERENCE_CURVES["td3/hopper"] if r["source"] == "td3_paper")
    assert len(paper["runs"]) == 10 and paper["steps"][60] == 300_000
    at_300k = [run[60] for run in paper["runs"]]
    text = learning.published_at("td3/hopper", 300_000)
    mean = sum(at_300k) / 10
    assert f"TD3 paper (v1, 10 seeds): {mean:,.0f} [{min(at_300k):,.0f}, {max(at_300k):,.0f}]" in text
    assert "SB3 zoo, its eval log (v3, 1 run): " in text
    halfway = learning.published_at("td3/hopper", 302_500)
    expected = sum((run[60] + run[61]) / 2 for run in paper["runs"]) / 10
    assert f"TD3 paper (v1, 10 seeds): {expected:,.0f} [" in halfway
    assert learning.published_at("ppo/cartpole", 50_000) == "-"


def test_update_time_script_runs_each_algorithms_update() -> None:
    update_time = benchmark_script("update_time")
    for name in ("sac", "td3", "tqc", "crossq"):
        step = update_time.update_of(name)
        step()
        step()
    update_time.update_of("tqc", "configs/tqc/mountaincarcontinuous.yaml")()  # a config's settings (batch 512)


def test_update_time_script_runs_sb3s_update_on_one_fixed_batch_and_counts_matrix_products() -> None:
    pytest.importorskip("sb3_contrib", reason="the bench extra (stable-baselines3, sb3-contrib)")
    update_time = benchmark_script("update_time")
    step, per_call = update_time.sb3_update_of("sac")
    step()
    assert per_call == 1
    # Its SB3 settings repeat compare.py's Pendulum specs (a script imports no other script): they must agree.
    compare = benchmark_script("compare")
    for name, (module, algo, kwargs, gradient_steps) in update_time.SB3.items():
        spec = compare.SPECS[name]
        assert (spec.sb3_module, spec.sb3_algo) == (module, algo)
        assert spec.sb3_kwargs.get("gradient_steps", 1) == gradient_steps
        assert {k: spec.sb3_kwargs[k] for k in kwargs} == kwargs
    share = update_time.gemm_share(step, 2)
    assert 0.2 < share < 1.0  # most of a 256-256 update is matrix products
    assert 0.2 < update_time.gemm_share(update_time.update_of("sac"), 2) < 1.0


def test_update_time_script_times_the_updates_inside_a_fit_of_both_libraries() -> None:
    pytest.importorskip("sb3_contrib", reason="the bench extra (stable-baselines3, sb3-contrib)")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "update_time.py"), "--algos", "sac", "--sb3", "--in-fit", "180"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    line = out.strip().splitlines()[-1]  # "sac: ours A ms/update inside a fit of 180 env steps (median), SB3 B: xR"
    ours = float(line.split("ours ")[1].split(" ms")[0])
    theirs = float(line.split("SB3 ")[1].split(":")[0])
    assert 0 < ours < 1000 and 0 < theirs < 1000
    ratio = float(line.rsplit(": x", 1)[1])  # of the unrounded times
    assert abs(ratio - theirs / ours) < 0.01 and "inside a fit of 180 env steps" in line
    refused = subprocess.run([*cmd[:2], "--algos", "td3", "--in-fit", "180"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--in-fit times sac, tqc and crossq" in refused.stderr


def test_every_compare_spec_names_a_reference_algorithm_and_one_of_our_configs() -> None:
    pytest.importorskip("sb3_contrib", reason="the bench extra (stable-baselines3, sb3-contrib)")
    compare = benchmark_script("compare")
    for name, spec in compare.SPECS.items():
        assert hasattr(importlib.import_module(spec.sb3_module), spec.sb3_algo), name
        assert (ROOT / spec.config).is_file(), name


@pytest.mark.parametrize("name", ["crossq_mountaincar", "tqc_mountaincar"])
def test_a_mountaincar_spec_gives_sb3_contrib_the_settings_of_our_config(name: str) -> None:
    """A reference run must have the very hyperparameters of our config (each of its settings stated there)."""
    import yaml

    compare = benchmark_script("compare")
    spec = compare.SPECS[name]
    ours = yaml.safe_load((ROOT / spec.config).read_text())["model"]["init_args"]
    assert spec.env_id == ours["env"]["env_id"] and spec.total_env_steps == ours["run"]["total_env_steps"]
    sb3 = dict(spec.sb3_kwargs)
    policy = sb3.pop("policy_kwargs")
    for key, value in sb3.items():
        assert value == (ours["replay"] if key in ours["replay"] else ours)[key], key
    assert policy["log_std_init"] == ours["log_std_init"] and policy["net_arch"] == ours["hidden_sizes"]
    assert policy["net_arch"] == ours.get("critic_hidden_sizes", ours["hidden_sizes"])


def test_the_narrow_crossq_lunarlander_spec_gives_both_libraries_256_wide_critics_and_the_configs_settings() -> None:
    """The spec changes our config's critic width only, and gives sb3-contrib the same networks and settings."""
    import yaml

    compare = benchmark_script("compare")
    spec = compare.SPECS["crossq_lunarlander_256"]
    ours = yaml.safe_load((ROOT / spec.config).read_text())["model"]["init_args"]
    assert spec.env_id == ours["env"]["env_id"] and spec.total_env_steps == ours["run"]["total_env_steps"]
    assert {k: spec.sb3_kwargs[k] for k in ours["replay"]} == ours["replay"]
    common = benchmark_script("common")
    cls, init, _ = common.load_config(spec.config)
    model = common.make_model(cls, init, **spec.overrides)
    assert tuple(model.hparams.critic_hidden_sizes) == tuple(spec.sb3_kwargs["policy_kwargs"]["net_arch"]["qf"])
    assert tuple(model.hparams.hidden_sizes) == tuple(spec.sb3_kwargs["policy_kwargs"]["net_arch"]["pi"])
    assert spec.overrides == {"critic_hidden_sizes": [256, 256]}  # nothing else of the config changed


def test_compare_refuses_an_unknown_kind_in_one_line() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/compare.py"), "--kinds", "sb3,sb4"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "--kinds: no runner ['sb4']; choose from" in out.stderr.splitlines()[-1]


def test_population_script_fits_a_population_and_a_single_run() -> None:
    """benchmarks/population.py's worker (docs/benchmarks.md's populations table) at a tiny budget."""
    script = benchmark_script("population")
    spec = {"config": "configs/ppo/cartpole.yaml", "total_env_steps": 512, "backend": None, "seed": 1}
    members = script.worker({**spec, "population": 2})
    single = script.worker({**spec, "population": 1})
    assert members["env_steps"] == single["env_steps"] == 512 and len(members["returns"]) == 2
    assert len(single["returns"]) == 1 and members["wall_s"] > members["train_s"] > 0
    assert script.mann_whitney_p([1.0, 2.0], [1.0, 2.0]) == 1.0
