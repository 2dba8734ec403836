"""W is what training applies (docs/method.md §3-§4): every loss column weighs the same, GRPO's W covers the columns it
trains, and near-constant rewards are silenced for every method."""

from pathlib import Path

import pytest
import torch

from recast.config import preset
from recast.advantages import group_advantages, silenced_rewards


def _column_grad_shares(world, T: int = 6, B: int = 4) -> torch.Tensor:
    """Share of each NFT loss column in the mean per-example LoRA gradient norm, at the base model, velocity norm.

    Per example, not per batch: a batch's gradient norm also measures how much its examples cancel, which is a
    property of the data, not of the loss's scale. p = 1 for every example (W = λ/T gives every column the same p).
    """
    from recast.worlds.digits.data import prompt_set
    from recast.sampling import predict_velocity, sample_ode, sigma_schedule
    from recast.trainer.losses import nft_loss
    from recast.trainer.policy import Policy

    g = torch.Generator().manual_seed(0)
    policy = Policy(world.transformer, lora_rank=4, lora_alpha=8.0, seed=0)
    prompts = prompt_set("train")[::20][:B]
    sigmas = sigma_schedule(T, 3.0)
    with torch.no_grad():
        e = world.encode_prompts(prompts)
        x0 = sample_ode(world.transformer, e, sigmas, shape=world.sample_shape, generator=g, return_trajectory=False).x0
    norms = []
    for j in range(T):
        sigma = float(sigmas[j])
        eps = torch.randn(x0.shape, generator=g)
        x = (1 - sigma) * x0 + sigma * eps
        with torch.no_grad():
            v_old = predict_velocity(world.transformer, x, sigma, e)
        v = predict_velocity(world.transformer, x, sigma, e)
        per = nft_loss(v, v_old, eps - x0, torch.ones(B), norm="velocity").per_example
        total = 0.0
        for i in range(B):
            grads = torch.autograd.grad(per[i], policy.params, retain_graph=i < B - 1, allow_unused=True)
            total += float(torch.sqrt(sum((gr**2).sum() for gr in grads if gr is not None)))
        norms.append(total / B)
    norms = torch.tensor(norms, dtype=torch.float64)
    return norms / norms.sum(), sigmas[:-1].double()


@pytest.mark.slow
def test_every_loss_column_weighs_the_same_at_the_base_model():
    """With W = λ/T each column's share of the gradient norm is within a factor 2 of 1/T in velocity space. The
    x0-space form is σ_j times it per example (tests/test_losses.py), which leaves the last column under 1 %."""
    from recast.worlds.digits.model import load_world

    path = Path(__file__).resolve().parents[1] / "data" / "digit_base"  # the committed base model
    torch.set_num_threads(1)
    T = 6
    velocity, sigmas = _column_grad_shares(load_world(path), T)
    assert (velocity > 1 / (2 * T)).all() and (velocity < 2 / T).all(), velocity.tolist()
    x0 = sigmas * velocity / (sigmas * velocity).sum()
    assert x0[-1] < 0.01, x0.tolist()


def test_near_constant_rewards_are_silenced_not_amplified():
    g = torch.Generator().manual_seed(0)
    R = torch.stack([0.999 + 0.001 * torch.randn(16, generator=g),  # colour-like: std 0.001 on a [0, 1] range
                     0.5 + 0.2 * torch.randn(16, generator=g)])
    plain = group_advantages(R, 4)
    assert plain.A[0].abs().max() > 1.0  # without the floor, measurement-level noise gets full-size advantages
    adv = group_advantages(R, 4, std_floor=1e-2)
    assert adv.silenced.tolist() == [True, False]
    assert torch.equal(adv.A[0], torch.zeros(16)) and torch.equal(adv.p[0], torch.full((16,), 0.5))
    torch.testing.assert_close(adv.A[1], plain.A[1])
    # the floor is relative to the range: the same std on a reward of range 0.01 is signal
    assert silenced_rewards(R, 1e-2, torch.tensor([0.01, 1.0])).tolist() == [False, False]
    with pytest.raises(ValueError, match="reward_std_floor"):
        silenced_rewards(R, -1.0)


@pytest.mark.parametrize("method", ["recast", "static", "recast_live", "uniform", "reward_sum"])
def test_trainer_silences_a_constant_reward_for_every_method_and_counts_it(tmp_path, method):
    from recast.trainer import Trainer

    cfg = preset("ci", method=method, iterations=2, rewards=("color", "position"), lam=(1.0, 1.0), train_columns=2)
    tr = Trainer(cfg, tmp_path)
    tr.rewards[0] = lambda images, prompts: torch.full((images.shape[0],), 0.999)  # no signal at all
    tr.rewards[1] = lambda images, prompts: torch.linspace(0, 1, images.shape[0])  # plenty
    run = tr.run()
    assert all(rec["silenced/color"] == 1.0 for rec in run.metrics)
    assert all(rec["silenced/position"] == 0.0 for rec in run.metrics)
    if method == "reward_sum":
        assert "silenced/reward_sum" in run.metrics[-1]
    if method in ("recast", "recast_live"):
        W = torch.tensor(run.metrics[-1]["W"], dtype=torch.float64)
        torch.testing.assert_close(W.sum(1), torch.tensor([0.5, 0.5], dtype=torch.float64))  # its row keeps λ_k


def test_grpo_recast_keeps_lambda_over_T_in_the_untrained_last_column(tmp_path):
    from recast.trainer import Trainer

    T = 4
    cfg = preset("ci", backend="grpo", method="recast_live", iterations=3, rewards=("color", "position"),
                 lam=(0.3, 0.7), num_steps=T)
    run = Trainer(cfg, tmp_path).run()
    lam = torch.tensor([0.3, 0.7], dtype=torch.float64)
    assert len(run.weights) == 3
    for rec in run.weights:
        W = torch.tensor(rec["W"], dtype=torch.float64)
        torch.testing.assert_close(W[:, -1], lam / T)
        torch.testing.assert_close(W[:, :-1].sum(1), lam * (T - 1) / T)


def test_unknown_nft_norm_and_sde_type_are_refused(tmp_path):
    from recast.trainer import Trainer

    for over, msg in [(dict(nft_norm="x1"), "nft_norm"), (dict(sde_type="ode"), "sde_type")]:
        with pytest.raises(ValueError, match=msg):  # refused by validation, before any compute
            Trainer(preset("ci", rewards=("color",), **over), tmp_path / msg)
        assert not (tmp_path / msg).exists()
