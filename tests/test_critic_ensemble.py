"""The critic ensemble (``QEnsemble``): ``n`` critics as one batched network equal ``n`` separate
``nn.Linear`` MLPs holding the same weights, in values and in gradients; it is initialized as they
would be; checkpoints of the older separate-critics layout are refused in one line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rl_lightning import SAC
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.errors import ConfigError
from rl_lightning.networks.continuous import QEnsemble
from rl_lightning.networks.mlp import mlp
from tests.helpers import quick_trainer, tiny_sac


def separate_copies(ens: QEnsemble) -> list[nn.Sequential]:
    """``ens``'s critics as separate ``nn.Linear`` MLPs with the same weights."""
    hidden = tuple(layer.weight.shape[2] for layer in ens.layers[:-1])
    in_dim = ens.layers[0].weight.shape[1]
    critics = []
    for i in range(ens.n):
        q = mlp(in_dim, hidden, ens.out_dim, "relu", orthogonal=False)
        linears = [m for m in q if isinstance(m, nn.Linear)]
        with torch.no_grad():
            for linear, layer in zip(linears, ens.layers, strict=True):
                linear.weight.copy_(layer.weight[i].T)
                linear.bias.copy_(layer.bias[i, 0])
        critics.append(q)
    return critics


@pytest.mark.parametrize(("n", "out_dim"), [(2, 1), (3, 1), (5, 4)])
def test_ensemble_equals_separate_critics_in_values_and_gradients(n, out_dim):
    torch.manual_seed(0)
    ens = QEnsemble(3, 2, (16, 8), n=n, out_dim=out_dim)
    critics = separate_copies(ens)
    obs, actions = torch.randn(7, 3), (torch.rand(7, 2) * 2 - 1).requires_grad_(True)
    x = torch.cat([obs, actions], -1)
    q = ens(obs, actions)
    want = torch.stack([c(x) for c in critics])
    want = want.squeeze(-1) if out_dim == 1 else want
    assert q.shape == ((n, 7) if out_dim == 1 else (n, 7, out_dim))
    torch.testing.assert_close(q, want)

    # gradients: of a loss that weighs each critic differently, for the weights and for the actions
    weights = torch.arange(1.0, n + 1).view(n, *[1] * (q.dim() - 1))
    (grad_actions,) = torch.autograd.grad((weights * q.pow(2)).sum(), actions)
    (want_grad_actions,) = torch.autograd.grad((weights * want.pow(2)).sum(), actions)
    torch.testing.assert_close(grad_actions, want_grad_actions)
    (weights * ens(obs, actions.detach()).pow(2)).sum().backward()
    want = torch.stack([c(x.detach()) for c in critics])
    (weights * (want.squeeze(-1) if out_dim == 1 else want).pow(2)).sum().backward()
    for j, layer in enumerate(ens.layers):
        for i, critic in enumerate(critics):
            linear = [m for m in critic if isinstance(m, nn.Linear)][j]
            torch.testing.assert_close(layer.weight.grad[i], linear.weight.grad.T)
            torch.testing.assert_close(layer.bias.grad[i, 0], linear.bias.grad)
    # the first critics only: the same values, and no gradient for the others
    torch.testing.assert_close(ens(obs, actions, first=1), q[:1])


def test_every_critic_runs_without_slicing_the_weights():
    """All critics read the stacked weights as they are: a ``[:None]`` slice would add a backward that
    zero-fills and copies every weight's gradient (SAC's update ran six of them per step); ``first``
    still slices."""

    def grad_fns(out: torch.Tensor) -> set[str]:
        seen, stack = set(), [out.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is not None and fn not in seen:
                seen.add(fn)
                stack.extend(next_fn for next_fn, _ in fn.next_functions)
        return {type(fn).__name__ for fn in seen}

    q = QEnsemble(3, 1, (8, 8), n=2)
    obs, actions = torch.randn(5, 3), torch.randn(5, 1)
    assert not any(name.startswith("Slice") for name in grad_fns(q(obs, actions).sum()))
    assert any(name.startswith("Slice") for name in grad_fns(q(obs, actions, first=1).sum()))


def test_initialization_is_that_of_separate_critics_drawn_in_the_same_order():
    torch.manual_seed(3)
    ens = QEnsemble(4, 1, (32, 32), n=2)
    torch.manual_seed(3)
    critics = [mlp(5, (32, 32), 1, "relu", orthogonal=False) for _ in range(2)]
    for i, critic in enumerate(critics):
        for layer, linear in zip(ens.layers, [m for m in critic if isinstance(m, nn.Linear)], strict=True):
            assert torch.equal(layer.weight[i], linear.weight.T) and torch.equal(layer.bias[i, 0], linear.bias)


def test_output_layer_runs_in_float32_under_autocast():
    ens = QEnsemble(3, 1, (8, 8), n=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q = ens(torch.randn(4, 3), torch.rand(4, 1))
    assert q.dtype == torch.float32


def test_a_checkpoint_of_separate_critics_is_refused_in_one_line():
    ens = QEnsemble(3, 1, (8, 8), n=2)
    old = {f"qs.{i}.{j}.{p}": torch.zeros(1) for i in range(2) for j in (0, 2, 4) for p in ("weight", "bias")}
    with pytest.raises(ConfigError, match=r"separate networks \(qs\.\*\).*train anew") as error:
        ens.load_state_dict(old)
    assert "\n" not in str(error.value)


def test_load_from_checkpoint_refuses_the_old_layout_in_one_line(tmp_path):
    model = tiny_sac(total_env_steps=150)
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(model)
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=True)
    state = checkpoint["state_dict"]
    for key in [k for k in state if k.startswith("critic.layers.")]:  # back to critic.qs.<i>.<2j>.<weight|bias>
        layer, param = key.split(".")[2:]
        for i, member in enumerate(state.pop(key)):
            state[f"critic.qs.{i}.{2 * int(layer)}.{param}"] = member.T if param == "weight" else member[0]
    torch.save(checkpoint, tmp_path / "old.ckpt")
    with pytest.raises(ConfigError, match=r"critic\.qs\.\*.*older than this version") as error:
        SAC.load_from_checkpoint(tmp_path / "old.ckpt")
    assert "\n" not in str(error.value)
