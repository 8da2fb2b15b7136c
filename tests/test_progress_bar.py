"""RLProgressBar: one bar over the env-step budget with the rate and the latest returns; the CLI's default."""

import re

import lightning as L

from rl_lightning import PPO, EnvConfig
from rl_lightning.callbacks import RLProgressBar
from tests.helpers import ROOT, build, quick_trainer


def test_bar_counts_env_steps_and_shows_returns(capsys):
    L.seed_everything(0)
    model = build(
        PPO,
        env=EnvConfig("CartPole-v1", num_envs=4),
        total_env_steps=2048,
        env_steps_per_epoch=1024,
        num_steps=64,
        eval_episodes=2,
    )
    bar = RLProgressBar(refresh_seconds=0.0)  # redraw at every training step
    trainer = quick_trainer(enable_progress_bar=True, log_every_n_steps=1, callbacks=[bar])
    trainer.fit(model)
    states = [s.strip() for s in capsys.readouterr().out.split("\r") if "env steps" in s]
    assert states[0].startswith("PPO CartPole-v1   0%") and "0/2,048 env steps" in states[0]
    assert "256/2,048 env steps" in states[1] and "return=" in states[1] and "eval=" not in states[1]
    final = states[-1]
    assert re.search(
        r"100%\|█+\| 2,048/2,048 env steps \[[\d:]+<00:00, [\d,]+ steps/s, return=[\d.]+, eval=[\d.]+\]", final
    ), final
    assert "Validation" not in "".join(states)  # evaluations inside fit draw no bar of their own
    trainer.validate(model)  # alone, validation keeps Lightning's bar
    assert "Validation DataLoader 0: 100%" in capsys.readouterr().out


def test_cli_shows_it_by_default(tmp_path, cli_here):
    # Quiet mode (--trainer.enable_progress_bar false) is what tests/test_cli.py runs with.
    args = [
        "--model.run.total_env_steps",
        "512",
        "--model.run.env_steps_per_epoch",
        "512",
        "--model.run.eval_episodes",
        "1",
    ]
    out = cli_here("fit", "--config", str(ROOT / "configs/ppo/cartpole.yaml"), *args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "512/512 env steps" in out.stdout
