"""A variant of an algorithm (C51 and QR-DQN of DQN, DDPG of TD3, TQC and CrossQ of SAC, RecurrentPPO of
PPO) restates only the constructor arguments
it adds or whose default or meaning differs, the rest coming through ``**kwargs``: the CLI resolves its
arguments as the parent's, less those it fixes, with its own defaults; Python and the CLI build the same
module; and checkpoints, whose hyperparameters hold the parent's fixed arguments too, load."""

import inspect

import pytest

from rl_lightning import C51, DDPG, DQN, PPO, QRDQN, SAC, TD3, TQC, CrossQ, EnvConfig, RecurrentPPO
from rl_lightning.checkpointing import without_fixed_hyperparameters
from rl_lightning.config import constructor_defaults
from tests.helpers import build, quick_trainer

# variant: (parent, arguments it adds, arguments whose default or meaning it changes, arguments it fixes)
VARIANTS = {
    C51: (DQN, {"n_atoms": 51, "v_min": -10.0, "v_max": 10.0}, {}, {"loss"}),
    QRDQN: (
        DQN,
        {"n_quantiles": 200},
        {"learning_rate": 5e-5, "end_e": None, "exploration_fraction": 0.005, "max_grad_norm": None, "adam_eps": None},
        {"loss"},
    ),
    DDPG: (TD3, {}, {}, {"policy_frequency", "target_policy_noise", "target_noise_clip"}),
    TQC: (SAC, {"n_critics": 2, "n_quantiles": 25, "top_quantiles_to_drop_per_net": 2}, {}, set()),
    CrossQ: (
        SAC,
        {
            "policy_delay": 3,
            "n_critics": 2,
            "critic_hidden_sizes": (1024, 1024),
            "batch_renorm_momentum": 0.01,
            "batch_renorm_warmup_steps": 100_000,
        },
        {"learning_rate": 1e-3, "hidden_sizes": (256, 256)},  # hidden_sizes: the actor's only
        {"tau"},
    ),
    RecurrentPPO: (
        PPO,
        {"recurrent": "lstm", "hidden_size": 128, "shared_memory": False},
        {"num_minibatches": 1, "hidden_sizes": (64,)},
        set(),
    ),
}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda c: c.__name__)
def test_a_variant_restates_only_what_it_adds_or_changes(variant):
    parent, added, changed, fixed = VARIANTS[variant]
    own = [n for n, p in inspect.signature(variant.__init__).parameters.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert set(own) - {"self"} == {*added, *changed}
    inherited = {name: changed.get(name, d) for name, d in constructor_defaults(parent).items() if name not in fixed}
    assert constructor_defaults(variant) == {**inherited, **added}
    assert list(constructor_defaults(variant)) == [*inherited, *added]  # the parent's order, new ones last


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda c: c.__name__)
def test_the_cli_defaults_build_the_module_python_does(variant):
    """The CLI passes every resolved default explicitly: a default changed anywhere but in the signature
    (``kwargs.setdefault``) would give the parent's value here and the variant's in ``variant()``."""
    from_python, from_cli = variant(), variant(**constructor_defaults(variant))
    assert dict(from_cli.hparams) == dict(from_python.hparams)
    for name, default in constructor_defaults(variant).items():
        if default is not None:  # None: resolved by the algorithm (QR-DQN's end_e 0.01, adam_eps 0.01 / batch)
            assert from_python.hparams[name] == default, name


def test_qrdqn_resolves_its_none_defaults_as_sb3_contrib():
    assert (QRDQN().end_e, QRDQN().adam_eps) == (0.01, 0.01 / 32)
    assert QRDQN(noisy=True).end_e == 0.0
    assert QRDQN(replay={"batch_size": 64}).adam_eps == 0.01 / 64


def test_the_fixed_arguments_of_a_checkpoint_are_dropped_on_load():
    hparams = dict(TD3().hparams)  # a DDPG's saved hyperparameters hold TD3's three fixed ones too
    checkpoint = {"hyper_parameters": {**hparams, "_instantiator": "x", "_class_path": "y"}}
    dropped = without_fixed_hyperparameters(DDPG, checkpoint)
    assert dropped == ["policy_frequency", "target_policy_noise", "target_noise_clip"]
    assert list(checkpoint["hyper_parameters"]) == [*constructor_defaults(DDPG), "_instantiator", "_class_path"]
    assert without_fixed_hyperparameters(C51, {"hyper_parameters": dict(C51().hparams)}) == ["loss"]
    assert without_fixed_hyperparameters(CrossQ, {"hyper_parameters": dict(CrossQ().hparams)}) == ["tau"]
    assert without_fixed_hyperparameters(DQN, {"hyper_parameters": dict(DQN().hparams)}) == []


@pytest.mark.parametrize("variant", [C51, QRDQN], ids=lambda c: c.__name__)
def test_a_checkpoint_loads_with_its_saved_hyperparameters(variant, tmp_path):
    model = build(
        variant,
        env=EnvConfig("CartPole-v1", num_envs=1, seed=0),
        total_env_steps=64,
        env_steps_per_epoch=64,
        eval_episodes=1,
        learning_starts=32,
        buffer_size=100,
        hidden_sizes=(8,),
        **{"n_atoms" if variant is C51 else "n_quantiles": 5},
    )
    trainer = quick_trainer()
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    assert "loss" in model.hparams  # DQN's, saved too: it must not reach DQN twice
    loaded = variant.load_from_checkpoint(tmp_path / "c.ckpt")
    assert loaded.atoms == 5 and loaded.hparams["learning_rate"] == model.hparams["learning_rate"]
    for name, tensor in model.state_dict().items():
        assert loaded.state_dict()[name].equal(tensor), name


def test_a_search_space_may_name_a_variants_inherited_arguments_but_not_its_fixed_ones(tmp_path):
    from rl_lightning.errors import ConfigError
    from rl_lightning.tune import load_space

    space = tmp_path / "space.yaml"
    space.write_text("gamma: {low: 0.9, high: 0.99}\nreplay.batch_size: {choices: [64, 128]}\n")
    assert [p.name for p in load_space(space, DDPG)] == ["gamma", "replay.batch_size"]  # TD3's, via **kwargs
    space.write_text("policy_frequency: {choices: [1, 2]}\n")
    with pytest.raises(ConfigError, match="DDPG has no argument 'policy_frequency'"):
        load_space(space, DDPG)
