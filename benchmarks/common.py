"""What the benchmark scripts share: reading a YAML config as ``rl-lightning fit`` does, building its
model with overrides, and a quiet Trainer. Scripts run from the repository root or anywhere:
``benchmarks/`` is on ``sys.path`` when a script in it runs."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, whatever is installed


def load_config(path: str | Path) -> tuple[type, dict[str, Any], dict[str, Any]]:
    """``(algorithm class, init args, trainer args)`` of a YAML config (relative to the repository
    root), with ``env`` as an ``EnvConfig``."""
    import yaml

    from rl_lightning.envs import EnvConfig

    full = yaml.safe_load((ROOT / path).read_text())
    module_path, cls_name = full["model"]["class_path"].rsplit(".", 1)
    cls = getattr(__import__(module_path, fromlist=[cls_name]), cls_name)
    init = dict(full["model"]["init_args"])
    init["env"] = EnvConfig(**init["env"])
    return cls, init, full.get("trainer", {}) or {}


def make_model(cls: type, init: dict[str, Any], **overrides: Any) -> Any:
    """``cls(**init)`` with ``overrides`` on top. ``init`` may hold ``run`` and ``replay`` as the dicts
    a YAML config has; an override named like one of their fields (``total_env_steps``,
    ``learning_starts``, ...) goes into it; ``env`` overrides are a dict of ``EnvConfig`` fields."""
    from rl_lightning import ReplayConfig, RunConfig

    params = inspect.signature(cls).parameters
    args = {k: v for k, v in init.items() if k not in ("run", "replay")}
    env = overrides.pop("env", None)
    if isinstance(env, dict):
        env = dataclasses.replace(args["env"], **env)
    if env is not None:
        args["env"] = env
    for name, config_cls in (("run", RunConfig), ("replay", ReplayConfig)):
        if name not in params:
            continue
        fields = {f.name for f in dataclasses.fields(config_cls)}
        given = {**(init.get(name) or {}), **{k: overrides.pop(k) for k in list(overrides) if k in fields}}
        args[name] = dataclasses.replace(params[name].default, **given)
    return cls(**{**args, **overrides})


def quiet_trainer(**kwargs: Any) -> Any:
    """A Trainer on one device with no logger, checkpoints, progress bar, summary or sanity check."""
    import lightning as L

    defaults: dict[str, Any] = {
        "devices": 1,
        "max_epochs": -1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    return L.Trainer(**{**defaults, **kwargs})
