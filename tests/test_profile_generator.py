"""The density-ratio generator (`recast.informativeness.ratios`, `recast profile --proposal`) against a world whose
E[r | x_t] is known in closed form: Gaussian data, the exact velocity, and r(x_0) = x_0²."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from recast.archives import load_profile, load_table
from recast.informativeness.ratios import density_ratios
from recast.offline import ratio_divergence
from recast.sampling import PromptEmbeds, sigma_schedule

MU, S = 0.5, 0.8  # the model's data: x_0 ~ N(MU, S²)
MU_P, S_P = 1.3, 0.4  # the proposal's samples: x_0 ~ N(MU_P, S_P²), a "strong generator" with higher rewards


def _posterior(x, t):
    """Mean and variance of x_0 given x_t = (1 − t) x_0 + t ε under the model's Gaussian data."""
    prec = 1 / S**2 + (1 - t) ** 2 / t**2
    return (MU / S**2 + (1 - t) * x / t**2) / prec, 1 / prec


class ExactVelocity(torch.nn.Module):
    """v(x_t, t) = E[ε − x_0 | x_t] = (x_t − E[x_0 | x_t]) / t, the flow of the Gaussian data exactly."""

    def forward(self, hidden_states, timestep, encoder_hidden_states=None, pooled_projections=None, return_dict=False):
        t = (timestep / 1000).view(-1, *([1] * (hidden_states.ndim - 1))).to(hidden_states.dtype)
        m, _ = _posterior(hidden_states, t)
        return ((hidden_states - m) / t,)


class GaussianWorld:
    transformer = ExactVelocity()
    sample_shape = (1, 1, 1)
    reward_settings = {"square": ("square",)}

    def encode_prompts(self, prompts):
        return PromptEmbeds(torch.zeros(len(prompts), 1, 1, dtype=torch.float64),
                            torch.zeros(len(prompts), 1, dtype=torch.float64))

    def decode(self, x):
        return x

    def reward(self, name, device):
        return lambda images, prompts: images.flatten(1)[:, 0] ** 2


def _closed_form_D(sigmas, n=2_000_000, seed=1):
    """D_j = log E[ρ²] at each destination σ_{j+1}, ρ = E[x_0² | x_t] / E[x_0²], over the proposal and ε."""
    rng = np.random.default_rng(seed)
    x0 = rng.normal(MU_P, S_P, n)
    D = []
    for t in sigmas[1:]:
        if t == 0:
            rho = x0**2 / (MU**2 + S**2)
        else:
            m, v = _posterior((1 - t) * x0 + t * rng.normal(size=n), t)
            rho = (m**2 + v) / (MU**2 + S**2)
        D.append(math.log(np.mean(rho**2)))
    return np.array(D)


def test_the_generator_recovers_the_closed_form_divergence_of_a_known_world():
    sigmas = sigma_schedule(6, 3.0).double()
    world, N = GaussianWorld(), 3000
    gen = torch.Generator().manual_seed(0)
    proposals = (MU_P + S_P * torch.randn(N, 1, 1, 1, generator=gen, dtype=torch.float64))
    # 128 ancestral substeps per grid step: with 32 the chain's ends are under-dispersed enough (E[x_0²] 2 % low,
    # 16 % at 8) to move D by more than the tolerance; both sides share the sampler, the clean column does not
    prof = density_ratios(world, ["square"], ["p"] * N, proposals, sigmas=sigmas, num_continuations=8,
                          num_base=20000, substeps=128, seed=0, batch_size=32768)
    D, gains = ratio_divergence(prof.ratios["square"])
    want = _closed_form_D(sigmas.numpy())
    np.testing.assert_allclose(D, want, rtol=0.08, atol=0.03)
    assert want[-1] > want[1] + 0.5  # the check has teeth: D rises by far more than the tolerance
    assert not np.allclose(D[:-1], want[1:], rtol=0.08, atol=0.03)  # a column read one step off would fail
    assert prof.meta["base_mean"]["square"] == pytest.approx(MU**2 + S**2, rel=0.05)
    assert prof.meta["cost"]["reward_queries"] == 20000 + N * 8 * 5 + N  # base, continuations, the clean column
    undebiased = density_ratios(world, ["square"], ["p"] * N, proposals, sigmas=sigmas, num_continuations=2,
                                num_base=20000, substeps=128, seed=0, batch_size=32768, debias=False)
    D_raw, _ = ratio_divergence(undebiased.ratios["square"])
    assert (D_raw[:-1] > want[:-1]).mean() >= 0.8  # Monte-Carlo noise inflates every noisy column without debias


def test_a_negative_reward_is_refused_unless_an_offset_is_recorded():
    world = GaussianWorld()
    world.reward = lambda name, device: (lambda images, prompts: images.flatten(1)[:, 0] - 10.0)
    sig = sigma_schedule(2, 3.0).double()
    x = torch.ones(4, 1, 1, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"reward 'square' scored -.* pass --reward-offset square=C"):
        density_ratios(world, ["square"], ["p"] * 4, x, sigmas=sig, num_base=2, num_continuations=1, substeps=1)
    prof = density_ratios(world, ["square"], ["p"] * 4, x, sigmas=sig, num_base=2, num_continuations=1, substeps=1,
                          offsets={"square": 100.0})
    assert prof.meta["offsets"] == {"square": 100.0} and (prof.ratios["square"] >= 0).all()


def test_the_cli_writes_an_archive_a_table_follows_from(tmp_path, capsys):
    from recast.cli import main

    out = tmp_path / "p.npz"
    assert main(["profile", "--world", "tiny", "--proposal", "renderings", "--rewards", "color,sharpness",
                 "--num-prompts", "4", "--num-steps", "3", "--num-continuations", "2", "--num-base", "2",
                 "--substeps", "1", "--out", str(out)]) == 0
    assert "reward queries" in capsys.readouterr().out
    prof = load_profile(out)
    assert prof.reward_names == ("color", "sharpness") and prof.num_steps == 3
    meta = prof.meta
    assert (meta["proposal"], meta["num_continuations"], meta["num_base"], meta["seed"]) == ("renderings", 2, 2, 0)
    assert meta["cost"]["reward_queries"] > 0 and meta["cost"]["seconds"] >= 0
    assert main(["profile", "--world", "tiny", "--proposal", "renderings", "--rewards", "color", "--out",
                 str(out)]) == 2  # an existing archive is kept unless --overwrite
    assert "exists" in capsys.readouterr().err
    assert main(["weights", str(out), "--lam", "2,1", "--out", str(tmp_path / "t.npz")]) == 0
    report = json.loads(capsys.readouterr().out)
    table = load_table(tmp_path / "t.npz")
    assert report["reward_names"] == ["color", "sharpness"] and table.W.sum(1) == pytest.approx([2 / 3, 1 / 3], abs=1e-6)
    for argv, msg in [(["weights", str(out), "--lam", "1", "--out", str(tmp_path / "u.npz")], "1 budgets for 2"),
                      (["weights", str(out), "--lam", "1,1", "--rewards", "digit", "--out", str(tmp_path / "u.npz")],
                       "no ratios for rewards"),
                      (["profile", "--world", "tiny", "--proposal", "self", "--device", "bogus", "--out",
                        str(tmp_path / "v.npz")], "--device"),
                      (["profile", "--world", "tiny", "--proposal", "self", "--shift", "inf", "--out",
                        str(tmp_path / "v.npz")], "--shift"),
                      (["profile", "--world", "tiny", "--proposal", str(tmp_path / "nowhere"), "--out",
                        str(tmp_path / "v.npz")], "prompts.jsonl")]:
        assert main(argv) == 2, argv
        assert msg in capsys.readouterr().err


def test_a_folder_of_images_is_a_proposal(tmp_path):
    from PIL import Image

    from recast.cli import main

    folder = tmp_path / "gen"
    folder.mkdir()
    lines = []
    for i, prompt in enumerate(["a small red 3 at the top left", "a large blue 7 at the bottom right"]):
        Image.fromarray((np.random.default_rng(i).random((24, 24, 3)) * 255).astype(np.uint8)).save(folder / f"{i}.png")
        lines.append(json.dumps({"file": f"{i}.png", "prompt": prompt}))
    (folder / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "p.npz"
    assert main(["profile", "--world", "tiny", "--proposal", str(folder), "--rewards", "color", "--num-steps", "2",
                 "--num-continuations", "1", "--num-base", "2", "--substeps", "1", "--out", str(out)]) == 0
    prof = load_profile(out)
    assert prof.ratios["color"].shape[1] == 2 and prof.meta["proposal"] == str(folder)
    (folder / "prompts.jsonl").write_text('{"file": "../escape.png", "prompt": "x"}\n')
    assert main(["profile", "--world", "tiny", "--proposal", str(folder), "--rewards", "color", "--out",
                 str(tmp_path / "q.npz")]) == 2
