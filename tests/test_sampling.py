"""Samplers against closed forms: a point-mass flow is integrated exactly by Euler, SDE log-probs are Gaussian."""

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from recast.informativeness import renyi_discriminability
from recast.sampling import (
    PromptEmbeds,
    predict_velocity,
    sample_ode,
    sample_sde,
    sde_step,
    sigma_schedule,
)

from recast.informativeness.rollout import rollout_discriminability, rollout_values

SHAPE = (3, 4, 4)


class PointMassFlow(torch.nn.Module):
    """Exact velocity of the flow whose data is the point mass x0 = c (per sample): v = (x - c) / sigma.

    c = pooled_projections[:, 0] broadcast over pixels, so each prompt has its own target. Records timesteps.
    """

    def __init__(self):
        super().__init__()
        self.timesteps = []

    def forward(self, hidden_states, timestep, encoder_hidden_states, pooled_projections, return_dict=False):
        self.timesteps.append(timestep.clone())
        c = pooled_projections[:, :1, None, None]
        return ((hidden_states - c) / (timestep[:, None, None, None] / 1000),)


class ConstantFlow(torch.nn.Module):
    """v = u everywhere: Euler's answer from x_{sigma=1} = eps is eps - u on any grid."""

    def __init__(self, u: float):
        super().__init__()
        self.u = u

    def forward(self, hidden_states, timestep, encoder_hidden_states, pooled_projections, return_dict=False):
        return (torch.full_like(hidden_states, self.u),)


def embeds_for(c: torch.Tensor) -> PromptEmbeds:
    """Conditioning whose pooled vector starts with the target value c (B,)."""
    B = c.shape[0]
    return PromptEmbeds(torch.zeros(B, 2, 5), torch.cat([c[:, None], torch.zeros(B, 3)], dim=1))


@pytest.mark.parametrize("shift", [1.0, 3.0])
@pytest.mark.parametrize("T", [1, 10, 28])
def test_sigma_schedule_matches_diffusers(T, shift):
    sigmas = sigma_schedule(T, shift)
    sched = FlowMatchEulerDiscreteScheduler(shift=shift)
    sched.set_timesteps(T)
    assert sigmas.shape == (T + 1,) and sigmas.dtype == torch.float32
    assert torch.equal(sigmas, sched.sigmas.float())
    assert sigmas[0] == 1.0 and sigmas[-1] == 0.0
    assert (sigmas.diff() < 0).all()
    with pytest.raises(ValueError):
        sigma_schedule(0)


def test_shift_pushes_sigmas_up():
    assert (sigma_schedule(10, 3.0)[1:-1] > sigma_schedule(10, 1.0)[1:-1]).all()


def test_predict_velocity_broadcasts_timestep():
    flow = PointMassFlow()
    x = torch.randn(3, *SHAPE)
    predict_velocity(flow, x, 0.25, embeds_for(torch.zeros(3)))
    predict_velocity(flow, x, torch.tensor([0.1, 0.2, 0.3]), embeds_for(torch.zeros(3)))
    assert torch.allclose(flow.timesteps[0], torch.full((3,), 250.0))
    assert torch.allclose(flow.timesteps[1], torch.tensor([100.0, 200.0, 300.0]))


@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_euler_is_exact_on_point_mass_flow(shift):
    sigmas = sigma_schedule(7, shift)
    c = torch.tensor([-0.5, 0.25, 0.9])
    noise = torch.randn(3, *SHAPE, generator=torch.Generator().manual_seed(0))
    out = sample_ode(PointMassFlow(), embeds_for(c), sigmas, noise=noise)
    target = c[:, None, None, None].expand_as(noise)
    s = sigmas.view(-1, 1, 1, 1, 1)
    assert out.xs.shape == (8, 3, *SHAPE) and out.x0_hats.shape == (7, 3, *SHAPE)
    torch.testing.assert_close(out.xs, (1 - s) * target + s * noise)  # the straight line, on every grid point
    torch.testing.assert_close(out.x0_hats, target.expand(7, *target.shape))
    torch.testing.assert_close(out.x0, target)
    assert out.log_probs is None


def test_euler_constant_velocity():
    noise = torch.randn(2, *SHAPE)
    out = sample_ode(ConstantFlow(0.3), embeds_for(torch.zeros(2)), sigma_schedule(5, 3.0), noise=noise,
                     return_trajectory=False)
    torch.testing.assert_close(out.x0, noise - 0.3)
    assert out.xs is None and out.x0_hats is None


@pytest.mark.parametrize("sigma,sigma_next", [(1.0, 0.8), (0.5, 0.4), (0.05, 0.01)])
def test_sde_log_prob_is_gaussian(sigma, sigma_next):
    g = torch.Generator().manual_seed(1)
    x, v = torch.randn(4, *SHAPE, generator=g), torch.randn(4, *SHAPE, generator=g)
    step = sde_step(x, v, sigma, sigma_next, 0.7, sigma_max=0.9, generator=g)
    dt = sigma_next - sigma
    denom = 1 - (0.9 if sigma == 1.0 else sigma)
    std_t = 0.7 * math.sqrt(sigma / denom)
    mean = x * (1 + std_t**2 * dt / (2 * sigma)) + v * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
    std = std_t * math.sqrt(-dt)
    torch.testing.assert_close(step.mean, mean)
    torch.testing.assert_close(step.std.item(), std)
    expected = torch.distributions.Normal(mean, std).log_prob(step.x_next).mean(dim=(1, 2, 3))
    torch.testing.assert_close(step.log_prob, expected)
    # Scoring a stored transition gives the same log-prob and keeps x_next.
    again = sde_step(x, v, sigma, sigma_next, 0.7, sigma_max=0.9, x_next=step.x_next)
    assert torch.equal(again.x_next, step.x_next)
    torch.testing.assert_close(again.log_prob, step.log_prob)


def test_sde_step_log_prob_differentiable_in_v():
    x = torch.randn(2, *SHAPE)
    v = torch.randn(2, *SHAPE, requires_grad=True)
    x_next = torch.randn(2, *SHAPE)
    sde_step(x, v, 0.6, 0.5, x_next=x_next).log_prob.sum().backward()
    assert v.grad is not None and v.grad.abs().sum() > 0


def test_sde_final_step_is_deterministic_euler():
    x, v = torch.randn(2, *SHAPE), torch.randn(2, *SHAPE)
    step = sde_step(x, v, 0.001, 0.0, 0.7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(step.x_next, x - 0.001 * v)
    assert torch.equal(step.log_prob, torch.zeros(2)) and step.std.item() == 0.0
    with pytest.raises(ValueError):
        sde_step(x, v, 0.3, 0.5)


def test_sde_preserves_point_mass_marginals():
    """With the exact velocity, Flow-GRPO's SDE keeps x_sigma ~ N((1 - sigma) c, sigma^2) (up to discretisation)."""
    n, T = 4000, 40
    sigmas = sigma_schedule(T)
    c = torch.full((n,), 0.5)
    out = sample_sde(PointMassFlow(), embeds_for(c), sigmas, shape=(1, 1, 1), noise_level=0.7,
                     generator=torch.Generator().manual_seed(0))
    xs = out.xs.flatten(1)
    for j in (5, 20, 35):
        s = sigmas[j].item()
        assert abs(xs[j].mean().item() - (1 - s) * 0.5) < 0.05
        assert abs(xs[j].std().item() / s - 1) < 0.1
    torch.testing.assert_close(out.x0.flatten(), c)
    assert out.log_probs.shape == (T, n) and torch.isfinite(out.log_probs).all()
    assert torch.equal(out.log_probs[-1], torch.zeros(n))


@pytest.mark.parametrize("sampler", ["ode", "sde"])
def test_samplers_are_deterministic_under_a_seed(sampler):
    from recast.worlds.digits.model import tiny_world

    world = tiny_world(0)
    with torch.no_grad():
        embeds = world.encode_prompts(["a large red 7 at the top left", "a small blue 2 at the bottom right"])
    sigmas = sigma_schedule(4, 3.0)
    fn = sample_ode if sampler == "ode" else sample_sde
    runs = [fn(world.transformer, embeds, sigmas, shape=world.sample_shape, generator=torch.Generator().manual_seed(7))
            for _ in range(2)]
    assert torch.equal(runs[0].x0, runs[1].x0) and torch.equal(runs[0].xs, runs[1].xs)
    other = fn(world.transformer, embeds, sigmas, shape=world.sample_shape, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(runs[0].x0, other.x0)
    # x0_hat identity on a real transformer: x0_hat_j = x_j - sigma_j v(x_j, sigma_j).
    with torch.no_grad():
        for j in range(4):
            v = predict_velocity(world.transformer, runs[0].xs[j], sigmas[j], embeds)
            torch.testing.assert_close(runs[0].x0_hats[j], runs[0].xs[j] - sigmas[j] * v)
    if sampler == "sde":
        assert runs[0].log_probs.shape == (4, 2) and torch.equal(runs[0].log_probs, runs[1].log_probs)


def mean_reward(images, prompts):
    return images.mean(dim=(1, 2, 3))


def test_rollout_values_on_point_mass_equal_the_clean_reward():
    """Every continuation of the point-mass flow ends at c, so V(x_sigma) = r(c) at every grid index."""
    sigmas = sigma_schedule(6, 3.0)
    c = torch.tensor([-0.8, 0.0, 0.6])
    decode = lambda x: ((x + 1) / 2).clamp(0, 1)  # noqa: E731
    r_clean = mean_reward(decode(c[:, None, None, None].expand(3, *SHAPE)), [])
    x = torch.randn(3, *SHAPE)
    for j in (0, 3, 6):
        x_j = x if j < 6 else c[:, None, None, None].expand(3, *SHAPE)
        V = rollout_values(PointMassFlow(), embeds_for(c), x_j, j, sigmas, mean_reward, ["p"] * 3, decode,
                           num_rollouts=4, generator=torch.Generator().manual_seed(0))
        assert V.shape == (3,)
        torch.testing.assert_close(V, r_clean)
    D = rollout_discriminability(PointMassFlow(), embeds_for(c), c[:, None, None, None].expand(3, *SHAPE), sigmas,
                                 mean_reward, ["p"] * 3, decode, num_rollouts=2,
                                 generator=torch.Generator().manual_seed(0))
    expected = renyi_discriminability(r_clean)
    assert D.shape == (7,) and D[0] == 0
    torch.testing.assert_close(D[1:], torch.full((6,), expected, dtype=torch.float64))


def test_rollout_discriminability_scores_several_rewards_on_shared_continuations():
    sigmas = sigma_schedule(4)
    c = torch.tensor([-0.8, 0.0, 0.6, 0.2])
    decode = lambda x: ((x + 1) / 2).clamp(0, 1)  # noqa: E731
    two = lambda images, prompts: torch.stack([mean_reward(images, prompts), 1 - mean_reward(images, prompts)], -1)  # noqa: E731
    x0 = c[:, None, None, None].expand(4, *SHAPE)
    D = rollout_discriminability(PointMassFlow(), embeds_for(c), x0, sigmas, two, ["p"] * 4, decode,
                                 num_rollouts=2, generator=torch.Generator().manual_seed(0))
    r = mean_reward(decode(x0), [])
    assert D.shape == (2, 5) and (D[:, 0] == 0).all()
    torch.testing.assert_close(D[0, 1:], torch.full((4,), renyi_discriminability(r), dtype=torch.float64))
    torch.testing.assert_close(D[1, 1:], torch.full((4,), renyi_discriminability(1 - r), dtype=torch.float64))


def test_debiased_values_remove_monte_carlo_variance():
    """V_b ~ N(0.5, 0.01), rewards = V_b + N(0, 0.04) noise, M = 4: the raw means have variance 0.01 + 0.01."""
    from recast.informativeness.rollout import debiased_values

    g = torch.Generator().manual_seed(0)
    V = 0.5 + 0.1 * torch.randn(20000, generator=g)
    rewards = V + 0.2 * torch.randn(4, 20000, generator=g)
    raw, fixed = rewards.mean(0), debiased_values(rewards)
    assert abs(raw.var().item() - 0.02) < 0.001
    assert abs(fixed.var().item() - 0.01) < 0.001
    torch.testing.assert_close(fixed.mean(), raw.mean())
    pure_noise = 0.5 + 0.2 * torch.randn(4, 1000, generator=g)  # V constant: everything is noise
    assert debiased_values(pure_noise).std() < 0.05
    two = torch.stack([rewards, 2 * rewards], -1)
    torch.testing.assert_close(debiased_values(two)[:, 1], 2 * fixed)
