"""The README's Python example runs as written (in a scratch directory, on its own budget)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs_as_written(tmp_path):
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)]
    out = subprocess.run(
        [sys.executable, "-c", "import torch; torch.set_num_threads(1)\n" + snippet],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "policy.pt2").is_file()
    assert float(re.findall(r"tensor\(([\d.]+)\)", out.stdout)[-1]) >= 475  # it solves CartPole
    assert "policy = torch.export.load(" in snippet  # the exported policy is played as written
