import torch
from torch.distributions import Categorical, Normal

from rl_lightning.algorithms.ppo import ppo_loss
from rl_lightning.networks.policies import CategoricalHead, DiagGaussianHead


def test_ppo_loss_matches_direct_computation():
    g = torch.Generator().manual_seed(0)
    n = 64
    new_lp, old_lp = torch.randn(n, generator=g) * 0.3, torch.randn(n, generator=g) * 0.3
    adv = torch.randn(n, generator=g)
    new_v, old_v, ret = torch.randn(n, generator=g), torch.randn(n, generator=g), torch.randn(n, generator=g)
    ent = torch.rand(n, generator=g)
    eps, c_ent, c_v = 0.2, 0.01, 0.5

    out = ppo_loss(new_lp, old_lp, adv, new_v, old_v, ret, ent, eps, True, c_ent, c_v)

    # Written out element by element, independently of the vectorized code.
    pg, vl, kl, cf = 0.0, 0.0, 0.0, 0.0
    for i in range(n):
        r = float(torch.exp(new_lp[i] - old_lp[i]))
        rc = min(max(r, 1 - eps), 1 + eps)
        pg += max(-adv[i] * r, -adv[i] * rc) / n
        v_clip = old_v[i] + min(max(new_v[i] - old_v[i], -eps), eps)
        vl += 0.5 * max((new_v[i] - ret[i]) ** 2, (v_clip - ret[i]) ** 2) / n
        kl += ((r - 1) - (new_lp[i] - old_lp[i])) / n
        cf += float(abs(r - 1) > eps) / n
    torch.testing.assert_close(out.policy_loss, torch.as_tensor(pg, dtype=torch.float32))
    torch.testing.assert_close(out.value_loss, torch.as_tensor(vl, dtype=torch.float32))
    torch.testing.assert_close(out.approx_kl, torch.as_tensor(kl, dtype=torch.float32))
    torch.testing.assert_close(out.clip_fraction, torch.tensor(cf))
    torch.testing.assert_close(out.loss, out.policy_loss - c_ent * ent.mean() + c_v * out.value_loss)


def test_unclipped_value_loss_is_half_mse():
    v, ret = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0])
    out = ppo_loss(
        torch.zeros(2), torch.zeros(2), torch.zeros(2), v, torch.zeros(2), ret, torch.zeros(2), 0.2, False, 0.0, 1.0
    )
    torch.testing.assert_close(out.value_loss, torch.tensor(0.5 * (1 + 4) / 2))


def test_heads_agree_with_torch_distributions():
    logits = torch.randn(16, 5)
    actions = torch.randint(0, 5, (16,))
    ref = Categorical(logits=logits)
    torch.testing.assert_close(CategoricalHead.log_prob(logits, actions), ref.log_prob(actions))
    torch.testing.assert_close(CategoricalHead.entropy(logits), ref.entropy())
    # What ActorCritic.evaluate calls: both from one log_softmax.
    for got, want in zip(
        CategoricalHead.log_prob_entropy(logits, actions), (ref.log_prob(actions), ref.entropy()), strict=True
    ):
        torch.testing.assert_close(got, want)

    mean, log_std = torch.randn(16, 3), torch.randn(16, 3) * 0.5
    a = torch.randn(16, 3)
    ref_n = Normal(mean, log_std.exp())
    torch.testing.assert_close(DiagGaussianHead.log_prob((mean, log_std), a), ref_n.log_prob(a).sum(-1))
    torch.testing.assert_close(DiagGaussianHead.entropy((mean, log_std)), ref_n.entropy().sum(-1))
    for got, want in zip(
        DiagGaussianHead.log_prob_entropy((mean, log_std), a),
        (ref_n.log_prob(a).sum(-1), ref_n.entropy().sum(-1)),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


def test_gumbel_max_sampling_follows_softmax():
    torch.manual_seed(0)
    logits = torch.tensor([0.0, 1.0, 2.0]).expand(200_000, 3)
    counts = torch.bincount(CategoricalHead.sample(logits), minlength=3).float() / 200_000
    torch.testing.assert_close(counts, torch.softmax(logits[0], -1), atol=5e-3, rtol=0)
