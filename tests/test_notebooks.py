"""Every notebook in notebooks/ runs top to bottom, on the tiny budget of RL_LIGHTNING_SMOKE=1.

A notebook that needs an algorithm this checkout lacks says so in its metadata
(``{"rl_lightning": {"requires": ["SAC"]}}``) and is skipped until the algorithm lands.
"""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import rl_lightning

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    notebook = nbformat.read(path, as_version=4)
    missing = [a for a in notebook.metadata.get("rl_lightning", {}).get("requires", []) if not hasattr(rl_lightning, a)]
    if missing:
        pytest.skip(f"needs rl_lightning.{', '.join(missing)}, not in this checkout yet")
    monkeypatch.setenv("RL_LIGHTNING_SMOKE", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))  # this checkout
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # quiets SDL when pygame renders
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # Run in a scratch directory: the notebooks write runs/ where they run.
    NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs), "no plot"
    if any("Video(" in cell.source for cell in notebook.cells):
        assert any("<video" in out.get("data", {}).get("text/html", "") for out in outputs), "no video"
