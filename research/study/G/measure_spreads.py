"""Stage G's world check, before any stage-G run: each reward's raw within-group spread on the base model, and its
share of the `pre` signal's within-group variance per step under stage F's equal-budget renderings table.

    python research/study/G/measure_spreads.py     # writes research/study/G/spreads.json (about a minute, 1 thread)

The base model's own groups as the `paper` preset draws them (8 samples per prompt, Euler ODE, 6 steps, shift 3), 32
train-split prompts, seed 0. Nothing here reads a stage-G outcome; the numbers decide how the amendment handles raw
reward scales under `pre` (research/study/preregistration.md, "Amendment: stage G").
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = ("compose", "timing", "quality")
PROMPTS, GROUP, SEED = 32, 8, 0


def main(target: Path | None = None) -> dict:
    from recast.archives import load_table
    from recast.config import resolve_world
    from recast.checks import variance_shares
    from recast.informativeness.probe import grid_sigmas
    from recast.sampling import sample_ode
    from recast.world import load_world, world_info
    from recast.worlds.digits.data import sample_prompts

    torch.set_num_threads(1)
    world = load_world(resolve_world("data/digit_base"))
    gen = torch.Generator().manual_seed(SEED)
    prompts = [p for p in sample_prompts(PROMPTS, split="train", generator=gen) for _ in range(GROUP)]
    sigmas = grid_sigmas(6, 3.0, None)
    out = sample_ode(world.transformer, world.encode_prompts(prompts), sigmas, shape=world.sample_shape,
                     generator=gen, return_trajectory=False)
    images = world.decode(out.x0).cpu()
    groups = np.arange(len(prompts)) // GROUP
    report = {"prompts": PROMPTS, "group": GROUP, "seed": SEED, "grid": sigmas.tolist(), "settings": {}}
    for setting in SETTINGS:
        names = list(world_info(resolve_world("data/digit_base")).reward_settings[setting])
        R = np.stack([world.reward(n, "cpu")(images, prompts).double().numpy() for n in names], axis=1)
        table = ROOT / "research/study/F/tables/renderings" / f"{setting}_equal.npz"
        TW = load_table(table).subset(names).TW if table.is_file() else np.ones((len(names), 6))
        sh = variance_shares(R, groups, TW, reward_names=names)
        flat = variance_shares(R, groups, np.ones_like(TW), reward_names=names)
        report["settings"][setting] = {
            "rewards": names, "raw_within_group_sd": dict(zip(names, np.round(sh.raw_sd, 4).tolist())),
            "table": str(table.relative_to(ROOT)) if table.is_file() else None,
            "share_static": dict(zip(names, np.round(flat.share[:, 0], 4).tolist())),
            "share_per_step": {n: np.round(sh.share[k], 4).tolist() for k, n in enumerate(names)},
            "static_correlation_per_step": np.round(sh.static_correlation, 4).tolist()}
    target = target or ROOT / "research/study/G/spreads.json"
    target.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    print(json.dumps(main()["settings"], indent=1))
