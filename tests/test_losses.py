"""Closed-form checks of the NFT and GRPO losses (RECAST.md §4)."""

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
    out = nft_loss(v, v_old, u, torch.ones(3), adaptive_sigma=sigma)
    err = sigma[:, None, None] * (v_old - u)
    expected = (err**2).mean((1, 2)) / err.abs().mean((1, 2))
    torch.testing.assert_close(out.per_example, expected)
    assert out.kl.item() == 0.0
    v_ref = torch.zeros_like(v_old)
    out = nft_loss(v, v_old, u, torch.ones(3), v_ref=v_ref, kl_beta=0.5)
    torch.testing.assert_close(out.kl, (v_old**2).mean())
    torch.testing.assert_close(out.loss, out.policy + 0.5 * out.kl)


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
