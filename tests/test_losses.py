"""Closed-form checks of the NFT and GRPO losses (docs/method.md §4)."""

import pytest
import torch

from recast.trainer.losses import gaussian_mean_kl, grpo_loss, nft_loss


@pytest.mark.parametrize("nft_beta", [0.1, 1.0])
def test_nft_gradient_identity_at_old_policy(nft_beta):
    torch.manual_seed(0)
    N, shape = 5, (3, 4, 4)
    v_old = torch.randn(N, *shape, dtype=torch.float64)
    u = torch.randn(N, *shape, dtype=torch.float64)
    p = torch.rand(N, dtype=torch.float64)
    v = v_old.clone().requires_grad_(True)
    nft_loss(v, v_old, u, p, nft_beta=nft_beta).loss.backward()
    n = 3 * 4 * 4
    expected = 2 * nft_beta * (2 * p - 1).reshape(-1, 1, 1, 1) * (v_old - u) / n / N
    torch.testing.assert_close(v.grad, expected)
    # DiffusionNFT scaling c / beta removes beta from the gradient
    v.grad = None
    nft_loss(v, v_old, u, p, nft_beta=nft_beta, scale=5.0 / nft_beta).loss.backward()
    torch.testing.assert_close(v.grad, expected * 5.0 / nft_beta)


def test_nft_direction_and_p_half_is_flat():
    torch.manual_seed(1)
    v_old, u = torch.randn(2, 8), torch.randn(2, 8)
    v = v_old.clone().requires_grad_(True)
    nft_loss(v, v_old, u, torch.tensor([0.5, 0.5])).loss.backward()
    assert v.grad.abs().max() < 1e-7
    # p = 1: a gradient step moves v_theta towards u
    v.grad = None
    nft_loss(v, v_old, u, torch.tensor([1.0, 1.0])).loss.backward()
    assert ((v - 0.1 * v.grad - u).norm() < (v - u).norm()).item()


def test_nft_adaptive_norm_and_kl():
    torch.manual_seed(2)
    v_old, u = torch.randn(3, 2, 4), torch.randn(3, 2, 4)
    sigma = torch.tensor([0.2, 0.5, 0.9])
    v = v_old.clone().requires_grad_(True)
    out = nft_loss(v, v_old, u, torch.ones(3), norm="x0", sigma=sigma)
    err = sigma[:, None, None] * (v_old - u)
    expected = (err**2).mean((1, 2)) / err.abs().mean((1, 2))
    torch.testing.assert_close(out.per_example, expected)
    # velocity space: the same without σ, so the x0 form is exactly σ times it (DiffusionNFT's column weighting)
    vel = nft_loss(v, v_old, u, torch.ones(3), norm="velocity")
    err = v_old - u
    torch.testing.assert_close(vel.per_example, (err**2).mean((1, 2)) / err.abs().mean((1, 2)))
    torch.testing.assert_close(out.per_example, sigma * vel.per_example)
    with pytest.raises(ValueError, match="nft_norm"):
        nft_loss(v, v_old, u, torch.ones(3), norm="x1")
    with pytest.raises(ValueError, match="sigma"):
        nft_loss(v, v_old, u, torch.ones(3), norm="x0")
    assert out.kl.item() == 0.0
    v_ref = torch.zeros_like(v_old)
    out = nft_loss(v, v_old, u, torch.ones(3), v_ref=v_ref, kl_beta=0.5)
    torch.testing.assert_close(out.kl, (v_old**2).mean())
    torch.testing.assert_close(out.loss, out.policy + 0.5 * out.kl)


@pytest.mark.parametrize("nft_norm", ["velocity", "x0"])
def test_velocity_norm_gradient_at_old_policy_is_scale_free(nft_norm):
    """At v_θ = v_old the velocity-normalised gradient is 2β(2p − 1)(v_old − u) / (n · mean|v_old − u|): the same
    size whatever σ, while the x0 form carries an extra factor σ."""
    torch.manual_seed(4)
    v_old, u = torch.randn(4, 3, 5, dtype=torch.float64), torch.randn(4, 3, 5, dtype=torch.float64)
    p, sigma = torch.tensor([0.9, 0.1, 0.7, 0.3], dtype=torch.float64), torch.tensor([1.0, 0.5, 0.1, 0.01])
    v = v_old.clone().requires_grad_(True)
    nft_loss(v, v_old, u, p, norm=nft_norm, sigma=sigma).loss.backward()
    err = v_old - u
    expected = 2 * (2 * p - 1).reshape(-1, 1, 1) * err / 15 / err.abs().mean((1, 2), keepdim=True) / 4
    if nft_norm == "x0":
        expected = expected * sigma.double().reshape(-1, 1, 1)
    torch.testing.assert_close(v.grad, expected)


def test_grpo_ratio_one_gradient():
    torch.manual_seed(3)
    theta = torch.randn(4, requires_grad=True)
    feats = torch.randn(6, 4)
    log_prob = feats @ theta
    A = torch.randn(6)
    out = grpo_loss(log_prob, log_prob.detach(), A, clip_range=1e-4)
    out.loss.backward()
    expected = -(A[:, None] * feats).mean(0)
    torch.testing.assert_close(theta.grad, expected)
    assert out.ratio.item() == 1.0 and out.clip_frac.item() == 0.0


def test_grpo_clip_blocks_gradient_beyond_range():
    lp = torch.tensor([0.5, -0.5], requires_grad=True)
    A = torch.tensor([1.0, -1.0])  # ratio above 1+eps with A>0, below 1-eps with A<0: both clipped
    out = grpo_loss(lp, torch.zeros(2), A, clip_range=0.1)
    out.loss.backward()
    assert lp.grad.abs().max().item() == 0.0 and out.clip_frac.item() == 1.0


def test_gaussian_kl():
    m, r = torch.ones(2, 3), torch.zeros(2, 3)
    torch.testing.assert_close(gaussian_mean_kl(m, r, torch.tensor([1.0, 0.5])), torch.tensor([0.5, 2.0]))
