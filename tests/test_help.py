"""`rl-lightning fit --model.help ALGO` documents every hyperparameter of every algorithm (and the env
and callback options): LightningCLI takes the descriptions from the ``Args:`` docstrings."""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rl_lightning
from rl_lightning.callbacks import RecordEpisodes, RLProgressBar
from rl_lightning.config import constructor_defaults
from rl_lightning.envs import EnvConfig
from tests.helpers import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]
CALLBACKS = [RecordEpisodes, RLProgressBar]
# One subprocess renders every help screen (as `rl-lightning fit ...` would), paying the imports once.
SCREENS = {
    **{f"model:{a.__name__}": ["--model.help", f"rl_lightning.{a.__name__}"] for a in ALGORITHMS},
    "env": ["--model.help", "rl_lightning.PPO", "--model.env.help"],
    **{
        f"callback:{c.__name__}": ["--trainer.callbacks.help", f"rl_lightning.callbacks.{c.__name__}"]
        for c in CALLBACKS
    },
}
RENDER = """
import contextlib, io, json, sys
from rl_lightning.cli import main
screens = {}
for key, args in json.loads(sys.argv[1]).items():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["fit", *args])
    screens[key] = out.getvalue()
print(json.dumps(screens))
"""


@pytest.fixture(scope="module")
def screens() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", RENDER, json.dumps(SCREENS)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def help_entries(screen: str) -> dict[str, str]:
    """``{option: description}`` from a help screen, the ``(type: ..., default: ...)`` part removed."""
    entries: dict[str, str] = {}
    option = None
    for line in screen.split("Help for", 1)[-1].splitlines():
        # "--model.x X", or with an alias as list options have: "--model.x [ITEM,...], --model.x+ [ITEM,...]"
        match = re.match(
            r"^  (--[\w.]+)(?: [A-Z_{},.\[\]a-z]+)?(?:, --[\w.+]+ [A-Z_{},.\[\]a-z]+)?(?:\s{2,}(.*))?$", line
        )
        if match:
            option = match.group(1)
            entries[option] = match.group(2) or ""
        elif option and line.startswith(" " * 10):
            entries[option] += " " + line.strip()
    return {k: re.sub(r"\(type: .*\)\s*$", "", v).strip() for k, v in entries.items()}


def init_args(cls: type) -> list[str]:
    """The constructor's arguments (a variant's: its parent's through ``**kwargs``), a config dataclass's
    fields as ``name.field`` (LightningCLI shows them so)."""
    names = []
    for name, default in constructor_defaults(cls).items():
        if dataclasses.is_dataclass(default):
            names += [f"{name}.{f.name}" for f in dataclasses.fields(default)]
        else:
            names.append(name)
    return names


def assert_documented(entries: dict[str, str], prefix: str, names: list[str]) -> None:
    missing = [n for n in names if f"{prefix}.{n}" not in entries]
    undocumented = [n for n in names if f"{prefix}.{n}" in entries and len(entries[f"{prefix}.{n}"]) < 5]
    assert not missing, f"not in the help: {missing}"
    assert not undocumented, f"no description (add it to the Args: docstring): {undocumented}"


def test_algorithms_are_found():
    assert rl_lightning.PPO in ALGORITHMS


@pytest.mark.parametrize("algo", ALGORITHMS, ids=lambda a: a.__name__)
def test_model_help_describes_every_hyperparameter(algo, screens):
    entries = help_entries(screens[f"model:{algo.__name__}"])
    assert_documented(entries, "--model", init_args(algo))


def test_env_help_describes_every_field(screens):
    entries = help_entries(screens["env"])
    assert_documented(entries, "--model.env", list(EnvConfig.__dataclass_fields__))


@pytest.mark.parametrize("callback", CALLBACKS, ids=lambda c: c.__name__)
def test_callback_help_describes_every_argument(callback, screens):
    entries = help_entries(screens[f"callback:{callback.__name__}"])
    assert_documented(entries, "--trainer.callbacks", init_args(callback))
