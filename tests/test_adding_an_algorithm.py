"""docs/adding_an_algorithm.md: the algorithm written there from scratch, on the contract alone, runs as
written and learns; and it honours the contract's parts (experience side, checkpoints, evaluation)."""

import re
import sys
import types

import torch

from rl_lightning import EnvConfig, RunConfig
from rl_lightning.data.experience import ExperienceSide
from tests.helpers import ROOT, quick_trainer


def load_vpg() -> type:
    (code,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs/adding_an_algorithm.md").read_text(), flags=re.S)
    module = types.ModuleType("vpg_from_the_docs")
    sys.modules[module.__name__] = module  # Lightning's save_hyperparameters inspects the class's module
    exec(compile(code, "docs/adding_an_algorithm.md", "exec"), module.__dict__)
    return module.VPG


def test_the_documented_algorithm_learns_cartpole_and_resumes(tmp_path):
    VPG = load_vpg()
    torch.manual_seed(0)
    model = VPG(env=EnvConfig("CartPole-v1", num_envs=8, seed=0), run=RunConfig(40_960, 20_480, 10), num_steps=64)
    trainer = quick_trainer(default_root_dir=tmp_path, enable_checkpointing=True)
    trainer.fit(model)
    assert isinstance(model.experience, ExperienceSide)
    assert model.env_steps == 40_960 and trainer.global_step == 40_960 // 512 * 11  # 1 policy + 10 value steps
    assert float(trainer.callback_metrics["val/episode_return"]) >= 150  # random play: ~20

    loaded = VPG.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())
