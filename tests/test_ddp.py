"""DDP on CPU (gloo): two ranks, two nodes, the CLI preset; resume on one device.

Each run is a subprocess (tests/ddp_script.py, or the CLI) under ``timeout -s KILL``: a DDP hang
then fails the test instead of wedging pytest (Lightning traps SIGTERM, hence KILL).
"""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_lightning.errors import ConfigError
from tests.ddp_members_script import population as split_population
from tests.ddp_script import ALGOS
from tests.helpers import quick_trainer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests/ddp_script.py"
KILL_AFTER_S = 240  # a loaded 2-core machine took 80 s for the two-node run; collectives time out after 60 s


def run(cmd: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for var in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK"):
        env.pop(var, None)
    return subprocess.run(
        ["timeout", "-s", "KILL", str(KILL_AFTER_S), *cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=KILL_AFTER_S + 30,
    )


# With -m slow (the default suite is at its time budget), ~13-24 s each: PPO's variants (target_kl stopping,
# two losses, envpool envs, whose per-sub-env seeding tests/test_envpool.py checks; PPO's plain case stays),
# TD3 (the off-policy path under DDP is SAC's case: collection, replay, sync, resume), RecurrentPPO and the
# populations.
SLOW = {
    "td3",
    "recurrent_ppo",
    "ppo_target_kl",
    "ppo_two_losses",
    "ppo_envpool",
    "ppo_population",
    "ppo_population_diverging",
    "a2c_population",
    "sac_population",
}


@pytest.mark.parametrize("algo", [pytest.param(a, marks=pytest.mark.slow) if a in SLOW else a for a in sorted(ALGOS)])
def test_ddp_two_ranks_stay_in_sync_and_resume_on_one_device(algo, tmp_path):
    out = run([sys.executable, str(SCRIPT), "--algo", algo, "--out", str(tmp_path)])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    r = json.loads((tmp_path / "result.json").read_text())

    # The script asserted gradients equal before every optimizer step and parameters equal after every
    # training step, on both ranks; here: that it did check, and the counters add up.
    assert r["world_size"] == 2
    assert r["grad_checks"] == r["global_step"] > 0 and r["param_checks"] > 0
    assert r["env_steps"] == sum(r["local_env_steps"]) == 1024
    assert r["local_env_steps"][0] == r["local_env_steps"][1]
    assert r["logged_env_steps"] == 1024
    assert r["distinct_first_obs"]  # each rank has its own env seeds
    assert r["ddp_find_unused_parameters"] == ALGOS[algo](1).ddp_find_unused_parameters
    if algo == "ppo_target_kl":  # some rollouts stopped early (8 rollouts x 6 epochs x 2 minibatches without)
        assert r["global_step"] < 8 * 6 * 2

    # Episode returns logged = mean over both ranks' episodes of that step.
    assert r["logged_rollout_returns"].keys() == r["expected_rollout_returns"].keys()
    for step, expected in r["expected_rollout_returns"].items():
        assert r["logged_rollout_returns"][step] == pytest.approx(expected, rel=1e-6)

    # Evaluation: 3 episodes split 2 + 1 over disjoint seeds; the logged mean weights by episode.
    assert r["eval_seeds_per_rank"] == [2, 1] and len(set(r["eval_seeds"])) == 3
    assert r["logged_val_return"] == pytest.approx(r["eval_mean_all_episodes"])

    # Checkpoints: written by rank 0 only; resumable with one device, the global counter continuing.
    assert r["checkpoint_saves_per_rank"][0] > 0 and r["checkpoint_saves_per_rank"][1] == 0
    ckpt = torch.load(r["last_ckpt"], weights_only=True)
    assert ckpt["rl_lightning"]["env_steps"] == 1024 and ckpt["global_step"] == r["global_step"]
    model = ALGOS[algo](1536)
    trainer = quick_trainer()
    trainer.fit(model, ckpt_path=r["last_ckpt"])
    assert model.env_steps == 1536
    assert trainer.global_step > r["global_step"]
    if algo == "ppo_population_diverging":  # non-finite on rank 1 only, frozen on both (parameters equal above)
        assert r["diverged_members"] == [False, True] and model.diverged_members.tolist() == [False, True]
    if algo == "ppo_population":  # members' parameters equal across ranks (checked above); logged per member
        logged = r["logged"]
        assert {f"member_{k}/{m}" for k in (0, 1) for m in ("train/policy_loss", "val/episode_return")} <= set(logged)
        assert logged["member_0/hp/learning_rate"] == 1e-3 and logged["member_1/hp/clip_coef"] == pytest.approx(0.1)
        # Each member's own rate, annealed after the first rollout of 2 ranks x 64 env steps per member.
        assert logged["member_0/train/learning_rate"] == pytest.approx(1e-3 * (1 - 128 / 1024))
        assert logged["member_1/train/learning_rate"] == pytest.approx(3e-4 * (1 - 128 / 1024))


@pytest.mark.slow
def test_a_population_splits_its_members_across_ranks(tmp_path):
    """``run.population_ddp: split`` (the default): 4 PPO members on 2 ranks, 2 each (tests/ddp_members_script.py)."""
    out = run([sys.executable, str(ROOT / "tests/ddp_members_script.py"), "--out", str(tmp_path)])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    r = json.loads((tmp_path / "result.json").read_text())
    assert r["world_size"] == 2 and r["ddp_wrapped"] == [False, False]  # no gradient crosses ranks
    # Rank r's members are members 2r and 2r + 1 of the whole population: built and first reset as there.
    assert r["same_init_as_whole"] and r["same_first_reset_as_whole"]
    # Env steps per member, each rank its own (not the sum over ranks).
    assert r["env_steps"] == 512 and r["local_env_steps_per_member"] == [512, 512]
    # Members logged under their index in the population, with the values of the rank that holds them.
    assert r["logged_eval"] == pytest.approx(r["eval_by_rank"])
    assert r["logged_val_return"] == pytest.approx(r["eval_mean_all"])  # every member's episodes
    assert {f"member_{k}/train/policy_loss" for k in range(4)} <= set(r["logged_keys"])
    assert {f"member_{k}/rollout/episode_return" for k in range(4)} <= set(r["logged_keys"])
    # Member 3 (rank 1's second) diverged alone: frozen, reported by its index; the others trained on.
    assert r["diverged_members"] == [False, False, False, True] and r["logged_diverged"] == 1.0
    # After the fit every rank holds the whole population; the checkpoint holds every member.
    assert r["population_after_fit"] == 4 and r["united_equal_across_ranks"]
    assert r["checkpoint_shapes"] == [4] and r["optimizer_state_shapes"] == [4] and r["checkpoint_lr_shape"] == [4]
    assert r["checkpoint_equals_united"]
    # Resumed on 2 ranks, each its own block back; and on one device, the whole population.
    assert r["resume_restored_own_block"] and r["resumed_env_steps"] == [768, 768]
    assert r["resume_keeps_rank_rng_streams"]  # each rank's RNG stream its own again, not rank 0's on both
    model = split_population(768)
    quick_trainer().fit(model, ckpt_path=r["last_ckpt"])
    assert model.env_steps == 768 and model.population == 4 and model.diverged_members.tolist()[3]


def test_a_population_that_does_not_split_evenly_is_refused():
    model = split_population(512)
    with pytest.raises(
        ConfigError, match="run.population=4 does not split over 3 DDP ranks .* run.population_ddp: replicate"
    ):
        model.split_members(0, 3)
    with pytest.raises(ConfigError, match="2 or more members each"):
        model.split_members(0, 4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_under_torchrun_finish(tmp_path):
    port = free_port()
    procs = []
    for node_rank in (0, 1):
        cmd = [
            *("timeout", "-s", "KILL", str(KILL_AFTER_S)),
            *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"),
            *("--node-rank", str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port)),
            *(str(SCRIPT), "--devices", "1", "--num-nodes", "2", "--out", str(tmp_path)),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = [p.communicate(timeout=KILL_AFTER_S + 30)[0].decode()[-3000:] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n\n".join(outputs)
    r = json.loads((tmp_path / "result.json").read_text())
    assert r["world_size"] == 2 and r["env_steps"] == sum(r["local_env_steps"]) == 1024
    assert r["grad_checks"] == r["global_step"] > 0


def test_cli_with_the_ddp_preset(tmp_path):
    out = run(
        [
            *(sys.executable, "-m", "rl_lightning.cli", "fit"),
            *("--config", str(ROOT / "configs/ppo/cartpole.yaml"), "--config", str(ROOT / "configs/trainer/ddp.yaml")),
            *("--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.enable_progress_bar", "false"),
            *(
                "--model.run.total_env_steps",
                "1024",
                "--model.run.env_steps_per_epoch",
                "512",
                "--model.run.eval_episodes",
                "2",
            ),
        ],
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    ckpt = torch.load(tmp_path / "runs/ppo_cartpole/version_0/checkpoints/last.ckpt", weights_only=True)
    assert ckpt["rl_lightning"]["env_steps"] == 1024
    assert "Starting with 2 processes" in out.stdout + out.stderr


@pytest.mark.slow
def test_cli_splits_an_off_policy_population_across_ranks(tmp_path):
    """SAC, 4 members on 2 ranks through the CLI: each rank's replay holds its own members' transitions, the
    checkpoint every member, and the best-member line names a member of the whole population."""
    out = run(
        [
            *(sys.executable, "-m", "rl_lightning.cli", "fit"),
            *("--config", str(ROOT / "configs/sac/pendulum.yaml"), "--config", str(ROOT / "configs/trainer/ddp.yaml")),
            *("--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.enable_progress_bar", "false"),
            *("--model.run.population", "4", "--model.env.seed", "3", "--model.replay.learning_starts", "200"),
            *("--model.run.total_env_steps", "600", "--model.run.env_steps_per_epoch", "300"),
            *("--model.run.eval_episodes", "2"),
        ],
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    ckpt = torch.load(tmp_path / "runs/sac_pendulum/version_0/checkpoints/last.ckpt", weights_only=True)
    assert ckpt["rl_lightning"]["env_steps"] == 600  # per member, each rank its own members'
    assert {v.shape[0] for v in ckpt["state_dict"].values()} == {4}
    assert len(ckpt["rl_lightning"]["rng_ranks"]) == 2
    best = re.search(r"Best member: (\d) \(seed (\d+)\)", out.stdout + out.stderr)
    assert best and int(best[2]) == 3 + int(best[1])  # member k is the run of seed 3 + k (one sub-env each)
