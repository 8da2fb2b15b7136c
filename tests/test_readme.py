"""The README's Python examples run as written (in a scratch directory, on their own budget)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs_as_written(tmp_path):
    snippet, _ = python_blocks()
    out = run_python(snippet, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "policy.pt2").is_file()
    assert float(re.findall(r"tensor\(([\d.]+)\)", out.stdout)[-1]) >= 475  # it solves CartPole
    assert "policy = torch.export.load(" in snippet  # the exported policy is played as written


def test_readme_recurrent_policy_loop_plays_an_episode_with_torch_alone(tmp_path):
    """The loop's first memory has the shape the exported program takes, and it plays a whole episode."""
    _, loop = python_blocks()
    export = (
        "from rl_lightning import RecurrentPPO, EnvConfig\n"
        "model = RecurrentPPO(env=EnvConfig('CartPole-v1'))\n"  # hidden_size 128, separate LSTMs
        "model.build_for_env()\n"
        "model.export_policy('recurrent_policy.pt2')\n"
    )
    assert run_python(export, tmp_path).returncode == 0
    out = run_python(loop + "\nprint('return', episode_return, tuple(memory.shape))\n", tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    episode_return, shape = re.findall(r"return ([\d.]+) (\(.*\))", out.stdout)[-1]
    assert float(episode_return) >= 1 and shape == "(1, 4, 128)"
    assert "rl_lightning" not in loop  # torch and gymnasium only


def python_blocks() -> list[str]:
    """The README's python blocks: the training example, the recurrent policy's loop."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert len(blocks) == 2
    return blocks


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter in ``cwd``, on one thread."""
    return subprocess.run(
        [sys.executable, "-c", "import torch; torch.set_num_threads(1)\n" + code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
