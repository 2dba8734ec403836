"""With one reward, which Credit switch reproduces which shipped loop (docs/credit.md, "One reward"), against the
formulas written out here from docs/method.md §0 and the anchors' stated normalisations, not this repo's helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recast.credit import Credit

T, G = 5, 6


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    r = rng.normal(size=4 * G) * np.repeat(rng.uniform(0.2, 3.0, 4), G) + np.repeat(rng.normal(size=4), G)
    return r, np.arange(4 * G) // G


def _prompt_mean(r, g):
    return np.array([r[g == i].mean() for i in g])


def test_reward_sum_is_diffusionnfts_and_flow_grpos_shipped_normalisation(batch):
    r, g = batch
    A = np.clip((r - _prompt_mean(r, g)) / (r.std() + 1e-4), -5, 5)  # prompt mean, global std (population) + 1e-4
    nft = Credit(["score"], T, method="reward_sum")
    nft.normalise(torch.tensor(r)[None], g)
    np.testing.assert_allclose(nft.signal_matrix().numpy(), np.repeat(np.clip(0.5 + A / 10, 0, 1)[:, None], T, 1),
                               rtol=0, atol=1e-12)
    grpo = Credit(["score"], T, method="reward_sum", signal="grpo")
    grpo.normalise(torch.tensor(r)[None], g)
    np.testing.assert_allclose(grpo.signal_matrix().numpy(), np.repeat(A[:, None], T, 1), rtol=0, atol=1e-12)


def test_the_papers_recipe_normalises_per_group_and_so_differs_from_the_shipped_loops(batch):
    from recast.archives import DensityProfile, table_from_profile

    r, g = batch
    std = np.array([r[g == i].std() for i in g])  # per prompt group, population, floored at 1e-6
    p = np.clip(0.5 + np.clip((r - _prompt_mean(r, g)) / np.maximum(std, 1e-6), -5, 5) / 10, 0, 1)
    ratios = np.random.default_rng(1).lognormal(size=(16, T))
    table = table_from_profile(DensityProfile(np.linspace(1, 0, T + 1), {"score": ratios}), [1.0])
    for credit in (Credit(["score"], T, [1.0], method="static"), Credit.from_table(table)):  # one reward: W = λ/T
        credit.normalise(torch.tensor(r)[None], g)
        np.testing.assert_allclose(credit.signal_matrix().numpy(), np.repeat(p[:, None], T, 1), rtol=0, atol=1e-12)
    shipped = Credit(["score"], T, method="reward_sum")
    shipped.normalise(torch.tensor(r)[None], g)
    assert np.abs(shipped.signal_matrix().numpy()[:, 0] - p).max() > 1e-2  # the group std is not the global one
